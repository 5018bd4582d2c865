//! The conformance suite every backend passes unchanged.
//!
//! Each function takes a [`Store`] over the backend under test and panics on
//! a violation. Keys are made unique per run (`conformance/<test>/<random>`),
//! so the suite can share one emulator with other runs. TTLs are the
//! backend's minimum, but at least two seconds; tests that wait for expiry
//! take about that long (or twice that on backends whose capabilities say
//! `takeover_needs_observation`).
//!
//! One file per part: the backend contract (`contract.rs`), locks,
//! semaphores, reader-writer locks, elections, run records, and store loss
//! (`loss.rs`, run only for backends that can say how their data is lost). Every `pub async fn`
//! in those files is a test: `build.rs` lists them for
//! [`conformance_tests!`](crate::conformance_tests), so declaring a test is
//! all it takes to run it on every backend.
//!
//! A backend crate runs the whole suite with one macro call in a test file
//! (see the [crate docs](crate) for the whole recipe):
//!
//! ```ignore
//! async fn store() -> Option<leasehold::Store> {
//!     // None (after leasehold_testkit::conformance::skip(...)) when the server is absent
//!     Some(leasehold_testkit::test_store(my_backend().await))
//! }
//! leasehold_testkit::conformance_tests!(store);
//! ```
//!
//! The suite's own "other processes" (stores over the same backend that
//! share no in-process state with the one the factory gave) take that
//! store's clock and confirmation window.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::backend::{
    AcquireOutcome, AcquireRequest, Backend, Lease, LeaseId, Owner, StoreEpoch,
};
use leasehold::Error;
use leasehold::Key;
use leasehold::Store;
use leasehold::WaitReason;
use leasehold::{LockOptions, Wait, MAX_DATA_LEN, MAX_LABEL_LEN};
use leasehold::{RunOutcome, RunRecord, RunReport};

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

mod batch;
mod contract;
mod election;
mod lock;
mod loss;
mod mixed;
mod multi;
mod runs;
mod rwlock;
mod semaphore;

pub use batch::*;
pub use contract::*;
pub use election::*;
pub use lock::*;
pub use loss::*;
pub use mixed::*;
pub use multi::*;
pub use runs::*;
pub use rwlock::*;
pub use semaphore::*;

/// Runs the wake-up tests for a backend that wakes other processes'
/// waiters on a release ([`Backend::watch_release`]) as their own
/// `#[tokio::test]`s. `$stores` is a path to an
/// `async fn(wake_ups: bool) -> Option<(Store, Store)>`: a holder, and a
/// waiter over a second backend of the same store (its own connections and
/// wake-up channel, as another machine would have), ready to hear releases,
/// with wake-ups on or off; `None` skips the tests.
#[macro_export]
macro_rules! wake_up_tests {
    ($stores:path) => {
        /// A release by another process wakes the waiter long before its
        /// next poll.
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn a_release_elsewhere_wakes_the_waiter_before_its_poll() {
            let Some((holder, waiter)) = $stores(true).await else {
                return;
            };
            let took = $crate::conformance::wake_up_handoff(holder, waiter)
                .await
                .expect("the waiter was not woken within 5 s (polls are 10 s apart)");
            assert!(
                took < std::time::Duration::from_secs(2),
                "woken after {took:?}"
            );
        }

        /// The control: without wake-ups the same waiter is not in before
        /// its next poll, 10 s later (its 5 s wait runs out).
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn without_wake_ups_the_waiter_waits_for_its_poll() {
            let Some((holder, waiter)) = $stores(false).await else {
                return;
            };
            assert_eq!(
                $crate::conformance::wake_up_handoff(holder, waiter).await,
                None
            );
        }
    };
}

/// How long after `holder` released a key `waiter` (another process: see
/// [`wake_up_tests!`](crate::wake_up_tests)), waiting on it with polls
/// 10 s apart, got it; `None` if its 5 s wait ran out first.
pub async fn wake_up_handoff(holder: Store, waiter: Store) -> Option<Duration> {
    use std::time::Instant;
    // Polls 10 s apart: only a wake-up gets the waiter in sooner.
    let slow_polls = LockOptions::new()
        .ttl(test_ttl(&holder).max(Duration::from_secs(4)))
        .poll_interval(Duration::from_secs(10), Duration::from_secs(10));
    let key = unique_key("wake");
    let guard = holder
        .lock_with(&key, slow_polls.clone())
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let (waiting_tx, waiting_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut waiting = Some(waiting_tx);
        waiter
            .lock_with(&key, slow_polls)
            .unwrap()
            .acquire_reporting(Duration::from_secs(5), |_: WaitReason<'_>| {
                if let Some(tx) = waiting.take() {
                    let _ = tx.send(());
                }
            })
            .await
            .map(|g| (Instant::now(), g))
    });
    // The waiter found the key held and waits for its next poll.
    waiting_rx.await.unwrap();
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (got_at, g) = task.await.unwrap().ok()?;
    g.release().await.unwrap();
    Some(got_at - released_at)
}

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

/// The TTL tests use: the backend's minimum, at least two seconds (one
/// second left a lease on a busy machine running 8 test binaries at once
/// to expire between two slow renewals).
pub fn test_ttl(store: &Store) -> Duration {
    store
        .backend()
        .capabilities()
        .min_ttl
        .max(Duration::from_secs(2))
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

/// Takes `key` in `store` with `options`, with one attempt that must be
/// granted (it panics otherwise): for tests.
pub async fn take(store: &Store, key: &str, options: LockOptions) -> leasehold::LeaseGuard {
    store
        .lock_with(key, options)
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
}

/// A store over the same backend that shares no in-process state with
/// `store`: it behaves like another process.
fn other_process(store: &Store) -> Store {
    like(store, store.backend().clone())
}

/// A store over `backend` with `store`'s clock and confirmation window
/// (every process on a store must use the same window): another process
/// on the machine of `store`'s.
fn like(store: &Store, backend: Arc<dyn Backend>) -> Store {
    Store::builder(backend)
        .clock(store.clock().clone())
        .confirmation_window(store.confirmation_window())
        .build()
}

/// A request by this process for `key` with a new lease id, no data, for
/// `ttl`, in `epoch` (`None`: a request that names no epoch, answered
/// with the current one and granting nothing).
pub fn acquire_request(key: &str, ttl: Duration, epoch: Option<u64>) -> AcquireRequest {
    AcquireRequest {
        key: Key::new(key).unwrap(),
        lease_id: LeaseId::random(),
        ttl,
        owner: Owner::current(),
        data: None,
        epoch,
        queue: false,
    }
}

/// The store's current epoch, asked of `backend` directly (an acquire
/// request naming no epoch grants nothing and answers the epoch).
pub async fn current_epoch(backend: &dyn Backend) -> StoreEpoch {
    let ttl = backend.capabilities().min_ttl.max(Duration::from_secs(1));
    let req = acquire_request("conformance/epoch-probe", ttl, None);
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
    let req = acquire_request(key, ttl, Some(epoch));
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

/// Each of `locks` (on one key) taken `rounds` times in turn by a task of
/// its own, each grant held through `hold` (which gives the guard back
/// for its release): never two holders at once, and the tokens, in the
/// order the grants came, grow. Panics otherwise.
pub async fn take_turns<H, F>(locks: Vec<leasehold::Lock>, rounds: usize, hold: H)
where
    H: Fn(leasehold::LeaseGuard) -> F + Clone + Send + 'static,
    F: std::future::Future<Output = leasehold::LeaseGuard> + Send,
{
    let inside = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let grants = locks.len() * rounds;
    let mut tasks = Vec::new();
    for lock in locks {
        let inside = inside.clone();
        let tokens = tokens.clone();
        let hold = hold.clone();
        tasks.push(tokio::spawn(async move {
            for _round in 0..rounds {
                let guard = lock
                    .acquire_timeout(Duration::from_secs(120))
                    .await
                    .unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                tokens.lock().unwrap().push(guard.fencing_token());
                let guard = hold(guard).await;
                inside.store(false, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), grants);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens out of order: {tokens:?}"
    );
}

/// The rest of the next line of `out` with `prefix` in it, trimmed at its
/// end: for a child test process's output, where the test harness may have
/// printed `test child ... ` on the line first. Panics if the output ends
/// first.
pub fn line_after(out: &mut impl std::io::BufRead, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the child ended before printing {prefix:?}"
        );
        if let Some(at) = line.find(prefix) {
            return line[at + prefix.len()..].trim_end().to_string();
        }
    }
}

/// Panics unless `err` is [`Error::InvalidInput`] about `what` (`"ttl"`,
/// `"store URL"`, ...).
pub fn assert_invalid_input(err: &Error, what: &str) {
    assert!(
        matches!(err, Error::InvalidInput { what: w, .. } if *w == what),
        "not invalid {what}: {err}"
    );
}

/// Panics unless `err` is [`Error::Backend`], retryable or not as
/// `retryable` says.
pub fn assert_backend_error(err: &Error, retryable: bool) {
    assert!(
        matches!(err, Error::Backend { retryable: r, .. } if *r == retryable),
        "not a backend error with retryable: {retryable}: {err}"
    );
}

/// The schema and every row of a SQLite store's tables (the file at
/// `path`, opened read only; a table it lacks is left out), as text: for
/// tests that a store is left byte-for-byte as it was.
#[cfg(feature = "sqlite")]
pub fn sqlite_dump(path: &std::path::Path) -> String {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut out = String::new();
    let tables: Vec<(String, String)> = conn
        .prepare("SELECT name, sql FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    for (table, sql) in tables {
        out.push_str(&sql);
        out.push('\n');
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY 1"))
            .unwrap();
        let n = stmt.column_count();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            for i in 0..n {
                let v: rusqlite::types::Value = row.get(i).unwrap();
                out.push_str(&format!("{v:?}|"));
            }
            out.push('\n');
        }
    }
    out
}

/// The loss `lost` tells of comes within `ttl`, and is a revocation.
async fn revoked_within(
    ttl: Duration,
    lost: impl std::future::Future<Output = leasehold::LossReason>,
) {
    let reason = tokio::time::timeout(ttl, lost)
        .await
        .expect("loss noticed within one TTL");
    assert!(
        matches!(reason, leasehold::LossReason::Revoked(_)),
        "{reason:?}"
    );
}

/// A TTL longer than any test waits: the backend's max TTL, at most a
/// minute.
fn long_ttl(store: &Store) -> Duration {
    store
        .backend()
        .capabilities()
        .max_ttl
        .min(Duration::from_secs(60))
}

fn assert_held<G: std::fmt::Debug>(
    result: leasehold::Result<G>,
) -> Option<Box<leasehold::HolderInfo>> {
    match result {
        Err(Error::Held { holder, .. }) => holder,
        Err(e) => panic!("expected Held, got error {e}"),
        Ok(g) => panic!("expected Held, got a guard: {g:?}"),
    }
}

fn started_now() -> std::time::SystemTime {
    std::time::SystemTime::now()
}
