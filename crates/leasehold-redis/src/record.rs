//! What the store keeps in Redis, and turning the scripts' replies into
//! what the core reports.
//!
//! Under the prefix `P` (default `leasehold:`):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P#epoch` | hash | the store's epoch marker: `epoch`, `max_ttl_ms`, `start_ms` (server clock), `run_id` (of the server process that wrote it), `replid` (that server's `master_replid`, its replication history), `high` (highest token issued), `protocol` (the store's [protocol version](leasehold::backend::protocol); missing: 1) |
//! | `P#keys` | sorted set | every key name that has a record (score 0, read in byte order for `list`) |
//! | `P#released` | pub/sub channel | key names, published at each release and break |
//! | `Pk:KEY` | hash | the key's record: `fence` (last token issued; only grows), `epoch` (of the last grant), `lease_id`, `expires_ms` (server clock), `ttl_ms`, `owner_host`, `owner_pid`, `owner_label`, `data`, `acquired_ms`, `last_success`, `last_success_end_ms`, `last_run`, `last_run_end_ms`, `last_run_token` |
//!
//! None of these keys has a TTL: Redis never expires them (and the backend
//! refuses servers that evict keys without one, see the crate docs).

use std::time::{Duration, UNIX_EPOCH};

use leasehold::{backend::StoreEpoch, HolderInfo, Key, KeyInfo, Owner, Result, RunRecord};
use redis::Value;

use crate::error::{bad_reply, NAME};

/// The Redis key names of one store.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    pub prefix: String,
    pub marker: String,
    pub index: String,
    pub channel: String,
}

impl Names {
    pub fn new(prefix: &str) -> Self {
        Names {
            prefix: prefix.to_string(),
            marker: format!("{prefix}#epoch"),
            index: format!("{prefix}#keys"),
            channel: format!("{prefix}#released"),
        }
    }

    /// The record of `key`.
    pub fn record(&self, key: &str) -> String {
        format!("{}k:{key}", self.prefix)
    }

    /// What record names start with (`list` adds the key name).
    pub fn records(&self) -> String {
        format!("{}k:", self.prefix)
    }
}

/// A reply's text (bulk or status strings, and integers).
pub(crate) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".into()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// A reply's number (integers, or numbers sent as text).
pub(crate) fn num(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        other => text(other)?.parse().ok(),
    }
}

pub(crate) fn array<'a>(op: &'static str, v: &'a Value) -> Result<&'a [Value]> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(bad_reply(op, format!("{other:?}"))),
    }
}

fn ms(v: Option<&Value>) -> Option<Duration> {
    v.and_then(num)
        .map(|n| Duration::from_millis(n.max(0) as u64))
}

/// The holder fields the scripts' `holder()` sends: host, pid, label,
/// data, fence, acquired ms, ms left, ttl ms.
pub(crate) fn holder(v: &Value) -> Option<HolderInfo> {
    let Value::Array(f) = v else { return None };
    let owner = Owner {
        host: f.first().and_then(text).unwrap_or_default(),
        pid: f.get(1).and_then(num).unwrap_or_default() as u32,
        label: f.get(2).and_then(text),
    };
    let fence = f.get(4).and_then(num).unwrap_or_default() as u64;
    Some(
        HolderInfo::new(owner, fence)
            .with_data(f.get(3).and_then(text))
            .with_acquired_at(ms(f.get(5)).map(|d| UNIX_EPOCH + d))
            .with_expires_in(ms(f.get(6)))
            .with_ttl(ms(f.get(7))),
    )
}

/// `{epoch, max ttl ms, age ms}` as the scripts send it.
pub(crate) fn store_epoch(op: &'static str, f: &[Value]) -> Result<StoreEpoch> {
    let get = |i: usize| f.get(i).and_then(num);
    match (get(0), get(1), get(2)) {
        // A negative age: the epoch is proven (see `check_epoch` in the
        // scripts' prelude).
        (Some(e), Some(max), Some(age)) if age < 0 => {
            Ok(StoreEpoch::new(e.max(1) as u64, Duration::from_millis(max.max(0) as u64)).proven())
        }
        (Some(e), Some(max), Some(age)) => Ok(StoreEpoch::new(
            e.max(1) as u64,
            Duration::from_millis(max.max(0) as u64),
        )
        .with_age(Some(Duration::from_millis(age.max(0) as u64)))),
        _ => Err(bad_reply(op, format!("{f:?}"))),
    }
}

/// One entry of the inspect script's reply: `{name, fence, holder,
/// last success, its end ms, last run, its end ms}`.
pub(crate) fn key_info(op: &'static str, key: Key, v: &Value) -> Result<KeyInfo> {
    let f = array(op, v)?;
    let fence = f.get(1).and_then(num).unwrap_or_default().max(0) as u64;
    let holder = f.get(2).and_then(holder);
    let run = |json: usize, end: usize| -> Result<Option<RunRecord>> {
        let Some(text) = f.get(json).and_then(text) else {
            return Ok(None);
        };
        let run = RunRecord::from_stored(NAME, &text)?;
        Ok(Some(match ms(f.get(end)) {
            // Stamped by the server's clock at the write.
            Some(d) => run.with_ended_at(UNIX_EPOCH + d),
            None => run,
        }))
    };
    Ok(KeyInfo::new(key, fence, holder).with_runs(run(3, 4)?, run(5, 6)?))
}
