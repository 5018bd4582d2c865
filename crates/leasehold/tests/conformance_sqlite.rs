//! The conformance suite on the SQLite backend (one fresh file per test).

async fn store() -> Option<leasehold::Store> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    // The directory must outlive the test: leak it (removed with /tmp).
    std::mem::forget(dir);
    Some(leasehold::Store::open(&format!("sqlite:{}", path.display())).unwrap())
}

leasehold::conformance_tests!(store);
