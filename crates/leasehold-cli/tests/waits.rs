//! `--wait` and `--connect-timeout` on every store (issue 29): opening the
//! store has its own bound and is not taken out of `--wait`; `--wait 0s`
//! is one try for the lock; a store that stops answering for a while
//! during a wait is tried again until the wait ends. The servers are
//! reached through a proxy that the tests cut and restore.

mod common;

use std::time::{Duration, Instant};

use common::*;

const SERVER_STORES: [&str; 8] = [
    "azblob",
    "dynamodb",
    "postgres",
    "mysql",
    "redis",
    "etcd",
    "s3",
    "zookeeper",
];

/// A TTL the test store accepts (its max TTL: Azure containers 15 s, S3
/// stores 4 s, the other stores 2 s, see `Env::on`).
fn ttl(env: &Env) -> &'static str {
    if env.url().starts_with("azblob:") {
        "15s"
    } else if env.url().starts_with("s3:") {
        "4s"
    } else {
        "2s"
    }
}

/// Waits out a new store's quarantine (see [`Env::warm_up`]).
fn warm_up(env: &Env) {
    env.warm_up(ttl(env));
}

/// `run KEY -- sh -c 'echo held; exec sleep 300'`, once it holds KEY.
fn holder(env: &Env, key: &str) -> std::process::Child {
    let mut child = env.spawn(&[
        "run",
        key,
        "--ttl",
        ttl(env),
        "--",
        "sh",
        "-c",
        "echo held; exec sleep 300",
    ]);
    let mut out = stdout_reader(&mut child);
    if read_line(&mut out) != "held" {
        child.wait().unwrap();
        panic!("{}", read_all(child.stderr.as_mut().unwrap()));
    }
    child
}

/// Ends a [`holder`]: its command is stopped and the lease released.
fn end(mut holder: std::process::Child) {
    kill(holder.id(), libc::SIGTERM);
    holder.wait().unwrap();
}

/// `run k --wait 60s -- true`, started.
fn waiter(env: &Env) -> std::process::Child {
    env.spawn(&["run", "k", "--ttl", ttl(env), "--wait", "60s", "--", "true"])
}

/// An environment on `store` through a [`Proxy`], and that proxy, cut; or
/// `None` (skipped) when the store's test server is not configured.
fn cut_off(store: &str) -> Option<(Env, Proxy)> {
    let mut env = Env::on(store)?;
    let proxy = env.through_proxy().unwrap();
    proxy.cut();
    Some((env, proxy))
}

/// The store is back (`proxy` restored): the [`waiter`] runs its command
/// and exits 0.
fn runs_once_restored(proxy: &Proxy, waiter: std::process::Child, store: &str) {
    proxy.restore();
    let (code, stderr) = ended(waiter, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{store}: {stderr}");
}

/// A [`waiter`]'s exit code and stderr, once it has ended (within `timeout`).
fn ended(mut waiter: std::process::Child, timeout: Duration) -> (Option<i32>, String) {
    let code = wait_with_timeout(&mut waiter, timeout);
    (code, read_all(waiter.stderr.as_mut().unwrap()))
}

#[test]
fn a_zero_wait_is_one_try_on_every_store() {
    for store in ["sqlite"].into_iter().chain(SERVER_STORES) {
        let Some(env) = Env::on(store) else { continue };
        warm_up(&env);
        let out = env.output(&["run", "k", "--ttl", ttl(&env), "--wait", "0s", "--", "true"]);
        assert_eq!(out.code, Some(0), "{store}: {}", out.stderr);
        let held = holder(&env, "k");
        let out = env.output(&[
            "run",
            "k",
            "--ttl",
            ttl(&env),
            "--wait",
            "0s",
            "--json",
            "--",
            "true",
        ]);
        assert_eq!(out.code, Some(75), "{store}: {}", out.stderr);
        assert!(
            out.stderr.contains("\"not_obtained\""),
            "{store}: {}",
            out.stderr
        );
        end(held);
    }
}

#[test]
fn a_wait_rides_out_a_store_that_stops_answering_for_a_while() {
    for store in SERVER_STORES {
        let Some(mut env) = Env::on(store) else {
            continue;
        };
        warm_up(&env);
        let held = holder(&env, "k");
        let proxy = env.through_proxy().unwrap();
        let mut waiter = waiter(&env);
        // The waiter has opened the store and asked for the key a few
        // times (every request goes through the proxy).
        let started = Instant::now();
        while proxy.writes() < 8 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{store}: no requests"
            );
            assert!(waiter.try_wait().unwrap().is_none(), "{store}: ended early");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The store is unreachable for 3 s, and the key is freed meanwhile.
        proxy.cut();
        end(held);
        std::thread::sleep(Duration::from_secs(3));
        runs_once_restored(&proxy, waiter, store);
    }
}

/// An unreachable store: exit 1 with the cause (never 75, which says the
/// key is held), once opening (`--connect-timeout`) or, for a store that
/// connects on first use, the wait has run out.
#[test]
fn an_unreachable_store_is_exit_1_with_the_cause() {
    for store in SERVER_STORES {
        let Some((env, _proxy)) = cut_off(store) else {
            continue;
        };
        let started = Instant::now();
        let out = env.output(&[
            "run",
            "k",
            "--ttl",
            ttl(&env),
            "--connect-timeout",
            "2s",
            "--wait",
            "3s",
            "--",
            "true",
        ]);
        let took = started.elapsed();
        assert_eq!(out.code, Some(1), "{store}: {}", out.stderr);
        assert!(took < Duration::from_secs(20), "{store}: {took:?}");
        assert!(!out.stderr.contains("held by"), "{store}: {}", out.stderr);
    }
}

/// A `run --wait` started while the store is unreachable (its server
/// restarting, a network blip) runs once the store is back, within the
/// wait: opening and the wait both try again.
#[test]
fn a_wait_started_while_the_store_is_unreachable_runs_once_it_is_back() {
    for store in SERVER_STORES {
        let Some(mut env) = Env::on(store) else {
            continue;
        };
        warm_up(&env);
        let proxy = env.through_proxy().unwrap();
        proxy.cut();
        let mut waiter = waiter(&env);
        std::thread::sleep(Duration::from_secs(3));
        assert!(
            waiter.try_wait().unwrap().is_none(),
            "{store}: gave up while the store was away"
        );
        runs_once_restored(&proxy, waiter, store);
    }
}

/// Ctrl-C while the store does not answer ends leasehold at once, with
/// 128 + SIGINT, whether it is still opening the store or already waiting.
#[test]
fn ctrl_c_while_the_store_does_not_answer_ends_leasehold() {
    for store in SERVER_STORES {
        let Some((env, proxy)) = cut_off(store) else {
            continue;
        };
        let waiter = waiter(&env);
        // Until it has tried to reach the store at least once.
        let started = Instant::now();
        while proxy.refused() == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{store}: never connected"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        kill(waiter.id(), libc::SIGINT);
        let (code, stderr) = ended(waiter, Duration::from_secs(10));
        assert_eq!(code, Some(130), "{store}: {stderr}");
    }
}
