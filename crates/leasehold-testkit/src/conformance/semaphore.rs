//! Semaphores: never more holders than permits, permits freed by expiry
//! and by dropped acquisitions.

use super::*;

/// Many tasks in several "processes" race for a semaphore's permits: never
/// more than N hold one at once, never two the same slot, all get their
/// turns, and each slot's tokens grow in the order its holders ran.
pub async fn semaphore_never_exceeds_limit(store: Store) {
    const LIMIT: u32 = 3;
    let key = unique_key("sem-race");
    let sem = |s: &Store| s.semaphore_with(&key, LIMIT, opts(&store)).unwrap();

    // Exactly N permits are to be had, in N different processes.
    let mut first = Vec::new();
    for _ in 0..LIMIT {
        first.push(sem(&other_process(&store)).try_acquire().await.unwrap());
    }
    let mut slots: Vec<_> = first.iter().map(|p| p.slot()).collect();
    slots.sort();
    assert_eq!(slots, (0..LIMIT).collect::<Vec<_>>());
    let full = sem(&other_process(&store)).try_acquire().await;
    match full {
        Err(Error::Held { key: k, .. }) => assert_eq!(k, key),
        Err(e) => panic!("expected Held from a full semaphore, got {e}"),
        Ok(p) => panic!("got permit {} beyond the limit", p.slot()),
    }
    for p in first {
        p.release().await.unwrap();
    }

    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let slot_busy: Arc<Vec<AtomicBool>> =
        Arc::new((0..LIMIT).map(|_| AtomicBool::new(false)).collect());
    let tokens = Arc::new(Mutex::new(BTreeMap::<u32, Vec<u64>>::new()));
    let mut tasks = Vec::new();
    for _process in 0..4 {
        let s = other_process(&store);
        for _task in 0..3 {
            let sem = sem(&s);
            let (inside, most, slot_busy, tokens) = (
                inside.clone(),
                most.clone(),
                slot_busy.clone(),
                tokens.clone(),
            );
            tasks.push(tokio::spawn(async move {
                for _round in 0..2 {
                    let permit = sem.acquire_timeout(Duration::from_secs(120)).await.unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    assert!(now <= LIMIT, "{now} holders at once, limit {LIMIT}");
                    let slot = permit.slot() as usize;
                    assert!(
                        !slot_busy[slot].swap(true, Ordering::SeqCst),
                        "two holders of slot {slot}"
                    );
                    tokens
                        .lock()
                        .unwrap()
                        .entry(permit.slot())
                        .or_default()
                        .push(permit.fencing_token());
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    slot_busy[slot].store(false, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(most.load(Ordering::SeqCst) <= LIMIT);
    let tokens = std::mem::take(&mut *tokens.lock().unwrap());
    assert_eq!(
        tokens.values().map(Vec::len).sum::<usize>(),
        24,
        "every task got its turns"
    );
    for (slot, ts) in tokens.iter() {
        assert!(
            ts.windows(2).all(|w| w[0] < w[1]),
            "slot {slot} tokens out of order: {ts:?}"
        );
    }
    let listed = sem(&store).inspect().await.unwrap();
    assert!(
        listed
            .iter()
            .all(|s| s.info.holder.is_none() && s.slot < LIMIT),
        "{listed:?}"
    );
}

/// Permits whose holders died (leases nobody renews) come free at their
/// TTL, not before, and the next permit on a slot has a greater token.
pub async fn semaphore_permits_freed_by_expiry(store: Store) {
    let key = unique_key("sem-expiry");
    let ttl = test_ttl(&store);
    let sem = other_process(&store)
        .semaphore_with(&key, 2, opts(&store))
        .unwrap();
    let started = tokio::time::Instant::now();
    let mut dead = BTreeMap::new();
    for slot in 0..2 {
        let lease = raw_lease(store.backend().as_ref(), sem.slot_key(slot).as_str(), ttl).await;
        dead.insert(slot, lease.fencing_token);
    }
    assert_held(sem.try_acquire().await.map(|p| p.into_guard()));
    let permit = sem.acquire_timeout(expiry_wait(&store)).await.unwrap();
    assert!(
        started.elapsed() >= ttl.mul_f64(0.9),
        "permit free after {:?}, before the TTL of {ttl:?} ran out",
        started.elapsed()
    );
    assert!(permit.fencing_token() > dead[&permit.slot()]);
    assert_eq!(permit.semaphore_key().as_str(), key);
    assert_eq!(permit.key(), &sem.slot_key(permit.slot()));
    permit.release().await.unwrap();
}

/// Dropping semaphore acquire futures, waiting or mid-request, leaves no
/// permit behind.
pub async fn semaphore_dropped_acquire_leaves_no_permit(store: Store) {
    let key = unique_key("sem-cancel");
    let long = long_ttl(&store);
    let sem = |s: &Store| s.semaphore_with(&key, 2, opts(&store).ttl(long)).unwrap();
    // Dropped while waiting on a full semaphore.
    let a = sem(&store).try_acquire().await.unwrap();
    let b = sem(&store).try_acquire().await.unwrap();
    let waiter = sem(&other_process(&store));
    assert!(
        tokio::time::timeout(Duration::from_millis(200), waiter.acquire())
            .await
            .is_err()
    );
    a.release().await.unwrap();
    b.release().await.unwrap();
    // Dropped at every point of the requests in flight.
    let s = sem(&other_process(&store));
    for _ in 0..20 {
        tokio::select! {
            biased;
            r = s.try_acquire() => { if let Ok(p) = r { p.release().await.unwrap(); } }
            _ = tokio::task::yield_now() => {}
        }
    }
    // Had any of those left a lease, it would last `long`, beyond this wait.
    let last = sem(&other_process(&store));
    let p1 = last.acquire_timeout(Duration::from_secs(15)).await.unwrap();
    let p2 = last.acquire_timeout(Duration::from_secs(15)).await.unwrap();
    assert_ne!(p1.slot(), p2.slot());
    p1.release().await.unwrap();
    p2.release().await.unwrap();
}

/// Several permits at once: distinct slots, each with its own token; a
/// taker that cannot have them all takes none (what it took is free again
/// at once); a count outside 1..=limit is refused.
pub async fn semaphore_acquire_many_is_all_or_none(store: Store) {
    const LIMIT: u32 = 4;
    let key = unique_key("sem-many");
    let long = opts(&store).ttl(long_ttl(&store));
    let sem = |s: &Store| s.semaphore_with(&key, LIMIT, long.clone()).unwrap();
    let three = sem(&store).try_acquire_many(3).await.unwrap();
    let in_order: Vec<String> = three.keys().map(|k| k.to_string()).collect();
    let slots: BTreeSet<String> = in_order.iter().cloned().collect();
    assert_eq!(slots.len(), 3, "{slots:?}");
    assert!(in_order.windows(2).all(|w| w[0] < w[1]), "{in_order:?}");
    assert!(slots
        .iter()
        .all(|k| k.starts_with(&format!("{key}/:slot:"))));
    assert!(three.iter().all(|(_, g)| g.fencing_token() > 0));
    // Two more are not to be had: none is kept.
    let other = other_process(&store);
    match sem(&other).try_acquire_many(2).await {
        Err(Error::Held { key: k, .. }) => assert_eq!(k, key),
        other => panic!("expected Held, got {other:?}"),
    }
    match sem(&other)
        .acquire_many_timeout(2, Duration::from_millis(300))
        .await
    {
        Err(Error::TimedOut { .. }) => {}
        other => panic!("expected TimedOut, got {other:?}"),
    }
    // The fourth slot is free at once (its leases would last far longer).
    let last = sem(&other_process(&store)).try_acquire().await.unwrap();
    last.release().await.unwrap();
    three.release().await.unwrap();
    for bad in [0, LIMIT + 1] {
        assert_invalid_input(
            &sem(&store).try_acquire_many(bad).await.unwrap_err(),
            "permits",
        );
    }
}

/// Takers of several permits in several "processes" loop side by side
/// with takers of one: none waits for ever (two takers holding part of
/// what each needs would), and never more permits are out than the limit.
pub async fn takers_of_several_permits_never_deadlock_or_exceed_the_limit(store: Store) {
    const LIMIT: u32 = 4;
    let key = unique_key("sem-many-race");
    let out = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for n in [3u32, 3, 2, 1] {
        let sem = other_process(&store)
            .semaphore_with(&key, LIMIT, opts(&store))
            .unwrap();
        let out = out.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..4 {
                let held = sem
                    .acquire_many_timeout(n, Duration::from_secs(60))
                    .await
                    .unwrap_or_else(|e| panic!("{n} permits, round {round}: {e}"));
                let now = out.fetch_add(n, Ordering::SeqCst) + n;
                assert!(now <= LIMIT, "{now} permits out, limit {LIMIT}");
                tokio::time::sleep(Duration::from_millis(5)).await;
                out.fetch_sub(n, Ordering::SeqCst);
                held.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}
