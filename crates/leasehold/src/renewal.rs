//! The background task that keeps a lease alive and detects its loss.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, OwnedMutexGuard};

use crate::backend::{Backend, Lease};
use crate::error::{Error, LossReason, Result};
use crate::guard::{GuardState, ReleaseCommand};
use crate::local::LocalKey;
use crate::metric::Labels;
use crate::options::ResolvedOptions;

/// Renews one lease until it is released or lost.
pub(crate) struct RenewalLoop {
    pub backend: Arc<dyn Backend>,
    pub lease: Lease,
    pub opts: ResolvedOptions,
    pub state: Arc<GuardState>,
    /// Clock time at which the next renewal is due, minus one interval (the
    /// send time of the last successful request).
    pub next_renewal: Duration,
    pub local: Arc<LocalKey>,
    pub gate: Option<OwnedMutexGuard<()>>,
    /// Also rung when the lease is let go (a semaphore's waiters).
    pub group: Option<Arc<LocalKey>>,
    pub labels: Labels,
    /// When the lease was granted; taken when the hold is recorded.
    pub held_since: Option<std::time::Instant>,
}

enum Step {
    Renewed,
    Release(Option<ReleaseCommand>),
    Lost,
}

impl RenewalLoop {
    pub async fn run(mut self, mut release_rx: oneshot::Receiver<ReleaseCommand>) {
        self.next_renewal += self.opts.renew_interval;
        let mut failures: u32 = 0;
        let command = loop {
            match self.step(&mut release_rx, &mut failures).await {
                Step::Renewed => continue,
                Step::Release(reply) => break reply,
                Step::Lost => {
                    // Let local waiters try the backend now; the lease is no
                    // longer ours to keep from them.
                    self.let_go();
                    break (&mut release_rx).await.ok();
                }
            }
        };
        let result = self.release().await;
        if let Some(reply) = command {
            let _ = reply.send(result);
        }
    }

    /// Waits for the next renewal (or the deadline, or a release command) and
    /// performs it.
    async fn step(
        &mut self,
        release_rx: &mut oneshot::Receiver<ReleaseCommand>,
        failures: &mut u32,
    ) -> Step {
        let clock = self.state.clock.clone();
        let deadline = self.state.deadline();
        let now = clock.now();
        if now >= deadline {
            self.lose(LossReason::Expired);
            return Step::Lost;
        }
        let wake = self.next_renewal.min(deadline);
        tokio::select! {
            biased;
            cmd = &mut *release_rx => return Step::Release(cmd.ok()),
            _ = tokio::time::sleep(wake.saturating_sub(now)) => {}
        }
        let sent = clock.now();
        if sent >= deadline {
            self.lose(LossReason::Expired);
            return Step::Lost;
        }
        if sent < self.next_renewal {
            return Step::Renewed;
        }
        let outcome = tokio::select! {
            biased;
            cmd = &mut *release_rx => return Step::Release(cmd.ok()),
            // Whatever the network does, the guard is lost at the deadline.
            r = tokio::time::timeout(deadline - sent, self.backend.renew(&self.lease)) => r,
        };
        self.labels.renewal(match &outcome {
            Ok(Ok(())) => "ok",
            Ok(Err(Error::LeaseLost { .. })) | Err(_) => "lost",
            Ok(Err(_)) => "error",
        });
        match outcome {
            Ok(Ok(())) => {
                *failures = 0;
                if !self
                    .state
                    .set_deadline(sent + self.opts.ttl - self.opts.safety_margin)
                {
                    // Answered after the deadline passed: the lease may have
                    // been counted as lost already, and stays so.
                    self.lose(LossReason::Expired);
                    return Step::Lost;
                }
                self.next_renewal = sent + self.opts.renew_interval;
                tracing::trace!(key = %self.lease.key, token = self.lease.fencing_token, "renewed");
                Step::Renewed
            }
            Ok(Err(Error::LeaseLost { reason, .. })) => {
                self.lose(reason);
                Step::Lost
            }
            Ok(Err(err)) => {
                *failures += 1;
                let pause = self.backoff(*failures);
                tracing::warn!(key = %self.lease.key, error = %err, retry_in = ?pause, "renewal failed; retrying until the safety deadline");
                self.next_renewal = clock.now() + pause;
                Step::Renewed
            }
            Err(_elapsed) => {
                self.lose(LossReason::Expired);
                Step::Lost
            }
        }
    }

    /// Exponential backoff with jitter for retrying a failed renewal:
    /// 50 ms, 100 ms, … capped at a quarter of the renew interval.
    fn backoff(&self, failures: u32) -> Duration {
        use rand::Rng;
        let cap = (self.opts.renew_interval / 4).max(Duration::from_millis(10));
        let base = Duration::from_millis(50)
            .saturating_mul(1u32 << failures.min(16))
            .min(cap);
        base.mul_f64(rand::rng().random_range(0.5..=1.0))
    }

    fn lose(&mut self, reason: LossReason) {
        if self.held_since.is_some() {
            self.labels.loss(&reason);
        }
        self.end_hold();
        self.state.mark_lost(reason, self.opts.loss_policy);
    }

    /// Records the hold time and the held gauge, once.
    fn end_hold(&mut self) {
        if let Some(since) = self.held_since.take() {
            self.labels.hold_time(since.elapsed());
            self.labels.held(-1.0);
        }
    }

    /// Opens the local gate and wakes local waiters.
    fn let_go(&mut self) {
        self.local.note_release();
        self.gate.take();
        self.local.released.notify_waiters();
        if let Some(group) = &self.group {
            group.note_release();
            group.released.notify_waiters();
        }
    }

    /// Releases the lease on the backend, then lets local waiters in.
    async fn release(&mut self) -> Result<()> {
        let lost = self.state.loss_reason();
        let result = match &lost {
            // Someone else's now: a release with our id would be refused.
            Some(LossReason::Revoked(_)) => Ok(()),
            _ => self.backend.release(&self.lease).await,
        };
        if let (Some(reason), Some(_)) = (&lost, self.held_since) {
            // Lost on the clock before the loop got to notice.
            self.labels.loss(reason);
        }
        self.end_hold();
        self.labels.release(match (&lost, &result) {
            (Some(_), _) => "lost",
            (None, Ok(())) => "ok",
            (None, Err(_)) => "error",
        });
        self.let_go();
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
