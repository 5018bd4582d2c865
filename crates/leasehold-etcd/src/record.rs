//! The stored values (JSON), and turning them into what the core reports.
//!
//! Three kinds of etcd keys live under the backend's prefix `P` (see the
//! crate docs): `P` + `epoch` (the [`EpochMarker`]), `P` + `k/` + key (the
//! key's [`KeyRecord`]: fencing counter and run records, never attached to a
//! lease, never deleted by leasehold) and `P` + `h/` + key (the
//! [`HolderRecord`], attached to the holder's etcd lease, so etcd deletes it
//! when the lease expires or is revoked).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::{HolderInfo, Key, KeyInfo, Owner, RunRecord};
use serde::{Deserialize, Serialize};

use crate::error::corrupt;

/// The store's epoch and max TTL, written once when the prefix is first
/// used (or used again after its keys were deleted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct EpochMarker {
    pub epoch: u64,
    pub max_ttl_ms: u64,
    /// The epoch is proven: written by a creator that stated no earlier
    /// store existed ([`Creation::NewProven`](leasehold::Creation::NewProven))
    /// on a prefix without keys; settled at once in every process.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub proven: bool,
    /// The store's protocol (see the crate docs): written by every build
    /// that records versions; missing in a marker of an earlier build
    /// (protocol 1). Kept as it is stored, so that a value of any shape is
    /// checked, not taken for a corrupt marker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<serde_json::Value>,
}

impl EpochMarker {
    /// A marker of a new epoch, in this build's protocol.
    pub(crate) fn new(epoch: u64, max_ttl_ms: u64, proven: bool) -> Self {
        EpochMarker {
            epoch,
            max_ttl_ms,
            proven,
            protocol: Some(leasehold::backend::protocol::PROTOCOL.into()),
        }
    }

    /// The marker stored as `bytes`, if this build speaks its protocol:
    /// the protocol is checked first, so that a marker of a newer protocol
    /// is refused even where its other fields changed.
    pub(crate) fn parse(bytes: &[u8]) -> leasehold::Result<Self> {
        leasehold::backend::protocol::check_protocol_json(crate::error::NAME, bytes)?;
        from_json("epoch marker", bytes)
    }
}

/// A key's fencing counter and run records.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct KeyRecord {
    /// The last fencing token issued for the key; only grows.
    pub token: u64,
    /// The epoch of the last grant.
    pub epoch: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<String>,
    #[serde(default)]
    pub last_run_token: u64,
}

/// The current holder: exists only while its etcd lease lives.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HolderRecord {
    pub lease_id: String,
    pub token: u64,
    pub epoch: u64,
    pub ttl_ms: u64,
    pub host: String,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// The holder's wall clock at the grant, ms since the Unix epoch.
    pub acquired_at_ms: u64,
}

/// A lock's waiter, registered to be handed the key (`P w/` + its lease
/// id, on the waiter's session): what the holder's release writes as the
/// new holder, and the epoch the waiter cleared (the key is handed over
/// only within it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WaiterEntry {
    pub key: String,
    pub lease_id: String,
    pub epoch: u64,
    pub ttl_ms: u64,
    pub host: String,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

impl WaiterEntry {
    /// What `request` asks for, in `epoch`.
    pub fn of(request: &leasehold::backend::AcquireRequest, epoch: u64) -> Self {
        WaiterEntry {
            key: request.key.as_str().to_string(),
            lease_id: request.lease_id.as_str().to_string(),
            epoch,
            ttl_ms: request.ttl.as_millis() as u64,
            host: request.owner.host.clone(),
            pid: request.owner.pid,
            label: request.owner.label.clone(),
            data: request.data.clone(),
        }
    }

    /// The holder record a grant to this request (by itself, or by a
    /// handoff) writes, with `token`.
    pub fn holder(&self, token: u64) -> HolderRecord {
        HolderRecord {
            lease_id: self.lease_id.clone(),
            token,
            epoch: self.epoch,
            ttl_ms: self.ttl_ms,
            host: self.host.clone(),
            pid: self.pid,
            label: self.label.clone(),
            data: self.data.clone(),
            acquired_at_ms: now_ms(),
        }
    }
}

/// What a handoff writes over its waiter's registration (same key, same
/// etcd lease): the holder value it put, byte for byte, and the key's
/// record as it wrote it. The waiter's watch sees it, and the waiter takes
/// the key from it without a request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Handed {
    pub holder: String,
    pub record: String,
}

pub(crate) fn to_json<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("plain structs serialize")
}

pub(crate) fn from_json<T: for<'a> Deserialize<'a>>(
    what: &str,
    bytes: &[u8],
) -> leasehold::Result<T> {
    serde_json::from_slice(bytes).map_err(|e| corrupt(what, e))
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl HolderRecord {
    pub fn info(&self, expires_in: Option<Duration>) -> HolderInfo {
        HolderInfo::new(
            Owner {
                host: self.host.clone(),
                pid: self.pid,
                label: self.label.clone(),
            },
            self.token,
        )
        .with_data(self.data.clone())
        .with_acquired_at(Some(
            UNIX_EPOCH + Duration::from_millis(self.acquired_at_ms),
        ))
        .with_ttl(Some(Duration::from_millis(self.ttl_ms)))
        .with_expires_in(expires_in)
    }
}

/// What the store knows about `key`, from its record and holder.
pub(crate) fn key_info(
    key: Key,
    record: Option<&KeyRecord>,
    holder: Option<HolderInfo>,
) -> leasehold::Result<KeyInfo> {
    let run = |t: &Option<String>| {
        t.as_deref()
            .map(|t| RunRecord::from_stored(crate::error::NAME, t))
            .transpose()
    };
    let token = record
        .map(|r| r.token)
        .unwrap_or(0)
        .max(holder.as_ref().map(|h| h.fencing_token).unwrap_or(0));
    let (success, last) = match record {
        Some(r) => (run(&r.last_success)?, run(&r.last_run)?),
        None => (None, None),
    };
    Ok(KeyInfo::new(key, token, holder).with_runs(success, last))
}
