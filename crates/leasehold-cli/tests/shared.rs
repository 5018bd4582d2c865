//! `run --shared`: readers of a key, across real processes on SQLite.
//! A plain `run` of the key is its writer.

mod common;

use std::io::BufReader;
use std::process::{Child, ChildStderr};
use std::time::Duration;

use common::*;

const SECS: Duration = Duration::from_secs(1);

fn stderr_reader(child: &mut Child) -> BufReader<ChildStderr> {
    BufReader::new(child.stderr.take().unwrap())
}

fn stop(mut child: Child) {
    kill(child.id(), libc::SIGTERM);
    wait_with_timeout(&mut child, 10 * SECS);
}

/// Two `--shared` runs of one key run at once: the second starts its
/// command while the first one's command is still running.
#[test]
fn shared_runs_of_a_key_run_at_once() {
    let env = Env::new();
    let (a, _a_out) = env.spawn_until(&sh("run --shared k", "echo in; exec sleep 1000"), "in");
    let (b, _b_out) = env.spawn_until(&sh("run --shared k", "echo in; exec sleep 1000"), "in");
    assert!(alive(a.id() as i32), "the first reader ended");
    stop(a);
    stop(b);
}

/// A plain run and a `--shared` run of one key exclude each other,
/// whichever came first: the second exits 75.
#[test]
fn a_plain_run_and_a_shared_run_exclude_each_other() {
    let env = Env::new();
    for (first, second) in [("run --shared k", "run k"), ("run k", "run --shared k")] {
        let (holder, _out) = env.spawn_until(&sh(first, "echo in; exec sleep 1000"), "in");
        let other = env.output(&sh(second, "echo ran"));
        assert_eq!(other.code, Some(75), "{first} then {second}: {other:?}");
        assert!(other.stdout.is_empty(), "{other:?}");
        stop(holder);
    }
}

/// Writer preference across processes: a plain run that waits for a
/// `--shared` run goes before a `--shared` run that comes after it, and
/// `status` shows the reader and the waiting writer meanwhile.
#[test]
fn a_waiting_plain_run_goes_before_later_shared_runs() {
    let env = Env::new();
    let (reader, _out) = env.spawn_until(
        &sh(
            "run --shared --owner reader-1 k",
            "echo in; exec sleep 1000",
        ),
        "in",
    );
    let status = env.output(&["status", "k"]);
    assert!(
        status.stdout.contains("shared by 1 reader\n") && status.stdout.contains("reader-1"),
        "{status:?}"
    );

    let mut writer = env.spawn(&sh(
        "run --wait 60s --owner writer-1 k",
        r#"echo w >> "$D/order""#,
    ));
    let waiting = read_message(&mut stderr_reader(&mut writer));
    assert!(
        waiting.starts_with("leasehold: waiting for k: held by") && waiting.contains("reader-1"),
        "{waiting}"
    );
    // The writer keeps the key while it waits.
    let json = env.json(&["status", "k", "--json"]);
    assert_eq!(json["writer_waiting"], true, "{json}");
    assert_eq!(json["readers"].as_array().unwrap().len(), 1, "{json}");
    let status = env.output(&["status", "k"]);
    assert!(
        status
            .stdout
            .contains("held by a writer waiting for 1 reader to finish"),
        "{status:?}"
    );

    // A reader that comes now waits behind the writer.
    let mut later = env.spawn(&sh(
        "run --shared --wait 60s --owner reader-2 k",
        r#"echo r >> "$D/order""#,
    ));
    let waiting = read_message(&mut stderr_reader(&mut later));
    assert!(
        waiting.starts_with("leasehold: waiting for k: held by") && waiting.contains("writer-1"),
        "a reader after a waiting writer did not wait: {waiting:?}"
    );
    stop(reader);
    assert_eq!(wait_with_timeout(&mut writer, 60 * SECS), Some(0));
    assert_eq!(wait_with_timeout(&mut later, 60 * SECS), Some(0));
    let order = std::fs::read_to_string(env.path("order")).unwrap();
    assert_eq!(order, "w\nr\n");
}

/// `break KEY` while only readers hold it breaks nothing, names their
/// reader slots and exits 2; `break` of a reader slot ends that reader's
/// lease, and its run is stopped (76).
#[test]
fn break_names_the_readers_and_breaks_a_reader_slot() {
    let env = Env::new();
    let (mut reader, _out) = env.spawn_until(
        &sh(
            "run --shared --ttl 2s --grace 200ms k",
            "echo in; exec sleep 1000",
        ),
        "in",
    );
    let out = env.output(&["break", "k"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    let slot = out
        .stderr
        .split_whitespace()
        .find(|w| {
            w.strip_prefix("k/:read:")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .unwrap_or_else(|| panic!("no reader slot named: {out:?}"))
        .to_string();
    assert!(alive(reader.id() as i32));
    let out = env.output(&["break", &slot]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(wait_with_timeout(&mut reader, 10 * SECS), Some(76));
}

/// `--shared` with `--limit` or `--once-per` is a usage error (exit 2)
/// that names both options.
#[test]
fn shared_with_limit_or_once_per_is_a_usage_error() {
    let env = Env::new();
    for (other, value) in [("--limit", "2"), ("--once-per", "1h")] {
        let out = env.output(&["run", "--shared", other, value, "k", "--", "true"]);
        assert_eq!(out.code, Some(2), "{out:?}");
        assert!(
            out.stderr.contains("--shared") && out.stderr.contains(other),
            "{out:?}"
        );
    }
}
