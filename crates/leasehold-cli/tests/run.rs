//! `leasehold run` across real processes on a shared SQLite store.

mod common;

use std::io::BufReader;
use std::time::Duration;

use common::*;
use leasehold::LockOptions;

const SECS: Duration = Duration::from_secs(1);

#[test]
fn runs_the_command_with_key_and_token_in_its_environment() {
    let env = Env::new();
    let script = r#"echo "$LEASEHOLD_KEY $LEASEHOLD_FENCING_TOKEN""#;
    let first = env.output(&["run", "jobs/import-A", "--", "sh", "-c", script]);
    assert_eq!(first.code, Some(0), "{first:?}");
    // Tokens start at the store epoch's base (docs/guarantees.md).
    let token = |out: &str| -> u64 {
        let t = out.strip_prefix("jobs/import-A ").expect(out);
        t.trim_end().parse().expect(out)
    };
    let t1 = token(&first.stdout);
    let second = env.output(&["run", "jobs/import-A", "--", "sh", "-c", script]);
    assert_eq!(token(&second.stdout), t1 + 1, "tokens grow across runs");
}

#[test]
fn exit_code_is_the_commands_own() {
    let env = Env::new();
    assert_eq!(
        env.output(&["run", "k", "--", "sh", "-c", "exit 7"]).code,
        Some(7)
    );
    let killed = env.output(&["run", "k", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(killed.code, Some(128 + libc::SIGTERM), "{killed:?}");
    let missing = env.output(&["run", "k", "--", "/nonexistent/cmd"]);
    assert_eq!(missing.code, Some(127), "{missing:?}");
    // None of these left the lock held.
    assert_eq!(env.output(&["run", "k", "--", "true"]).code, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_elsewhere_exits_75_without_running_the_command() {
    let env = Env::new();
    let store = env.store();
    let guard = store
        .lock_with("k", LockOptions::new().owner_label("other-vm"))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let out = env.output(&["run", "k", "--", "sh", "-c", "echo ran"]);
    assert_eq!(out.code, Some(75), "{out:?}");
    assert_eq!(out.stdout, "", "the command must not run");
    assert!(out.stderr.contains("held by other-vm"), "{}", out.stderr);

    let out = env.output(&["run", "--wait", "300ms", "k", "--", "sh", "-c", "echo ran"]);
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(out.stderr.contains("gave up waiting"), "{}", out.stderr);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_runs_once_the_holder_releases() {
    let env = Env::new();
    let store = env.store();
    let guard = store.lock("k").unwrap().try_acquire().await.unwrap();
    let mut waiter = env.spawn(&sh("run --wait 30s k", "echo $LEASEHOLD_FENCING_TOKEN"));
    let mut stderr = std::io::BufReader::new(waiter.stderr.take().unwrap());
    let line = tokio::task::spawn_blocking(move || read_message(&mut stderr))
        .await
        .unwrap();
    assert!(line.contains("waiting for k"), "{line}");
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    let code = wait_with_timeout(&mut waiter, 10 * SECS);
    assert_eq!(code, Some(0));
    let out: u64 = read_all(waiter.stdout.as_mut().unwrap())
        .trim()
        .parse()
        .unwrap();
    assert!(out > token, "{out} after {token}");
}

#[test]
fn many_processes_take_turns_with_growing_tokens() {
    processes_take_turns_with_growing_tokens(&Env::new(), &[]);
}

#[test]
fn a_killed_holder_is_recovered_within_the_ttl_and_its_command_dies() {
    let env = Env::new();
    let mut holder = env.spawn(&sh(
        "run --ttl 1s --grace 100ms k",
        "echo $$; exec sleep 1000",
    ));
    let child_pid: i32 = read_line(&mut stdout_reader(&mut holder)).parse().unwrap();
    kill(holder.id(), libc::SIGKILL);
    holder.wait().unwrap();
    assert!(
        wait_gone(child_pid, 5 * SECS),
        "the command survived its leasehold"
    );
    // The bound is the TTL (1 s) + one poll interval (100 ms), plus slack
    // for starting a process on a loaded CI machine.
    let out = env.output(&["run", "--wait", "2s", "k", "--", "true"]);
    assert_eq!(out.code, Some(0), "not recovered in time: {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_command_and_exits_76() {
    let env = Env::new();
    // The command ignores SIGTERM, so it takes the SIGKILL after the grace.
    let script = r#"trap "" TERM; echo $$; while :; do sleep 0.05; done"#;
    let mut holder = env.spawn(&[
        "run", "--ttl", "1s", "--grace", "200ms", "k", "--", "sh", "-c", script,
    ]);
    let mut out = stdout_reader(&mut holder);
    let child_pid: i32 = tokio::task::spawn_blocking(move || read_line(&mut out).parse().unwrap())
        .await
        .unwrap();
    let broken = env.store().break_lease("k").await.unwrap();
    assert!(broken.is_some());
    let code = tokio::task::spawn_blocking(move || {
        let code = wait_with_timeout(&mut holder, 10 * SECS);
        (code, read_all(holder.stderr.as_mut().unwrap()))
    })
    .await
    .unwrap();
    assert_eq!(code.0, Some(76), "{}", code.1);
    assert!(code.1.contains("lost"), "{}", code.1);
    assert!(
        wait_gone(child_pid, SECS),
        "the command outlived the lost lease"
    );
}

#[test]
fn sigterm_is_forwarded_to_the_command() {
    let env = Env::new();
    let script = r#"trap "echo got TERM; exit 3" TERM; echo ready; while :; do sleep 0.05; done"#;
    let (mut holder, mut out) = env.spawn_until(&["run", "k", "--", "sh", "-c", script], "ready");
    kill(holder.id(), libc::SIGTERM);
    assert_eq!(wait_with_timeout(&mut holder, 10 * SECS), Some(3));
    assert_eq!(read_line(&mut out), "got TERM");
    let json = env.json(&["status", "k", "--json"]);
    assert!(
        json["holder"].is_null(),
        "released after the command ended: {json}"
    );
}

/// A command that ignores SIGTERM and SIGINT does not keep the lock after
/// leasehold is asked to stop: the tree gets `--grace`, then SIGKILL, and
/// the key is released (it was held for as long as the command liked).
#[test]
fn a_command_that_ignores_the_stop_signal_is_killed_after_the_grace() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let env = Env::new();
        let script = r#"trap "" TERM INT; echo $$; while :; do sleep 0.05; done"#;
        let mut holder = env.spawn(&["run", "--grace", "500ms", "k", "--", "sh", "-c", script]);
        let pid: i32 = read_line(&mut stdout_reader(&mut holder)).parse().unwrap();
        kill(holder.id(), sig);
        assert_eq!(
            wait_with_timeout(&mut holder, 10 * SECS),
            Some(128 + libc::SIGKILL),
            "signal {sig}: the command ignoring it was not killed after the grace"
        );
        assert!(
            wait_gone(pid, SECS),
            "signal {sig}: the command outlived it"
        );
        let json = env.json(&["status", "k", "--json"]);
        assert!(json["holder"].is_null(), "signal {sig}: still held: {json}");
    }
}

/// A LEASEHOLD_SLOT inherited from an enclosing `run --limit` does not
/// reach a plain run's command (it did, unchanged); a semaphore's command
/// gets its own.
#[test]
fn an_inherited_slot_does_not_reach_a_plain_runs_command() {
    let env = Env::new();
    let script = "echo ${LEASEHOLD_SLOT-unset}";
    let out = env
        .leasehold()
        .args(["run", "k", "--", "sh", "-c", script])
        .env("LEASEHOLD_SLOT", "7")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "unset\n", "{out:?}");
    let out = env
        .leasehold()
        .args(["run", "--limit", "3", "s", "--", "sh", "-c", script])
        .env("LEASEHOLD_SLOT", "7")
        .output()
        .unwrap();
    let slot = String::from_utf8_lossy(&out.stdout);
    assert!(["0\n", "1\n", "2\n"].contains(&&*slot), "{out:?}");
}

#[test]
fn bad_usage_exits_2_with_a_clear_message() {
    let env = Env::new();
    let cases: &[(&[&str], &str)] = &[
        (&["run", "bad key", "--", "true"], "1-256 characters"),
        (
            &["run", "--ttl", "10ms", "k", "--", "true"],
            "outside the range of every store",
        ),
        (
            &["run", "--ttl", "2s", "--grace", "5s", "k", "--", "true"],
            "at most half the TTL",
        ),
        (
            &["--store", "ftp://x", "status", "k"],
            "expected sqlite:PATH",
        ),
        (
            &["--store", "azblob://c", "status", "k"],
            "Azure container names are 3-63 characters",
        ),
        (&["run", "k"], "CMD"),
        (&["run", "--wait", "soon", "k", "--", "true"], "forever"),
    ];
    for (args, expected) in cases {
        let out = env.output(args);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(expected), "{args:?}: {}", out.stderr);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_list_and_break_show_and_clear_holders() {
    let env = Env::new();
    let store = env.store();
    let lock = store
        .lock_with(
            "jobs/a",
            LockOptions::new().owner_label("vm-7").data("account A"),
        )
        .unwrap();
    let guard = lock.acquire().await.unwrap();

    let status = env.output(&["status", "jobs/a"]);
    assert!(
        status.stdout.contains("state:         held"),
        "{}",
        status.stdout
    );
    assert!(status.stdout.contains("vm-7"), "{}", status.stdout);
    assert!(status.stdout.contains("account A"), "{}", status.stdout);

    let json: serde_json::Value =
        serde_json::from_str(&env.output(&["status", "jobs/a", "--json"]).stdout).unwrap();
    assert_eq!(json["holder"]["owner"]["label"], "vm-7");
    assert_eq!(json["holder"]["owner"]["pid"], std::process::id());
    assert_eq!(json["holder"]["data"], "account A");
    assert_eq!(json["fencing_token"], guard.fencing_token());

    env.output(&["run", "jobs/b", "--", "true"]);
    env.output(&["run", "other", "--", "true"]);
    let listed: serde_json::Value =
        serde_json::from_str(&env.output(&["list", "--prefix", "jobs/", "--json"]).stdout).unwrap();
    let keys: Vec<_> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["jobs/a", "jobs/b"]);
    assert!(listed[1]["holder"].is_null());

    let broke = env.output(&["break", "jobs/a"]);
    assert_eq!(broke.code, Some(0));
    assert!(
        broke.stdout.contains("broke the lease of vm-7"),
        "{}",
        broke.stdout
    );
    let json: serde_json::Value =
        serde_json::from_str(&env.output(&["status", "jobs/a", "--json"]).stdout).unwrap();
    assert!(json["holder"].is_null());
    assert!(env
        .output(&["break", "jobs/a"])
        .stdout
        .contains("was not held"));
    drop(guard);
}

#[test]
fn help_never_shows_the_store_url_from_the_environment() {
    let env = Env::new();
    let mut cmd = env.leasehold();
    let out = cmd
        .env(
            "LEASEHOLD_STORE",
            "dynamodb://t?region=x&secret=s3cr3t-value",
        )
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("LEASEHOLD_STORE"), "{help}");
    assert!(!help.contains("s3cr3t-value"), "{help}");
    assert!(help.contains("126 "), "exit codes listed: {help}");
}

/// Threads of process `pid`.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// A grant that lands after its wait was interrupted is released before
/// `leasehold` exits, not left held until its TTL runs out.
#[test]
fn a_grant_that_lands_after_an_interrupted_wait_is_released_before_exit() {
    let env = Env::new();
    // The store exists (made by a first run), the key is free.
    assert_eq!(env.output(&["run", "k", "--", "true"]).code, Some(0));
    // SQLite's write lock, held here: the attempt cannot commit.
    let db = rusqlite::Connection::open(env.path("leases.db")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut waiter = env.spawn(&[
        "run", "--wait", "30s", "--ttl", "60s", "k", "--", "echo", "ran",
    ]);
    // Its first attempt runs on the runtime's blocking thread, which only
    // that attempt starts: once there, the attempt is in flight.
    let deadline = std::time::Instant::now() + 10 * SECS;
    while threads(waiter.id()) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the attempt never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    kill(waiter.id(), libc::SIGINT);
    let mut err = BufReader::new(waiter.stderr.take().unwrap());
    let line = read_line(&mut err);
    assert!(line.contains("interrupted while waiting for k"), "{line}");
    // Now the attempt commits: the key was free, so it is granted, to a
    // caller that is gone.
    db.execute_batch("ROLLBACK").unwrap();
    assert_eq!(wait_with_timeout(&mut waiter, 30 * SECS), Some(130));
    assert_eq!(read_all(waiter.stdout.as_mut().unwrap()), "");
    let json = env.json(&["status", "k", "--json"]);
    assert!(
        json["holder"].is_null(),
        "the late grant was left held: {json}"
    );
}

#[test]
fn a_zero_wait_takes_a_free_lock_and_gives_up_on_a_held_one() {
    let env = Env::new();
    let free = env.output(&["run", "--wait", "0s", "k", "--", "echo", "ran"]);
    assert_eq!(free.code, Some(0), "{}", free.stderr);
    assert_eq!(free.stdout, "ran\n");
    let (mut holder, _out) = env.spawn_until(
        &["run", "k", "--", "sh", "-c", "echo ready; sleep 30"],
        "ready",
    );
    let held = env.output(&["run", "--wait", "0s", "k", "--", "echo", "ran"]);
    assert_eq!(held.code, Some(75), "{}", held.stderr);
    assert!(held.stderr.contains("held by"), "{}", held.stderr);
    assert_eq!(held.stdout, "");
    kill(holder.id(), libc::SIGTERM);
    wait_with_timeout(&mut holder, 10 * SECS);
}
