//! [`Lock`]: a mutex on one key of a store.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{KeyInfo, Owner};
use crate::engine::{Engine, WaitReason};
use crate::error::Result;
use crate::guard::LeaseGuard;
use crate::key::Key;
use crate::metric::Kind;
use crate::options::{ResolvedOptions, Wait};
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

    /// One attempt to take the lock, without waiting.
    ///
    /// # Errors
    /// [`Error::Held`](crate::Error::Held) with the holder's description if
    /// someone else holds the key; [`Error::Quarantined`](crate::Error::Quarantined)
    /// while the store's data is new; backend failures.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped while the request is in flight
    /// and the backend grants the lease anyway, it is released in the
    /// background at once.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let lock = store.lock("nightly-import")?;
    /// let guard = lock.try_acquire().await?;
    /// // A second attempt, even from this process, finds the key held.
    /// assert!(matches!(lock.try_acquire().await, Err(leasehold::Error::Held { .. })));
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self) -> Result<LeaseGuard> {
        Ok(self.engine.try_acquire().await?.guard)
    }

    /// Takes the lock, waiting as long as it takes for the holder to let go
    /// (see [`acquire_timeout`](Self::acquire_timeout) for how waiting
    /// works).
    ///
    /// # Errors
    /// Non-retryable backend failures (retryable ones are retried).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future never leaves a lease behind (a lease
    /// granted to a request in flight is released in the background), and
    /// gives up this task's place in the local queue.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let guard = store.lock("nightly-import")?.acquire().await?;
    /// println!("fencing token {}", guard.fencing_token());
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self) -> Result<LeaseGuard> {
        self.acquire_reporting(Wait::Forever, |_| {}).await
    }

    /// Takes the lock, waiting up to `timeout` for the holder to let go.
    ///
    /// While waiting, the backend is polled after a random pause between the
    /// poll bounds, and a release by a guard of this same process (same
    /// [`Store`]) wakes the first local waiter at once. Tasks of one process
    /// waiting on one key queue in FIFO order, and only the first polls the
    /// backend. So that a process with many waiting tasks does not keep a
    /// contended key for good, a local waiter taking over from a local
    /// release first leaves the key free for a moment when another process
    /// was seen holding it in the last 2 s, or once local handoffs have kept
    /// it here for 10 longest poll intervals (1 s by default): for 10 ms
    /// where the backend wakes other processes' waiters on a release
    /// (SQLite, PostgreSQL, Redis, etcd), else for one longest poll interval,
    /// in which every other process's waiter polls. A zero timeout is one
    /// attempt, as [`try_acquire`](Self::try_acquire) makes, that ends in
    /// [`Error::TimedOut`](crate::Error::TimedOut) if it does not get the
    /// key.
    ///
    /// # Errors
    /// [`Error::TimedOut`](crate::Error::TimedOut) when the wait runs out;
    /// non-retryable backend failures (retryable ones are retried while the
    /// wait lasts).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let lock = store.lock("nightly-import")?;
    /// let held = lock.acquire_timeout(Duration::from_secs(60)).await?;
    /// let waited = lock.acquire_timeout(Duration::from_millis(50)).await;
    /// assert!(matches!(waited, Err(leasehold::Error::TimedOut { .. })));
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<LeaseGuard> {
        self.acquire_reporting(Wait::Timeout(timeout), |_| {}).await
    }

    /// Takes the lock, waiting as `wait` says ([`Wait::Forever`], as
    /// [`acquire`](Self::acquire), or [`Wait::Timeout`], as
    /// [`acquire_timeout`](Self::acquire_timeout)), and calls `on_wait`
    /// with the reason every time an attempt does not get the lease: the
    /// key is held (with what the backend said about the holder), or the
    /// store's data is new and in quarantine (see
    /// [`Error::Quarantined`](crate::Error::Quarantined)). For status lines.
    ///
    /// # Errors
    /// As [`acquire_timeout`](Self::acquire_timeout).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// use leasehold::{Wait, WaitReason};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let lock = store.lock("nightly-import")?;
    /// let guard = lock
    ///     .acquire_reporting(Wait::Timeout(Duration::from_secs(60)), |reason| {
    ///         if let WaitReason::Held([holder, ..]) = reason {
    ///             eprintln!("waiting for {}", holder.owner.host);
    ///         }
    ///     })
    ///     .await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_reporting(
        &self,
        wait: impl Into<Wait>,
        mut on_wait: impl FnMut(WaitReason<'_>),
    ) -> Result<LeaseGuard> {
        Ok(self.engine.acquire(wait.into(), &mut on_wait).await?.guard)
    }
}
