//! The conformance suite every backend passes unchanged.
//!
//! Each function takes a [`Store`] over the backend under test and panics on
//! a violation. Keys are made unique per run (`conformance/<test>/<random>`),
//! so the suite can share one emulator with other runs. TTLs are the
//! backend's minimum, but at least one second; tests that wait for expiry
//! take about that long (or twice that on backends whose capabilities say
//! `takeover_needs_observation`).
//!
//! One file per part: the backend contract (`contract.rs`), locks,
//! semaphores, elections, run records, and store loss (`loss.rs`, run only
//! for backends that can say how their data is lost). Every `pub async fn`
//! in those files is a test: `build.rs` lists them for
//! [`conformance_tests!`](crate::conformance_tests), so declaring a test is
//! all it takes to run it on every backend.
//!
//! A backend crate runs the whole suite with one macro call in a test file:
//!
//! ```ignore
//! async fn store() -> Option<leasehold::Store> {
//!     // None (after leasehold::conformance::skip(...)) when the emulator is absent
//! }
//! leasehold::conformance_tests!(store);
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::backend::{AcquireOutcome, AcquireRequest, Backend, Lease, LeaseId, Owner, StoreEpoch};
use crate::error::Error;
use crate::key::Key;
use crate::lock::WaitReason;
use crate::options::{LockOptions, Wait, MAX_DATA_LEN, MAX_LABEL_LEN};
use crate::runs::{RunOutcome, RunRecord, RunReport};
use crate::store::Store;

/// Runs every conformance test as its own `#[tokio::test]`. `$factory` is a
/// path to an `async fn() -> Option<Store>`; `None` skips the test.
///
/// With `lose = $lose`, a path to an `async fn(Store)` that destroys the
/// store's data the way the backend can lose it (a file deleted, a container
/// or table deleted), the store-loss tests run too.
///
/// The tests are every `pub async fn` of the suite's files: the build script
/// lists them, so a test declared there runs on every backend without
/// being added to a list by hand.
#[macro_export]
macro_rules! conformance_tests {
    ($factory:path, lose = $lose:path) => {
        $crate::conformance_tests!($factory);
        $crate::__leasehold_conformance_list!(lose $factory, $lose);
    };
    ($factory:path) => {
        $crate::__leasehold_conformance_list!(each $factory);
    };
    (@lose $factory:path, $lose:path; $($name:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                if let Some(store) = $factory().await {
                    $crate::conformance::$name(store, $lose).await;
                }
            }
        )+
    };
    (@each $factory:path; $($name:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                if let Some(store) = $factory().await {
                    $crate::conformance::$name(store).await;
                }
            }
        )+
    };
}

// `__leasehold_conformance_list!`, written by build.rs from this folder.
include!(concat!(env!("OUT_DIR"), "/conformance_list.rs"));

mod contract;
mod election;
mod lock;
mod loss;
mod runs;
mod semaphore;

pub use contract::*;
pub use election::*;
pub use lock::*;
pub use loss::*;
pub use runs::*;
pub use semaphore::*;

/// Prints a visible "skipped" line (past the test harness's output capture)
/// and returns `None`; panics instead when `LEASEHOLD_REQUIRE_EMULATORS` is
/// set to `1`, so a CI run cannot pass by skipping.
pub fn skip<T>(backend: &str, why: &str) -> Option<T> {
    if std::env::var("LEASEHOLD_REQUIRE_EMULATORS").as_deref() == Ok("1") {
        panic!("{backend} tests required (LEASEHOLD_REQUIRE_EMULATORS=1) but {why}");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {backend} test: {why}");
    None
}

fn unique_key(test: &str) -> String {
    format!(
        "conformance/{test}/{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// The TTL tests use: the backend's minimum, at least one second.
pub fn test_ttl(store: &Store) -> Duration {
    store
        .backend()
        .capabilities()
        .min_ttl
        .max(Duration::from_secs(1))
}

/// How long to wait for an expired lease to be taken over.
fn expiry_wait(store: &Store) -> Duration {
    test_ttl(store) * 3 + Duration::from_secs(5)
}

fn opts(store: &Store) -> LockOptions {
    LockOptions::new()
        .ttl(test_ttl(store))
        .poll_interval(Duration::from_millis(20), Duration::from_millis(50))
}

/// A store over the same backend that shares no in-process state with
/// `store`: it behaves like another process.
fn other_process(store: &Store) -> Store {
    Store::with_clock(store.backend().clone(), store.clock().clone())
}

/// The store's current epoch, asked of `backend` directly (an acquire
/// request naming no epoch grants nothing and answers the epoch).
pub async fn current_epoch(backend: &dyn Backend) -> StoreEpoch {
    let req = AcquireRequest {
        key: Key::new("conformance/epoch-probe").unwrap(),
        lease_id: LeaseId::random(),
        ttl: backend.capabilities().min_ttl.max(Duration::from_secs(1)),
        owner: Owner::current(),
        data: None,
        epoch: None,
    };
    match backend.try_acquire(&req).await.unwrap() {
        AcquireOutcome::OtherEpoch(e) => e,
        other => panic!("a request naming no epoch must not be answered {other:?}"),
    }
}

/// A lease taken straight from `backend`, which nobody renews (for tests of
/// expiry, stale holders and the backend contract), in the store's current
/// epoch without any quarantine. Panics if the key is held.
pub async fn raw_lease(backend: &dyn Backend, key: &str, ttl: Duration) -> Lease {
    let epoch = current_epoch(backend).await.epoch;
    let req = AcquireRequest {
        key: Key::new(key).unwrap(),
        lease_id: LeaseId::random(),
        ttl,
        owner: Owner::current(),
        data: None,
        epoch: Some(epoch),
    };
    match backend.try_acquire(&req).await.unwrap() {
        AcquireOutcome::Acquired(g) => Lease {
            key: req.key,
            lease_id: req.lease_id,
            ttl,
            fencing_token: g.fencing_token,
            epoch,
        },
        other => panic!("{key} unexpectedly not granted: {other:?}"),
    }
}

fn assert_held(result: crate::Result<crate::LeaseGuard>) -> Option<Box<crate::HolderInfo>> {
    match result {
        Err(Error::Held { holder, .. }) => holder,
        Err(e) => panic!("expected Held, got error {e}"),
        Ok(g) => panic!(
            "expected Held, got a guard with token {}",
            g.fencing_token()
        ),
    }
}

fn started_now() -> std::time::SystemTime {
    std::time::SystemTime::now()
}
