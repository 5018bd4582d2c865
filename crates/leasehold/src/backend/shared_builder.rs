//! What the stores' builders and backends do alike, written once: the
//! URL's scheme, the max TTL's range, the store's recorded max TTL as
//! the backend last read it (the server stores'
//! [`capabilities`](crate::backend::Backend::capabilities)), the options
//! every server store's builder takes ([`ServerOptions`]) and what its
//! backend keeps alike ([`ServerCommon`]). Each store writes out its own
//! builder methods and `Backend` methods, with docs that say what they
//! mean for that store, as one-line calls to these.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crate::backend::params::QueryParams;
use crate::backend::{
    Capabilities, EpochRead, Listener, ReleaseWatch, StoreEpoch, DEFAULT_STORE_MAX_TTL,
};
use crate::clock::{SharedClock, SystemClock};
use crate::{Creation, Error, Key, Result};

/// The scheme and the rest of a store URL `SCHEME://REST` whose scheme is
/// one of `schemes`.
///
/// # Errors
/// [`Error::InvalidInput`] ("store URL", the message `form`) for any other.
pub fn split_scheme<'a>(url: &'a str, schemes: &[&str], form: &str) -> Result<(&'a str, &'a str)> {
    match url.split_once("://") {
        Some((scheme, rest)) if schemes.contains(&scheme) => Ok((scheme, rest)),
        _ => Err(Error::invalid("store URL", form)),
    }
}

/// Checks the max TTL a builder is to record against the store's range.
///
/// # Errors
/// [`Error::InvalidInput`] ("max ttl") naming the value and the range.
pub fn check_max_ttl(max_ttl: Duration, min: Duration, max: Duration) -> Result<()> {
    check_range("max ttl", max_ttl, min, max, || {
        format!("{max_ttl:?} is outside {min:?}..={max:?}")
    })
}

/// Checks that `value` (of the parameter `what`) is within `min..=max`.
///
/// # Errors
/// [`Error::InvalidInput`] (`what`, the message `message` writes).
pub fn check_range(
    what: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
    message: impl FnOnce() -> String,
) -> Result<()> {
    require(what, (min..=max).contains(&value), message)
}

/// `Ok` when `ok`, else [`Error::InvalidInput`] (`what`, the message
/// `message` writes): the end of the stores' checks of names and values.
///
/// # Errors
/// As said.
pub fn require(what: &'static str, ok: bool, message: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(what, message()))
    }
}

/// The capabilities of a store shared across processes and machines (every
/// store but memory and SQLite): leases from `min_ttl` to `max_ttl`.
pub fn shared_capabilities(min_ttl: Duration, max_ttl: Duration) -> Capabilities {
    Capabilities::new(min_ttl, max_ttl)
        .shared_across_processes(true)
        .shared_across_machines(true)
}

/// A store's recorded max TTL as the backend last read it (in ms).
#[derive(Debug)]
pub struct RecordedMaxTtl(AtomicU64);

impl RecordedMaxTtl {
    /// `max_ttl`, until the store says otherwise.
    pub fn new(max_ttl: Duration) -> Self {
        RecordedMaxTtl(AtomicU64::new(max_ttl.as_millis() as u64))
    }

    /// The max TTL as last read.
    pub fn get(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::Relaxed))
    }

    /// Keeps the max TTL just read.
    pub fn set(&self, max_ttl: Duration) {
        self.0.store(max_ttl.as_millis() as u64, Ordering::Relaxed);
    }

    /// A server store's capabilities: leases from `min_ttl` to the max TTL
    /// as last read, shared across processes and machines.
    pub fn capabilities(&self, min_ttl: Duration) -> Capabilities {
        shared_capabilities(min_ttl, self.get())
    }
}

/// What every server store's builder (PostgreSQL, Redis, etcd) takes
/// alike: the max TTL a new store records, how long one request may take,
/// whether waiters hear of releases, and what opening may do.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The max TTL a store started by the backend records (default
    /// [`DEFAULT_STORE_MAX_TTL`]).
    pub max_ttl: Duration,
    /// How long one request may take (default 5 s).
    pub request_timeout: Duration,
    /// Whether waiters hear of releases (default: yes).
    pub wake_ups: bool,
    /// What opening may do (default [`Creation::IfMissing`]).
    pub creation: Creation,
    /// The monotonic clock the backend times what it relies on with (the
    /// system's, which counts a suspend, unless set; tests inject a
    /// [`ManualClock`](crate::backend::ManualClock)).
    pub clock: Option<SharedClock>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_ttl: DEFAULT_STORE_MAX_TTL,
            request_timeout: Duration::from_secs(5),
            wake_ups: true,
            creation: Creation::IfMissing,
            clock: None,
        }
    }
}

impl ServerOptions {
    /// The clock set with `clock`, or the system's.
    pub fn clock_or_system(&self) -> SharedClock {
        self.clock.clone().unwrap_or_else(SystemClock::shared)
    }

    /// Takes `max_ttl` and `wake_ups` from a store URL's parsed query.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed value.
    pub fn read_query(&mut self, query: &QueryParams) -> Result<()> {
        if let Some(max_ttl) = query.duration("max_ttl")? {
            self.max_ttl = max_ttl;
        }
        if let Some(on) = query.boolean("wake_ups")? {
            self.wake_ups = on;
        }
        Ok(())
    }
}

/// What a server store's backend keeps alike: the store's epoch as read
/// while opening (and whether opening created the store), and the listener for releases when wake-ups are on. The
/// backend's [`Backend`](crate::backend::Backend) methods that ask for them
/// (`epoch_at_open`, `created_at_open`, `watch_release`) return what its
/// methods of the same names say.
#[derive(Debug, Default)]
pub struct ServerCommon {
    opened: OnceLock<EpochRead>,
    created: OnceLock<bool>,
    listener: Option<Listener>,
}

impl ServerCommon {
    /// With `listener` for releases (none: waiters only poll).
    pub fn new(listener: Option<Listener>) -> Self {
        ServerCommon {
            opened: OnceLock::new(),
            created: OnceLock::new(),
            listener,
        }
    }

    /// Keeps `epoch`, read just now while opening (the first one only).
    pub fn opened(&self, epoch: StoreEpoch) {
        let _ = self.opened.set(EpochRead::now(epoch));
    }

    /// Keeps whether opening created the store (the first call only): see
    /// [`Backend::created_at_open`](crate::backend::Backend::created_at_open).
    pub fn created(&self, created: bool) {
        let _ = self.created.set(created);
    }

    /// Whether opening created the store, if the backend said.
    pub fn created_at_open(&self) -> Option<bool> {
        self.created.get().copied()
    }

    /// The epoch read while opening, its age as of now.
    pub fn epoch_at_open(&self) -> Option<StoreEpoch> {
        self.opened.get().map(EpochRead::as_of_now)
    }

    /// The listener for releases, when wake-ups are on.
    pub fn listener(&self) -> Option<&Listener> {
        self.listener.as_ref()
    }

    /// A watch for the release of `keys`, when wake-ups are on.
    pub fn watch_release(&self, keys: &[Key]) -> Option<ReleaseWatch> {
        self.listener.as_ref()?.watch(keys)
    }

    /// Waits until the listener listens (started on the first wait
    /// otherwise); at once when wake-ups are off.
    ///
    /// # Cancel safety
    /// Cancel safe: the listening goes on.
    pub async fn listening(&self) {
        if let Some(l) = &self.listener {
            l.listening().await;
        }
    }
}
