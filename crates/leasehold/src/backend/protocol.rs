//! Protocol versions: which leasehold processes may share a store.
//!
//! Every store records the **protocol** it is in beside its store epoch,
//! in the epoch marker that every process reads before it takes a lease
//! there (each store's crate docs say where: a column, a hash field, an
//! attribute, a JSON field or a metadata entry named
//! [`PROTOCOL_FIELD`]). The protocol is the whole of what processes must
//! agree on to exclude each other in that store: the records' and the
//! marker's format, the conditions that guard each write, how tokens
//! grow, the confirmation window.
//!
//! * **Protocol 1** is the protocol of leasehold 0.1: the stores as every
//!   0.1 build writes them. The builds before this rule existed write no
//!   version; a marker **without the field is protocol 1** (they speak it).
//!   This build writes `protocol = 1` into every marker it begins (a new
//!   store, a new epoch); the earlier builds ignore the field (their
//!   parsers read the fields they know), so all of 0.1 keeps excluding each
//!   other on every store (test: `scripts/compat.sh`, run by
//!   `scripts/test.sh`, old and new binaries on every store).
//! * **The rule.** A process may use a store whose protocol it speaks:
//!   every protocol from 1 to its [`PROTOCOL`]. A release that changes
//!   anything the others read bumps [`PROTOCOL`], keeps speaking the older
//!   protocols it knows while a store is in one (so that it can share the
//!   store with older processes during a rolling upgrade), and moves a
//!   store to its own protocol only by beginning a new store epoch with the
//!   new number in the marker: every older process then learns the change
//!   the way it learns any new epoch (its holders' renewals are refused,
//!   so they stop; its next attempt re-reads the marker) and refuses.
//! * **Meeting an unknown protocol.** A marker naming a protocol above
//!   [`PROTOCOL`] (or one that is not a number) is refused with
//!   [`Error::UnsupportedProtocol`](crate::Error::UnsupportedProtocol)
//!   (`leasehold` exits 1, naming both protocols and what to do) by
//!   [`check_protocol`], which every backend calls where it reads the
//!   marker: on opening the store and on every read of the marker before a
//!   grant or a new epoch, **before any write**. So such a process grants
//!   nothing, starts no epoch, creates, voids and breaks nothing: it never
//!   overlaps with the newer processes.
//!
//! Where the marker is lost (the store's data lost), the first process to
//! use the store again writes a new one with its own protocol, as it
//! begins the new epoch. Records carry no version of their own: a record
//! is only read in the epoch of the marker that describes it (on Redis, a
//! marker of protocol 2 also describes the records of the earlier epochs
//! it carries through a failover: see `leasehold-redis`).

use crate::error::{Error, Result};

/// The newest store protocol this build speaks (and writes into every
/// marker it begins). Every protocol from 1 up to it is spoken.
pub const PROTOCOL: u64 = 1;

/// The name of the protocol's field in every store's epoch marker.
pub const PROTOCOL_FIELD: &str = "protocol";

/// Checks the protocol a backend read in its store's epoch marker, as
/// stored (`None`: no field, protocol 1, written before versions were
/// recorded). Call it where the marker is read, before anything is
/// written.
///
/// # Errors
/// [`Error::UnsupportedProtocol`] when `found` names a protocol above
/// [`PROTOCOL`], or is not a protocol number at all.
pub fn check_protocol(backend: &'static str, found: Option<&str>) -> Result<u64> {
    check_protocol_up_to(backend, found, PROTOCOL)
}

/// [`check_protocol`] for a backend that reads protocols up to `supported`,
/// above [`PROTOCOL`] (a store-specific later protocol, such as Redis's
/// epochs that carry leases through a failover): the refusal names
/// `supported`.
///
/// # Errors
/// [`Error::UnsupportedProtocol`] when `found` names a protocol above
/// `supported`, or is not a protocol number at all.
pub fn check_protocol_up_to(
    backend: &'static str,
    found: Option<&str>,
    supported: u64,
) -> Result<u64> {
    let Some(text) = found else {
        return Ok(1);
    };
    match text.trim().parse::<u64>() {
        Ok(n) if (1..=supported).contains(&n) => Ok(n),
        _ => Err(Error::UnsupportedProtocol {
            backend,
            found: text.to_string(),
            supported,
            this_version: env!("CARGO_PKG_VERSION"),
        }),
    }
}

/// [`check_protocol`] for a store that keeps the field as a number
/// (a column).
///
/// # Errors
/// As [`check_protocol`].
pub fn check_protocol_number(backend: &'static str, found: Option<i64>) -> Result<u64> {
    check_protocol(backend, found.map(|n| n.to_string()).as_deref())
}

/// [`check_protocol`] for a marker stored as JSON: its
/// [`PROTOCOL_FIELD`], whatever its shape (a number, or anything else,
/// which is refused). A body that is not JSON is left to the caller's own
/// parser (`Ok(1)`).
///
/// # Errors
/// As [`check_protocol`].
pub fn check_protocol_json(backend: &'static str, body: &[u8]) -> Result<u64> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Ok(1);
    };
    let text = value.get(PROTOCOL_FIELD).map(|p| match p {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    check_protocol(backend, text.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_field_is_protocol_1_and_this_one_is_spoken() {
        assert_eq!(check_protocol("t", None).unwrap(), 1);
        assert_eq!(check_protocol("t", Some("1")).unwrap(), 1);
        assert_eq!(
            check_protocol_number("t", Some(PROTOCOL as i64)).unwrap(),
            PROTOCOL
        );
    }

    #[test]
    fn a_json_marker_is_checked_whatever_the_fields_shape() {
        assert_eq!(check_protocol_json("t", br#"{"epoch": 3}"#).unwrap(), 1);
        assert_eq!(check_protocol_json("t", br#"{"protocol": 1}"#).unwrap(), 1);
        for body in [
            &br#"{"protocol": 2}"#[..],
            br#"{"protocol": "x"}"#,
            br#"{"protocol": 1.5}"#,
        ] {
            assert!(check_protocol_json("t", body).is_err());
        }
    }

    #[test]
    fn a_newer_or_unreadable_protocol_is_refused_naming_both() {
        for found in ["2", "0", "-1", "x", ""] {
            let err = check_protocol("redis", Some(found)).unwrap_err();
            assert!(matches!(err, Error::UnsupportedProtocol { .. }), "{found}");
            let text = err.to_string();
            assert!(text.contains(&format!("protocol {found},")), "{text}");
            assert!(text.contains("speaks protocol 1 and older"), "{text}");
            assert!(!err.is_retryable());
        }
    }
}
