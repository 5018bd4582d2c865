//! Protocol versions on the SQLite store (see `leasehold::backend::protocol`):
//! a store whose epoch row names a protocol this build does not speak is
//! refused, by a process opening it and by one that had it open, before
//! anything is written. The other stores: `scripts/compat.sh`, with the
//! previous release's binary.

use leasehold::backend::protocol::PROTOCOL;
use leasehold::{Creation, Error, Store};

fn dump(path: &std::path::Path) -> Vec<String> {
    let db = rusqlite::Connection::open(path).unwrap();
    let mut out = Vec::new();
    for table in ["leasehold_store", "leasehold_leases"] {
        let mut st = db.prepare(&format!("SELECT * FROM {table}")).unwrap();
        let n = st.column_count();
        let rows = st
            .query_map([], |r| {
                (0..n)
                    .map(|i| {
                        r.get::<_, rusqlite::types::Value>(i)
                            .map(|v| format!("{v:?}"))
                    })
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .unwrap();
        out.extend(rows.map(|r| r.unwrap().join(",")));
    }
    out
}

fn set_protocol(path: &std::path::Path, protocol: i64) {
    let db = rusqlite::Connection::open(path).unwrap();
    db.execute("UPDATE leasehold_store SET protocol = ?1", [protocol])
        .unwrap();
}

fn assert_refused(err: Error, found: &str) {
    match &err {
        Error::UnsupportedProtocol {
            backend: "sqlite",
            found: f,
            supported,
            ..
        } if f == found && *supported == PROTOCOL => {}
        other => panic!("expected a refusal of protocol {found}, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains(&format!("protocol {found},"))
            && text.contains(&format!("speaks protocol {PROTOCOL} and older"))
            && text.contains(&format!("a leasehold that speaks protocol {found}")),
        "{text}"
    );
}

#[tokio::test]
async fn a_store_records_this_protocol_and_refuses_a_newer_one_writing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let url = format!("sqlite:{}", path.display());
    let store = Store::open_with(&url, Creation::NewProven).unwrap();
    store
        .lock("k")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let protocol: Option<i64> = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT protocol FROM leasehold_store", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        protocol,
        Some(PROTOCOL as i64),
        "the new epoch row records it"
    );

    set_protocol(&path, PROTOCOL as i64 + 1);
    let before = dump(&path);
    let future = (PROTOCOL + 1).to_string();
    // A process that had the store open: its next attempt, on a key it
    // held and on a new one.
    for key in ["k", "new-key"] {
        let err = store.lock(key).unwrap().try_acquire().await.unwrap_err();
        assert_refused(err, &future);
    }
    // Processes opening it: to take leases, or only to look.
    assert_refused(Store::open(&url).unwrap_err(), &future);
    assert_refused(
        Store::open_with(&url, Creation::Never).unwrap_err(),
        &future,
    );
    assert_eq!(dump(&path), before, "a refusal wrote nothing");
}

#[tokio::test]
async fn a_row_without_a_protocol_is_protocol_1_and_spoken() {
    // A store of a build from before protocol versions: no column at all.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let url = format!("sqlite:{}", path.display());
    let store = Store::open_with(&url, Creation::NewProven).unwrap();
    let first = store.lock("k").unwrap().try_acquire().await.unwrap();
    let token = first.fencing_token();
    first.release().await.unwrap();
    drop(store);
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute_batch("ALTER TABLE leasehold_store DROP COLUMN protocol")
        .unwrap();
    drop(db);
    let store = Store::open(&url).unwrap();
    let again = store.lock("k").unwrap().try_acquire().await.unwrap();
    assert!(again.fencing_token() > token);
    again.release().await.unwrap();
}
