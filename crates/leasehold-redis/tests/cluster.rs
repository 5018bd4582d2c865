//! The Redis store on a Redis Cluster (`redis+cluster://`), on a real
//! cluster of three primaries with a replica each
//! (`scripts/redis-cluster.sh`): the conformance suite unchanged, and
//! wake-ups. (Failovers: `cluster_failover.rs`.)

mod common;

use leasehold_test_servers::store::ServerStore;

async fn store() -> Option<leasehold::Store> {
    Some(leasehold_testkit::test_store(
        common::cluster::backend().await?,
    ))
}

leasehold_testkit::conformance_tests!(store);

leasehold_testkit::wake_up_tests!(common::RedisCluster::wake_up_stores);
