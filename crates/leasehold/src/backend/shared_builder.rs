//! What the stores' builders and backends do alike, written once: the
//! URL's scheme, the max TTL's range, and the store's recorded max TTL as
//! the backend last read it (the server stores'
//! [`capabilities`](crate::backend::Backend::capabilities)).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::backend::Capabilities;
use crate::{Error, Result};

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
    if (min..=max).contains(&max_ttl) {
        Ok(())
    } else {
        Err(Error::invalid(
            "max ttl",
            format!("{max_ttl:?} is outside {min:?}..={max:?}"),
        ))
    }
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
        Capabilities::new(min_ttl, self.get())
            .shared_across_processes(true)
            .shared_across_machines(true)
    }
}
