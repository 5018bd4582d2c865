//! Our last write of each record we hold, so that a renewal is one
//! version-checked write instead of a read and a write.

use std::collections::HashMap;
use std::sync::Mutex;

use leasehold::backend::Lease;

use crate::record::Record;

/// Beyond this many records remembered, all are forgotten (the only cost:
/// each one's next renewal reads first).
const MAX_REMEMBERED: usize = 10_000;

/// The record each lease of ours last wrote, and the version it got: a
/// renewal writes over it conditional on that version, in one request.
/// A version check that fails (anyone else wrote since) falls back to a
/// read; it never writes over another's record.
#[derive(Debug, Default)]
pub(crate) struct LastWrites(Mutex<HashMap<(u64, String), Remembered>>);

/// One remembered write: by which lease id, what, and the version it got.
#[derive(Debug)]
struct Remembered {
    lease_id: String,
    record: Record,
    version: i32,
}

impl LastWrites {
    fn slot(lease: &Lease) -> (u64, String) {
        (lease.epoch, lease.key.as_str().to_string())
    }

    /// Our last write of `lease`'s record, if remembered.
    pub(crate) fn get(&self, lease: &Lease) -> Option<(Record, i32)> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&Self::slot(lease))
            .filter(|w| w.lease_id == lease.lease_id.as_str())
            .map(|w| (w.record.clone(), w.version))
    }

    /// Remembers that `lease` wrote `record`, which got `version`.
    pub(crate) fn keep(&self, lease: &Lease, record: Record, version: i32) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_REMEMBERED {
            map.clear();
        }
        let lease_id = lease.lease_id.as_str().to_string();
        map.insert(
            Self::slot(lease),
            Remembered {
                lease_id,
                record,
                version,
            },
        );
    }

    /// Forgets `lease`'s record.
    pub(crate) fn forget(&self, lease: &Lease) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&Self::slot(lease));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold::backend::LeaseId;
    use leasehold::Key;
    use std::time::Duration;

    fn lease(key: &str, epoch: u64) -> Lease {
        Lease {
            key: Key::new(key).unwrap(),
            lease_id: LeaseId::random(),
            ttl: Duration::from_secs(2),
            fencing_token: 1,
            epoch,
        }
    }

    #[test]
    fn only_the_lease_that_wrote_gets_its_write_back() {
        let w = LastWrites::default();
        let a = lease("k", 1);
        let record = Record {
            fence: 1,
            ..Record::default()
        };
        w.keep(&a, record.clone(), 4);
        assert_eq!(w.get(&a), Some((record.clone(), 4)));
        // Another lease of the same key, or the key in another epoch.
        assert_eq!(w.get(&lease("k", 1)), None);
        let mut other_epoch = a.clone();
        other_epoch.epoch = 2;
        assert_eq!(w.get(&other_epoch), None);
        w.forget(&a);
        assert_eq!(w.get(&a), None);
    }
}
