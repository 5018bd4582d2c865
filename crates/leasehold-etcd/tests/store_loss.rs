//! The conformance suite's store-loss test on etcd: every key of the
//! store's prefix deleted under a live holder with a waiter (on a prefix of
//! its own, so that the other tests' store stays).

mod common;

async fn store() -> Option<leasehold::Store> {
    Some(leasehold::Store::new(common::backend().await?))
}

/// Store loss as it happens on etcd: the prefix deleted (an operator's
/// `etcdctl del --prefix`, or a restore without it). The holders' etcd
/// leases survive it: only their keys go.
async fn lose(_store: leasehold::Store) {
    common::etcdctl(&["del", "--prefix", common::prefix()]).await;
}

leasehold::conformance_tests!(@lose store, lose; store_loss_stops_holder_before_next_grant);
