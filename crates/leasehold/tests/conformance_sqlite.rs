//! The conformance suite on the SQLite backend (one fresh file per test),
//! with store loss as the file deleted, and as the file replaced by a backup
//! taken before the lease was granted.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::sqlite::SqliteBackend;
use leasehold::{Backend, Store};

/// The files of the stores made here, by the address of the store's backend.
static FILES: Mutex<Vec<(usize, PathBuf)>> = Mutex::new(Vec::new());

fn address(backend: &Arc<dyn Backend>) -> usize {
    Arc::as_ptr(backend) as *const () as usize
}

async fn store() -> Option<Store> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    // The directory must outlive the test: leak it (removed with /tmp).
    std::mem::forget(dir);
    // A max TTL short enough for the store-loss test's quarantine, long
    // enough for the suite's longest lease.
    let backend = SqliteBackend::open_with_max_ttl(&path, Duration::from_secs(20)).unwrap();
    let store = Store::new(backend);
    FILES.lock().unwrap().push((address(store.backend()), path));
    Some(store)
}

fn file_of(store: &Store) -> PathBuf {
    let files = FILES.lock().unwrap();
    files
        .iter()
        // The newest first: a finished test's address may be reused.
        .rev()
        .find(|(a, _)| *a == address(store.backend()))
        .expect("a store made by store()")
        .1
        .clone()
}

fn remove_database(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

/// `rm leases.db*`.
async fn delete_file(store: Store) {
    remove_database(&file_of(&store));
}

/// A backup taken before the lease was granted, restored over the file.
async fn restore_backup(store: Store) {
    let path = file_of(&store);
    let backup = path.with_extension("bak");
    let conn = rusqlite::Connection::open(&path).unwrap();
    // A consistent copy of the store as it is now (the lease included),
    // then everything after that "lost": the copy is an old backup.
    conn.execute("VACUUM INTO ?1", [backup.to_str().unwrap()])
        .unwrap();
    drop(conn);
    remove_database(&path);
    std::fs::rename(&backup, &path).unwrap();
}

leasehold::conformance_tests!(store, lose = delete_file);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_by_restored_backup() {
    let store = store().await.unwrap();
    leasehold::conformance::store_loss_stops_holder_before_next_grant(store, restore_backup).await;
}
