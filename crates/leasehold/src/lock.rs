//! [`Lock`]: a mutex on one key of a store.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{KeyInfo, Owner};
use crate::engine::{Engine, Granted};
use crate::error::Result;
use crate::guard::LeaseGuard;
use crate::key::Key;
use crate::metric::Kind;
use crate::options::ResolvedOptions;
use crate::store::Store;

/// A named mutex: at most one holder at a time across every process that
/// uses the same store. Made by [`Store::lock`] or [`Store::lock_with`].
///
/// A `Lock` is cheap to clone; clones share the in-process wake-ups of the
/// store they came from. It is a thin face over the acquisition engine that
/// semaphores and elections share (see the crate's `engine` module for the
/// rules of waiting).
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

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    fn grant(&self, granted: Granted) -> LeaseGuard {
        granted.guard
    }
}
