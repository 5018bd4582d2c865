//! Wake-ups across processes: a waiter of another store (its own gRPC channel and
//! watch, as another machine would have) is woken by a release
//! through an etcd watch on the holder keys, long before its next poll; with wake-ups off it is not.

mod common;

use leasehold::Store;

/// A holder, and a waiter over a backend of its own, listening, both past
/// the store's quarantine.
async fn stores(wake_ups: bool) -> Option<(Store, Store)> {
    let holder = common::backend().await?;
    let waiter = common::builder_for(common::prefix())?
        .wake_ups(wake_ups)
        .build()
        .await
        .unwrap();
    waiter.listening().await;
    // The waiter reads the epoch's age in whole seconds, rounded down: just
    // after the holder's quarantine it may see a few milliseconds of it
    // left, and wait them out plus a whole (10 s) poll, not for a wake-up.
    common::settled(&waiter).await;
    Some((Store::new(holder), Store::new(waiter)))
}

leasehold::wake_up_tests!(stores);
