//! The store-epoch quarantine, written once for every backend (see
//! [store epochs](crate::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)).

use std::sync::Mutex;
use std::time::Duration;

use crate::backend::StoreEpoch;
use crate::clock::SharedClock;
use crate::error::{Error, Result};

/// Which store epoch a [`Store`](crate::Store) (one "process") may grant
/// in, and since when.
#[derive(Debug)]
pub(crate) struct EpochGate {
    clock: SharedClock,
    state: Mutex<GateState>,
}

#[derive(Debug, Default)]
struct GateState {
    /// The epoch grants may be asked for in (quarantine over).
    cleared: Option<u64>,
    /// The newest epoch seen, and what its quarantine runs from.
    newest: Option<Seen>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    epoch: u64,
    /// When this process first saw it (on `clock`).
    first_seen: Duration,
    /// How much of the quarantine the store vouched for then: the epoch's
    /// reported age, less 0.1 % for a store clock that runs fast.
    credit: Duration,
}

impl Seen {
    /// When the quarantine ends on `clock`: one confirmation window (plus
    /// 0.1 % for a clock here that runs fast) from the epoch's beginning,
    /// which was at least `credit` before it was first seen.
    fn until(&self, window: Duration) -> Duration {
        let full = window.saturating_add(window / 1000);
        self.first_seen + full.saturating_sub(self.credit)
    }
}

/// What the gate says about an epoch a backend reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Clearance {
    /// Grants may be asked for in this epoch now.
    Cleared(u64),
    /// Not before this much time has passed.
    Quarantined { epoch: u64, remaining: Duration },
}

impl EpochGate {
    pub fn new(clock: SharedClock) -> Self {
        EpochGate {
            clock,
            state: Mutex::default(),
        }
    }

    /// The epoch to name in acquire requests (`None` before one is cleared).
    pub fn cleared(&self) -> Option<u64> {
        self.lock().cleared
    }

    /// Takes note of the epoch a backend reported and says whether grants
    /// may be asked for in it, with `window` the confirmation window (see
    /// [`CONFIRMATION_WINDOW`](crate::CONFIRMATION_WINDOW)): a new epoch
    /// is cleared once a whole window has passed since it began, so that
    /// every holder of an earlier epoch has passed its loss deadline (its
    /// last confirmed renewal, which was before the epoch began, plus at
    /// most the window). The store's max TTL plays no part: it says nothing
    /// about the leases of the data that was lost.
    ///
    /// # Errors
    /// A non-retryable backend error when the epoch is older than one this
    /// store has seen: the store went back (a restored copy of an older
    /// store), and its tokens could repeat ones already issued.
    pub fn saw(
        &self,
        backend: &'static str,
        reported: &StoreEpoch,
        window: Duration,
    ) -> Result<Clearance> {
        let now = self.clock.now();
        let mut state = self.lock();
        match state.newest {
            Some(seen) if reported.epoch < seen.epoch => {
                return Err(Error::backend(
                    backend,
                    "acquire",
                    false,
                    format!(
                        "the store's epoch went back from {} to {} (a restored copy of an older store?): its fencing tokens could repeat earlier ones, so nothing is granted; re-create the store",
                        seen.epoch, reported.epoch
                    ),
                ));
            }
            Some(seen) if reported.epoch == seen.epoch => {}
            _ => {
                // First sight: the quarantine runs from now, less what the
                // store vouches for.
                let age = reported.age.unwrap_or(Duration::ZERO);
                let seen = Seen {
                    epoch: reported.epoch,
                    first_seen: now,
                    credit: age - age / 1000,
                };
                let left = seen.until(window).saturating_sub(now);
                if !left.is_zero() {
                    tracing::warn!(
                        backend,
                        epoch = reported.epoch,
                        quarantine = ?left,
                        "new store epoch: no lease is granted until holders of any lost data have stopped"
                    );
                }
                state.newest = Some(seen);
                state.cleared = None;
            }
        }
        let seen = state.newest.expect("set above");
        let until = seen.until(window);
        if now >= until {
            state.cleared = Some(seen.epoch);
            Ok(Clearance::Cleared(seen.epoch))
        } else {
            Ok(Clearance::Quarantined {
                epoch: seen.epoch,
                remaining: until - now,
            })
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;
    use crate::CONFIRMATION_WINDOW;

    const W: Duration = CONFIRMATION_WINDOW;

    fn epoch(e: u64, age: Option<u64>) -> StoreEpoch {
        StoreEpoch::new(e, Duration::from_secs(60)).with_age(age.map(Duration::from_secs))
    }

    #[test]
    fn new_epoch_waits_the_window_less_age() {
        let clock = Arc::new(ManualClock::new(Duration::from_secs(1000)));
        let gate = EpochGate::new(clock.clone());
        assert_eq!(gate.cleared(), None);
        let Clearance::Quarantined { remaining, .. } = gate.saw("t", &epoch(5, None), W).unwrap()
        else {
            panic!("an epoch of unknown age is quarantined")
        };
        assert_eq!(remaining, Duration::from_millis(60_060));
        clock.advance(Duration::from_secs(60));
        assert!(matches!(
            gate.saw("t", &epoch(5, None), W).unwrap(),
            Clearance::Quarantined { .. }
        ));
        clock.advance(Duration::from_millis(60));
        assert_eq!(
            gate.saw("t", &epoch(5, None), W).unwrap(),
            Clearance::Cleared(5)
        );
        assert_eq!(gate.cleared(), Some(5));

        // A newer epoch voids the clearance; an old enough one needs no
        // wait. The age is credited less 0.1 % (a store clock running
        // fast): 50 s of age leaves 10.11 s.
        let Clearance::Quarantined { remaining, .. } =
            gate.saw("t", &epoch(9, Some(50)), W).unwrap()
        else {
            panic!("quarantined")
        };
        assert_eq!(remaining, Duration::from_millis(10_110));
        assert_eq!(gate.cleared(), None);
        assert_eq!(
            gate.saw("t", &epoch(12, Some(61)), W).unwrap(),
            Clearance::Cleared(12)
        );
    }

    #[test]
    fn an_epoch_going_back_is_refused() {
        let gate = EpochGate::new(Arc::new(ManualClock::new(Duration::ZERO)));
        gate.saw("t", &epoch(7, Some(100)), W).unwrap();
        let err = gate.saw("t", &epoch(6, Some(100)), W).unwrap_err();
        assert!(!err.is_retryable(), "{err}");
        assert!(err.to_string().contains("went back"), "{err}");
    }

    /// The quarantine is the window whatever max TTL any epoch records: a
    /// store re-created with a short max TTL says nothing about the leases
    /// of the data that was lost (issue #28).
    #[test]
    fn the_quarantine_is_the_window_whatever_the_max_ttl() {
        for max_ttl in [1, 5, 60, 600, 86_400] {
            let gate = EpochGate::new(Arc::new(ManualClock::new(Duration::ZERO)));
            let e = StoreEpoch::new(3, Duration::from_secs(max_ttl));
            let Clearance::Quarantined { remaining, .. } = gate.saw("t", &e, W).unwrap() else {
                panic!("quarantined")
            };
            assert_eq!(remaining, W + W / 1000, "max TTL {max_ttl} s");
        }
    }

    /// A store that proved no earlier lease can be live reports the
    /// longest age there is: cleared at once, whatever the window.
    #[test]
    fn a_proven_epoch_is_cleared_at_once() {
        let gate = EpochGate::new(Arc::new(ManualClock::new(Duration::ZERO)));
        let e = StoreEpoch::new(3, Duration::from_secs(1)).with_age(Some(Duration::MAX));
        assert_eq!(
            gate.saw("t", &e, Duration::from_secs(24 * 3600)).unwrap(),
            Clearance::Cleared(3)
        );
    }
}
