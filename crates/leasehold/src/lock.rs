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
use crate::waits::Waits;

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

    /// Takes the lock if it is free now, with one attempt, without waiting.
    ///
    /// # Errors
    /// [`Error::Held`](crate::Error::Held) with the holder's description if
    /// someone else holds the key;
    /// [`Error::Quarantined`](crate::Error::Quarantined) while the store's data
    /// is new; backend failures.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped while a request is in
    /// flight and the backend grants the lease anyway, it is released
    /// in the background at once.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let x = store.lock("nightly-import")?;
    /// let held = x.try_acquire().await?;
    /// // Another attempt, even from this process, finds it taken.
    /// let again = x.try_acquire().await;
    /// assert!(matches!(again, Err(leasehold::Error::Held { .. })));
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self) -> Result<LeaseGuard> {
        self.waits().once().await
    }

    /// Takes the lock, waiting as long as it takes (see
    /// [`acquire_timeout`](Self::acquire_timeout) for how waiting works).
    ///
    /// # Errors
    /// Non-retryable backend failures (retryable ones are retried).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future never leaves a lease behind (a
    /// lease granted to a request in flight is released in the
    /// background), and gives up this task's place in the local queue.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let held = store.lock("nightly-import")?.acquire().await?;
    /// println!("fencing token {}", held.fencing_token());
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self) -> Result<LeaseGuard> {
        self.waits().forever().await
    }

    /// Takes the lock, waiting up to `timeout` for it to come free.
    ///
    /// While waiting, the backend is polled after a random pause
    /// between the poll bounds, and a release by a guard of this same
    /// process (same [`Store`](crate::Store)) wakes the first local
    /// waiter at once. Tasks of one process waiting on one key queue in
    /// FIFO order, and only the first polls the backend. So that a
    /// process with many waiting tasks does not keep a contended key
    /// for good, a local waiter taking over from a local release first
    /// leaves the key free for a moment when another process was seen
    /// holding it in the last 2 s, or once local handoffs have kept it
    /// here for 10 longest poll intervals (1 s by default): for 10 ms
    /// where the backend wakes other processes' waiters on a release
    /// (SQLite, PostgreSQL, Redis, etcd), else for one longest poll
    /// interval, in which every other process's waiter polls. A zero
    /// timeout is one attempt, as [`try_acquire`](Self::try_acquire) makes,
    /// that ends in [`Error::TimedOut`](crate::Error::TimedOut) if it
    /// gets nothing.
    ///
    /// # Errors
    /// [`Error::TimedOut`](crate::Error::TimedOut) when the wait runs
    /// out; non-retryable backend failures (retryable ones are retried
    /// while the wait lasts).
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
    /// let x = store.lock("nightly-import")?;
    /// let held = x.acquire_timeout(Duration::from_secs(60)).await?;
    /// let waited = x.acquire_timeout(Duration::from_millis(50)).await;
    /// assert!(matches!(waited, Err(leasehold::Error::TimedOut { .. })));
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<LeaseGuard> {
        self.waits().timeout(timeout).await
    }

    /// Takes the lock, waiting as `wait` says
    /// ([`Wait::Forever`](crate::Wait::Forever), as [`acquire`](Self::acquire),
    /// or [`Wait::Timeout`](crate::Wait::Timeout), as
    /// [`acquire_timeout`](Self::acquire_timeout)), and calls `on_wait` with
    /// the reason every time an attempt gets nothing: it is held
    /// ([`WaitReason::Held`](crate::WaitReason::Held), with the holders the
    /// backend described), or the store's data is new and in quarantine (see
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
    /// use leasehold::{Wait, WaitReason};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let held = store.lock("nightly-import")?
    ///     .acquire_reporting(Wait::Forever, |reason| {
    ///         if let WaitReason::Held([holder, ..]) = reason {
    ///             eprintln!("waiting for {}", holder.owner.host);
    ///         }
    ///     })
    ///     .await?;
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_reporting(
        &self,
        wait: impl Into<crate::Wait>,
        on_wait: impl FnMut(crate::WaitReason<'_>),
    ) -> Result<LeaseGuard> {
        self.waits().reporting(wait.into(), on_wait).await
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

    /// This lock's engine, shared (a key of a [`MultiLock`](crate::MultiLock)).
    pub(crate) fn shared_engine(&self) -> Arc<Engine> {
        self.engine.clone()
    }

    /// This lock's waits: a grant is the lease's guard.
    fn waits(&self) -> Waits<'_, impl FnOnce(Granted) -> LeaseGuard> {
        Waits::new(&self.engine, |granted: Granted| granted.guard)
    }
}
