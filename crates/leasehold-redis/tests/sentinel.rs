//! The Redis store through Sentinel (`redis+sentinel://`), on a real
//! primary, replica and three sentinels (`scripts/redis-sentinel.sh`): the
//! conformance suite unchanged, wake-ups, and failovers that keep the
//! holder's grant. (A failover that lost it: `backend.rs`,
//! `failover_to_a_lagging_replica_starts_a_new_epoch`; the store's
//! failovers run one at a time, in `sentinel_failover.rs`.)

mod common;

use leasehold_test_servers::store::ServerStore;

async fn store() -> Option<leasehold::Store> {
    Some(leasehold_testkit::test_store(
        common::sentinel::backend().await?,
    ))
}

leasehold_testkit::conformance_tests!(store);

leasehold_testkit::wake_up_tests!(common::RedisSentinel::wake_up_stores);
