//! The shared conformance suite, unchanged, on a real PostgreSQL server.
//! (The store-loss test drops its table, so it runs on a table of its own,
//! in `store_loss.rs`.)

mod common;

async fn store() -> Option<leasehold::Store> {
    Some(leasehold::Store::new(common::backend().await?))
}

leasehold::conformance_tests!(store);
