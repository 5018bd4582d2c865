//! The conformance suite's store-loss tests on MySQL/MariaDB: the table
//! dropped under a live holder (on a table of its own, so that the other
//! tests' table stays).

mod common;

use common::Mysql;
use leasehold_test_servers::store::ServerStore;

/// Store loss as it happens on MySQL: the table dropped.
async fn lose(_store: leasehold::Store) {
    common::sql(&format!("DROP TABLE {}", common::table())).await;
}

leasehold_testkit::conformance_tests!(@lose common::store, lose; store_loss_stops_holder_before_next_grant);

/// A holder of a 30-minute lease on a table opened with `?max_ttl=30m`;
/// the table dropped; a process with the default max TTL re-creates it: it
/// is not granted the key while the holder can still believe it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_quarantine_outlasts_a_longer_holder() {
    if !common::available() {
        return;
    }
    let table = common::unique_table();
    let drop_table = format!("DROP TABLE {table}");
    leasehold_testkit::conformance::store_loss_quarantine_outlasts_every_holder(
        Mysql::open(&table, "&max_ttl=30m").await,
        || common::sql(&drop_table),
        || Mysql::open(&table, ""),
    )
    .await;
    common::sql(&drop_table).await;
}

/// The table dropped at once after the first grant, within the second its
/// store was created in, and created again at once: the new store's tokens
/// are above the lost one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_recreated_at_once_issues_greater_tokens() {
    if !common::available() {
        return;
    }
    let table = common::unique_table();
    let drop_table = format!("DROP TABLE {table}");
    leasehold_testkit::conformance::store_recreated_at_once_issues_greater_tokens(
        Mysql::open(&table, "").await,
        || common::sql(&drop_table),
        || Mysql::open(&table, ""),
    )
    .await;
    common::sql(&drop_table).await;
}

/// A reader-writer lock's gate reading the other side after a loss of
/// the data (the table dropped, on a store of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rw_lock_a_gate_that_reads_after_a_loss_waits_for_the_other_side() {
    if let Some((store, namespace)) = common::store_of_its_own().await {
        let lose = |_| async move {
            common::sql(&format!("DROP TABLE {namespace}")).await;
        };
        leasehold_testkit::conformance::rw_lock_a_gate_that_reads_after_a_loss_waits_for_the_other_side(
            store, lose,
        )
        .await;
    }
}
