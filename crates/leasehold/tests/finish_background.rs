//! [`leasehold::finish_background`]: a process about to exit waits for the requests
//! that finish in the background, so that none is cut short by the exit and
//! leaves a lease held until its TTL runs out.
//!
//! A test binary of its own: what `finish_background` waits for is process-wide, and
//! other tests' background work would be waited for too.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::backend::{AcquireOutcome, AcquireRequest, Backend, Lease, Wrapper};
use leasehold::{LockOptions, Result, Store};
use tokio::sync::Notify;

/// The memory backend, whose acquisitions and releases are answered only
/// when the test lets each through.
#[derive(Debug, Default)]
struct Gated {
    inner: leasehold::memory::MemoryBackend,
    hold_acquires: AtomicBool,
    acquire_sent: Notify,
    acquire_gate: Notify,
    hold_releases: AtomicBool,
    release_sent: Notify,
    release_gate: Notify,
    releases: AtomicU32,
}

#[async_trait]
impl Wrapper for Gated {
    fn inner(&self) -> &dyn Backend {
        &self.inner
    }
    fn name(&self) -> &'static str {
        "gated-memory"
    }
    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        if self.hold_acquires.load(Ordering::SeqCst) {
            self.acquire_sent.notify_one();
            self.acquire_gate.notified().await;
        }
        self.inner.try_acquire(req).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        if self.hold_releases.load(Ordering::SeqCst) {
            self.release_sent.notify_one();
            self.release_gate.notified().await;
        }
        self.inner.release(lease).await?;
        self.releases.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Long enough for a `finish_background` with nothing to wait for to have returned
/// many times over; it must not return while a release is held.
const NOT_WHILE_HELD: Duration = Duration::from_millis(200);

/// One test, two cases in turn: they would wait for each other's
/// background requests if they ran at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_background_waits_for_background_releases_to_end() {
    let backend = Arc::new(Gated::default());
    let store = leasehold_testkit::test_store_from(backend.clone());

    // A grant and a release first, so that this store knows the store's
    // epoch and its next attempt can be granted.
    let guard = leasehold_testkit::conformance::take(&store, "k", LockOptions::default()).await;
    guard.release().await.unwrap();
    assert_eq!(backend.releases.load(Ordering::SeqCst), 1);

    // Nothing in the background: at once.
    tokio::time::timeout(Duration::from_secs(10), leasehold::finish_background())
        .await
        .expect("finish_background with nothing in the background returns at once");

    // 1. A grant whose caller gave up while it was in flight: it is
    // released in the background.
    backend.hold_acquires.store(true, Ordering::SeqCst);
    backend.hold_releases.store(true, Ordering::SeqCst);
    let lock = store.lock("k").unwrap();
    let attempt = tokio::spawn(async move { lock.try_acquire().await });
    backend.acquire_sent.notified().await;
    attempt.abort();
    assert!(attempt.await.unwrap_err().is_cancelled());
    let finishing = tokio::spawn(leasehold::finish_background());
    // The store grants it, to nobody; its release is sent and held.
    backend.acquire_gate.notify_one();
    finishes_only_after_the_release(&backend, &store, finishing, "a late grant", 2).await;

    // 2. A guard dropped without `release()`: released in the background.
    backend.hold_acquires.store(false, Ordering::SeqCst);
    let guard = store.lock("k").unwrap().try_acquire().await.unwrap();
    drop(guard);
    let finishing = tokio::spawn(leasehold::finish_background());
    finishes_only_after_the_release(&backend, &store, finishing, "a dropped guard", 3).await;
}

/// Once the backend has been sent a background release of key `k` (and
/// holds it), `finishing` does not end until the release is let through;
/// then the backend has answered `releases` releases in all and `k` is
/// free.
async fn finishes_only_after_the_release(
    backend: &Gated,
    store: &Store,
    mut finishing: tokio::task::JoinHandle<()>,
    what: &str,
    releases: u32,
) {
    backend.release_sent.notified().await;
    assert!(
        tokio::time::timeout(NOT_WHILE_HELD, &mut finishing)
            .await
            .is_err(),
        "finish_background returned while the release of {what} was in flight"
    );
    backend.release_gate.notify_one();
    finishing.await.unwrap();
    assert_eq!(backend.releases.load(Ordering::SeqCst), releases);
    assert!(store.inspect("k").await.unwrap().holder.is_none());
}
