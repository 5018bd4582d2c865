//! What a short-lived process (`leasehold run`) pays on the SQLite store:
//! its first acquire is one transaction (the epoch read at opening is
//! used), and a closing connection leaves a small WAL for the next process
//! (no checkpoint, whose two fsyncs and the WAL's re-creation were most of
//! a short run's disk writes), checkpoints one that has grown, and a WAL
//! left beside a deleted database never brings old tokens back.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use leasehold::sqlite::SqliteBackend;
use leasehold::{
    AcquireOutcome, AcquireRequest, Backend, Capabilities, HolderInfo, Key, KeyInfo, Lease,
    LockOptions, Result, Store, StoreEpoch,
};

fn wal(db: &Path) -> PathBuf {
    PathBuf::from(format!("{}-wal", db.display()))
}

/// One acquire and release of `key`; its token.
async fn cycle(store: &Store, key: &str) -> u64 {
    let guard = store
        .lock_with(key, LockOptions::new().ttl(Duration::from_secs(5)))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    token
}

#[tokio::test]
async fn a_closed_store_leaves_a_small_wal_for_the_next_process() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let store = Store::new(SqliteBackend::open(&db).unwrap());
    let first = cycle(&store, "job").await;
    drop(store);
    let kept = std::fs::metadata(wal(&db)).map(|m| m.len()).unwrap_or(0);
    assert!(kept > 0, "closing checkpointed and deleted the WAL");

    let store = Store::new(SqliteBackend::open(&db).unwrap());
    assert!(cycle(&store, "job").await > first, "the kept WAL was read");
}

#[tokio::test]
async fn a_closed_store_checkpoints_a_wal_that_has_grown() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let store = Store::new(SqliteBackend::open(&db).unwrap());
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

    let store = Store::new(SqliteBackend::open(&db).unwrap());
    for (i, token) in tokens.iter().enumerate() {
        assert!(cycle(&store, &format!("job-{i}")).await > *token);
    }
}

#[tokio::test]
async fn a_database_deleted_beside_its_kept_wal_gives_greater_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let store = Store::new(SqliteBackend::open(&db).unwrap());
    let old = cycle(&store, "job").await;
    drop(store);
    assert!(wal(&db).exists());

    // A cleanup that removes the database file only.
    std::fs::remove_file(&db).unwrap();
    let store = Store::new(SqliteBackend::open(&db).unwrap());
    let new = cycle(&store, "job").await;
    assert!(
        new > old,
        "token {new} after {old}: the old WAL was replayed or ignored unsafely"
    );
}

/// The SQLite backend, counting acquire attempts.
#[derive(Debug)]
struct Counted {
    inner: SqliteBackend,
    attempts: AtomicU32,
}

#[async_trait]
impl Backend for Counted {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.inner.try_acquire(req).await
    }
    async fn renew(&self, lease: &Lease) -> Result<()> {
        self.inner.renew(lease).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        self.inner.release(lease).await
    }
    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        self.inner.inspect(key).await
    }
    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        self.inner.break_lease(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        self.inner.list(prefix).await
    }
    fn epoch_at_open(&self) -> Option<StoreEpoch> {
        self.inner.epoch_at_open()
    }
}

#[tokio::test]
async fn a_new_processes_first_acquire_is_one_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    for process in 0..2 {
        let backend = std::sync::Arc::new(Counted {
            inner: SqliteBackend::open(&db).unwrap(),
            attempts: AtomicU32::new(0),
        });
        let store = Store::from_backend(backend.clone());
        cycle(&store, "job").await;
        assert_eq!(
            backend.attempts.load(Ordering::SeqCst),
            1,
            "process {process} sent an attempt only to learn the epoch"
        );
    }
}
