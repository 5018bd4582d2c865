//! Multi-key locks: all or none, no deadlock whatever order the keys are
//! given in, nothing left held by a wait that fails or is dropped, and a
//! loss of any one key told to the guard.

use super::*;

/// Two keys under one test's prefix, and the store-wide unique name of
/// each.
fn two_keys(test: &str) -> (String, String) {
    let base = unique_key(test);
    (format!("{base}/a"), format!("{base}/b"))
}

/// Holders asking for {a, b} and {b, a} (and one for b alone), each in a
/// "process" of its own, take turns in a loop: none waits for ever (a
/// deadlock would run out a one-minute wait), no key ever has two holders
/// at once, and each key's tokens grow in the order of its grants.
pub async fn multi_key_holders_in_opposite_orders_never_deadlock_or_overlap(store: Store) {
    let (a, b) = two_keys("multi-order");
    let orders: [&[&String]; 3] = [&[&a, &b], &[&b, &a], &[&b]];
    let inside: Arc<Mutex<BTreeMap<String, bool>>> = Arc::default();
    let tokens: Arc<Mutex<BTreeMap<String, Vec<u64>>>> = Arc::default();
    let mut tasks = Vec::new();
    for (n, keys) in orders.into_iter().enumerate() {
        let all = other_process(&store)
            .lock_all_with(keys.iter().map(|k| k.as_str()), opts(&store))
            .unwrap();
        let (inside, tokens) = (inside.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..6 {
                let held = all
                    .acquire_timeout(Duration::from_secs(60))
                    .await
                    .unwrap_or_else(|e| panic!("holder {n}, round {round}: {e}"));
                for (key, guard) in held.iter() {
                    let was = inside.lock().unwrap().insert(key.to_string(), true);
                    assert_ne!(was, Some(true), "two holders of {key} at once");
                    tokens
                        .lock()
                        .unwrap()
                        .entry(key.to_string())
                        .or_default()
                        .push(guard.fencing_token());
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
                for key in held.keys() {
                    inside.lock().unwrap().insert(key.to_string(), false);
                }
                held.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens[&a].len(), 12);
    assert_eq!(tokens[&b].len(), 18);
    for (key, tokens) in tokens.iter() {
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{key}: tokens out of order: {tokens:?}"
        );
    }
}

/// The keys are taken in byte order whatever order they are given in, each
/// once, and each keeps a token of its own that exceeds its earlier ones.
pub async fn multi_key_lock_takes_its_keys_in_byte_order_each_with_its_own_token(store: Store) {
    let (a, b) = two_keys("multi-tokens");
    let before = take(&store, &b, opts(&store)).await;
    let b_token = before.fencing_token();
    before.release().await.unwrap();
    let all = store.lock_all_with([&b, &a, &b], opts(&store)).unwrap();
    let keys: Vec<&str> = all.keys().map(Key::as_str).collect();
    assert_eq!(keys, [a.as_str(), b.as_str()]);
    let held = all.try_acquire().await.unwrap();
    assert!(held.fencing_token(&b).unwrap() > b_token);
    assert!(held.fencing_token(&a).is_some());
    assert_eq!(held.fencing_token("not/one/of/them"), None);
    assert_eq!(
        held.guard(&b).unwrap().fencing_token(),
        held.fencing_token(&b).unwrap()
    );
    // The guard's deadline is the earliest of its keys'.
    let earliest = held
        .iter()
        .map(|(_, g)| *g.deadline_watch().borrow())
        .min()
        .unwrap();
    assert_eq!(*held.deadline_watch().borrow(), earliest);
    assert!(held.valid_for() > Duration::ZERO && !held.is_lost());
    // Each key is an ordinary lease: a plain lock on it finds it held.
    assert_held(
        other_process(&store)
            .lock_with(&a, opts(&store))
            .unwrap()
            .try_acquire()
            .await,
    );
    held.release().await.unwrap();
    // No key at all is refused.
    let none: [&str; 0] = [];
    assert_invalid_input(&store.lock_all(none).unwrap_err(), "keys");
    let too_many = (0..=leasehold::MAX_MULTI_KEYS).map(|i| format!("{a}/{i}"));
    assert_invalid_input(&store.lock_all(too_many).unwrap_err(), "keys");
}

/// One attempt that finds a key held takes nothing: the keys before it
/// are free again at once (their leases last far longer than the test).
pub async fn multi_key_try_acquire_that_finds_a_key_held_leaves_every_key_free(store: Store) {
    let (a, b) = two_keys("multi-try");
    let long = opts(&store).ttl(long_ttl(&store));
    let holder = take(&other_process(&store), &b, long.clone()).await;
    let all = store.lock_all_with([&a, &b], long.clone()).unwrap();
    match all.try_acquire().await {
        Err(Error::Held { key, .. }) => assert_eq!(key, b),
        other => panic!("expected Held on {b}, got {other:?}"),
    }
    // `a` was taken and given back at once.
    take(&other_process(&store), &a, long)
        .await
        .release()
        .await
        .unwrap();
    holder.release().await.unwrap();
}

/// A wait that runs out on the second key leaves the first free at once,
/// and names the key it waited for.
pub async fn multi_key_wait_that_times_out_leaves_the_first_key_free_at_once(store: Store) {
    let (a, b) = two_keys("multi-timeout");
    let long = opts(&store).ttl(long_ttl(&store));
    let holder = take(&other_process(&store), &b, long.clone()).await;
    let all = store.lock_all_with([&b, &a], long.clone()).unwrap();
    let wait = Duration::from_millis(300);
    match all.acquire_timeout(wait).await {
        Err(Error::TimedOut { key, waited }) => {
            assert_eq!(key, b);
            assert!(waited >= wait, "{waited:?}");
        }
        other => panic!("expected TimedOut on {b}, got {other:?}"),
    }
    take(&other_process(&store), &a, long)
        .await
        .release()
        .await
        .unwrap();
    holder.release().await.unwrap();
}

/// The loss of any one key is the guard's: `lost` says which key, the
/// loss token is cancelled, and the release reports the loss and still
/// lets go of the other key.
pub async fn multi_key_guard_is_lost_when_any_one_key_is(store: Store) {
    let (a, b) = two_keys("multi-lost");
    let ttl = test_ttl(&store);
    let held = store
        .lock_all_with([&a, &b], opts(&store).renew_interval(ttl / 5))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let token = held.lost_token();
    assert!(!token.is_cancelled());
    store.break_lease(&b).await.unwrap();
    let (key, reason) = tokio::time::timeout(ttl, held.lost())
        .await
        .expect("loss noticed within one TTL");
    assert_eq!(key.as_str(), b);
    assert!(
        matches!(reason, leasehold::LossReason::Revoked(_)),
        "{reason:?}"
    );
    assert!(held.is_lost());
    assert_eq!(held.loss().map(|(k, _)| k.as_str()), Some(b.as_str()));
    tokio::time::timeout(ttl, token.cancelled())
        .await
        .expect("the loss token is cancelled");
    let err = held.release().await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    // `a` was released all the same.
    take(&other_process(&store), &a, opts(&store))
        .await
        .release()
        .await
        .unwrap();
}

/// Dropping a multi-key acquisition, while it waits for the second key
/// holding the first or at any point of a request in flight, leaves no
/// key held.
pub async fn dropped_multi_key_acquire_leaves_nothing_held(store: Store) {
    let (a, b) = two_keys("multi-cancel");
    let long = || opts(&store).ttl(long_ttl(&store));
    let holder = take(&other_process(&store), &b, long()).await;
    let all = store.lock_all_with([&a, &b], long()).unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), all.acquire())
            .await
            .is_err()
    );
    holder.release().await.unwrap();
    let all = other_process(&store)
        .lock_all_with([&a, &b], long())
        .unwrap();
    for _ in 0..20 {
        tokio::select! {
            biased;
            r = all.try_acquire() => { if let Ok(g) = r { g.release().await.unwrap(); } }
            _ = tokio::task::yield_now() => {}
        }
    }
    // Had any of those left a lease, it would last far beyond this wait.
    let last = other_process(&store)
        .lock_all_with([&a, &b], opts(&store))
        .unwrap();
    let g = last.acquire_timeout(Duration::from_secs(15)).await.unwrap();
    g.release().await.unwrap();
}

/// Keys of one multi-key lock held in different ways: a shared read of one
/// key beside other readers, an exclusive write of another that keeps
/// readers out.
pub async fn multi_key_lock_mixes_a_read_of_one_key_and_a_write_of_another(store: Store) {
    let (a, b) = two_keys("multi-mixed");
    let job = leasehold::MultiLock::builder(&store, opts(&store))
        .write(&b)
        .read(&a)
        .build()
        .unwrap();
    let held = job.try_acquire().await.unwrap();
    let other = other_process(&store);
    let reader = other
        .rw_lock_with(&a, leasehold::DEFAULT_MAX_READERS, opts(&store))
        .unwrap();
    let shared = reader.try_read().await.unwrap();
    assert_held(reader.try_write().await);
    let b_rw = other
        .rw_lock_with(&b, leasehold::DEFAULT_MAX_READERS, opts(&store))
        .unwrap();
    assert_held(b_rw.try_read().await);
    held.release().await.unwrap();
    shared.release().await.unwrap();
    b_rw.try_read().await.unwrap().release().await.unwrap();
    // One key named in two ways is refused.
    let twice = leasehold::MultiLock::builder(&store, opts(&store))
        .read(&a)
        .write(&a)
        .build()
        .unwrap_err();
    assert_invalid_input(&twice, "keys");
}
