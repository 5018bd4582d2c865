//! The record stored per key: one JSON object, rewritten whole by every
//! conditional write.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::{backend::LeaseId, Error, HolderInfo, Key, KeyInfo, Owner, Result, RunRecord};
use serde::{Deserialize, Serialize};

use crate::error::BACKEND;

/// The version of the record's layout.
const LAYOUT: u32 = 1;

/// A key's object.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    /// Layout version.
    pub(crate) v: u32,
    /// Fresh random bytes on every write, so that no two writes have the
    /// same content, and so the same ETag (S3's ETag of a plain upload is
    /// the MD5 of its bytes): a condition on an ETag seen earlier can never
    /// match a later write (the ABA problem).
    pub(crate) nonce: String,
    /// The store epoch the key was last granted in.
    pub(crate) epoch: u64,
    /// The last fencing token issued for the key; only ever grows.
    pub(crate) fence: u64,
    /// The current lease; absent when the key is free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lease: Option<StoredLease>,
    /// The lease id of the release that freed the key (recognises a
    /// retried release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) released_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_success: Option<RunRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_run: Option<RunRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredLease {
    pub(crate) id: String,
    pub(crate) owner: Owner,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) data: Option<String>,
    /// The holder's TTL: how long a waiter must see the record unchanged.
    pub(crate) ttl_ms: u64,
    /// The holder's wall clock at the grant, and at its last write plus
    /// its TTL (Unix ms): for display only, never compared.
    pub(crate) acquired_ms: u64,
    pub(crate) expires_ms: u64,
}

pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(crate) fn nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl Record {
    /// A free record with `fence` as its last token, in `epoch`.
    pub(crate) fn free(epoch: u64, fence: u64) -> Record {
        Record {
            v: LAYOUT,
            nonce: nonce(),
            epoch,
            fence,
            lease: None,
            released_by: None,
            last_success: None,
            last_run: None,
        }
    }

    /// This record as the next write: the same, with a fresh nonce.
    pub(crate) fn next(&self) -> Record {
        Record {
            nonce: nonce(),
            ..self.clone()
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a record always serialises")
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Record> {
        let record: Record = serde_json::from_slice(bytes).map_err(|e| {
            Error::backend(
                BACKEND,
                "decode",
                false,
                format!("an object under the store's prefix is not a leasehold record ({e}); is the prefix used by something else?"),
            )
        })?;
        if record.v != LAYOUT {
            return Err(Error::backend(
                BACKEND,
                "decode",
                false,
                format!(
                    "a record has layout version {}, this leasehold reads {LAYOUT}; upgrade leasehold",
                    record.v
                ),
            ));
        }
        Ok(record)
    }

    /// The lease if it is `id`'s.
    pub(crate) fn held_by(&self, id: &LeaseId) -> Option<&StoredLease> {
        self.lease.as_ref().filter(|l| l.id == id.as_str())
    }

    /// The holder described by this record, if the key is held. The
    /// remaining time is estimated from the holder's wall clock and ours.
    pub(crate) fn holder(&self, now: SystemTime) -> Option<HolderInfo> {
        let lease = self.lease.as_ref()?;
        Some(
            HolderInfo::new(lease.owner.clone(), self.fence)
                .with_data(lease.data.clone())
                .with_acquired_at(Some(UNIX_EPOCH + Duration::from_millis(lease.acquired_ms)))
                .with_expires_in(Some(Duration::from_millis(
                    lease.expires_ms.saturating_sub(unix_ms(now)),
                )))
                .with_ttl(Some(Duration::from_millis(lease.ttl_ms))),
        )
    }

    pub(crate) fn info(&self, key: Key, now: SystemTime) -> KeyInfo {
        KeyInfo::new(key, self.fence, self.holder(now))
            .with_runs(self.last_success.clone(), self.last_run.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_write_has_other_bytes() {
        let r = Record::free(7, 7 << 22);
        let a = r.next().encode();
        let b = r.next().encode();
        assert_ne!(a, b, "two writes of one state must differ (ETags)");
        let back = Record::decode(&a).unwrap();
        assert_eq!(back.fence, 7 << 22);
        assert!(back.lease.is_none());
    }

    #[test]
    fn foreign_objects_are_refused() {
        let err = Record::decode(b"hello").unwrap_err();
        assert!(err.to_string().contains("not a leasehold record"), "{err}");
        let err = Record::decode(br#"{"v":9,"nonce":"x","epoch":1,"fence":1}"#).unwrap_err();
        assert!(err.to_string().contains("upgrade"), "{err}");
    }
}
