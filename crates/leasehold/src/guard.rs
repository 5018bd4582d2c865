//! [`LeaseGuard`]: a held lease, renewed in the background, that says when it
//! is lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{oneshot, watch, OwnedMutexGuard};
use tokio_util::sync::CancellationToken;

use crate::backend::{Backend, Lease};
use crate::clock::SharedClock;
use crate::error::{Error, LossReason, Result};
use crate::key::Key;
use crate::local::LocalKey;
use crate::metric::Labels;
use crate::options::{LossPolicy, ResolvedOptions};
use crate::renewal::RenewalLoop;

/// State shared between a guard and its renewal task.
#[derive(Debug)]
pub(crate) struct GuardState {
    pub key: Key,
    pub fencing_token: u64,
    pub clock: SharedClock,
    /// Safety deadline on `clock`, in nanoseconds: past it the lease counts
    /// as lost.
    deadline_nanos: AtomicU64,
    /// The same deadline, for those who follow it from outside (see
    /// [`LeaseGuard::deadline_watch`]).
    deadline_tx: watch::Sender<Duration>,
    lost: CancellationToken,
    reason: OnceLock<LossReason>,
}

impl GuardState {
    pub fn new(key: Key, fencing_token: u64, clock: SharedClock, deadline: Duration) -> Self {
        GuardState {
            key,
            fencing_token,
            clock,
            deadline_nanos: AtomicU64::new(deadline.as_nanos() as u64),
            deadline_tx: watch::Sender::new(deadline),
            lost: CancellationToken::new(),
            reason: OnceLock::new(),
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

    /// Marks the lease lost (once) and applies the loss policy.
    pub fn mark_lost(&self, reason: LossReason, policy: LossPolicy) {
        if self.reason.set(reason.clone()).is_err() {
            return;
        }
        tracing::warn!(key = %self.key, token = self.fencing_token, %reason, "lease lost");
        if policy == LossPolicy::Abort {
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

/// Sent to the renewal task to end the lease: carries where to report the
/// outcome of the release.
pub(crate) type ReleaseCommand = oneshot::Sender<Result<()>>;

/// A held lease.
///
/// While the guard lives, a background task (a tokio task, not an OS thread)
/// renews the lease every `renew_interval`. If no renewal succeeds before the
/// safety deadline (send time of the last successful request + TTL − safety
/// margin, on the monotonic clock), or the backend says the lease is not ours,
/// the guard becomes lost: [`is_lost`](Self::is_lost) turns true and
/// [`lost`](Self::lost) completes, before the backend could grant the key to
/// anyone else.
///
/// # Release
/// [`release`](Self::release) ends the lease and reports errors. Dropping the
/// guard releases in the background, best effort: if the runtime shuts down
/// first or the backend cannot be reached, the lease ends when its TTL runs
/// out.
#[must_use = "the lease is released as soon as the guard is dropped"]
#[derive(Debug)]
pub struct LeaseGuard {
    state: Arc<GuardState>,
    release_tx: Option<oneshot::Sender<ReleaseCommand>>,
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
    pub(crate) fn start(parts: GuardParts) -> Self {
        let deadline = parts.anchor + parts.opts.ttl - parts.opts.safety_margin;
        let state = Arc::new(GuardState::new(
            parts.lease.key.clone(),
            parts.lease.fencing_token,
            parts.clock.clone(),
            deadline,
        ));
        let (release_tx, release_rx) = oneshot::channel();
        parts.labels.held(1.0);
        let renewal = RenewalLoop {
            backend: parts.backend,
            lease: parts.lease,
            opts: parts.opts,
            state: state.clone(),
            next_renewal: parts.anchor,
            local: parts.local,
            gate: parts.gate,
            group: parts.group,
            labels: parts.labels,
            held_since: Some(std::time::Instant::now()),
        };
        tokio::spawn(renewal.run(release_rx));
        LeaseGuard {
            state,
            release_tx: Some(release_tx),
        }
    }

    /// The key this guard holds.
    pub fn key(&self) -> &Key {
        &self.state.key
    }

    /// The fencing token of this acquisition: strictly greater than every
    /// token issued for this key before, by anyone. Pass it to the resource
    /// you protect so it can reject writes from stale holders.
    pub fn fencing_token(&self) -> u64 {
        self.state.fencing_token
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
    /// [`Clock`](crate::Clock) (for the default [`SystemClock`](crate::SystemClock):
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

    /// Completes when the lease is lost, with the reason.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future changes nothing.
    pub async fn lost(&self) -> LossReason {
        self.state.lost.cancelled().await;
        self.state
            .reason
            .get()
            .cloned()
            .unwrap_or(LossReason::Expired)
    }

    /// A token cancelled when the lease is lost, to hand to code that stops
    /// on cancellation. Cancelling it yourself does not affect the lease.
    pub fn lost_token(&self) -> CancellationToken {
        self.state.lost.child_token()
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
    pub async fn release(mut self) -> Result<()> {
        let (reply_tx, reply_rx) = oneshot::channel();
        let sender = self
            .release_tx
            .take()
            .expect("release_tx is only taken here or in drop");
        if sender.send(reply_tx).is_err() {
            return Err(self.gone_error());
        }
        match reply_rx.await {
            Ok(result) => result,
            Err(_) => Err(self.gone_error()),
        }
    }

    fn gone_error(&self) -> Error {
        Error::LeaseLost {
            key: self.state.key.to_string(),
            reason: self
                .state
                .loss_reason()
                .unwrap_or_else(|| LossReason::Revoked("the renewal task is gone".into())),
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        // Dropping the sender tells the renewal task to release in the
        // background; nothing else to do here.
        self.release_tx.take();
    }
}
