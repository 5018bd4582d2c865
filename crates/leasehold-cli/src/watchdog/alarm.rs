//! The alarm: a timer on the boot clock that ends the watchdog's waits.

use std::os::fd::OwnedFd;
use std::time::Duration;

/// A timerfd on `CLOCK_BOOTTIME`, the clock of every deadline here, set to
/// an absolute time: readable from that time on, however long the machine
/// was suspended before it (ppoll's own timeout counts on
/// `CLOCK_MONOTONIC`, which does not count a suspend). Made with rustix's
/// safe wrappers.
pub struct Alarm {
    pub fd: OwnedFd,
}

impl Alarm {
    /// `None` if the kernel gives no timerfd on `CLOCK_BOOTTIME` (Linux
    /// before 3.15).
    pub fn new() -> Option<Alarm> {
        use rustix::time::{timerfd_create, TimerfdClockId, TimerfdFlags};
        let flags = TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK;
        timerfd_create(TimerfdClockId::Boottime, flags)
            .ok()
            .map(|fd| Alarm { fd })
    }

    /// Readable from `at` on the boot clock ([`now`](super::protocol::now)) on, at once if that
    /// has passed; not readable before (setting it clears an expiry not yet
    /// read).
    pub fn set(&self, at: Duration) {
        use rustix::time::{timerfd_settime, Itimerspec, TimerfdTimerFlags, Timespec};
        // A zero time would disarm it; the boot clock is never at zero.
        let at = at.max(Duration::from_nanos(1));
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: at.as_secs().min(i64::MAX as u64) as _,
                tv_nsec: at.subsec_nanos() as _,
            },
        };
        // Cannot fail with our own fd and a valid time; if it did, ppoll's
        // timeout would still end the wait (late by a suspend, as before).
        let _ = timerfd_settime(&self.fd, TimerfdTimerFlags::ABSTIME, &spec);
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;
    use crate::watchdog::protocol::now;

    fn readable(fd: libc::c_int, timeout_ms: libc::c_int) -> bool {
        let mut fds = [libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: a valid array of one pollfd.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, timeout_ms) == 1 }
    }

    /// The alarm is on the boot clock ([`now`]): set to now + 100 ms it is
    /// not readable before that time and is by it; set again, it forgets
    /// the expiry.
    #[test]
    fn the_alarm_fires_at_its_time_on_the_boot_clock() {
        let alarm = Alarm::new().expect("a timerfd on CLOCK_BOOTTIME");
        let fd = alarm.fd.as_raw_fd();
        let at = now() + Duration::from_millis(100);
        alarm.set(at);
        assert!(readable(fd, 5000), "the alarm did not fire within 5 s");
        assert!(now() >= at, "fired before its time on the boot clock");
        alarm.set(now() + Duration::from_secs(3600));
        assert!(!readable(fd, 0), "setting it again keeps an old expiry");
        alarm.set(now());
        assert!(readable(fd, 5000), "a time already passed does not fire");
    }
}
