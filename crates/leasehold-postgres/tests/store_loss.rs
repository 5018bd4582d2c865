//! The conformance suite's store-loss test on PostgreSQL: the table
//! dropped under a live holder (on a table of its own, so that the other
//! tests' table stays).

mod common;

async fn store() -> Option<leasehold::Store> {
    Some(leasehold::Store::new(common::backend().await?))
}

/// Store loss as it happens on PostgreSQL: the table dropped.
async fn lose(_store: leasehold::Store) {
    common::sql(&format!("DROP TABLE {}", common::table())).await;
}

leasehold::conformance_tests!(@lose store, lose; store_loss_stops_holder_before_next_grant);
