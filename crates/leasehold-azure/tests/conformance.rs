//! The shared conformance suite, unchanged, against Azurite.

mod common;

async fn store() -> Option<leasehold::Store> {
    common::backend().await.map(leasehold::Store::new)
}

leasehold::conformance_tests!(store);
