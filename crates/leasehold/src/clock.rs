//! The clock leases are timed on.
//!
//! A lease deadline must not move when someone sets the wall clock, so every
//! deadline in leasehold is measured on a [`Clock`]: a monotonic count of time
//! since an arbitrary origin. Tests (and backends that reason about other
//! machines' clocks) can inject their own.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A monotonic clock: `now()` never goes back and does not follow changes of
/// the wall clock.
pub trait Clock: fmt::Debug + Send + Sync + 'static {
    /// Time since the clock's origin.
    fn now(&self) -> Duration;
}

/// The system's monotonic clock.
///
/// On Linux this is `CLOCK_BOOTTIME`: like `CLOCK_MONOTONIC` it is shared by
/// every process on the machine and ignores wall-clock changes, and unlike it
/// it keeps counting while the machine is suspended, so a lease that ran out
/// during a suspend is seen as run out on resume. Elsewhere it is
/// `CLOCK_MONOTONIC`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

#[cfg(target_os = "linux")]
const CLOCK_ID: libc::clockid_t = libc::CLOCK_BOOTTIME;
#[cfg(not(target_os = "linux"))]
const CLOCK_ID: libc::clockid_t = libc::CLOCK_MONOTONIC;

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the clock id is one the
        // platform defines. std's Instant does not expose its raw value, which
        // the SQLite store needs to share deadlines between processes.
        let rc = unsafe { libc::clock_gettime(CLOCK_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime failed on a clock that always exists");
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// A clock that moves only when told to, for tests.
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: std::sync::atomic::AtomicU64,
}

impl ManualClock {
    /// A manual clock at `start`.
    pub fn new(start: Duration) -> Self {
        ManualClock {
            nanos: std::sync::atomic::AtomicU64::new(start.as_nanos() as u64),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.nanos
            .fetch_add(by.as_nanos() as u64, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(std::sync::atomic::Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_never_goes_back() {
        let c = SystemClock;
        let mut last = c.now();
        for _ in 0..1000 {
            let now = c.now();
            assert!(now >= last);
            last = now;
        }
    }

    #[test]
    fn manual_clock_moves_when_told() {
        let c = ManualClock::new(Duration::from_secs(5));
        assert_eq!(c.now(), Duration::from_secs(5));
        c.advance(Duration::from_millis(1500));
        assert_eq!(c.now(), Duration::from_millis(6500));
    }
}
