//! Handoff to a queued waiter (the crate docs' "Handoff"): a lock's waiter
//! of another store (its own gRPC channel and watches, as another machine
//! would have) registers, and the holder's release grants it the key in
//! its own `Txn`; a waiter that gives up is never handed the key.

mod common;

use std::time::Duration;

use leasehold::LockOptions;
use leasehold_etcd::grpc::{self, etcdserverpb::TxnRequest};
use leasehold_etcd::EtcdBackend;

/// The holder key's `create_revision` (0: no holder), and the number of
/// waiters' registrations for `key`, at one revision.
async fn holder_and_waiters(backend: &EtcdBackend, key: &str) -> (i64, i64) {
    let prefix = backend.prefix();
    let txn = TxnRequest {
        success: vec![
            grpc::get(format!("{prefix}h/{key}")),
            grpc::get_prefix(format!("{prefix}w/")),
        ],
        ..Default::default()
    };
    let resp = backend
        .connection()
        .kv()
        .txn(txn)
        .await
        .unwrap()
        .into_inner();
    // Other tests' registrations share the store: only `key`'s count.
    let waiters = grpc::range_kvs(resp.responses[1].clone())
        .iter()
        .filter(|kv| {
            serde_json::from_slice::<serde_json::Value>(&kv.value).is_ok_and(|v| v["key"] == key)
        })
        .count() as i64;
    let holder = grpc::range_kvs(resp.responses[0].clone())
        .first()
        .map_or(0, |kv| kv.create_revision);
    (holder, waiters)
}

/// Waits (5 s at most) until `backend`'s view of the waiters shows `n`
/// registrations for `key`.
async fn until_seen(backend: &EtcdBackend, key: &str, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while backend.waiters_seen(key) != n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the holder's view never showed {n} registrations"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn options() -> LockOptions {
    LockOptions::new().ttl(common::MAX_TTL)
}

/// Two stores on the run's etcd store, each with its own backend (as two
/// processes would have), and `key` held by the first: the holder's and
/// the waiter's backends, and the guard.
async fn held(key: &str) -> Option<(EtcdBackend, EtcdBackend, leasehold::LeaseGuard)> {
    let holder = common::backend().await?;
    let waiter = common::backend().await.unwrap();
    let guard = leasehold_testkit::test_store(holder.clone())
        .lock_with(key, options())
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    Some((holder, waiter, guard))
}

/// The release writes the waiter's grant itself: the holder key is never
/// deleted in between (it keeps its `create_revision`), the waiter's
/// token is the next one, and no registration is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_release_hands_the_key_to_a_queued_waiter() {
    let key = common::unique_key("handoff");
    let Some((holder, waiter, guard)) = held(&key).await else {
        return;
    };
    let (created, _) = holder_and_waiters(&holder, &key).await;
    assert_ne!(created, 0);
    let task = tokio::spawn({
        let (waiter, key) = (waiter.clone(), key.clone());
        async move {
            leasehold_testkit::test_store(waiter)
                .lock_with(&key, options())
                .unwrap()
                .acquire_timeout(Duration::from_secs(10))
                .await
        }
    });
    until_seen(&holder, &key, 1).await;
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    let handed = task.await.unwrap().unwrap();
    assert_eq!(handed.fencing_token(), token + 1);
    let (after, waiters) = holder_and_waiters(&holder, &key).await;
    assert_eq!(
        after, created,
        "the holder key was deleted and created again: the waiter took a free key, it was not handed over"
    );
    assert_eq!(waiters, 0, "a registration was left behind");
    assert!(!handed.is_lost());
    handed.release().await.unwrap();
    assert_eq!(holder_and_waiters(&holder, &key).await, (0, 0));
}

/// A waiter whose wait runs out ends its registration: the holder's
/// release a moment later (well within the freshness a registration is
/// handed the key in) frees the key instead of handing it to nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_that_gave_up_is_not_handed_the_key() {
    let key = common::unique_key("handoff-gave-up");
    let Some((holder, waiter, guard)) = held(&key).await else {
        return;
    };
    let waited = leasehold_testkit::test_store(waiter.clone())
        .lock_with(&key, options())
        .unwrap()
        .acquire_timeout(Duration::from_millis(700))
        .await;
    assert!(
        matches!(waited, Err(leasehold::Error::TimedOut { .. })),
        "{waited:?}"
    );
    // The registration's end runs in the background: done by now.
    leasehold::finish_background().await;
    until_seen(&holder, &key, 0).await;
    guard.release().await.unwrap();
    assert_eq!(
        holder_and_waiters(&holder, &key).await,
        (0, 0),
        "the key was handed to a waiter that had given up, or its registration was left"
    );
}
