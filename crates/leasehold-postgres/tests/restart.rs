//! Server restarts, on a private PostgreSQL server this test starts and
//! stops itself (with `scripts/postgres.sh`, on a port of its own), so
//! other tests' server is never disturbed.

mod common;

use std::time::{Duration, Instant};

use common::PrivateServer;
use leasehold::{Error, LockOptions, LossReason, Store};

fn opts(ttl: Duration) -> LockOptions {
    LockOptions::new()
        .ttl(ttl)
        .renew_interval(ttl / 8)
        .poll_interval(Duration::from_millis(20), Duration::from_millis(60))
}

/// A quick restart (shorter than the TTL): the holder renews over new
/// connections and keeps its lease; nobody else is granted meanwhile. A
/// long outage (longer than the TTL): the holder is told lost by its own
/// clock, and only then does another process get the key, with a greater
/// token. Never two holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_holder_renews_or_is_told_lost() {
    let Some(server) = PrivateServer::start().await else {
        return;
    };
    let a = Store::new(server.backend().await);
    let b = Store::new(server.backend().await);
    let epoch = a.backend().capabilities().max_ttl;
    // A new table: wait out its quarantine once.
    tokio::time::sleep(epoch + Duration::from_millis(100)).await;
    let ttl = Duration::from_secs(4);
    let key = "restart/job";
    let guard = a
        .lock_with(key, opts(ttl))
        .unwrap()
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    let first = guard.fencing_token();

    // Quick restart: fast shutdown and start (about 1-2 s here).
    let started = Instant::now();
    server.script("restart").await;
    let took = started.elapsed();
    // Past the TTL since the restart began: only renewals after it count.
    tokio::time::sleep((ttl + Duration::from_millis(500)).saturating_sub(took)).await;
    assert!(
        !guard.is_lost(),
        "the holder lost its lease over a restart of {took:?} (TTL {ttl:?})"
    );
    let attempt = b.lock_with(key, opts(ttl)).unwrap().try_acquire().await;
    assert!(matches!(attempt, Err(Error::Held { .. })), "{attempt:?}");

    // Long outage: stopped for more than the TTL.
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.lock_with(key, opts(ttl))
                .unwrap()
                .acquire_timeout(Duration::from_secs(60))
                .await
        }
    });
    server.script("stop").await;
    let reason = tokio::time::timeout(ttl * 2, guard.lost())
        .await
        .expect("the holder was not told lost during a long outage");
    assert_eq!(reason, LossReason::Expired);
    // The waiter can only be granted once the server is back, after the
    // holder was told lost.
    server.script("start").await;
    let g2 = waiter.await.unwrap().unwrap();
    assert!(g2.fencing_token() > first);
    g2.release().await.unwrap();
}
