//! Waiting: the loop that runs rounds of attempts until a grant, the wait's
//! deadline or a failure that ends it; one try without waiting; the local
//! queue, wake-ups and the fairness rules (see the [engine](super) docs,
//! "Waiting" and "Fairness").

use super::waiter::{Next, Waiter};
use super::*;

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

/// Runs `fut` until `deadline` (if any); `None` if the deadline came first,
/// without polling `fut` at all if it has already passed: tokio's timeout
/// polls its future once even then, and a round polled once has sent its
/// attempt, whose answer nobody would wait for (each task let through the
/// local queue at a deadline it shares with the one before it sent one).
pub(super) async fn until<F: std::future::Future>(
    deadline: Option<tokio::time::Instant>,
    fut: F,
) -> Option<F::Output> {
    match deadline {
        Some(at) if tokio::time::Instant::now() >= at => None,
        Some(at) => tokio::time::timeout_at(at, fut).await.ok(),
        None => Some(fut.await),
    }
}

impl Engine {
    pub(super) async fn wait_for(
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
        // Only a task that did not queue behind other local waiters gives
        // its first round more than its wait (see [`Waiter::new`]).
        let (gate, queued) = match self.queue.gate.clone().try_lock_owned() {
            Ok(gate) => (gate, false),
            Err(_) => match until(give_up, self.queue.gate.clone().lock_owned()).await {
                Some(gate) => (gate, true),
                None => return Err(timed_out()),
            },
        };
        let mut waiter = Waiter::new(
            started,
            give_up,
            queued,
            self.opts.poll_max,
            self.opts.poll_cap,
        );
        // A lock's guard keeps the gate (the key's) while held; a
        // semaphore's waiter lets the next local waiter poll once it is done.
        let mut queue = Some(gate);
        let mut slots = self.fresh_slots();
        // A registered watch for releases by other processes, kept for the
        // next round.
        let mut watch = None;
        // A writer's grant kept while readers still hold (see [`Gate`]).
        let mut kept: Option<Granted> = None;
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
            let watched = if waiter.gated() {
                self.gate_watch()
            } else {
                &self.slots
            };
            // A release by another process, where the backend can tell
            // (registered before the round, so none is missed).
            let remote = match watch.take() {
                Some(w) => Some(w),
                None if waiter.watching() || give_way => {
                    self.store.backend().watch_release(watched)
                }
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
            let bound = waiter.next_round();
            // A writer waiting for readers asks the gate again, with the
            // key it keeps, unless that lease is lost meanwhile (then it is
            // let go here, and the key asked for again).
            let round = match kept.take().filter(|g| !g.guard.is_lost()) {
                Some(g) => Ok(Round::Granted(g)),
                None => {
                    let Some(round) = until(bound, self.round(&mut slots, &mut queue, true)).await
                    else {
                        return Err(self.wait_error(&mut outcome, started));
                    };
                    round
                }
            };
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
            if waiter.missed(&missed, remote.is_some()) {
                // The first round that found the key held (an uncontended
                // acquire never starts the backend's watcher): where the
                // backend can tell of releases, ask once more at once, in
                // case the key was released before the watch was
                // registered.
                let keys = if waiter.gated() {
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
            let next = waiter.next(&missed, self.opts.poll_pause(), tokio::time::Instant::now());
            match next {
                Next::Again => {}
                Next::Quarantine { epoch, remaining } => {
                    // Nothing was granted: if the wait runs out first, that
                    // is why.
                    on_wait(WaitReason::Quarantine { epoch, remaining });
                    outcome.failed(self.missed_error(missed));
                }
                Next::Held { .. } => {
                    outcome.held();
                    on_wait(WaitReason::Held(&missed.holders));
                }
                Next::Failed { pause } => {
                    let err = self.missed_error(missed);
                    tracing::warn!(error = %err, retry_in = ?pause, "acquire attempt failed; retrying");
                    outcome.failed(err);
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(next.pause()) => {}
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
    pub(super) async fn no_wait(
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
}
