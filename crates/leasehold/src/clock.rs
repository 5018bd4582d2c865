//! The clock leases are timed on.
//!
//! A lease deadline must not move when someone sets the wall clock, so every
//! deadline in leasehold is measured on a [`Clock`]: a monotonic count of time
//! since an arbitrary origin. Tests (and backends that reason about other
//! machines' clocks) can inject their own.
//!
//! Every wait that acts on a lease deadline (the renewal task's sleeps, the
//! scheduler that starts it, the limit on a renewal in flight) is made with
//! [`Clock::sleep_until`], on the lease's clock, not with tokio's timers:
//! those run on `CLOCK_MONOTONIC`, which stands still while the machine is
//! suspended, so a wait on them ends late by the whole suspend, while the
//! lease's deadline, on [`SystemClock`], went on counting.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// How often the default [`Clock::sleep_until`] re-reads the clock: the
/// most it ends late when the clock jumps ahead of tokio's.
pub const CLOCK_CHECK_STEP: Duration = Duration::from_secs(1);

/// A wait, as [`Clock::sleep_until`] returns it.
pub type ClockSleep<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// A monotonic clock: `now()` never goes back and does not follow changes of
/// the wall clock.
pub trait Clock: fmt::Debug + Send + Sync + 'static {
    /// Time since the clock's origin.
    fn now(&self) -> Duration;

    /// Completes once [`now`](Self::now) has reached `at` (at once if it
    /// has), even if tokio's clock stood still meanwhile, as it does while
    /// the machine is suspended.
    ///
    /// leasehold makes every wait that acts on a lease deadline with this
    /// (see the [renewal task](crate::LeaseGuard)), so that a lease lost
    /// while the machine slept is signalled on resume, not a suspend later.
    ///
    /// The default sleeps on tokio's timer in steps of at most
    /// [`CLOCK_CHECK_STEP`] and re-reads `now()` after each: it ends on
    /// time while this clock keeps pace with tokio's, and at most one step
    /// late when it jumped ahead. Implement it for a clock that can wake
    /// its waiters itself ([`SystemClock`] uses a timer on its own clock,
    /// [`ManualClock`] wakes them when moved). Needs a tokio runtime with
    /// its timer enabled.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future changes nothing.
    fn sleep_until(&self, at: Duration) -> ClockSleep<'_> {
        Box::pin(recheck_until(self, at))
    }
}

/// Sleeps on tokio's timer, in steps of at most [`CLOCK_CHECK_STEP`], until
/// `clock` reaches `at`.
async fn recheck_until<C: Clock + ?Sized>(clock: &C, at: Duration) {
    loop {
        let now = clock.now();
        if now >= at {
            return;
        }
        tokio::time::sleep((at - now).min(CLOCK_CHECK_STEP)).await;
    }
}

/// The system's monotonic clock.
///
/// On Linux this is `CLOCK_BOOTTIME`: like `CLOCK_MONOTONIC` it is shared by
/// every process on the machine and ignores wall-clock changes, and unlike it
/// it keeps counting while the machine is suspended, so a lease that ran out
/// during a suspend is seen as run out on resume. Elsewhere it is
/// `CLOCK_MONOTONIC`.
///
/// Its [`sleep_until`](Clock::sleep_until) ends on this clock too: on
/// Linux one timerfd on `CLOCK_BOOTTIME`, armed at an absolute time and
/// shared by every wait in the process, wakes a wait at its time even if
/// the machine was suspended past it (on resume, then); elsewhere, or if
/// the timerfd cannot be made, the clock is re-read every
/// [`CLOCK_CHECK_STEP`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

#[cfg(target_os = "linux")]
const CLOCK_ID: libc::clockid_t = libc::CLOCK_BOOTTIME;
#[cfg(not(target_os = "linux"))]
const CLOCK_ID: libc::clockid_t = libc::CLOCK_MONOTONIC;

impl SystemClock {
    /// One handle for the whole process: the stores made on the system
    /// clock share it, and so share one queue (and one wait) in the
    /// renewal scheduler, which groups leases by their clock handle.
    pub(crate) fn shared() -> SharedClock {
        static SHARED: std::sync::OnceLock<SharedClock> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| Arc::new(SystemClock)).clone()
    }
}

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

    fn sleep_until(&self, at: Duration) -> ClockSleep<'_> {
        #[cfg(target_os = "linux")]
        if let Some(sleep) = crate::boot_timer::sleep_until(at) {
            return Box::pin(sleep);
        }
        Box::pin(recheck_until(self, at))
    }
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// A clock that moves only when told to, for tests.
///
/// Moving it ends the [`sleep_until`](Clock::sleep_until) waits whose time
/// it reached, whatever tokio's clock says: a test moves it as the boot
/// clock moves across a suspend.
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: std::sync::atomic::AtomicU64,
    /// Rung whenever the clock moves.
    moved: tokio::sync::Notify,
}

impl ManualClock {
    /// A manual clock at `start`.
    pub fn new(start: Duration) -> Self {
        ManualClock {
            nanos: std::sync::atomic::AtomicU64::new(start.as_nanos() as u64),
            moved: tokio::sync::Notify::new(),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.nanos
            .fetch_add(by.as_nanos() as u64, std::sync::atomic::Ordering::SeqCst);
        self.moved.notify_waiters();
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(std::sync::atomic::Ordering::SeqCst))
    }

    fn sleep_until(&self, at: Duration) -> ClockSleep<'_> {
        Box::pin(async move {
            loop {
                let moved = self.moved.notified();
                tokio::pin!(moved);
                // Before reading the clock: a move right after the read
                // still wakes this wait.
                moved.as_mut().enable();
                if self.now() >= at {
                    return;
                }
                moved.await;
            }
        })
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

    /// A wait on a manual clock ends when the clock is moved to its time,
    /// not before, and whatever tokio's (paused) clock says.
    #[tokio::test(start_paused = true)]
    async fn manual_clock_wakes_its_waits_when_moved() {
        let c = Arc::new(ManualClock::new(Duration::from_secs(5)));
        let wait = tokio::spawn({
            let c = c.clone();
            async move { c.sleep_until(Duration::from_secs(65)).await }
        });
        tokio::task::yield_now().await;
        c.advance(Duration::from_secs(30));
        tokio::task::yield_now().await;
        assert!(!wait.is_finished());
        c.advance(Duration::from_secs(30));
        wait.await.unwrap();
        // A time already reached: at once.
        c.sleep_until(Duration::from_secs(1)).await;
    }

    /// The default `sleep_until` re-reads the clock: a clock that jumps
    /// ahead of tokio's ends the wait within a step.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_default_wait_notices_a_jump_within_a_step() {
        #[derive(Debug)]
        struct Jumpy(ManualClock);
        impl Clock for Jumpy {
            fn now(&self) -> Duration {
                self.0.now()
            }
        }
        let c = Arc::new(Jumpy(ManualClock::new(Duration::ZERO)));
        let wait = tokio::spawn({
            let c = c.clone();
            async move { c.sleep_until(Duration::from_secs(3600)).await }
        });
        c.0.advance(Duration::from_secs(3600));
        tokio::time::timeout(CLOCK_CHECK_STEP * 3, wait)
            .await
            .expect("the jump was not noticed within a step")
            .unwrap();
    }

    /// `SystemClock`'s wait ends at its time on `SystemClock` (on Linux,
    /// the boot-clock timer's; `boot_timer`'s tests cover it further).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn system_clock_wait_ends_at_its_time() {
        let at = SystemClock.now() + Duration::from_millis(100);
        tokio::time::timeout(Duration::from_secs(5), SystemClock.sleep_until(at))
            .await
            .unwrap();
        assert!(SystemClock.now() >= at);
    }
}
