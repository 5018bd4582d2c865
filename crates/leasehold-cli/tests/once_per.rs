//! `leasehold run --once-per` with real processes, on every store whose
//! emulator is up (SQLite always): five machines firing at once run the
//! command once; a later run within the period skips; a failed, killed,
//! interrupted or lost run records no success, so the next one runs; a run
//! after the period runs again.

mod common;

use std::io::BufRead;
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use common::*;

/// The lease TTL to run with on `store` (Azure's minimum is 15 s).
fn ttl(store: &str) -> &'static str {
    match store {
        "azblob" => "15s",
        // The test tables' max TTL (see `Env::on`).
        "dynamodb" | "postgres" | "mysql" | "redis" | "etcd" | "zookeeper" => "2s",
        // S3's shortest TTL.
        "s3" => "4s",
        _ => "3s",
    }
}

/// `leasehold ARGS -- sh -c 'echo ran >> "$D/ran"'`: a command that counts
/// its runs in `$D/ran` (see [`lines`]).
fn counted_run(env: &Env, args: &[&str]) -> Output {
    env.output(&[args, &["--", "sh", "-c", r#"echo ran >> "$D/ran""#]].concat())
}

/// `run job --once-per 1h --ttl TTL OPTIONS -- COMMAND`, the store's TTL.
fn hourly_job<'a>(store: &str, options: &[&'a str], command: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "job", "--once-per", "1h", "--ttl", ttl(store)];
    args.extend(options);
    args.push("--");
    args.extend(command);
    args
}

/// The period of the test that lets it pass, in seconds: long enough that
/// the second run certainly looks within it on a busy machine (a run there
/// can take more than a second; on Azure the end is also stamped with the
/// service's `Date`, in whole seconds, up to a second early), short enough
/// to wait out.
const SHORT_PERIOD: u64 = 6;

/// An environment on `store` whose store exists and is past any quarantine
/// of a new store (so that waiting below means "held", nothing else).
fn warm(store: &str) -> Option<Env> {
    let env = Env::on(store)?;
    env.warm_up(ttl(store));
    Some(env)
}

fn lines(env: &Env, name: &str) -> usize {
    std::fs::read_to_string(env.path(name))
        .unwrap_or_default()
        .lines()
        .count()
}

fn status(env: &Env, key: &str) -> serde_json::Value {
    env.json(&["status", key, "--json"])
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn five_at_once_run_the_command_once(store: &str) {
    let Some(env) = warm(store) else { return };
    let fifo = env.path("go");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // The command notes that it ran, then blocks until the test has seen
    // the four others wait.
    let script = r#"echo ran >> "$D/ran"; cat "$D/go" > /dev/null"#;
    let before = now_ms();
    let (tx, rx) = mpsc::channel();
    let mut children = Vec::new();
    for i in 0..5 {
        let mut child = env.spawn(&[
            "run",
            "nightly",
            "--once-per",
            "1h",
            "--wait",
            "60s",
            "--ttl",
            ttl(store),
            "--owner",
            &format!("vm-{i}"),
            "--",
            "sh",
            "-c",
            script,
        ]);
        let stderr = child.stderr.take().unwrap();
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut all = String::new();
            for line in std::io::BufReader::new(stderr).lines() {
                let line = line.unwrap();
                if line.contains("waiting for nightly: held by") {
                    tx.send(None).unwrap();
                }
                all.push_str(&line);
                all.push('\n');
            }
            tx.send(Some((i, all))).unwrap();
        });
        children.push(child);
    }
    let mut waiting = 0;
    let mut done = Vec::new();
    while waiting < 4 {
        match rx
            .recv_timeout(Duration::from_secs(90))
            .expect("four runs wait")
        {
            None => waiting += 1,
            Some(finished) => panic!("a run ended before the others waited: {finished:?}"),
        }
    }
    // Let the running command finish.
    drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
    for child in &mut children {
        let code = wait_with_timeout(child, Duration::from_secs(90));
        assert_eq!(code, Some(0), "every run exits 0");
    }
    drop(tx);
    done.extend(rx.iter().flatten());
    assert_eq!(lines(&env, "ran"), 1, "the command ran exactly once");
    let skipped: Vec<_> = done
        .iter()
        .filter(|(_, err)| {
            err.contains("nightly: last succeeded") && err.contains("not running the command")
        })
        .collect();
    assert_eq!(skipped.len(), 4, "four skipped, saying so: {done:?}");
    let status = status(&env, "nightly");
    let success = &status["last_success"];
    assert_eq!(success["outcome"], "succeeded", "{status}");
    assert_eq!(success["exit_code"], 0);
    let ended = success["ended_at_unix_ms"].as_u64().unwrap();
    assert!(
        ended + 60_000 >= before && ended <= now_ms() + 60_000,
        "{status}"
    );
    let runner = success["owner"]["label"].as_str().unwrap().to_string();
    // The skips name where it last succeeded.
    for (_, err) in skipped {
        assert!(err.contains(&runner), "{err}");
    }
}

fn failed_runs_are_retried_and_successes_skip(store: &str) {
    let Some(env) = warm(store) else { return };
    let run = |script: &str| {
        let script = format!(r#"echo ran >> "$D/ran"; {script}"#);
        env.output(&hourly_job(
            store,
            &["--owner", "vm-a"],
            &["sh", "-c", &script],
        ))
    };
    // Failed: no success; the attempt is the last run.
    let out = run("exit 3");
    assert_eq!(out.code, Some(3), "{out:?}");
    let s = status(&env, "job");
    assert!(s["last_success"].is_null(), "{s}");
    assert_eq!(s["last_run"]["outcome"], "failed", "{s}");
    assert_eq!(s["last_run"]["exit_code"], 3, "{s}");
    // Killed by a signal: the same.
    let out = run("kill -KILL $$");
    assert_eq!(out.code, Some(128 + libc::SIGKILL), "{out:?}");
    let s = status(&env, "job");
    assert!(s["last_success"].is_null(), "{s}");
    assert_eq!(s["last_run"]["exit_code"], 128 + libc::SIGKILL, "{s}");
    // Not even started: the same.
    let out = env.output(&hourly_job(store, &[], &["/nonexistent/cmd"]));
    assert_eq!(out.code, Some(127), "{out:?}");
    assert!(status(&env, "job")["last_success"].is_null());
    // So the next run runs, and succeeds.
    let out = run("exit 0");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(lines(&env, "ran"), 3);
    let s = status(&env, "job");
    assert_eq!(s["last_success"]["outcome"], "succeeded", "{s}");
    assert_eq!(s["last_success"], s["last_run"]);
    // Within the period: skipped, exit 0, one line on stderr.
    let out = run("exit 0");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        lines(&env, "ran"),
        3,
        "a run within the period ran the command"
    );
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("job: last succeeded") && out.stderr.contains("by vm-a"),
        "{}",
        out.stderr
    );
    // `status` and `list` show it to people.
    let human = env.output(&["status", "job"]);
    assert!(
        human.stdout.contains("last success:") && human.stdout.contains("vm-a"),
        "{human:?}"
    );
    let list = env.output(&["list"]);
    assert!(
        list.stdout
            .lines()
            .any(|l| l.starts_with("job\t") && l.contains("last success")),
        "{list:?}"
    );
}

fn a_run_after_the_period_runs_again(store: &str) {
    let Some(env) = warm(store) else { return };
    let period = SHORT_PERIOD;
    let once_per = format!("{period}s");
    let run = || {
        counted_run(
            &env,
            &["run", "job", "--once-per", &once_per, "--ttl", ttl(store)],
        )
    };
    assert_eq!(run().code, Some(0));
    assert_eq!(run().code, Some(0));
    assert_eq!(
        lines(&env, "ran"),
        1,
        "the second run, within {period}s, skipped"
    );
    let ended = status(&env, "job")["last_success"]["ended_at_unix_ms"]
        .as_u64()
        .unwrap();
    // The period itself is what this test is about: let it pass.
    let wait = (ended + period * 1_000 + 100).saturating_sub(now_ms());
    std::thread::sleep(Duration::from_millis(wait));
    let out = run();
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        lines(&env, "ran"),
        2,
        "a run after the period ran the command: {out:?}"
    );
}

fn a_run_that_lost_its_lease_records_no_success(store: &str) {
    let Some(env) = warm(store) else { return };
    let mut child = env.spawn(&hourly_job(
        store,
        &[],
        &["sh", "-c", "echo started; exec sleep 600"],
    ));
    let mut out = stdout_reader(&mut child);
    let line = read_line(&mut out);
    if line != "started" {
        let code = child.wait().unwrap();
        let err = read_all(child.stderr.as_mut().unwrap());
        panic!("the run did not start: {code:?} {err}");
    }
    let broke = env.output(&["break", "job"]);
    assert_eq!(broke.code, Some(0), "{broke:?}");
    let code = wait_with_timeout(&mut child, Duration::from_secs(60));
    assert_eq!(code, Some(76), "the lost run exits 76");
    let s = status(&env, "job");
    assert!(
        s["last_success"].is_null(),
        "a lost run recorded a success: {s}"
    );
    if !s["last_run"].is_null() {
        assert_eq!(s["last_run"]["outcome"], "lease_lost", "{s}");
    }
    // So the next run runs the command.
    let next = env.output(&hourly_job(store, &[], &["sh", "-c", "echo again"]));
    assert_eq!(next.code, Some(0), "{next:?}");
    assert_eq!(next.stdout, "again\n");
}

on_every_store!(
    five_at_once_run_the_command_once,
    failed_runs_are_retried_and_successes_skip,
    a_run_after_the_period_runs_again,
    a_run_that_lost_its_lease_records_no_success
);

/// `leasehold ARGS -- sh -c SCRIPT` (a script that prints `started`
/// first), sent `signal` once its command started; with its stdout.
fn signalled_once_started(
    env: &Env,
    args: &str,
    script: &str,
    signal: i32,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let (child, out) = env.spawn_until(&sh(args, script), "started");
    kill(child.id(), signal);
    (child, out)
}

/// Told to stop (SIGTERM forwarded), a command that exits 0 anyway has not
/// succeeded: no success is recorded.
#[test]
fn an_interrupted_run_records_no_success() {
    let env = Env::new();
    let (mut child, _out) = signalled_once_started(
        &env,
        "run job --once-per 1h",
        "trap 'exit 0' TERM; echo started; while :; do sleep 0.1; done",
        libc::SIGTERM,
    );
    assert_eq!(
        wait_with_timeout(&mut child, Duration::from_secs(30)),
        Some(0)
    );
    let s = status(&env, "job");
    assert!(s["last_success"].is_null(), "{s}");
    assert_eq!(s["last_run"]["outcome"], "interrupted", "{s}");
}

/// A store that lost its data (the SQLite file deleted) has no record of
/// the last success: the job runs.
#[test]
fn a_store_that_lost_its_data_runs_the_job() {
    let env = Env::new();
    let run = || counted_run(&env, &["run", "job", "--once-per", "1h"]);
    assert_eq!(run().code, Some(0));
    assert_eq!(run().code, Some(0));
    assert_eq!(lines(&env, "ran"), 1);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(env.path(&format!("leases.db{suffix}")));
    }
    let out = run();
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(lines(&env, "ran"), 2, "the job ran again on the new store");
}

/// A success stamped by a clock ahead of ours (a skewed writer) counts as
/// just now: skipped, and said so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_from_a_clock_ahead_counts_as_just_now() {
    let env = Env::new();
    let store = env.store();
    let backend = store.backend().clone();
    let lease =
        leasehold_testkit::conformance::raw_lease(backend.as_ref(), "job", Duration::from_secs(5))
            .await;
    let ahead = SystemTime::now() + Duration::from_secs(600);
    let run = leasehold::RunRecord::new(
        leasehold::RunOutcome::Succeeded,
        ahead,
        ahead,
        leasehold::Owner::current(),
        lease.fencing_token,
    );
    backend.record_run(&lease, &run).await.unwrap();
    backend.release(&lease).await.unwrap();
    let out = env.output(&sh("run job --once-per 1h", "echo ran"));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "", "skipped");
    assert!(
        out.stderr.contains("last succeeded just now"),
        "{}",
        out.stderr
    );
}

#[test]
fn once_per_usage_errors_exit_2_before_anything_runs() {
    let env = Env::new();
    for args in [
        &sh("run job --once-per 0", "echo ran")[..],
        &sh("run job --once-per 0ms", "echo ran"),
        &sh("run job --once-per -5m", "echo ran"),
        &sh("run job --once-per nightly", "echo ran"),
        &sh("run job --once-per 1h --limit 2", "echo ran"),
        &sh("elect job --once-per 1h", "echo ran"),
    ] {
        let out = env.output(args);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert_eq!(out.stdout, "", "{args:?}");
    }
}

/// A run whose leasehold is killed (`kill -9`) records nothing: once its
/// lease runs out, the next attempt runs the command.
#[test]
fn a_killed_leasehold_records_nothing_and_the_next_attempt_runs() {
    let env = Env::new();
    let (mut child, _out) = signalled_once_started(
        &env,
        "run job --once-per 1h --ttl 2s",
        "echo started; exec sleep 600",
        libc::SIGKILL,
    );
    child.wait().unwrap();
    let s = status(&env, "job");
    assert!(
        s["last_success"].is_null() && s["last_run"].is_null(),
        "{s}"
    );
    let next = env.output(&sh("run job --once-per 1h --wait 30s", "echo again"));
    assert_eq!(next.code, Some(0), "{next:?}");
    assert_eq!(next.stdout, "again\n");
    assert_eq!(status(&env, "job")["last_success"]["outcome"], "succeeded");
}
