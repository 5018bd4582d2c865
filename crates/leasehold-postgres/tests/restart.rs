//! Server restarts, on a private PostgreSQL server this test starts and
//! stops itself (with `scripts/postgres.sh`, on a port of its own), so
//! other tests' server is never disturbed.

mod common;

use std::time::Duration;

use common::{Postgres, PrivateServer};
use leasehold_test_servers::store::ServerStore;
use leasehold_test_servers::suite;

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
    let (a, b) = suite::two_stores(|| server.backend()).await;
    let epoch = a.backend().capabilities().max_ttl;
    // A new table: wait out its quarantine once.
    tokio::time::sleep(epoch + Duration::from_millis(100)).await;
    let ttl = Duration::from_secs(4);
    let key = "restart/job";
    let guard = suite::hold(&a, key, ttl).await;
    // Quick restart: fast shutdown and start (about 1-2 s here).
    suite::holder_survives_a_quick_restart(&guard, &b, key, ttl, server.script("restart")).await;
    // Long outage: stopped for more than the TTL.
    suite::long_outage_tells_the_holder_first(guard, &b, key, ttl, server.script("stop"), || {
        server.script("start")
    })
    .await;
}

/// An UNLOGGED table (`unlogged=on`) across a clean restart keeps its data
/// (the shutdown checkpoint writes it), and the holder keeps its lease;
/// across a crash (an immediate shutdown: the next start runs crash
/// recovery, which empties every UNLOGGED table) its data is lost, and
/// that is a store loss like any other: the holder is told lost before
/// anyone else is granted the key, the new grant waited a quarantine, and
/// its token is greater.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlogged_table_survives_a_restart_and_a_crash_is_a_store_loss() {
    let Some(server) = PrivateServer::start().await else {
        return;
    };
    let open = || server.backend_with("&unlogged=on");
    let (a, b) = suite::two_stores(open).await;
    Postgres::settled(&open().await).await;
    let ttl = Duration::from_secs(4);
    let key = "unlogged/job";
    let guard = suite::hold(&a, key, ttl).await;
    suite::holder_survives_a_quick_restart(&guard, &b, key, ttl, server.script("restart")).await;
    guard.release().await.unwrap();

    leasehold_testkit::conformance::store_loss_stops_holder_before_next_grant(
        leasehold_testkit::test_store(open().await),
        |_| server.script("crash"),
    )
    .await;
}
