//! The conformance suite's store-loss tests on Redis: `FLUSHALL` under a
//! live holder and a waiter (each on a private server, so that the shared
//! one keeps its data).

mod common;

use common::{PrivateServer, Redis};
use leasehold::conformance::servers::store::ServerStore;
use leasehold::conformance::servers::suite::Recreation;
use leasehold_redis::redis;

async fn flushall(server: &PrivateServer) {
    let _: () = server.admin(&redis::cmd("FLUSHALL")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_stops_holder_before_next_grant() {
    let Some(server) = PrivateServer::start(false).await else {
        return;
    };
    let store = server.settled_store().await;
    leasehold::conformance::store_loss_stops_holder_before_next_grant(store, |_| flushall(&server))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_forgets_runs() {
    let Some(server) = PrivateServer::start(false).await else {
        return;
    };
    let store = server.settled_store().await;
    leasehold::conformance::store_loss_forgets_runs(store, |_| flushall(&server)).await;
}

/// A reader-writer lock's gate reading the other side on the flushed
/// server, after its grant on the old data (a defect the torture run found
/// here): not let in while the other side's holders are not yet told.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rw_lock_a_writer_whose_gate_reads_after_a_loss_waits_for_the_readers() {
    let Some(server) = PrivateServer::start(false).await else {
        return;
    };
    let store = server.settled_store().await;
    leasehold::conformance::rw_lock_a_writer_whose_gate_reads_after_a_loss_waits_for_the_readers(
        store,
        |_| flushall(&server),
    )
    .await;
}

/// As above, a reader's gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rw_lock_a_reader_whose_gate_reads_after_a_loss_waits_for_the_writer() {
    let Some(server) = PrivateServer::start(false).await else {
        return;
    };
    let store = server.settled_store().await;
    leasehold::conformance::rw_lock_a_reader_whose_gate_reads_after_a_loss_waits_for_the_writer(
        store,
        |_| flushall(&server),
    )
    .await;
}

leasehold::recreation_tests!(recreated_at_once);

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
