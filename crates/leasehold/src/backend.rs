//! The backend trait: the few primitives a store must offer.
//!
//! Everything else (waiting, renewal, loss detection, in-process wake-ups,
//! cancel safety, semaphores, elections) is written once above this trait, in
//! the rest of the crate. A new store implements [`Backend`] and passes the
//! conformance suite (`leasehold::conformance`, feature `conformance`)
//! unchanged.
//!
//! # The contract, operation by operation
//!
//! * [`try_acquire`](Backend::try_acquire): one attempt, no waiting. If the key
//!   is free, or its lease has expired by the backend's own rule, grant it to
//!   the request's lease id with a fencing token one greater than the last one
//!   ever issued for the key. If the key is already held by the *same* lease
//!   id (a retry after an ambiguous failure), answer `Acquired` again with the
//!   same token and extend the lease. Otherwise answer `Held`.
//! * [`renew`](Backend::renew): extend our lease by its TTL from now. A
//!   definitive "not yours" (someone else holds it, it was broken, the record
//!   is gone) is [`Error::LeaseLost`](crate::Error::LeaseLost) with
//!   [`LossReason::Revoked`](crate::LossReason::Revoked); anything that may be
//!   transient is [`Error::Backend`](crate::Error::Backend) with `retryable`.
//! * [`release`](Backend::release): end our lease, keeping the key's fencing
//!   counter. Releasing a lease that is not ours changes nothing and is
//!   [`Error::LeaseLost`](crate::Error::LeaseLost).
//! * [`inspect`](Backend::inspect) and [`list`](Backend::list): what is stored
//!   for a key, including the last fencing token issued.
//! * [`break_lease`](Backend::break_lease): end whatever lease is on the key,
//!   whoever holds it (an administrator's tool). The fencing counter stays.
//!
//! Fencing tokens are per key, start at 1, and never repeat or go back: a
//! backend never deletes the counter of a key it has issued tokens for.

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::Serialize;

use crate::error::Result;
use crate::key::Key;

/// The primitives a lease store offers. See the [module docs](self) for the
/// contract of each operation.
#[async_trait]
pub trait Backend: fmt::Debug + Send + Sync + 'static {
    /// A short name for errors, logs and metrics ("sqlite", "memory", ...).
    fn name(&self) -> &'static str;

    /// What this backend can do and which TTLs it accepts.
    fn capabilities(&self) -> Capabilities;

    /// One attempt to take the lease described by `request`.
    async fn try_acquire(&self, request: &AcquireRequest) -> Result<AcquireOutcome>;

    /// Extends `lease` by its TTL.
    async fn renew(&self, lease: &Lease) -> Result<()>;

    /// Ends `lease`.
    async fn release(&self, lease: &Lease) -> Result<()>;

    /// What is stored for `key`.
    async fn inspect(&self, key: &Key) -> Result<KeyInfo>;

    /// Ends any lease on `key`; returns the holder it ended, if any.
    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>>;

    /// Every key the store has a record of whose name starts with `prefix`,
    /// in key order.
    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>>;
}

/// What a backend can do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Shortest TTL the backend accepts.
    pub min_ttl: Duration,
    /// Longest TTL the backend accepts.
    pub max_ttl: Duration,
    /// Whether other processes (on this machine at least) see the same leases.
    pub shared_across_processes: bool,
    /// Whether processes on other machines see the same leases.
    pub shared_across_machines: bool,
    /// Whether an expired lease is only taken over after a waiter has watched
    /// it unchanged for a whole TTL on its own clock (clock-free takeover).
    /// With this, recovering a dead holder's lease can take up to two TTLs.
    pub takeover_needs_observation: bool,
}

impl Capabilities {
    /// Capabilities with the given TTL range and everything else off.
    pub fn new(min_ttl: Duration, max_ttl: Duration) -> Self {
        Capabilities {
            min_ttl,
            max_ttl,
            shared_across_processes: false,
            shared_across_machines: false,
            takeover_needs_observation: false,
        }
    }

    /// Sets [`shared_across_processes`](Self::shared_across_processes).
    pub fn shared_across_processes(mut self, yes: bool) -> Self {
        self.shared_across_processes = yes;
        self
    }

    /// Sets [`shared_across_machines`](Self::shared_across_machines).
    pub fn shared_across_machines(mut self, yes: bool) -> Self {
        self.shared_across_machines = yes;
        self
    }

    /// Sets [`takeover_needs_observation`](Self::takeover_needs_observation).
    pub fn takeover_needs_observation(mut self, yes: bool) -> Self {
        self.takeover_needs_observation = yes;
        self
    }
}

/// An opaque lease id, chosen by the requester before the first attempt so
/// that a retry after an ambiguous failure can be recognised as the same
/// request. It is a random UUID (Azure requires GUID-shaped lease ids).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LeaseId(String);

impl LeaseId {
    /// A fresh random lease id.
    pub fn random() -> Self {
        LeaseId(uuid::Uuid::new_v4().hyphenated().to_string())
    }

    /// Wraps a lease id read back from a store.
    pub fn from_stored(id: impl Into<String>) -> Self {
        LeaseId(id.into())
    }

    /// The id as a string (a hyphenated lowercase UUID for ids made here).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only a prefix: the full id lets anyone renew or release the lease.
        write!(f, "LeaseId({}…)", &self.0[..self.0.len().min(8)])
    }
}

/// Who holds (or asks for) a lease: the machine, the process and an optional
/// label chosen by the user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Owner {
    /// Host name of the holder's machine.
    pub host: String,
    /// Process id of the holder.
    pub pid: u32,
    /// Optional label (at most [`MAX_LABEL_LEN`](crate::MAX_LABEL_LEN) bytes).
    pub label: Option<String>,
}

impl Owner {
    /// This process on this host, without a label.
    pub fn current() -> Self {
        Owner {
            host: hostname(),
            pid: std::process::id(),
            label: None,
        }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.label {
            Some(label) => write!(f, "{label} on {}, pid {}", self.host, self.pid),
            None => write!(f, "{}, pid {}", self.host, self.pid),
        }
    }
}

fn hostname() -> String {
    // std has no hostname API and one libc call does not justify a crate.
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates
    // on success when the name fits, and we cap at the buffer length anyway.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown-host".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// One attempt to take a lease.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    /// The key to lease.
    pub key: Key,
    /// The id the new lease will carry.
    pub lease_id: LeaseId,
    /// How long the lease lasts without renewal, within the backend's range.
    pub ttl: Duration,
    /// Who asks.
    pub owner: Owner,
    /// Optional user data stored with the lease.
    pub data: Option<String>,
}

/// The answer to one [`Backend::try_acquire`].
#[derive(Debug, Clone)]
pub enum AcquireOutcome {
    /// The lease is ours.
    Acquired(Grant),
    /// Someone else holds the key; who, when the backend can tell.
    Held(Option<HolderInfo>),
}

/// What a successful acquisition returns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grant {
    /// The fencing token of this acquisition.
    pub fencing_token: u64,
}

impl Grant {
    /// A grant with the given fencing token.
    pub fn new(fencing_token: u64) -> Self {
        Grant { fencing_token }
    }
}

/// A lease we hold, as passed to [`Backend::renew`] and [`Backend::release`].
#[derive(Debug, Clone)]
pub struct Lease {
    /// The leased key.
    pub key: Key,
    /// Our lease id.
    pub lease_id: LeaseId,
    /// The TTL the lease was taken with.
    pub ttl: Duration,
    /// The fencing token it was granted with.
    pub fencing_token: u64,
}

/// The current holder of a key, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct HolderInfo {
    /// Who holds it.
    pub owner: Owner,
    /// The data they stored with the lease.
    pub data: Option<String>,
    /// The fencing token of their acquisition.
    pub fencing_token: u64,
    /// When they acquired it (their wall clock), when known.
    #[serde(rename = "acquired_at_unix_ms", serialize_with = "ser_time")]
    pub acquired_at: Option<SystemTime>,
    /// How long until the lease runs out without renewal, on the backend's
    /// clock, when the backend can tell.
    #[serde(rename = "expires_in_ms", serialize_with = "ser_duration")]
    pub expires_in: Option<Duration>,
    /// The TTL they asked for, when known.
    #[serde(rename = "ttl_ms", serialize_with = "ser_duration")]
    pub ttl: Option<Duration>,
}

impl HolderInfo {
    /// Holder information with only the owner and token known.
    pub fn new(owner: Owner, fencing_token: u64) -> Self {
        HolderInfo {
            owner,
            data: None,
            fencing_token,
            acquired_at: None,
            expires_in: None,
            ttl: None,
        }
    }

    /// Sets the user data.
    pub fn with_data(mut self, data: Option<String>) -> Self {
        self.data = data;
        self
    }

    /// Sets the acquisition time.
    pub fn with_acquired_at(mut self, at: Option<SystemTime>) -> Self {
        self.acquired_at = at;
        self
    }

    /// Sets the remaining lease time.
    pub fn with_expires_in(mut self, expires_in: Option<Duration>) -> Self {
        self.expires_in = expires_in;
        self
    }

    /// Sets the TTL.
    pub fn with_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.ttl = ttl;
        self
    }
}

/// What a store knows about one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct KeyInfo {
    /// The key.
    pub key: Key,
    /// The last fencing token issued for the key (0 if none ever was).
    pub fencing_token: u64,
    /// The current holder, if the key is held.
    pub holder: Option<HolderInfo>,
}

impl KeyInfo {
    /// Builds a key description.
    pub fn new(key: Key, fencing_token: u64, holder: Option<HolderInfo>) -> Self {
        KeyInfo {
            key,
            fencing_token,
            holder,
        }
    }
}

impl Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

fn ser_time<S: serde::Serializer>(
    t: &Option<SystemTime>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()) {
        // Milliseconds since the Unix epoch: unambiguous and easy for jq.
        Some(d) => s.serialize_some(&(d.as_millis() as u64)),
        None => s.serialize_none(),
    }
}

fn ser_duration<S: serde::Serializer>(
    d: &Option<Duration>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&(d.as_millis() as u64)),
        None => s.serialize_none(),
    }
}
