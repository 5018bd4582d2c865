//! The PostgreSQL backend's own tests against a real server: connection
//! loss, a restored table, expiry by the server's clock, and secrets kept
//! out of messages. (Server restarts: `restart.rs`, on a private server.)

mod common;

use std::time::Duration;

use common::Postgres;
use leasehold_postgres::PostgresBackendBuilder;
use leasehold_test_servers::suite::{self, RestoreTold, ServerExpiry};

/// Every connection of the pool killed by the server (an administrator's
/// `pg_terminate_backend`, a pooler or proxy restart): the holder's next
/// renewals reconnect, it keeps its lease past its TTL, and nobody else
/// gets it meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_survives_its_connections_being_killed() {
    if !common::available() {
        return;
    }
    let app = format!(
        "lh_conn_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let url = format!(
        "{}&application_name={app}",
        common::url_for(common::table())
    );
    let backend = PostgresBackendBuilder::from_url(&url)
        .unwrap()
        .build()
        .await
        .unwrap();
    common::settled(&backend).await;
    let store = leasehold_testkit::test_store(backend);
    let other = leasehold_testkit::test_store(common::backend().await.unwrap());
    suite::holder_survives_lost_connections(store, other, Duration::from_secs(2), 1, || async {
        let killed = common::query_i64(&format!(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{app}') k"
        ))
        .await;
        assert!(killed >= 1, "no connection of the holder was killed");
    })
    .await;
}

/// A release commits without waiting for its WAL flush (its transaction's
/// `synchronous_commit` is off: a lost release only holds the key to its
/// expiry), and only it: the setting ends with the release's transaction,
/// so the next statement on the same connection (say a grant, which must
/// be durable) commits synchronously again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_commits_without_a_flush_and_only_itself() {
    let Some(backend) = common::backend().await else {
        return;
    };
    let (_, release) = backend.acquire_release_sql();
    let mut client = common::admin().await;
    let show = "SHOW synchronous_commit";
    let before: String = client.query_one(show, &[]).await.unwrap().get(0);
    assert_ne!(before, "off", "the server's own setting");
    let tx = client.transaction().await.unwrap();
    tx.query(release, &[&"no-such-key", &"no-such-lease"])
        .await
        .unwrap();
    let during: String = tx.query_one(show, &[]).await.unwrap().get(0);
    assert_eq!(during, "off", "in the release's transaction");
    tx.commit().await.unwrap();
    // As the backend sends it: a transaction of its own.
    client
        .query(release, &[&"no-such-key", &"no-such-lease"])
        .await
        .unwrap();
    let after: String = client.query_one(show, &[]).await.unwrap().get(0);
    assert_eq!(after, before, "the next statement's");
}

/// Expiry is decided by the server's clock alone: a lease whose
/// `expires_at` the server finds past is free at once, whatever the TTL the
/// client asked for; one the server finds in the future stays held past
/// its TTL by any client's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_is_decided_by_the_server_clock() {
    let Some(a) = common::backend().await else {
        return;
    };
    let b = common::backend().await.unwrap();
    let t = common::table();
    suite::expiry_is_decided_by_the_server_clock(a, b, |key, when| {
        let stamp = match when {
            ServerExpiry::JustPast => "clock_timestamp() - interval '1 millisecond'",
            ServerExpiry::InAnHour => "clock_timestamp() + interval '1 hour'",
        };
        async move {
            common::sql(&format!(
                "UPDATE {t} SET expires_at = {stamp} WHERE key = '{key}'"
            ))
            .await
        }
    })
    .await;
}

/// A table restored from a dump (here: copied into a new table that takes
/// the old one's name, as `pg_restore` does) is a new store: the holder of
/// the old table is told lost at its next renewal, nothing is granted on the
/// restored rows before the quarantine, and the next token is above every
/// earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restored_table_starts_a_new_epoch() {
    if !common::available() {
        return;
    }
    let table = common::unique_table();
    let restore = || async {
        common::sql(&format!(
            "BEGIN; CREATE TABLE {table}_copy AS SELECT * FROM {table}; DROP TABLE {table};
             ALTER TABLE {table}_copy RENAME TO {table}; ALTER TABLE {table} ADD PRIMARY KEY (key); COMMIT;"
        ))
        .await
    };
    suite::restored_table_starts_a_new_epoch::<Postgres, _>(
        &table,
        restore,
        RestoreTold::AtItsRenewal,
    )
    .await;
}

/// The password shows nowhere: not in the builder's or the backend's
/// `Debug`, not in the error of a refused login, not in URL errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_is_never_printed() {
    let Some(backend) = common::backend().await else {
        return;
    };
    let url = common::url_for(common::table());
    let (err, _) =
        suite::password_is_never_printed::<Postgres>(&backend, &url, "&sslmode=nope").await;
    let shown = format!("{err} {err:?}");
    assert!(
        shown.contains("password") || shown.contains("auth"),
        "{shown}"
    );
}

/// `unlogged=on` makes a new table UNLOGGED, and a URL that asks for the
/// other kind than the table is refused with a message saying how to
/// change the table; without the parameter, a table of either kind is used
/// as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlogged_makes_a_new_table_unlogged_and_a_mismatch_is_refused() {
    if !common::available() {
        return;
    }
    let table = common::unique_table();
    let open = |params: &str| {
        PostgresBackendBuilder::from_url(&format!("{}{params}", common::url_for(&table)))
            .unwrap()
            .build()
    };
    let unlogged_sql = format!(
        "SELECT (relpersistence = 'u')::int::bigint FROM pg_class WHERE oid = '{table}'::regclass"
    );
    let unlogged = || common::query_i64(&unlogged_sql);
    open("&unlogged=on").await.unwrap();
    assert_eq!(unlogged().await, 1, "unlogged=on made a logged table");
    let err = open("&unlogged=off").await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("ALTER TABLE {table} SET LOGGED")),
        "{err}"
    );
    open("").await.unwrap();

    common::sql(&format!("ALTER TABLE {table} SET LOGGED")).await;
    let err = open("&unlogged=on").await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("ALTER TABLE {table} SET UNLOGGED")),
        "{err}"
    );
    open("&unlogged=off").await.unwrap();
    open("").await.unwrap();
    assert_eq!(unlogged().await, 0);
    common::sql(&format!("DROP TABLE {table}")).await;
}
