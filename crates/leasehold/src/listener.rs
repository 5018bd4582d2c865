//! Wake-ups across processes, written once for every store that can
//! announce releases (PostgreSQL's `NOTIFY`, Redis pub/sub, an etcd watch):
//! one subscription per backend, started by the first waiter, kept up with
//! back-off, and fanned out to every waiting task. While it is down, waiters
//! fall back to polling, so a lost subscription costs latency, never
//! correctness.
//!
//! A store gives what its subscription yields ([`Subscribe`]); the
//! [`Listener`] does the rest.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_core::Stream;
use tokio::sync::{broadcast, oneshot, watch};

use crate::backend::ReleaseWatch;
use crate::{BoxError, Key};

/// The keys a subscription announces as released (or broken, or expired),
/// in the store's own names, until the subscription is lost (the stream
/// ends).
pub type Released = Pin<Box<dyn Stream<Item = Arc<str>> + Send + 'static>>;

/// How a store subscribes to announcements of released keys.
#[async_trait]
pub trait Subscribe: Send + Sync + 'static {
    /// Connects and subscribes; resolves once the subscription is in place
    /// (announcements made after that are in the stream). The stream ends
    /// when the subscription is lost; the listener then subscribes again.
    async fn subscribe(&self) -> Result<Released, BoxError>;
}

/// The longest one attempt to subscribe may take.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The first pause after a failed or lost subscription; it doubles up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Announcements kept for a waiter that is slow to look; one that falls
/// further behind just wakes.
const BUFFER: usize = 1024;

/// What the subscription task sends to waiters.
#[derive(Clone)]
enum Heard {
    /// This key was released.
    Key(Arc<str>),
    /// Announcements may have been missed (the subscription was just put
    /// in place, or in place again): every waiter looks.
    Everyone,
}

/// One subscription per backend, shared by every waiting task. Started on
/// the first [`watch`](Self::watch) or [`listening`](Self::listening);
/// stopped when dropped.
pub struct Listener {
    source: Arc<dyn Subscribe>,
    heard: broadcast::Sender<Heard>,
    /// Dropping it stops the subscription task.
    stop: Mutex<Option<oneshot::Sender<()>>>,
    /// Whether the subscription is in place now.
    listening: watch::Sender<bool>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("listening", &*self.listening.borrow())
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// A listener on `source`'s announcements; it subscribes on first use.
    pub fn new(source: impl Subscribe) -> Self {
        Listener {
            source: Arc::new(source),
            heard: broadcast::channel(BUFFER).0,
            stop: Mutex::new(None),
            listening: watch::channel(false).0,
        }
    }

    /// Starts the subscription if not yet, and waits until it is in place
    /// (forever, while the store cannot be subscribed to; returns at once
    /// outside a tokio runtime).
    pub async fn listening(&self) {
        if self.start().is_none() {
            return;
        }
        let mut rx = self.listening.subscribe();
        let _ = rx.wait_for(|on| *on).await;
    }

    /// Whether the subscription is in place now.
    pub fn is_listening(&self) -> bool {
        *self.listening.borrow()
    }

    /// A future that completes when a release of one of `keys` is
    /// announced (from now on), or when announcements may have been missed;
    /// `None` outside a tokio runtime. What
    /// [`Backend::watch_release`](crate::backend::Backend::watch_release) returns.
    pub fn watch(&self, keys: &[Key]) -> Option<ReleaseWatch> {
        self.start()?;
        let mut rx = self.heard.subscribe();
        let keys: HashSet<Arc<str>> = keys.iter().map(|k| k.as_str().into()).collect();
        Some(Box::pin(async move {
            loop {
                match rx.recv().await {
                    Ok(Heard::Key(k)) if keys.contains(&k) => return,
                    Ok(Heard::Key(_)) => {}
                    Ok(Heard::Everyone) | Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
                }
            }
        }))
    }

    fn start(&self) -> Option<()> {
        let mut stop = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        if stop.is_some() {
            return Some(());
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (tx, rx) = oneshot::channel();
        *stop = Some(tx);
        runtime.spawn(keep_subscribed(
            self.source.clone(),
            self.heard.clone(),
            self.listening.clone(),
            rx,
        ));
        Some(())
    }
}

/// Keeps one subscription up (subscribing again with back-off) and
/// forwards each announced key, until `stop` fires or is dropped.
async fn keep_subscribed(
    source: Arc<dyn Subscribe>,
    heard: broadcast::Sender<Heard>,
    listening: watch::Sender<bool>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let subscribed = tokio::select! {
            _ = &mut stop => return,
            s = tokio::time::timeout(SUBSCRIBE_TIMEOUT, source.subscribe()) => s,
        };
        match subscribed {
            Ok(Ok(mut released)) => {
                backoff = FIRST_BACKOFF;
                // Releases before the subscription was in place (since a
                // waiter started waiting, or while it was down) were
                // missed: waking everyone once is cheap. Then it is in
                // place (a waiter from after `listening()` misses nothing).
                let _ = heard.send(Heard::Everyone);
                listening.send_replace(true);
                loop {
                    let next = tokio::select! {
                        _ = &mut stop => return,
                        k = std::future::poll_fn(|cx| released.as_mut().poll_next(cx)) => k,
                    };
                    let Some(key) = next else { break };
                    let _ = heard.send(Heard::Key(key));
                }
                tracing::debug!("release announcements: subscription lost; subscribing again");
                listening.send_replace(false);
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "release announcements: cannot subscribe; waiters poll meanwhile")
            }
            Err(_) => tracing::debug!(
                "release announcements: subscribing timed out; waiters poll meanwhile"
            ),
        }
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::mpsc;

    /// A subscription that fails its first `failures` attempts, then hands
    /// out a stream fed from the test (`announce`), which ends when the
    /// test drops its sender (`lose`).
    struct Fake {
        failures: usize,
        attempts: Arc<AtomicUsize>,
        streams: Mutex<mpsc::UnboundedSender<mpsc::UnboundedSender<Arc<str>>>>,
    }

    struct Stream(mpsc::UnboundedReceiver<Arc<str>>);

    impl futures_core::Stream for Stream {
        type Item = Arc<str>;
        fn poll_next(
            mut self: Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Arc<str>>> {
            self.0.poll_recv(cx)
        }
    }

    #[async_trait]
    impl Subscribe for Fake {
        async fn subscribe(&self) -> Result<Released, BoxError> {
            let n = self.attempts.fetch_add(1, Ordering::SeqCst);
            if n < self.failures {
                return Err(format!("refused (attempt {n})").into());
            }
            let (tx, rx) = mpsc::unbounded_channel();
            self.streams.lock().unwrap().send(tx).unwrap();
            Ok(Box::pin(Stream(rx)))
        }
    }

    fn fake(
        failures: usize,
    ) -> (
        Listener,
        Arc<AtomicUsize>,
        mpsc::UnboundedReceiver<mpsc::UnboundedSender<Arc<str>>>,
    ) {
        let attempts = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::unbounded_channel();
        let listener = Listener::new(Fake {
            failures,
            attempts: attempts.clone(),
            streams: Mutex::new(tx),
        });
        (listener, attempts, rx)
    }

    fn keys(names: &[&str]) -> Vec<Key> {
        names.iter().map(|n| Key::new(*n).unwrap()).collect()
    }

    /// A listener on a subscription that succeeds at once, in place, with
    /// its attempts counter, its streams and the feed of the first stream.
    async fn listening() -> (
        Listener,
        Arc<AtomicUsize>,
        mpsc::UnboundedReceiver<mpsc::UnboundedSender<Arc<str>>>,
        mpsc::UnboundedSender<Arc<str>>,
    ) {
        let (listener, attempts, mut streams) = fake(0);
        listener.listening().await;
        let feed = streams.recv().await.unwrap();
        (listener, attempts, streams, feed)
    }

    /// `f`'s output, once it completes within `secs` seconds; else panics
    /// with `what`.
    async fn within<F: std::future::Future>(secs: u64, f: F, what: &str) -> F::Output {
        tokio::time::timeout(Duration::from_secs(secs), f)
            .await
            .expect(what)
    }

    /// Polls `watch` once: whether it has completed.
    async fn woke(watch: &mut ReleaseWatch) -> bool {
        tokio::time::timeout(Duration::ZERO, watch).await.is_ok()
    }

    #[tokio::test]
    async fn a_watch_wakes_on_its_key_only() {
        let (listener, _, _streams, feed) = listening().await;
        let mut watch = listener.watch(&keys(&["a", "b"])).unwrap();
        feed.send("c".into()).unwrap();
        tokio::task::yield_now().await;
        assert!(!woke(&mut watch).await, "woke for another key");
        feed.send("b".into()).unwrap();
        within(10, watch, "not woken by its key").await;
    }

    #[tokio::test(start_paused = true)]
    async fn failed_subscriptions_are_retried_with_backoff_and_waiters_wake_once_in_place() {
        let (listener, attempts, mut streams) = fake(3);
        let watch = listener.watch(&keys(&["a"])).unwrap();
        assert!(!listener.is_listening());
        // 100 + 200 + 400 ms of back-off (paused time runs ahead when idle).
        listener.listening().await;
        assert_eq!(attempts.load(Ordering::SeqCst), 4);
        let _feed = streams.recv().await.unwrap();
        // In place at last: releases meanwhile were missed, so the waiter
        // wakes without its key being announced.
        within(
            1,
            watch,
            "a waiter from before the subscription was not woken",
        )
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_subscription_is_put_in_place_again_and_wakes_every_waiter() {
        let (listener, attempts, mut streams, feed) = listening().await;
        let watch = listener.watch(&keys(&["a"])).unwrap();
        drop(feed);
        // Lost, then subscribed again after the back-off.
        let feed = within(10, streams.recv(), "not subscribed again")
            .await
            .unwrap();
        assert_eq!(attempts.load(Ordering::SeqCst), 2);
        within(1, watch, "a waiter was not woken after the gap").await;
        // And it still forwards.
        let watch = listener.watch(&keys(&["a"])).unwrap();
        feed.send("a".into()).unwrap();
        within(1, watch, "not woken by its key after re-subscribing").await;
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_listener_ends_its_subscription() {
        let (listener, attempts, _streams, feed) = listening().await;
        drop(listener);
        // The task stops: it drops the stream (the feed's receiver) and
        // never subscribes again.
        within(10, feed.closed(), "the subscription outlived its listener").await;
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn outside_a_runtime_there_is_no_watch() {
        let (listener, attempts, _) = fake(0);
        assert!(listener.watch(&keys(&["a"])).is_none());
        assert_eq!(attempts.load(Ordering::SeqCst), 0);
    }
}
