//! What a short-lived process (`leasehold run`) leaves on the SQLite store:
//! a closing connection leaves a small WAL for the next process (no
//! checkpoint, whose two fsyncs and the WAL's re-creation were most of a
//! short run's disk writes), checkpoints one that has grown, and a WAL left
//! beside a deleted database never brings old tokens back. (That a new
//! process's first acquire is one transaction is the conformance test
//! `first_grant_is_one_attempt_after_an_epoch_read_at_open`.)

use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold::sqlite::SqliteBackend;
use leasehold::{LockOptions, Store};
use leasehold_testkit::conformance::take;

fn wal(db: &Path) -> PathBuf {
    PathBuf::from(format!("{}-wal", db.display()))
}

/// One acquire and release of `key`; its token.
async fn cycle(store: &Store, key: &str) -> u64 {
    let guard = take(store, key, LockOptions::new().ttl(Duration::from_secs(5))).await;
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    token
}

#[tokio::test]
async fn a_closed_store_leaves_a_small_wal_for_the_next_process() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let store = leasehold_testkit::test_store(SqliteBackend::open(&db).unwrap());
    let first = cycle(&store, "job").await;
    drop(store);
    let kept = std::fs::metadata(wal(&db)).map(|m| m.len()).unwrap_or(0);
    assert!(kept > 0, "closing checkpointed and deleted the WAL");

    let store = leasehold_testkit::test_store(SqliteBackend::open(&db).unwrap());
    assert!(cycle(&store, "job").await > first, "the kept WAL was read");
}

#[tokio::test]
async fn a_closed_store_checkpoints_a_wal_that_has_grown() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let store = leasehold_testkit::test_store(SqliteBackend::open(&db).unwrap());
    let mut tokens = Vec::new();
    for i in 0..150 {
        tokens.push(cycle(&store, &format!("job-{i}")).await);
    }
    let grown = std::fs::metadata(wal(&db)).unwrap().len();
    // The threshold in `sqlite.rs` is 256 KiB.
    assert!(grown > 256 * 1024, "the WAL has only {grown} bytes");
    drop(store);
    assert!(
        !wal(&db).exists(),
        "a WAL of {grown} bytes was left for the next process to read"
    );

    let store = leasehold_testkit::test_store(SqliteBackend::open(&db).unwrap());
    for (i, token) in tokens.iter().enumerate() {
        assert!(cycle(&store, &format!("job-{i}")).await > *token);
    }
}

#[tokio::test]
async fn a_database_deleted_beside_its_kept_wal_gives_greater_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let store = leasehold_testkit::test_store(SqliteBackend::open(&db).unwrap());
    let old = cycle(&store, "job").await;
    drop(store);
    assert!(wal(&db).exists());

    // A cleanup that removes the database file only.
    std::fs::remove_file(&db).unwrap();
    let store = leasehold_testkit::test_store(SqliteBackend::open(&db).unwrap());
    let new = cycle(&store, "job").await;
    assert!(
        new > old,
        "token {new} after {old}: the old WAL was replayed or ignored unsafely"
    );
}
