//! Issue 29, on every store, with real processes: the commands that look
//! (`list`, `status`, `leader`) never create or change a store, and
//! `leasehold init [--new]` creates one explicitly.
//!
//! Each store's content is dumped with its own client (rusqlite, `psql`,
//! `redis-cli`, `etcdctl`, the DynamoDB and Azure SDK clients behind the
//! backends), so "unchanged" means the rows, keys and values, items, and
//! blobs with their properties (ETag, lease state) are byte-for-byte the
//! same; "does not exist" means no file, table, container or key under the
//! prefix.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{kill, piped, read_line, stdout_reader, wait_with_timeout, Env};

/// The confirmation window the command's processes use (a test build
/// reads it from the environment): the real one, so that a quarantine is
/// long enough to tell apart from none.
const WINDOW: &str = "60";

fn env_on(store: &str, max_ttl: Option<&str>) -> Option<Env> {
    let mut env = Env::on(store)?;
    if let (Some((url, _)), Some(max)) = (env.store.as_mut(), max_ttl) {
        let from = url.find("max_ttl=").expect("the test URL sets max_ttl");
        let end = url[from..].find('&').map_or(url.len(), |e| from + e);
        url.replace_range(from..end, &format!("max_ttl={max}"));
    }
    Some(env)
}

fn run(env: &Env, args: &[&str]) -> common::Output {
    let out = env
        .leasehold()
        .env("LEASEHOLD_TEST_CONFIRMATION_WINDOW", WINDOW)
        .args(args)
        .output()
        .unwrap();
    common::Output {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The URL's query parameter `name`.
fn param(url: &str, name: &str) -> String {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    query
        .split('&')
        .find_map(|p| p.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{url} has no {name}"))
        .to_string()
}

fn base(url: &str) -> &str {
    url.split_once('?').map_or(url, |(b, _)| b)
}

fn tool(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// With `env`'s credentials in this process's environment (where the
/// stores' SDK clients read them), `look` at the backend `open` opens
/// without creating a store: `None` when there is none (`Error::NoStore`).
fn look_with_credentials<B, O, L>(
    env: &Env,
    open: impl FnOnce() -> O,
    look: impl FnOnce(B) -> L,
) -> Option<String>
where
    O: std::future::Future<Output = leasehold::Result<B>>,
    L: std::future::Future<Output = Option<String>>,
{
    for (k, v) in &env.store.as_ref().unwrap().1 {
        std::env::set_var(k, v);
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        match open().await {
            Err(leasehold::Error::NoStore { .. }) => None,
            other => look(other.unwrap()).await,
        }
    })
}

/// Everything the store holds, or `None` when it does not exist.
fn dump(store: &str, env: &Env) -> Option<String> {
    let url = env.url();
    match store {
        "sqlite" => {
            let path = env.path("leases.db");
            if !path.exists() {
                return None;
            }
            Some(leasehold_testkit::conformance::sqlite_dump(&path))
        }
        "postgres" => {
            let table = param(&url, "table");
            let psql = |sql: String| tool(Command::new("psql").args([base(&url), "-Atc", &sql]));
            if psql(format!("SELECT to_regclass('{table}') IS NOT NULL")).trim() != "t" {
                return None;
            }
            Some(psql(format!(
                "SELECT row_to_json(t)::text FROM {table} t ORDER BY key"
            )))
        }
        "mysql" => {
            let table = param(&url, "table");
            // mysql://USER:PASSWORD@HOST:PORT/DB, as the test server's URL is.
            let rest = base(&url).trim_start_matches("mysql://");
            let (user_pw, rest) = rest.split_once('@').unwrap();
            let (user, pw) = user_pw.split_once(':').unwrap();
            let (host_port, db) = rest.split_once('/').unwrap();
            let (host, port) = host_port.split_once(':').unwrap();
            let sql = |sql: String| {
                tool(
                    Command::new("mariadb")
                        .args([
                            "--no-defaults",
                            "-h",
                            host,
                            "-P",
                            port,
                            "-u",
                            user,
                            db,
                            "-N",
                            "-B",
                            "-e",
                            &sql,
                        ])
                        .env("MYSQL_PWD", pw),
                )
            };
            let exists = format!(
                "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{table}'"
            );
            if sql(exists).trim() != "1" {
                return None;
            }
            Some(sql(format!("SELECT * FROM {table} ORDER BY k")))
        }
        "redis" => {
            let prefix = param(&url, "prefix");
            let cli = |args: &[&str]| {
                tool(
                    Command::new("redis-cli")
                        .args([
                            "--no-auth-warning",
                            "-u",
                            &base(&url).replace("redis://:", "redis://default:"),
                        ])
                        .args(args),
                )
            };
            let mut keys: Vec<String> = cli(&["--scan", "--pattern", &format!("{prefix}*")])
                .lines()
                .map(str::to_string)
                .collect();
            if keys.is_empty() {
                return None;
            }
            keys.sort();
            let mut out = String::new();
            for key in keys {
                let value = match cli(&["TYPE", &key]).trim() {
                    "hash" => {
                        let mut fields: Vec<String> = cli(&["HGETALL", &key])
                            .lines()
                            .map(str::to_string)
                            .collect();
                        let mut pairs: Vec<String> =
                            fields.chunks_mut(2).map(|p| p.join("=")).collect();
                        pairs.sort();
                        pairs.join(",")
                    }
                    "zset" => cli(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]),
                    other => panic!("{key} is a {other}"),
                };
                out.push_str(&format!("{key} {value}\n"));
            }
            Some(out)
        }
        "etcd" => {
            let prefix = param(&url, "prefix");
            let endpoint = base(&url).trim_start_matches("etcd://");
            let out = tool(Command::new("etcdctl").args([
                &format!("--endpoints=http://{endpoint}"),
                "get",
                "--prefix",
                &prefix,
            ]));
            (!out.is_empty()).then_some(out)
        }
        "dynamodb" => look_with_credentials(
            env,
            || {
                leasehold_dynamodb::DynamoDbBackend::builder_from_url(&url)
                    .unwrap()
                    .creation(leasehold::Creation::Never)
                    .build()
            },
            |backend| async move {
                let scan = backend
                    .client()
                    .scan()
                    .table_name(backend.table())
                    .consistent_read(true)
                    .send()
                    .await
                    .unwrap();
                let mut items: Vec<String> = scan
                    .items()
                    .iter()
                    .map(|item| {
                        let sorted: std::collections::BTreeMap<_, _> = item.iter().collect();
                        format!("{sorted:?}")
                    })
                    .collect();
                items.sort();
                Some(items.join("\n"))
            },
        ),
        "azblob" => look_with_credentials(
            env,
            || async {
                let backend = leasehold_azure::AzureBackend::builder_from_url(&url)
                    .unwrap()
                    .creation(leasehold::Creation::Never)
                    .build()
                    .unwrap();
                backend.open_store().await.map(|_| backend)
            },
            |backend| async move {
                use futures::TryStreamExt;
                let mut out = String::new();
                let mut pages = backend.container_client().list_blobs(None).unwrap();
                while let Some(item) = pages.try_next().await.unwrap() {
                    out.push_str(&format!("{item:?}\n"));
                }
                Some(out)
            },
        ),
        // A backend that only looks: its client lists and reads every
        // object of the store as an operator's would.
        "s3" => look_with_credentials(
            env,
            || {
                leasehold_s3::S3Backend::builder_from_url(&url)
                    .unwrap()
                    .creation(leasehold::Creation::Never)
                    .build()
            },
            |backend| async move {
                let client = backend.client();
                let listed = client
                    .list_objects_v2()
                    .bucket(backend.bucket())
                    .prefix(backend.prefix())
                    .send()
                    .await
                    .unwrap();
                let mut out = String::new();
                for object in listed.contents() {
                    let name = object.key().unwrap();
                    let got = client
                        .get_object()
                        .bucket(backend.bucket())
                        .key(name)
                        .send()
                        .await
                        .unwrap();
                    let etag = got.e_tag().unwrap_or_default().to_string();
                    let modified = format!("{:?}", got.last_modified());
                    let body = got.body.collect().await.unwrap().into_bytes();
                    out.push_str(&format!(
                        "{name} {etag} {modified} {}\n",
                        String::from_utf8_lossy(&body)
                    ));
                }
                (!out.is_empty()).then_some(out)
            },
        ),
        "zookeeper" => {
            // zk://HOST:PORT/CHROOT?…: every node under the chroot, with
            // its data and the zxid of its last change.
            let base = base(&url).trim_start_matches("zk://");
            let (endpoint, chroot) = base.split_once('/').unwrap();
            let (endpoint, chroot) = (endpoint.to_string(), format!("/{chroot}"));
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(async move {
                    use zookeeper_client as zk;
                    let client = zk::Client::connect(&endpoint).await.unwrap();
                    match client.get_data(&chroot).await {
                        Err(zk::Error::NoNode) => return None,
                        Err(e) => panic!("{e}"),
                        Ok(_) => {}
                    }
                    let mut nodes = vec![chroot];
                    let mut out = String::new();
                    while let Some(node) = nodes.pop() {
                        let (data, stat) = client.get_data(&node).await.unwrap();
                        out.push_str(&format!(
                            "{node} {} {}\n",
                            stat.mzxid,
                            String::from_utf8_lossy(&data)
                        ));
                        let mut children = client.list_children(&node).await.unwrap();
                        children.sort();
                        nodes.extend(children.into_iter().rev().map(|c| format!("{node}/{c}")));
                    }
                    Some(out)
                })
        }
        other => panic!("unknown store {other}"),
    }
}

/// The TTL a lease of the test's store may have (its max TTL as set by
/// `env_on(store, Some("60s"))`).
const TTL: &str = "60s";

const LOOKS: &[&[&str]] = &[
    &["list"],
    &["list", "--json"],
    &["status", "k"],
    &["status", "k", "--json"],
    &["leader", "k"],
    &["leader", "k", "--json"],
];

/// (a) On a store that does not exist, every look exits 3 naming the store
/// and `leasehold init`, and the store still does not exist.
fn looking_at_a_missing_store_creates_nothing(store: &str) {
    let Some(env) = env_on(store, None) else {
        return;
    };
    assert_eq!(dump(store, &env), None, "a new name has no store");
    for look in LOOKS {
        let out = run(&env, look);
        assert_eq!(out.code, Some(3), "{look:?}: {out:?}");
        assert!(
            out.stderr.contains("no leasehold store at")
                && (out
                    .stderr
                    .contains(&format!("`leasehold init --store '{}'`", env.url()))
                    || out.stderr.contains(
                        "`leasehold init --store URL` (the same URL, or LEASEHOLD_STORE)"
                    )),
            "{look:?}: {}",
            out.stderr
        );
        assert_eq!(dump(store, &env), None, "{look:?} created the store");
    }
    // break creates nothing either.
    let out = run(&env, &["break", "k"]);
    assert_eq!(out.code, Some(3), "{out:?}");
    assert_eq!(dump(store, &env), None, "break created the store");
}

/// (b) On a store with a held lease, the looks see the holder and leave
/// every byte of the store as it was.
fn looking_at_a_store_changes_nothing(store: &str) {
    let Some(env) = env_on(store, Some("60s")) else {
        return;
    };
    assert_eq!(run(&env, &["init", "--new"]).code, Some(0));
    let mut holder = piped(
        env.leasehold()
            .env("LEASEHOLD_TEST_CONFIRMATION_WINDOW", WINDOW)
            .args([
                "run",
                "--ttl",
                TTL,
                "k",
                "--",
                "sh",
                "-c",
                "echo go; exec sleep 120",
            ]),
    );
    assert_eq!(read_line(&mut stdout_reader(&mut holder)), "go");
    // No renewal while the store is compared (a frozen holder keeps its
    // lease until its TTL, far beyond this test).
    kill(holder.id(), libc::SIGSTOP);
    let before = dump(store, &env).expect("the store exists");
    for look in LOOKS {
        let out = run(&env, look);
        assert_eq!(out.code, Some(0), "{look:?}: {out:?}");
    }
    let status = run(&env, &["status", "k"]);
    assert!(status.stdout.contains("held"), "{status:?}");
    let after = dump(store, &env).expect("the store exists");
    kill(holder.id(), libc::SIGCONT);
    kill(holder.id(), libc::SIGTERM);
    wait_with_timeout(&mut holder, Duration::from_secs(30));
    assert_eq!(before, after, "looking changed the store");
}

/// `init --new` settles a new store at once: the first `run` runs (not
/// 75). `init --new` on a store that exists is refused and changes
/// nothing; `init` on it says so and changes nothing.
fn init_new_settles_a_new_store_at_once(store: &str) {
    let Some(env) = env_on(store, Some("60s")) else {
        return;
    };
    let out = run(&env, &["init", "--new"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.contains("created the leasehold store")
            && out.stdout.contains("settled at once")
            && out.stdout.contains("--new"),
        "{out:?}"
    );
    let ran = run(&env, &["run", "--ttl", TTL, "k", "--", "true"]);
    assert_eq!(ran.code, Some(0), "the first run after init --new: {ran:?}");
    let before = dump(store, &env).expect("the store exists");
    let again = run(&env, &["init", "--new"]);
    assert_eq!(again.code, Some(2), "{again:?}");
    assert!(
        again.stderr.contains("already exists") && again.stderr.contains("nothing changed"),
        "{again:?}"
    );
    assert_eq!(
        dump(store, &env).as_ref(),
        Some(&before),
        "init --new changed it"
    );
    let plain = run(&env, &["init"]);
    assert_eq!(plain.code, Some(0), "{plain:?}");
    assert!(
        plain.stdout.contains("already exists") && plain.stdout.contains("nothing changed"),
        "{plain:?}"
    );
    assert_eq!(dump(store, &env).as_ref(), Some(&before), "init changed it");
}

/// `init` without `--new` reports the quarantine, and the first `run`
/// exits 75 saying what happened and naming `leasehold init --new`.
fn init_reports_the_quarantine(store: &str) {
    let Some(env) = env_on(store, Some("60s")) else {
        return;
    };
    // SQLite proves a new file safe when no process on the machine holds a
    // lease in a file of its name: hold one in it, then delete the file
    // under the holder (its data lost).
    let mut neighbour = (store == "sqlite").then(|| {
        let mut child = piped(env.leasehold().args([
            "run",
            "--ttl",
            TTL,
            "n",
            "--",
            "sh",
            "-c",
            "echo go; exec sleep 120",
        ]));
        assert_eq!(read_line(&mut stdout_reader(&mut child)), "go");
        for file in ["leases.db", "leases.db-wal", "leases.db-shm"] {
            let _ = std::fs::remove_file(env.path(file));
        }
        child
    });
    let out = run(&env, &["init"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.contains("created the leasehold store")
            && out.stdout.contains("grants wait one confirmation window")
            && out.stdout.contains("leasehold init --new"),
        "{out:?}"
    );
    let ran = run(&env, &["run", "--ttl", TTL, "k", "--", "true"]);
    assert_eq!(ran.code, Some(75), "{ran:?}");
    assert!(
        ran.stderr.contains("quarantine") && ran.stderr.contains("`leasehold init --new`"),
        "{ran:?}"
    );
    // Waiting, the line says until when (a time, which does not go stale
    // as a countdown would) and names `init --new` too. The wait is long
    // enough for a loaded emulator's first answer (Azurite once took just
    // over 1 s under the test command, and a wait that runs out before the
    // store answers is "did not answer", exit 1) and far inside the 60 s.
    let waited = run(
        &env,
        &["run", "--ttl", TTL, "--wait", "5s", "k", "--", "true"],
    );
    assert_eq!(waited.code, Some(75), "{waited:?}");
    assert!(
        waited.stderr.contains("quarantine until 20")
            && waited.stderr.contains("Z, ")
            && waited.stderr.contains("`leasehold init --new`"),
        "{waited:?}"
    );
    if let Some(child) = neighbour.as_mut() {
        kill(child.id(), libc::SIGTERM);
        wait_with_timeout(child, Duration::from_secs(30));
    }
}

/// Issue 49: three `init --new` started at once on one new store: exactly
/// one creates it and says so. Each other one either lost the creating
/// (its look found no store) and says the store exists, created by another
/// process at the same moment (exit 0), or looked only after the store was
/// made, which is `init --new` on a store that exists (exit 2): nothing
/// stored tells that look from an operator's later one (see the issue).
fn concurrent_inits_create_the_store_once(store: &str) {
    let Some(env) = env_on(store, Some("60s")) else {
        return;
    };
    let racers: Vec<_> = (0..6)
        .map(|_| {
            env.leasehold()
                .env("LEASEHOLD_TEST_CONFIRMATION_WINDOW", WINDOW)
                .args(["init", "--new"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = racers
        .into_iter()
        .map(|r| {
            let out = r.wait_with_output().unwrap();
            common::Output {
                code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        })
        .collect();
    let created = outs
        .iter()
        .filter(|o| o.code == Some(0) && o.stdout.contains("created the leasehold store"))
        .count();
    assert_eq!(created, 1, "exactly one creator: {outs:#?}");
    // Every racer that names an epoch names the creator's: a look that
    // came between the creator's tables and its epoch row is no store.
    let creator = outs
        .iter()
        .find(|o| o.stdout.contains("created the leasehold store"))
        .and_then(|o| epoch_named(&o.stdout))
        .expect("the creator names its epoch");
    for out in &outs {
        if let Some(named) = epoch_named(&out.stdout).or_else(|| epoch_named(&out.stderr)) {
            assert_eq!(named, creator, "{out:?} among {outs:#?}");
        }
    }
    for out in outs
        .iter()
        .filter(|o| !o.stdout.contains("created the leasehold store"))
    {
        let lost = out.code == Some(0)
            && out.stdout.contains("a leasehold store already exists")
            && out
                .stdout
                .contains("(created by another process at the same moment); nothing changed");
        let looked_late = out.code == Some(2)
            && out.stderr.contains("already exists")
            && out.stderr.contains("nothing changed");
        assert!(lost || looked_late, "{out:?} among {outs:#?}");
    }
}

/// The number after "store epoch " in `text`, if any.
fn epoch_named(text: &str) -> Option<&str> {
    let rest = &text[text.find("store epoch ")? + "store epoch ".len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

common::on_every_store!(
    concurrent_inits_create_the_store_once,
    looking_at_a_missing_store_creates_nothing,
    looking_at_a_store_changes_nothing,
    init_new_settles_a_new_store_at_once,
    init_reports_the_quarantine,
);

/// A mistyped etcd prefix that begins another store's (`jobs` beside
/// `jobs/`) is no store: `status`, `list` and `break` exit 3, where they
/// counted the other store's keys as this one's and said the key was free.
#[test]
fn an_etcd_prefix_that_begins_another_stores_is_no_store() {
    let Some(env) = Env::on("etcd") else {
        return;
    };
    let out = env.output(&["run", "k", "--ttl", "2s", "--wait", "2m", "--", "true"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let url = env.url();
    let cut = url.replacen("/&", "&", 1);
    let cut = match cut.strip_suffix('/') {
        Some(c) => c.to_string(),
        None => cut,
    };
    assert_ne!(cut, url, "the test store's prefix ends with a slash: {url}");
    for args in [&["status", "k"][..], &["list"], &["break", "k"]] {
        let out = env
            .leasehold()
            .env("LEASEHOLD_STORE", &cut)
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stderr}");
        assert!(
            stderr.contains("no leasehold store epoch marker"),
            "{stderr}"
        );
    }
}
