//! The conformance suite's store-loss test on etcd: every key of the
//! store's prefix deleted under a live holder with a waiter (on a prefix of
//! its own, so that the other tests' store stays).

mod common;

use common::Etcd;
use leasehold_test_servers::store::ServerStore;

/// Store loss as it happens on etcd: the prefix deleted (an operator's
/// `etcdctl del --prefix`, or a restore without it). The holders' etcd
/// leases survive it: only their keys go.
async fn lose(_store: leasehold::Store) {
    common::etcdctl(&["del", "--prefix", common::prefix()]).await;
}

leasehold_testkit::conformance_tests!(@lose common::store, lose; store_loss_stops_holder_before_next_grant);

/// A holder of a 30-minute lease on a store opened with `?max_ttl=30m`;
/// the prefix deleted; a process with the default max TTL re-creates the
/// store: it is not granted the key while the holder can still believe it
/// holds (issue #28).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_quarantine_outlasts_a_longer_holder() {
    if !common::available() {
        return;
    }
    let prefix = common::unique_prefix();
    leasehold_testkit::conformance::store_loss_quarantine_outlasts_every_holder(
        Etcd::open(&prefix, "&max_ttl=30m").await,
        || async {
            common::etcdctl(&["del", "--prefix", prefix.as_str()]).await;
        },
        || Etcd::open(&prefix, ""),
    )
    .await;
}

/// The prefix deleted at once after the first grant, within the second
/// its store was created in, and the store created again at once: the
/// new store's tokens are above the lost one's (its epoch, the writer's
/// clock in whole seconds, was the same, and the first token repeated).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_recreated_at_once_issues_greater_tokens() {
    if !common::available() {
        return;
    }
    let prefix = common::unique_prefix();
    leasehold_testkit::conformance::store_recreated_at_once_issues_greater_tokens(
        Etcd::open(&prefix, "").await,
        || async {
            common::etcdctl(&["del", "--prefix", prefix.as_str()]).await;
        },
        || Etcd::open(&prefix, ""),
    )
    .await;
}

/// A reader-writer lock's gate reading the other side after a loss of
/// the data (the prefix deleted, on a store of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rw_lock_a_gate_that_reads_after_a_loss_waits_for_the_other_side() {
    if let Some((store, namespace)) = common::store_of_its_own().await {
        let lose = |_| async move {
            common::etcdctl(&["del", "--prefix", &namespace]).await;
        };
        leasehold_testkit::conformance::rw_lock_a_gate_that_reads_after_a_loss_waits_for_the_other_side(
            store, lose,
        )
        .await;
    }
}
