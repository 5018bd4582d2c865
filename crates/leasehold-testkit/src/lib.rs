//! The conformance suite every [`leasehold`] backend passes
//! unchanged, and the assertions the stores' builder tests share: test
//! code kept out of the `leasehold` crate that programs depend on.
//!
//! # Running the suite on a backend of your own
//!
//! A backend implements [`leasehold::backend::Backend`] (its module docs
//! are the contract). Add this crate and tokio as dev-dependencies:
//!
//! ```toml
//! [dev-dependencies]
//! leasehold-testkit = "0.1"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! and write a test file, `tests/conformance.rs`, with a factory that
//! gives a [`Store`](leasehold::Store) over your backend (or `None`, after
//! [`conformance::skip`], when its server is not there) and one macro call:
//!
//! ```ignore
//! async fn store() -> Option<leasehold::Store> {
//!     let Ok(url) = std::env::var("MY_STORE_TEST_URL") else {
//!         return leasehold_testkit::conformance::skip("mystore", "MY_STORE_TEST_URL is not set");
//!     };
//!     let backend = my_store::MyBackend::open(&url).await.unwrap();
//!     Some(leasehold_testkit::test_store(backend))
//! }
//!
//! // One #[tokio::test] per conformance test (`cargo test --test conformance`).
//! leasehold_testkit::conformance_tests!(store);
//! ```
//!
//! With `lose = path`, an `async fn(Store)` that destroys the store's data
//! the way it can be lost (a table dropped, a file deleted), the store-loss
//! tests run too: `conformance_tests!(store, lose = lose_data)`. A backend
//! that wakes other processes' waiters on a release
//! ([`Backend::watch_release`](leasehold::backend::Backend::watch_release))
//! runs [`wake_up_tests!`] as well.
//!
//! Give the suite a store of its own (a fresh table, prefix or file per
//! test run): keys are unique per test, but the store-loss tests destroy
//! all of it. Make it with [`test_store`] (or [`with_test_window`] for a
//! store opened by URL): its confirmation window is the backend's max TTL,
//! so a new store's quarantine lasts seconds, not the minute a program's
//! store waits (see [`window`]). Open the backend with a short max TTL (a
//! few seconds) for the same reason. `LEASEHOLD_REQUIRE_EMULATORS=1` makes
//! [`conformance::skip`] fail the test instead of skipping it, for CI.
//!
//! A backend is done when the whole suite passes against a real server,
//! unchanged.
//!
//! # Features
//!
//! `sqlite` (default): [`conformance::sqlite_dump`], for tests of the
//! SQLite store.

#![warn(missing_docs)]

pub mod builders;
pub mod conformance;
pub mod window;

pub use window::{test_store, test_store_from, test_window, with_test_window};
