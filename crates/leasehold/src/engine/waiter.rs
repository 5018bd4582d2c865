//! The state one wait keeps between its rounds, and the rules that move it
//! (see the [engine](super) docs, "Waiting"): which deadline a round is
//! given, when to start watching for releases by other processes, and what
//! to do after a round that missed, and how long to pause before the next
//! poll of a key that stays held (quick at first, then backing off towards
//! the cap while the same holders keep it). A [`Waiter`] decides and
//! [`Engine::wait_for`](super::Engine) acts (sends the rounds, registers
//! the watches, sleeps): it holds no store, no clock and no task, so its
//! transitions are tested below on instants made up by the tests.

use std::time::Duration;

use tokio::time::Instant;

use super::late::FIRST_ANSWER;
use super::round::Missed;

/// The growth of the pause after consecutive failed rounds stops at
/// `2^MAX_BACKOFF_DOUBLINGS` times a poll pause.
const MAX_BACKOFF_DOUBLINGS: u32 = 5;

/// How long a wait polls within the poll interval while it finds the same
/// holders, before it backs off (see [`LockOptions::poll_cap`](crate::LockOptions::poll_cap)).
pub(crate) const QUICK_FOR: Duration = Duration::from_secs(2);

/// How long after a holder's lease runs out (by the store's account) a
/// backed-off wait asks again: timer slack and the store's clock.
const EXPIRY_SLACK: Duration = Duration::from_millis(20);

/// One wait's state between rounds.
#[derive(Debug)]
pub(super) struct Waiter {
    /// When the wait runs out (`None`: it never does).
    give_up: Option<Instant>,
    /// The first round's deadline: `give_up`, but no sooner than
    /// [`FIRST_ANSWER`] after the wait started unless the waiter queued
    /// behind other local waiters.
    first_bound: Option<Instant>,
    /// No round has been sent yet.
    first: bool,
    /// Rounds in a row that failed (neither held nor quarantined).
    failures: u32,
    /// Watching for releases by other processes, from the first round that
    /// found the key held.
    watching: bool,
    /// The last miss was the gate's (a reader-writer lock's other side):
    /// the keys to watch are the gate's, not the engine's slots.
    gated: bool,
    /// The poll interval's scale at the cap: `poll_cap / poll_max`.
    cap_factor: f64,
    /// The holders (their fencing tokens, sorted) the last held round
    /// found, and since when rounds have found just them.
    holders: Vec<u64>,
    same_since: Option<Instant>,
    /// Pauses backed off since then (each doubles the poll pause).
    slow: u32,
    /// Since when rounds have found one of those holders' leases ended by
    /// the store's account while it still answers "held".
    ended_since: Option<Instant>,
}

/// What the wait does after a round that missed and did not start a watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// A grant came too late and was let go: ask again at once.
    Again,
    /// The store is in quarantine (store epoch `epoch`): wait it out, to its
    /// end and no further.
    Quarantine { epoch: u64, remaining: Duration },
    /// The key is held: poll again after a poll pause.
    Held { pause: Duration },
    /// The round failed: retry after a pause that doubles with each failed
    /// round in a row.
    Failed { pause: Duration },
}

impl Next {
    /// How long to pause before the next round (unless woken first).
    pub(super) fn pause(self) -> Duration {
        match self {
            Next::Again => Duration::ZERO,
            Next::Quarantine { remaining, .. } => remaining,
            Next::Held { pause } | Next::Failed { pause } => pause,
        }
    }
}

impl Waiter {
    /// A wait that started at `started` and runs out at `give_up`; `queued`
    /// if it waited behind other local waiters for its first round (then
    /// the first round gets no more time than the wait has: tasks sharing
    /// a deadline send what one task sends).
    /// `poll_max` and `poll_cap` are the wait's options: its pauses back
    /// off to at most the poll pause times `poll_cap / poll_max`.
    pub(super) fn new(
        started: Instant,
        give_up: Option<Instant>,
        queued: bool,
        poll_max: Duration,
        poll_cap: Duration,
    ) -> Self {
        // The first round is given FIRST_ANSWER to answer, however short
        // the wait: a store that answers a moment after the wait ran out
        // has not failed, and its answer (granted, or held: timed out) is
        // the wait's.
        let first_bound = match queued {
            true => give_up,
            false => give_up.map(|at| at.max(started + FIRST_ANSWER)),
        };
        Waiter {
            give_up,
            first_bound,
            first: true,
            failures: 0,
            watching: false,
            gated: false,
            cap_factor: (poll_cap.as_secs_f64() / poll_max.as_secs_f64()).max(1.0),
            holders: Vec::new(),
            same_since: None,
            slow: 0,
            ended_since: None,
        }
    }

    /// The deadline of the round about to be sent (and of its gate's
    /// check); later rounds, and the pauses between them, end at the
    /// wait's own deadline.
    pub(super) fn next_round(&mut self) -> Option<Instant> {
        let bound = match self.first {
            true => self.first_bound,
            false => self.give_up,
        };
        self.first = false;
        bound
    }

    /// Whether the wait watches for releases by other processes (from the
    /// first round that found the key held).
    pub(super) fn watching(&self) -> bool {
        self.watching
    }

    /// Whether the last miss was the gate's: the keys to watch are the
    /// gate's.
    pub(super) fn gated(&self) -> bool {
        self.gated
    }

    /// Notes a round that missed. True if the caller should register a
    /// watch on the keys now and, if the backend gives one, ask again at
    /// once without a pause (a release before the watch was registered is
    /// then not missed): the first round that found the key held, unless
    /// a watch was already registered for this round (on the slots; the
    /// gate's keys are others), the store is in quarantine (nothing would
    /// be granted) or the grant came late (asked again at once anyway).
    pub(super) fn missed(&mut self, missed: &Missed, watched_this_round: bool) -> bool {
        if missed.gated != self.gated {
            // Waiting on other keys now: watch those.
            self.gated = missed.gated;
            self.watching = false;
        }
        if !missed.held || self.watching {
            return false;
        }
        self.watching = true;
        (!watched_this_round || self.gated) && missed.quarantine.is_none() && !missed.late
    }

    /// What to do after a round that missed at `now` (and
    /// [`missed`](Self::missed) started no watch), `poll` being a poll
    /// pause drawn from the wait's poll bounds.
    pub(super) fn next(&mut self, missed: &Missed, poll: Duration, now: Instant) -> Next {
        if missed.late {
            Next::Again
        } else if let Some((epoch, remaining)) = missed.quarantine {
            self.failures = 0;
            Next::Quarantine { epoch, remaining }
        } else if missed.held {
            self.failures = 0;
            Next::Held {
                pause: self.held_pause(missed, poll, now),
            }
        } else {
            self.failures += 1;
            let doublings = self.failures.min(MAX_BACKOFF_DOUBLINGS);
            Next::Failed {
                pause: poll.saturating_mul(1 << doublings),
            }
        }
    }

    /// The pause after a round that found the key held: the poll pause
    /// while the wait is young or the holders change; while the same
    /// holders keep the key past [`QUICK_FOR`], doubling each time up to
    /// the cap; and never past the moment the store said the first of
    /// their leases runs out.
    fn held_pause(&mut self, missed: &Missed, poll: Duration, now: Instant) -> Duration {
        let mut tokens: Vec<u64> = missed.holders.iter().map(|h| h.fencing_token).collect();
        tokens.sort_unstable();
        let since = match self.same_since {
            Some(since) if tokens == self.holders => since,
            _ => {
                self.holders = tokens;
                self.same_since = Some(now);
                self.slow = 0;
                self.ended_since = None;
                now
            }
        };
        if now.saturating_duration_since(since) < QUICK_FOR {
            return poll;
        }
        // A lease the store says has ended while it still answers "held":
        // on DynamoDB and S3 the key passes once a waiter has seen the
        // record unchanged for its TTL, a moment after the end the holder's
        // clock gave it. Quick polls then, but for no longer than a TTL
        // (and QUICK_FOR) from when it was first seen ended: a holder
        // whose clock is far behind ours seems ended all along.
        if missed
            .holders
            .iter()
            .any(|h| h.expires_in == Some(Duration::ZERO))
        {
            let ended = *self.ended_since.get_or_insert(now);
            let ttl = missed.holders.iter().filter_map(|h| h.ttl).max();
            let quick = ttl.unwrap_or(QUICK_FOR) + QUICK_FOR;
            if now.saturating_duration_since(ended) < quick {
                return poll;
            }
        } else {
            // Renewed after all: a later end is timed afresh.
            self.ended_since = None;
        }
        self.slow = (self.slow + 1).min(32);
        let factor = 2f64.powi(self.slow as i32).min(self.cap_factor);
        let pause = poll.mul_f64(factor);
        // A holder that died leaves the key when its lease runs out: ask
        // then (a live one will have renewed, and the pause that follows
        // is measured from its new expiry). Ended leases (above) give no
        // such moment.
        let ends = missed
            .holders
            .iter()
            .filter_map(|h| h.expires_in)
            .filter(|d| !d.is_zero())
            .min();
        match ends {
            Some(ends) => pause.min(ends.saturating_add(EXPIRY_SLACK).max(poll)),
            None => pause,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLL: Duration = Duration::from_millis(100);

    /// A waiter with the default poll bounds' max and cap (a cap of 20
    /// polls).
    fn waiter(started: Instant, give_up: Option<Instant>, queued: bool) -> Waiter {
        Waiter::new(started, give_up, queued, POLL, POLL * 20)
    }

    fn held() -> Missed {
        Missed {
            held: true,
            ..Missed::default()
        }
    }

    fn failed() -> Missed {
        Missed::default()
    }

    #[test]
    fn the_first_round_gets_its_first_answer_time_however_short_the_wait() {
        let started = Instant::now();
        let give_up = started + Duration::from_millis(10);
        let mut w = waiter(started, Some(give_up), false);
        assert_eq!(w.next_round(), Some(started + FIRST_ANSWER));
        assert_eq!(
            w.next_round(),
            Some(give_up),
            "later rounds end with the wait"
        );
        assert_eq!(w.next_round(), Some(give_up));
    }

    #[test]
    fn a_long_wait_gives_its_first_round_the_whole_wait() {
        let started = Instant::now();
        let give_up = started + FIRST_ANSWER * 3;
        let mut w = waiter(started, Some(give_up), false);
        assert_eq!(w.next_round(), Some(give_up));
    }

    #[test]
    fn a_waiter_that_queued_gets_no_more_than_its_wait_for_its_first_round() {
        let started = Instant::now();
        let give_up = started + Duration::from_millis(10);
        let mut w = waiter(started, Some(give_up), true);
        assert_eq!(w.next_round(), Some(give_up));
    }

    #[test]
    fn a_wait_without_deadline_gives_rounds_none() {
        let mut w = waiter(Instant::now(), None, false);
        assert_eq!(w.next_round(), None);
        assert_eq!(w.next_round(), None);
    }

    #[test]
    fn the_first_held_round_starts_watching_and_asks_again_at_once_only_then() {
        let mut w = waiter(Instant::now(), None, false);
        assert!(!w.watching());
        assert!(
            !w.missed(&failed(), false),
            "a failure is no reason to watch"
        );
        assert!(!w.watching());
        assert!(
            w.missed(&held(), false),
            "the first held round: watch, ask again"
        );
        assert!(w.watching());
        assert!(!w.missed(&held(), true), "watching already: no second ask");
        assert!(!w.missed(&held(), false));
        assert!(w.watching());
    }

    #[test]
    fn a_round_that_already_watched_the_slots_does_not_ask_again_at_once() {
        let mut w = waiter(Instant::now(), None, false);
        assert!(!w.missed(&held(), true));
        assert!(w.watching(), "it watches from now on all the same");
    }

    #[test]
    fn no_ask_at_once_in_quarantine_or_after_a_late_grant() {
        let quarantined = Missed {
            held: true,
            quarantine: Some((7, Duration::from_secs(3))),
            ..Missed::default()
        };
        let mut w = waiter(Instant::now(), None, false);
        assert!(!w.missed(&quarantined, false));
        assert!(w.watching());
        let late = Missed {
            held: true,
            late: true,
            ..Missed::default()
        };
        let mut w = waiter(Instant::now(), None, false);
        assert!(!w.missed(&late, false));
        assert!(w.watching());
    }

    #[test]
    fn a_miss_by_the_gate_watches_the_gates_keys_afresh_and_back() {
        let gated = Missed {
            held: true,
            gated: true,
            ..Missed::default()
        };
        let mut w = waiter(Instant::now(), None, false);
        assert!(w.missed(&held(), false));
        assert!(!w.gated());
        // The gate held the grant back: other keys, watched from now on,
        // and asked again at once even though the slots were watched.
        assert!(w.missed(&gated, true));
        assert!(w.gated() && w.watching());
        assert!(!w.missed(&gated, true));
        // Back to the slots: watching them starts again.
        assert!(w.missed(&held(), false));
        assert!(!w.gated());
    }

    #[test]
    fn failures_back_off_doubling_up_to_a_cap_and_a_held_answer_resets_them() {
        let mut w = waiter(Instant::now(), None, false);
        let pauses: Vec<_> = (0..7)
            .map(|_| w.next(&failed(), POLL, Instant::now()).pause())
            .collect();
        assert_eq!(
            pauses,
            [2, 4, 8, 16, 32, 32, 32].map(|n| POLL * n),
            "doubling from 2x, capped at 32x"
        );
        assert_eq!(
            w.next(&held(), POLL, Instant::now()),
            Next::Held { pause: POLL }
        );
        assert_eq!(
            w.next(&failed(), POLL, Instant::now()).pause(),
            POLL * 2,
            "reset by the held answer"
        );
    }

    #[test]
    fn a_quarantine_is_waited_out_to_its_end_and_resets_the_backoff() {
        let mut w = waiter(Instant::now(), None, false);
        w.next(&failed(), POLL, Instant::now());
        w.next(&failed(), POLL, Instant::now());
        let remaining = Duration::from_millis(2_345);
        let quarantined = Missed {
            quarantine: Some((9, remaining)),
            ..Missed::default()
        };
        assert_eq!(
            w.next(&quarantined, POLL, Instant::now()),
            Next::Quarantine {
                epoch: 9,
                remaining
            }
        );
        assert_eq!(w.next(&failed(), POLL, Instant::now()).pause(), POLL * 2);
    }

    #[test]
    fn a_late_grant_is_asked_again_at_once_and_leaves_the_backoff_alone() {
        let mut w = waiter(Instant::now(), None, false);
        w.next(&failed(), POLL, Instant::now());
        let late = Missed {
            late: true,
            ..Missed::default()
        };
        assert_eq!(w.next(&late, POLL, Instant::now()), Next::Again);
        assert_eq!(w.next(&late, POLL, Instant::now()).pause(), Duration::ZERO);
        assert_eq!(
            w.next(&failed(), POLL, Instant::now()).pause(),
            POLL * 4,
            "still counting"
        );
    }

    /// A miss that found the key held by holders with these tokens, whose
    /// leases run out after `expires_in` if given.
    fn held_by(tokens: &[u64], expires_in: Option<Duration>) -> Missed {
        use crate::backend::{HolderInfo, Owner};
        Missed {
            held: true,
            holders: tokens
                .iter()
                .map(|&t| HolderInfo::new(Owner::current(), t).with_expires_in(expires_in))
                .collect(),
            ..Missed::default()
        }
    }

    /// The pauses of rounds sent at `at` (offsets from `t0`), each finding
    /// `missed`.
    fn pauses(w: &mut Waiter, t0: Instant, at: &[u64], missed: &Missed) -> Vec<Duration> {
        at.iter()
            .map(|&ms| w.next(missed, POLL, t0 + Duration::from_millis(ms)).pause())
            .collect()
    }

    #[test]
    fn a_wait_polls_quickly_for_its_first_seconds_then_backs_off_doubling_to_the_cap() {
        let t0 = Instant::now();
        let mut w = waiter(t0, None, false);
        let same = held_by(&[7], None);
        assert_eq!(
            pauses(&mut w, t0, &[0, 100, 1_000, 1_999], &same),
            [POLL; 4],
            "quick while young"
        );
        assert_eq!(
            pauses(
                &mut w,
                t0,
                &[2_000, 2_200, 2_600, 3_400, 5_000, 7_000, 9_000, 60_000],
                &same
            ),
            [2, 4, 8, 16, 20, 20, 20, 20].map(|n| POLL * n),
            "doubling from 2x, capped at poll_cap / poll_max = 20x"
        );
    }

    #[test]
    fn other_holders_start_the_quick_polls_again() {
        let t0 = Instant::now();
        let mut w = waiter(t0, None, false);
        pauses(
            &mut w,
            t0,
            &[0, 2_000, 2_200, 2_600, 3_400],
            &held_by(&[7], None),
        );
        assert_eq!(
            pauses(&mut w, t0, &[5_000, 6_000, 6_999], &held_by(&[8], None)),
            [POLL; 3],
            "the key changed hands: quick again"
        );
        assert_eq!(
            pauses(&mut w, t0, &[7_000, 7_200], &held_by(&[8], None)),
            [POLL * 2, POLL * 4],
            "and backing off once the new holder has kept it 2 s"
        );
        // A semaphore's holders: the same set in another order is the
        // same holders; one more is not.
        let mut w = waiter(t0, None, false);
        pauses(&mut w, t0, &[0], &held_by(&[3, 9], None));
        assert_eq!(
            pauses(&mut w, t0, &[2_000], &held_by(&[9, 3], None)),
            [POLL * 2]
        );
        assert_eq!(
            pauses(&mut w, t0, &[2_200], &held_by(&[3, 9, 11], None)),
            [POLL]
        );
    }

    #[test]
    fn a_backed_off_wait_asks_again_when_the_holders_lease_runs_out() {
        let t0 = Instant::now();
        let mut w = waiter(t0, None, false);
        let ending = held_by(&[7], Some(Duration::from_millis(300)));
        assert_eq!(pauses(&mut w, t0, &[0], &ending), [POLL], "young: quick");
        assert_eq!(
            pauses(&mut w, t0, &[2_000, 2_200, 2_600], &ending),
            [POLL * 2, POLL * 3 + EXPIRY_SLACK, POLL * 3 + EXPIRY_SLACK],
            "never past the lease's end"
        );
        let nearly = held_by(&[7], Some(Duration::from_millis(1)));
        assert_eq!(
            pauses(&mut w, t0, &[3_000], &nearly),
            [POLL],
            "nor below a poll"
        );
        // Of several holders, the first lease to run out counts.
        let mut w = waiter(t0, None, false);
        let mut two = held_by(&[1, 2], Some(Duration::from_secs(30)));
        two.holders[1].expires_in = Some(Duration::from_millis(500));
        pauses(&mut w, t0, &[0, 2_000, 2_200, 2_600], &two);
        assert_eq!(
            pauses(&mut w, t0, &[3_400], &two),
            [Duration::from_millis(500) + EXPIRY_SLACK]
        );
    }

    #[test]
    fn a_cap_no_longer_than_the_poll_interval_never_backs_off() {
        let t0 = Instant::now();
        let mut w = Waiter::new(t0, None, false, POLL, POLL);
        assert_eq!(
            pauses(
                &mut w,
                t0,
                &[0, 2_000, 10_000, 60_000],
                &held_by(&[7], None)
            ),
            [POLL; 4]
        );
    }

    #[test]
    fn failures_and_quarantines_leave_the_held_backoff_alone() {
        let t0 = Instant::now();
        let mut w = waiter(t0, None, false);
        let same = held_by(&[7], None);
        pauses(&mut w, t0, &[0, 2_000, 2_200], &same);
        w.next(&failed(), POLL, t0 + Duration::from_millis(2_600));
        assert_eq!(pauses(&mut w, t0, &[3_000], &same), [POLL * 8]);
    }

    #[test]
    fn a_lease_said_ended_while_still_held_is_polled_quickly_for_a_ttl_and_no_longer() {
        let t0 = Instant::now();
        let mut w = waiter(t0, None, false);
        let live = held_by(&[7], Some(Duration::from_secs(2)));
        pauses(&mut w, t0, &[0, 2_000, 2_200, 2_600], &live);
        let mut ended = held_by(&[7], Some(Duration::ZERO));
        ended.holders[0].ttl = Some(Duration::from_secs(2));
        assert_eq!(
            pauses(&mut w, t0, &[4_000, 4_100, 7_900], &ended),
            [POLL; 3],
            "quick from the first sight of the end, for its TTL + 2 s"
        );
        assert_eq!(
            pauses(&mut w, t0, &[8_000, 8_200], &ended),
            [POLL * 16, POLL * 20],
            "then backing off again (a holder whose clock is behind ours)"
        );
        // Another holder: quick again, and its end is timed afresh.
        let mut other = held_by(&[8], Some(Duration::ZERO));
        other.holders[0].ttl = Some(Duration::from_secs(2));
        assert_eq!(
            pauses(&mut w, t0, &[9_000, 11_000, 14_900], &other),
            [POLL; 3]
        );
        assert_eq!(pauses(&mut w, t0, &[15_100], &other), [POLL * 2]);
    }

    #[test]
    fn a_store_that_says_a_lease_ends_in_the_far_future_is_polled_at_the_cap() {
        // A corrupt or hostile record (DynamoDB's and S3's expiry is the
        // writer's number): no overflow, the cap still bounds the pause.
        let t0 = Instant::now();
        let mut w = waiter(t0, None, false);
        let far = held_by(&[7], Some(Duration::MAX));
        assert_eq!(
            pauses(&mut w, t0, &[0, 2_000, 2_200], &far),
            [POLL, POLL * 2, POLL * 4]
        );
    }
}
