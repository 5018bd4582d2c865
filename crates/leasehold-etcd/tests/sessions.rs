//! Sessions (issue 31): a backend hangs its holder keys on shared etcd
//! leases, so an uncontended acquire and release is two requests, as
//! etcd's own lock on a session is; yet a key nobody renews is freed within
//! its TTL while its process renews another key of the same session; a
//! grant on a session granted earlier says how much of its TTL had run
//! out; a session whose etcd lease is gone is replaced at the next grant.

mod common;

use std::sync::Arc;
use std::time::Duration;

use leasehold::backend::{Backend, ManualClock};
use leasehold::Key;
use leasehold_etcd::grpc::etcdserverpb::{LeaseRevokeRequest, RangeRequest};
use leasehold_etcd::EtcdBackend;
use leasehold_testkit::conformance::current_epoch;

/// The etcd lease the key's holder key hangs on (0: none, or no holder).
async fn holder_lease(backend: &EtcdBackend, key: &Key) -> i64 {
    let request = RangeRequest {
        key: format!("{}h/{}", backend.prefix(), key.as_str()).into_bytes(),
        ..Default::default()
    };
    let resp = backend
        .connection()
        .kv()
        .range(request)
        .await
        .unwrap()
        .into_inner();
    resp.kvs.first().map_or(0, |kv| kv.lease)
}

fn key(name: &str) -> Key {
    Key::new(common::unique_key(name)).unwrap()
}

/// The cycle the benchmarks measure: a key this process held last is
/// acquired and released in one request each; keys of one TTL share one
/// etcd lease, keys of another TTL have their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_cycle_is_two_requests() {
    let Some(backend) = common::backend().await else {
        return;
    };
    // 4.5 s: a 5 s etcd lease, whose half second to spare keeps the
    // session from needing a keep-alive during the cycles.
    let ttl = Duration::from_millis(4500);
    let k = key("cycle");
    let (first, _) = common::grant(&backend, &k, ttl).await;
    backend.release(&first).await.unwrap();
    let epoch = current_epoch(&backend).await.epoch;
    for _ in 0..3 {
        let before = backend.requests_sent();
        let (lease, _) = common::grant_in(&backend, &k, ttl, epoch).await;
        backend.release(&lease).await.unwrap();
        assert_eq!(
            backend.requests_sent() - before,
            2,
            "an acquire and a release of a key this process saw last"
        );
    }

    let (a, _) = common::grant(&backend, &key("shared-a"), ttl).await;
    let (b, _) = common::grant(&backend, &key("shared-b"), ttl).await;
    let (c, _) = common::grant(&backend, &key("own"), Duration::from_secs(3)).await;
    let (la, lb, lc) = (
        holder_lease(&backend, &a.key).await,
        holder_lease(&backend, &b.key).await,
        holder_lease(&backend, &c.key).await,
    );
    assert!(la != 0 && la == lb, "keys of one TTL: {la} and {lb}");
    assert_ne!(la, lc, "keys of another TTL share the lease");
    for l in [a, b, c] {
        backend.release(&l).await.unwrap();
    }
}

/// A grant on a session granted earlier reports the part of its TTL that
/// had run out by the send, so the holder's deadline counts from the
/// session's grant and never outlasts the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_on_an_older_session_says_how_much_of_its_ttl_ran() {
    let Some(backend) = common::backend().await else {
        return;
    };
    // Whole seconds: an etcd lease of the same length, no slack from
    // rounding up. The test store's max TTL, 5 s, so that the 5 % a grant
    // may reuse a session for (250 ms) outlasts the pause below and a
    // loaded test run's slow answers (with 2 s, 100 ms, the second grant
    // once got a session of its own).
    let ttl = Duration::from_secs(5);
    let started = tokio::time::Instant::now();
    let (first, g1) = common::grant(&backend, &key("older-1"), ttl).await;
    assert!(g1.ran <= started.elapsed(), "{:?}", g1.ran);
    tokio::time::sleep(Duration::from_millis(60)).await;
    let (second, g2) = common::grant(&backend, &key("older-2"), ttl).await;
    assert_eq!(
        holder_lease(&backend, &first.key).await,
        holder_lease(&backend, &second.key).await
    );
    assert!(
        g2.ran >= Duration::from_millis(60) && g2.ran <= started.elapsed(),
        "the second grant on the session said {:?} of its TTL had run",
        g2.ran
    );
    backend.release(&first).await.unwrap();
    backend.release(&second).await.unwrap();
}

/// The machine sleeps (a laptop's lid, a VM paused by its host): the
/// session's etcd lease ages on the server all the while, and tokio's
/// clock, on `CLOCK_MONOTONIC`, stands still. A grant after the suspend
/// must not take the session as just granted: it hangs the key on a new
/// session, or says how much of its TTL ran out while the machine slept.
/// Otherwise the holder's deadline outlasts its key by the whole suspend,
/// and another process takes the key while the holder still trusts its
/// lease. (The suspend is a [`ManualClock`] moved ahead: the backend's
/// clock, a boot clock by default, counts it; tokio's does not move.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ages_while_the_machine_sleeps() {
    if common::backend().await.is_none() {
        return;
    }
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1000)));
    let backend = common::builder_for(common::prefix())
        .expect("the server answered a moment ago")
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let ttl = Duration::from_secs(5);
    let (first, _) = common::grant(&backend, &key("asleep-1"), ttl).await;
    let session = holder_lease(&backend, &first.key).await;
    // Four of the session's five seconds pass while the machine sleeps.
    clock.advance(Duration::from_secs(4));
    let (second, g2) = common::grant(&backend, &key("asleep-2"), ttl).await;
    let hung_on = holder_lease(&backend, &second.key).await;
    assert!(
        hung_on != session || g2.ran >= Duration::from_secs(4),
        "a grant on a session 4 s old (by a clock that counts the suspend) said {:?} of its TTL had run",
        g2.ran
    );
    assert_ne!(
        hung_on, session,
        "a session 4 s old was reused for a 5 s grant"
    );
    backend.release(&first).await.unwrap();
    backend.release(&second).await.unwrap();
}

/// A session's etcd lease revoked behind the backend's back (an operator,
/// or a break by an older leasehold): its keys are freed, and the next
/// grant starts a new session instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_session_is_replaced_at_the_next_grant() {
    let Some(backend) = common::backend().await else {
        return;
    };
    let ttl = Duration::from_secs(5);
    let (a, _) = common::grant(&backend, &key("revoked-a"), ttl).await;
    let session = holder_lease(&backend, &a.key).await;
    backend
        .connection()
        .lease()
        .lease_revoke(LeaseRevokeRequest { id: session })
        .await
        .unwrap();
    assert_eq!(
        holder_lease(&backend, &a.key).await,
        0,
        "the key outlived its lease"
    );
    assert!(backend.renew(&a).await.unwrap_err().is_lease_lost());
    let (b, _) = common::grant(&backend, &key("revoked-b"), ttl).await;
    let new = holder_lease(&backend, &b.key).await;
    assert!(new != 0 && new != session, "{session} then {new}");
    backend.release(&b).await.unwrap();
}

/// Two keys on one session; the process renews one and not the other (its
/// holder stopped, or it leaked the guard): the other is freed within its
/// TTL all the same, and the renewed one stays. A session kept alive by
/// one key's renewals would keep every key on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_nobody_renews_is_freed_while_its_sibling_is_renewed() {
    let Some(backend) = common::backend().await else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let (renewed, _) = common::grant(&backend, &key("sibling-renewed"), ttl).await;
    let (left, _) = common::grant(&backend, &key("sibling-left"), ttl).await;
    assert_eq!(
        holder_lease(&backend, &renewed.key).await,
        holder_lease(&backend, &left.key).await,
        "the two keys were meant to share a session"
    );
    let started = tokio::time::Instant::now();
    // Renewed every half second, for two TTLs and a half (etcd checks
    // expiries every 500 ms).
    while started.elapsed() < ttl * 5 / 2 {
        backend.renew(&renewed).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        holder_lease(&backend, &left.key).await,
        0,
        "the key nobody renewed outlived its TTL"
    );
    assert!(backend.renew(&left).await.unwrap_err().is_lease_lost());
    assert_ne!(holder_lease(&backend, &renewed.key).await, 0);
    backend.release(&renewed).await.unwrap();
}

/// Renewals through `renew_ran` (the engine's) move many keys onto one
/// session, as grants do: ten renewals are ten `Txn`s and at most one
/// `LeaseGrant`, not a lease granted for each (which, with thousands of
/// keys renewing, would queue every renewal behind a grant).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_share_sessions() {
    let Some(backend) = common::backend().await else {
        return;
    };
    let ttl = Duration::from_millis(4500);
    let mut leases = Vec::new();
    for i in 0..10 {
        leases.push(
            common::grant(&backend, &key(&format!("renewals-{i}")), ttl)
                .await
                .0,
        );
    }
    let before = backend.requests_sent();
    for l in &leases {
        let ran = backend.renew_ran(l).await.unwrap();
        assert!(ran <= ttl / 20, "{ran:?}");
    }
    let sent = backend.requests_sent() - before;
    assert!(sent <= 11, "ten renewals sent {sent} requests");
    let sessions: std::collections::HashSet<i64> = {
        let mut s = std::collections::HashSet::new();
        for l in &leases {
            s.insert(holder_lease(&backend, &l.key).await);
        }
        s
    };
    assert!(sessions.len() <= 2, "{sessions:?}");
    for l in leases {
        backend.release(&l).await.unwrap();
    }
}
