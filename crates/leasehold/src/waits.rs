//! The four waits every lock type has (one attempt, as long as it takes, up
//! to a timeout, reporting why it waits), written once on [`Waits`]:
//! [`Lock`], [`Semaphore`], [`RwLock`] and [`Election`] each write out
//! their own four methods, with their own names, docs and examples, as
//! one-line calls to it.
//!
//! [`Lock`]: crate::Lock
//! [`Semaphore`]: crate::Semaphore
//! [`RwLock`]: crate::RwLock
//! [`Election`]: crate::Election

use std::time::Duration;

use crate::engine::{Engine, Granted};
use crate::{Result, Wait, WaitReason};

/// A lock type's engine and what a grant of it becomes (the type's guard,
/// made by `grant`): the waits of one call.
pub(crate) struct Waits<'a, F> {
    engine: &'a Engine,
    grant: F,
}

impl<'a, G, F: FnOnce(Granted) -> G> Waits<'a, F> {
    /// The waits on `engine`, whose grant `grant` turns into a guard.
    pub(crate) fn new(engine: &'a Engine, grant: F) -> Self {
        Waits { engine, grant }
    }

    /// One attempt, without waiting (a lock's `try_acquire`).
    pub(crate) async fn once(self) -> Result<G> {
        Ok((self.grant)(self.engine.try_acquire().await?))
    }

    /// Waits as long as it takes (a lock's `acquire`).
    pub(crate) async fn forever(self) -> Result<G> {
        self.reporting(Wait::Forever, |_| {}).await
    }

    /// Waits up to `timeout` (a lock's `acquire_timeout`).
    pub(crate) async fn timeout(self, timeout: Duration) -> Result<G> {
        self.reporting(Wait::Timeout(timeout), |_| {}).await
    }

    /// Waits as `wait` says, calling `on_wait` with the reason every time
    /// an attempt gets nothing (a lock's `acquire_reporting`).
    pub(crate) async fn reporting(
        self,
        wait: Wait,
        mut on_wait: impl FnMut(WaitReason<'_>),
    ) -> Result<G> {
        Ok((self.grant)(self.engine.acquire(wait, &mut on_wait).await?))
    }
}
