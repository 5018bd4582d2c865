//! Stores for tests, with a confirmation window of their backend's max TTL.
//!
//! A program's stores use [`leasehold::CONFIRMATION_WINDOW`] (60 s): a
//! store epoch new to a process is quarantined that long (see
//! [store epochs](leasehold::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)).
//! A test that creates a store, or loses its data, would wait a minute for
//! every such epoch. The stores made here use the backend's max TTL for the
//! window instead ([`StoreBuilder::confirmation_window`](leasehold::StoreBuilder::confirmation_window)):
//! a test store with a max TTL of a few seconds is out of quarantine in
//! those seconds. That is safe within a test as long as every store of the
//! test has the same window, which stores with the same max TTL have; a
//! test that mixes max TTLs sets the window itself, as the conformance
//! suite's `store_loss_quarantine_outlasts_every_holder` does.

use std::sync::Arc;
use std::time::Duration;

use leasehold::backend::Backend;
use leasehold::Store;

/// The confirmation window of a test store over `backend`: its max TTL.
pub fn test_window(backend: &dyn Backend) -> Duration {
    backend.capabilities().max_ttl
}

/// A store over `backend` with the [test window](test_window).
pub fn test_store(backend: impl Backend) -> Store {
    test_store_from(Arc::new(backend))
}

/// A store over a shared backend with the [test window](test_window).
pub fn test_store_from(backend: Arc<dyn Backend>) -> Store {
    let window = test_window(backend.as_ref());
    Store::builder(backend).confirmation_window(window).build()
}

/// A store over `store`'s backend and clock with the
/// [test window](test_window): for a store opened by URL
/// (`Store::open`, `leasehold_stores::open`). It shares no in-process
/// state with `store`; use it in `store`'s place.
pub fn with_test_window(store: &Store) -> Store {
    let backend = store.backend().clone();
    let window = test_window(backend.as_ref());
    Store::builder(backend)
        .clock(store.clock().clone())
        .confirmation_window(window)
        .build()
}
