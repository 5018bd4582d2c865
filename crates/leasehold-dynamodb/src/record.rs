//! The item stored per key: attribute names, decoding, and the little
//! expression builder every request uses.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use leasehold::{backend::LeaseId, Error, HolderInfo, Key, KeyInfo, Owner, Result, RunRecord};

/// The table's partition key (string): the lock key.
pub(crate) const KEY: &str = "lease_key";
/// Last fencing token issued for the key (number). Never goes back.
pub(crate) const FENCE: &str = "fence";
/// Record version number (string, a random UUID): changes on every write.
pub(crate) const RVN: &str = "rvn";
/// The current lease id (string); absent when the key is free.
pub(crate) const LEASE_ID: &str = "lease_id";
pub(crate) const OWNER_HOST: &str = "owner_host";
pub(crate) const OWNER_PID: &str = "owner_pid";
pub(crate) const OWNER_LABEL: &str = "owner_label";
pub(crate) const DATA: &str = "data";
/// The holder's TTL in milliseconds (number).
pub(crate) const TTL_MS: &str = "ttl_ms";
/// The holder's wall clock when it acquired, Unix ms (number; display only).
pub(crate) const ACQUIRED_MS: &str = "acquired_ms";
/// The holder's wall clock at its last grant or renewal plus its TTL, Unix ms
/// (number). Display only, unless the clock-trusting takeover mode is on.
pub(crate) const EXPIRES_MS: &str = "expires_ms";
/// The lease id of the release that freed the key (string), so that a
/// retried release can tell that its first attempt went through.
pub(crate) const RELEASED_BY: &str = "released_by";

/// The key's last successful run: a [`RunRecord`] in its stored JSON form
/// (string). Kept through releases, expiries and breaks.
pub(crate) const LAST_SUCCESS: &str = "last_success";
/// The key's last run, successful or not (string, as `last_success`).
pub(crate) const LAST_RUN: &str = "last_run";
/// The fencing token of `last_run` (number), for its condition.
pub(crate) const LAST_RUN_TOKEN: &str = "last_run_token";

/// The attributes that describe the current lease, removed on release.
pub(crate) const LEASE_ATTRS: &[&str] = &[
    LEASE_ID,
    OWNER_HOST,
    OWNER_PID,
    OWNER_LABEL,
    DATA,
    TTL_MS,
    ACQUIRED_MS,
    EXPIRES_MS,
];

pub(crate) type Item = HashMap<String, AttributeValue>;

/// Collects the names and values of one request's expressions, so that only
/// the placeholders an expression uses are sent (DynamoDB rejects unused
/// ones) and every attribute name goes through a placeholder (several of
/// ours, like `data`, are reserved words).
#[derive(Debug, Default)]
pub(crate) struct Expr {
    pub(crate) names: HashMap<String, String>,
    pub(crate) values: HashMap<String, AttributeValue>,
}

impl Expr {
    /// The placeholder for attribute `attr`.
    pub(crate) fn n(&mut self, attr: &str) -> String {
        let placeholder = format!("#{attr}");
        self.names.insert(placeholder.clone(), attr.to_string());
        placeholder
    }

    /// A placeholder `:name` bound to `value`.
    pub(crate) fn v(&mut self, name: &str, value: AttributeValue) -> String {
        let placeholder = format!(":{name}");
        self.values.insert(placeholder.clone(), value);
        placeholder
    }

    /// `#attr = :name`: the attribute `attr` set to `value` (in a SET
    /// clause) or compared with it (in a condition).
    pub(crate) fn equals(&mut self, attr: &str, name: &str, value: AttributeValue) -> String {
        format!("{} = {}", self.n(attr), self.v(name, value))
    }

    /// The names and values, for the request (moved, not copied: a
    /// request's dozen names and values, copied twice a cycle, were a
    /// measurable share of an uncontended cycle's CPU).
    #[allow(clippy::type_complexity)]
    pub(crate) fn into_parts(
        self,
    ) -> (
        Option<HashMap<String, String>>,
        Option<HashMap<String, AttributeValue>>,
    ) {
        let Expr { names, values } = self;
        (
            (!names.is_empty()).then_some(names),
            (!values.is_empty()).then_some(values),
        )
    }
}

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A decoded item.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) fence: u64,
    pub(crate) rvn: Option<String>,
    pub(crate) lease: Option<StoredLease>,
    pub(crate) released_by: Option<String>,
    pub(crate) last_success: Option<RunRecord>,
    pub(crate) last_run: Option<RunRecord>,
}

#[derive(Debug, Clone)]
pub(crate) struct StoredLease {
    pub(crate) lease_id: LeaseId,
    pub(crate) owner: Owner,
    pub(crate) data: Option<String>,
    pub(crate) ttl: Option<Duration>,
    pub(crate) acquired_ms: Option<u64>,
    pub(crate) expires_ms: Option<u64>,
}

fn get_s<'a>(item: &'a Item, attr: &str) -> Option<&'a str> {
    item.get(attr)?.as_s().ok().map(String::as_str)
}

fn get_n<T: std::str::FromStr>(item: &Item, attr: &'static str) -> Result<Option<T>> {
    match item.get(attr) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::N(v)) => v.parse().map(Some).map_err(|_| corrupt(attr)),
        Some(_) => Err(corrupt(attr)),
    }
}

fn get_run(item: &Item, attr: &'static str) -> Result<Option<RunRecord>> {
    match item.get(attr) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::S(text)) => RunRecord::from_stored("dynamodb", text).map(Some),
        Some(_) => Err(corrupt(attr)),
    }
}

fn corrupt(attr: &'static str) -> Error {
    Error::backend(
        "dynamodb",
        "decode",
        false,
        format!("the table holds an item whose {attr:?} attribute is not what leasehold writes; is the table used by something else?"),
    )
}

impl Stored {
    pub(crate) fn decode(item: &Item) -> Result<Stored> {
        let lease = match get_s(item, LEASE_ID) {
            None => None,
            Some(id) => Some(StoredLease {
                lease_id: LeaseId::from_stored(id),
                owner: Owner {
                    host: get_s(item, OWNER_HOST)
                        .unwrap_or("unknown-host")
                        .to_string(),
                    pid: get_n(item, OWNER_PID)?.unwrap_or(0),
                    label: get_s(item, OWNER_LABEL).map(str::to_string),
                },
                data: get_s(item, DATA).map(str::to_string),
                ttl: get_n::<u64>(item, TTL_MS)?.map(Duration::from_millis),
                acquired_ms: get_n(item, ACQUIRED_MS)?,
                expires_ms: get_n(item, EXPIRES_MS)?,
            }),
        };
        Ok(Stored {
            fence: get_n(item, FENCE)?.unwrap_or(0),
            rvn: get_s(item, RVN).map(str::to_string),
            lease,
            released_by: get_s(item, RELEASED_BY).map(str::to_string),
            last_success: get_run(item, LAST_SUCCESS)?,
            last_run: get_run(item, LAST_RUN)?,
        })
    }

    /// The holder described by this item, if the key is held. The remaining
    /// time is estimated from the holder's wall clock and ours.
    pub(crate) fn holder(&self, now: SystemTime) -> Option<HolderInfo> {
        let lease = self.lease.as_ref()?;
        let now_ms = unix_ms(now);
        Some(
            HolderInfo::new(lease.owner.clone(), self.fence)
                .with_data(lease.data.clone())
                .with_acquired_at(
                    lease
                        .acquired_ms
                        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
                )
                .with_expires_in(
                    lease
                        .expires_ms
                        .map(|ms| Duration::from_millis(ms.saturating_sub(now_ms))),
                )
                .with_ttl(lease.ttl),
        )
    }

    pub(crate) fn info(&self, key: Key, now: SystemTime) -> KeyInfo {
        KeyInfo::new(key, self.fence, self.holder(now))
            .with_runs(self.last_success.clone(), self.last_run.clone())
    }
}
