//! Run records on the SQLite store: a file written before run records
//! existed gets them when opened (its counters and leases kept), and a
//! record written through one handle is read through another.

use std::time::{Duration, SystemTime};

use leasehold::sqlite::SqliteBackend;
use leasehold::{LockOptions, RunOutcome, RunReport};
use leasehold_testkit::conformance::take;

fn opts() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(2))
}

#[tokio::test]
async fn a_file_from_before_run_records_gets_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    {
        // The table as leasehold wrote it before run records.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE leasehold_leases (
                key TEXT PRIMARY KEY NOT NULL, fence INTEGER NOT NULL, lease_id TEXT,
                boot_id TEXT, expires_at_ns INTEGER, ttl_ms INTEGER, owner_host TEXT,
                owner_pid INTEGER, owner_label TEXT, data TEXT, acquired_at_ms INTEGER
             ) WITHOUT ROWID;
             INSERT INTO leasehold_leases (key, fence) VALUES ('nightly', 41);",
        )
        .unwrap();
    }
    let store = leasehold_testkit::test_store(SqliteBackend::open(&path).unwrap());
    let info = store.inspect("nightly").await.unwrap();
    assert_eq!(info.fencing_token, 41, "the old counter is kept");
    assert!(info.last_success.is_none());
    let guard = take(&store, "nightly", opts()).await;
    assert!(guard.fencing_token() > 41);
    let token = guard.fencing_token();
    guard
        .release_with(RunReport::succeeded(SystemTime::now()))
        .await
        .unwrap();

    // Another handle on the same file (as another process opens it).
    let other = leasehold_testkit::test_store(SqliteBackend::open(&path).unwrap());
    let success = other
        .last_success_within("nightly", Duration::from_secs(3600))
        .await
        .unwrap()
        .expect("the success, read through another handle");
    assert_eq!(success.fencing_token, token);
    assert_eq!(success.outcome, RunOutcome::Succeeded);
}
