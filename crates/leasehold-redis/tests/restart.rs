//! Server restarts, with and without the data, and a long outage, each on
//! a private Redis server (started and stopped with `scripts/redis.sh`).
//!
//! Every restart starts a new store epoch, data kept or not: a restarted
//! server cannot vouch that it kept its last writes (an append-only file
//! flushed once a second loses up to a second of grants and renewals on a
//! crash). So the holder is told lost, and the next grant waits out the
//! quarantine and gets a greater token, exactly as after FLUSHALL.

mod common;

use std::time::Duration;

use common::PrivateServer;
use leasehold::LockOptions;
use leasehold_test_servers::suite;

/// Restart without persistence (`--save ''`, no append-only file): the
/// data is gone, a new epoch starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_without_data_stops_holder_before_next_grant() {
    let Some(server) = PrivateServer::start(false).await else {
        return;
    };
    let store = server.settled_store().await;
    leasehold_testkit::conformance::store_loss_stops_holder_before_next_grant(store, |_| {
        server.script("restart")
    })
    .await;
}

/// Restart with an append-only file: the records survive (the key's
/// fencing counter is still there), yet a new epoch starts and the holder
/// is told lost all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_with_data_starts_a_new_epoch_too() {
    let Some(server) = PrivateServer::start(true).await else {
        return;
    };
    let store = server.settled_store().await;
    let before = leasehold_testkit::test_store(server.backend().await);
    let kept = common::unique_key("kept");
    let g = before
        .lock_with(&kept, LockOptions::new().ttl(Duration::from_secs(2)))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let kept_token = g.fencing_token();
    g.release().await.unwrap();
    leasehold_testkit::conformance::store_loss_stops_holder_before_next_grant(
        store.clone(),
        |_| server.script("restart"),
    )
    .await;
    // The data was kept: the other key's counter survived the restart.
    let info = store.inspect(&kept).await.unwrap();
    assert_eq!(info.fencing_token, kept_token, "{info:?}");
}

/// A long outage (server stopped for more than the TTL): the holder is
/// told lost by its own clock, and only then does another process get the
/// key, once the server is back, with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn long_outage_holder_is_told_lost_first() {
    let Some(server) = PrivateServer::start(true).await else {
        return;
    };
    let a = server.settled_store().await;
    let b = leasehold_testkit::test_store(server.backend().await);
    let ttl = Duration::from_secs(2);
    let key = "restart/job";
    let guard = suite::hold(&a, key, ttl).await;
    suite::long_outage_tells_the_holder_first(guard, &b, key, ttl, server.script("stop"), || {
        server.script("start")
    })
    .await;
}
