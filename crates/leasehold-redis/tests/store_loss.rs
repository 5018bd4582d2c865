//! The conformance suite's store-loss tests on Redis: `FLUSHALL` under a
//! live holder and a waiter (each on a private server, so that the shared
//! one keeps its data).

mod common;

use common::{PrivateServer, Redis};
use leasehold_redis::redis;
use leasehold_test_servers::store::ServerStore;
use leasehold_test_servers::suite::Recreation;

async fn flushall(server: &PrivateServer) {
    let _: () = server.admin(&redis::cmd("FLUSHALL")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_stops_holder_before_next_grant() {
    let Some(server) = PrivateServer::start(false).await else {
        return;
    };
    let store = server.settled_store().await;
    leasehold_testkit::conformance::store_loss_stops_holder_before_next_grant(store, |_| {
        flushall(&server)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_forgets_runs() {
    let Some(server) = PrivateServer::start(false).await else {
        return;
    };
    let store = server.settled_store().await;
    leasehold_testkit::conformance::store_loss_forgets_runs(store, |_| flushall(&server)).await;
}

/// A reader-writer lock's gate reading the other side on the flushed
/// server after its grant on the old data (found here by the torture run).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rw_lock_a_gate_that_reads_after_a_loss_waits_for_the_other_side() {
    if let Some(server) = PrivateServer::start(false).await {
        let store = server.settled_store().await;
        let lose = |_| flushall(&server);
        leasehold_testkit::conformance::rw_lock_a_gate_that_reads_after_a_loss_waits_for_the_other_side(
            store, lose,
        )
        .await;
    }
}

leasehold_test_servers::recreation_tests!(recreated_at_once);

/// `test` on a private server: a holder on a store opened with
/// `?max_ttl=30m`, `FLUSHALL`, and the store re-created with the default.
/// Re-created at once, the store's epoch (the server clock's next second)
/// would repeat if the first grant had not waited for that second to begin.
async fn recreated_at_once(test: Recreation) {
    let Some(server) = PrivateServer::start(false).await else {
        return;
    };
    test.run(
        open(&server, "?max_ttl=30m").await,
        || flushall(&server),
        || open(&server, ""),
    )
    .await;
}

/// A backend on the private server's store, with `params`.
async fn open(
    server: &PrivateServer,
    params: &str,
) -> std::sync::Arc<dyn leasehold::backend::Backend> {
    Redis::open_url(&format!("{}{params}", server.base_url())).await
}
