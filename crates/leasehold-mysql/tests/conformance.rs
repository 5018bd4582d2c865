//! The shared conformance suite, unchanged, on a real MySQL/MariaDB server.
//! (The store-loss test drops its table, so it runs on a table of its own,
//! in `store_loss.rs`.)

mod common;

async fn store() -> Option<leasehold::Store> {
    Some(leasehold_testkit::test_store(common::backend().await?))
}

leasehold_testkit::conformance_tests!(store);
