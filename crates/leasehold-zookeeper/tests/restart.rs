//! Server restarts and crashes, on a private ZooKeeper this test starts
//! and stops itself (with `scripts/zookeeper.sh`, on a port of its own),
//! so other tests' server is never disturbed: with its data (a restart, or
//! a SIGKILL: the holder keeps its key, or, after a long outage, is told
//! lost first) and without (a new ensemble: a new epoch, the holder told
//! lost, tokens above every earlier one).

mod common;

use std::time::{Duration, Instant};

use common::{PrivateServer, Zk};
use leasehold::LossReason;
use leasehold_test_servers::suite;

/// Waits until the server's store is older than its max TTL by the
/// server's clock (so that no process quarantines it).
async fn settle(server: &PrivateServer) {
    let backend = server.backend().await;
    loop {
        let epoch = backend.epoch().await.unwrap();
        if epoch.age >= Some(epoch.max_ttl + Duration::from_millis(100)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A quick restart with the data (every connection dropped): the holder
/// renews over a new connection and keeps its lease; nobody else is
/// granted meanwhile. A long outage: the holder is told lost by its own
/// clock, and only then does another process get the key, with a greater
/// token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_holder_renews_or_is_told_lost() {
    let Some(server) = PrivateServer::start().await else {
        return;
    };
    let (a, b) = suite::two_stores(|| server.backend()).await;
    settle(&server).await;
    let ttl = Duration::from_secs(16);
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

/// The server killed (SIGKILL, no shutdown) and started again on its
/// data: nothing acknowledged is lost (ZooKeeper syncs its log before it
/// answers), so the holder renews and keeps its lease, and nobody else
/// is granted meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_holder_keeps_its_lease() {
    let Some(server) = PrivateServer::start().await else {
        return;
    };
    let (a, b) = suite::two_stores(|| server.backend()).await;
    settle(&server).await;
    let ttl = Duration::from_secs(16);
    let key = "crash/job";
    let guard = suite::hold(&a, key, ttl).await;
    let crash_and_start = async {
        server.script("crash").await;
        server.script("start").await;
    };
    suite::holder_survives_a_quick_restart(&guard, &b, key, ttl, crash_and_start).await;
    let first = guard.fencing_token();
    guard.release().await.unwrap();
    let g2 = b
        .lock_with(key, suite::restart_opts(ttl))
        .unwrap()
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(g2.fencing_token() > first);
    g2.release().await.unwrap();
}

/// The ensemble re-created empty under a live holder (its data directory
/// lost): the holder's next renewal finds no record and it is told lost;
/// the store has a new epoch, whose first grant waits out the quarantine
/// and has a token above every earlier one. The clients, which saw later
/// transactions than the new server has, open new sessions (the server
/// refuses the old ones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_ensemble_is_a_new_epoch() {
    let Some(server) = PrivateServer::start().await else {
        return;
    };
    let (a, b) = suite::two_stores(|| server.backend()).await;
    let max_ttl = leasehold::backend::Backend::capabilities(a.backend().as_ref()).max_ttl;
    settle(&server).await;
    let ttl = Duration::from_secs(3);
    let key = "wipe/job";
    let guard = suite::hold(&a, key, ttl).await;
    let first = guard.fencing_token();
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
        .acquire_timeout(Duration::from_secs(40))
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

/// Opening the store where no server listens fails, retryably, within
/// about the request timeout.
#[tokio::test]
async fn unreachable_server_fails_retryably() {
    let err = suite::unreachable_server_fails_retryably::<Zk>(
        |port| format!("zk://127.0.0.1:{port}"),
        Duration::from_secs(5),
    )
    .await;
    assert!(err.to_string().contains("zookeeper"), "{err}");
}
