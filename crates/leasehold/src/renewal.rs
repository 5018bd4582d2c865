//! The background task that keeps a lease alive and detects its loss, and
//! the scheduler that starts it.
//!
//! A guard's renewal task is started only when its first renewal falls due
//! (a third of the TTL after the grant, by default), by one scheduler task
//! per tokio runtime: most leases are released before then, and a lease
//! that never needs its task costs no spawn and no wake-up of another
//! thread (two per lease, which in a tight acquire/release loop on SQLite
//! cost about a tenth of the loop's speed). A guard joins the scheduler's
//! queue under a lock and wakes the scheduler only if it is due before the
//! scheduler would wake anyway; a guard that ends first leaves the queue.
//! Until its task starts, nothing about a lease can change but the clock:
//! [`LeaseGuard::is_lost`](crate::LeaseGuard::is_lost) reads the clock, and
//! the task starts before the safety deadline (which is later than the
//! first renewal).
//!
//! # Waits on the lease's clock
//! Every wait here that acts on a lease's deadline ends by that deadline on
//! the lease's [`Clock`](crate::backend::Clock), through
//! [`Clock::sleep_until`](crate::backend::Clock::sleep_until), never on tokio's
//! timers alone: the task's sleep until its next renewal (or the deadline),
//! the limit on a renewal in flight, and the scheduler's sleep until the
//! earliest first renewal it holds (one wait per clock, re-made when an
//! earlier one joins: not one per queued lease). tokio's timers run on
//! `CLOCK_MONOTONIC`, which stands still while the machine is suspended,
//! and [`SystemClock`](crate::backend::SystemClock) (`CLOCK_BOOTTIME`) does not: a
//! lease whose deadline passed during a suspend is lost on resume, and the
//! task or the scheduler wakes then (within a timer's slack), so
//! [`LeaseGuard::lost`](crate::LeaseGuard::lost) completes then, not a
//! suspend later. Tested by `tests/guard_and_waiting.rs`
//! (the `a_suspend_*` tests, with a
//! [`ManualClock`](crate::backend::ManualClock) moved as a suspend moves the boot
//! clock) and `src/boot_timer.rs`'s tests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::backend::{Backend, Lease};
use crate::clock::SharedClock;
use crate::error::{Error, LossReason};
use crate::guard::GuardState;
use crate::options::ResolvedOptions;

/// Renews one lease until it is lost or its guard stops it (released or
/// dropped: the guard itself then releases the lease).
pub(crate) struct RenewalLoop {
    pub backend: Arc<dyn Backend>,
    pub lease: Lease,
    pub opts: ResolvedOptions,
    pub state: Arc<GuardState>,
    /// Clock time at which the next renewal is due, minus one interval (the
    /// send time of the last successful request).
    pub next_renewal: Duration,
    /// Cancelled by the guard when it ends the lease; a renewal in flight is
    /// abandoned.
    pub stop: CancellationToken,
}

enum Step {
    Renewed,
    Stop,
    Lost,
}

impl RenewalLoop {
    pub async fn run(mut self) {
        self.next_renewal += self.opts.renew_interval;
        let mut failures: u32 = 0;
        loop {
            match self.step(&mut failures).await {
                Step::Renewed => continue,
                Step::Stop => return,
                Step::Lost => {
                    // Let local waiters try the backend now; the lease is no
                    // longer ours to keep from them. The guard releases it.
                    self.state.let_go();
                    return;
                }
            }
        }
    }

    /// Waits for the next renewal (or the deadline, or the guard's stop) and
    /// performs it.
    async fn step(&mut self, failures: &mut u32) -> Step {
        let clock = self.state.clock.clone();
        let deadline = self.state.deadline();
        let now = clock.now();
        if now >= deadline {
            self.lose(LossReason::Expired);
            return Step::Lost;
        }
        let wake = self.next_renewal.min(deadline);
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => return Step::Stop,
            // On the lease's clock: ends on resume if a suspend passed it.
            _ = clock.sleep_until(wake) => {}
        }
        let sent = clock.now();
        if sent >= deadline {
            self.lose(LossReason::Expired);
            return Step::Lost;
        }
        if sent < self.next_renewal {
            return Step::Renewed;
        }
        let outcome = tokio::select! {
            biased;
            _ = self.stop.cancelled() => return Step::Stop,
            r = self.backend.renew_ran(&self.lease) => Ok(r),
            // Whatever the network does, the guard is lost at the deadline
            // (on the lease's clock).
            _ = clock.sleep_until(deadline) => Err(()),
        };
        self.state.labels.renewal(match &outcome {
            Ok(Ok(_)) => "ok",
            Ok(Err(Error::LeaseLost { .. })) | Err(()) => "lost",
            Ok(Err(_)) => "error",
        });
        match outcome {
            Ok(Ok(ran)) => {
                *failures = 0;
                // Counted from the send, or from earlier where the store
                // says part of the TTL had already run out.
                let from = sent.saturating_sub(ran);
                if !self
                    .state
                    .set_deadline(from + self.opts.trusted - self.opts.safety_margin)
                {
                    // Answered after the deadline passed: the lease may have
                    // been counted as lost already, and stays so.
                    self.lose(LossReason::Expired);
                    return Step::Lost;
                }
                self.next_renewal = from + self.opts.renew_interval;
                tracing::debug!(key = %self.lease.key, token = self.lease.fencing_token, "renewed");
                Step::Renewed
            }
            Ok(Err(Error::LeaseLost { reason, .. })) => {
                self.lose(reason);
                Step::Lost
            }
            Ok(Err(err)) => {
                *failures += 1;
                let pause = self.backoff(*failures);
                tracing::warn!(key = %self.lease.key, error = %err, retry_in = ?pause, "renewal failed; retrying until the safety deadline");
                self.next_renewal = clock.now() + pause;
                Step::Renewed
            }
            Err(()) => {
                self.lose(LossReason::Expired);
                Step::Lost
            }
        }
    }

    /// Exponential backoff with jitter for retrying a failed renewal:
    /// 50 ms, 100 ms, … capped at a quarter of the renew interval.
    fn backoff(&self, failures: u32) -> Duration {
        use rand::Rng;
        let cap = (self.opts.renew_interval / 4).max(Duration::from_millis(10));
        let base = Duration::from_millis(50)
            .saturating_mul(1u32 << failures.min(16))
            .min(cap);
        base.mul_f64(rand::rng().random_range(0.5..=1.0))
    }

    fn lose(&mut self, reason: LossReason) {
        self.state.lose(reason);
    }
}

/// Starts renewal loops on this runtime when their first renewal is due.
#[derive(Debug)]
struct Scheduler {
    runtime: tokio::runtime::Id,
    queue: Mutex<Queue>,
    /// Rung when a loop joins the queue ahead of the scheduler's wake-up.
    wake: Notify,
    /// Set once, right after it is spawned.
    task: OnceLock<tokio::task::JoinHandle<()>>,
    /// How many times it has looked at the queue (woken by its timer or
    /// rung), for the tests.
    #[cfg(test)]
    looks: std::sync::atomic::AtomicU64,
}

/// How long the scheduler keeps a clock's queue that it found empty, and
/// sleeps on its timer, before it drops it: a lease granted meanwhile whose
/// first renewal is due later joins without ringing it. Without this,
/// each short hold (granted, then released before its first renewal: the
/// common case) rang the scheduler, whose look found the queue empty
/// again and dropped it, so that the next grant rang it again: a task
/// woken on the runtime, most often on another worker thread, at every
/// grant (measured: a PostgreSQL lock cycle on a worker thread at 0.6x the
/// raw loop's speed instead of 0.9x; docs/benchmarks.md, section 13).
/// It never delays a renewal: a loop due before the kept wake-up time
/// rings the scheduler, as before.
const IDLE_LOOK: Duration = Duration::from_millis(250);

#[derive(Debug, Default)]
struct Queue {
    /// The loops, by the clock their leases are timed on: one entry for
    /// all the stores on the shared [`SystemClock`](crate::backend::SystemClock)
    /// (unless some were given clocks of their own).
    clocks: Vec<ClockQueue>,
    arrivals: u64,
}

/// The loops whose leases are timed on one clock.
#[derive(Debug)]
struct ClockQueue {
    clock: SharedClock,
    /// By due time on `clock` (and arrival, to keep entries apart).
    due: BTreeMap<(Duration, u64), RenewalLoop>,
    /// When the scheduler wakes next for this clock by itself, if it
    /// sleeps on its timer.
    wakes_at: Option<Duration>,
    /// The scheduler found it empty at its last look and keeps it until
    /// [`IDLE_LOOK`] later.
    idle: bool,
}

impl Queue {
    /// The loops on `clock`, made if need be.
    fn on(&mut self, clock: &SharedClock) -> &mut ClockQueue {
        let id = clock_id(clock);
        match self.clocks.iter().position(|q| clock_id(&q.clock) == id) {
            Some(i) => &mut self.clocks[i],
            None => {
                self.clocks.push(ClockQueue {
                    clock: clock.clone(),
                    due: BTreeMap::new(),
                    wakes_at: None,
                    idle: false,
                });
                self.clocks.last_mut().expect("just pushed")
            }
        }
    }
}

/// Which clock a lease is timed on: the address of its shared clock (the
/// queue keeps a clone, so the address is not reused while it is there).
fn clock_id(clock: &SharedClock) -> usize {
    Arc::as_ptr(clock).cast::<()>() as usize
}

impl std::fmt::Debug for RenewalLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenewalLoop")
            .field("key", &self.lease.key)
            .finish_non_exhaustive()
    }
}

/// One scheduler per runtime that has granted a lease (a store may be used
/// from several runtimes, and a loop must run on one that is alive), made on
/// first use; one whose runtime has shut down is replaced.
static SCHEDULERS: Mutex<Vec<Arc<Scheduler>>> = Mutex::new(Vec::new());

/// A renewal loop waiting in the scheduler's queue; [`Scheduled::cancel`]
/// takes it out if it has not started.
#[derive(Debug)]
pub(crate) struct Scheduled {
    scheduler: Arc<Scheduler>,
    clock: usize,
    at: (Duration, u64),
}

impl RenewalLoop {
    /// Starts this loop when its first renewal is due. Called inside a
    /// tokio runtime.
    pub fn schedule(self) -> Scheduled {
        let due = self.next_renewal + self.opts.renew_interval;
        let clock = self.state.clock.clone();
        let scheduler = Scheduler::current();
        let mut queue = scheduler.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.arrivals += 1;
        let at = (due, queue.arrivals);
        let on_clock = queue.on(&clock);
        on_clock.due.insert(at, self);
        if on_clock.wakes_at.is_none_or(|t| due < t) {
            scheduler.wake.notify_one();
        }
        drop(queue);
        Scheduled {
            scheduler,
            clock: clock_id(&clock),
            at,
        }
    }
}

impl Scheduled {
    /// Takes the loop out of the queue if it has not started (a started
    /// one is stopped by its guard's stop token).
    pub fn cancel(&self) {
        let mut queue = self
            .scheduler
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // A clock's queue left empty stays until the scheduler next looks,
        // with its wake-up time: a guard that joins behind it wakes nobody.
        if let Some(on_clock) = queue
            .clocks
            .iter_mut()
            .find(|q| clock_id(&q.clock) == self.clock)
        {
            on_clock.due.remove(&self.at);
        }
    }
}

impl Scheduler {
    /// This runtime's scheduler, started if need be.
    fn current() -> Arc<Scheduler> {
        let handle = tokio::runtime::Handle::current();
        let id = handle.id();
        let mut all = SCHEDULERS.lock().unwrap_or_else(|e| e.into_inner());
        // Those of runtimes that shut down go (their loops with them).
        all.retain(|s| s.alive());
        if let Some(s) = all.iter().find(|s| s.runtime == id) {
            return s.clone();
        }
        let scheduler = Arc::new(Scheduler {
            runtime: id,
            queue: Mutex::default(),
            wake: Notify::new(),
            task: OnceLock::new(),
            #[cfg(test)]
            looks: Default::default(),
        });
        let task = handle.spawn(scheduler.clone().run());
        let _ = scheduler.task.set(task);
        all.push(scheduler.clone());
        scheduler
    }

    fn alive(&self) -> bool {
        self.task.get().is_some_and(|t| !t.is_finished())
    }

    /// Starts every loop that is due, then sleeps until the next one is (on
    /// its lease's clock), or until one joins ahead of it. Ends with its
    /// runtime.
    async fn run(self: Arc<Self>) {
        loop {
            let wake = self.wake.notified();
            tokio::pin!(wake);
            wake.as_mut().enable();
            #[cfg(test)]
            self.looks
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut due = Vec::new();
            let next: Vec<(SharedClock, Duration)> = {
                let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                queue.clocks.retain_mut(|on_clock| {
                    let now = on_clock.clock.now();
                    while let Some(entry) = on_clock.due.first_entry() {
                        if entry.key().0 > now {
                            break;
                        }
                        due.push(entry.remove());
                    }
                    on_clock.wakes_at = on_clock.due.keys().next().map(|(t, _)| *t);
                    match on_clock.wakes_at {
                        Some(_) => on_clock.idle = false,
                        // Found empty: kept for a while, with a wake-up
                        // time a loop due later joins behind without
                        // ringing (see [`IDLE_LOOK`]).
                        None if !on_clock.idle => {
                            on_clock.idle = true;
                            on_clock.wakes_at = Some(now + IDLE_LOOK);
                        }
                        // Still empty after that: it goes; a guard that
                        // comes later makes it again and rings.
                        None => {}
                    }
                    on_clock.wakes_at.is_some()
                });
                queue
                    .clocks
                    .iter()
                    .filter_map(|q| Some((q.clock.clone(), q.wakes_at?)))
                    .collect()
            };
            // Outside the lock: thousands may fall due at once.
            for renewal in due {
                tokio::spawn(renewal.run());
            }
            if next.is_empty() {
                wake.await;
                continue;
            }
            // One wait per clock (most often one in all), for its earliest
            // loop.
            let mut sleeps: Vec<_> = next.iter().map(|(c, t)| c.sleep_until(*t)).collect();
            let any_due = std::future::poll_fn(|cx| {
                if sleeps.iter_mut().any(|s| s.as_mut().poll(cx).is_ready()) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            });
            tokio::select! {
                _ = any_due => {}
                _ = wake => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use super::{Scheduler, IDLE_LOOK};
    use crate::{LockOptions, Store};

    /// Short holds, each released before its first renewal is due (the
    /// common case): the renewal scheduler is not woken at every grant.
    /// It was: each grant rang it, its look found the queue empty (the
    /// hold had ended) and dropped it, so the next grant rang it again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn short_holds_do_not_wake_the_scheduler_each_time() {
        let store = Store::open("memory:").unwrap();
        let lock = store
            .lock_with("scheduler/short-holds", LockOptions::new())
            .unwrap();
        // The first grant starts the scheduler and rings it.
        lock.acquire().await.unwrap().release().await.unwrap();
        let scheduler = Scheduler::current();
        let started = Instant::now();
        let before = scheduler.looks.load(Ordering::Relaxed);
        for _ in 0..50 {
            lock.acquire().await.unwrap().release().await.unwrap();
            // Time for a rung scheduler to look, once the hold has ended
            // (as a hold over a network round trip ends before the other
            // worker thread that the ring wakes gets to look).
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let looks = scheduler.looks.load(Ordering::Relaxed) - before;
        // At most two looks each IDLE_LOOK (its timer ends the idle wait,
        // then the next grant rings it), and two to start.
        let periods = (started.elapsed().as_secs_f64() / IDLE_LOOK.as_secs_f64()).ceil() as u64;
        assert!(
            looks <= 2 + 2 * periods,
            "the scheduler looked {looks} times in 50 short holds ({:?})",
            started.elapsed()
        );
    }
}
