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
//!   again at doubling gaps for a minute ([`LATE_LANDING`]): the request
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
//!   once. From its first round that finds the key held, the waiter also
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
//!   last [`CONTENDED_FOR`], that another process held it (so it may be
//!   waiting too): for [`GIVE_WAY_WATCHED`] where the backend wakes other
//!   processes' waiters on a release, else for one longest poll interval,
//!   in which every other process's waiter polls. It also gives way once
//!   local handoffs have kept the key for [`PROBE_POLLS`] longest poll
//!   intervals, since a process holding the key all along never sees the
//!   others waiting. So passes go round the processes that want the key; a
//!   key only one process uses waits a moment once every few polls.
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

/// How recently another process must have held a key for a local waiter to
/// give way to it (see the module docs).
pub(crate) const CONTENDED_FOR: Duration = Duration::from_secs(2);

/// After how many longest poll intervals of local handoffs a process gives
/// way even though no other process was seen holding the key (1 s with the
/// default polling): a waiter elsewhere only ever finds it held.
pub(crate) const PROBE_POLLS: u32 = 10;

/// How long a local waiter leaves the key free for other processes when the
/// backend wakes their waiters on a release (see
/// [`Backend::watch_release`]): long enough for a woken waiter in another
/// process on the same machine or network to ask, short next to a poll.
pub(crate) const GIVE_WAY_WATCHED: Duration = Duration::from_millis(10);

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

/// What a grant must also pass before the engine hands it out: the two
/// sides of a [`RwLock`](crate::RwLock) (see the `rwlock` module for why
/// this is safe). Checked right after a grant, inside the wait loop, so
/// waiting, deadlines, wake-ups and cancel safety are the engine's own.
#[derive(Debug)]
pub(crate) enum Gate {
    /// A reader (the engine's slots are the reader slots): granted only if
    /// the writer key, read after the slot was granted, is free. Otherwise
    /// the slot is given back and the wait goes on, watching the writer key.
    Reader {
        /// The writer key.
        writer: Key,
    },
    /// A writer (the engine's slot is the writer key): granted only if no
    /// reader slot (a key starting with `readers`), read after the writer
    /// key was granted, is held. Otherwise the writer keeps the key (so new
    /// readers wait behind it) and the wait goes on, watching `slots`.
    Writer {
        /// The reader slots' common prefix (`KEY/:read:`).
        readers: String,
        /// The reader slots this engine's lock uses, for wake-ups.
        slots: Box<[Key]>,
    },
}

/// What the gate read in the store.
enum Check {
    /// Free; the highest fencing token seen on the keys read.
    Free(u64),
    /// Held by these.
    Held(Vec<HolderInfo>),
}

/// What the gate made of a grant.
// Moved once per gate check, as `Round` is.
#[allow(clippy::large_enum_variant)]
enum Gated {
    Pass(Granted),
    /// Held back: the grant is kept (a writer waiting for readers) or was
    /// given back (a reader); `missed` says why.
    Blocked {
        kept: Option<Granted>,
        missed: Missed,
    },
}

/// Per slot, during one wait: the lease id an ambiguous failure may have
/// been granted to, and when the first request with that id was sent.
struct SlotState {
    pending: PendingLease,
    anchor: Option<Duration>,
    /// The store answered "held" to this id: its next attempts in a wait
    /// ask to be queued (the first one, usually granted, does not: see
    /// [`Capabilities::queues_waiters`](crate::backend::Capabilities::queues_waiters)).
    held: bool,
}

/// What one round of attempts found, when it got nothing.
#[derive(Default)]
struct Missed {
    /// Some slot was answered "held".
    held: bool,
    holders: Vec<HolderInfo>,
    /// `holders` are readers of a reader-writer lock that kept a writer
    /// out (not an exclusive holder).
    readers: bool,
    /// A slot a guard of this store holds (not asked of the store).
    local: Option<usize>,
    /// The last retryable failure of the round.
    failure: Option<Error>,
    /// The store is in quarantine.
    quarantine: Option<(u64, Duration)>,
    /// The store's epoch changed under every attempt.
    other_epoch: bool,
    /// A grant came too late and was let go: try again at once.
    late: bool,
    /// The [`Gate`] held back a grant: wait for the keys it watches.
    gated: bool,
}

// A round's result is moved once, at the end of the round: boxing the
// grant would cost an allocation per acquisition to save a few hundred
// bytes of stack.
#[allow(clippy::large_enum_variant)]
enum Round {
    Granted(Granted),
    Missed(Missed),
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

    pub(crate) fn labels(&self) -> Labels {
        Labels {
            backend: self.store.backend().name(),
            kind: self.kind,
        }
    }

    /// One round of attempts, not queued: the local queue is taken if it is
    /// free so local waiters line up behind us; if another task of ours has
    /// it, the store is asked anyway: it decides.
    async fn round_now(&self) -> Result<Round> {
        let mut queue = self.queue.gate.clone().try_lock_owned().ok();
        let mut slots = self.fresh_slots();
        match self.round(&mut slots, &mut queue, false).await? {
            Round::Granted(g) => match self.pass_gate(g).await? {
                Gated::Pass(g) => Ok(Round::Granted(g)),
                Gated::Blocked { kept, missed } => {
                    if let Some(kept) = kept {
                        // One attempt only: a writer does not wait for
                        // readers here.
                        let _ = kept.guard.release().await;
                    }
                    Ok(Round::Missed(missed))
                }
            },
            missed => Ok(missed),
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

    async fn wait_for(
        &self,
        wait: Wait,
        started: tokio::time::Instant,
        on_wait: &mut impl FnMut(WaitReason<'_>),
    ) -> Result<Granted> {
        if matches!(wait, Wait::Timeout(d) if d.is_zero()) {
            return self.no_wait(started, on_wait).await;
        }
        let give_up = wait.deadline(started);
        let timed_out = || Error::TimedOut {
            key: self.name.to_string(),
            waited: started.elapsed(),
        };
        let mut outcome = WaitOutcome::default();
        // The first round is given [`FIRST_ANSWER`] to answer, however short
        // the wait: a store that answers a moment after the wait ran out
        // has not failed, and its answer (granted, or held: timed out) is
        // the wait's. Later rounds, and the pauses between them, are cut
        // off at the deadline. Only for a task that did not queue behind
        // other local waiters: one let through the queue after its wait ran
        // out gives up without an attempt (so that tasks sharing a deadline
        // send what one task sends).
        let (gate, queued) = match self.queue.gate.clone().try_lock_owned() {
            Ok(gate) => (gate, false),
            Err(_) => match until(give_up, self.queue.gate.clone().lock_owned()).await {
                Some(gate) => (gate, true),
                None => return Err(timed_out()),
            },
        };
        let first_bound = match queued {
            true => give_up,
            false => give_up.map(|at| at.max(started + FIRST_ANSWER)),
        };
        let mut first = true;
        // A lock's guard keeps the gate (the key's) while held; a
        // semaphore's waiter lets the next local waiter poll once it is done.
        let mut queue = Some(gate);
        let mut slots = self.fresh_slots();
        let mut failures = 0u32;
        // Whether to watch for releases by other processes: from the first
        // round that misses (see the module docs).
        let mut watching = false;
        let mut watch = None;
        // A writer's grant kept while readers still hold (see [`Gate`]), and
        // whether the last miss was the gate's (so the keys to watch are
        // the gate's).
        let mut kept: Option<Granted> = None;
        let mut gated = false;
        let gate_local = self.gate_local();
        loop {
            let released = self.queue.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            // A release, by a guard of this process, of what the gate waits
            // for (a reader: the writer key; a writer: a reader slot).
            let gate_released = gate_local.as_ref().map(|l| l.released.notified());
            tokio::pin!(gate_released);
            if let Some(n) = gate_released.as_mut().as_pin_mut() {
                n.enable();
            }
            let give_way = kept.is_none()
                && self.queue.give_way(
                    self.opts.poll_max,
                    CONTENDED_FOR,
                    self.opts.poll_max * PROBE_POLLS,
                );
            let watched = if gated {
                self.gate_watch()
            } else {
                &self.slots
            };
            // A release by another process, where the backend can tell
            // (registered before the round, so none is missed).
            let remote = match watch.take() {
                Some(w) => Some(w),
                None if watching || give_way => self.store.backend().watch_release(watched),
                None => None,
            };
            if give_way {
                // Taking over from a local release while another process
                // wants the key too: leave it free long enough for that
                // process's waiter to ask first.
                let pause = match remote {
                    Some(_) => GIVE_WAY_WATCHED.min(self.opts.poll_max),
                    None => self.opts.poll_max,
                };
                tracing::trace!(?pause, "another process wants the key too; giving way");
                if until(give_up, tokio::time::sleep(pause)).await.is_none() {
                    return Err(timed_out());
                }
            }
            // A writer waiting for readers asks the gate again, with the
            // key it keeps, unless that lease is lost meanwhile (then it is
            // let go here, and the key asked for again).
            let round = match kept.take().filter(|g| !g.guard.is_lost()) {
                Some(g) => Ok(Round::Granted(g)),
                None => {
                    let bound = if first { first_bound } else { give_up };
                    let Some(round) = until(bound, self.round(&mut slots, &mut queue, true)).await
                    else {
                        return Err(self.wait_error(&mut outcome, started));
                    };
                    round
                }
            };
            let bound = if first { first_bound } else { give_up };
            first = false;
            let missed = match round? {
                Round::Granted(g) => {
                    // Past its deadline, the gate's check is not even sent
                    // (the grant is dropped, so released).
                    match until(bound, self.pass_gate(g)).await {
                        None => return Err(self.wait_error(&mut outcome, started)),
                        Some(Err(e)) => return Err(e),
                        Some(Ok(Gated::Pass(g))) => {
                            tracing::debug!(slot = g.slot, token = g.guard.fencing_token(), waited = ?started.elapsed(), "acquired");
                            return Ok(g);
                        }
                        Some(Ok(Gated::Blocked { kept: k, missed })) => {
                            kept = k;
                            missed
                        }
                    }
                }
                Round::Missed(missed) => missed,
            };
            if missed.gated {
                // A reader that gave its slot back rang its own queue: only
                // a release after this one wakes it.
                released.set(self.queue.released.notified());
                released.as_mut().enable();
            }
            if missed.gated != gated {
                // Waiting on other keys now: watch those.
                gated = missed.gated;
                watching = false;
            }
            if missed.held && !watching {
                // The first round that found the key held: watch from now on
                // (an uncontended acquire never starts the backend's
                // watcher), and where the backend can tell of releases, ask
                // once more at once, in case the key was released before the
                // watch was registered.
                watching = true;
                if (remote.is_none() || gated) && missed.quarantine.is_none() && !missed.late {
                    let keys = if gated {
                        self.gate_watch()
                    } else {
                        &self.slots
                    };
                    watch = self.store.backend().watch_release(keys);
                    if watch.is_some() {
                        outcome.held();
                        continue;
                    }
                }
            }
            let pause = if missed.late {
                Duration::ZERO
            } else if let Some((epoch, remaining)) = missed.quarantine {
                // Nothing was granted: wait the quarantine out, to its end
                // and no further (the gate knows it on this process's
                // clock; a poll past it would only delay the grant). If the
                // wait runs out first, that is why.
                failures = 0;
                on_wait(WaitReason::Quarantine { epoch, remaining });
                outcome.failed(self.missed_error(missed));
                remaining
            } else if missed.held {
                failures = 0;
                outcome.held();
                on_wait(WaitReason::Held(&missed.holders));
                self.opts.poll_pause()
            } else {
                failures += 1;
                let pause = self.opts.poll_pause().saturating_mul(1 << failures.min(5));
                let err = self.missed_error(missed);
                tracing::warn!(error = %err, retry_in = ?pause, "acquire attempt failed; retrying");
                outcome.failed(err);
                pause
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = released => tracing::trace!("woken by a local release"),
                _ = async { match gate_released.as_mut().as_pin_mut() { Some(n) => n.await, None => std::future::pending().await } } => {
                    tracing::trace!("woken by a local release of what the gate waits for");
                }
                _ = async { match remote { Some(w) => w.await, None => std::future::pending().await } } => {
                    tracing::trace!("woken by a release elsewhere");
                }
                _ = until(give_up, std::future::pending::<()>()) => {
                    return Err(self.wait_error(&mut outcome, started));
                }
            }
        }
    }

    /// A wait of zero: one whole attempt, as [`try_acquire`](Self::try_acquire)
    /// makes, and the wait has run out if it does not get the key. (With its
    /// deadline already passed, a round of the wait loop would send
    /// nothing.)
    async fn no_wait(
        &self,
        started: tokio::time::Instant,
        on_wait: &mut impl FnMut(WaitReason<'_>),
    ) -> Result<Granted> {
        match self.round_now().await? {
            Round::Granted(g) => Ok(g),
            Round::Missed(missed) if missed.held && missed.failure.is_none() => {
                on_wait(WaitReason::Held(&missed.holders));
                Err(Error::TimedOut {
                    key: self.name.to_string(),
                    waited: started.elapsed(),
                })
            }
            Round::Missed(missed) => {
                if let Some((epoch, remaining)) = missed.quarantine {
                    on_wait(WaitReason::Quarantine { epoch, remaining });
                }
                Err(self.missed_error(missed))
            }
        }
    }

    /// How a wait begun at `started` ends when it runs out. The store
    /// answered if it answered this task, or this process on this key
    /// during the wait or the longest poll interval before it: a task let
    /// through the queue just before its deadline, or with a wait shorter
    /// than a round trip, may run out inside its first attempt, on a store
    /// that answers well.
    fn wait_error(&self, outcome: &mut WaitOutcome, started: tokio::time::Instant) -> Error {
        let since = started.checked_sub(self.opts.poll_max).unwrap_or(started);
        if self.queue.answered_since(since) {
            outcome.answered = true;
        }
        outcome.take_error(self.store.backend().name(), &self.name, started.elapsed())
    }

    /// The local state rung when what the gate waits for is released by a
    /// guard of this process: the writer key's (a reader), the reader
    /// slots' group (a writer; reader guards ring it).
    fn gate_local(&self) -> Option<Arc<LocalKey>> {
        match &self.gate {
            None => None,
            Some(Gate::Reader { writer }) => Some(self.store.local_key(writer)),
            Some(Gate::Writer { .. }) => Some(self.store.local_group(&self.name)),
        }
    }

    /// The keys whose release the gate waits for.
    fn gate_watch(&self) -> &[Key] {
        match &self.gate {
            None => &self.slots,
            Some(Gate::Reader { writer }) => std::slice::from_ref(writer),
            Some(Gate::Writer { slots, .. }) => slots,
        }
    }

    /// Checks a grant against the engine's [`Gate`], if it has one. The
    /// store is read after the grant (the order the `rwlock` module's
    /// safety argument rests on). A reader that passes shows the writer
    /// key's token (see [`RwLock`](crate::RwLock#fencing-tokens)).
    async fn pass_gate(&self, g: Granted) -> Result<Gated> {
        let Some(gate) = &self.gate else {
            return Ok(Gated::Pass(g));
        };
        let mut missed = Missed {
            gated: true,
            ..Missed::default()
        };
        let mut checked = match gate {
            Gate::Reader { writer } => self.writer_free(writer).await,
            Gate::Writer { readers, .. } => self.readers_free(readers).await,
        };
        if matches!(checked, Ok(Check::Free(_))) && !g.guard.is_lost() {
            // The read saw the other side's marks on the same data as the
            // grant only if the grant is still there after it: the store's
            // data may have been lost in between (the grant on the old
            // data, the read on the emptied store, while the other side's
            // holders, granted on the old data, are not yet told).
            match self.still_held(&g).await {
                Ok(true) => {}
                Ok(false) => {
                    let _ = g.guard.release().await;
                    missed.failure = Some(self.retry_acquire(
                        "the grant was gone once the reader-writer gate had read the other side (the store's data lost?)",
                    ));
                    return Ok(Gated::Blocked { kept: None, missed });
                }
                Err(err) => checked = Err(err),
            }
        }
        let reader = matches!(gate, Gate::Reader { .. });
        match checked {
            Ok(Check::Free(seen)) if !g.guard.is_lost() => {
                if reader {
                    g.guard
                        .show_fencing_token(seen.max(epoch_token_base(g.guard.lease_epoch())));
                }
                Ok(Gated::Pass(g))
            }
            Ok(Check::Free(_)) => {
                // The check outlasted the grant's safety deadline: start
                // afresh, as with a late grant.
                drop(g);
                missed.late = true;
                missed.failure = Some(self.late_grant());
                Ok(Gated::Blocked { kept: None, missed })
            }
            Ok(Check::Held(holders)) => {
                // A reader: a writer holds or waits; its slot is given back,
                // so that the writer's own check finds it free.
                missed.held = true;
                missed.readers = !reader;
                missed.holders = holders;
                Ok(Self::held_back(g, missed, reader).await)
            }
            Err(err) if err.is_retryable() || matches!(err, Error::Quarantined { .. }) => {
                // Not known to be free: not granted.
                missed.failure = Some(err);
                Ok(Self::held_back(g, missed, reader).await)
            }
            Err(err) => {
                let _ = g.guard.release().await;
                Err(err)
            }
        }
    }

    /// Whether `g`'s lease is still its key's, read now: the key's holder
    /// has the lease's token and this engine's owner.
    async fn still_held(&self, g: &Granted) -> Result<bool> {
        let info = self.store.backend().inspect(g.guard.key()).await?;
        let token = g.guard.fencing_token();
        Ok(info
            .holder
            .is_some_and(|h| h.fencing_token == token && h.owner == self.owner))
    }

    /// A grant the gate held back: a reader gives its slot back; a writer
    /// keeps its key (so later readers wait behind it) and asks again.
    async fn held_back(g: Granted, missed: Missed, reader: bool) -> Gated {
        if reader {
            let _ = g.guard.release().await;
            Gated::Blocked { kept: None, missed }
        } else {
            Gated::Blocked {
                kept: Some(g),
                missed,
            }
        }
    }

    /// Whether the writer key is free, read now; if so, with the highest
    /// token seen on it.
    ///
    /// Where a read can show a writer's token before it shows the writer
    /// ([`token_visible_before_holder`](crate::backend::Capabilities::token_visible_before_holder)),
    /// a key read as free is taken once and given back before it counts as
    /// free, so that a writer whose token the read may have shown starts
    /// over with a greater one (its second request finds the key changed).
    async fn writer_free(&self, writer: &Key) -> Result<Check> {
        let info = self.store.backend().inspect(writer).await?;
        let confirm = match &info.holder {
            None => {
                self.store
                    .backend()
                    .capabilities()
                    .token_visible_before_holder
            }
            Some(holder) => self.must_probe(holder),
        };
        match (info.holder, confirm) {
            (None, false) => Ok(Check::Free(info.fencing_token)),
            (Some(holder), false) => Ok(Check::Held(vec![holder])),
            (holder, true) => match self.take_once(writer).await? {
                Some(token) => Ok(Check::Free(info.fencing_token.max(token))),
                None => Ok(Check::Held(holder.into_iter().collect())),
            },
        }
    }

    /// Whether no reader slot (key `readers` + a number, whatever the
    /// number: also slots of readers with a larger limit) is held, read
    /// now.
    async fn readers_free(&self, readers: &str) -> Result<Check> {
        let mut holders = Vec::new();
        let listed = self.store.backend().list(readers).await?;
        for SlotInfo { info, .. } in numbered_slots(readers, listed) {
            let Some(holder) = info.holder else {
                continue;
            };
            if !self.must_probe(&holder) || self.take_once(&info.key).await?.is_none() {
                holders.push(holder);
            }
        }
        if holders.is_empty() {
            Ok(Check::Free(0))
        } else {
            Ok(Check::Held(holders))
        }
    }

    /// Whether a key `inspect` or `list` describes with a holder may be
    /// free after all, by the store's own rule for taking a key over, which
    /// a read does not apply everywhere: where takeover needs an
    /// observation (S3, DynamoDB), a read shows a dead holder's record as
    /// held until someone takes it over, and a holder reported with no time
    /// left may be past its expiry. Then the caller makes one attempt on
    /// the key ([`take_once`](Self::take_once), which also counts towards
    /// an observation): if granted, it was free.
    fn must_probe(&self, holder: &HolderInfo) -> bool {
        let observe = self
            .store
            .backend()
            .capabilities()
            .takeover_needs_observation;
        observe || holder.expires_in.is_some_and(|d| d.is_zero())
    }

    /// One attempt on `key`; if granted, the key is given back at once:
    /// `Some(its token)`. `None`: held.
    async fn take_once(&self, key: &Key) -> Result<Option<u64>> {
        let mut pending = self.fresh_lease(key);
        match self.attempt(key, &mut pending.lease, false).await {
            Ok(AcquireOutcome::Acquired(grant)) => {
                pending.lease.fencing_token = grant.fencing_token;
                if self.store.backend().release(&pending.lease).await.is_err() {
                    pending.arm();
                }
                Ok(Some(grant.fencing_token))
            }
            Ok(AcquireOutcome::Held(_) | AcquireOutcome::OtherEpoch(_)) => Ok(None),
            Err(err) => {
                if err.is_retryable() {
                    // Maybe granted without our hearing: released in the
                    // background when `pending` drops.
                    pending.arm();
                }
                Err(err)
            }
        }
    }

    fn fresh_slots(&self) -> Vec<Option<SlotState>> {
        self.slots.iter().map(|_| None).collect()
    }

    /// Tries every slot once, in random order, skipping slots a guard of
    /// this process holds. `queue` is the queue's gate if this caller has it:
    /// a lock's grant keeps it in its guard. `waiting`: the round is part of
    /// a wait, so a lock's attempts ask to be queued where the backend
    /// queues waiters ([`Capabilities::queues_waiters`](crate::backend::Capabilities::queues_waiters)).
    async fn round(
        &self,
        slots: &mut [Option<SlotState>],
        queue: &mut Option<OwnedMutexGuard<()>>,
        waiting: bool,
    ) -> Result<Round> {
        self.store.check_open()?;
        let queue_me = waiting
            && matches!(self.kind, Kind::Lock)
            && self.store.backend().capabilities().queues_waiters;
        use rand::seq::SliceRandom;
        let mut order: Vec<usize> = (0..self.slots.len()).collect();
        order.shuffle(&mut rand::rng());
        let mut missed = Missed::default();
        for i in order {
            let key = &self.slots[i];
            let local = self.store.local_key(key);
            // The gate the guard will keep: a lock's is its queue's; a
            // semaphore slot's is its own, and a taken one means a guard of
            // ours holds that slot (held; the store is not asked).
            let own_queue = Arc::ptr_eq(&local, &self.queue);
            let gate = if own_queue {
                None
            } else {
                match local.gate.clone().try_lock_owned() {
                    Ok(gate) => Some(gate),
                    Err(_) => {
                        missed.held = true;
                        missed.local.get_or_insert(i);
                        continue;
                    }
                }
            };
            let state = slots[i].get_or_insert_with(|| self.slot_state(key));
            let sent = self.store.clock().now();
            let anchor = *state.anchor.get_or_insert(sent);
            // Queued only once the key was found held: an uncontended
            // acquisition sends nothing more than before.
            let queue_me = queue_me && state.held;
            let outcome = self.attempt(key, &mut state.pending.lease, queue_me).await;
            if outcome.is_ok() {
                self.queue.note_answer();
            }
            match outcome {
                Ok(AcquireOutcome::Acquired(grant)) => {
                    // The TTL counts from the first send, or from earlier
                    // where the store says it was already running.
                    let anchor = anchor.saturating_sub(grant.ran);
                    if self.too_late(anchor) {
                        // Granted so late (a slow answer, or ambiguous
                        // retries) that it is past its safety deadline: let
                        // it go, and start afresh with a new id.
                        state.pending.arm();
                        slots[i] = None;
                        missed.late = true;
                        missed.failure = Some(self.late_grant());
                        continue;
                    }
                    let gate = if own_queue { queue.take() } else { gate };
                    let guard = self.make_guard(
                        i as u32,
                        &mut state.pending,
                        grant.fencing_token,
                        anchor,
                        local,
                        gate,
                    );
                    return Ok(Round::Granted(Granted {
                        slot: i as u32,
                        guard,
                    }));
                }
                Ok(AcquireOutcome::Held(holder)) => {
                    if !local.guarded_here() {
                        // No guard of this store holds it: someone else.
                        self.queue.note_held_elsewhere();
                    }
                    // Not disarmed: an earlier attempt with this id whose
                    // answer never came may still land (it would be
                    // answered `Acquired` here, the same id, if it had).
                    // Queued: the registration is ended if the wait ends
                    // without this id's grant.
                    state.pending.queued |= queue_me;
                    state.held = true;
                    state.anchor = None;
                    missed.held = true;
                    missed.holders.extend(holder);
                }
                Ok(AcquireOutcome::OtherEpoch(_)) => {
                    state.anchor = None;
                    state.pending.disarm();
                    missed.other_epoch = true;
                    missed.failure = Some(self.epoch_kept_changing());
                }
                Err(Error::Quarantined {
                    key: _,
                    epoch,
                    remaining,
                }) => {
                    // The whole store is in quarantine: no other slot can do
                    // better.
                    state.anchor = None;
                    state.pending.disarm();
                    missed.quarantine = Some((epoch, remaining));
                    return Ok(Round::Missed(missed));
                }
                Err(err) if err.is_retryable() => {
                    // Maybe granted without our hearing: keep the id.
                    state.pending.arm();
                    missed.failure = Some(err);
                }
                Err(err) => return Err(err),
            }
        }
        Ok(Round::Missed(missed))
    }

    /// The error a round that got nothing ends a `try_acquire` with.
    fn missed_error(&self, missed: Missed) -> Error {
        if let Some((epoch, remaining)) = missed.quarantine {
            return Error::Quarantined {
                key: self.name.to_string(),
                epoch,
                remaining,
            };
        }
        match missed.failure {
            Some(err) => err,
            None => Error::Held {
                key: self.name.to_string(),
                readers: if missed.readers {
                    missed.holders.len().max(1) as u32
                } else {
                    0
                },
                // One holder is described: another process's where there
                // is one (a full semaphore held partly here is not "held by
                // this process").
                holder: {
                    let mut holders = missed.holders;
                    let other = holders.iter().position(|h| !h.owner.is_this_process());
                    match other {
                        Some(i) => Some(Box::new(holders.swap_remove(i))),
                        None => holders.into_iter().next().map(Box::new),
                    }
                },
            },
        }
    }

    /// Why a grant past its safety deadline was let go (retryable: the
    /// wait starts afresh with a new lease id).
    fn late_grant(&self) -> Error {
        self.retry_acquire("the store answered after the lease's safety deadline")
    }

    /// A retryable failure of an acquisition, saying `why`.
    fn retry_acquire(&self, why: &'static str) -> Error {
        Error::backend(self.store.backend().name(), "acquire", true, why)
    }

    /// A lease on `key` with a new id, not yet asked for.
    fn fresh_lease(&self, key: &Key) -> PendingLease {
        PendingLease::new(
            self.store.backend().clone(),
            Lease {
                key: key.clone(),
                lease_id: LeaseId::random(),
                ttl: self.opts.ttl,
                fencing_token: 0,
                epoch: 0,
            },
        )
    }

    fn slot_state(&self, key: &Key) -> SlotState {
        SlotState {
            pending: self.fresh_lease(key),
            anchor: None,
            held: false,
        }
    }

    /// Whether a lease whose request was sent at `sent` is already past its
    /// safety deadline.
    fn too_late(&self, sent: Duration) -> bool {
        self.clock().now() >= sent + self.opts.trusted - self.opts.safety_margin
    }

    fn clock(&self) -> &SharedClock {
        self.store.clock()
    }

    fn epoch_kept_changing(&self) -> Error {
        self.retry_acquire(
            "the store's epoch changed at every attempt (is the store being deleted and re-created?)",
        )
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

    /// One attempt on `key` in the store epoch this store has cleared,
    /// learning the store's epoch first if need be (see
    /// [`Error::Quarantined`]). Sets `lease.epoch` to the epoch asked for.
    /// Never answers `Acquired` in an epoch that is still in quarantine.
    async fn attempt(&self, key: &Key, lease: &mut Lease, queue: bool) -> Result<AcquireOutcome> {
        let gate = self.store.epochs();
        let mut outcome = Ok(AcquireOutcome::OtherEpoch(crate::backend::StoreEpoch::new(
            0,
            Duration::ZERO,
        )));
        // Usually one request; one more when the epoch is news (the first
        // attempt of a process whose backend did not read the epoch while
        // opening, or after the store was re-created).
        for _ in 0..3 {
            let epoch = gate.cleared();
            lease.epoch = epoch.unwrap_or(0);
            // With nothing cleared yet (None) this only learns the epoch.
            outcome = self.send_attempt(key, lease, epoch, queue).await;
            let Ok(AcquireOutcome::OtherEpoch(reported)) = &outcome else {
                return outcome;
            };
            let window = self.store.confirmation_window();
            match gate.saw(self.store.backend().name(), reported, window)? {
                Clearance::Cleared(_) => continue,
                Clearance::Quarantined { epoch, remaining } => {
                    return Err(Error::Quarantined {
                        key: key.to_string(),
                        epoch,
                        remaining,
                    })
                }
            }
        }
        outcome
    }

    /// One backend attempt. It runs in the caller's task; if the caller is
    /// dropped while it is in flight, it finishes in a task of its own and,
    /// when the store granted it (or may have), releases the lease, so
    /// that dropping the caller cannot strand a lease.
    async fn send_attempt(
        &self,
        key: &Key,
        lease: &Lease,
        epoch: Option<u64>,
        queue: bool,
    ) -> Result<AcquireOutcome> {
        let backend = self.store.backend().clone();
        let request = AcquireRequest {
            key: key.clone(),
            lease_id: lease.lease_id.clone(),
            ttl: self.opts.ttl,
            owner: self.owner.clone(),
            data: self.opts.data.clone(),
            epoch,
            queue,
        };
        let lease = lease.clone();
        let labels = self.labels();
        Detachable::new(|orphaned| async move {
            let outcome = backend.try_acquire(&request).await;
            labels.attempt(match &outcome {
                Ok(AcquireOutcome::Acquired(_)) => "acquired",
                Ok(AcquireOutcome::Held(_)) => "held",
                Ok(AcquireOutcome::OtherEpoch(_)) => "other_epoch",
                Err(_) => "error",
            });
            if orphaned.get() {
                match &outcome {
                    // A registration made after its wait ended: ended too.
                    Ok(AcquireOutcome::Held(_)) if queue => {
                        let _ = backend.release(&lease).await;
                    }
                    Ok(AcquireOutcome::Held(_) | AcquireOutcome::OtherEpoch(_)) => {}
                    Err(e) if !e.is_retryable() => {}
                    Ok(AcquireOutcome::Acquired(_)) => {
                        let _ = backend.release(&lease).await;
                    }
                    Err(_unknown) => {
                        let _ = backend.release(&lease).await;
                        chase_late_landing(backend, lease);
                    }
                }
            }
            outcome
        })
        .await
    }
}

/// A lease id that may hold the key without our knowing (after an ambiguous
/// failure, or a grant that came too late). If still armed when dropped, it
/// is released in the background.
#[derive(Debug)]
struct PendingLease {
    backend: Arc<dyn Backend>,
    lease: Lease,
    armed: bool,
    /// The store queued this id as a waiter (see
    /// [`Capabilities::queues_waiters`](crate::backend::Capabilities::queues_waiters)):
    /// dropped without its grant, the registration is ended by one release.
    queued: bool,
}

impl PendingLease {
    fn new(backend: Arc<dyn Backend>, lease: Lease) -> Self {
        PendingLease {
            backend,
            lease,
            // A drop during an attempt is covered by the attempt's own task;
            // only an ambiguous failure or a late grant arms this.
            armed: false,
            queued: false,
        }
    }

    fn arm(&mut self) {
        self.armed = true;
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for PendingLease {
    fn drop(&mut self) {
        let queued = std::mem::take(&mut self.queued);
        if std::mem::take(&mut self.armed) {
            let backend = self.backend.clone();
            let lease = self.lease.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                spawn_background(&rt, async move {
                    let _ = backend.release(&lease).await;
                    chase_late_landing(backend, lease);
                });
            }
        } else if queued {
            // A registration as a waiter, and the key if it was handed to
            // this id meanwhile: one release ends both.
            let backend = self.backend.clone();
            let lease = self.lease.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                spawn_background(&rt, async move {
                    let _ = backend.release(&lease).await;
                });
            }
        }
    }
}

/// How long the first attempt of a wait may take, however short the wait
/// (`--wait 1ms`): one try answered within it is the wait's answer. Above
/// the slowest answer a store gives by design: S3's first grant of a key
/// waits a second past S3's answer before it writes (see leasehold-s3).
pub(crate) const FIRST_ANSWER: Duration = Duration::from_secs(2);

/// How long after its caller gave up on it an attempt's request is chased
/// (see [`chase_late_landing`]).
pub(crate) const LATE_LANDING: Duration = Duration::from_secs(60);

/// Releases `lease` again and again, 0.1 s after the first release, then at
/// doubling gaps, for [`LATE_LANDING`]: an attempt whose answer never came
/// (a timeout, a dropped connection) may still reach the store after its
/// caller released the id once (a request held in the network, a statement
/// the server still runs after its client went away), and would then hold
/// the key, for nobody, until its TTL ran out. A release names the lease
/// id, so it ends only that lease: harmless when there is none. Ten
/// requests at most, only after an ambiguous failure. The chase is not
/// waited for by [`finish_background`](crate::finish_background) (a process that exits ends it);
/// a request that lands later than this, or after the process exited,
/// holds the key until its TTL runs out.
fn chase_late_landing(backend: Arc<dyn Backend>, lease: Lease) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        let mut since = Duration::ZERO;
        let mut gap = Duration::from_millis(100);
        while since + gap <= LATE_LANDING {
            tokio::time::sleep(gap).await;
            since += gap;
            gap *= 2;
            let _ = backend.release(&lease).await;
        }
    });
}

/// How a wait that ran out ends: with the last store failure if the store
/// failed since it last answered (so an unreachable store is reported as
/// such, not as a holder), with a failure saying so if it never answered,
/// else [`Error::TimedOut`].
#[derive(Debug, Default)]
struct WaitOutcome {
    answered: bool,
    last_error: Option<Error>,
}

impl WaitOutcome {
    /// The store answered "held".
    fn held(&mut self) {
        self.answered = true;
        self.last_error = None;
    }

    /// An attempt failed (retryably), or the store is in quarantine.
    fn failed(&mut self, err: Error) {
        self.last_error = Some(err);
    }

    /// The error to end the wait with.
    fn take_error(&mut self, backend: &'static str, key: &Key, waited: Duration) -> Error {
        match self.last_error.take() {
            Some(err) => err,
            None if !self.answered => Error::backend(
                backend,
                "acquire",
                true,
                format!("the store did not answer within the wait ({waited:?}) for {key}"),
            ),
            None => Error::TimedOut {
                key: key.to_string(),
                waited,
            },
        }
    }
}

/// Runs `fut` until `deadline` (if any); `None` if the deadline came first,
/// without polling `fut` at all if it has already passed: tokio's timeout
/// polls its future once even then, and a round polled once has sent its
/// attempt, whose answer nobody would wait for (each task let through the
/// local queue at a deadline it shares with the one before it sent one).
async fn until<F: std::future::Future>(
    deadline: Option<tokio::time::Instant>,
    fut: F,
) -> Option<F::Output> {
    match deadline {
        Some(at) if tokio::time::Instant::now() >= at => None,
        Some(at) => tokio::time::timeout_at(at, fut).await.ok(),
        None => Some(fut.await),
    }
}
