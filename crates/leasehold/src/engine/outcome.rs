//! How an acquisition ends without a lease: the error a missed round, a
//! late grant or a wait that ran out gives (see the [engine](super) docs,
//! "How a wait ends without a lease").

use super::*;

/// How a wait that ran out ends: with the last store failure if the store
/// failed since it last answered (so an unreachable store is reported as
/// such, not as a holder), with a failure saying so if it never answered,
/// else [`Error::TimedOut`].
#[derive(Debug, Default)]
pub(super) struct WaitOutcome {
    pub(super) answered: bool,
    pub(super) last_error: Option<Error>,
}

impl WaitOutcome {
    /// The store answered "held".
    pub(super) fn held(&mut self) {
        self.answered = true;
        self.last_error = None;
    }

    /// An attempt failed (retryably), or the store is in quarantine.
    pub(super) fn failed(&mut self, err: Error) {
        self.last_error = Some(err);
    }

    /// The error to end the wait with.
    pub(super) fn take_error(
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

impl Engine {
    /// How a wait begun at `started` ends when it runs out. The store
    /// answered if it answered this task, or this process on this key
    /// during the wait or the longest poll interval before it: a task let
    /// through the queue just before its deadline, or with a wait shorter
    /// than a round trip, may run out inside its first attempt, on a store
    /// that answers well.
    pub(super) fn wait_error(
        &self,
        outcome: &mut WaitOutcome,
        started: tokio::time::Instant,
    ) -> Error {
        let since = started.checked_sub(self.opts.poll_max).unwrap_or(started);
        if self.queue.answered_since(since) {
            outcome.answered = true;
        }
        outcome.take_error(self.store.backend().name(), &self.name, started.elapsed())
    }

    /// The error a round that got nothing ends a `try_acquire` with.
    pub(super) fn missed_error(&self, missed: Missed) -> Error {
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
    pub(super) fn late_grant(&self) -> Error {
        self.retry_acquire(
            "the store answered after the lease's safety deadline (a slow store or network, \
             or this process paused), so the grant was let go and nothing was obtained; \
             try again",
        )
    }

    /// A retryable failure of an acquisition, saying `why`.
    pub(super) fn retry_acquire(&self, why: &'static str) -> Error {
        Error::backend(self.store.backend().name(), "acquire", true, why)
    }

    pub(super) fn epoch_kept_changing(&self) -> Error {
        self.retry_acquire(
            "the store's epoch changed at every attempt (is the store being deleted and re-created?)",
        )
    }
}
