//! What opening a SQLite store may do to it (issue 29): with
//! `Creation::Never` nothing is created or written, not even the epoch row
//! of a file that was replaced; with `Creation::NewProven` a new file's
//! epoch is settled at once even where the directory lock cannot prove it.

use std::path::Path;
use std::time::Duration;

use leasehold::sqlite::SqliteBackend;
use leasehold::{
    backend::{Backend, DEFAULT_STORE_MAX_TTL},
    Creation, Error,
};
use leasehold_testkit::conformance::{sqlite_dump as dump, take};

fn open(path: &Path, creation: Creation) -> leasehold::Result<SqliteBackend> {
    SqliteBackend::open_with(path, DEFAULT_STORE_MAX_TTL, creation)
}

#[tokio::test(flavor = "multi_thread")]
async fn looking_creates_nothing_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("sub").join("leases.db");
    let err = open(&missing, Creation::Never).unwrap_err();
    assert!(matches!(err, Error::NoStore { .. }), "{err}");
    assert!(
        !dir.path().join("sub").exists(),
        "the directory was created"
    );

    // A file that is no store (no leasehold tables) stays as it is.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let err = open(&empty, Creation::Never).unwrap_err();
    assert!(matches!(err, Error::NoStore { .. }), "{err}");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);

    // A store with a held lease, then replaced by a copy of itself (a
    // restored backup): the epoch row names the old file. A look reads
    // it and leaves it; taking a lease would start a new epoch.
    let path = dir.path().join("leases.db");
    let store = leasehold_testkit::test_store(open(&path, Creation::IfMissing).unwrap());
    let guard = store.lock("k").unwrap().try_acquire().await.unwrap();
    // Everything into the file first, so that the copy has it all (and the
    // WAL left beside it holds nothing for the old file).
    rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let copy = dir.path().join("copy.db");
    std::fs::copy(&path, &copy).unwrap();
    std::fs::rename(&copy, &path).unwrap();
    let before = dump(&path);
    let look = leasehold_testkit::test_store(open(&path, Creation::Never).unwrap());
    let info = look.inspect("k").await.unwrap();
    assert!(info.fencing_token > 0, "{info:?}");
    assert_eq!(look.list("").await.unwrap().len(), 1);
    assert_eq!(dump(&path), before, "looking wrote to the store");
    drop(guard);
    drop(store);
    let lease = leasehold_testkit::test_store(open(&path, Creation::IfMissing).unwrap());
    assert_ne!(dump(&path), before, "opening to lease renews the epoch");
    drop(lease);
}

/// A file whose creator has committed leasehold's tables but not yet its
/// epoch row (or whose creation was cut short) is no store to a look: a
/// look there once named an epoch that never came to be (the creator's
/// was another), and `init --new` was refused for a store that did not
/// exist yet. The file is left as it is; creating goes on from it.
#[test]
fn tables_without_an_epoch_row_or_a_lease_are_no_store_yet() {
    no_store_yet(&["leasehold_leases", "leasehold_store"]);
}

/// A file with leasehold's lease table and no store table is no store to
/// a look either: a creator's `CREATE TABLE` statements each committed on
/// their own, and a look between the two failed with "no such table:
/// leasehold_store" (seen in CI, with `init` run by eight processes at
/// once). A file a build of then left so, cut short, is such a file still;
/// creating goes on from it.
#[test]
fn a_lease_table_without_the_store_table_is_no_store_yet() {
    no_store_yet(&["leasehold_leases"]);
}

/// Makes a file with `tables` of a made store and nothing else (what a
/// creator commits first), then: a look is `NoStore` and writes nothing,
/// and opening to lease creates the store from there, and says so.
fn no_store_yet(tables: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("half.db");
    {
        let made = dir.path().join("made.db");
        drop(open(&made, Creation::IfMissing).unwrap());
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("ATTACH DATABASE ?1 AS made", [made.to_str().unwrap()])
            .unwrap();
        let schema: Vec<String> = tables
            .iter()
            .map(|table| {
                conn.query_row(
                    "SELECT sql FROM made.sqlite_schema WHERE type = 'table' AND name = ?1",
                    [table],
                    |r| r.get(0),
                )
                .unwrap()
            })
            .collect();
        conn.execute("DETACH DATABASE made", []).unwrap();
        for sql in schema {
            conn.execute(&sql, []).unwrap();
        }
    }
    let before = dump(&path);
    let err = open(&path, Creation::Never).unwrap_err();
    assert!(matches!(err, Error::NoStore { .. }), "{err}");
    assert!(err.to_string().contains("no store epoch yet"), "{err}");
    assert_eq!(dump(&path), before, "looking wrote to the file");
    let created = open(&path, Creation::IfMissing).unwrap();
    assert_eq!(created.created_at_open(), Some(true));
    drop(created);
    let look = open(&path, Creation::Never).unwrap();
    assert_eq!(look.created_at_open(), Some(false));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_file_created_proven_is_settled_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // A holder in the directory, and the directory's holders file gone
    // (made again, it proves nothing until the directory is free): the
    // locks cannot prove a new file safe.
    let holder = leasehold_testkit::test_store(
        open(&dir.path().join("other.db"), Creation::IfMissing).unwrap(),
    );
    let guard = holder.lock("h").unwrap().try_acquire().await.unwrap();
    std::fs::remove_file(dir.path().join(".leasehold-holders")).unwrap();

    let plain = open(&dir.path().join("plain.db"), Creation::IfMissing).unwrap();
    let epoch = plain.epoch_at_open().unwrap();
    assert!(!epoch.is_proven(), "{epoch:?}");
    assert!(epoch.age.unwrap() < Duration::from_secs(10), "{epoch:?}");

    let stated = open(&dir.path().join("stated.db"), Creation::NewProven).unwrap();
    let epoch = stated.epoch_at_open().unwrap();
    assert!(epoch.is_proven(), "{epoch:?}");
    // Every later process sees it proven, and grants at once.
    let again = leasehold_testkit::test_store(
        open(&dir.path().join("stated.db"), Creation::IfMissing).unwrap(),
    );
    assert!(again.backend().epoch_at_open().unwrap().is_proven());
    let granted = again.lock("k").unwrap().try_acquire().await;
    assert!(granted.is_ok(), "{:?}", granted.err());
    drop(guard);
}

/// The statement is about the store as opened: a file created again
/// later under the same backend (the first one deleted) is quarantined.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_created_again_later_is_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let holder = leasehold_testkit::test_store(
        open(&dir.path().join("other.db"), Creation::IfMissing).unwrap(),
    );
    let guard = holder.lock("h").unwrap().try_acquire().await.unwrap();
    let path = dir.path().join("stated.db");
    let stated = leasehold_testkit::test_store(open(&path, Creation::NewProven).unwrap());
    let first = stated.lock("k").unwrap().try_acquire().await.unwrap();
    first.release().await.unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let again = stated.lock("k").unwrap().try_acquire().await;
    assert!(
        matches!(again, Err(Error::Quarantined { .. })),
        "{:?}",
        again.map(|g| g.fencing_token())
    );
    drop(guard);
}

/// A waiter told of a quarantine is granted when it ends, not one poll
/// interval later: the quarantine's end is known to the millisecond, so
/// nothing is gained by polling past it (a process that opens a store
/// seconds before the end of its quarantine, with a long poll interval,
/// would otherwise wait a whole extra interval).
#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_is_granted_when_the_quarantine_ends_not_a_poll_later() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    // A test store: its confirmation window is its max TTL, 2 s.
    let store = leasehold_testkit::test_store(
        SqliteBackend::open_with(&path, Duration::from_secs(2), Creation::IfMissing).unwrap(),
    );
    let opts = leasehold::LockOptions::new().ttl(Duration::from_secs(1));
    take(&store, "k", opts.clone())
        .await
        .release()
        .await
        .unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let poll = Duration::from_secs(30);
    let lock = store
        .lock_with("k", opts.poll_interval(poll, poll))
        .unwrap();
    let mut quarantine = None;
    let started = std::time::Instant::now();
    let guard = lock
        .acquire_reporting(Duration::from_secs(120), |reason| {
            if let leasehold::WaitReason::Quarantine { remaining, .. } = reason {
                quarantine.get_or_insert(remaining);
            }
        })
        .await
        .unwrap();
    let waited = started.elapsed();
    let quarantine = quarantine.expect("the store re-created at once is quarantined");
    assert!(
        waited < quarantine + Duration::from_secs(5),
        "granted {waited:?} into the wait for a quarantine of {quarantine:?}: the waiter polled past its end (poll interval {poll:?})"
    );
    guard.release().await.unwrap();
}
