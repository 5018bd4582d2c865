//! What opening a `sqlite:` URL may do, and what it refuses (issue 49): a
//! missing directory is not made (but the default file's); another
//! application's database is not taken over unless asked; a max TTL the
//! store does not have is said to be ignored, and a TTL above the store's
//! says how to raise it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::sqlite::SqliteBackend;
use leasehold::{Error, LockOptions, Store};

#[test]
fn a_missing_directory_is_an_error_naming_it_and_is_not_made() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo").join("deeper");
    let url = format!("sqlite:{}", typo.join("x.db").display());
    let err = Store::open(&url).unwrap_err();
    leasehold_testkit::conformance::assert_invalid_input(&err, "store URL");
    let text = err.to_string();
    assert!(
        text.contains(&format!("the directory {} ", typo.display()))
            && text.contains("does not exist"),
        "{text}"
    );
    assert!(!dir.path().join("typo").exists(), "the directory was made");
    // The backend alone too.
    let err = SqliteBackend::open(typo.join("x.db")).unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert!(!dir.path().join("typo").exists());
    // A parent that is a file says so.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let err = Store::open(&format!("sqlite:{}/x.db", file.display())).unwrap_err();
    assert!(
        err.to_string().contains("is a file, not a directory"),
        "{err}"
    );
    // An existing directory is fine.
    Store::open(&format!("sqlite:{}", dir.path().join("x.db").display())).unwrap();
}

#[test]
fn a_tilde_path_is_refused_and_nothing_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let before = std::env::current_dir().unwrap();
    let err = Store::open("sqlite:~/leasehold-test-x.db").unwrap_err();
    assert!(err.to_string().contains("`~` is not expanded"), "{err}");
    assert!(err.to_string().contains("$HOME"), "{err}");
    assert!(!before.join("~").exists());
    drop(dir);
}

/// Another application's database, with tables of its own.
fn foreign_db(path: &std::path::Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);
         INSERT INTO users (name) VALUES ('ann');",
    )
    .unwrap();
}

fn journal_mode(path: &std::path::Path) -> String {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap()
}

fn tables(path: &std::path::Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut st = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap();
    let names = st
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<Vec<String>>>()
        .unwrap();
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn another_applications_database_is_refused_unless_shared_on_purpose() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    foreign_db(&path);
    let url = format!("sqlite:{}", path.display());
    let err = Store::open(&url).unwrap_err();
    leasehold_testkit::conformance::assert_invalid_input(&err, "store URL");
    let text = err.to_string();
    assert!(
        text.contains("another application's")
            && text.contains("\"users\"")
            && text.contains("?shared_file=yes"),
        "{text}"
    );
    assert_eq!(tables(&path), ["users"], "leasehold wrote its tables");
    assert_eq!(journal_mode(&path), "delete", "switched to WAL");

    // Asked for: shared.
    let store = Store::open(&format!("{url}?shared_file=yes")).unwrap();
    let guard = store.lock("k").unwrap().try_acquire().await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(
        tables(&path),
        ["leasehold_leases", "leasehold_store", "users"]
    );
    // Shared once, it is a store: opened without the parameter too.
    Store::open(&url).unwrap();
    // The builder's setting.
    let other = dir.path().join("other.db");
    foreign_db(&other);
    assert!(SqliteBackend::open(&other).is_err());
    SqliteBackend::builder(&other)
        .shared_file(true)
        .build()
        .unwrap();
    // An empty file is no other application's.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    Store::open(&format!("sqlite:{}", empty.display())).unwrap();
}

/// Collects the messages of warnings logged through `tracing`.
#[derive(Default, Clone)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl tracing::Subscriber for Warnings {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        *m.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message<'a>(&'a mut String);
        impl tracing::field::Visit for Message<'_> {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    *self.0 = format!("{value:?}");
                }
            }
        }
        let mut text = String::new();
        event.record(&mut Message(&mut text));
        self.0.lock().unwrap().push(text);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn a_max_ttl_the_store_does_not_have_is_said_to_be_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("m.db").display());
    Store::open(&url).unwrap();
    let warnings = Warnings::default();
    let store = tracing::subscriber::with_default(warnings.clone(), || {
        Store::open(&format!("{url}?max_ttl=5m")).unwrap()
    });
    let seen = warnings.0.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|w| w.contains("keeps the max TTL it was created with, 60s")
                && w.contains("300s asked for is ignored")
                && w.contains("Raising the max TTL")),
        "{seen:?}"
    );
    // What the store has is there to see.
    assert_eq!(
        store.backend().capabilities().max_ttl,
        Duration::from_secs(60)
    );
    // The same max TTL again, or none: no word.
    let quiet = Warnings::default();
    tracing::subscriber::with_default(quiet.clone(), || {
        Store::open(&format!("{url}?max_ttl=60s")).unwrap();
        Store::open(&url).unwrap();
    });
    assert!(
        quiet.0.lock().unwrap().is_empty(),
        "{:?}",
        quiet.0.lock().unwrap()
    );

    // A TTL above the store's max says how to raise it.
    let err = store
        .lock_with("k", LockOptions::new().ttl(Duration::from_secs(300)))
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("set when the store is created") && text.contains("Raising the max TTL"),
        "{text}"
    );
}

#[test]
fn the_holders_file_and_files_that_are_no_database_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = Store::open(&format!(
        "sqlite:{}",
        dir.path().join(".leasehold-holders").display()
    ))
    .unwrap_err();
    assert!(err.to_string().contains("holders file"), "{err}");
    let text = dir.path().join("notes.db");
    std::fs::write(&text, "not a database, but my notes\n").unwrap();
    let err = Store::open(&format!("sqlite:{}", text.display())).unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { .. })
            && err.to_string().contains("is not a SQLite database"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&text).unwrap(),
        "not a database, but my notes\n"
    );
}
