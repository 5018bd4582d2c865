//! The shared conformance suite, unchanged, on a real etcd server.
//! (The store-loss test deletes the store's keys, so it runs on a prefix
//! of its own, in `store_loss.rs`.)

mod common;

async fn store() -> Option<leasehold::Store> {
    Some(leasehold::Store::new(common::backend().await?))
}

leasehold::conformance_tests!(store);
