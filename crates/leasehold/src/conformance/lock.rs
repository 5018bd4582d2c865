//! Locks: races between holders, independent keys, loss reported to the
//! guard, and cancel safety of a dropped acquisition.

use super::*;

/// Many tasks in several "processes" take turns; never two at once, and the
/// tokens grow in the order the critical sections ran.
pub async fn race_has_one_winner_at_a_time(store: Store) {
    let key = unique_key("race");
    let inside = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _process in 0..4 {
        let s = other_process(&store);
        for _task in 0..3 {
            let lock = s.lock_with(&key, opts(&store)).unwrap();
            let inside = inside.clone();
            let tokens = tokens.clone();
            tasks.push(tokio::spawn(async move {
                for _round in 0..3 {
                    let guard = lock.acquire(Duration::from_secs(120)).await.unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    tokens.lock().unwrap().push(guard.fencing_token());
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 36);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens out of order: {tokens:?}"
    );
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
    let g1 = store
        .lock_with(&k1, opts(&store))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let g2 = store
        .lock_with(&k2, opts(&store))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
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
    let reason = tokio::time::timeout(ttl, guard.lost())
        .await
        .expect("loss noticed within one TTL");
    assert!(
        matches!(reason, crate::LossReason::Revoked(_)),
        "{reason:?}"
    );
    assert!(guard.is_lost());
    assert!(token.is_cancelled());
    assert!(guard.release().await.unwrap_err().is_lease_lost());
}

/// Dropping acquire futures, while waiting or mid-request, leaves no lease.
pub async fn dropped_acquire_leaves_no_lease(store: Store) {
    let key = unique_key("cancel");
    let long = store
        .backend()
        .capabilities()
        .max_ttl
        .min(Duration::from_secs(60));
    let long_opts = || opts(&store).ttl(long);
    // Dropped while waiting on a held key.
    let holder = store
        .lock_with(&key, long_opts())
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let waiter = other_process(&store).lock_with(&key, long_opts()).unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), waiter.acquire(Wait::Forever))
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
    let g = last.acquire(Duration::from_secs(15)).await.unwrap();
    g.release().await.unwrap();
}
