//! `leasehold --store postgres://...`, `redis://...` and `etcd://...`: real
//! `leasehold` processes on real servers (scripts/test.sh starts them;
//! skipped, loudly, without a server).

mod common;

use std::time::Duration;

use common::*;

const SECS: Duration = Duration::from_secs(1);

/// As on SQLite (`run.rs`), with a short TTL.
fn processes_take_turns_with_growing_tokens(store: &str) {
    if let Some(env) = Env::on(store) {
        common::processes_take_turns_with_growing_tokens(&env, &["--ttl", "2s"]);
    }
}

/// status, list and break see and end a lease held by another process;
/// elect and leader agree on the leader.
fn status_list_break_elect_and_leader_work(store: &str) {
    let Some(env) = Env::on(store) else {
        return;
    };
    let script = "echo $LEASEHOLD_FENCING_TOKEN; exec sleep 300";
    let holder_label = format!("{store}-holder");
    let mut holder = env.spawn(&[
        "run",
        "--wait",
        "30s",
        "--ttl",
        "2s",
        "--owner",
        &holder_label,
        "jobs/a",
        "--",
        "sh",
        "-c",
        script,
    ]);
    let token: u64 = read_line(&mut stdout_reader(&mut holder)).parse().unwrap();
    let json = env.json(&["status", "jobs/a", "--json"]);
    assert_eq!(json["holder"]["owner"]["label"], holder_label, "{json}");
    assert_eq!(json["fencing_token"], token, "{json}");
    let list = env.output(&["list", "--prefix", "jobs/"]);
    assert_eq!(list.code, Some(0), "{list:?}");
    assert!(list.stdout.contains("jobs/a"), "{list:?}");
    let broke = env.output(&["break", "jobs/a"]);
    assert_eq!(broke.code, Some(0), "{broke:?}");
    assert_eq!(
        wait_with_timeout(&mut holder, 10 * SECS),
        Some(76),
        "a broken lease exits 76"
    );

    let leader_label = format!("{store}-leader");
    let mut leader = env.spawn(&[
        "elect",
        "--ttl",
        "2s",
        "--owner",
        &leader_label,
        "svc",
        "--",
        "sh",
        "-c",
        script,
    ]);
    let term: u64 = read_line(&mut stdout_reader(&mut leader)).parse().unwrap();
    let json = env.json(&["leader", "svc", "--json"]);
    assert_eq!(json["owner"]["label"], leader_label, "{json}");
    assert_eq!(json["fencing_token"], term, "{json}");
    kill(leader.id(), libc::SIGTERM);
    wait_with_timeout(&mut leader, 10 * SECS);
}

/// A refused login never prints the password (the user name is shown).
fn a_wrong_password_is_never_printed(store: &str) {
    let Some(env) = Env::on(store) else {
        return;
    };
    let url = env.url();
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map(|(_, h)| h).unwrap_or(rest);
    // Redis: the default user; etcd's test server has no auth, and refuses
    // a user it does not know all the same.
    let user = match store {
        "postgres" => "postgres",
        "mysql" => "leasehold",
        "redis" => "",
        _ => "someone",
    };
    let bad = format!("{scheme}://{user}:Wr0ngS3cretPw@{host}");
    let out = env
        .leasehold()
        .args(["status", "k"])
        .env("LEASEHOLD_STORE", &bad)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if store == "zookeeper" {
        // ZooKeeper's digest authentication refuses no session: a wrong
        // password only fails on nodes whose ACL names the right one (this
        // test's store is open), so only the message is checked here.
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            !format!("{stdout}{stderr}").contains("Wr0ngS3cretPw"),
            "{stderr}"
        );
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let refusal = match store {
        "postgres" => stderr.contains("password authentication failed"),
        "mysql" => stderr.contains("Access denied"),
        "redis" => stderr.to_lowercase().contains("password") || stderr.contains("WRONGPASS"),
        _ => true,
    };
    assert!(refusal, "{stderr}");
    assert!(!stderr.contains("Wr0ngS3cretPw"), "{stderr}");
    // The user name is no secret, and is shown: `someone:***@`.
    if !user.is_empty() {
        assert!(stderr.contains(&format!("{user}:***@")), "{stderr}");
    }
}

on_every_server!(
    processes_take_turns_with_growing_tokens,
    status_list_break_elect_and_leader_work,
    a_wrong_password_is_never_printed,
);

/// A URL with a typo in a parameter is a usage error (exit 2), named.
#[test]
fn a_mistyped_redis_parameter_is_a_usage_error() {
    let Some(env) = Env::on("redis") else {
        return;
    };
    let out = env
        .leasehold()
        .args(["status", "k"])
        .env("LEASEHOLD_STORE", format!("{}&prefx=x", env.url()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("prefx"), "{stderr}");
}

/// A password the server asks for and nobody gave (neither the URL nor
/// PGPASSWORD) is a configuration error: it fails at once, not after
/// `--connect-timeout` of tries (it took the whole 10 s).
#[test]
fn a_missing_postgres_password_fails_at_once() {
    let Some(env) = Env::on("postgres") else {
        return;
    };
    let url = env.url();
    let (_, rest) = url.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map(|(_, h)| h).unwrap_or(rest);
    let host = host.split('/').next().unwrap();
    let started = std::time::Instant::now();
    let out = env
        .leasehold()
        .args(["--connect-timeout", "20s", "status", "k"])
        .env(
            "LEASEHOLD_STORE",
            format!("postgres://postgres@{host}/nosuchdb"),
        )
        .env_remove("PGPASSWORD")
        .env_remove("PGPASSFILE")
        .env("HOME", env.dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("password"), "{stderr}");
    assert!(
        started.elapsed() < 10 * SECS,
        "a missing password was tried again for {:?}: {stderr}",
        started.elapsed()
    );
}

/// A password given in `--store` is blanked out of the command line that
/// every user of the machine can read (`ps`, `/proc/PID/cmdline`), in
/// `leasehold` and in its watchdog, while the command runs (it was
/// visible for the whole run).
#[test]
fn a_password_in_store_is_not_left_in_the_process_list() {
    let Some(env) = Env::on("redis") else {
        return;
    };
    let url = env.url();
    let password = url
        .split_once("://:")
        .and_then(|(_, rest)| rest.split_once('@'))
        .map(|(pw, _)| pw.to_string())
        .expect("the test server's URL has a password");
    let (mut holder, _out) = env.spawn_until(
        &[
            "--store",
            &url,
            "run",
            "--ttl",
            "2s",
            "--wait",
            "10s",
            "k",
            "--",
            "sh",
            "-c",
            "echo held; exec sleep 300",
        ],
        "held",
    );
    let watchdog =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", holder.id())).unwrap();
    let watchdog: u32 = watchdog.split_whitespace().next().unwrap().parse().unwrap();
    for pid in [holder.id(), watchdog] {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            cmdline.contains("run --ttl 2s --wait 10s k"),
            "{pid}: {cmdline}"
        );
        assert!(!cmdline.contains(&password), "{pid}: {cmdline}");
        assert!(cmdline.contains("redis://***"), "{pid}: {cmdline}");
    }
    kill(holder.id(), libc::SIGTERM);
    assert_eq!(wait_with_timeout(&mut holder, 10 * SECS), Some(128 + 15));
}

/// `rediss://` to a Redis without TLS: the handshake is never answered,
/// and the message says that may be why (it said only "no answer within
/// --connect-timeout").
#[test]
fn tls_to_a_server_without_tls_says_so() {
    let Some(env) = Env::on("redis") else {
        return;
    };
    let url = env.url().replacen("redis://", "rediss://", 1);
    let out = env
        .leasehold()
        .args(["--connect-timeout", "1s", "status", "k"])
        .env("LEASEHOLD_STORE", &url)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("use redis:// if it has none"), "{stderr}");
}

/// `sslmode=require` against a PostgreSQL server without TLS fails at once
/// (exit 1, naming the cause): the server's "no TLS" is its configuration,
/// not a failure that may pass (it was tried again for the whole
/// `--connect-timeout`).
#[test]
fn postgres_tls_required_of_a_server_without_tls_fails_at_once() {
    let Some(env) = Env::on("postgres") else {
        return;
    };
    let url = env.url();
    let url = if url.contains('?') {
        format!("{url}&sslmode=require")
    } else {
        format!("{url}?sslmode=require")
    };
    let started = std::time::Instant::now();
    let out = env
        .leasehold()
        .args(["--connect-timeout", "20s", "status", "k"])
        .env("LEASEHOLD_STORE", &url)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("server does not support TLS"), "{stderr}");
    assert!(
        started.elapsed() < 10 * SECS,
        "tried again for {:?}: {stderr}",
        started.elapsed()
    );
}

/// A `profile=` that no AWS config file has is named in the error, with
/// where it is looked for (the credential chain's own words named only
/// the chain, and the user never learnt that the profile was the cause).
#[test]
fn a_missing_aws_profile_is_named() {
    let Some(env) = Env::on("dynamodb") else {
        return;
    };
    let url = env.url();
    let (base, query) = url.split_once('?').unwrap_or((&url, ""));
    let url = format!("{base}?{query}&profile=nosuch-profile").replace("?&", "?");
    let mut cmd = env.leasehold();
    // No credentials anywhere but in the (missing) profile.
    for (name, _) in std::env::vars() {
        if name.starts_with("AWS_") {
            cmd.env_remove(name);
        }
    }
    cmd.env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY");
    let out = cmd
        .args(["--connect-timeout", "20s", "status", "k"])
        .env("LEASEHOLD_STORE", &url)
        .env("HOME", env.dir.path())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the store URL names the profile \"nosuch-profile\"")
            && stderr.contains("~/.aws/config"),
        "{stderr}"
    );
}

/// On a store without a clock of its own (DynamoDB, S3), a holder that
/// stopped renewing stays the record's holder until a waiter takes the key
/// over; `status` says that its TTL has run out and what takes it over,
/// where it said "expires in: 0ms unless renewed" for minutes.
fn status_says_what_an_expired_record_means(store: &str, ttl: &str) {
    let Some(env) = Env::on(store) else {
        return;
    };
    env.warm_up(ttl);
    let (mut holder, _out) = env.spawn_until(
        &[
            "run",
            "k",
            "--ttl",
            ttl,
            "--",
            "sh",
            "-c",
            "echo started; exec sleep 300",
        ],
        "started",
    );
    // Frozen: it renews no more.
    common::kill(holder.id(), libc::SIGSTOP);
    let deadline = std::time::Instant::now() + 60 * SECS;
    let shown = loop {
        let out = env.output(&["status", "k"]);
        if out.stdout.contains("expires in:    now") || std::time::Instant::now() > deadline {
            break out;
        }
        assert!(
            out.stdout.contains("unless renewed"),
            "a held key without its expiry: {out:?}"
        );
        std::thread::sleep(SECS / 4);
    };
    common::kill(holder.id(), libc::SIGKILL);
    let _ = holder.wait();
    assert!(
        shown.stdout.contains("its TTL has run out by its record")
            && shown
                .stdout
                .contains("takes the key over once it has seen the record unchanged for a TTL"),
        "{shown:?}"
    );
}

#[test]
fn dynamodb_status_says_what_an_expired_record_means() {
    status_says_what_an_expired_record_means("dynamodb", "2s");
}

#[test]
fn s3_status_says_what_an_expired_record_means() {
    status_says_what_an_expired_record_means("s3", "4s");
}
