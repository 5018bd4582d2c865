//! The shared conformance suite, unchanged, on an S3 emulator (moto): a
//! store of its own (a prefix in the test bucket) per test, and store loss
//! as that store's objects deleted (`aws s3 rm --recursive`).

mod common;

use std::sync::{Arc, Mutex};

use leasehold::{backend::Backend, Store};

/// The prefixes of the stores made here, by the address of the store's
/// backend.
static PREFIXES: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());

fn address(backend: &Arc<dyn Backend>) -> usize {
    Arc::as_ptr(backend) as *const () as usize
}

async fn store() -> Option<Store> {
    if !common::available() {
        return None;
    }
    let prefix = common::unique_prefix();
    let store = leasehold_testkit::test_store(common::fresh_backend(&prefix).await);
    PREFIXES
        .lock()
        .unwrap()
        .push((address(store.backend()), prefix));
    Some(store)
}

/// Deletes every object of the test's store.
async fn lose(store: Store) {
    let prefix = PREFIXES
        .lock()
        .unwrap()
        .iter()
        // The newest first: a finished test's address may be reused.
        .rev()
        .find(|(a, _)| *a == address(store.backend()))
        .expect("a store made by store()")
        .1
        .clone();
    common::delete_store(&common::client().await, common::BUCKET, &prefix).await;
}

leasehold_testkit::conformance_tests!(store, lose = lose);
