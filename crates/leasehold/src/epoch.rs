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
    /// The newest epoch seen, when it was first seen, and when its
    /// quarantine ends (on `clock`).
    newest: Option<Seen>,
    /// The longest max TTL of any epoch seen: a holder of an older epoch
    /// may hold a lease that long.
    longest_max_ttl: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    epoch: u64,
    until: Duration,
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
    /// may be asked for in it.
    ///
    /// # Errors
    /// A non-retryable backend error when the epoch is older than one this
    /// store has seen: the store went back (a restored copy of an older
    /// store), and its tokens could repeat ones already issued.
    pub fn saw(&self, backend: &'static str, reported: &StoreEpoch) -> Result<Clearance> {
        let now = self.clock.now();
        let mut state = self.lock();
        state.longest_max_ttl = state.longest_max_ttl.max(reported.max_ttl);
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
                // store vouches for, over the longest lease any epoch seen
                // allows, plus 0.1 % for clocks that run at other rates.
                let full = state.longest_max_ttl + state.longest_max_ttl / 1000;
                let age = reported.age.unwrap_or(Duration::ZERO);
                let left = full.saturating_sub(age.saturating_add(age / 1000));
                if !left.is_zero() {
                    tracing::warn!(
                        backend,
                        epoch = reported.epoch,
                        quarantine = ?left,
                        "new store epoch: no lease is granted until holders of any lost data have stopped"
                    );
                }
                state.newest = Some(Seen {
                    epoch: reported.epoch,
                    until: now + left,
                });
                if state.cleared.is_some() {
                    state.cleared = None;
                }
            }
        }
        let seen = state.newest.expect("set above");
        if now >= seen.until {
            state.cleared = Some(seen.epoch);
            Ok(Clearance::Cleared(seen.epoch))
        } else {
            Ok(Clearance::Quarantined {
                epoch: seen.epoch,
                remaining: seen.until - now,
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

    fn epoch(e: u64, age: Option<u64>) -> StoreEpoch {
        StoreEpoch::new(e, Duration::from_secs(60)).with_age(age.map(Duration::from_secs))
    }

    #[test]
    fn new_epoch_waits_max_ttl_less_age() {
        let clock = Arc::new(ManualClock::new(Duration::from_secs(1000)));
        let gate = EpochGate::new(clock.clone());
        assert_eq!(gate.cleared(), None);
        let Clearance::Quarantined { remaining, .. } = gate.saw("t", &epoch(5, None)).unwrap()
        else {
            panic!("an epoch of unknown age is quarantined")
        };
        assert_eq!(remaining, Duration::from_millis(60_060));
        clock.advance(Duration::from_secs(60));
        assert!(matches!(
            gate.saw("t", &epoch(5, None)).unwrap(),
            Clearance::Quarantined { .. }
        ));
        clock.advance(Duration::from_millis(60));
        assert_eq!(
            gate.saw("t", &epoch(5, None)).unwrap(),
            Clearance::Cleared(5)
        );
        assert_eq!(gate.cleared(), Some(5));

        // A newer epoch voids the clearance; an old enough one needs no wait.
        let Clearance::Quarantined { remaining, .. } = gate.saw("t", &epoch(9, Some(50))).unwrap()
        else {
            panic!("quarantined")
        };
        assert_eq!(remaining, Duration::from_millis(10_010));
        assert_eq!(gate.cleared(), None);
        assert_eq!(
            gate.saw("t", &epoch(12, Some(61))).unwrap(),
            Clearance::Cleared(12)
        );
    }

    #[test]
    fn an_epoch_going_back_is_refused() {
        let gate = EpochGate::new(Arc::new(ManualClock::new(Duration::ZERO)));
        gate.saw("t", &epoch(7, Some(100))).unwrap();
        let err = gate.saw("t", &epoch(6, Some(100))).unwrap_err();
        assert!(!err.is_retryable(), "{err}");
        assert!(err.to_string().contains("went back"), "{err}");
    }

    #[test]
    fn longest_max_ttl_seen_sets_the_quarantine() {
        let gate = EpochGate::new(Arc::new(ManualClock::new(Duration::ZERO)));
        let long =
            StoreEpoch::new(3, Duration::from_secs(600)).with_age(Some(Duration::from_secs(9999)));
        gate.saw("t", &long).unwrap();
        let Clearance::Quarantined { remaining, .. } = gate.saw("t", &epoch(4, None)).unwrap()
        else {
            panic!("quarantined")
        };
        assert_eq!(remaining, Duration::from_millis(600_600));
    }
}
