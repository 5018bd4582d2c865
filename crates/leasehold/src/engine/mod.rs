//! The acquisition engine: the one wait loop under [`Lock`](crate::Lock),
//! [`Semaphore`](crate::Semaphore), [`Election`](crate::Election) and both
//! sides of [`RwLock`](crate::RwLock).
//!
//! An [`Engine`] takes a lease on one of its *slots*: a lock or an election
//! has one slot (its key), a semaphore of limit N has N (its slot keys).
//! Each public type is a thin face that says what its grant means; the
//! rules below are written here once:
//!
//! * **Attempts.** One round tries every slot once, in random order (so that
//!   N processes do not all start on slot 0), skipping slots this process
//!   already holds. Each attempt runs in the caller's task; if the caller
//!   is dropped while a request is in flight, the attempt finishes in a task
//!   of its own and, if the store granted it anyway, releases the lease
//!   (cancel safety, see [`Detachable`]).
//! * **Store epochs.** An attempt asks for the epoch this store has cleared
//!   and learns a new one first if need be; nothing is granted in an epoch
//!   still in quarantine ([`Error::Quarantined`]).
//! * **Late grants.** A grant that arrives after its own safety deadline
//!   (counted from when its request, or the first ambiguous one with the same
//!   lease id, was sent) is never returned: it is released in the background,
//!   and a waiting caller tries again with a new lease id.
//! * **Ambiguous failures.** A retryable failure may have been granted
//!   without our hearing: the slot keeps its lease id, so the next attempt
//!   finds it (the store renews its own lease to the same id), and if the
//!   wait ends first, the id is released in the background, and released
//!   again at doubling gaps for a minute ([`LATE_LANDING`](late::LATE_LANDING)): the request
//!   may reach the store after that first release (held in the network; a
//!   statement PostgreSQL still runs after its client went away), and would
//!   otherwise hold the key for nobody until its TTL ran out. An answer of
//!   "held" does not end this (the earlier request may land later). Test:
//!   the conformance suite's
//!   `a_request_that_lands_after_its_caller_gave_up_is_released` (a
//!   request delayed past its caller's first release, on every store).
//! * **Waiting.** Tasks of one process waiting on the same lock or
//!   semaphore queue in FIFO order on a local gate; only the first polls the
//!   store, after a random pause between the poll bounds (a backoff after
//!   failures), and a release by a guard of the same [`Store`] wakes it at
//!   once. While its rounds keep finding the same holders for longer than
//!   [`QUICK_FOR`](waiter::QUICK_FOR), the pause doubles up to the poll
//!   cap ([`LockOptions::poll_cap`](crate::LockOptions::poll_cap)), and a
//!   round that finds other holders starts the quick polls again: a long
//!   wait costs a request every second or two, not thirteen a second (what
//!   a pay-per-request store bills), and a key that changes hands often is
//!   still polled quickly. A backed-off pause never runs past the moment
//!   the store said the first holder's lease ends, so a dead holder's key
//!   is still taken as soon as its lease runs out. From its first round that finds the key held, the waiter also
//!   watches for releases by other processes where the backend can tell
//!   ([`Backend::watch_release`]), and asks once more at once (a release
//!   before the watch was registered is not missed): an uncontended
//!   acquisition never starts a backend's watcher, which would then hear
//!   every release of this process too. The wait ends at its deadline, even
//!   inside an attempt, so SDK retries cannot stretch it, and nothing is
//!   sent once it has passed: tasks queued until the same deadline are let
//!   through one by one as each gives up, and cost the store nothing then.
//! * **Fairness.** A local waiter about to take over from a local release
//!   first leaves the key free for a moment if the store said, within the
//!   last [`CONTENDED_FOR`](wait::CONTENDED_FOR), that another process held it (so it may be
//!   waiting too): for [`GIVE_WAY_WATCHED`](wait::GIVE_WAY_WATCHED) where the backend wakes other
//!   processes' waiters on a release, else for one longest poll interval,
//!   in which every other process's waiter polls. It also gives way once
//!   local handoffs have kept the key for [`PROBE_POLLS`](wait::PROBE_POLLS) longest poll
//!   intervals, since a process holding the key all along never sees the
//!   others waiting. So passes go round the processes that want the key; a
//!   key only one process uses waits a moment once every few polls. On a
//!   backend that wakes no one, a waiter elsewhere that has backed off
//!   (its holders unchanged for 2 s: long holds) polls less often than
//!   that moment lasts, and may miss it: passes then go round less
//!   evenly. A lower poll cap trades requests for that evenness.
//! * **Gates.** An engine may have a [`Gate`]: a read of other keys that a
//!   grant must pass before it is handed out (a reader-writer lock's
//!   sides; the `rwlock` module says why that is safe). It is checked right
//!   after the grant, inside the same rounds: a reader that fails it gives
//!   its slot back and waits as if its key were held, watching the writer
//!   key; a writer that fails it keeps its grant across rounds (renewed as
//!   any guard, released if the wait ends or its future is dropped) and
//!   waits on the reader slots' releases. Engines without a gate (locks,
//!   semaphores, elections) send exactly what they sent before.
//! * **How a wait ends without a lease:** with the last store failure if the
//!   store failed since it last answered (an unreachable store is not a
//!   holder), or a failure saying it never answered, else
//!   [`Error::TimedOut`].

mod batch;
mod gate;
mod late;
mod outcome;
mod round;
mod wait;
mod waiter;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;
use tracing::Instrument;

use crate::backend::{
    epoch_token_base, AcquireOutcome, AcquireRequest, Backend, HolderInfo, Lease, LeaseId, Owner,
};
use crate::clock::SharedClock;
use crate::detach::{spawn_background, Detachable};
use crate::epoch::Clearance;
use crate::error::{Error, Result};
use crate::guard::{GuardParts, LeaseGuard};
use crate::key::Key;
use crate::local::LocalKey;
use crate::metric::{Kind, Labels};
use crate::options::{ResolvedOptions, Wait};
use crate::semaphore::{numbered_slots, SlotInfo};
use crate::store::Store;

pub(crate) use batch::{take_all, Batch};
pub(crate) use gate::Gate;
use gate::Gated;
use late::{chase_late_landing, PendingLease};
use outcome::WaitOutcome;
use round::{Missed, Round};

/// Why a waiting acquisition has not got its lease yet, as reported to the
/// `*_reporting` waits ([`Lock::acquire_reporting`](crate::Lock::acquire_reporting),
/// [`Semaphore::acquire_reporting`](crate::Semaphore::acquire_reporting),
/// [`Election::campaign_reporting`](crate::Election::campaign_reporting)),
/// for progress displays.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum WaitReason<'a> {
    /// Someone else holds the key (for a semaphore: every slot is held).
    /// The holders the store described: at most one for a lock or an
    /// election; for a semaphore, those of the slots it was asked about
    /// (not slots held in this process); empty when the store could not
    /// tell.
    Held(&'a [HolderInfo]),
    /// The store's data is new to this process (store epoch `epoch`) and
    /// nothing is granted for `remaining` (see [`Error::Quarantined`]).
    Quarantine {
        /// The new store epoch.
        epoch: u64,
        /// How long the quarantine lasts from now.
        remaining: Duration,
    },
}

/// A lease granted on one slot.
#[derive(Debug)]
pub(crate) struct Granted {
    pub slot: u32,
    pub guard: LeaseGuard,
}

/// The engine under one lock, semaphore or election. Cheap to share.
#[derive(Debug)]
pub(crate) struct Engine {
    store: Store,
    /// The key the caller named: errors, logs and metrics speak of it.
    name: Key,
    /// The keys a lease may be taken on (`[name]` for a lock).
    slots: Box<[Key]>,
    opts: ResolvedOptions,
    owner: Owner,
    kind: Kind,
    /// Where this process's waiters queue and are woken (the key's own for a
    /// lock, one shared by every slot of a semaphore).
    queue: Arc<LocalKey>,
    /// What a grant must also pass before it is handed out (the sides of a
    /// reader-writer lock); `None` for locks, semaphores and elections.
    gate: Option<Gate>,
}

impl Engine {
    /// An engine taking leases on `slots`, named `name`. With one slot equal
    /// to `name`, waiters queue on the key itself; otherwise on a local group
    /// of `name` that every slot's release rings.
    pub(crate) fn new(
        store: Store,
        name: Key,
        slots: Vec<Key>,
        opts: ResolvedOptions,
        kind: Kind,
    ) -> Self {
        Self::gated(store, name, slots, opts, kind, None)
    }

    /// [`new`](Self::new), with a [`Gate`] every grant must pass.
    pub(crate) fn gated(
        store: Store,
        name: Key,
        slots: Vec<Key>,
        opts: ResolvedOptions,
        kind: Kind,
        gate: Option<Gate>,
    ) -> Self {
        let mut owner = Owner::current();
        owner.label = opts.label.clone();
        let queue = match slots.as_slice() {
            [only] if *only == name => store.local_key(&name),
            _ => store.local_group(&name),
        };
        Engine {
            store,
            name,
            slots: slots.into(),
            opts,
            owner,
            kind,
            queue,
            gate,
        }
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn name(&self) -> &Key {
        &self.name
    }

    pub(crate) fn slots(&self) -> &[Key] {
        &self.slots
    }

    pub(crate) fn owner(&self) -> &Owner {
        &self.owner
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.opts.ttl
    }

    /// A random pause between the poll bounds.
    pub(crate) fn poll_pause(&self) -> Duration {
        self.opts.poll_pause()
    }

    /// The longest pause a long wait backs off to.
    pub(crate) fn poll_cap(&self) -> Duration {
        self.opts.poll_cap
    }

    pub(crate) fn labels(&self) -> Labels {
        Labels {
            backend: self.store.backend().name(),
            kind: self.kind,
        }
    }

    /// One round of attempts, without waiting; recorded in metrics.
    pub(crate) async fn try_acquire(&self) -> Result<Granted> {
        let started = tokio::time::Instant::now();
        let result = match self.round_now().await {
            Ok(Round::Granted(g)) => Ok(g),
            Ok(Round::Missed(mut missed)) => {
                if let (true, Some(i)) = (missed.holders.is_empty(), missed.local) {
                    // Every slot asked about is held here: say who (this
                    // process), as the store describes it.
                    if let Ok(info) = self.store.backend().inspect(&self.slots[i]).await {
                        missed.holders.extend(info.holder);
                    }
                }
                Err(self.missed_error(missed))
            }
            Err(e) => Err(e),
        };
        self.labels().acquire(&result, started.elapsed());
        result
    }

    /// Rounds of attempts until one is granted or `wait` runs out; recorded
    /// in metrics. `on_wait` hears why each round got nothing.
    pub(crate) async fn acquire(
        &self,
        wait: Wait,
        on_wait: &mut impl FnMut(WaitReason<'_>),
    ) -> Result<Granted> {
        let started = tokio::time::Instant::now();
        let span = tracing::debug_span!("acquire", key = %self.name, ?wait);
        let result = self.wait_for(wait, started, on_wait).instrument(span).await;
        self.labels().acquire(&result, started.elapsed());
        result
    }

    fn clock(&self) -> &SharedClock {
        self.store.clock()
    }

    fn make_guard(
        &self,
        slot: u32,
        pending: &mut PendingLease,
        fencing_token: u64,
        anchor: Duration,
        local: Arc<LocalKey>,
        gate: Option<OwnedMutexGuard<()>>,
    ) -> LeaseGuard {
        pending.disarm();
        // The grant ended this id's registration, if it had one (the
        // backend's, at the grant).
        pending.queued = false;
        self.queue.note_grant(self.opts.poll_max);
        if self.queue.note_token(slot, fencing_token) {
            // Granted to someone else since our last grant on this slot.
            self.queue.note_held_elsewhere();
        }
        let mut lease = pending.lease.clone();
        lease.fencing_token = fencing_token;
        let group = (!Arc::ptr_eq(&local, &self.queue)).then(|| self.queue.clone());
        local.guard_started();
        LeaseGuard::start(GuardParts {
            backend: self.store.backend().clone(),
            lease,
            opts: self.opts.clone(),
            clock: self.clock().clone(),
            anchor,
            local,
            gate,
            group,
            labels: self.labels(),
        })
    }
}
