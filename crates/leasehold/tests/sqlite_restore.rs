//! A SQLite backup restored beside the lost file's leftover WAL (issue 28,
//! item 7). SQLite has no way to tell that a `-wal` file belongs to another
//! database file: it reads the WAL's pages over the restored copy, mixing
//! the two. leasehold can tell when the file was replaced (its epoch row
//! names another file) and the WAL still holds pages not yet copied into
//! the file: it refuses to open, before writing anything, and says what to
//! remove.

use std::path::{Path, PathBuf};

use leasehold::sqlite::SqliteBackend;
use leasehold::Store;

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

async fn take_turns(store: &Store, keys: std::ops::Range<u32>) {
    for i in keys {
        let guard =
            leasehold_testkit::conformance::take(store, &format!("k{i}"), Default::default()).await;
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restored_beside_the_lost_files_wal_is_refused_until_it_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let backup = dir.path().join("backup.db");
    let store = leasehold_testkit::test_store(SqliteBackend::open(&path).unwrap());
    take_turns(&store, 0..5).await;
    // A consistent backup, taken while the store is in use.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("VACUUM INTO ?1", [backup.to_str().unwrap()])
        .unwrap();
    drop(conn);
    // More grants after the backup; leasehold leaves its WAL at close.
    take_turns(&store, 5..8).await;
    drop(store);
    let wal = with_suffix(&path, "-wal");
    assert!(
        std::fs::metadata(&wal).unwrap().len() > 32,
        "a WAL with pages is left"
    );

    // The file is lost; the backup is moved into its place, but the lost
    // file's -wal and -shm stay.
    std::fs::remove_file(&path).unwrap();
    std::fs::rename(&backup, &path).unwrap();
    let db_before = std::fs::read(&path).unwrap();
    let wal_before = std::fs::read(&wal).unwrap();

    let err = match SqliteBackend::open(&path) {
        Ok(backend) => leasehold_testkit::test_store(backend)
            .lock("k0")
            .unwrap()
            .try_acquire()
            .await
            .map(|_| ())
            .unwrap_err(),
        Err(e) => e,
    };
    let message = err.to_string();
    assert!(
        message.contains("leases.db-wal") && message.contains("remove"),
        "{message}"
    );
    assert!(!err.is_retryable(), "{err:?}");
    // Nothing was written: not the restored file, not the WAL.
    assert_eq!(std::fs::read(&path).unwrap(), db_before);
    assert_eq!(std::fs::read(&wal).unwrap(), wal_before);

    // Removed as the message says, the store opens, in a new epoch.
    std::fs::remove_file(&wal).unwrap();
    let _ = std::fs::remove_file(with_suffix(&path, "-shm"));
    let store = leasehold_testkit::test_store(SqliteBackend::open(&path).unwrap());
    take_turns(&store, 0..3).await;
}
