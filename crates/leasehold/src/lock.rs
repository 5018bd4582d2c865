//! [`Lock`]: a mutex on one key of a store.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{KeyInfo, Owner};
use crate::engine::{Engine, Granted};
use crate::error::{Error, Result};
use crate::guard::{HeldLease, LeaseGuard};
use crate::key::Key;
use crate::metric::Kind;
use crate::options::ResolvedOptions;
use crate::store::Store;

/// A named mutex: at most one holder at a time across every process that
/// uses the same store. Made by [`Store::lock`] or [`Store::lock_with`].
///
/// A `Lock` is cheap to clone; clones share the in-process wake-ups of the
/// store they came from. It is a thin face over the acquisition engine that
/// semaphores and elections share: the rules of waiting are written once,
/// in the docs of [`acquire_timeout`](Self::acquire_timeout).
#[derive(Debug, Clone)]
pub struct Lock {
    engine: Arc<Engine>,
}

impl Lock {
    /// A lock on `key`, counted in metrics as `kind` (an election is a lock
    /// whose holder is the leader).
    pub(crate) fn new(store: Store, key: Key, opts: ResolvedOptions, kind: Kind) -> Self {
        Lock {
            engine: Arc::new(Engine::new(store, key.clone(), vec![key], opts, kind)),
        }
    }

    /// The key this lock is on.
    pub fn key(&self) -> &Key {
        self.engine.name()
    }

    /// The owner identity stored with this lock's leases.
    pub fn owner(&self) -> &Owner {
        self.engine.owner()
    }

    /// The lease TTL.
    pub fn ttl(&self) -> Duration {
        self.engine.ttl()
    }

    /// What the store holds for this key now.
    ///
    /// # Errors
    /// Backend failures.
    pub async fn inspect(&self) -> Result<KeyInfo> {
        self.engine.store().backend().inspect(self.key()).await
    }

    crate::waits::waits! {
        guard: LeaseGuard,
        noun: "the lock",
        held: "with the holder's description if someone else holds the key",
        make: "store.lock(\"nightly-import\")?",
        end: release,
        names: [try_acquire, acquire, acquire_timeout, acquire_reporting],
    }

    /// Takes the lock (waiting as `wait` says: [`Wait::Forever`](crate::Wait::Forever)
    /// or a timeout, as a `Duration`), runs the future `work` makes under
    /// it, and releases the lock when the future completes; if the lease is
    /// lost first, the future is dropped at once (at its next `.await`:
    /// it is cancelled, as `tokio::select!` cancels a branch) and the lock
    /// is let go. `work` gets a [`HeldLease`]: the fencing token to hand to
    /// what it writes to, and the loss signal for work it passes on (a
    /// spawned task is not cancelled with the future: give it
    /// [`lost_token`](HeldLease::lost_token)).
    ///
    /// The future is never polled once the lease is known to be lost, but
    /// a loss is known only when the renewal task or the clock says so:
    /// code between two `.await`s runs to the next one, and a resource the
    /// work writes to should check the fencing token.
    ///
    /// # Errors
    /// As [`acquire_reporting`](Self::acquire_reporting) while taking the
    /// lock (the work does not run); [`Error::LeaseLost`] if the lease was
    /// lost while the work ran (the work was cancelled; its output is
    /// gone); the release's error if the release failed after the work
    /// completed (the work's output is dropped: [`Error::LeaseLost`] then
    /// means the lease was lost just before the end, and the work may have
    /// overlapped another holder).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the work, and the lease (if
    /// granted) is released in the background, as when a guard is
    /// dropped.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let lock = store.lock("nightly-import")?;
    /// let rows = lock
    ///     .run(Duration::from_secs(60), |held| async move {
    ///         // The import, writing with `held.fencing_token()`.
    ///         println!("importing with token {}", held.fencing_token());
    ///         42
    ///     })
    ///     .await?;
    /// assert_eq!(rows, 42);
    /// store.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run<T, F, Fut>(&self, wait: impl Into<crate::Wait>, work: F) -> Result<T>
    where
        F: FnOnce(HeldLease) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire_reporting(wait, |_| {}).await?;
        let held = guard.held();
        let work = work(held.clone());
        tokio::select! {
            biased;
            reason = held.lost() => {
                // Let go: the release finds the lease lost and says so.
                let released = guard.release().await;
                Err(match released {
                    Err(lost @ Error::LeaseLost { .. }) => lost,
                    _ => Error::LeaseLost {
                        key: self.key().to_string(),
                        reason,
                    },
                })
            }
            out = work => {
                guard.release().await?;
                Ok(out)
            }
        }
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    fn grant(&self, granted: Granted) -> LeaseGuard {
        granted.guard
    }
}
