//! Locks: races between holders, independent keys, loss reported to the
//! guard, and cancel safety of a dropped acquisition.

use super::*;
use leasehold::backend::Wrapper;

/// Many tasks in several "processes" take turns; never two at once, and the
/// tokens grow in the order the critical sections ran.
pub async fn race_has_one_winner_at_a_time(store: Store) {
    let key = unique_key("race");
    let mut locks = Vec::new();
    for _process in 0..4 {
        let s = other_process(&store);
        for _task in 0..3 {
            locks.push(s.lock_with(&key, opts(&store)).unwrap());
        }
    }
    // 4 processes of 3 tasks, 3 rounds each: 36 grants.
    take_turns(locks, 3, |guard| async move {
        tokio::time::sleep(Duration::from_millis(2)).await;
        guard
    })
    .await;
}

/// Of many simultaneous single attempts on a free key, exactly one wins.
pub async fn concurrent_try_acquire_has_one_winner(store: Store) {
    let key = unique_key("one-winner");
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let lock = other_process(&store).lock_with(&key, opts(&store)).unwrap();
        tasks.push(tokio::spawn(async move { lock.try_acquire().await }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(g) => winners.push(g),
            Err(Error::Held { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "{} winners", winners.len());
    winners.pop().unwrap().release().await.unwrap();
}

/// Holding one key does not block another.
pub async fn independent_keys(store: Store) {
    let k1 = unique_key("independent");
    let k2 = format!("{k1}-other");
    let g1 = take(&store, &k1, opts(&store)).await;
    let g2 = take(&store, &k2, opts(&store)).await;
    assert!(!g1.is_lost() && !g2.is_lost());
    g1.release().await.unwrap();
    g2.release().await.unwrap();
}

/// A guard whose lease is broken notices at its next renewal, and its
/// release reports the loss.
pub async fn guard_reports_loss_when_broken(store: Store) {
    let key = unique_key("guard-lost");
    let ttl = test_ttl(&store);
    let lock = store
        .lock_with(&key, opts(&store).renew_interval(ttl / 5))
        .unwrap();
    let guard = lock.try_acquire().await.unwrap();
    let token = guard.lost_token();
    store.break_lease(&key).await.unwrap();
    revoked_within(ttl, guard.lost()).await;
    assert!(guard.is_lost());
    assert!(token.is_cancelled());
    assert!(guard.release().await.unwrap_err().is_lease_lost());
}

/// Dropping acquire futures, while waiting or mid-request, leaves no lease.
pub async fn dropped_acquire_leaves_no_lease(store: Store) {
    let key = unique_key("cancel");
    let long = long_ttl(&store);
    let long_opts = || opts(&store).ttl(long);
    // Dropped while waiting on a held key.
    let holder = take(&store, &key, long_opts()).await;
    let waiter = other_process(&store).lock_with(&key, long_opts()).unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), waiter.acquire())
            .await
            .is_err()
    );
    holder.release().await.unwrap();
    // Dropped at every point of a request in flight.
    let lock = other_process(&store).lock_with(&key, long_opts()).unwrap();
    for _ in 0..20 {
        tokio::select! {
            biased;
            r = lock.try_acquire() => { if let Ok(g) = r { g.release().await.unwrap(); } }
            _ = tokio::task::yield_now() => {}
        }
    }
    // Had any of those left a lease, it would last `long`, beyond this wait.
    let last = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    let g = last.acquire_timeout(Duration::from_secs(15)).await.unwrap();
    g.release().await.unwrap();
}

/// A backend whose first attempt once armed lands late: the caller
/// hears a retryable failure at once (a timeout, a dropped connection),
/// while the request itself reaches the store only `delay` later (held in
/// the network, or a statement the server still runs after its client
/// went away), after the caller's first release of it. The real store
/// behind it answers everything else at once.
#[derive(Debug)]
struct LandsLate {
    inner: Arc<dyn Backend>,
    delay: Duration,
    /// Set by the test; taken by the attempt that lands late.
    armed: AtomicBool,
    landed: Arc<tokio::sync::Notify>,
}

#[async_trait::async_trait]
impl Wrapper for LandsLate {
    fn inner(&self) -> &dyn Backend {
        self.inner.as_ref()
    }
    async fn try_acquire(&self, request: &AcquireRequest) -> leasehold::Result<AcquireOutcome> {
        if request.epoch.is_none() || !self.armed.swap(false, Ordering::SeqCst) {
            return self.inner.try_acquire(request).await;
        }
        let (inner, request, delay, landed) = (
            self.inner.clone(),
            request.clone(),
            self.delay,
            self.landed.clone(),
        );
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let outcome = inner.try_acquire(&request).await;
            assert!(
                matches!(outcome, Ok(AcquireOutcome::Acquired(_))),
                "the late request is granted: {outcome:?}"
            );
            landed.notify_one();
        });
        Err(Error::backend(
            self.inner.name(),
            "acquire",
            true,
            "no answer in time (the request may still land)",
        ))
    }
}

/// An attempt whose answer never came (the caller gave up on it) but whose
/// request reached the store after the caller had already let it go (issue
/// 28, item 6) does not hold the key for its TTL: the lease id it named is
/// released again as long as such a request may still land.
pub async fn a_request_that_lands_after_its_caller_gave_up_is_released(store: Store) {
    let key = unique_key("late");
    // Long enough to tell "released" from "expired" (the other process
    // waits half of it), within the store's max TTL.
    let ttl = test_ttl(&store)
        .max(Duration::from_secs(8))
        .min(store.backend().capabilities().max_ttl);
    let landed = Arc::new(tokio::sync::Notify::new());
    let backend = Arc::new(LandsLate {
        inner: store.backend().clone(),
        delay: Duration::from_secs(1),
        armed: AtomicBool::new(false),
        landed: landed.clone(),
    });
    let late = like(&store, backend.clone());
    // Past the store's quarantine, if it is new to this "process".
    late.lock_with(&unique_key("late-warm-up"), opts(&store))
        .unwrap()
        .acquire_timeout(expiry_wait(&store))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    backend.armed.store(true, Ordering::SeqCst);
    let err = late
        .lock_with(&key, opts(&store).ttl(ttl))
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    // The caller has given up (and released the id once, before it landed).
    tokio::time::timeout(Duration::from_secs(30), landed.notified())
        .await
        .expect("the late request lands");
    // Left alone, that lease would hold the key for its whole TTL.
    let other = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    let guard = other
        .acquire_timeout(ttl / 2)
        .await
        .unwrap_or_else(|e| panic!("the late request's lease was not released: {e}"));
    guard.release().await.unwrap();
}
