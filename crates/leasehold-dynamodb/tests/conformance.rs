//! The shared conformance suite, unchanged, on DynamoDB Local.

mod common;

async fn store() -> Option<leasehold::Store> {
    Some(leasehold_testkit::test_store(common::backend().await?))
}

leasehold_testkit::conformance_tests!(store);
