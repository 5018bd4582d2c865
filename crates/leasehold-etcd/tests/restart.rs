//! Server restarts, on a private etcd this test starts and stops itself
//! (with `scripts/etcd.sh`, on ports of its own), so other tests' server is
//! never disturbed: with its data (leases survive, the holder keeps its key
//! or, after a long outage, is told lost first) and without (a new cluster:
//! a new epoch, the holder told lost, tokens above every earlier one).

mod common;

use std::time::{Duration, Instant};

use common::PrivateServer;
use leasehold::LossReason;
use leasehold_test_servers::suite;

/// Waits until the new store's epoch is older than its max TTL by the
/// server's timer (so no process quarantines it). A restart extends that
/// timer (etcd renews every lease when it starts): settle before restarts.
async fn settle(server: &PrivateServer) {
    let backend = server.backend().await;
    loop {
        let epoch = backend.epoch().await.unwrap();
        if epoch.age >= Some(epoch.max_ttl) {
            // etcd reports whole seconds left, rounded down: the timer key
            // may live up to a second more, and a restart would renew it.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A quick restart with the data (its connections all dropped): the holder
/// renews over a new connection and keeps its lease; nobody else is granted
/// meanwhile. A long outage: the holder is told lost by its own clock, and
/// only then does another process get the key, with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_holder_renews_or_is_told_lost() {
    let Some(server) = PrivateServer::start().await else {
        return;
    };
    let (a, b) = suite::two_stores(|| server.backend()).await;
    settle(&server).await;
    let ttl = Duration::from_secs(8);
    let key = "restart/job";
    let guard = suite::hold(&a, key, ttl).await;
    suite::holder_survives_a_quick_restart(&guard, &b, key, ttl, server.script("restart")).await;
    suite::long_outage_tells_the_holder_first(
        guard,
        &b,
        key,
        ttl,
        server.script("restart-stopped"),
        || server.script("start"),
    )
    .await;
}

/// The cluster re-created empty under a live holder (its data directory
/// lost): the holder's next renewal finds no key and it is told lost; the
/// store has a new epoch, whose first grant waits out the quarantine and
/// has a token above every earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_cluster_is_a_new_epoch() {
    let Some(server) = PrivateServer::start().await else {
        return;
    };
    let (a, b) = suite::two_stores(|| server.backend()).await;
    let max_ttl = a.backend().capabilities().max_ttl;
    settle(&server).await;
    let ttl = Duration::from_secs(3);
    let key = "wipe/job";
    let guard = suite::hold(&a, key, ttl).await;
    let first = guard.fencing_token();
    // Within the epoch's seconds: the next epoch must start above it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    server.script("wipe").await;
    let wiped_at = Instant::now();
    let reason = tokio::time::timeout(ttl * 2, guard.lost())
        .await
        .expect("the holder was not told lost after the wipe");
    assert!(
        matches!(reason, LossReason::Revoked(_) | LossReason::Expired),
        "{reason:?}"
    );
    let g2 = b
        .lock_with(key, suite::restart_opts(ttl))
        .unwrap()
        .acquire_timeout(Duration::from_secs(30))
        .await
        .unwrap();
    assert!(
        wiped_at.elapsed() >= max_ttl,
        "granted {:?} after the wipe, inside the quarantine",
        wiped_at.elapsed()
    );
    assert!(g2.fencing_token() > first);
    g2.release().await.unwrap();
}
