//! [`Detachable`]: a future polled in place by its caller that, if the
//! caller drops it before it completes, finishes in a task of its own.
//!
//! Acquisitions and releases must run to the end once sent (a grant nobody
//! receives must be released; a release must not stop halfway). Spawning a
//! task for every request would give that, at the price of two cross-thread
//! wake-ups per request (the task's start and its answer through a channel),
//! a real share of an embedded store's round trip. So the request runs in the
//! caller's task, and only an abandoned one is moved to a task (tokio's
//! `JoinHandle` cannot do this: it always spawns; `futures`' `Shared` and
//! `RemoteHandle` do not move work on drop).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::Notify;

/// How many requests are finishing in the background (see [`finish_background`]).
/// Counted by hand rather than with tokio-util's `TaskTracker`, whose wait
/// needs the tracker closed first: one process-wide tracker, waited on by
/// any number of callers while work keeps being added, does not fit that.
static BACKGROUND: AtomicUsize = AtomicUsize::new(0);
/// Notified whenever a background request ends.
static BACKGROUND_ENDED: Notify = Notify::const_new();

/// Runs `fut` in a task of its own on `runtime`, counted until it ends
/// (completed, or dropped with its runtime), so that [`finish_background`] can wait
/// for it.
pub(crate) fn spawn_background(
    runtime: &tokio::runtime::Handle,
    fut: impl Future<Output = ()> + Send + 'static,
) {
    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            BACKGROUND.fetch_sub(1, Ordering::AcqRel);
            BACKGROUND_ENDED.notify_waiters();
        }
    }
    BACKGROUND.fetch_add(1, Ordering::AcqRel);
    let counted = Counted;
    runtime.spawn(async move {
        let _counted = counted;
        fut.await;
    });
}

/// Waits until every request that leasehold finishes in the background in
/// this process has ended: the release of a guard dropped without
/// [`release`](crate::LeaseGuard::release), the release of a grant that
/// came after its caller gave up or was dropped, a release or acquisition
/// whose caller went away. Requests started while it waits are waited for
/// too.
///
/// A process that is about to exit calls it last (after its guards are
/// released or dropped), or [`Store::close`](crate::Store::close), which
/// calls it, so that none of these is cut short by the exit,
/// leaving a lease held until its TTL runs out. Each request ends within the
/// store's own timeouts; bound the wait with `tokio::time::timeout` to exit
/// sooner when a store does not answer.
pub async fn finish_background() {
    loop {
        let ended = BACKGROUND_ENDED.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if BACKGROUND.load(Ordering::Acquire) == 0 {
            return;
        }
        ended.await;
    }
}

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// See the module docs.
pub(crate) struct Detachable<T: Send + 'static> {
    fut: Option<Boxed<T>>,
    runtime: Option<tokio::runtime::Handle>,
    orphaned: Arc<AtomicBool>,
}

/// Tells a detachable future whether its caller is gone, so that it can deal
/// with its own output (release a grant nobody will receive).
#[derive(Clone)]
pub(crate) struct Orphaned(Arc<AtomicBool>);

impl Orphaned {
    /// Whether the caller dropped the future before it completed. Checked
    /// after the future's last await, this is final: the caller can only
    /// drop it between polls, and a poll that reaches the end returns.
    pub(crate) fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl<T: Send + 'static> Detachable<T> {
    /// `make` builds the work, given the flag that says whether its caller
    /// has gone away.
    pub(crate) fn new<F>(make: impl FnOnce(Orphaned) -> F) -> Self
    where
        F: Future<Output = T> + Send + 'static,
    {
        let orphaned = Arc::new(AtomicBool::new(false));
        Detachable {
            fut: Some(Box::pin(make(Orphaned(orphaned.clone())))),
            runtime: tokio::runtime::Handle::try_current().ok(),
            orphaned,
        }
    }
}

impl<T: Send + 'static> Future for Detachable<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let fut = self
            .fut
            .as_mut()
            .expect("a Detachable is not polled after it completed");
        let out = std::task::ready!(fut.as_mut().poll(cx));
        self.fut = None;
        Poll::Ready(out)
    }
}

impl<T: Send + 'static> Drop for Detachable<T> {
    fn drop(&mut self) {
        let Some(fut) = self.fut.take() else { return };
        self.orphaned.store(true, Ordering::Release);
        match &self.runtime {
            Some(rt) => spawn_background(rt, async move {
                fut.await;
            }),
            // Made outside a runtime (not by this crate's code): nowhere to
            // finish it.
            None => drop(fut),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    #[tokio::test]
    async fn completes_in_place_and_is_not_orphaned() {
        let (seen_tx, seen_rx) = oneshot::channel();
        let out = Detachable::new(|orphaned| async move {
            let _ = seen_tx.send(orphaned.get());
            7
        })
        .await;
        assert_eq!(out, 7);
        assert!(
            !seen_rx.await.unwrap(),
            "a future its caller awaited is not orphaned"
        );
    }

    #[tokio::test]
    async fn a_dropped_future_finishes_in_a_task_and_knows_it_is_orphaned() {
        let (go_tx, go_rx) = oneshot::channel::<()>();
        let (done_tx, done_rx) = oneshot::channel();
        let fut = Detachable::new(|orphaned| async move {
            let _ = go_rx.await;
            let _ = done_tx.send(orphaned.get());
        });
        // Polled once (it waits on `go`), then abandoned by its caller.
        let mut fut = Box::pin(fut);
        assert!(futures_util_poll_once(fut.as_mut()).await.is_none());
        drop(fut);
        go_tx.send(()).unwrap();
        assert!(
            done_rx.await.unwrap(),
            "the work finished, and knew its caller was gone"
        );
    }

    /// Polls once; `Some` if it completed.
    async fn futures_util_poll_once<F: Future + Unpin>(mut fut: F) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            Poll::Ready(match Pin::new(&mut fut).poll(cx) {
                Poll::Ready(v) => Some(v),
                Poll::Pending => None,
            })
        })
        .await
    }
}
