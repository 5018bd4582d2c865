//! The shared conformance suite, unchanged, on a real ZooKeeper server.
//! (The store-loss tests delete the store, so they run on a chroot of
//! their own, in `store_loss.rs`.)

mod common;

async fn store() -> Option<leasehold::Store> {
    Some(leasehold_testkit::test_store(common::backend().await?))
}

leasehold_testkit::conformance_tests!(store);
