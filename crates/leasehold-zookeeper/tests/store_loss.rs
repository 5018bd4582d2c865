//! The conformance suite's store-loss tests on ZooKeeper: the store's
//! chroot deleted with everything under it (`zkCli.sh deleteall`, as an
//! operator would) under a live holder with a waiter, on a chroot of this
//! test binary's own, so that the other tests' store stays.

mod common;

use common::Zk;
use leasehold_test_servers::store::ServerStore;

/// Store loss as it happens on ZooKeeper: the chroot deleted.
async fn lose(_store: leasehold::Store) {
    common::delete_store(common::chroot()).await;
}

leasehold_testkit::conformance_tests!(@lose common::store, lose; store_loss_stops_holder_before_next_grant);

/// A store that lost its data has no run records (on a store of its own:
/// it deletes its chroot at a time of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_forgets_runs() {
    if let Some((store, chroot)) = common::store_of_its_own().await {
        let lose = |_| async move {
            common::delete_store(&chroot).await;
        };
        leasehold_testkit::conformance::store_loss_forgets_runs(store, lose).await;
    }
}

/// A holder of a 30-minute lease on a store opened with `?max_ttl=30m`;
/// the chroot deleted; a process with the default max TTL re-creates the
/// store: it is not granted the key while the holder can still believe it
/// holds (issue #28).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_quarantine_outlasts_a_longer_holder() {
    if !common::available() {
        return;
    }
    let chroot = common::unique_chroot();
    leasehold_testkit::conformance::store_loss_quarantine_outlasts_every_holder(
        Zk::open(&chroot, "&max_ttl=30m").await,
        || async {
            common::delete_store(&chroot).await;
        },
        || Zk::open(&chroot, ""),
    )
    .await;
}

/// The chroot deleted at once after the first grant (in one transaction,
/// milliseconds after it), and the store created again at once: the new
/// store's tokens are above the lost one's (no grant is made in an epoch
/// before the server's clock has passed its second, so a re-created
/// store's epoch is a later second; without that wait both stores had the
/// same epoch and the same first token).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_recreated_at_once_issues_greater_tokens() {
    if !common::available() {
        return;
    }
    let chroot = common::unique_chroot();
    leasehold_testkit::conformance::store_recreated_at_once_issues_greater_tokens(
        Zk::open(&chroot, "").await,
        || async {
            common::delete_store_now(&chroot).await;
        },
        || Zk::open(&chroot, ""),
    )
    .await;
}

/// A reader-writer lock's gate reading the other side after a loss of
/// the data (the chroot deleted, on a store of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rw_lock_a_gate_that_reads_after_a_loss_waits_for_the_other_side() {
    if let Some((store, chroot)) = common::store_of_its_own().await {
        let lose = |_| async move {
            common::delete_store(&chroot).await;
        };
        leasehold_testkit::conformance::rw_lock_a_gate_that_reads_after_a_loss_waits_for_the_other_side(
            store, lose,
        )
        .await;
    }
}
