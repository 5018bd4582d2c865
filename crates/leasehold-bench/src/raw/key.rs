//! What every raw loop writes: its key, and the wall clock's time.

use std::time::{SystemTime, UNIX_EPOCH};

/// The key every raw loop acquires and releases.
pub const RAW_KEY: &str = "raw-overhead";

/// Milliseconds since the Unix epoch, as leasehold's records give times.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
