//! `leasehold run` when the SQLite file is deleted under a running command
//! whose `leasehold` process is frozen (SIGSTOP: it can neither renew nor
//! hear of the loss), and a second `leasehold run` with another max TTL
//! re-creates the store: the first command's tree is stopped (by its
//! watchdog, at the lease's safety deadline) before the second command
//! starts, however long the first lease's TTL and its store's max TTL
//! (issue #28). Real processes; both use a confirmation window of 6 s
//! (`LEASEHOLD_TEST_CONFIRMATION_WINDOW`, heard only by the binary the
//! tests build: the opener's `test-window` feature), so
//! the test takes seconds.

mod common;

use std::time::Duration;

use common::*;

const WINDOW_SECS: &str = "6";

#[test]
fn file_deleted_under_a_frozen_holder_with_a_long_ttl() {
    let env = Env::new();
    let path = env.path("leases.db");
    let url = |max_ttl: &str| format!("sqlite:{}?max_ttl={max_ttl}", path.display());

    // A holder of a 4-minute lease on a store whose max TTL is 10 minutes.
    let mut first = piped(
        env.leasehold()
            .env("LEASEHOLD_STORE", url("10m"))
            .env("LEASEHOLD_TEST_CONFIRMATION_WINDOW", WINDOW_SECS)
            .args([
                "run", "lost/k", "--ttl", "240s", "--grace", "1s", "--", "sh", "-c", TREE,
            ]),
    );
    let (first_token, pids) = token_and_pids(&mut first);

    // Cut off: it renews nothing from now on, and only its watchdog can
    // stop its command.
    kill(first.id(), libc::SIGSTOP);
    let frozen = Frozen(first.id());
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }

    // A process with a short max TTL re-creates the store and runs the
    // key: its command looks for the first command's processes at once.
    let check = tree_check(pids);
    let second = env
        .leasehold()
        .env("LEASEHOLD_STORE", url("3s"))
        .env("LEASEHOLD_TEST_CONFIRMATION_WINDOW", WINDOW_SECS)
        .args([
            "run", "lost/k", "--wait", "60s", "--ttl", "2s", "--", "sh", "-c", &check,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&second.stdout);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(0), "{stdout} {stderr}");
    assert_new_token_and_no_tree(&stdout, first_token, "file");

    // Thawed, the first run finds its lease lost.
    drop(frozen);
    assert_eq!(
        wait_with_timeout(&mut first, Duration::from_secs(30)),
        Some(76)
    );
}

/// A process stopped with SIGSTOP, continued when this is dropped (also
/// when the test fails, so that it does not stay behind stopped).
struct Frozen(u32);

impl Drop for Frozen {
    fn drop(&mut self) {
        kill(self.0, libc::SIGCONT);
    }
}
