//! Server restarts and a killed server, on a private MariaDB server this
//! test starts and stops itself (with `scripts/mysql.sh`, on a port of its
//! own), so other tests' server is never disturbed.

mod common;

use std::time::Duration;

use common::PrivateServer;
use leasehold_test_servers::suite;

/// A quick restart (shorter than the TTL), then a killed server (SIGKILL:
/// no shutdown; the next start recovers from InnoDB's log, which keeps
/// every committed grant): the holder renews over new connections and
/// keeps its lease; nobody else is granted meanwhile. Then a long outage
/// (longer than the TTL): the holder is told lost by its own clock, and
/// only then does another process get the key, with a greater token.
/// Never two holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_kill_and_outage_holder_renews_or_is_told_lost() {
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
    suite::holder_survives_a_quick_restart(&guard, &b, key, ttl, server.script("restart")).await;
    suite::holder_survives_a_quick_restart(&guard, &b, key, ttl, server.script("crash")).await;
    suite::long_outage_tells_the_holder_first(guard, &b, key, ttl, server.script("stop"), || {
        server.script("start")
    })
    .await;
}
