//! [`Lock`]: a mutex on one key of a store.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, OwnedMutexGuard};
use tracing::Instrument;

use crate::backend::{
    AcquireOutcome, AcquireRequest, Backend, HolderInfo, KeyInfo, Lease, LeaseId, Owner,
};
use crate::clock::SharedClock;
use crate::epoch::Clearance;
use crate::error::{Error, Result};
use crate::guard::{GuardParts, LeaseGuard};
use crate::key::Key;
use crate::local::LocalKey;
use crate::metric::{Kind, Labels};
use crate::options::{ResolvedOptions, Wait};
use crate::store::Store;

/// A named mutex: at most one holder at a time across every process that
/// uses the same store. Made by [`Store::lock`] or [`Store::lock_with`].
///
/// A `Lock` is cheap to clone; clones share the in-process wake-ups of the
/// store they came from.
#[derive(Debug, Clone)]
pub struct Lock {
    store: Store,
    key: Key,
    opts: ResolvedOptions,
    owner: Owner,
    /// The `kind` metrics label.
    kind: Kind,
    /// Rung, besides the key's own notifier, when a guard of this lock lets
    /// go (a semaphore's slots share one, so its waiters hear of any slot).
    group: Option<Arc<LocalKey>>,
}

impl Lock {
    pub(crate) fn new(store: Store, key: Key, opts: ResolvedOptions) -> Self {
        let mut owner = Owner::current();
        owner.label = opts.label.clone();
        Lock {
            store,
            key,
            opts,
            owner,
            kind: Kind::Lock,
            group: None,
        }
    }

    /// Makes this lock count as `kind` in metrics and ring `group` (if any)
    /// when its guards let go.
    pub(crate) fn part_of(mut self, kind: Kind, group: Option<Arc<LocalKey>>) -> Self {
        self.kind = kind;
        self.group = group;
        self
    }

    pub(crate) fn labels(&self) -> Labels {
        Labels {
            backend: self.store.backend().name(),
            kind: self.kind,
        }
    }

    pub(crate) fn options(&self) -> &ResolvedOptions {
        &self.opts
    }

    /// The key this lock is on.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The owner identity stored with this lock's leases.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The lease TTL.
    pub fn ttl(&self) -> Duration {
        self.opts.ttl
    }

    /// What the store holds for this key now.
    ///
    /// # Errors
    /// Backend failures.
    pub async fn inspect(&self) -> Result<KeyInfo> {
        self.store.backend().inspect(&self.key).await
    }

    /// One attempt to take the lock, without waiting.
    ///
    /// # Errors
    /// [`Error::Held`] with the holder's description if someone else holds
    /// the key; backend failures.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped while the request is in flight
    /// and the backend grants the lease anyway, it is released in the
    /// background at once.
    pub async fn try_acquire(&self) -> Result<LeaseGuard> {
        let started = tokio::time::Instant::now();
        let result = self.try_once().await;
        self.labels().acquire(&result, started.elapsed());
        result
    }

    /// [`try_acquire`](Self::try_acquire) without the per-call metrics (the
    /// caller records its own).
    pub(crate) async fn try_once(&self) -> Result<LeaseGuard> {
        let local = self.store.local_key(&self.key);
        // Take the local gate if it is free so local waiters queue behind us;
        // if another task of ours holds it, try the backend anyway: it decides.
        let gate = local.gate.clone().try_lock_owned().ok();
        let mut pending = PendingLease::new(
            self.store.backend().clone(),
            self.lease_for(LeaseId::random(), 0),
        );
        let sent = self.clock().now();
        match self.attempt(&mut pending.lease).await {
            Ok(AcquireOutcome::Acquired(_)) if self.too_late(sent) => {
                // A guard made now would be lost already: let the lease go.
                pending.arm();
                pending.release_in_background();
                Err(Error::backend(
                    self.store.backend().name(),
                    "acquire",
                    true,
                    "the store answered after the lease's safety deadline",
                ))
            }
            Ok(AcquireOutcome::Acquired(grant)) => {
                Ok(self.make_guard(&mut pending, grant.fencing_token, sent, local, gate))
            }
            Ok(AcquireOutcome::Held(holder)) => Err(self.held(holder)),
            Ok(AcquireOutcome::OtherEpoch(_)) => Err(self.epoch_kept_changing()),
            Err(err) => {
                if err.is_retryable() {
                    pending.arm();
                }
                Err(err)
            }
        }
        .inspect(|g| tracing::debug!(key = %self.key, token = g.fencing_token(), "acquired"))
    }

    /// Takes the lock, waiting up to `wait` for the holder to let go.
    ///
    /// While waiting, the backend is polled after a random pause between the
    /// poll bounds, and a release by a guard of this same process (same
    /// [`Store`]) wakes the first local waiter at once. Tasks of one process
    /// waiting on one key queue in FIFO order, and only the first polls the
    /// backend. So that a process with many waiting tasks does not keep a
    /// contended key for good, once local handoffs have kept it in the
    /// process for 20 longest poll intervals (2 s by default), the next local
    /// waiter stands back for one poll interval, long enough for every other
    /// process's waiter to try once.
    ///
    /// # Errors
    /// [`Error::TimedOut`] when the wait runs out; non-retryable backend
    /// failures (retryable ones are retried while the wait lasts).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future never leaves a lease behind (a lease
    /// granted to a request in flight is released in the background), and
    /// gives up this task's place in the local queue.
    pub async fn acquire(&self, wait: impl Into<Wait>) -> Result<LeaseGuard> {
        self.acquire_with(wait, |_| {}).await
    }

    /// Like [`acquire`](Self::acquire), calling `on_held` with what the
    /// backend said about the holder every time an attempt finds the key held
    /// (for progress displays).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_with(
        &self,
        wait: impl Into<Wait>,
        mut on_held: impl FnMut(Option<&HolderInfo>),
    ) -> Result<LeaseGuard> {
        self.acquire_reporting(wait, |reason| {
            if let WaitReason::Held(holder) = reason {
                on_held(holder)
            }
        })
        .await
    }

    /// Like [`acquire`](Self::acquire), calling `on_wait` with the reason
    /// every time an attempt does not get the lease: the key is held (with
    /// what the backend said about the holder), or the store's data is new
    /// and in quarantine (see [`Error::Quarantined`]). For status lines.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_reporting(
        &self,
        wait: impl Into<Wait>,
        mut on_wait: impl FnMut(WaitReason<'_>),
    ) -> Result<LeaseGuard> {
        let wait = wait.into();
        let started = tokio::time::Instant::now();
        let result = self.wait_for(wait, started, &mut on_wait).await;
        self.labels().acquire(&result, started.elapsed());
        result
    }

    async fn wait_for(
        &self,
        wait: Wait,
        started: tokio::time::Instant,
        on_wait: &mut impl FnMut(WaitReason<'_>),
    ) -> Result<LeaseGuard> {
        let give_up = wait.deadline(started);
        // What ends the wait when it runs out: the last failure if the store
        // failed since it last answered "held" (a store that cannot be
        // reached is not a holder), else the time-out.
        let mut outcome = WaitOutcome::default();
        let timed_out = |outcome: &mut WaitOutcome| {
            outcome.take_error(self.store.backend().name(), &self.key, started.elapsed())
        };
        let span = tracing::debug_span!("acquire", key = %self.key, ?wait);
        async {
            let local = self.store.local_key(&self.key);
            let gate = match until(give_up, local.gate.clone().lock_owned()).await {
                Some(gate) => gate,
                None => return Err(Error::TimedOut { key: self.key.to_string(), waited: started.elapsed() }),
            };
            if local.take_turn_elsewhere(self.opts.poll_max, self.opts.poll_max * FAIR_SHARE_POLLS) {
                // Other processes poll at most poll_max apart: each gets a
                // try while this process stands back.
                tracing::debug!("local handoffs kept the key here long enough; standing back for one poll interval");
                tokio::select! {
                    _ = tokio::time::sleep(self.opts.poll_max) => {}
                    _ = until(give_up, std::future::pending::<()>()) => {
                        return Err(Error::TimedOut { key: self.key.to_string(), waited: started.elapsed() })
                    }
                }
            }
            let mut gate = Some(gate);
            let mut pending = PendingLease::new(self.store.backend().clone(), self.lease_for(LeaseId::random(), 0));
            // Send time of the first attempt since our id was last known not
            // to hold the key: the lease, if granted, dates from no earlier.
            let mut anchor = None;
            let mut failures = 0u32;
            loop {
                let released = local.released.notified();
                tokio::pin!(released);
                released.as_mut().enable();
                // A release by another process, where the backend can tell.
                let remote = self.store.backend().watch_release(&self.key);

                let sent = self.clock().now();
                let anchor_now = *anchor.get_or_insert(sent);
                // The attempt too ends at the deadline (its task releases a
                // lease granted after that), so SDK retries cannot stretch
                // the wait.
                let Some(answer) = until(give_up, self.attempt(&mut pending.lease)).await else {
                    return Err(timed_out(&mut outcome));
                };
                let pause = match answer {
                    Ok(AcquireOutcome::Acquired(grant)) => {
                        if self.too_late(anchor_now) {
                            // Granted so late (a slow answer, or ambiguous
                            // retries) that it is past its safety deadline:
                            // let it go and start afresh with a new id.
                            pending.arm();
                            pending.release_in_background();
                            pending = PendingLease::new(self.store.backend().clone(), self.lease_for(LeaseId::random(), 0));
                            anchor = None;
                            continue;
                        }
                        let guard = self.make_guard(&mut pending, grant.fencing_token, anchor_now, local.clone(), gate.take());
                        tracing::debug!(token = guard.fencing_token(), waited = ?started.elapsed(), "acquired");
                        return Ok(guard);
                    }
                    Ok(AcquireOutcome::Held(holder)) => {
                        failures = 0;
                        outcome.held();
                        anchor = None;
                        pending.disarm();
                        on_wait(WaitReason::Held(holder.as_ref()));
                        self.opts.poll_pause()
                    }
                    Err(Error::Quarantined { key, epoch, remaining }) => {
                        // Nothing was granted: wait the quarantine out. If
                        // the wait runs out first, that is why.
                        failures = 0;
                        anchor = None;
                        pending.disarm();
                        on_wait(WaitReason::Quarantine { epoch, remaining });
                        outcome.failed(Error::Quarantined { key, epoch, remaining });
                        remaining + self.opts.poll_pause()
                    }
                    Ok(AcquireOutcome::OtherEpoch(_)) => {
                        failures += 1;
                        anchor = None;
                        pending.disarm();
                        tracing::warn!(error = %self.epoch_kept_changing(), "retrying");
                        self.opts.poll_pause().saturating_mul(1 << failures.min(5))
                    }
                    Err(err) if err.is_retryable() => {
                        failures += 1;
                        pending.arm();
                        let pause = self.opts.poll_pause().saturating_mul(1 << failures.min(5));
                        tracing::warn!(error = %err, retry_in = ?pause, "acquire attempt failed; retrying");
                        outcome.failed(err);
                        pause
                    }
                    Err(err) => return Err(err),
                };
                let sleep = tokio::time::sleep(pause);
                tokio::select! {
                    _ = sleep => {}
                    _ = released => { tracing::trace!("woken by a local release"); }
                    _ = async { match remote { Some(w) => w.await, None => std::future::pending().await } } => {
                        tracing::trace!("woken by a release elsewhere");
                    }
                    _ = until(give_up, std::future::pending::<()>()) => return Err(timed_out(&mut outcome)),
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Whether a lease whose request was sent at `sent` is already past its
    /// safety deadline.
    fn too_late(&self, sent: Duration) -> bool {
        self.clock().now() >= sent + self.opts.ttl - self.opts.safety_margin
    }

    fn clock(&self) -> &SharedClock {
        self.store.clock()
    }

    fn lease_for(&self, lease_id: LeaseId, fencing_token: u64) -> Lease {
        Lease {
            key: self.key.clone(),
            lease_id,
            ttl: self.opts.ttl,
            fencing_token,
            epoch: 0,
        }
    }

    fn epoch_kept_changing(&self) -> Error {
        Error::backend(
            self.store.backend().name(),
            "acquire",
            true,
            "the store's epoch changed at every attempt (is the store being deleted and re-created?)",
        )
    }

    fn held(&self, holder: Option<HolderInfo>) -> Error {
        Error::Held {
            key: self.key.to_string(),
            holder: holder.map(Box::new),
        }
    }

    fn make_guard(
        &self,
        pending: &mut PendingLease,
        fencing_token: u64,
        anchor: Duration,
        local: Arc<LocalKey>,
        gate: Option<OwnedMutexGuard<()>>,
    ) -> LeaseGuard {
        pending.disarm();
        local.note_grant(self.opts.poll_max);
        let mut lease = pending.lease.clone();
        lease.fencing_token = fencing_token;
        LeaseGuard::start(GuardParts {
            backend: self.store.backend().clone(),
            lease,
            opts: self.opts.clone(),
            clock: self.clock().clone(),
            anchor,
            local,
            gate,
            group: self.group.clone(),
            labels: self.labels(),
        })
    }

    /// One attempt in the store epoch this store has cleared, learning the
    /// store's epoch first if need be (see [`Error::Quarantined`]). Sets
    /// `lease.epoch` to the epoch asked for. Never answers `Acquired` in an
    /// epoch that is still in quarantine.
    async fn attempt(&self, lease: &mut Lease) -> Result<AcquireOutcome> {
        let gate = self.store.epochs();
        let mut outcome = Ok(AcquireOutcome::OtherEpoch(crate::StoreEpoch::new(
            0,
            Duration::ZERO,
        )));
        // Usually one request; one more when the epoch is news (the first
        // attempt of a process, or after the store was re-created).
        for _ in 0..3 {
            let epoch = gate.cleared();
            lease.epoch = epoch.unwrap_or(0);
            // With nothing cleared yet (None) this only learns the epoch.
            outcome = self.send_attempt(lease, epoch).await;
            let Ok(AcquireOutcome::OtherEpoch(reported)) = &outcome else {
                return outcome;
            };
            match gate.saw(self.store.backend().name(), reported)? {
                Clearance::Cleared(_) => continue,
                Clearance::Quarantined { epoch, remaining } => {
                    return Err(Error::Quarantined {
                        key: self.key.to_string(),
                        epoch,
                        remaining,
                    })
                }
            }
        }
        outcome
    }

    /// One backend attempt, run in its own task so that dropping the caller
    /// cannot strand a granted lease: if nobody is left to receive a grant
    /// (or an ambiguous failure), the task releases the lease itself.
    async fn send_attempt(&self, lease: &Lease, epoch: Option<u64>) -> Result<AcquireOutcome> {
        let backend = self.store.backend().clone();
        let request = AcquireRequest {
            key: self.key.clone(),
            lease_id: lease.lease_id.clone(),
            ttl: self.opts.ttl,
            owner: self.owner.clone(),
            data: self.opts.data.clone(),
            epoch,
        };
        let lease = lease.clone();
        let labels = self.labels();
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            let outcome = backend.try_acquire(&request).await;
            labels.attempt(match &outcome {
                Ok(AcquireOutcome::Acquired(_)) => "acquired",
                Ok(AcquireOutcome::Held(_)) => "held",
                Ok(AcquireOutcome::OtherEpoch(_)) => "other_epoch",
                Err(_) => "error",
            });
            match tx.send(outcome) {
                Ok(()) => {}
                Err(Ok(AcquireOutcome::Held(_) | AcquireOutcome::OtherEpoch(_))) => {}
                Err(Err(e)) if !e.is_retryable() => {}
                Err(_granted_or_unknown) => {
                    let _ = backend.release(&lease).await;
                }
            }
        });
        rx.await.unwrap_or_else(|_| {
            Err(Error::backend(
                self.store.backend().name(),
                "acquire",
                true,
                "the acquire task ended without an answer",
            ))
        })
    }
}

/// How many longest poll intervals a process may keep a contended key
/// through local handoffs before it stands back for one interval, so that
/// other processes' waiters get their turn (2 s with the default polling).
pub(crate) const FAIR_SHARE_POLLS: u32 = 20;

/// Why a waiting acquisition has not got the lease yet, as reported to
/// [`Lock::acquire_reporting`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum WaitReason<'a> {
    /// Someone else holds the key; who, when the backend could tell.
    Held(Option<&'a HolderInfo>),
    /// The store's data is new to this process (store epoch `epoch`) and
    /// nothing is granted for `remaining` (see [`Error::Quarantined`]).
    Quarantine {
        /// The new store epoch.
        epoch: u64,
        /// How long the quarantine lasts from now.
        remaining: Duration,
    },
}

/// A lease id that may hold the key without our knowing (after an ambiguous
/// failure). If still armed when dropped, it is released in the background.
struct PendingLease {
    backend: Arc<dyn Backend>,
    lease: Lease,
    armed: bool,
}

impl PendingLease {
    fn new(backend: Arc<dyn Backend>, lease: Lease) -> Self {
        PendingLease {
            backend,
            lease,
            // A drop during an attempt is covered by the attempt's own task;
            // only an ambiguous failure arms this.
            armed: false,
        }
    }

    fn arm(&mut self) {
        self.armed = true;
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    fn release_in_background(&mut self) {
        if std::mem::take(&mut self.armed) {
            let backend = self.backend.clone();
            let lease = self.lease.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = backend.release(&lease).await;
                });
            }
        }
    }
}

impl Drop for PendingLease {
    fn drop(&mut self) {
        self.release_in_background();
    }
}

/// How a wait that ran out ends: with the last store failure if the store
/// failed since it last answered (so an unreachable store is reported as
/// such, not as a holder), with a failure saying so if it never answered,
/// else [`Error::TimedOut`].
#[derive(Debug, Default)]
pub(crate) struct WaitOutcome {
    answered: bool,
    last_error: Option<Error>,
}

impl WaitOutcome {
    /// The store answered "held".
    pub(crate) fn held(&mut self) {
        self.answered = true;
        self.last_error = None;
    }

    /// An attempt failed (retryably).
    pub(crate) fn failed(&mut self, err: Error) {
        self.last_error = Some(err);
    }

    /// The error to end the wait with.
    pub(crate) fn take_error(
        &mut self,
        backend: &'static str,
        key: &Key,
        waited: Duration,
    ) -> Error {
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

/// Runs `fut` until `deadline` (if any); `None` if the deadline came first.
async fn until<F: std::future::Future>(
    deadline: Option<tokio::time::Instant>,
    fut: F,
) -> Option<F::Output> {
    match deadline {
        Some(at) => tokio::time::timeout_at(at, fut).await.ok(),
        None => Some(fut.await),
    }
}
