//! Wake-ups across processes: a waiter of another store (its own gRPC
//! channel and watch, as another machine would have) is woken by a
//! release through an etcd watch on the holder keys, long before its next
//! poll; with wake-ups off it is not.

mod common;

use leasehold_test_servers::store::ServerStore;

leasehold_testkit::wake_up_tests!(common::Etcd::wake_up_stores);
