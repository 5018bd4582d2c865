//! The conformance suite on the in-memory backend.

async fn store() -> Option<leasehold::Store> {
    Some(leasehold::Store::open("memory:").unwrap())
}

leasehold::conformance_tests!(store);
