//! The four waits every lock type has (one attempt, as long as it takes, up
//! to a timeout, reporting why it waits), written once for [`Lock`],
//! [`Semaphore`] and [`Election`], with their docs: a type names its
//! methods, its guard, and how a grant of its engine becomes that guard.
//!
//! [`Lock`]: crate::Lock
//! [`Semaphore`]: crate::Semaphore
//! [`Election`]: crate::Election

/// Expands, inside `impl $type`, to the four waits. The type has a method
/// `fn engine(&self) -> &Engine` and one `fn grant(&self, Granted) -> $guard`
/// (or the two named by `via: [engine, grant]`, for a type with two
/// engines, as [`RwLock`](crate::RwLock) has).
///
/// - `$noun`: what is taken, for the docs ("the lock", "a permit",
///   "leadership");
/// - `$make`: an expression on `store` that makes one of the type, in the
///   examples;
/// - `$end`: the guard's method that gives it back, in the examples;
/// - `$held`: what `Error::Held` says, for the docs;
/// - `again`: the methods (one attempt, with a timeout) that find it taken
///   in the examples, and what the first example says of it.
macro_rules! waits {
    (
        guard: $guard:ty,
        noun: $noun:literal,
        held: $held:literal,
        make: $make:literal,
        end: $end:ident,
        names: [$try_:ident, $forever:ident, $timeout:ident, $reporting:ident] $(,)?
    ) => {
        $crate::waits::waits! {
            guard: $guard,
            noun: $noun,
            held: $held,
            make: $make,
            end: $end,
            names: [$try_, $forever, $timeout, $reporting],
            via: [engine, grant],
            again: [$try_, $timeout, "Another attempt, even from this process, finds it taken."],
        }
    };
    (
        guard: $guard:ty,
        noun: $noun:literal,
        held: $held:literal,
        make: $make:literal,
        end: $end:ident,
        names: [$try_:ident, $forever:ident, $timeout:ident, $reporting:ident],
        via: [$engine:ident, $grant:ident],
        again: [$again:ident, $again_timeout:ident, $again_says:literal] $(,)?
    ) => {
        #[doc = concat!("Takes ", $noun, " if it is free now, with one attempt, without waiting.")]
        ///
        /// # Errors
        #[doc = concat!("[`Error::Held`](crate::Error::Held) ", $held, ";")]
        /// [`Error::Quarantined`](crate::Error::Quarantined) while the
        /// store's data is new; backend failures.
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
        #[doc = concat!("let x = ", $make, ";")]
        #[doc = concat!("let held = x.", stringify!($try_), "().await?;")]
        #[doc = concat!("// ", $again_says)]
        #[doc = concat!("let again = x.", stringify!($again), "().await;")]
        /// assert!(matches!(again, Err(leasehold::Error::Held { .. })));
        #[doc = concat!("held.", stringify!($end), "().await?;")]
        /// # Ok(())
        /// # }
        /// ```
        pub async fn $try_(&self) -> Result<$guard> {
            Ok(self.$grant(self.$engine().try_acquire().await?))
        }

        #[doc = concat!("Takes ", $noun, ", waiting as long as it takes (see")]
        #[doc = concat!("[`", stringify!($timeout), "`](Self::", stringify!($timeout), ") for how waiting works).")]
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
        #[doc = concat!("let held = ", $make, ".", stringify!($forever), "().await?;")]
        /// println!("fencing token {}", held.fencing_token());
        #[doc = concat!("held.", stringify!($end), "().await?;")]
        /// # Ok(())
        /// # }
        /// ```
        pub async fn $forever(&self) -> Result<$guard> {
            self.$reporting($crate::Wait::Forever, |_| {}).await
        }

        #[doc = concat!("Takes ", $noun, ", waiting up to `timeout` for it to come free.")]
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
        #[doc = concat!("timeout is one attempt, as [`", stringify!($try_), "`](Self::", stringify!($try_), ") makes,")]
        /// that ends in [`Error::TimedOut`](crate::Error::TimedOut) if it
        /// gets nothing.
        ///
        /// # Errors
        /// [`Error::TimedOut`](crate::Error::TimedOut) when the wait runs
        /// out; non-retryable backend failures (retryable ones are retried
        /// while the wait lasts).
        ///
        /// # Cancel safety
        #[doc = concat!("As [`", stringify!($forever), "`](Self::", stringify!($forever), ").")]
        ///
        /// # Examples
        /// ```
        /// # use std::time::Duration;
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> leasehold::Result<()> {
        /// # let dir = tempfile::tempdir().unwrap();
        /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
        #[doc = concat!("let x = ", $make, ";")]
        #[doc = concat!("let held = x.", stringify!($timeout), "(Duration::from_secs(60)).await?;")]
        #[doc = concat!("let waited = x.", stringify!($again_timeout), "(Duration::from_millis(50)).await;")]
        /// assert!(matches!(waited, Err(leasehold::Error::TimedOut { .. })));
        #[doc = concat!("held.", stringify!($end), "().await?;")]
        /// # Ok(())
        /// # }
        /// ```
        pub async fn $timeout(&self, timeout: std::time::Duration) -> Result<$guard> {
            self.$reporting($crate::Wait::Timeout(timeout), |_| {}).await
        }

        #[doc = concat!("Takes ", $noun, ", waiting as `wait` says ([`Wait::Forever`](crate::Wait::Forever), as")]
        #[doc = concat!("[`", stringify!($forever), "`](Self::", stringify!($forever), "), or [`Wait::Timeout`](crate::Wait::Timeout), as")]
        #[doc = concat!("[`", stringify!($timeout), "`](Self::", stringify!($timeout), ")), and calls `on_wait`")]
        /// with the reason every time an attempt gets nothing: it is held
        /// ([`WaitReason::Held`](crate::WaitReason::Held), with the holders
        /// the backend described), or the store's data is new and in
        /// quarantine (see [`Error::Quarantined`](crate::Error::Quarantined)).
        /// For status lines.
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($timeout), "`](Self::", stringify!($timeout), ").")]
        ///
        /// # Cancel safety
        #[doc = concat!("As [`", stringify!($forever), "`](Self::", stringify!($forever), ").")]
        ///
        /// # Examples
        /// ```
        /// use leasehold::{Wait, WaitReason};
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> leasehold::Result<()> {
        /// # let dir = tempfile::tempdir().unwrap();
        /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
        #[doc = concat!("let held = ", $make)]
        #[doc = concat!("    .", stringify!($reporting), "(Wait::Forever, |reason| {")]
        ///         if let WaitReason::Held([holder, ..]) = reason {
        ///             eprintln!("waiting for {}", holder.owner.host);
        ///         }
        ///     })
        ///     .await?;
        #[doc = concat!("held.", stringify!($end), "().await?;")]
        /// # Ok(())
        /// # }
        /// ```
        pub async fn $reporting(
            &self,
            wait: impl Into<$crate::Wait>,
            mut on_wait: impl FnMut($crate::WaitReason<'_>),
        ) -> Result<$guard> {
            Ok(self.$grant(self.$engine().acquire(wait.into(), &mut on_wait).await?))
        }
    };
}

pub(crate) use waits;
