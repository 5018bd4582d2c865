//! Words for people: durations, times, holders and runs as `leasehold`
//! says them.

use std::time::{Duration, SystemTime};

use leasehold::{HolderInfo, RunRecord};

use crate::output::clean;

/// "5m 3s ago (2026-11-22T02:00:03Z) by vm-1, pid 4242 (fencing token 9)".
pub fn describe_run(run: &RunRecord) -> String {
    format!(
        "{} ({}) by {} (fencing token {})",
        ago(run.ended_at),
        humantime::format_rfc3339_seconds(run.ended_at),
        clean(&run.owner),
        run.fencing_token
    )
}

/// Who holds a key, in a few words: its owner and for how long
/// ("another holder" when the store does not say).
pub fn describe_holder(holder: Option<&HolderInfo>) -> String {
    match holder {
        None => "another holder".into(),
        Some(h) => match held_for(h) {
            Some(d) => format!("{} for {}", clean(&h.owner), short(d)),
            None => clean(&h.owner),
        },
    }
}

/// "3m 5s ago" ("just now" for a time in our future: clock skew).
pub fn ago(at: SystemTime) -> String {
    match SystemTime::now().duration_since(at) {
        Ok(d) => format!("{} ago", short(d)),
        Err(_) => "just now".into(),
    }
}

/// How long the holder has held the key, by the wall clocks of both sides.
pub fn held_for(holder: &HolderInfo) -> Option<Duration> {
    holder
        .acquired_at
        .and_then(|at| SystemTime::now().duration_since(at).ok())
}

/// A duration rounded for people: "2m 5s", "800ms".
pub fn short(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

/// A duration as given, to the millisecond: "1s 500ms" (for messages about
/// what the user typed, where rounding would misquote them).
pub fn exact(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}
