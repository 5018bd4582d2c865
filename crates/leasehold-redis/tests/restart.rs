//! Server restarts, with and without the data, and a long outage, each on
//! a private Redis server (started and stopped with `scripts/redis.sh`).
//!
//! Every restart starts a new store epoch, data kept or not: a restarted
//! server cannot vouch that it kept its last writes (an append-only file
//! flushed once a second loses up to a second of grants and renewals on a
//! crash). So the holder is told lost, and the next grant waits out the
//! quarantine and gets a greater token, exactly as after FLUSHALL.

mod common;

use std::time::{Duration, Instant};

use common::PrivateServer;
use leasehold::{Error, LockOptions, LossReason, Store};

async fn store(server: &PrivateServer) -> Store {
    let backend = server.backend().await;
    common::settled(&backend).await;
    Store::new(backend)
}

/// Restart without persistence (`--save ''`, no append-only file): the
/// data is gone, a new epoch starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_without_data_stops_holder_before_next_grant() {
    let Some(server) = PrivateServer::start(false).await else {
        return;
    };
    let store = store(&server).await;
    leasehold::conformance::store_loss_stops_holder_before_next_grant(store, |_| {
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
    let store = store(&server).await;
    let before = Store::new(server.backend().await);
    let kept = common::unique_key("kept");
    let g = before
        .lock_with(&kept, LockOptions::new().ttl(Duration::from_secs(2)))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let kept_token = g.fencing_token();
    g.release().await.unwrap();
    leasehold::conformance::store_loss_stops_holder_before_next_grant(store.clone(), |_| {
        server.script("restart")
    })
    .await;
    // The data was kept: the other key's counter survived the restart.
    let info = store.inspect(&kept).await.unwrap();
    assert_eq!(info.fencing_token, kept_token, "{info:?}");
}

fn opts(ttl: Duration) -> LockOptions {
    LockOptions::new()
        .ttl(ttl)
        .renew_interval(ttl / 8)
        .poll_interval(Duration::from_millis(20), Duration::from_millis(60))
}

/// A long outage (server stopped for more than the TTL): the holder is
/// told lost by its own clock, and only then does another process get the
/// key, once the server is back, with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn long_outage_holder_is_told_lost_first() {
    let Some(server) = PrivateServer::start(true).await else {
        return;
    };
    let a = store(&server).await;
    let b = Store::new(server.backend().await);
    let ttl = Duration::from_secs(2);
    let key = "restart/job";
    let guard = a
        .lock_with(key, opts(ttl))
        .unwrap()
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    let first = guard.fencing_token();
    let attempt = b.lock_with(key, opts(ttl)).unwrap().try_acquire().await;
    assert!(matches!(attempt, Err(Error::Held { .. })), "{attempt:?}");
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.lock_with(key, opts(ttl))
                .unwrap()
                .acquire_timeout(Duration::from_secs(60))
                .await
                .map(|g| (Instant::now(), g))
        }
    });
    server.script("stop").await;
    let reason = tokio::time::timeout(ttl * 2, guard.lost())
        .await
        .expect("the holder was not told lost during a long outage");
    assert_eq!(reason, LossReason::Expired);
    let lost_at = Instant::now();
    server.script("start").await;
    let (granted_at, g2) = waiter.await.unwrap().unwrap();
    assert!(granted_at > lost_at);
    assert!(g2.fencing_token() > first);
    g2.release().await.unwrap();
}
