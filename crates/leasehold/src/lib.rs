//! Distributed mutual exclusion on leases.
//!
//! Many instances of a program on many machines; for a given resource only
//! one may work at a time. leasehold gives them a named [`Lock`] kept in
//! storage they already run (the embedded SQLite store on one machine; Azure
//! Blob Storage, DynamoDB, PostgreSQL, MySQL, Redis, etcd, S3 and ZooKeeper through their own
//! crates). A holder's lease times out if it dies; a live holder's
//! [`LeaseGuard`] renews it in the background; a holder that can no longer
//! renew is told so *before* anyone else can take over; and every grant
//! carries a fencing token that only ever grows, so stale holders can be
//! rejected downstream.
//!
//! ```
//! use std::time::Duration;
//! use leasehold::{LockOptions, Store};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("leases.db");
//! // The embedded store; `sqlite:` alone uses the default file.
//! let store = Store::open(&format!("sqlite:{}", path.display()))?;
//! let lock = store.lock_with(
//!     "import-A",
//!     LockOptions::new()
//!         .ttl(Duration::from_secs(30))
//!         .owner_label("vm-1")
//!         .data("nightly import"),
//! )?;
//!
//! // Wait up to a minute for whoever holds it.
//! let guard = lock.acquire_timeout(Duration::from_secs(60)).await?;
//! let token = guard.fencing_token(); // hand this to the protected resource
//!
//! tokio::select! {
//!     _ = async { /* the critical section */ } => {}
//!     reason = guard.lost() => {
//!         // Stop: someone else may get the lease soon.
//!         eprintln!("lost the lease: {reason}");
//!     }
//! }
//! guard.release().await?;
//!
//! // Anyone can see who holds a key.
//! let info = store.inspect("import-A").await?;
//! assert!(info.holder.is_none());
//! assert_eq!(info.fencing_token, token);
//!
//! // Last, before the program exits: releases still in the background (of
//! // guards dropped rather than released) end first.
//! store.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Exiting
//! A guard dropped without [`release`](LeaseGuard::release) is released in
//! the background, on the runtime that granted it. Returning from `main`
//! (or shutting the runtime down) right after cuts that release short, and
//! the lease stays held until its TTL runs out: tokio drops a runtime's
//! tasks when it shuts down, and nothing in leasehold can run then. So a
//! program awaits [`Store::close`] last, after its guards are released or
//! dropped ([`finish_background`] is the same wait, without closing a
//! store).
//!
//! # The guarantee, and the two times that bound it
//! *The holder's work is stopped before anyone else can take over, and every
//! grant's fencing token is greater than every earlier one*: on every store,
//! under crashes, pauses, partitions, breaks and the loss of the store's
//! data. Two times bound how long that takes:
//! * the lease's **TTL** (up to the store's max TTL, at most 24 h) bounds
//!   how long a *dead* holder keeps the key from others;
//! * the **confirmation window** W ([`CONFIRMATION_WINDOW`], 60 s, the same
//!   for every store and process) bounds how long a *live* holder trusts a
//!   lease the store has not confirmed: its guard renews at least every W/3
//!   and is lost (`leasehold run` stops its command) once W, less the
//!   safety margin, has passed since the send time of its last confirmed
//!   renewal, whatever its TTL. A store that lost its data and was
//!   re-created grants nothing for W (the quarantine), so holders of the
//!   lost data have stopped by then, whatever max TTL they or the
//!   re-creator opened the store with.
//!
//! See [store epochs](backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)
//! for the argument and the tests that check it.
//!
//! # Pieces
//! * [`Store`]: a [`Backend`](backend::Backend) plus in-process state; opened from a URL
//!   ([`Store::open`]) or built from a backend.
//! * [`Lock`], whose waits are [`try_acquire`](Lock::try_acquire),
//!   [`acquire`](Lock::acquire), [`acquire_timeout`](Lock::acquire_timeout)
//!   and [`acquire_reporting`](Lock::acquire_reporting), the same four on
//!   [`Semaphore`] (waiting with jitter, woken at once by
//!   releases in the same process); [`Lock::run`] takes the lock, runs a
//!   future under it (cancelled if the lease is lost) and releases it.
//! * [`LeaseGuard`]: renewal, [`fencing_token`](LeaseGuard::fencing_token),
//!   [`lost`](LeaseGuard::lost) / [`is_lost`](LeaseGuard::is_lost),
//!   [`release`](LeaseGuard::release).
//! * [`Semaphore`]: at most N holders of a key at once
//!   ([`Store::semaphore`]); each [`SemaphorePermit`] is a lease guard on
//!   one of N slot keys.
//! * [`RwLock`]: a reader-writer lock on a key ([`Store::rw_lock`]):
//!   readers share ([`read`](RwLock::read) and its kin, giving a
//!   [`ReadGuard`]), a writer ([`write`](RwLock::write), giving a
//!   [`WriteGuard`]) excludes everyone, with writer preference; both guards
//!   deref to a [`LeaseGuard`].
//! * [`MultiLock`]: several keys held all or none ([`Store::lock_all`];
//!   mixed with either side of reader-writer locks by [`MultiLockBuilder`]),
//!   taken in byte order so that two holders never deadlock; its
//!   [`MultiGuard`] has each key's fencing token and is lost when any key
//!   is.
//! * [`Election`]: leader election on a key ([`Store::election`]):
//!   [`campaign`](Election::campaign) for a [`Leadership`],
//!   [`leader`](Election::leader) to see who leads and what they published,
//!   [`observe`](Election::observe) to follow changes.
//! * Run records: [`LeaseGuard::release_with`] records how a job's run
//!   ended ([`RunReport`]); [`Store::last_success_within`] says whether it
//!   succeeded less than a period ago (`leasehold run --once-per`).
//! * [`backend`]: what a store's author needs, apart from what a user needs
//!   (which stands at the crate root): the [`Backend`](backend::Backend)
//!   trait, the few primitives a store implements, with its contract; store
//!   epochs; clocks; URL parameters; the wake-up listener.
//! * [`Error`]: one error enum to match on (its variants: held by
//!   another, with who; timed out; lease lost; quarantined; invalid input;
//!   not supported; no store; store closed; backend failure, retryable or
//!   not).
//! * [`metric`]: the metrics leasehold records through the `metrics` facade.
//!
//! # Holder data
//! Every lease carries its holder's [`Owner`] (host, pid, optional label of
//! at most [`MAX_LABEL_LEN`] bytes) and optional user data of at most
//! [`MAX_DATA_LEN`] bytes (any UTF-8), set through [`LockOptions`] for
//! locks, semaphore permits and leaderships alike. Anyone can read them back
//! with [`Store::inspect`], [`Store::list`], [`Semaphore::inspect`] and
//! [`Election::leader`], and an [`Error::Held`] carries them. Longer data or
//! labels are refused when the lock, semaphore or election is made, with
//! [`Error::InvalidInput`] (what: `"data"` or `"owner label"`).
//!
//! # Metrics
//! leasehold counts acquire attempts and outcomes, wait and hold times,
//! renewals and their failures, and losses, labelled by backend and by kind
//! (lock, semaphore, election, read, write), through the [`metrics`] facade:
//! install any recorder to collect them; none is installed for you. The
//! names are listed in [`metric`].

#![warn(missing_docs)]

pub mod backend;
#[cfg(target_os = "linux")]
mod boot_timer;
mod clock;
mod detach;
mod election;
mod engine;
mod epoch;
mod error;
mod guard;
mod key;
mod listener;
mod local;
mod lock;
pub mod memory;
pub mod metric;
mod multi;
mod options;
mod renewal;
mod runs;
mod rwlock;
mod semaphore;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod store;
mod waits;

// What a user needs stands at the crate root, as `tokio::sync` gathers its
// primitives: the store, the lock types and their guards, options, errors,
// and what inspecting a store returns. What a backend author needs (the
// `Backend` trait, its requests and answers, store epochs, clocks, URL
// parameters, the wake-up listener) is in [`backend`].
pub use backend::{Creation, HolderInfo, KeyInfo, Owner, CONFIRMATION_WINDOW};
pub use detach::finish_background;
pub use election::{
    Election, LeaderChange, LeaderObserver, LeaderStream, Leadership, OBSERVER_AFTER_WAKE,
    OBSERVER_POLLS_AFTER_WAKE,
};
pub use engine::WaitReason;
pub use error::{BoxError, Error, LossReason, Result};
pub use guard::{HeldLease, LeaseGuard};
pub use key::{Key, MAX_KEY_LEN};
pub use lock::Lock;
pub use multi::{MultiGuard, MultiLock, MultiLockBuilder, MAX_MULTI_KEYS};
pub use options::{
    LockOptions, LossPolicy, Wait, DEFAULT_POLL_CAP, DEFAULT_POLL_MAX, DEFAULT_POLL_MIN,
    DEFAULT_TTL, MAX_DATA_LEN, MAX_LABEL_LEN, MIN_SAFETY_MARGIN,
};
pub use runs::{RunOutcome, RunRecord, RunReport};
pub use rwlock::{
    ReadGuard, RwLock, RwLockInfo, WriteGuard, DEFAULT_MAX_READERS, MAX_RW_LOCK_KEY_LEN,
};
pub use semaphore::{
    Semaphore, SemaphorePermit, SlotInfo, MAX_SEMAPHORE_KEY_LEN, MAX_SEMAPHORE_LIMIT,
};
pub use store::{Store, StoreBuilder};

/// The README's example, compiled and run as a doctest. The crate's own
/// README (inside the crate, so that the packaged crate builds its doctests
/// too); `tests/readme.rs` checks that the project README's example is the
/// same.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
