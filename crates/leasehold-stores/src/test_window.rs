//! The confirmation window of this repository's tests of the programs that
//! open stores here (the `leasehold` command, the torture harness): only
//! with the cargo feature `test-window`, which no build that anyone runs
//! has (`leasehold-cli` turns it on as a dev-dependency, for the binary its
//! tests run; `scripts/torture.sh` passes it for its builds). Without the
//! feature, [`apply_test_window`] returns the store as it is, and nothing
//! here reads the environment.
//!
//! With it, a store opened here (or given to [`apply_test_window`]) uses the
//! window `LEASEHOLD_TEST_CONFIRMATION_WINDOW` gives in seconds, or, without
//! the variable, its backend's max TTL, as the tests' own stores do
//! (`leasehold-testkit`): a test that creates a store or loses its data
//! then waits seconds, not a minute, for its quarantine. Every process of
//! a test must use the same window (see
//! [`StoreBuilder::confirmation_window`](leasehold::StoreBuilder::confirmation_window)).

use leasehold::Store;

/// The variable that gives a test build's confirmation window, in seconds.
#[cfg(feature = "test-window")]
const VAR: &str = "LEASEHOLD_TEST_CONFIRMATION_WINDOW";

/// `store` with the tests' confirmation window in a build with the
/// `test-window` feature (see the module docs); `store` as it is otherwise.
#[doc(hidden)]
pub fn apply_test_window(store: Store) -> Store {
    #[cfg(feature = "test-window")]
    {
        // A value that is not a number of seconds is ignored, not a panic.
        let window = std::env::var(VAR)
            .ok()
            .and_then(|secs| std::time::Duration::try_from_secs_f64(secs.parse().ok()?).ok())
            .unwrap_or_else(|| store.backend().capabilities().max_ttl);
        Store::builder(store.backend().clone())
            .clock(store.clock().clone())
            .confirmation_window(window)
            .build()
    }
    #[cfg(not(feature = "test-window"))]
    {
        store
    }
}
