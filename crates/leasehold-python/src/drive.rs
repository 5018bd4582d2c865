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
//!
//! Neither tokio nor `futures`/`pollster` offers a `block_on` that spins
//! before it parks, hence these few lines. The future runs inside the
//! runtime's context (`Runtime::enter`), so it reaches the runtime's timers,
//! sockets and `spawn` as under `block_on`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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

impl Signal {
    /// Waits until woken (true) or until `end` (false): spinning up to
    /// `SPIN` while before `spin_until`, then parked.
    fn wait(&self, end: Option<Instant>, spin_until: Instant) -> bool {
        let spin_end = (Instant::now() + SPIN).min(spin_until);
        loop {
            if self.woken.swap(false, Ordering::AcqRel) {
                return true;
            }
            let now = Instant::now();
            if end.is_some_and(|end| now >= end) {
                return false;
            }
            if now < spin_end {
                thread::yield_now();
                continue;
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
