//! `leasehold run a b -- CMD`: several keys held all or none, by real
//! processes on every store (SQLite always; the others when scripts/test.sh
//! starts their servers).

mod common;

use std::time::Duration;

use common::*;

const SECS: Duration = Duration::from_secs(1);

/// TTL and grace per store (Azure leases last at least 15 s, S3's at
/// least 4 s).
fn lease(store: &str) -> [&'static str; 4] {
    match store {
        "azblob" => ["--ttl", "15s", "--grace", "1s"],
        "s3" => ["--ttl", "4s", "--grace", "1s"],
        _ => ["--ttl", "2s", "--grace", "500ms"],
    }
}

/// Runs of {a, b} and {b, a} (and of a and b alone), each a process of its
/// own waiting for its keys: all of them run (a deadlock would run out
/// their waits), no key is ever inside two commands at once, and each
/// key's tokens grow in the order its commands ran.
fn runs_of_two_keys_in_either_order_take_turns(store: &str) {
    let Some(env) = Env::on(store) else { return };
    // mkdir is atomic: it fails if another command holds the same key.
    let section = r#"for k in $LEASEHOLD_KEYS; do mkdir "$D/in-$k" || exit 99; done
echo "$LEASEHOLD_FENCING_TOKENS" >> "$D/log"
sleep 0.05
for k in $LEASEHOLD_KEYS; do rmdir "$D/in-$k"; done"#;
    let orders: [&[&str]; 6] = [
        &["a", "b"],
        &["b", "a"],
        &["a"],
        &["a", "b"],
        &["b", "a"],
        &["b"],
    ];
    let mut children: Vec<_> = orders
        .iter()
        .map(|keys| {
            let mut args = vec!["run", "--wait", "120s"];
            args.extend(lease(store));
            args.extend(keys.iter());
            args.extend(["--", "sh", "-c", section]);
            env.spawn(&args)
        })
        .collect();
    for (child, keys) in children.iter_mut().zip(orders) {
        let code = wait_with_timeout(child, 180 * SECS);
        let err = read_all(child.stderr.as_mut().unwrap());
        assert_eq!(code, Some(0), "run {keys:?}: {err}");
    }
    let log = std::fs::read_to_string(env.path("log")).unwrap();
    let mut tokens: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for line in log.lines() {
        let map: std::collections::BTreeMap<String, u64> = serde_json::from_str(line).unwrap();
        for (key, token) in map {
            tokens.entry(key).or_default().push(token);
        }
    }
    assert_eq!(tokens["a"].len(), 5, "{log}");
    assert_eq!(tokens["b"].len(), 5, "{log}");
    for (key, tokens) in &tokens {
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{key}: tokens out of order: {tokens:?}"
        );
    }
}

/// The loss of one key of several stops the command (exit 76), saying
/// which key was lost; the other key can be taken afterwards.
fn a_run_of_several_keys_is_stopped_when_any_one_is_lost(store: &str) {
    let Some(env) = Env::on(store) else { return };
    let mut args = vec!["run", "--wait", "60s"];
    args.extend(lease(store));
    args.extend([
        "jobs/a",
        "jobs/b",
        "--",
        "sh",
        "-c",
        "echo in; exec sleep 300",
    ]);
    let (mut holder, _out) = env.spawn_until(&args, "in");
    let broke = env.output(&["break", "jobs/b"]);
    assert_eq!(broke.code, Some(0), "{broke:?}");
    assert_eq!(
        wait_with_timeout(&mut holder, 60 * SECS),
        Some(76),
        "a run that lost one of its keys exits 76"
    );
    let err = read_all(holder.stderr.as_mut().unwrap());
    assert!(err.contains("lease on jobs/b lost"), "{err}");
    // A new store's quarantine may not be over yet: wait it out.
    let mut args = vec!["run", "--wait", "30s"];
    args.extend(lease(store));
    args.extend(["jobs/a", "--", "true"]);
    let after = env.output(&args);
    assert_eq!(after.code, Some(0), "{after:?}");
}

on_every_store!(
    runs_of_two_keys_in_either_order_take_turns,
    a_run_of_several_keys_is_stopped_when_any_one_is_lost,
);

/// A wait that runs out on the second key exits 75 naming it, and leaves
/// the first free at once (its lease would last a minute); the command
/// gets the keys and their tokens, and not the one-key variables.
#[test]
fn a_wait_that_runs_out_on_one_key_leaves_the_others_free() {
    let env = Env::new();
    let (mut holder, _out) =
        env.spawn_until(&sh("run --ttl 60s b", "echo in; exec sleep 300"), "in");
    let waited = env.output(&sh("run --ttl 60s --wait 300ms b a", "echo ran"));
    assert_eq!(waited.code, Some(75), "{waited:?}");
    assert!(waited.stdout.is_empty(), "{waited:?}");
    assert!(
        waited.stderr.contains("gave up waiting for a b") && waited.stderr.contains("(b held by"),
        "{waited:?}"
    );
    let tried = env.output(&sh("run --ttl 60s a b", "echo ran"));
    assert_eq!(tried.code, Some(75), "{tried:?}");
    assert!(
        tried.stderr.contains("b (one of a b) is held by"),
        "{tried:?}"
    );
    let free = env.output(&sh("run a", "echo ran"));
    assert_eq!(free.code, Some(0), "a was left held: {free:?}");
    kill(holder.id(), libc::SIGTERM);
    wait_with_timeout(&mut holder, 10 * SECS);

    let vars = env.output(&sh(
        "run b a b",
        r#"echo "$LEASEHOLD_KEYS|$LEASEHOLD_FENCING_TOKENS|${LEASEHOLD_KEY-none}|${LEASEHOLD_FENCING_TOKEN-none}""#,
    ));
    assert_eq!(vars.code, Some(0), "{vars:?}");
    let fields: Vec<&str> = vars.stdout.trim().split('|').collect();
    assert_eq!(fields[0], "a b", "{vars:?}");
    let tokens: std::collections::BTreeMap<String, u64> = serde_json::from_str(fields[1]).unwrap();
    assert_eq!(tokens.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(&fields[2..], ["none", "none"], "{vars:?}");
}

/// `--limit`, `--once-per` and `elect` take one key: several are a usage
/// error (exit 2), and nothing runs; so are more keys than `run` takes.
#[test]
fn options_of_one_key_refuse_several() {
    let env = Env::new();
    let many: Vec<String> = (0..257).map(|i| format!("k{i}")).collect();
    let mut args: Vec<&str> = vec!["run"];
    args.extend(many.iter().map(String::as_str));
    args.extend(["--", "echo", "ran"]);
    let out = env.output(&args);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("at most 256"), "{out:?}");
    for args in ["run --limit 2 a b", "run --once-per 1h a b", "elect a b"] {
        let out = env.output(&sh(args, "echo ran"));
        assert_eq!(out.code, Some(2), "{args}: {out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
        assert!(out.stderr.contains("takes one KEY"), "{args}: {out:?}");
    }
}
