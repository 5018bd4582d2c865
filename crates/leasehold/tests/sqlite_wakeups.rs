//! Same-machine wake-ups on SQLite, with real processes: a waiter in another
//! process is woken by a release long before its next poll, and one that
//! misses the wake-up still gets the lease at its next poll. The waiter is
//! this test binary run again with `LEASEHOLD_TEST_WAKE_CHILD` set.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use leasehold::sqlite::SqliteBackend;
use leasehold::{
    backend::{Clock, SystemClock},
    LockOptions, WaitReason,
};

fn now_ns() -> u128 {
    SystemClock.now().as_nanos()
}

fn spawn_waiter(path: &Path, poll: Duration) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env("LEASEHOLD_TEST_WAKE_CHILD", "wait")
        .env("LEASEHOLD_TEST_DB", path)
        .env("LEASEHOLD_TEST_POLL_MS", poll.as_millis().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Not a test of its own: the waiter process. Prints `waiting` once it has
/// found the key held, then `granted NS` (on the shared boot clock).
#[test]
fn child() {
    let Ok(_role) = std::env::var("LEASEHOLD_TEST_WAKE_CHILD") else {
        return;
    };
    let path = std::env::var("LEASEHOLD_TEST_DB").unwrap();
    let poll: u64 = std::env::var("LEASEHOLD_TEST_POLL_MS")
        .unwrap()
        .parse()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let store = leasehold_testkit::test_store(SqliteBackend::open(&path).unwrap());
        let poll = Duration::from_millis(poll);
        let lock = store
            .lock_with("k", LockOptions::new().poll_interval(poll, poll))
            .unwrap();
        let mut told = false;
        let guard = lock
            .acquire_reporting(Duration::from_secs(60), |reason| {
                if matches!(reason, WaitReason::Held(_)) && !told {
                    told = true;
                    println!("waiting");
                }
            })
            .await
            .unwrap();
        println!("granted {}", now_ns());
        guard.release().await.unwrap();
    });
}

/// The rest of the child's next line that starts with `prefix` (the test
/// harness prints lines of its own).
fn line_starting(out: &mut impl BufRead, prefix: &str) -> String {
    leasehold_testkit::conformance::line_after(out, prefix)
}

/// Holds the key, starts a waiter polling every `poll`, releases once it
/// waits, and answers how long after the release the waiter got the key.
async fn handoff_after_release(path: &Path, poll: Duration) -> Duration {
    let store = leasehold_testkit::test_store(SqliteBackend::open(path).unwrap());
    let guard = store.lock("k").unwrap().try_acquire().await.unwrap();
    let mut child = spawn_waiter(path, poll);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    line_starting(&mut out, "waiting");
    let released = now_ns();
    guard.release().await.unwrap();
    let granted: u128 = line_starting(&mut out, "granted ").parse().unwrap();
    assert!(child.wait().unwrap().success());
    Duration::from_nanos((granted - released) as u64)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_wakes_a_waiter_in_another_process_before_its_poll() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    // The waiter polls every 10 s: only the wake-up can hand it the key
    // within a second.
    let took = handoff_after_release(&path, Duration::from_secs(10)).await;
    assert!(
        took < Duration::from_secs(1),
        "the waiter got the key {took:?} after the release"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_that_misses_the_wake_up_gets_the_key_at_its_next_poll() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    // A plain file where the wake-up directory goes: no release can touch a
    // bucket file in it, so the waiter is never woken and must poll.
    std::fs::write(dir.path().join("leases.db-wake"), b"").unwrap();
    let poll = Duration::from_millis(300);
    let took = handoff_after_release(&path, poll).await;
    assert!(
        took < poll + Duration::from_secs(2),
        "the waiter got the key {took:?} after the release"
    );
}
