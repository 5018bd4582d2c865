//! Wake-ups across processes: a waiter of another backend (its own
//! connections and subscription, as another machine would have) is woken
//! by a release through pub/sub, long before its next poll; with wake-ups
//! off it is not.

mod common;

use leasehold_test_servers::store::ServerStore;

leasehold_testkit::wake_up_tests!(common::Redis::wake_up_stores);
