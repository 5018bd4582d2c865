//! The lock blob's record: its metadata names and values.
//!
//! # Metadata
//! Metadata names are fixed lower-case ASCII identifiers (`leaseholdfence`,
//! `leaseholdepoch`, `leaseholdlease`, `leaseholdhost`, `leaseholdpid`,
//! `leaseholdlabel`, `leaseholddata`, `leaseholdacquiredms`,
//! `leaseholdttlms`, `leaseholdlastsuccess`, `leaseholdlastrun`); values are
//! percent-encoded so that any UTF-8 (user data, labels, host names) becomes
//! a valid header value that survives trimming: everything except
//! `A-Z a-z 0-9 - _ . ~ : / @ ! $ & ' ( ) * + , ; =` is written `%XX`.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::{backend::LeaseId, HolderInfo, Key, KeyInfo, Owner, RunRecord};
use sha2::{Digest, Sha256};

// Metadata names.
const FENCE: &str = "leaseholdfence";
const EPOCH: &str = "leaseholdepoch";
const LEASE: &str = "leaseholdlease";
const HOST: &str = "leaseholdhost";
const PID: &str = "leaseholdpid";
const LABEL: &str = "leaseholdlabel";
const DATA: &str = "leaseholddata";
const ACQUIRED_MS: &str = "leaseholdacquiredms";
const TTL_MS: &str = "leaseholdttlms";
const LAST_SUCCESS: &str = "leaseholdlastsuccess";
const LAST_RUN: &str = "leaseholdlastrun";

/// What a lock blob's metadata says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Record {
    /// Last fencing token issued.
    pub fence: u64,
    /// The store epoch this record was written in (absent: a new lock blob,
    /// or one written before store epochs).
    pub epoch: Option<u64>,
    /// Hash of the lease id of the acquisition that wrote this record.
    pub lease: Option<String>,
    pub owner: Option<Owner>,
    pub data: Option<String>,
    pub acquired_at_ms: Option<u64>,
    pub ttl_ms: Option<u64>,
    /// The key's run records (`RunRecord` JSON), kept by every write.
    pub last_success: Option<String>,
    pub last_run: Option<String>,
}

/// A one-way tag of a lease id: lets a retry recognise its own record
/// without storing the id (which would let any reader release the lease).
pub(crate) fn lease_tag(id: &LeaseId) -> String {
    let digest = Sha256::digest(id.as_str().as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

impl Record {
    pub(crate) fn from_metadata(meta: &HashMap<String, String>) -> Self {
        let get = |name: &str| {
            meta.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        let text = |name: &str| get(name).and_then(decode);
        let num = |name: &str| get(name).and_then(|v| v.parse::<u64>().ok());
        let owner = text(HOST).map(|host| Owner {
            host,
            pid: num(PID).unwrap_or(0) as u32,
            label: text(LABEL),
        });
        Record {
            fence: num(FENCE).unwrap_or(0),
            epoch: num(EPOCH),
            lease: get(LEASE).map(str::to_string),
            owner,
            data: text(DATA),
            acquired_at_ms: num(ACQUIRED_MS),
            ttl_ms: num(TTL_MS),
            last_success: text(LAST_SUCCESS),
            last_run: text(LAST_RUN),
        }
    }

    pub(crate) fn to_metadata(&self) -> HashMap<String, String> {
        let mut m = HashMap::new();
        m.insert(FENCE.to_string(), self.fence.to_string());
        if let Some(epoch) = self.epoch {
            m.insert(EPOCH.to_string(), epoch.to_string());
        }
        if let Some(lease) = &self.lease {
            m.insert(LEASE.to_string(), lease.clone());
        }
        if let Some(owner) = &self.owner {
            m.insert(HOST.to_string(), encode(&owner.host));
            m.insert(PID.to_string(), owner.pid.to_string());
            if let Some(label) = &owner.label {
                m.insert(LABEL.to_string(), encode(label));
            }
        }
        if let Some(data) = &self.data {
            m.insert(DATA.to_string(), encode(data));
        }
        if let Some(ms) = self.acquired_at_ms {
            m.insert(ACQUIRED_MS.to_string(), ms.to_string());
        }
        if let Some(ms) = self.ttl_ms {
            m.insert(TTL_MS.to_string(), ms.to_string());
        }
        for (name, run) in [
            (LAST_SUCCESS, &self.last_success),
            (LAST_RUN, &self.last_run),
        ] {
            if let Some(run) = run {
                m.insert(name.to_string(), encode(run));
            }
        }
        m
    }

    /// The key as this record describes it: its last token, its holder if
    /// `leased`, and its run records.
    pub(crate) fn info(&self, key: Key, leased: bool) -> leasehold::Result<KeyInfo> {
        let run = |text: &Option<String>| {
            text.as_deref()
                .map(|t| RunRecord::from_stored(crate::error::NAME, t))
                .transpose()
        };
        Ok(KeyInfo::new(key, self.fence, leased.then(|| self.holder()))
            .with_runs(run(&self.last_success)?, run(&self.last_run)?))
    }

    /// The holder this record describes (when the blob is leased).
    pub(crate) fn holder(&self) -> HolderInfo {
        let owner = self.owner.clone().unwrap_or(Owner {
            host: "unknown".into(),
            pid: 0,
            label: None,
        });
        HolderInfo::new(owner, self.fence)
            .with_data(self.data.clone())
            .with_acquired_at(
                self.acquired_at_ms
                    .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
            )
            .with_ttl(self.ttl_ms.map(Duration::from_millis))
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-_.~:/@!$&'()*+,;=".contains(&b)
}

/// Percent-encodes `s` into a header-safe ASCII value.
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if is_plain(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reverses [`encode`]; `None` if `s` is not valid encoded UTF-8.
pub(crate) fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        for s in ["", "plain", "payload: ünïcode, 42", " lead", "100%", "a\nb"] {
            let e = encode(s);
            assert!(e.bytes().all(|b| b.is_ascii_graphic()), "{e}");
            assert_eq!(decode(&e).as_deref(), Some(s));
        }
    }

    #[test]
    fn record_round_trips() {
        let r = Record {
            fence: 7,
            epoch: Some(12),
            lease: Some(lease_tag(&LeaseId::random())),
            owner: Some(Owner {
                host: "h".into(),
                pid: 3,
                label: Some("lbl ü".into()),
            }),
            data: Some("d".into()),
            acquired_at_ms: Some(5),
            ttl_ms: Some(15000),
            last_success: Some(r#"{"outcome":"succeeded","label":"ü \"x\""}"#.into()),
            last_run: None,
        };
        assert_eq!(Record::from_metadata(&r.to_metadata()), r);
    }
}
