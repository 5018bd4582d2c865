//! The SQLite store with real processes: opening a missing file from many
//! processes at once, and the file deleted under a holder in another
//! process. Children are this test binary run again with
//! `LEASEHOLD_TEST_CHILD` set to their role.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use leasehold::sqlite::SqliteBackend;
use leasehold::{
    backend::{Clock, SystemClock},
    Error, LockOptions, Wait, WaitReason,
};

const MAX_TTL: Duration = Duration::from_secs(3);

fn spawn(role: &str, path: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env("LEASEHOLD_TEST_CHILD", role)
        .env("LEASEHOLD_TEST_DB", path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A child process in `role` on the store at `path`, its stdout, and the
/// token of the grant it reported first.
fn granted_holder(role: &str, path: &Path) -> (Child, BufReader<ChildStdout>, u64) {
    let mut holder = spawn(role, path);
    let mut holder_out = BufReader::new(holder.stdout.take().unwrap());
    let first: u64 = read_line_starting(&mut holder_out, "granted ")[0]
        .parse()
        .unwrap();
    (holder, holder_out, first)
}

fn now_ns() -> u128 {
    SystemClock.now().as_nanos()
}

/// Not a test of its own: the body of the child processes.
#[test]
fn child() {
    let Ok(role) = std::env::var("LEASEHOLD_TEST_CHILD") else {
        return;
    };
    let path = std::env::var("LEASEHOLD_TEST_DB").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let code = rt.block_on(async move {
        let store = match SqliteBackend::open_with_max_ttl(&path, MAX_TTL) {
            Ok(b) => leasehold_testkit::test_store(b),
            Err(e) => {
                println!("error {e}");
                return 1;
            }
        };
        // A slow holder renews only every 2 s (its TTL is the store's max
        // TTL): it has not noticed anything yet when a waiter started at
        // once looks at the store.
        let (ttl, renew) = if role == "hold-slow" {
            (MAX_TTL, Duration::from_secs(2))
        } else {
            (Duration::from_secs(1), Duration::from_millis(200))
        };
        let opts = LockOptions::new()
            .ttl(ttl)
            .renew_interval(renew)
            .poll_interval(Duration::from_millis(10), Duration::from_millis(20));
        let lock = store.lock_with("k", opts).unwrap();
        match role.as_str() {
            "open" => match lock.try_acquire().await {
                Ok(_) | Err(Error::Held { .. } | Error::Quarantined { .. }) => {
                    println!("ok");
                    0
                }
                Err(e) => {
                    println!("error {e}");
                    1
                }
            },
            "hold" | "hold-slow" => {
                let guard = lock.acquire_timeout(Duration::from_secs(30)).await.unwrap();
                println!("granted {}", guard.fencing_token());
                let reason = guard.lost().await;
                println!("lost {} {reason}", now_ns());
                tokio::time::sleep(Duration::from_secs(60)).await;
                0
            }
            "wait" => {
                let mut quarantined = false;
                let guard = lock
                    .acquire_reporting(Wait::Timeout(Duration::from_secs(60)), |r| {
                        quarantined |= matches!(r, WaitReason::Quarantine { .. });
                    })
                    .await
                    .unwrap();
                println!(
                    "granted {} {} quarantined={quarantined}",
                    guard.fencing_token(),
                    now_ns()
                );
                guard.release().await.unwrap();
                0
            }
            // Drops its guard and exits at once, after closing the store
            // (or not: the release may be cut short by the exit).
            "drop-close" | "drop-exit" => {
                let guard = lock.try_acquire().await.unwrap();
                println!("granted {}", guard.fencing_token());
                drop(guard);
                if role == "drop-close" {
                    store.close().await.unwrap();
                }
                std::process::exit(0);
            }
            other => panic!("unknown role {other}"),
        }
    });
    std::process::exit(code);
}

/// Issue 14: ten processes opening (and creating) a missing file at once
/// all succeed; none fails with "database is locked".
#[test]
fn ten_processes_create_a_missing_store_at_once() {
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("round-{round}.db"));
        let children: Vec<Child> = (0..10).map(|_| spawn("open", &path)).collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("ok"),
                "round {round}: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

fn read_line_starting(reader: &mut impl BufRead, prefix: &str) -> Vec<String> {
    let rest = leasehold_testkit::conformance::line_after(reader, prefix);
    rest.split_whitespace().map(str::to_string).collect()
}

/// `rm leases.db*` under a holder in another process, with a waiter in a
/// third: the holder is told lost before the waiter is granted (both times
/// on the machine's shared boot clock), the waiter waited in quarantine,
/// and its token is greater.
#[test]
fn file_deleted_under_a_holder_in_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let (mut holder, mut holder_out, first) = granted_holder("hold-slow", &path);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let waiter = spawn("wait", &path);
    let out = waiter.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let granted = read_line_starting(&mut text.as_bytes(), "granted ");
    let lost = read_line_starting(&mut holder_out, "lost ");
    holder.kill().unwrap();
    holder.wait().unwrap();
    let (second, granted_at): (u64, u128) =
        (granted[0].parse().unwrap(), granted[1].parse().unwrap());
    let lost_at: u128 = lost[0].parse().unwrap();
    assert!(
        lost_at < granted_at,
        "the waiter was granted {} ms before the holder was told lost ({lost:?})",
        (lost_at - granted_at) / 1_000_000
    );
    assert!(second > first, "token {second} after {first}");
    assert_eq!(granted[2], "quarantined=true", "{text}");
}

/// The same when the waiter reaches the file through a symbolic link in
/// another directory (the holder renews slowly, so it has not noticed the
/// deletion when the waiter looks): the proof that no holder is left is looked for in the
/// directory the file really is in, so the waiter waits the quarantine out
/// (it was granted at once, while the holder still ran).
#[test]
fn file_deleted_under_a_holder_reached_through_a_symlink() {
    let real = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let path = real.path().join("leases.db");
    let link = other.path().join("leases.db");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let (holder, holder_out, first) = granted_holder("hold-slow", &path);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    granted_after_a_quarantine_once_the_holder_was_lost(holder, holder_out, first, &link);
}

/// A file whose epoch row and live lease were written under another boot
/// (another kernel sharing the file, or a boot clock that restarted): the
/// next process starts a new epoch, waits the quarantine out (a row still
/// holds a lease, so nothing proves its holder gone), and is granted a
/// greater token only after the holder was told lost.
#[test]
fn a_file_last_written_under_another_boot_starts_an_epoch_with_quarantine() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let (holder, holder_out, first) = granted_holder("hold", &path);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn.execute_batch(
            "BEGIN IMMEDIATE;
             UPDATE leasehold_store SET boot_id = 'another-boot';
             UPDATE leasehold_leases SET boot_id = 'another-boot' WHERE lease_id IS NOT NULL;
             COMMIT;",
        )
        .unwrap();
    }
    granted_after_a_quarantine_once_the_holder_was_lost(holder, holder_out, first, &path);
}

/// A waiter on `path` is granted only after a quarantine, with a token
/// above the holder's `first`, and after the holder was told lost.
fn granted_after_a_quarantine_once_the_holder_was_lost(
    mut holder: std::process::Child,
    mut holder_out: BufReader<std::process::ChildStdout>,
    first: u64,
    path: &std::path::Path,
) {
    let out = spawn("wait", path).wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let granted = read_line_starting(&mut text.as_bytes(), "granted ");
    let lost = read_line_starting(&mut holder_out, "lost ");
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(granted[2], "quarantined=true", "{text}");
    let (second, granted_at): (u64, u128) =
        (granted[0].parse().unwrap(), granted[1].parse().unwrap());
    let lost_at: u128 = lost[0].parse().unwrap();
    assert!(
        lost_at < granted_at,
        "granted before the holder was told lost"
    );
    assert!(second > first, "token {second} after {first}");
}

/// A store created where no process holds a lease needs no quarantine:
/// the first process to use a new file is granted at once.
#[test]
fn a_new_file_with_no_holders_around_grants_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let out = spawn("wait", &path).wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let granted = read_line_starting(&mut text.as_bytes(), "granted ");
    assert_eq!(granted[2], "quarantined=false", "{text}");
    // And again after the file was deleted while nobody held a lease.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let out = spawn("wait", &path).wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let again = read_line_starting(&mut text.as_bytes(), "granted ");
    assert_eq!(again[2], "quarantined=false", "{text}");
    assert!(again[0].parse::<u64>().unwrap() > granted[0].parse::<u64>().unwrap());
}

/// Issue 49: a program that drops its guard and exits leaves no lease
/// behind when it closes its store last (without `close`, the release,
/// in the background, is cut short by the exit, and the lease is held
/// until its TTL runs out).
#[test]
fn a_process_that_closes_its_store_before_exiting_leaves_no_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    for round in 0..5 {
        let out = spawn("drop-close", &path).wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success() && text.contains("granted"), "{text}");
        let store = leasehold_testkit::test_store(
            SqliteBackend::open_with_max_ttl(&path, MAX_TTL).unwrap(),
        );
        let info = tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(store.inspect("k"))
            .unwrap();
        assert!(
            info.holder.is_none(),
            "round {round}: the lease outlived the process: {info:?}"
        );
    }
}

/// Issue 49: a new file is granted at once while another process holds a
/// lease in *another* file of the same directory (only holders of a file
/// of its own name could hold a lease of its lost history).
#[test]
fn a_new_file_beside_a_held_store_grants_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut holder, _out, _first) = granted_holder("hold", &dir.path().join("a.db"));
    let out = spawn("wait", &dir.path().join("b.db"))
        .wait_with_output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let granted = read_line_starting(&mut text.as_bytes(), "granted ");
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(granted[2], "quarantined=false", "{text}");
}

/// Issue 49's safety side: the file deleted under a holder while another
/// process holds a lease in another file of the directory; and the
/// directory's holders file deleted too. Either way the re-created file
/// waits the quarantine out, and is granted after the holder was told
/// lost, with a greater token.
#[test]
fn file_deleted_under_a_holder_beside_another_held_store() {
    for remove_holders_file in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leases.db");
        let (mut other, _other_out, _) = granted_holder("hold", &dir.path().join("other.db"));
        let (holder, holder_out, first) = granted_holder("hold-slow", &path);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        if remove_holders_file {
            std::fs::remove_file(dir.path().join(".leasehold-holders")).unwrap();
        }
        granted_after_a_quarantine_once_the_holder_was_lost(holder, holder_out, first, &path);
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
