//! The stored record of one key (a node's data, JSON), and the epoch
//! marker's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::backend::{HolderInfo, KeyInfo, Owner};
use leasehold::{Key, Result, RunRecord};
use serde::{Deserialize, Serialize};

use crate::error::corrupt;

/// A key's record: its last fencing token, its holder if held, and its
/// run records. Every write of it by its holder or a grant changes the
/// node's version, which is what a waiter watches (see the crate docs,
/// "Takeover").
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Record {
    /// The last fencing token issued for the key; only ever grows.
    pub(crate) fence: u64,
    /// The current lease, if the key is held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lease: Option<Held>,
    /// The lease id of the release that freed the key (recognises a
    /// retried release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) released_by: Option<String>,
    /// The key's last successful run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_success: Option<RunRecord>,
    /// The key's last recorded run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_run: Option<RunRecord>,
}

/// The holder's part of a record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Held {
    /// The lease id.
    pub(crate) id: String,
    /// Who holds it.
    pub(crate) owner: Owner,
    /// The holder's data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) data: Option<String>,
    /// The TTL it was taken with (ms).
    pub(crate) ttl_ms: u64,
    /// The holder's wall clock at the grant (Unix ms; shown, never compared).
    pub(crate) acquired_ms: u64,
    /// The holder's wall clock at its last grant or renewal (Unix ms).
    pub(crate) renewed_ms: u64,
}

impl Held {
    pub(crate) fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

impl Record {
    /// Parses a record node's data.
    pub(crate) fn decode(op: &'static str, bytes: &[u8]) -> Result<Record> {
        serde_json::from_slice(bytes).map_err(|e| corrupt(op, "record", e))
    }

    /// The record's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a record serialises")
    }

    /// The holder, as the core reports it.
    pub(crate) fn holder(&self) -> Option<HolderInfo> {
        let l = self.lease.as_ref()?;
        Some(
            HolderInfo::new(l.owner.clone(), self.fence)
                .with_data(l.data.clone())
                .with_acquired_at(Some(UNIX_EPOCH + Duration::from_millis(l.acquired_ms)))
                .with_ttl(Some(l.ttl())),
        )
    }

    /// What the core's `inspect` and `list` report.
    pub(crate) fn info(&self, key: Key) -> KeyInfo {
        KeyInfo::new(key, self.fence, self.holder())
            .with_runs(self.last_success.clone(), self.last_run.clone())
    }
}

/// The writer's wall clock in Unix ms.
pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The epoch marker's data.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Marker {
    /// The store's epoch (see the crate docs, "Store epoch").
    pub(crate) epoch: u64,
    /// The store's max TTL (ms).
    pub(crate) max_ttl_ms: u64,
    /// The store's protocol version (missing: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) protocol: Option<u64>,
    /// Set on a store created with `Creation::NewProven`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) proven: bool,
}

impl Marker {
    /// Parses the marker's data, checking its protocol first.
    ///
    /// # Errors
    /// [`Error::UnsupportedProtocol`](leasehold::Error::UnsupportedProtocol)
    /// for a newer protocol; a backend error for bytes that are not a
    /// marker.
    pub(crate) fn decode(op: &'static str, bytes: &[u8]) -> Result<Marker> {
        leasehold::backend::protocol::check_protocol_json(crate::error::NAME, bytes)?;
        serde_json::from_slice(bytes).map_err(|e| corrupt(op, "epoch marker", e))
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a marker serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_record_is_small_and_round_trips() {
        let r = Record {
            fence: 7,
            ..Record::default()
        };
        assert_eq!(r.encode(), br#"{"fence":7}"#);
        assert_eq!(Record::decode("t", &r.encode()).unwrap(), r);
        let held = Record {
            lease: Some(Held {
                id: "id".into(),
                owner: Owner::current(),
                data: Some("d".into()),
                ttl_ms: 2000,
                acquired_ms: 1,
                renewed_ms: 2,
            }),
            ..r
        };
        let back = Record::decode("t", &held.encode()).unwrap();
        assert_eq!(back, held);
        assert_eq!(back.holder().unwrap().fencing_token, 7);
    }

    #[test]
    fn a_marker_of_a_newer_protocol_is_refused() {
        let m = Marker {
            epoch: 3,
            max_ttl_ms: 60_000,
            protocol: Some(1),
            proven: false,
        };
        assert_eq!(Marker::decode("t", &m.encode()).unwrap(), m);
        // Without the field: protocol 1.
        assert!(Marker::decode("t", br#"{"epoch":3,"max_ttl_ms":1000}"#).is_ok());
        let err =
            Marker::decode("t", br#"{"epoch":3,"max_ttl_ms":1000,"protocol":2}"#).unwrap_err();
        assert!(
            matches!(err, leasehold::Error::UnsupportedProtocol { .. }),
            "{err}"
        );
    }
}
