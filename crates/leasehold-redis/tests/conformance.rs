//! The shared conformance suite, unchanged, on a real Redis server.
//! (The store-loss tests empty the server with FLUSHALL, so they run on a
//! private server, in `store_loss.rs`.)

mod common;

async fn store() -> Option<leasehold::Store> {
    Some(leasehold_testkit::test_store(common::backend().await?))
}

leasehold_testkit::conformance_tests!(store);
