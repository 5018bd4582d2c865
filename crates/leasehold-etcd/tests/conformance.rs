//! The shared conformance suite, unchanged, on a real etcd server.
//! (The store-loss test deletes the store's keys, so it runs on a prefix
//! of its own, in `store_loss.rs`.)

mod common;

async fn store() -> Option<leasehold::Store> {
    Some(leasehold_testkit::test_store(common::backend().await?))
}

leasehold_testkit::conformance_tests!(store);
