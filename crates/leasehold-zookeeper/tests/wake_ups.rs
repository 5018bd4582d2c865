//! Wake-ups across processes: a waiter of another backend (its own
//! session and watch, as another machine would have) is woken by a
//! release through the persistent recursive watch on the store's root,
//! long before its next poll; with wake-ups off it is not.

mod common;

use leasehold_test_servers::store::ServerStore;

leasehold_testkit::wake_up_tests!(common::Zk::wake_up_stores);
