//! Waits that end at a time on `CLOCK_BOOTTIME` (Linux): what
//! [`SystemClock::sleep_until`](crate::backend::Clock::sleep_until) is made of.
//!
//! tokio's timers run on `CLOCK_MONOTONIC`, which stands still while the
//! machine is suspended: a wait for a lease deadline on it ends late by the
//! whole suspend. A timerfd on `CLOCK_BOOTTIME` armed at an absolute time
//! (`TFD_TIMER_ABSTIME`) fires when the boot clock reaches that time, however
//! long the machine slept in between, and at once on resume if it slept
//! past it.
//!
//! One timer serves the whole process. Waits join a queue ordered by due
//! time; the timer is armed at the queue's earliest entry, and one thread
//! (`leasehold-boot-timer`, started by the first wait) blocks reading it
//! and wakes the waits that are due. A wait costs a queue entry and, only
//! when it is the earliest, one `timerfd_settime`; thousands of held leases
//! cost no file descriptor each. A waiting thread rather than tokio's
//! `AsyncFd`, because `AsyncFd` needs the runtime's IO driver, which a
//! runtime built with `enable_time()` alone lacks (and `AsyncFd` then
//! panics), and would need one timer per runtime. The timerfd calls go
//! through rustix's safe wrappers.
//!
//! If the timer cannot be made (no timerfd, no thread), [`sleep_until`]
//! says so and the caller falls back to re-reading the clock.

use std::collections::BTreeMap;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};

use crate::clock::{Clock, SystemClock};

/// The process's timer on the boot clock.
struct BootTimer {
    fd: OwnedFd,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    /// Waiting wakers by due time (and arrival, to keep entries apart).
    waits: BTreeMap<(Duration, u64), Waker>,
    arrivals: u64,
    /// When the timer fires next, if it is armed.
    armed: Option<Duration>,
}

/// The timer, made (and its thread started) on first use; `None` if that
/// failed.
fn timer() -> Option<&'static BootTimer> {
    static TIMER: OnceLock<Option<&'static BootTimer>> = OnceLock::new();
    *TIMER.get_or_init(|| {
        let fd = timerfd_create(TimerfdClockId::Boottime, TimerfdFlags::CLOEXEC)
            .inspect_err(|e| tracing::warn!(error = %e, "no timerfd on CLOCK_BOOTTIME; lease timers re-read the clock instead"))
            .ok()?;
        // Lives as long as the process, like its thread.
        let timer: &'static BootTimer = Box::leak(Box::new(BootTimer {
            fd,
            queue: Mutex::default(),
        }));
        std::thread::Builder::new()
            .name("leasehold-boot-timer".into())
            .stack_size(64 * 1024)
            .spawn(move || timer.run())
            .inspect_err(|e| tracing::warn!(error = %e, "could not start the boot-clock timer thread; lease timers re-read the clock instead"))
            .ok()?;
        Some(timer)
    })
}

impl BootTimer {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The thread: waits for the timer to fire, wakes the waits that are
    /// due, arms it for the next.
    fn run(&self) {
        let mut expiries = [0u8; 8];
        loop {
            match rustix::io::read(&self.fd, &mut expiries) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    // Not expected of a blocking timerfd. Rather than stop
                    // waking the waits, look at the clock every 10 ms.
                    tracing::error!(error = %e, "reading the boot-clock timer failed");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            let now = SystemClock.now();
            let mut due = Vec::new();
            let mut queue = self.queue();
            while let Some(entry) = queue.waits.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                due.push(entry.remove());
            }
            let next = queue.waits.keys().next().map(|(t, _)| *t);
            self.arm(&mut queue, next);
            drop(queue);
            for waker in due {
                waker.wake();
            }
        }
    }

    /// Arms the timer to fire at `at` on the boot clock (at once if that has
    /// passed), or disarms it.
    fn arm(&self, queue: &mut Queue, at: Option<Duration>) {
        let time = |d: Duration| Timespec {
            tv_sec: d.as_secs() as _,
            tv_nsec: d.subsec_nanos() as _,
        };
        // A zero time disarms; a wait is never due at the boot clock's zero.
        let value = at.map_or(Duration::ZERO, |at| at.max(Duration::from_nanos(1)));
        let spec = Itimerspec {
            it_interval: time(Duration::ZERO),
            it_value: time(value),
        };
        // Fails only for an invalid fd or time; neither can happen here.
        if let Err(e) = timerfd_settime(&self.fd, TimerfdTimerFlags::ABSTIME, &spec) {
            tracing::error!(error = %e, "arming the boot-clock timer failed");
        }
        queue.armed = at;
    }
}

/// A wait that ends when the boot clock reaches `at`, or `None` if this
/// process has no boot-clock timer.
pub(crate) fn sleep_until(at: Duration) -> Option<impl Future<Output = ()> + Send + 'static> {
    Some(BootSleep {
        timer: timer()?,
        at,
        entry: None,
    })
}

struct BootSleep {
    timer: &'static BootTimer,
    at: Duration,
    /// Its place in the queue, once it waits.
    entry: Option<(Duration, u64)>,
}

impl Future for BootSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if SystemClock.now() >= this.at {
            this.leave();
            return Poll::Ready(());
        }
        let mut queue = this.timer.queue();
        match this.entry.and_then(|e| queue.waits.get_mut(&e)) {
            Some(waker) => waker.clone_from(cx.waker()),
            None => {
                // First poll (or woken just as the time came, and then
                // polled early by someone else): join the queue.
                queue.arrivals += 1;
                let entry = (this.at, queue.arrivals);
                queue.waits.insert(entry, cx.waker().clone());
                this.entry = Some(entry);
                if queue.armed.is_none_or(|armed| this.at < armed) {
                    this.timer.arm(&mut queue, Some(this.at));
                }
            }
        }
        Poll::Pending
    }
}

impl BootSleep {
    /// Leaves the queue (the timer stays armed: if this was the earliest
    /// wait it fires for nothing, and is armed for the next).
    fn leave(&mut self) {
        if let Some(entry) = self.entry.take() {
            self.timer.queue().waits.remove(&entry);
        }
    }
}

impl Drop for BootSleep {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The waits end on the boot clock, at or after their time and in their
    /// order, including one that joins ahead of the armed time and one
    /// dropped while it was the earliest.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waits_end_at_their_time_on_the_boot_clock() {
        let start = SystemClock.now();
        let at = move |ms| start + Duration::from_millis(ms);
        let late = tokio::spawn(async move {
            sleep_until(at(300)).unwrap().await;
            SystemClock.now()
        });
        tokio::task::yield_now().await;
        // Queued (the earliest, most likely) and dropped: the others still
        // end.
        let mut dropped = Box::pin(sleep_until(at(50)).unwrap());
        let _ = dropped
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        drop(dropped);
        let early = tokio::spawn(async move {
            sleep_until(at(150)).unwrap().await;
            SystemClock.now()
        });
        let bound = Duration::from_secs(5);
        let early = tokio::time::timeout(bound, early).await.unwrap().unwrap();
        let late = tokio::time::timeout(bound, late).await.unwrap().unwrap();
        assert!(early >= at(150), "{early:?} < {:?}", at(150));
        assert!(late >= at(300), "{late:?} < {:?}", at(300));
        assert!(early < late);
        // A time already passed ends at once.
        sleep_until(start).unwrap().await;
    }

    /// Many waits at once, at scattered times, all end (none is lost when
    /// the timer is re-armed under another's feet).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_waits_all_end() {
        let start = SystemClock.now();
        let waits: Vec<_> = (0..200u64)
            .map(|i| {
                let at = start + Duration::from_millis((i * 37) % 101);
                tokio::spawn(async move {
                    sleep_until(at).unwrap().await;
                    assert!(SystemClock.now() >= at);
                })
            })
            .collect();
        for w in waits {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .unwrap()
                .unwrap();
        }
    }
}
