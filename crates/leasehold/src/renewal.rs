//! The background task that keeps a lease alive and detects its loss.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::backend::{Backend, Lease};
use crate::error::{Error, LossReason};
use crate::guard::GuardState;
use crate::options::ResolvedOptions;

/// Renews one lease until it is lost or its guard stops it (released or
/// dropped: the guard itself then releases the lease).
pub(crate) struct RenewalLoop {
    pub backend: Arc<dyn Backend>,
    pub lease: Lease,
    pub opts: ResolvedOptions,
    pub state: Arc<GuardState>,
    /// Clock time at which the next renewal is due, minus one interval (the
    /// send time of the last successful request).
    pub next_renewal: Duration,
    /// Cancelled by the guard when it ends the lease; a renewal in flight is
    /// abandoned.
    pub stop: CancellationToken,
}

enum Step {
    Renewed,
    Stop,
    Lost,
}

impl RenewalLoop {
    pub async fn run(mut self) {
        self.next_renewal += self.opts.renew_interval;
        let mut failures: u32 = 0;
        loop {
            match self.step(&mut failures).await {
                Step::Renewed => continue,
                Step::Stop => return,
                Step::Lost => {
                    // Let local waiters try the backend now; the lease is no
                    // longer ours to keep from them. The guard releases it.
                    self.state.let_go();
                    return;
                }
            }
        }
    }

    /// Waits for the next renewal (or the deadline, or the guard's stop) and
    /// performs it.
    async fn step(&mut self, failures: &mut u32) -> Step {
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
            _ = self.stop.cancelled() => return Step::Stop,
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
            _ = self.stop.cancelled() => return Step::Stop,
            // Whatever the network does, the guard is lost at the deadline.
            r = tokio::time::timeout(deadline - sent, self.backend.renew(&self.lease)) => r,
        };
        self.state.labels.renewal(match &outcome {
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
        self.state.lose(reason);
    }
}
