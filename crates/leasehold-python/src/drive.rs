//! How a blocking call waits: its future is polled on the calling (Python)
//! thread, which spins briefly before it sleeps.
//!
//! A blocking call's requests are answered by the runtime's worker (it owns
//! the sockets' readiness), which wakes the calling thread once the answer
//! is in. tokio's `Runtime::block_on` puts the calling thread to sleep at
//! once, so each request costs a sleep and a wake-up of the caller besides
//! the worker's own (measured: 8 context switches per acquire + release
//! cycle on Redis against redis-py's 2, which reads its own socket). Here
//! the caller instead keeps checking, for up to [`SPIN`], whether it has been
//! woken (yielding its core to any other ready thread at each check), and
//! sleeps only after that: an answer that comes within a round trip to a
//! nearby server finds it awake.
//!
//! The spin is bounded per call: only in the first [`WINDOW`] of a call,
//! which covers an uncontended acquisition or release (a few round trips);
//! a call that waits longer (for a held key, or a slow store) sleeps
//! between wake-ups as `block_on` does, so a long wait keeps no core busy
//! (test: `tests/test_processes.py`'s `test_a_long_wait_keeps_no_core_busy`).
//! And only while few blocking calls are in flight in the process (up to
//! half the processors): many threads' calls at once are answered no
//! faster by spinning, and their spinning would take the processors that
//! the runtime's worker and a local server need.
//!
//! Neither tokio nor `futures`/`pollster` offers a `block_on` that spins
//! before it parks, hence these few lines. The future runs inside the
//! runtime's context (`Runtime::enter`), so it reaches the runtime's timers,
//! sockets and `spawn` as under `block_on`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

/// The longest a wait spins before it sleeps.
const SPIN: Duration = Duration::from_micros(500);

/// How long after a call's start its waits may spin.
pub(crate) const WINDOW: Duration = Duration::from_millis(5);

/// Wakes the thread that polls the future.
struct Signal {
    woken: AtomicBool,
    thread: Thread,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        // Costs no system call while the thread is spinning (not parked).
        self.thread.unpark();
    }
}

/// How many blocking calls are in flight in this process.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Up to how many blocking calls in flight their waits spin: half the
/// processors (at least one). More calls at once are answered no faster by
/// spinning (the runtime's worker answers them all), and spinning threads
/// would take the processors the worker and a local server need.
fn most_spinning() -> usize {
    static MOST: OnceLock<usize> = OnceLock::new();
    *MOST.get_or_init(|| thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)))
}

/// A blocking call in flight, counted in [`IN_FLIGHT`] until dropped.
struct InFlight;

impl InFlight {
    fn enter() -> InFlight {
        IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Signal {
    /// Waits until woken (true) or until `end` (false): spinning up to
    /// `SPIN` while before `spin_until` (if no more than [`most_spinning`]
    /// blocking calls are in flight), then parked.
    fn wait(&self, end: Option<Instant>, spin_until: Instant) -> bool {
        let now = Instant::now();
        let mut spin = now < spin_until && IN_FLIGHT.load(Ordering::Acquire) <= most_spinning();
        let spin_end = (now + SPIN).min(spin_until);
        loop {
            if self.woken.swap(false, Ordering::AcqRel) {
                return true;
            }
            let now = Instant::now();
            if end.is_some_and(|end| now >= end) {
                return false;
            }
            if spin {
                if now < spin_end {
                    thread::yield_now();
                    continue;
                }
                spin = false;
            }
            // Parks can end early (a wake-up meant for an earlier call's
            // waker, or none at all): the flag above decides.
            match end {
                Some(end) => thread::park_timeout(end - now),
                None => thread::park(),
            }
        }
    }
}

/// Runs `fut` to completion on this thread.
pub(crate) fn run<F: Future>(rt: &Runtime, fut: F) -> F::Output {
    let spin_until = Instant::now() + WINDOW;
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Some(out) = run_until(rt, fut.as_mut(), None, spin_until) {
            return out;
        }
    }
}

/// Polls `fut` on this thread until it completes (`Some`) or `end` passes
/// (`None`: `fut` is left as it is, to be polled again or dropped); its
/// waits spin while before `spin_until`.
pub(crate) fn run_until<F: Future + ?Sized>(
    rt: &Runtime,
    mut fut: Pin<&mut F>,
    end: Option<Instant>,
    spin_until: Instant,
) -> Option<F::Output> {
    let _entered = rt.enter();
    let _in_flight = InFlight::enter();
    let signal = Arc::new(Signal {
        woken: AtomicBool::new(false),
        thread: thread::current(),
    });
    let waker = Waker::from(signal.clone());
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return Some(out);
        }
        if !signal.wait(end, spin_until) {
            return None;
        }
    }
}
