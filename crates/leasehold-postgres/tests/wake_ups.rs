//! Wake-ups across processes: a waiter of another store (its own pool and
//! LISTEN connection, as another machine would have) is woken by a release
//! through NOTIFY, long before its next poll; with wake-ups off it is not.

mod common;

use leasehold_test_servers::store::ServerStore;

leasehold_testkit::wake_up_tests!(common::Postgres::wake_up_stores);
