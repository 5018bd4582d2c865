//! `run --limit`, `elect` and `leader` across real processes on SQLite.

mod common;

use std::io::BufReader;
use std::time::Duration;

use common::*;

const SECS: Duration = Duration::from_secs(1);

#[test]
fn run_with_limit_3_never_runs_more_than_3_and_runs_all_10() {
    let env = Env::new();
    std::fs::create_dir(env.path("in")).unwrap();
    // Each command marks itself present, counts who is present, and claims
    // its slot exclusively (mkdir fails if another command has the slot).
    let section = r#"mkdir "$D/slot-$LEASEHOLD_SLOT" || exit 99
touch "$D/in/$$"
ls "$D/in" | wc -l >> "$D/counts"
echo "$LEASEHOLD_SLOT $LEASEHOLD_FENCING_TOKEN" >> "$D/tokens"
sleep 0.3
rm "$D/in/$$"
rmdir "$D/slot-$LEASEHOLD_SLOT""#;
    let mut children: Vec<_> = (0..10)
        .map(|_| {
            env.spawn(&[
                "run", "--limit", "3", "--wait", "60s", "jobs", "--", "sh", "-c", section,
            ])
        })
        .collect();
    for child in &mut children {
        assert_eq!(wait_with_timeout(child, 60 * SECS), Some(0));
    }
    let counts: Vec<usize> = std::fs::read_to_string(env.path("counts"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 10, "all 10 ran");
    let most = *counts.iter().max().unwrap();
    assert!(most <= 3, "{most} ran at once: {counts:?}");
    assert!(most >= 2, "permits were not used in parallel: {counts:?}");
    let tokens = std::fs::read_to_string(env.path("tokens")).unwrap();
    for line in tokens.lines() {
        let (slot, _token) = line.split_once(' ').unwrap();
        assert!(slot.parse::<u32>().unwrap() < 3, "{line}");
    }
}

#[test]
fn run_with_a_full_semaphore_exits_75() {
    let env = Env::new();
    let (mut holder, _out) =
        env.spawn_until(&sh("run --limit 1 sem", "echo in; exec sleep 1000"), "in");
    let full = env.output(&["run", "--limit", "1", "sem", "--", "true"]);
    assert_eq!(full.code, Some(75), "{full:?}");
    kill(holder.id(), libc::SIGTERM);
    wait_with_timeout(&mut holder, 10 * SECS);
}

/// `--limit 1` is the lock on KEY: a plain `run KEY` and `run KEY --limit
/// 1` never run at once, whichever came first; the command still gets
/// slot 0.
#[test]
fn run_with_limit_1_and_run_without_a_limit_exclude_each_other() {
    let env = Env::new();
    for (first, second) in [
        (&["run", "--limit", "1"][..], &["run"][..]),
        (&["run"][..], &["run", "--limit", "1"][..]),
    ] {
        let mut args = first.to_vec();
        args.extend([
            "job",
            "--",
            "sh",
            "-c",
            "echo in $LEASEHOLD_SLOT; exec sleep 1000",
        ]);
        let mut holder = env.spawn(&args);
        let mut out = stdout_reader(&mut holder);
        let slot = if first.len() > 1 { "in 0" } else { "in" };
        assert_eq!(read_line(&mut out).trim_end(), slot);
        let mut args = second.to_vec();
        args.extend(["job", "--", "true"]);
        let other = env.output(&args);
        assert_eq!(other.code, Some(75), "{first:?} then {second:?}: {other:?}");
        kill(holder.id(), libc::SIGTERM);
        wait_with_timeout(&mut holder, 10 * SECS);
    }
}

#[test]
fn elect_moves_leadership_within_a_ttl_and_a_poll_after_kill_9() {
    let env = Env::new();
    let script = "echo $LEASEHOLD_FENCING_TOKEN; exec sleep 1000";
    let mut a = env.spawn(&[
        "elect", "--ttl", "1s", "--grace", "100ms", "--owner", "a", "svc", "--", "sh", "-c", script,
    ]);
    let term_a: u64 = read_line(&mut stdout_reader(&mut a)).parse().unwrap();
    let leader = env.output(&["leader", "svc", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&leader.stdout).unwrap();
    assert_eq!(json["owner"]["label"], "a");
    assert_eq!(json["fencing_token"], term_a);

    let mut b = env.spawn(&[
        "elect", "--ttl", "1s", "--grace", "100ms", "--owner", "b", "svc", "--", "sh", "-c", script,
    ]);
    let mut b_out = stdout_reader(&mut b);
    kill(a.id(), libc::SIGKILL);
    let killed_at = std::time::Instant::now();
    a.wait().unwrap();
    let term_b: u64 = read_line(&mut b_out).parse().unwrap();
    let took = killed_at.elapsed();
    assert!(term_b > term_a);
    // One TTL (1 s) + one poll (100 ms), with slack for a loaded machine.
    assert!(
        took < Duration::from_millis(2500),
        "leadership moved after {took:?}"
    );
    let leader = env.output(&["leader", "svc"]);
    assert!(leader.stdout.contains("held by b"), "{}", leader.stdout);
    kill(b.id(), libc::SIGTERM);
    wait_with_timeout(&mut b, 10 * SECS);
}

#[test]
fn elect_campaigns_again_after_the_command_exits_until_interrupted() {
    let env = Env::new();
    let mut e = env.spawn(&sh(
        "elect --ttl 1s --grace 100ms cron",
        "echo $LEASEHOLD_FENCING_TOKEN",
    ));
    let mut out: BufReader<_> = stdout_reader(&mut e);
    let terms: Vec<u64> = (0..3)
        .map(|_| read_line(&mut out).parse().unwrap())
        .collect();
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");
    kill(e.id(), libc::SIGTERM);
    // 143 if the signal came while campaigning; the command's own code (0,
    // or 143 if the forwarded signal killed it) if it came while it ran.
    let code = wait_with_timeout(&mut e, 10 * SECS);
    assert!(matches!(code, Some(0) | Some(143)), "{code:?}");
    let leader = env.output(&["leader", "cron", "--json"]);
    assert_eq!(leader.stdout.trim(), "null", "resigned on the way out");
}

/// A command that keeps failing is restarted after pauses that double
/// (not five times a second), and a success brings the pause back down.
#[test]
fn elect_backs_off_while_the_command_keeps_failing() {
    let env = Env::new();
    // Fails three times, then succeeds (a counter in a file), then fails.
    let script = "n=$(cat \"$D/n\" 2>/dev/null || echo 0); echo $((n + 1)) > \"$D/n\"; \
                  [ $n -eq 3 ]";
    let mut e = env.spawn(&[
        "elect",
        "--ttl",
        "1s",
        "--grace",
        "100ms",
        // The pauses' floor: no higher than the first one, to see them double.
        "--poll-cap",
        "100ms",
        "flaky",
        "--",
        "sh",
        "-c",
        script,
    ]);
    let mut err = BufReader::new(e.stderr.take().unwrap());
    let mut pauses = Vec::new();
    while pauses.len() < 5 {
        let line = read_line(&mut err);
        assert!(!line.is_empty(), "elect ended: {pauses:?}");
        if let Some((_, pause)) = line.rsplit_once("campaigning again in ") {
            pauses.push(pause.to_string());
        }
    }
    assert_eq!(pauses, ["400ms", "800ms", "1s 600ms", "200ms", "400ms"]);
    kill(e.id(), libc::SIGTERM);
    wait_with_timeout(&mut e, 10 * SECS);
}

/// After the command exits, the key is left free for at least the poll
/// cap (default 2 s) before this instance campaigns again: a candidate
/// that has waited long elsewhere polls at most that far apart, and gets
/// its turn.
#[test]
fn elect_leaves_the_key_free_for_a_poll_cap_after_the_command_exits() {
    let env = Env::new();
    for (extra, pause) in [(&[][..], "2s"), (&["--poll-cap", "5s"][..], "5s")] {
        let args = [
            &["elect", "--ttl", "1s", "--grace", "100ms"][..],
            extra,
            &["turns", "--", "true"],
        ]
        .concat();
        let mut e = env.spawn(&args);
        let mut err = BufReader::new(e.stderr.take().unwrap());
        let said = loop {
            let line = read_line(&mut err);
            assert!(!line.is_empty(), "elect ended");
            if let Some((_, p)) = line.rsplit_once("campaigning again in ") {
                break p.trim().to_string();
            }
        };
        assert_eq!(said, pause, "{extra:?}");
        kill(e.id(), libc::SIGTERM);
        wait_with_timeout(&mut e, 10 * SECS);
    }
}

#[test]
fn a_lost_leadership_stops_the_command_and_campaigns_again() {
    let env = Env::new();
    let script = "echo $LEASEHOLD_FENCING_TOKEN; exec sleep 1000";
    let mut e = env.spawn(&[
        "elect", "--ttl", "1s", "--grace", "100ms", "svc", "--", "sh", "-c", script,
    ]);
    let mut out = stdout_reader(&mut e);
    let first: u64 = read_line(&mut out).parse().unwrap();
    let broke = env.output(&["break", "svc"]);
    assert_eq!(broke.code, Some(0));
    let second: u64 = read_line(&mut out).parse().unwrap();
    assert!(second > first);
    kill(e.id(), libc::SIGTERM);
    wait_with_timeout(&mut e, 10 * SECS);
}

#[test]
fn verbose_prints_a_metrics_summary() {
    let env = Env::new();
    let out = env.output(&["-v", "run", "k", "--", "true"]);
    assert_eq!(out.code, Some(0));
    assert!(
        out.stderr
            // A plain run is the writer of KEY's reader-writer lock.
            .contains("leasehold_acquires_total{backend=sqlite,kind=write,outcome=acquired} 1"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("leasehold_releases_total"),
        "{}",
        out.stderr
    );
}

/// `leader --follow --json`: the leader now, then one line per change. A
/// resignation in another process is shown at once though the follower
/// asks only every minute (SQLite tells of releases), and a new leader at
/// the follower's next ask.
#[test]
fn leader_follow_shows_each_change_and_is_woken_by_a_release() {
    let env = Env::new();
    let (mut holder, _out) =
        env.spawn_until(&sh("run --owner first k", "echo in; exec sleep 300"), "in");
    let mut follower = env.spawn(&["leader", "k", "--follow", "--json", "--every", "60s"]);
    let mut lines = stdout_reader(&mut follower);
    let line = |lines: &mut BufReader<_>| -> serde_json::Value {
        serde_json::from_str(&read_line(lines)).unwrap()
    };
    let now = line(&mut lines);
    assert_eq!(now["leader"]["owner"]["label"], "first", "{now}");
    let asked = std::time::Instant::now();
    kill(holder.id(), libc::SIGTERM);
    wait_with_timeout(&mut holder, 10 * SECS);
    let gone = line(&mut lines);
    assert!(gone["leader"].is_null(), "{gone}");
    assert!(
        asked.elapsed() < 20 * SECS,
        "not woken by the release: {:?}",
        asked.elapsed()
    );
    kill(follower.id(), libc::SIGINT);
    assert_eq!(wait_with_timeout(&mut follower, 10 * SECS), Some(130));

    // Asking often, it sees the next leader, and its text says so.
    let mut follower = env.spawn(&["leader", "k", "--follow", "--every", "100ms"]);
    let mut lines = stdout_reader(&mut follower);
    assert_eq!(read_line(&mut lines), "k: no leader");
    let (mut holder, _out) =
        env.spawn_until(&sh("run --owner second k", "echo in; exec sleep 300"), "in");
    let shown = read_line(&mut lines);
    assert!(
        shown.starts_with("k: held by ") && shown.contains("second"),
        "{shown}"
    );
    kill(holder.id(), libc::SIGTERM);
    wait_with_timeout(&mut holder, 10 * SECS);
    kill(follower.id(), libc::SIGTERM);
    assert_eq!(wait_with_timeout(&mut follower, 10 * SECS), Some(143));
}

/// `run --limit 4 --permits P`: runs taking 3, 2 and 1 of 4 permits, each
/// a process waiting for its permits: all of them run (two takers of
/// several permits never hold part each while waiting), never two on one
/// slot; a run that cannot have all its permits without waiting takes
/// none (exit 75) and says so.
#[test]
fn runs_of_several_permits_take_turns_without_deadlock() {
    let env = Env::new();
    let section = r#"for s in ${LEASEHOLD_SLOTS:-$LEASEHOLD_SLOT}; do mkdir "$D/slot-$s" || exit 99; done
echo "${LEASEHOLD_SLOTS:-$LEASEHOLD_SLOT}" >> "$D/log"
sleep 0.1
for s in ${LEASEHOLD_SLOTS:-$LEASEHOLD_SLOT}; do rmdir "$D/slot-$s"; done"#;
    let mut children: Vec<_> = ["3", "3", "2", "2", "1", "1"]
        .iter()
        .map(|p| {
            env.spawn(&[
                "run",
                "--limit",
                "4",
                "--permits",
                p,
                "--wait",
                "60s",
                "jobs",
                "--",
                "sh",
                "-c",
                section,
            ])
        })
        .collect();
    for child in &mut children {
        let code = wait_with_timeout(child, 90 * SECS);
        let err = read_all(child.stderr.as_mut().unwrap());
        assert_eq!(code, Some(0), "{err}");
    }
    let log = std::fs::read_to_string(env.path("log")).unwrap();
    let mut sizes: Vec<usize> = log.lines().map(|l| l.split(' ').count()).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [1, 1, 2, 2, 3, 3], "{log}");

    let (mut holder, _out) = env.spawn_until(
        &sh("run --limit 4 --permits 2 jobs", "echo in; exec sleep 300"),
        "in",
    );
    let refused = env.output(&sh("run --limit 4 --permits 3 jobs", "echo ran"));
    assert_eq!(refused.code, Some(75), "{refused:?}");
    assert!(
        refused.stderr.contains("fewer than 3 of the 4 permits"),
        "{refused:?}"
    );
    // It took none: two permits are still to be had.
    let two = env.output(&sh("run --limit 4 --permits 2 jobs", "echo ran"));
    assert_eq!(two.code, Some(0), "{two:?}");
    kill(holder.id(), libc::SIGTERM);
    wait_with_timeout(&mut holder, 10 * SECS);
}
