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

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::backend::{AcquireOutcome, AcquireRequest, Lease, LeaseId, Owner};
use crate::error::Error;
use crate::key::Key;
use crate::options::{LockOptions, Wait};
use crate::store::Store;

/// Runs every conformance test as its own `#[tokio::test]`. `$factory` is a
/// path to an `async fn() -> Option<Store>`; `None` skips the test.
#[macro_export]
macro_rules! conformance_tests {
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
            list_under_prefix
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

/// A lease taken straight from the backend, which nobody renews.
async fn raw_lease(store: &Store, key: &str, ttl: Duration) -> Lease {
    let req = AcquireRequest {
        key: Key::new(key).unwrap(),
        lease_id: LeaseId::random(),
        ttl,
        owner: Owner::current(),
        data: None,
    };
    match store.backend().try_acquire(&req).await.unwrap() {
        AcquireOutcome::Acquired(g) => Lease {
            key: req.key,
            lease_id: req.lease_id,
            ttl,
            fencing_token: g.fencing_token,
        },
        AcquireOutcome::Held(h) => panic!("{key} unexpectedly held by {h:?}"),
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
    let lease = raw_lease(&store, &key, ttl).await;
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
    let lease = raw_lease(&store, &key, ttl).await;
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
    let lease = raw_lease(&store, &key, ttl).await;
    store.break_lease(&key).await.unwrap();
    let err = store.backend().renew(&lease).await.unwrap_err();
    assert!(err.is_lease_lost(), "renew after break: {err}");

    let key = unique_key("renew-stale");
    let stale = raw_lease(&store, &key, ttl).await;
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

    let raw = raw_lease(&store, &key, test_ttl(&store)).await;
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
    let req = AcquireRequest {
        key: Key::new(&key).unwrap(),
        lease_id: LeaseId::random(),
        ttl: test_ttl(&store),
        owner: Owner::current(),
        data: Some("d".into()),
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
