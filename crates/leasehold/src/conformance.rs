//! The conformance suite every backend passes unchanged.
//!
//! Each function takes a [`Store`] over the backend under test and panics on
//! a violation. Keys are made unique per run (`conformance/<test>/<random>`),
//! so the suite can share one emulator with other runs. TTLs are the
//! backend's minimum, but at least one second; tests that wait for expiry
//! take about that long (or twice that on backends whose capabilities say
//! `takeover_needs_observation`).
//!
//! A backend crate runs the whole suite with one macro call in a test file:
//!
//! ```ignore
//! async fn store() -> Option<leasehold::Store> {
//!     // None (after leasehold::conformance::skip(...)) when the emulator is absent
//! }
//! leasehold::conformance_tests!(store);
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::backend::{AcquireOutcome, AcquireRequest, Backend, Lease, LeaseId, Owner, StoreEpoch};
use crate::error::Error;
use crate::key::Key;
use crate::lock::WaitReason;
use crate::options::{LockOptions, Wait, MAX_DATA_LEN, MAX_LABEL_LEN};
use crate::runs::{RunOutcome, RunRecord, RunReport};
use crate::store::Store;

/// Runs every conformance test as its own `#[tokio::test]`. `$factory` is a
/// path to an `async fn() -> Option<Store>`; `None` skips the test.
///
/// With `lose = $lose`, a path to an `async fn(Store)` that destroys the
/// store's data the way the backend can lose it (a file deleted, a container
/// or table deleted), the store-loss tests run too.
#[macro_export]
macro_rules! conformance_tests {
    ($factory:path, lose = $lose:path) => {
        $crate::conformance_tests!($factory);
        $crate::conformance_tests!(@lose $factory, $lose;
            store_loss_stops_holder_before_next_grant,
            store_loss_forgets_runs
        );
    };
    (@lose $factory:path, $lose:path; $($name:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                if let Some(store) = $factory().await {
                    $crate::conformance::$name(store, $lose).await;
                }
            }
        )+
    };
    ($factory:path) => {
        $crate::conformance_tests!(@each $factory;
            exclusive_acquire,
            release_frees,
            expiry_frees_after_ttl,
            renew_extends,
            renew_after_loss_reports_loss,
            fencing_strictly_increases,
            inspect_shows_holder_owner_and_data,
            break_ends_lease,
            race_has_one_winner_at_a_time,
            concurrent_try_acquire_has_one_winner,
            independent_keys,
            bad_input_rejected,
            guard_reports_loss_when_broken,
            dropped_acquire_leaves_no_lease,
            release_by_non_holder_is_refused,
            retry_with_same_lease_id_is_idempotent,
            list_under_prefix,
            semaphore_never_exceeds_limit,
            semaphore_permits_freed_by_expiry,
            semaphore_dropped_acquire_leaves_no_permit,
            holder_data_visible_everywhere,
            oversized_data_rejected,
            election_resign_hands_over,
            election_leader_told_of_loss,
            election_observers_see_every_change,
            run_success_recorded_and_read_elsewhere,
            runs_survive_release_expiry_and_break,
            failed_run_is_not_a_success,
            lost_run_records_no_success,
            record_run_by_non_holder_records_no_success
        );
    };
    (@each $factory:path; $($name:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                if let Some(store) = $factory().await {
                    $crate::conformance::$name(store).await;
                }
            }
        )+
    };
}

/// Prints a visible "skipped" line (past the test harness's output capture)
/// and returns `None`; panics instead when `LEASEHOLD_REQUIRE_EMULATORS` is
/// set to `1`, so a CI run cannot pass by skipping.
pub fn skip<T>(backend: &str, why: &str) -> Option<T> {
    if std::env::var("LEASEHOLD_REQUIRE_EMULATORS").as_deref() == Ok("1") {
        panic!("{backend} tests required (LEASEHOLD_REQUIRE_EMULATORS=1) but {why}");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {backend} test: {why}");
    None
}

fn unique_key(test: &str) -> String {
    format!(
        "conformance/{test}/{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// The TTL tests use: the backend's minimum, at least one second.
pub fn test_ttl(store: &Store) -> Duration {
    store
        .backend()
        .capabilities()
        .min_ttl
        .max(Duration::from_secs(1))
}

/// How long to wait for an expired lease to be taken over.
fn expiry_wait(store: &Store) -> Duration {
    test_ttl(store) * 3 + Duration::from_secs(5)
}

fn opts(store: &Store) -> LockOptions {
    LockOptions::new()
        .ttl(test_ttl(store))
        .poll_interval(Duration::from_millis(20), Duration::from_millis(50))
}

/// A store over the same backend that shares no in-process state with
/// `store`: it behaves like another process.
fn other_process(store: &Store) -> Store {
    Store::with_clock(store.backend().clone(), store.clock().clone())
}

/// The store's current epoch, asked of `backend` directly (an acquire
/// request naming no epoch grants nothing and answers the epoch).
pub async fn current_epoch(backend: &dyn Backend) -> StoreEpoch {
    let req = AcquireRequest {
        key: Key::new("conformance/epoch-probe").unwrap(),
        lease_id: LeaseId::random(),
        ttl: backend.capabilities().min_ttl.max(Duration::from_secs(1)),
        owner: Owner::current(),
        data: None,
        epoch: None,
    };
    match backend.try_acquire(&req).await.unwrap() {
        AcquireOutcome::OtherEpoch(e) => e,
        other => panic!("a request naming no epoch must not be answered {other:?}"),
    }
}

/// A lease taken straight from `backend`, which nobody renews (for tests of
/// expiry, stale holders and the backend contract), in the store's current
/// epoch without any quarantine. Panics if the key is held.
pub async fn raw_lease(backend: &dyn Backend, key: &str, ttl: Duration) -> Lease {
    let epoch = current_epoch(backend).await.epoch;
    let req = AcquireRequest {
        key: Key::new(key).unwrap(),
        lease_id: LeaseId::random(),
        ttl,
        owner: Owner::current(),
        data: None,
        epoch: Some(epoch),
    };
    match backend.try_acquire(&req).await.unwrap() {
        AcquireOutcome::Acquired(g) => Lease {
            key: req.key,
            lease_id: req.lease_id,
            ttl,
            fencing_token: g.fencing_token,
            epoch,
        },
        other => panic!("{key} unexpectedly not granted: {other:?}"),
    }
}

fn assert_held(result: crate::Result<crate::LeaseGuard>) -> Option<Box<crate::HolderInfo>> {
    match result {
        Err(Error::Held { holder, .. }) => holder,
        Err(e) => panic!("expected Held, got error {e}"),
        Ok(g) => panic!(
            "expected Held, got a guard with token {}",
            g.fencing_token()
        ),
    }
}

/// A held key cannot be taken by another holder, who learns who holds it.
pub async fn exclusive_acquire(store: Store) {
    let key = unique_key("exclusive");
    let a = store
        .lock_with(&key, opts(&store).owner_label("holder-a"))
        .unwrap();
    let guard = a.try_acquire().await.unwrap();
    let b = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    let holder = assert_held(b.try_acquire().await).expect("Held carries the holder's info");
    assert_eq!(holder.owner.label.as_deref(), Some("holder-a"));
    assert_eq!(holder.fencing_token, guard.fencing_token());
    let err = b.acquire(Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(err, Error::TimedOut { .. }), "{err}");
    guard.release().await.unwrap();
}

/// After a release, another holder gets the key at once.
pub async fn release_frees(store: Store) {
    let key = unique_key("release");
    let a = store.lock_with(&key, opts(&store)).unwrap();
    let b = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    let guard = a.try_acquire().await.unwrap();
    guard.release().await.unwrap();
    let info = store.inspect(&key).await.unwrap();
    assert!(info.holder.is_none(), "released key still held: {info:?}");
    b.try_acquire().await.unwrap().release().await.unwrap();
}

/// A lease nobody renews frees the key once its TTL has run out, not before.
pub async fn expiry_frees_after_ttl(store: Store) {
    let key = unique_key("expiry");
    let ttl = test_ttl(&store);
    let started = tokio::time::Instant::now();
    let lease = raw_lease(store.backend().as_ref(), &key, ttl).await;
    let b = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    assert_held(b.try_acquire().await);
    let guard = b.acquire(expiry_wait(&store)).await.unwrap();
    assert!(
        started.elapsed() >= ttl.mul_f64(0.9),
        "taken over after {:?}, before the TTL of {ttl:?} ran out",
        started.elapsed()
    );
    assert!(guard.fencing_token() > lease.fencing_token);
    guard.release().await.unwrap();
}

/// A renewal pushes the expiry a whole TTL past the renewal.
pub async fn renew_extends(store: Store) {
    let key = unique_key("renew");
    let ttl = test_ttl(&store);
    let lease = raw_lease(store.backend().as_ref(), &key, ttl).await;
    tokio::time::sleep(ttl / 2).await;
    store.backend().renew(&lease).await.unwrap();
    // Past the first expiry, before the renewed one.
    tokio::time::sleep(ttl / 2 + ttl / 5).await;
    let b = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    assert_held(b.try_acquire().await);
    store.backend().release(&lease).await.unwrap();
}

/// Renewing a lease that was broken, or taken over after expiry, is a
/// definitive loss.
pub async fn renew_after_loss_reports_loss(store: Store) {
    let ttl = test_ttl(&store);
    let key = unique_key("renew-lost");
    let lease = raw_lease(store.backend().as_ref(), &key, ttl).await;
    store.break_lease(&key).await.unwrap();
    let err = store.backend().renew(&lease).await.unwrap_err();
    assert!(err.is_lease_lost(), "renew after break: {err}");

    let key = unique_key("renew-stale");
    let stale = raw_lease(store.backend().as_ref(), &key, ttl).await;
    let b = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    let guard = b.acquire(expiry_wait(&store)).await.unwrap();
    let err = store.backend().renew(&stale).await.unwrap_err();
    assert!(err.is_lease_lost(), "stale renew after takeover: {err}");
    assert!(
        !guard.is_lost(),
        "a stale renew must not disturb the new holder"
    );
    guard.release().await.unwrap();
}

/// Tokens grow strictly across release, break and expiry.
pub async fn fencing_strictly_increases(store: Store) {
    let key = unique_key("fencing");
    let lock = store.lock_with(&key, opts(&store)).unwrap();
    let mut tokens = Vec::new();

    let g = lock.try_acquire().await.unwrap();
    tokens.push(g.fencing_token());
    g.release().await.unwrap();

    let g = lock.try_acquire().await.unwrap();
    tokens.push(g.fencing_token());
    store.break_lease(&key).await.unwrap();
    drop(g);

    let g = other_process(&store)
        .lock_with(&key, opts(&store))
        .unwrap()
        .acquire(Duration::from_secs(10))
        .await
        .unwrap();
    tokens.push(g.fencing_token());
    g.release().await.unwrap();

    let raw = raw_lease(store.backend().as_ref(), &key, test_ttl(&store)).await;
    tokens.push(raw.fencing_token);
    let g = other_process(&store)
        .lock_with(&key, opts(&store))
        .unwrap()
        .acquire(expiry_wait(&store))
        .await
        .unwrap();
    tokens.push(g.fencing_token());
    assert_eq!(
        store.inspect(&key).await.unwrap().fencing_token,
        g.fencing_token()
    );
    g.release().await.unwrap();

    assert!(tokens[0] >= 1, "tokens start at 1: {tokens:?}");
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens not strictly increasing: {tokens:?}"
    );
    assert_eq!(
        store.inspect(&key).await.unwrap().fencing_token,
        *tokens.last().unwrap()
    );
}

/// Inspect and Held errors show the holder's owner identity and data.
pub async fn inspect_shows_holder_owner_and_data(store: Store) {
    let key = unique_key("inspect");
    let lock = store
        .lock_with(
            &key,
            opts(&store)
                .owner_label("inspector")
                .data("payload: ünïcode, 42"),
        )
        .unwrap();
    let before = store.inspect(&key).await.unwrap();
    assert!(before.holder.is_none());
    let guard = lock.try_acquire().await.unwrap();
    let info = store.inspect(&key).await.unwrap();
    assert_eq!(info.key.as_str(), key);
    assert_eq!(info.fencing_token, guard.fencing_token());
    let holder = info.holder.expect("inspect shows the holder");
    assert_eq!(holder.owner, *lock.owner());
    assert_eq!(holder.owner.pid, std::process::id());
    assert_eq!(holder.data.as_deref(), Some("payload: ünïcode, 42"));
    assert_eq!(holder.fencing_token, guard.fencing_token());
    guard.release().await.unwrap();
    assert!(store.inspect(&key).await.unwrap().holder.is_none());
}

/// Break ends the lease whoever holds it and reports whom it ended.
pub async fn break_ends_lease(store: Store) {
    let key = unique_key("break");
    let lock = store
        .lock_with(&key, opts(&store).owner_label("victim"))
        .unwrap();
    let guard = lock.try_acquire().await.unwrap();
    let broken = store.break_lease(&key).await.unwrap();
    assert_eq!(
        broken.and_then(|h| h.owner.label),
        Some("victim".to_string())
    );
    assert!(store.inspect(&key).await.unwrap().holder.is_none());
    let other = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    let g2 = other.acquire(Duration::from_secs(10)).await.unwrap();
    assert!(g2.fencing_token() > guard.fencing_token());
    g2.release().await.unwrap();
    assert!(
        store.break_lease(&key).await.unwrap().is_none(),
        "nothing left to break"
    );
    drop(guard);
}

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

/// Bad keys and TTLs are clear invalid-input errors.
pub async fn bad_input_rejected(store: Store) {
    for key in [
        "",
        "/lead",
        "trail/",
        "dou//ble",
        "spa ce",
        "star*",
        &"k".repeat(257),
    ] {
        let err = store.lock(key).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { what: "key", .. }),
            "{key:?}: {err}"
        );
        assert!(store.inspect(key).await.is_err(), "{key:?}");
    }
    let caps = store.backend().capabilities();
    for ttl in [Duration::ZERO, caps.min_ttl / 2, caps.max_ttl * 2] {
        let err = store
            .lock_with("fine-key", LockOptions::new().ttl(ttl))
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { what: "ttl", .. }),
            "{ttl:?}: {err}"
        );
    }
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

/// Releasing with a lease id that does not hold the key changes nothing.
pub async fn release_by_non_holder_is_refused(store: Store) {
    let key = unique_key("foreign-release");
    let guard = store
        .lock_with(&key, opts(&store))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let forged = Lease {
        key: Key::new(&key).unwrap(),
        lease_id: LeaseId::random(),
        ttl: test_ttl(&store),
        fencing_token: guard.fencing_token(),
        epoch: current_epoch(store.backend().as_ref()).await.epoch,
    };
    let err = store.backend().release(&forged).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let err = store.backend().renew(&forged).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let info = store.inspect(&key).await.unwrap();
    assert_eq!(
        info.holder.map(|h| h.fencing_token),
        Some(guard.fencing_token())
    );
    guard.release().await.unwrap();
}

/// Asking again with the same lease id (a retry after an ambiguous failure)
/// succeeds with the same token.
pub async fn retry_with_same_lease_id_is_idempotent(store: Store) {
    let key = unique_key("retry");
    let epoch = current_epoch(store.backend().as_ref()).await.epoch;
    let req = AcquireRequest {
        key: Key::new(&key).unwrap(),
        lease_id: LeaseId::random(),
        ttl: test_ttl(&store),
        owner: Owner::current(),
        data: Some("d".into()),
        epoch: Some(epoch),
    };
    let first = match store.backend().try_acquire(&req).await.unwrap() {
        AcquireOutcome::Acquired(g) => g,
        other => panic!("{other:?}"),
    };
    let second = match store.backend().try_acquire(&req).await.unwrap() {
        AcquireOutcome::Acquired(g) => g,
        other => panic!("retry with the same id refused: {other:?}"),
    };
    assert_eq!(first, second);
    let lease = Lease {
        key: req.key.clone(),
        lease_id: req.lease_id.clone(),
        ttl: req.ttl,
        fencing_token: first.fencing_token,
        epoch,
    };
    store.backend().release(&lease).await.unwrap();
}

/// List returns the keys under a prefix, held or not, in order.
pub async fn list_under_prefix(store: Store) {
    let base = unique_key("list");
    let held = store
        .lock_with(&format!("{base}/b"), opts(&store))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let g = store
        .lock_with(&format!("{base}/a"), opts(&store))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    g.release().await.unwrap();
    let other = store
        .lock_with(&format!("{base}-x"), opts(&store))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let listed = store.list(&format!("{base}/")).await.unwrap();
    let keys: Vec<_> = listed.iter().map(|i| i.key.as_str().to_string()).collect();
    assert_eq!(keys, vec![format!("{base}/a"), format!("{base}/b")]);
    assert!(listed[0].holder.is_none());
    assert_eq!(
        listed[1].holder.as_ref().map(|h| h.fencing_token),
        Some(held.fencing_token())
    );
    assert!(store.list("/bad").await.is_err());
    held.release().await.unwrap();
    other.release().await.unwrap();
}

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
                    let permit = sem.acquire(Duration::from_secs(120)).await.unwrap();
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
    let permit = sem.acquire(expiry_wait(&store)).await.unwrap();
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
    let long = store
        .backend()
        .capabilities()
        .max_ttl
        .min(Duration::from_secs(60));
    let sem = |s: &Store| s.semaphore_with(&key, 2, opts(&store).ttl(long)).unwrap();
    // Dropped while waiting on a full semaphore.
    let a = sem(&store).try_acquire().await.unwrap();
    let b = sem(&store).try_acquire().await.unwrap();
    let waiter = sem(&other_process(&store));
    assert!(
        tokio::time::timeout(Duration::from_millis(200), waiter.acquire(Wait::Forever))
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
    let p1 = last.acquire(Duration::from_secs(15)).await.unwrap();
    let p2 = last.acquire(Duration::from_secs(15)).await.unwrap();
    assert_ne!(p1.slot(), p2.slot());
    p1.release().await.unwrap();
    p2.release().await.unwrap();
}

/// Owner label and data are stored with locks, semaphore permits and
/// leaderships, and shown by inspect, list, the semaphore's inspect, the
/// election's leader() and Held errors; the longest data allowed (multibyte
/// UTF-8 included) comes back intact.
pub async fn holder_data_visible_everywhere(store: Store) {
    let base = unique_key("holder-data");
    let data = format!("{}{}", "ü".repeat(500), "x".repeat(24));
    assert_eq!(data.len(), MAX_DATA_LEN);
    let label = "l".repeat(MAX_LABEL_LEN);
    let with = |l: &str, d: &str| opts(&store).owner_label(l).data(d);

    let lock_key = format!("{base}/lock");
    let guard = store
        .lock_with(&lock_key, with(&label, &data))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let holder = store
        .inspect(&lock_key)
        .await
        .unwrap()
        .holder
        .expect("held");
    assert_eq!(holder.data.as_deref(), Some(data.as_str()));
    assert_eq!(holder.owner.label.as_deref(), Some(label.as_str()));

    let sem_key = format!("{base}/sem");
    let sem = store
        .semaphore_with(&sem_key, 1, with("permit-holder", "permit data"))
        .unwrap();
    let permit = sem.try_acquire().await.unwrap();
    let slots = sem.inspect().await.unwrap();
    assert_eq!(slots.len(), 1, "{slots:?}");
    assert_eq!(slots[0].slot, permit.slot());
    let h = slots[0].info.holder.as_ref().expect("slot held");
    assert_eq!(
        (h.owner.label.as_deref(), h.data.as_deref()),
        (Some("permit-holder"), Some("permit data"))
    );
    assert_eq!(h.fencing_token, permit.fencing_token());
    let other = other_process(&store)
        .semaphore_with(&sem_key, 1, opts(&store))
        .unwrap();
    let held = assert_held(other.try_acquire().await.map(|p| p.into_guard()));
    assert_eq!(held.and_then(|h| h.data).as_deref(), Some("permit data"));

    let election = store
        .election_with(&format!("{base}/election"), with("leader-1", &data))
        .unwrap();
    let leadership = election.campaign().await.unwrap();
    let leader = other_process(&store)
        .election_with(election.key().as_str(), opts(&store))
        .unwrap()
        .leader()
        .await
        .unwrap()
        .expect("a leader");
    assert_eq!(leader.owner, *election.owner());
    assert_eq!(leader.data.as_deref(), Some(data.as_str()));
    assert_eq!(leader.fencing_token, leadership.term());

    let listed = store.list(&format!("{base}/")).await.unwrap();
    let held: Vec<_> = listed
        .iter()
        .filter_map(|i| {
            Some((
                i.key.as_str().strip_prefix(&base)?,
                i.holder.as_ref()?.data.as_deref()?.len(),
            ))
        })
        .collect();
    assert_eq!(
        held,
        vec![
            ("/election", MAX_DATA_LEN),
            ("/lock", MAX_DATA_LEN),
            ("/sem/:slot:0", "permit data".len()),
        ]
    );
    guard.release().await.unwrap();
    permit.release().await.unwrap();
    leadership.resign().await.unwrap();
}

/// Data and labels over the documented limits are refused with a clear
/// invalid-input error, for locks, semaphores and elections alike, before
/// anything reaches the backend.
pub async fn oversized_data_rejected(store: Store) {
    let key = unique_key("oversized");
    let too_long = "d".repeat(MAX_DATA_LEN + 1);
    let check = |err: Error, what: &str| {
        match &err {
            Error::InvalidInput { what: w, .. } => assert_eq!(*w, what, "{err}"),
            other => panic!("expected InvalidInput, got {other}"),
        }
        assert!(
            err.to_string().contains(&format!(
                "limit of {}",
                if what == "data" {
                    MAX_DATA_LEN
                } else {
                    MAX_LABEL_LEN
                }
            )),
            "{err}"
        );
    };
    check(
        store
            .lock_with(&key, opts(&store).data(too_long.clone()))
            .unwrap_err(),
        "data",
    );
    check(
        store
            .semaphore_with(&key, 2, opts(&store).data(too_long.clone()))
            .unwrap_err(),
        "data",
    );
    check(
        store
            .election_with(&key, opts(&store).data(too_long.clone()))
            .unwrap_err(),
        "data",
    );
    // Multibyte: the limit is in bytes.
    check(
        store
            .lock_with(&key, opts(&store).data("ü".repeat(MAX_DATA_LEN / 2 + 1)))
            .unwrap_err(),
        "data",
    );
    let long_label = "l".repeat(MAX_LABEL_LEN + 1);
    check(
        store
            .lock_with(&key, opts(&store).owner_label(long_label.clone()))
            .unwrap_err(),
        "owner label",
    );
    check(
        store
            .election_with(&key, opts(&store).owner_label(long_label))
            .unwrap_err(),
        "owner label",
    );
    let info = store.inspect(&key).await.unwrap();
    assert_eq!(
        (info.fencing_token, info.holder),
        (0, None),
        "nothing was stored"
    );
}

/// A leader that resigns hands over to a waiting candidate at once (well
/// before its lease could have expired), with a greater term.
pub async fn election_resign_hands_over(store: Store) {
    let key = unique_key("election-handover");
    let ttl = test_ttl(&store);
    // a's lease lasts long enough that only its resignation can explain a
    // handover within half of it.
    let a_ttl = (ttl * 4).min(store.backend().capabilities().max_ttl);
    let handover = a_ttl / 2;
    let a = store
        .election_with(&key, opts(&store).owner_label("a").ttl(a_ttl))
        .unwrap();
    let b = other_process(&store)
        .election_with(&key, opts(&store).owner_label("b"))
        .unwrap();
    let lead_a = a.campaign().await.unwrap();
    let (saw_a_tx, saw_a) = tokio::sync::oneshot::channel();
    let candidate = tokio::spawn(async move {
        let mut saw_a_tx = Some(saw_a_tx);
        b.campaign_with(Wait::Forever, |leader| {
            if leader.and_then(|l| l.owner.label.as_deref()) == Some("a") {
                if let Some(tx) = saw_a_tx.take() {
                    let _ = tx.send(());
                }
            }
        })
        .await
    });
    // b is campaigning and has seen a lead.
    saw_a.await.expect("b saw a as leader");
    let term_a = lead_a.term();
    let resigned = tokio::time::Instant::now();
    lead_a.resign().await.unwrap();
    let lead_b = tokio::time::timeout(handover, candidate)
        .await
        .expect("b leads within half of a's lease time after a resigned")
        .unwrap()
        .unwrap();
    assert!(resigned.elapsed() < handover);
    assert!(lead_b.term() > term_a);
    let leader = a.leader().await.unwrap().expect("b leads");
    assert_eq!(leader.owner.label.as_deref(), Some("b"));
    assert_eq!(leader.fencing_token, lead_b.term());
    lead_b.resign().await.unwrap();
    assert_eq!(a.leader().await.unwrap(), None);
}

/// A leader whose lease is broken is told so by its leadership guard, and
/// resigning then reports the loss.
pub async fn election_leader_told_of_loss(store: Store) {
    let key = unique_key("election-lost");
    let ttl = test_ttl(&store);
    let election = store
        .election_with(&key, opts(&store).renew_interval(ttl / 5))
        .unwrap();
    let leadership = election.campaign().await.unwrap();
    assert!(!leadership.is_lost());
    store.break_lease(&key).await.unwrap();
    let reason = tokio::time::timeout(ttl, leadership.lost())
        .await
        .expect("loss noticed within one TTL");
    assert!(
        matches!(reason, crate::LossReason::Revoked(_)),
        "{reason:?}"
    );
    assert!(leadership.is_lost());
    assert!(leadership.resign().await.unwrap_err().is_lease_lost());
}

/// An observer in another process reports every change of leader, in
/// order, with who leads and what they published; changes it could not see
/// between two polls are counted, not hidden.
pub async fn election_observers_see_every_change(store: Store) {
    let key = unique_key("election-observe");
    let observer_store = other_process(&store);
    let mut observer = observer_store
        .election_with(&key, opts(&store))
        .unwrap()
        .observe(Duration::from_millis(20));
    let (tx, mut changes) = tokio::sync::mpsc::unbounded_channel();
    let watching = tokio::spawn(async move {
        loop {
            let change = observer.next().await.unwrap();
            if tx.send(change).is_err() {
                break;
            }
        }
    });
    let wait = test_ttl(&store) * 2;
    let who = |c: &crate::LeaderChange| {
        c.leader.as_ref().map(|h| {
            (
                h.owner.label.clone().unwrap_or_default(),
                h.data.clone().unwrap_or_default(),
                h.fencing_token,
            )
        })
    };

    let first = next_change(&mut changes, wait).await;
    assert_eq!(
        (who(&first), first.last_term, first.missed_terms),
        (None, 0, 0)
    );

    let a = store
        .election_with(&key, opts(&store).owner_label("a").data("at a"))
        .unwrap();
    let b = other_process(&store)
        .election_with(&key, opts(&store).owner_label("b").data("at b"))
        .unwrap();
    let mut expected = Vec::new();
    let mut last_term = first.last_term;
    for candidate in [&a, &b, &a] {
        let leadership = candidate.campaign().await.unwrap();
        let label = candidate.owner().label.clone().unwrap();
        let change = loop {
            let change = next_change(&mut changes, wait).await;
            // A backend that records the new holder before it takes the
            // lease (Azure) can be polled between the two: a new term with
            // nobody holding it yet. That is not a change of leader.
            if change.leader.is_none() && change.last_term > last_term {
                continue;
            }
            break change;
        };
        last_term = change.last_term;
        assert_eq!(
            who(&change),
            Some((label.clone(), format!("at {label}"), leadership.term()))
        );
        assert_eq!(change.missed_terms, 0);
        expected.push(leadership.term());
        leadership.resign().await.unwrap();
        let change = next_change(&mut changes, wait).await;
        assert_eq!((who(&change), change.missed_terms), (None, 0));
        assert_eq!(change.last_term, *expected.last().unwrap());
    }
    assert!(
        expected.windows(2).all(|w| w[0] < w[1]),
        "terms {expected:?}"
    );
    watching.abort();
}

async fn next_change(
    changes: &mut tokio::sync::mpsc::UnboundedReceiver<crate::LeaderChange>,
    wait: Duration,
) -> crate::LeaderChange {
    tokio::time::timeout(wait, changes.recv())
        .await
        .expect("the observer reports the change within two TTLs")
        .expect("the observer runs")
}

/// The store's data is lost while a lease is held and another holder waits
/// (`lose` destroys it): the waiter is granted only after the first holder's
/// guard was told lost (so the two critical sections never overlap), it
/// waited in quarantine, and its token is greater than the first one. The
/// old holder's release reports the loss.
pub async fn store_loss_stops_holder_before_next_grant<F, Fut>(store: Store, lose: F)
where
    F: FnOnce(Store) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let key = unique_key("store-loss");
    let ttl = test_ttl(&store);
    let holder = store
        .lock_with(&key, opts(&store).renew_interval(ttl / 5))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let first = holder.fencing_token();
    let waiter = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    assert_held(waiter.try_acquire().await);

    lose(store.clone()).await;

    let max_ttl = store.backend().capabilities().max_ttl;
    let mut quarantined = None;
    let guard = waiter
        .acquire_reporting(max_ttl * 3 + Duration::from_secs(30), |reason| {
            if let WaitReason::Quarantine { remaining, .. } = reason {
                quarantined.get_or_insert(remaining);
            }
        })
        .await
        .unwrap();
    // Checked the moment the new grant is in hand.
    let old_lost = holder.is_lost();
    assert!(
        old_lost,
        "a new holder was granted (token {}) while the holder of the lost data (token {first}) was not yet told lost",
        guard.fencing_token()
    );
    assert!(
        guard.fencing_token() > first,
        "token {} after the store's data was lost is not above the earlier {first}",
        guard.fencing_token()
    );
    assert!(
        quarantined.is_some(),
        "the waiter was never told of a quarantine"
    );
    let err = holder.release().await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let info = store.inspect(&key).await.unwrap();
    assert_eq!(info.fencing_token, guard.fencing_token());
    guard.release().await.unwrap();
}

fn started_now() -> std::time::SystemTime {
    std::time::SystemTime::now()
}

/// Asserts that `run` is the record of a run with `outcome` under the
/// lease with `token`, by this process with `label`, that took place
/// between `before` and `after` (wall clock; a backend may stamp the end
/// with the store's clock, so a minute of slack).
fn assert_run(
    run: Option<&RunRecord>,
    outcome: RunOutcome,
    token: u64,
    label: &str,
    before: std::time::SystemTime,
    after: std::time::SystemTime,
) {
    let run =
        run.unwrap_or_else(|| panic!("no run recorded (expected {outcome:?}, token {token})"));
    assert_eq!(run.outcome, outcome, "{run:?}");
    assert_eq!(run.fencing_token, token, "{run:?}");
    assert_eq!(run.owner.label.as_deref(), Some(label), "{run:?}");
    assert_eq!(run.owner.pid, std::process::id(), "{run:?}");
    let slack = Duration::from_secs(60);
    assert!(
        run.started_at >= before - Duration::from_millis(1) && run.started_at <= after,
        "{run:?}"
    );
    assert!(
        run.ended_at >= run.started_at - slack && run.ended_at <= after + slack,
        "{run:?}"
    );
}

/// A run released with success is the key's last success and last run,
/// with its token, owner, times and exit code, as read through another
/// "process" (a store sharing nothing in-process), and it is what
/// [`Store::last_success_within`] answers.
pub async fn run_success_recorded_and_read_elsewhere(store: Store) {
    let key = unique_key("run-success");
    let other = other_process(&store);
    let none = other.inspect(&key).await.unwrap();
    assert!(none.last_success.is_none() && none.last_run.is_none());
    assert!(other
        .last_success_within(&key, Duration::from_secs(3600))
        .await
        .unwrap()
        .is_none());

    let before = started_now();
    let guard = store
        .lock_with(&key, opts(&store).owner_label("runner-a"))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let token = guard.fencing_token();
    guard
        .release_with(RunReport::succeeded(before).exit_code(Some(0)))
        .await
        .unwrap();
    let after = started_now();

    let info = other.inspect(&key).await.unwrap();
    assert!(info.holder.is_none(), "release_with released the lease");
    assert_run(
        info.last_success.as_ref(),
        RunOutcome::Succeeded,
        token,
        "runner-a",
        before,
        after,
    );
    assert_eq!(info.last_run, info.last_success);
    assert_eq!(info.last_run.as_ref().unwrap().exit_code, Some(0));
    let within = other
        .last_success_within(&key, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(within, info.last_success);
    assert!(other
        .last_success_within(&key, Duration::ZERO)
        .await
        .is_err());
    // list shows the records too.
    let listed = other.list(&key).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].last_success, info.last_success);
}

/// The last success stays through a release, an expiry and a break of
/// later leases, and through later grants (like the fencing counter).
pub async fn runs_survive_release_expiry_and_break(store: Store) {
    let key = unique_key("run-survives");
    let before = started_now();
    let guard = store
        .lock_with(&key, opts(&store).owner_label("runner-a"))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let token = guard.fencing_token();
    guard
        .release_with(RunReport::succeeded(before))
        .await
        .unwrap();
    let after = started_now();
    let check = |info: crate::KeyInfo, when: &str| {
        assert_run(
            info.last_success.as_ref(),
            RunOutcome::Succeeded,
            token,
            "runner-a",
            before,
            after,
        );
        assert_eq!(info.last_run, info.last_success, "after {when}");
    };

    // A plain release by a later holder.
    let b = other_process(&store);
    b.lock_with(&key, opts(&b))
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    check(store.inspect(&key).await.unwrap(), "a later release");

    // A break of a later holder.
    let held = b
        .lock_with(&key, opts(&b))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    store.break_lease(&key).await.unwrap();
    check(store.inspect(&key).await.unwrap(), "a break");
    drop(held);

    // An expiry: a lease nobody renews, taken over after its TTL.
    let ttl = test_ttl(&store);
    let stale = raw_lease(store.backend().as_ref(), &key, ttl).await;
    let c = other_process(&store);
    let taken = c
        .lock_with(&key, opts(&c))
        .unwrap()
        .acquire(Wait::Timeout(expiry_wait(&store)))
        .await
        .unwrap();
    assert!(taken.fencing_token() > stale.fencing_token);
    check(store.inspect(&key).await.unwrap(), "an expiry and takeover");
    taken.release().await.unwrap();
    check(store.inspect(&key).await.unwrap(), "the takeover's release");
}

/// A failed run is the last run, with its exit code, but not the last
/// success: that stays the earlier successful run.
pub async fn failed_run_is_not_a_success(store: Store) {
    let key = unique_key("run-failed");
    let lock = store
        .lock_with(&key, opts(&store).owner_label("runner-a"))
        .unwrap();
    let before = started_now();
    let g = lock.try_acquire().await.unwrap();
    let good = g.fencing_token();
    g.release_with(RunReport::succeeded(before)).await.unwrap();
    let mid = started_now();
    let g = lock.try_acquire().await.unwrap();
    let bad = g.fencing_token();
    g.release_with(RunReport::failed(mid).exit_code(Some(3)))
        .await
        .unwrap();
    let after = started_now();

    let info = other_process(&store).inspect(&key).await.unwrap();
    assert_run(
        info.last_success.as_ref(),
        RunOutcome::Succeeded,
        good,
        "runner-a",
        before,
        mid,
    );
    assert_run(
        info.last_run.as_ref(),
        RunOutcome::Failed,
        bad,
        "runner-a",
        mid,
        after,
    );
    assert_eq!(info.last_run.as_ref().unwrap().exit_code, Some(3));

    // A key that never succeeded has a last run and no success.
    let key2 = unique_key("run-failed-only");
    let g = store
        .lock_with(&key2, opts(&store))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    g.release_with(RunReport::failed(started_now()))
        .await
        .unwrap();
    let info = store.inspect(&key2).await.unwrap();
    assert!(info.last_success.is_none(), "{:?}", info.last_success);
    assert_eq!(info.last_run.unwrap().outcome, RunOutcome::Failed);
    assert!(store
        .last_success_within(&key2, Duration::from_secs(3600))
        .await
        .unwrap()
        .is_none());
}

/// A holder whose lease was broken and granted to another reports its
/// run as a success: `release_with` answers the loss, no success of its
/// is recorded, and the later holder's records are not replaced by the
/// earlier run's.
pub async fn lost_run_records_no_success(store: Store) {
    let key = unique_key("run-lost");
    let a = store
        .lock_with(&key, opts(&store).owner_label("runner-a"))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    store.break_lease(&key).await.unwrap();
    let b_store = other_process(&store);
    let before = started_now();
    let b = b_store
        .lock_with(&key, opts(&b_store).owner_label("runner-b"))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let b_token = b.fencing_token();
    b.release_with(RunReport::succeeded(before)).await.unwrap();
    let after = started_now();

    let err = a
        .release_with(RunReport::succeeded(before))
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let info = store.inspect(&key).await.unwrap();
    assert_run(
        info.last_success.as_ref(),
        RunOutcome::Succeeded,
        b_token,
        "runner-b",
        before,
        after,
    );
    assert_eq!(
        info.last_run, info.last_success,
        "an earlier run replaced a later one's record"
    );

    // Lost with nobody after it: never a success; if the store kept the
    // attempt, it says the lease was lost.
    let key2 = unique_key("run-lost-alone");
    let a = store
        .lock_with(&key2, opts(&store).owner_label("runner-a"))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let a_token = a.fencing_token();
    store.break_lease(&key2).await.unwrap();
    let err = a
        .release_with(RunReport::succeeded(started_now()))
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let info = store.inspect(&key2).await.unwrap();
    assert!(
        info.last_success.is_none(),
        "a lost run was recorded as a success: {:?}",
        info.last_success
    );
    if let Some(run) = &info.last_run {
        assert_eq!(run.outcome, RunOutcome::LeaseLost, "{run:?}");
        assert_eq!(run.fencing_token, a_token);
    }
}

/// The backend contract directly: `record_run` with a lease that is not
/// the key's (released, or taken by another) answers `LeaseLost` and
/// writes no success; with the key's lease it writes both records.
pub async fn record_run_by_non_holder_records_no_success(store: Store) {
    let backend = store.backend().clone();
    let key = unique_key("run-contract");
    let ttl = test_ttl(&store);
    let now = started_now();
    let run = |lease: &Lease, outcome| {
        RunRecord::new(outcome, now, now, Owner::current(), lease.fencing_token)
    };
    let first = raw_lease(backend.as_ref(), &key, ttl).await;
    backend.release(&first).await.unwrap();
    let err = backend
        .record_run(&first, &run(&first, RunOutcome::Succeeded))
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let info = backend.inspect(&Key::new(&key).unwrap()).await.unwrap();
    assert!(
        info.last_success.is_none(),
        "a released lease recorded a success"
    );

    let second = raw_lease(backend.as_ref(), &key, ttl).await;
    let err = backend
        .record_run(&first, &run(&first, RunOutcome::Succeeded))
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    backend
        .record_run(&second, &run(&second, RunOutcome::Succeeded))
        .await
        .unwrap();
    // A retry of the same write is harmless.
    backend
        .record_run(&second, &run(&second, RunOutcome::Succeeded))
        .await
        .unwrap();
    let info = backend.inspect(&Key::new(&key).unwrap()).await.unwrap();
    assert_eq!(
        info.last_success.as_ref().unwrap().fencing_token,
        second.fencing_token
    );
    assert_eq!(info.last_run, info.last_success);
    assert_eq!(
        info.holder.as_ref().map(|h| h.fencing_token),
        Some(second.fencing_token),
        "record_run left the lease held"
    );
    // A stale holder's failure does not replace the later run.
    let _ = backend
        .record_run(&first, &run(&first, RunOutcome::Failed))
        .await;
    let info = backend.inspect(&Key::new(&key).unwrap()).await.unwrap();
    assert_eq!(
        info.last_run.as_ref().unwrap().fencing_token,
        second.fencing_token
    );
    backend.release(&second).await.unwrap();
}

/// A store that lost its data has no run records: the job runs again.
pub async fn store_loss_forgets_runs<F, Fut>(store: Store, lose: F)
where
    F: FnOnce(Store) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let key = unique_key("run-store-loss");
    let g = store
        .lock_with(&key, opts(&store))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    g.release_with(RunReport::succeeded(started_now()))
        .await
        .unwrap();
    assert!(store
        .last_success_within(&key, Duration::from_secs(3600))
        .await
        .unwrap()
        .is_some());
    lose(store.clone()).await;
    let info = store.inspect(&key).await.unwrap();
    assert!(
        info.last_success.is_none() && info.last_run.is_none(),
        "{info:?}"
    );
    assert!(store
        .last_success_within(&key, Duration::from_secs(3600))
        .await
        .unwrap()
        .is_none());
}
