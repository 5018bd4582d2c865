//! The MySQL backend's own tests against a real server: connection loss, a
//! restored table, expiry by the server's clock, secrets kept out of
//! messages, an unreachable server, and many processes' worth of backends
//! creating one table at once. (Server restarts: `restart.rs`, on a
//! private server.)

mod common;

use std::time::Duration;

use common::Mysql;
use leasehold_test_servers::suite::{self, RestoreTold, ServerExpiry};

/// Every connection of the holder's pool killed by the server (an
/// administrator's `KILL`, a proxy restart): the holder's next renewals
/// reconnect, it keeps its lease past its TTL, and nobody else gets it
/// meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_survives_its_connections_being_killed() {
    if !common::available() {
        return;
    }
    // A user of its own, so that its connections can be told apart.
    let user = format!("lh_{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let pw = "killed-conn-pw-3e1";
    common::sql(&format!(
        "CREATE USER '{user}'@'%' IDENTIFIED BY '{pw}'; GRANT ALL ON *.* TO '{user}'@'%'"
    ))
    .await;
    let base = common::url_for(common::table());
    let rest = base.split_once('@').unwrap().1;
    let url = format!("mysql://{user}:{pw}@{rest}");
    let backend = leasehold_mysql::MysqlBackendBuilder::from_url(&url)
        .unwrap()
        .build()
        .await
        .unwrap();
    common::settled(&backend).await;
    let store = leasehold_testkit::test_store(backend);
    let other = leasehold_testkit::test_store(common::backend().await.unwrap());
    let user2 = user.clone();
    suite::holder_survives_lost_connections(store, other, Duration::from_secs(2), 1, move || {
        let user = user2.clone();
        async move {
            let ids = format!(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = '{user}'"
            );
            assert!(
                common::query_i64(&ids).await >= 1,
                "no connection of the holder"
            );
            let mut conn = common::admin().await;
            use leasehold_mysql::mysql_async::prelude::Queryable;
            let list: Vec<u64> = conn
                .query(format!(
                    "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '{user}'"
                ))
                .await
                .unwrap();
            for id in list {
                let _ = conn.query_drop(format!("KILL {id}")).await;
            }
        }
    })
    .await;
    common::sql(&format!("DROP USER '{user}'@'%'")).await;
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
            ServerExpiry::JustPast => "UTC_TIMESTAMP(6) - INTERVAL 1000 MICROSECOND",
            ServerExpiry::InAnHour => "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR",
        };
        async move {
            common::sql(&format!(
                "UPDATE {t} SET expires_at = {stamp} WHERE k = '{key}'"
            ))
            .await
        }
    })
    .await;
}

/// A table restored from a dump (here: copied into a new table that takes
/// the old one's name, as loading a `mysqldump` does, a second after the
/// table's creation: its `CREATE_TIME` counts whole seconds) is a new
/// store: the holder is told lost once the next acquirer starts a new
/// epoch (its renewal does not check the table), nothing is granted on the
/// restored rows before the quarantine, and the next token is above every
/// earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restored_table_starts_a_new_epoch() {
    if !common::available() {
        return;
    }
    let table = common::unique_table();
    let restore = || async {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        common::sql(&format!(
            "CREATE TABLE {table}_copy LIKE {table}; INSERT INTO {table}_copy SELECT * FROM {table};
             DROP TABLE {table}; RENAME TABLE {table}_copy TO {table}"
        ))
        .await;
    };
    suite::restored_table_starts_a_new_epoch::<Mysql, _>(
        &table,
        restore,
        RestoreTold::AfterTheNextAcquire,
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
    let (err, _) = suite::password_is_never_printed::<Mysql>(&backend, &url, "&sslmode=nope").await;
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("Access denied"), "{shown}");
    assert!(
        !err.is_retryable(),
        "a refused login is not worth retrying: {shown}"
    );
}

/// No server at the address: opening fails within the request timeout,
/// retryably.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_fails_retryably() {
    suite::unreachable_server_fails_retryably::<Mysql>(
        |port| format!("mysql://u:p@127.0.0.1:{port}/db"),
        Duration::from_secs(5),
    )
    .await;
}

/// Twenty backends opening one new table at once (as the processes of a
/// fleet's first cron tick after a deploy do): every one opens it, and
/// they agree on its epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_backends_creating_one_table_at_once_agree() {
    if !common::available() {
        return;
    }
    let table = common::unique_table();
    let opens = (0..20).map(|_| {
        let builder = common::builder_for(&table).unwrap();
        tokio::spawn(async move { builder.build().await })
    });
    let mut epochs = Vec::new();
    for open in opens {
        let backend = open.await.unwrap().expect("open");
        epochs.push(backend.epoch().await.unwrap().epoch);
    }
    epochs.dedup();
    assert_eq!(epochs.len(), 1, "{epochs:?}");
    common::sql(&format!("DROP TABLE {table}")).await;
}

/// An acquire frozen between its statements (here: a connection of the
/// backend's own pool left idle inside a transaction that holds the key's
/// row lock) holds the key for seconds only: MariaDB ends the connection
/// (the backend sets `idle_transaction_timeout` on each), and another
/// process is granted the key. Without the setting the lock is held as
/// long as the frozen connection lives, and the wait below runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_frozen_mid_transaction_holds_the_key_for_seconds_only() {
    let Some(a) = common::backend().await else {
        return;
    };
    let key = common::unique_key("frozen");
    let store = leasehold_testkit::test_store(common::backend().await.unwrap());
    let ttl = Duration::from_secs(2);
    // The key's row exists (a grant, released).
    let lock = store.lock_with(&key, suite::quick_polls(ttl)).unwrap();
    lock.try_acquire().await.unwrap().release().await.unwrap();
    let frozen = a.freeze_mid_acquire(&key).await.unwrap();
    let started = std::time::Instant::now();
    let guard = lock
        .acquire_timeout(Duration::from_secs(20))
        .await
        .expect("the frozen transaction still holds the key");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    guard.release().await.unwrap();
    drop(frozen);
}

/// A new epoch's age counts from the end of its transaction, after every
/// lease of the lost data was voided: here the void waits 1.5 s on a row
/// another session has locked (a large table's void takes as long), and
/// the new epoch is no older than a moment when its creator returns. Its
/// age used to count from before the void, while holders whose rows it
/// had not reached yet could still renew: the quarantine could end before
/// such a holder's deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_epochs_age_counts_from_after_the_void() {
    use leasehold_mysql::mysql_async::prelude::Queryable;
    use leasehold_test_servers::store::ServerStore;
    let Some(a) = Mysql::backend_on(&common::unique_table()).await else {
        return;
    };
    let table = a.table().to_string();
    let key = common::unique_key("void");
    let store = leasehold_testkit::test_store(a);
    let guard = store
        .lock_with(&key, suite::quick_polls(Duration::from_secs(2)))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    // Another session holds the lease row's lock for 1.5 s.
    let mut blocker = common::admin().await;
    blocker.query_drop("START TRANSACTION").await.unwrap();
    blocker
        .query_drop(format!(
            "SELECT * FROM {table} WHERE k = '{key}' FOR UPDATE"
        ))
        .await
        .unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        blocker.query_drop("COMMIT").await.unwrap();
    });
    // The epoch row deleted by hand: the next opener starts a new epoch.
    common::sql(&format!("DELETE FROM {table} WHERE k = '#epoch'")).await;
    let b = common::builder_for(&table).unwrap().build().await.unwrap();
    let age = b.epoch().await.unwrap().age.unwrap();
    release.await.unwrap();
    assert!(
        age < Duration::from_millis(500),
        "the new epoch was {age:?} old at once"
    );
    let reason = tokio::time::timeout(Duration::from_secs(4), guard.lost())
        .await
        .expect("the holder was not told lost");
    assert!(
        matches!(reason, leasehold::LossReason::Revoked(_)),
        "{reason:?}"
    );
}
