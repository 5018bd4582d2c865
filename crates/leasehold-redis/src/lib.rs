//! Redis backend for [leasehold] (docs to follow).

#![warn(missing_docs)]

mod backend;
mod builder;
mod error;
mod listen;
mod record;

use std::time::Duration;

pub use backend::{acquire_and_release_scripts, RedisBackend};
pub use builder::{RedisBackendBuilder, DEFAULT_PREFIX};

/// Re-exported for building connection settings in code.
pub use redis;

/// Shortest TTL (and store max TTL) this backend accepts.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Longest store max TTL this backend accepts.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
