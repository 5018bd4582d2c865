//! Clock-free takeover: what a waiter has seen of other holders' leases,
//! timed on its own monotonic clock. For stores with no server-side expiry
//! whose records change on every write by their holder (a DynamoDB item's
//! record version, an S3 object's ETag): a waiter may replace a record only
//! once it has seen that same version for the holder's whole TTL (plus
//! margins the backend adds). A live holder renews within its TTL, which
//! changes the version and starts the watch over.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Beyond this many keys watched at once, the oldest watch is forgotten (the
/// only cost: that key's observation starts over).
const MAX_WATCHED: usize = 10_000;

#[derive(Debug)]
struct Watch {
    rvn: String,
    /// Our clock when we first saw `rvn` (after the answer arrived).
    since: Duration,
    /// How long `rvn` must stay unchanged before we may take over.
    wait: Duration,
}

/// Per key: the record version last seen held by someone else, and since
/// when, on the waiter's clock (taken after the answer that showed it
/// arrived, so after the holder's write).
#[derive(Debug, Default)]
pub struct Observations {
    watches: Mutex<HashMap<String, Watch>>,
}

impl Observations {
    /// Notes that `key` was seen held with version `rvn` at `now`; the
    /// holder may be presumed gone once `rvn` has stayed unchanged for
    /// `wait`. Returns whether that is already the case.
    pub fn saw(&self, key: &str, rvn: &str, wait: Duration, now: Duration) -> bool {
        let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = watches.get(key) {
            if w.rvn == rvn {
                return now.saturating_sub(w.since) >= w.wait;
            }
        }
        if watches.len() >= MAX_WATCHED && !watches.contains_key(key) {
            if let Some(oldest) = watches
                .iter()
                .min_by_key(|(_, w)| w.since)
                .map(|(k, _)| k.clone())
            {
                watches.remove(&oldest);
            }
        }
        watches.insert(
            key.to_string(),
            Watch {
                rvn: rvn.to_string(),
                since: now,
                wait,
            },
        );
        false
    }

    /// The version of `key` that has stayed unchanged long enough to be
    /// taken over at `now`, if any.
    pub fn ripe(&self, key: &str, now: Duration) -> Option<String> {
        let watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        watches
            .get(key)
            .filter(|w| now.saturating_sub(w.since) >= w.wait)
            .map(|w| w.rvn.clone())
    }

    /// Stops watching `key` (it is free, or ours).
    pub fn forget(&self, key: &str) {
        self.watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ripe_only_after_the_same_version_for_the_whole_wait() {
        let o = Observations::default();
        let s = Duration::from_secs;
        assert!(!o.saw("k", "v1", s(10), s(100)));
        assert_eq!(o.ripe("k", s(109)), None);
        assert!(!o.saw("k", "v1", s(10), s(109)));
        // A new version starts the watch over.
        assert!(!o.saw("k", "v2", s(10), s(111)));
        assert_eq!(o.ripe("k", s(120)), None);
        assert_eq!(o.ripe("k", s(121)).as_deref(), Some("v2"));
        assert!(o.saw("k", "v2", s(10), s(121)));
        o.forget("k");
        assert_eq!(o.ripe("k", s(1000)), None);
    }
}
