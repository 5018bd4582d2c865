//! The shared conformance suite, unchanged, on DynamoDB Local.

mod common;

async fn store() -> Option<leasehold::Store> {
    Some(leasehold::Store::new(common::backend().await?))
}

leasehold::conformance_tests!(store);
