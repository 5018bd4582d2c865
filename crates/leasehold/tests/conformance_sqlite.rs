//! The conformance suite on the SQLite backend (one fresh file per test),
//! with store loss as the file deleted, and as the file replaced by a backup
//! taken before the lease was granted.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::sqlite::SqliteBackend;
use leasehold::{backend::Backend, Store};

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
    let store = leasehold_testkit::test_store(backend);
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

leasehold_testkit::conformance_tests!(store, lose = delete_file);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_by_restored_backup() {
    let store = store().await.unwrap();
    leasehold_testkit::conformance::store_loss_stops_holder_before_next_grant(
        store,
        restore_backup,
    )
    .await;
}

/// A store of its own opened with a long max TTL (30 min), for a holder of
/// the longest lease it allows.
fn long_holder_store() -> (PathBuf, Arc<dyn Backend>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    std::mem::forget(dir);
    let backend = SqliteBackend::open_with_max_ttl(&path, Duration::from_secs(30 * 60)).unwrap();
    (path, Arc::new(backend))
}

fn open_default(path: &Path) -> Arc<dyn Backend> {
    Arc::new(SqliteBackend::open(path).unwrap())
}

/// A consistent copy of the file as it is now, moved over it later: a
/// backup restored.
fn replace_by_backup(path: &Path) {
    let backup = path.with_extension("bak");
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute("VACUUM INTO ?1", [backup.to_str().unwrap()])
        .unwrap();
    drop(conn);
    remove_database(path);
    std::fs::rename(&backup, path).unwrap();
}

/// The file deleted under a holder of a 30-minute lease; a process with
/// the default max TTL creates it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_quarantine_outlasts_a_longer_holder_file_deleted() {
    let (path, holder) = long_holder_store();
    leasehold_testkit::conformance::store_loss_quarantine_outlasts_every_holder(
        holder,
        || async { remove_database(&path) },
        || async { open_default(&path) },
    )
    .await;
}

/// A backup restored under a holder of a 30-minute lease; a process with
/// the default max TTL starts the new epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_quarantine_outlasts_a_longer_holder_backup_restored() {
    let (path, holder) = long_holder_store();
    leasehold_testkit::conformance::store_loss_quarantine_outlasts_every_holder(
        holder,
        || async { replace_by_backup(&path) },
        || async { open_default(&path) },
    )
    .await;
}

/// The epoch row's max TTL: a backup restored under a holder of a
/// 30-minute lease; a process with the default max TTL starts the new
/// epoch (and records its own max TTL in the row); the file is replaced
/// again before the holder's lease could have ended, and the next process
/// with the default max TTL must still wait out every holder of the first
/// file.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_quarantine_survives_an_epoch_renewed_with_a_shorter_max_ttl() {
    let (path, holder) = long_holder_store();
    leasehold_testkit::conformance::store_loss_quarantine_outlasts_every_holder(
        holder,
        || async {
            replace_by_backup(&path);
            drop(open_default(&path));
            replace_by_backup(&path);
        },
        || async { open_default(&path) },
    )
    .await;
}

/// The file deleted at once under a holder (within the second the file was
/// created in) and created again: the new grant's token is greater.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_recreated_at_once_issues_greater_tokens() {
    let (path, holder) = long_holder_store();
    leasehold_testkit::conformance::store_recreated_at_once_issues_greater_tokens(
        holder,
        || async { remove_database(&path) },
        || async { open_default(&path) },
    )
    .await;
}
