//! [`LeaseGuard`]: a held lease, renewed in the background, that says when it
//! is lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use tokio::sync::{watch, OwnedMutexGuard};
use tokio_util::sync::CancellationToken;

use crate::backend::{Backend, Lease, Owner};
use crate::clock::SharedClock;
use crate::detach::{spawn_background, Detachable};
use crate::error::{Error, LossReason, Result};
use crate::key::Key;
use crate::local::LocalKey;
use crate::metric::Labels;
use crate::options::{LossPolicy, ResolvedOptions};
use crate::renewal::{RenewalLoop, Scheduled};
use crate::runs::{RunOutcome, RunRecord, RunReport};

/// State shared between a guard and its renewal task.
#[derive(Debug)]
pub(crate) struct GuardState {
    pub key: Key,
    /// The token the guard shows: the lease's own, or, for a reader of a
    /// [`RwLock`](crate::RwLock), the one its gate worked out.
    fencing_token: AtomicU64,
    pub clock: SharedClock,
    /// Safety deadline on `clock`, in nanoseconds: past it the lease counts
    /// as lost.
    deadline_nanos: AtomicU64,
    /// The same deadline, for those who follow it from outside (see
    /// [`LeaseGuard::deadline_watch`]).
    deadline_tx: watch::Sender<Duration>,
    lost: CancellationToken,
    reason: OnceLock<LossReason>,
    policy: LossPolicy,
    /// The key's local state, and the gate this guard keeps local waiters
    /// out with until the lease is let go.
    local: Arc<LocalKey>,
    gate: Mutex<Option<OwnedMutexGuard<()>>>,
    /// Also rung when the lease is let go (a semaphore's waiters).
    group: Option<Arc<LocalKey>>,
    pub labels: Labels,
    /// When the lease was granted; taken when the hold is recorded.
    held_since: Mutex<Option<std::time::Instant>>,
    /// Counted among the key's local guards until let go.
    counted: std::sync::atomic::AtomicBool,
}

impl GuardState {
    /// A lease just granted: until its first renewal, it is safe until
    /// `deadline`.
    fn new(parts: &mut GuardParts, deadline: Duration) -> Self {
        GuardState {
            key: parts.lease.key.clone(),
            fencing_token: AtomicU64::new(parts.lease.fencing_token),
            clock: parts.clock.clone(),
            deadline_nanos: AtomicU64::new(deadline.as_nanos() as u64),
            deadline_tx: watch::Sender::new(deadline),
            lost: CancellationToken::new(),
            reason: OnceLock::new(),
            policy: parts.opts.loss_policy,
            local: parts.local.clone(),
            gate: Mutex::new(parts.gate.take()),
            group: parts.group.take(),
            labels: parts.labels,
            held_since: Mutex::new(Some(std::time::Instant::now())),
            counted: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// The safety deadline; zero once the lease is known lost to it.
    pub fn deadline(&self) -> Duration {
        Duration::from_nanos(self.deadline_nanos.load(Ordering::Acquire))
    }

    /// Moves the deadline to `deadline` after a successful renewal. Refused
    /// (false) if the current deadline has already passed: a lease once lost
    /// stays lost, even if a renewal sent before the deadline is answered
    /// after it.
    pub fn set_deadline(&self, deadline: Duration) -> bool {
        let new = deadline.as_nanos() as u64;
        loop {
            let current = self.deadline_nanos.load(Ordering::Acquire);
            if current == 0 || self.clock.now().as_nanos() as u64 >= current {
                return false;
            }
            if self
                .deadline_nanos
                .compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.deadline_tx.send_replace(deadline);
                return true;
            }
        }
    }

    /// The lease is lost: records it, marks it (once) and applies the loss
    /// policy.
    pub fn lose(&self, reason: LossReason) {
        if self.end_hold() {
            self.labels.loss(&reason);
        }
        self.mark_lost(reason);
    }

    /// Records the hold time and the held gauge, once; whether this call
    /// did.
    fn end_hold(&self) -> bool {
        let since = self
            .held_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(since) = since {
            self.labels.hold_time(since.elapsed());
            self.labels.held(-1.0);
        }
        since.is_some()
    }

    /// Opens the local gate and wakes local waiters: the lease is no longer
    /// ours to keep from them.
    pub fn let_go(&self) {
        if self.counted.swap(false, Ordering::AcqRel) {
            self.local.guard_ended();
        }
        self.local.note_release();
        self.gate.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.local.released.notify_waiters();
        if let Some(group) = &self.group {
            group.note_release();
            group.released.notify_waiters();
        }
    }

    /// Marks the lease lost (once) and applies the loss policy.
    fn mark_lost(&self, reason: LossReason) {
        if self.reason.set(reason.clone()).is_err() {
            return;
        }
        tracing::warn!(key = %self.key, token = self.fencing_token.load(Ordering::Relaxed), %reason, "lease lost");
        if self.policy == LossPolicy::Abort {
            tracing::error!(key = %self.key, "aborting the process: lease lost and the loss policy is Abort");
            eprintln!(
                "leasehold: lease on {} lost ({reason}); aborting the process",
                self.key
            );
            std::process::abort();
        }
        self.lost.cancel();
    }

    /// Why the lease is lost, if it is. Seeing the deadline passed makes the
    /// loss final (the deadline is swapped for zero, which
    /// [`set_deadline`](Self::set_deadline) never moves again), so `is_lost`
    /// never goes from true back to false.
    pub fn loss_reason(&self) -> Option<LossReason> {
        if let Some(r) = self.reason.get() {
            return Some(r.clone());
        }
        loop {
            let current = self.deadline_nanos.load(Ordering::Acquire);
            if current == 0 {
                return Some(LossReason::Expired);
            }
            if (self.clock.now().as_nanos() as u64) < current {
                return None;
            }
            if self
                .deadline_nanos
                .compare_exchange(current, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Some(LossReason::Expired);
            }
        }
    }
}

/// What ending a lease needs: the guard keeps it until it is released or
/// dropped.
struct Holding {
    backend: Arc<dyn Backend>,
    lease: Lease,
    opts: ResolvedOptions,
    state: Arc<GuardState>,
}

impl Holding {
    /// Records the run, if any, then releases the lease and lets local
    /// waiters in.
    async fn end(self, run: Option<RunReport>) -> Result<()> {
        let recorded = match run {
            Some(run) => self.record(run).await,
            None => Ok(()),
        };
        // A lost lease or a failed release says more than a failed record;
        // otherwise the record's failure is the news.
        self.release().await.and(recorded)
    }

    /// Records how a run under the lease ended (see
    /// [`LeaseGuard::release_with`]): never as a success once the lease is
    /// lost.
    async fn record(&self, run: RunReport) -> Result<()> {
        let mut owner = Owner::current();
        owner.label = self.opts.label.clone();
        let outcome = match self.state.loss_reason() {
            Some(_) => RunOutcome::LeaseLost,
            None => run.outcome,
        };
        let record = RunRecord::new(
            outcome,
            run.started_at,
            SystemTime::now(),
            owner,
            self.lease.fencing_token,
        )
        .with_exit_code(run.exit_code);
        match self.backend.record_run(&self.lease, &record).await {
            Ok(()) => Ok(()),
            Err(lost @ Error::LeaseLost { .. }) => {
                if outcome == RunOutcome::Succeeded {
                    // Not ours any more (the store says so before our clock
                    // did): keep the attempt as the last run where the
                    // store allows, never as a success.
                    let attempt = RunRecord {
                        outcome: RunOutcome::LeaseLost,
                        ..record
                    };
                    let _ = self.backend.record_run(&self.lease, &attempt).await;
                }
                // Reported even if the release that follows goes through
                // (Azure lets a broken lease be released by its id).
                Err(lost)
            }
            Err(err) => {
                tracing::warn!(key = %self.lease.key, error = %err, "could not record the run");
                Err(err)
            }
        }
    }

    /// Releases the lease on the backend, then lets local waiters in.
    async fn release(&self) -> Result<()> {
        let state = &self.state;
        let lost = state.loss_reason();
        let result = match &lost {
            // Someone else's now: a release with our id would be refused.
            Some(LossReason::Revoked(_)) => Ok(()),
            _ => self.backend.release(&self.lease).await,
        };
        if state.end_hold() {
            if let Some(reason) = &lost {
                // Lost on the clock before the renewal task noticed.
                state.labels.loss(reason);
            }
        }
        state.labels.release(match (&lost, &result) {
            (Some(_), _) => "lost",
            (None, Ok(())) => "ok",
            (None, Err(_)) => "error",
        });
        state.let_go();
        match (lost, result) {
            (Some(reason), _) => Err(Error::LeaseLost {
                key: self.lease.key.to_string(),
                reason,
            }),
            (None, Ok(())) => {
                tracing::debug!(key = %self.lease.key, token = self.lease.fencing_token, "released");
                Ok(())
            }
            (None, Err(err)) => {
                tracing::warn!(key = %self.lease.key, error = %err, "release failed; the lease ends at its TTL");
                Err(err)
            }
        }
    }
}

/// A view of a held lease, for the code that works under it (see
/// [`LeaseGuard::held`] and [`Lock::run`](crate::Lock::run)): its key,
/// fencing token and loss signal. It cannot release the lease. Once the
/// guard is released or dropped, nothing renews the lease: the handle
/// reads as lost from the lease's last safety deadline on (and at once if
/// it was lost before), so work that outlives its guard is told to stop.
/// Cheap to clone; `'static`, so it can move into a task.
#[derive(Clone)]
pub struct HeldLease {
    state: Arc<GuardState>,
}

impl std::fmt::Debug for HeldLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLease")
            .field("key", &self.state.key)
            .field("fencing_token", &self.fencing_token())
            .field("lost", &self.state.loss_reason())
            .finish()
    }
}

impl HeldLease {
    /// The key the lease is on.
    pub fn key(&self) -> &Key {
        &self.state.key
    }

    /// The lease's fencing token (see [`LeaseGuard::fencing_token`]).
    pub fn fencing_token(&self) -> u64 {
        self.state.fencing_token.load(Ordering::Relaxed)
    }

    /// Whether the lease is lost (see [`LeaseGuard::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.state.loss_reason().is_some()
    }

    /// A token cancelled when the lease is lost (see
    /// [`LeaseGuard::lost_token`]).
    pub fn lost_token(&self) -> CancellationToken {
        self.state.lost.child_token()
    }

    /// Completes when the lease is lost, with the reason (see
    /// [`LeaseGuard::lost`]).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future changes nothing.
    pub async fn lost(&self) -> LossReason {
        let state = &self.state;
        let mut deadline = state.deadline_tx.subscribe();
        loop {
            if let Some(reason) = state.loss_reason() {
                return reason;
            }
            let at = *deadline.borrow_and_update();
            // The renewal task marks a loss the store reports; the
            // deadline is watched here too, so that a guard whose renewal
            // task is gone (its runtime shut down) is still told, on the
            // store's clock.
            tokio::select! {
                _ = state.lost.cancelled() => {}
                _ = state.clock.sleep_until(at) => {}
                _ = deadline.changed() => {}
            }
        }
    }
}

/// A held lease.
///
/// While the guard lives, a background task (a tokio task, not an OS thread)
/// renews the lease every `renew_interval`. If no renewal succeeds before the
/// safety deadline (send time of the last successful request + the TTL,
/// capped at the [confirmation window](crate::CONFIRMATION_WINDOW), −
/// safety margin, on the store's [`Clock`](crate::backend::Clock)), or the backend
/// says the lease is not ours, the guard becomes lost:
/// [`is_lost`](Self::is_lost) turns true and [`lost`](Self::lost)
/// completes, before the backend could grant the key to anyone else.
///
/// # Suspend
/// The default clock, [`SystemClock`](crate::backend::SystemClock), counts the time
/// the machine spends suspended (`CLOCK_BOOTTIME` on Linux), and the
/// renewal task waits on it, not on tokio's timers (which do not count a
/// suspend): if the machine sleeps past the deadline, the guard is lost on
/// resume, and [`lost`](Self::lost) completes then (see the renewal
/// task's [waits](crate::backend::Clock::sleep_until)).
///
/// # Release
/// [`release`](Self::release) ends the lease and reports errors. Dropping the
/// guard (on any thread) releases in the background on the runtime that
/// granted it, best effort: if that runtime shuts down first or the backend
/// cannot be reached, the lease ends when its TTL runs out. A process about
/// to exit awaits [`Store::close`](crate::Store::close) (or
/// [`finish_background`](crate::finish_background)) last, so that the exit
/// does not cut such a release short.
#[must_use = "the lease is released as soon as the guard is dropped"]
pub struct LeaseGuard {
    state: Arc<GuardState>,
    /// Taken when the guard is released or dropped.
    holding: Option<Holding>,
    /// Stops the renewal task.
    stop: CancellationToken,
    /// The renewal task until it starts.
    scheduled: Scheduled,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("key", &self.state.key)
            .field("fencing_token", &self.fencing_token())
            .field("lost", &self.state.loss_reason())
            .finish_non_exhaustive()
    }
}

/// Everything needed to start a guard's renewal task.
pub(crate) struct GuardParts {
    pub backend: Arc<dyn Backend>,
    pub lease: Lease,
    pub opts: ResolvedOptions,
    pub clock: SharedClock,
    /// Send time of the request that established the lease.
    pub anchor: Duration,
    pub local: Arc<LocalKey>,
    pub gate: Option<OwnedMutexGuard<()>>,
    /// Also rung when the guard lets go (a semaphore's waiters queue there).
    pub group: Option<Arc<LocalKey>>,
    /// Metrics labels.
    pub labels: Labels,
}

impl LeaseGuard {
    /// Starts renewing a lease just granted. Called inside a tokio runtime.
    pub(crate) fn start(mut parts: GuardParts) -> Self {
        let deadline = parts.anchor + parts.opts.trusted - parts.opts.safety_margin;
        let state = Arc::new(GuardState::new(&mut parts, deadline));
        parts.labels.held(1.0);
        let stop = CancellationToken::new();
        let renewal = RenewalLoop {
            backend: parts.backend.clone(),
            lease: parts.lease.clone(),
            opts: parts.opts.clone(),
            state: state.clone(),
            next_renewal: parts.anchor,
            stop: stop.clone(),
        };
        let scheduled = renewal.schedule();
        LeaseGuard {
            state: state.clone(),
            holding: Some(Holding {
                backend: parts.backend,
                lease: parts.lease,
                opts: parts.opts,
                state,
            }),
            stop,
            scheduled,
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// The key this guard holds.
    pub fn key(&self) -> &Key {
        &self.state.key
    }

    /// The fencing token of this acquisition: strictly greater than every
    /// token issued for this key before, by anyone. Pass it to the resource
    /// you protect so it can reject writes from stale holders.
    ///
    /// A reader of a [`RwLock`](crate::RwLock) shows the token of the lock's
    /// key instead (see [its docs](crate::RwLock#fencing-tokens)).
    pub fn fencing_token(&self) -> u64 {
        self.state.fencing_token.load(Ordering::Relaxed)
    }

    /// Shows `token` as this guard's fencing token from now on (a reader of
    /// a reader-writer lock, before the guard is handed out).
    pub(crate) fn show_fencing_token(&self, token: u64) {
        self.state.fencing_token.store(token, Ordering::Relaxed);
    }

    /// The store epoch the lease was granted in.
    pub(crate) fn lease_epoch(&self) -> u64 {
        self.holding.as_ref().map_or(0, |h| h.lease.epoch)
    }

    /// Whether the lease is lost. Checks the safety deadline against the
    /// clock at the moment of the call, so it is right even if the process was
    /// paused and the renewal task has not run yet.
    pub fn is_lost(&self) -> bool {
        self.state.loss_reason().is_some()
    }

    /// Why the lease is lost, or `None` while it is held.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.state.loss_reason()
    }

    /// How much longer the lease is certainly ours without another successful
    /// renewal (zero once lost).
    pub fn valid_for(&self) -> Duration {
        if self.state.reason.get().is_some() {
            return Duration::ZERO;
        }
        self.state.deadline().saturating_sub(self.state.clock.now())
    }

    /// The safety deadline, as it moves: past it the lease counts as lost
    /// unless a renewal moved it first. The value is a time on the store's
    /// [`Clock`](crate::backend::Clock) (for the default [`SystemClock`](crate::backend::SystemClock):
    /// `CLOCK_BOOTTIME` on Linux, which every process on the machine shares),
    /// and changes after each successful renewal. It does not move back when
    /// the lease is lost for another reason: watch [`lost`](Self::lost) too.
    ///
    /// This is for enforcing the deadline outside this process, where this
    /// process might be frozen or killed: `leasehold run` hands it to a
    /// watchdog process that stops the command when the deadline passes.
    pub fn deadline_watch(&self) -> watch::Receiver<Duration> {
        self.state.deadline_tx.subscribe()
    }

    /// Completes when the lease is lost, with the reason: at the safety
    /// deadline on the store's clock at the latest (on resume, if the
    /// machine was suspended past it), even where no renewal task runs any
    /// more (the runtime that granted the lease was shut down while the
    /// guard lived on: it completes at once if [`is_lost`](Self::is_lost)
    /// is already true, or at the deadline). It waits on the store's
    /// clock, not on tokio's timer, so it may be awaited on any runtime.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future changes nothing.
    pub async fn lost(&self) -> LossReason {
        self.held().lost().await
    }

    /// A token cancelled when the lease is lost, to hand to code that stops
    /// on cancellation. Cancelling it yourself does not affect the lease.
    ///
    /// The renewal task cancels it; once the runtime that granted the lease
    /// is gone, nothing does: await [`lost`](Self::lost) there instead.
    pub fn lost_token(&self) -> CancellationToken {
        self.state.lost.child_token()
    }

    /// A handle on this guard's lease for code that runs under it: its key,
    /// fencing token and loss signal, without the power to release it
    /// (what [`Lock::run`](crate::Lock::run) hands its work).
    pub fn held(&self) -> HeldLease {
        HeldLease {
            state: self.state.clone(),
        }
    }

    /// Ends the lease and reports how that went.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the lease was lost before the release (the
    /// guard's critical section may have overlapped another holder's), or a
    /// backend error if the release request failed (the lease then ends at
    /// its TTL).
    ///
    /// # Cancel safety
    /// The release goes on in the background if this future is dropped.
    pub async fn release(self) -> Result<()> {
        self.end(None).await
    }

    /// Records how a run of a job under this lease ended, then ends the
    /// lease and reports how that went (see
    /// [run records](crate::backend#run-records)).
    ///
    /// The guard completes `run` into a [`RunRecord`](crate::RunRecord):
    /// this process as the owner (with the lock's owner label), the lease's
    /// fencing token, and now as the end time. It is stored as the key's
    /// last run and, if its outcome is
    /// [`Succeeded`](crate::RunOutcome::Succeeded), as its last success,
    /// but only while the lease is still this guard's: if the lease is lost
    /// (the safety deadline passed, or the store says it is someone else's),
    /// the run is recorded as [`LeaseLost`](crate::RunOutcome::LeaseLost)
    /// where the store allows, and never as a success. The lease is released
    /// whatever happened to the record.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the lease was lost before the run was
    /// recorded (no success was recorded); a backend error if the record
    /// could not be written (the lease is still released; no success may
    /// have been recorded: a later run may run the job again) or the
    /// release failed.
    ///
    /// # Cancel safety
    /// The record and release go on in the background if this future is
    /// dropped.
    pub async fn release_with(self, run: RunReport) -> Result<()> {
        self.end(Some(run)).await
    }

    async fn end(mut self, run: Option<RunReport>) -> Result<()> {
        let holding = self
            .holding
            .take()
            .expect("holding is only taken here or in drop");
        self.stop.cancel();
        self.scheduled.cancel();
        // In the caller's task: no round trip through another task.
        Detachable::new(|_| holding.end(run)).await
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.stop.cancel();
        self.scheduled.cancel();
        if let Some(holding) = self.holding.take() {
            spawn_background(&self.runtime, async move {
                let _ = holding.end(None).await;
            });
        }
    }
}
