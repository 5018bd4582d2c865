//! The CLI under careless and hostile use (issue 14): no panics, no wrong
//! answers, no leaked secrets, no terminal injection, defaults that fit.
//! Every test runs the real binary.

mod common;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use leasehold::LockOptions;

const SECS: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_into_a_pipe_closed_early_ends_as_sigpipe_would_not_a_panic() {
    let env = Env::new();
    let store = env.store();
    // More than a pipe buffer (64 KiB) of output.
    for i in 0..3000 {
        let g = leasehold_testkit::conformance::take(
            &store,
            &format!("jobs/a-rather-long-key-name-{i:05}"),
            Default::default(),
        )
        .await;
        g.release().await.unwrap();
    }
    let mut child = env.spawn(&["list"]);
    let mut out = stdout_reader(&mut child);
    assert!(read_line(&mut out).starts_with("jobs/a-rather-long-key-name-00000"));
    drop(out); // `| head -1`
    let mut stderr = child.stderr.take().unwrap();
    let status = child.wait().unwrap();
    let stderr = read_all(&mut stderr);
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}: {stderr}");
    assert_eq!(stderr, "", "nothing said about a reader that left");
}

#[test]
fn output_to_a_full_disk_is_an_error_not_a_panic() {
    let env = Env::new();
    env.output(&["run", "k", "--", "true"]);
    for args in [&["status", "k"][..], &["list"], &["status", "k", "--json"]] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = env.leasehold().args(args).stdout(full).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("cannot write the output: No space left"),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_wait_waits_instead_of_overflowing() {
    let env = Env::new();
    let guard = env.store().lock("k").unwrap().try_acquire().await.unwrap();
    let mut waiter = env.spawn(&[
        "run",
        "--wait",
        "18446744073709551615s",
        "k",
        "--",
        "echo",
        "ran",
    ]);
    let mut stderr = std::io::BufReader::new(waiter.stderr.take().unwrap());
    let line = tokio::task::spawn_blocking(move || read_message(&mut stderr))
        .await
        .unwrap();
    assert!(line.contains("waiting for k"), "{line}");
    guard.release().await.unwrap();
    assert_eq!(wait_with_timeout(&mut waiter, 30 * SECS), Some(0));
    assert_eq!(read_all(waiter.stdout.as_mut().unwrap()), "ran\n");
}

#[test]
fn looking_at_a_mistyped_sqlite_path_is_an_error_and_creates_nothing() {
    let env = Env::new();
    let typo = env.path("typo").join("lokcs.db");
    let url = format!("sqlite:{}", typo.display());
    for args in [
        &["status", "k"][..],
        &["list"],
        &["break", "k"],
        &["leader", "k"],
    ] {
        let out = env.output(&[&["--store", &url][..], args].concat());
        // Exit 3, naming the store and `leasehold init` (issue 29).
        assert_eq!(out.code, Some(3), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("no leasehold store at") && out.stderr.contains("leasehold init"),
            "{}",
            out.stderr
        );
        assert_eq!(out.stdout, "");
        assert!(!env.path("typo").exists(), "{args:?} created the directory");
    }
    // `run` does not create the directory either (only the default
    // store's): it names it, exit 2.
    let ran = env.output(&["--store", &url, "run", "k", "--", "true"]);
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert!(ran.stderr.contains("does not exist"), "{ran:?}");
    assert!(!env.path("typo").exists(), "run created the directory");
}

#[test]
fn the_default_store_is_not_created_by_looking_and_its_directory_is_private() {
    let env = Env::new();
    let state = env.path("state");
    let default = |args: &[&str]| {
        let out = env
            .leasehold()
            .env_remove("LEASEHOLD_STORE")
            .env("XDG_STATE_HOME", &state)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, stdout) = default(&["status", "k"]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("state:         free"), "{stdout}");
    assert_eq!(default(&["list"]), (Some(0), String::new()));
    assert!(!state.exists(), "looking created the state directory");

    let (code, token) = default(&sh("run k", "echo $LEASEHOLD_FENCING_TOKEN"));
    assert_eq!(code, Some(0));
    let dir = state.join("leasehold");
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "state directory mode {mode:o}");
    let status = default(&["status", "k"]).1;
    assert!(
        status.contains(&format!("fencing token: {}", token.trim())),
        "{status}"
    );
}

#[test]
fn stores_private_to_one_process_are_refused() {
    let env = Env::new();
    // An empty URL (`--store "$UNSET"`) is no quiet fallback to this
    // machine's default file either.
    let empty = env.output(&["--store", "", "run", "k", "--", "echo", "ran"]);
    assert_eq!(empty.code, Some(2), "{empty:?}");
    assert!(empty.stderr.contains("it is empty"), "{}", empty.stderr);
    for url in [
        "memory:",
        "sqlite::memory:",
        "sqlite:file::memory:?cache=shared",
    ] {
        let out = env.output(&["--store", url, "run", "k", "--", "echo", "ran"]);
        assert_eq!(out.code, Some(2), "{url}: {out:?}");
        assert!(
            out.stderr.contains("excludes nobody else"),
            "{}",
            out.stderr
        );
        assert_eq!(out.stdout, "", "the command must not run");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_cannot_alias_a_semaphore_slot_and_status_shows_the_slots() {
    let env = Env::new();
    let sem = env
        .store()
        .semaphore_with("sem", 2, LockOptions::new().owner_label("permit-holder"))
        .unwrap();
    let permit = sem.acquire().await.unwrap();
    let slot = permit.slot();

    for key in ["sem/:slot:0", "sem/:slot:1"] {
        let out = env.output(&["run", key, "--", "echo", "ran"]);
        assert_eq!(out.code, Some(2), "{out:?}");
        assert!(out.stderr.contains("semaphore slot"), "{}", out.stderr);
        assert_eq!(out.stdout, "");
        assert_eq!(env.output(&["elect", key, "--", "true"]).code, Some(2));
    }

    let out = env.output(&["status", "sem"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.contains("semaphore, 1 of the 1 slots"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("slot {slot}:")),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("permit-holder"), "{}", out.stdout);
    let json: serde_json::Value =
        serde_json::from_str(&env.output(&["status", "sem", "--json"]).stdout).unwrap();
    assert_eq!(json["key"], "sem");
    assert!(json["holder"].is_null());
    assert_eq!(json["slots"][0]["slot"], slot);
    assert_eq!(json["slots"][0]["key"], format!("sem/:slot:{slot}"));
    assert_eq!(
        json["slots"][0]["holder"]["owner"]["label"],
        "permit-holder"
    );
    // A slot key itself can still be looked at and broken.
    let slot_key = format!("sem/:slot:{slot}");
    assert!(env.output(&["status", &slot_key]).stdout.contains("held"));
    permit.release().await.unwrap();
}

#[test]
fn usage_errors_come_before_the_store_is_contacted() {
    let env = Env::new();
    // A store that cannot even be opened: every usage error must still be
    // reported as one (exit 2), not as a store failure (exit 1).
    // A directory that exists, where no file can be made: a store failure.
    let broken = "sqlite:/proc/leasehold-no-such-file.db";
    let cases: &[(&[&str], &str)] = &[
        (&["run", "bad key", "--", "true"], "1-256 characters"),
        (&["run", "--ttl", "10ms", "k", "--", "true"], "ttl"),
        (
            &["run", "--ttl", "2s", "--grace", "5s", "k", "--", "true"],
            "at most half the TTL",
        ),
        (&["run", "--limit", "1001", "k", "--", "true"], "1..=1000"),
        (
            &["run", "--owner", &"o".repeat(129), "k", "--", "true"],
            "label",
        ),
        (&["elect", "a//b", "--", "true"], "1-256 characters"),
        (&["status", "bad key"], "1-256 characters"),
        (&["break", "/k"], "1-256 characters"),
        (&["leader", "k k"], "1-256 characters"),
        (&["list", "--prefix", "//"], "prefix"),
    ];
    for (args, expected) in cases {
        let out = env.output(&[&["--store", broken][..], args].concat());
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(expected), "{args:?}: {}", out.stderr);
    }
    // The same store with good arguments fails as a store: exit 1.
    let out = env.output(&["--store", broken, "run", "k", "--", "true"]);
    assert_eq!(out.code, Some(1), "{out:?}");
}

/// Help written to a full disk is an error (it exited 0), and a negative
/// number is the option's own error, not clap's "to pass '-1' as a value,
/// use '-- -1'" tip.
#[test]
fn help_to_a_full_disk_fails_and_negative_numbers_get_their_own_error() {
    let env = Env::new();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = env.leasehold().arg("--help").stdout(full).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    for args in [
        &["run", "k", "--ttl", "-1", "--", "true"][..],
        &["run", "k", "--limit", "-1", "--", "true"],
        &["run", "k", "--wait", "-5s", "--", "true"],
    ] {
        let out = env.output(args);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("invalid value '-"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("tip:"), "{args:?}: {}", out.stderr);
    }
}

/// A store keeps the max TTL it was created with: `?max_ttl=` on an
/// existing store is said to be ignored, and a TTL above the store's max
/// says where that max comes from.
#[test]
fn a_max_ttl_an_existing_store_does_not_have_is_said_to_be_ignored() {
    let env = Env::new();
    let url = format!("sqlite:{}", env.path("m.db").display());
    let out = env.output(&["--store", &url, "run", "k", "--", "true"]);
    assert_eq!((out.code, out.stderr.as_str()), (Some(0), ""));
    let with = format!("{url}?max_ttl=10m");
    let out = env.output(&["--store", &with, "run", "k", "--", "true"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("?max_ttl=10m is not this store's"),
        "{out:?}"
    );
    let out = env.output(&["--store", &with, "run", "k", "--ttl", "5m", "--", "true"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("set when the store is created"),
        "{out:?}"
    );
}

/// SQLite paths that cannot be a store file say why, instead of "unable
/// to open database file" (or, with a trailing '/', creating a file where
/// a directory was meant), and create nothing.
#[test]
fn sqlite_paths_that_cannot_be_a_store_file_say_why() {
    let env = Env::new();
    let dir = env.path("a-dir");
    std::fs::create_dir(&dir).unwrap();
    let file = env.path("a-file");
    std::fs::write(&file, "").unwrap();
    for (url, says) in [
        (format!("sqlite:{}", dir.display()), "names a directory"),
        (
            format!("sqlite:{}/new/", env.dir.path().display()),
            "names a directory",
        ),
        (
            format!("sqlite:{}/x.db", file.display()),
            "is a file, not a directory",
        ),
    ] {
        let out = env.output(&["--store", &url, "run", "k", "--", "true"]);
        assert_ne!(out.code, Some(0), "{url}: {out:?}");
        assert!(out.stderr.contains(says), "{url}: {}", out.stderr);
        assert!(
            !out.stderr.contains("unable to open"),
            "{url}: {}",
            out.stderr
        );
    }
    assert!(
        !env.path("new").exists(),
        "nothing created for a trailing '/'"
    );
}

/// `break` on a semaphore's key does not say "not held" while its permits
/// are held: it names the slot keys to break (exit 2, nothing broken).
#[test]
fn break_on_a_semaphore_key_names_its_held_slots() {
    let env = Env::new();
    let (mut permit, _out) =
        env.spawn_until(&sh("run pool --limit 2", "echo in; exec sleep 300"), "in");
    let broke = env.output(&["break", "pool"]);
    assert_eq!(broke.code, Some(2), "{broke:?}");
    assert!(broke.stderr.contains("pool/:slot:"), "{broke:?}");
    assert!(broke.stderr.contains("nothing was broken"), "{broke:?}");
    let status = env.output(&["status", "pool"]);
    assert!(
        status.stdout.contains("1 of the"),
        "still held: {}",
        status.stdout
    );
    kill(permit.id(), libc::SIGTERM);
    permit.wait().unwrap();
    let broke = env.output(&["break", "pool"]);
    assert_eq!(broke.code, Some(0), "{broke:?}");
    assert!(broke.stdout.contains("pool was not held"), "{broke:?}");
}

/// `-v` shows what the docs say it shows: the acquisition, each renewal,
/// and the release.
#[test]
fn verbose_output_shows_acquire_renewals_and_release() {
    let env = Env::new();
    let out = env.output(&["-v", "run", "k", "--ttl", "300ms", "--", "sleep", "0.5"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    for event in ["acquired", "renewed", "released"] {
        assert!(
            out.stderr.contains(event),
            "no {event:?} in: {}",
            out.stderr
        );
    }
}

/// `list` on a store with no keys says so (on stderr: stdout stays empty
/// for scripts), instead of printing nothing at all.
#[test]
fn list_of_an_empty_store_says_so() {
    let env = Env::new();
    env.output(&["run", "jobs/a", "--", "true"]);
    let out = env.output(&["list", "--prefix", "other/"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "");
    assert!(out.stderr.contains("no keys under \"other/\""), "{out:?}");
    let out = env.output(&["list", "--json", "--prefix", "other/"]);
    assert_eq!(out.stdout.trim(), "[]");
    assert_eq!(out.stderr, "");
}

/// `LEASEHOLD_STORE=$(cat file)` keeps no trailing newline, but a config
/// file or a YAML block can: whitespace around the URL is not part of it.
#[test]
fn whitespace_around_a_store_url_is_not_part_of_it() {
    let env = Env::new();
    let path = env.path("ws.db");
    let out = env
        .leasehold()
        .env("LEASEHOLD_STORE", format!(" sqlite:{}\n", path.display()))
        .args(["run", "k", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(path.exists(), "the file is {path:?}, without the newline");
    let names: Vec<_> = std::fs::read_dir(env.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.iter().all(|n| !n.contains('\n')), "{names:?}");
}

#[test]
fn secrets_in_store_urls_are_never_printed() {
    let env = Env::new();
    let urls = [
        "azblob://c?sv=2024&sig=S3CRETSIG%2Bx",
        "azblob://user:S3CRETPW@cont",
        "azblob://locks?sig=S3CRETSIG",
        "dynamodb://t?region=us-east-1&token=S3CRETTOK",
        "dynamodb://t?endpoint=http%3A%2F%2Fme%3AS3CRETPW%40127.0.0.1%3A1",
        "ftp://user:S3CRETPW@host/x?key=S3CRETKEY",
        "sqlite:/proc/none/x.db?S3CRETQ",
    ];
    for url in urls {
        for args in [&["status", "k"][..], &["run", "k", "--", "true"], &["list"]] {
            let out = env.output(&[&["--store", url][..], args].concat());
            assert_ne!(out.code, Some(0), "{url} {args:?}: {out:?}");
            assert!(
                !out.stderr.contains("S3CRET"),
                "{url} {args:?}: {}",
                out.stderr
            );
            assert!(!out.stdout.contains("S3CRET"), "{url}: {}", out.stdout);
        }
        let out = env
            .leasehold()
            .env("LEASEHOLD_STORE", url)
            .args(["run", "--json", "k", "--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("S3CRET"), "{url}: {stderr}");
    }
}

/// Every way a hostile or careless command line can carry a store URL
/// (a stray space, a duplicate, a typo in the command, a URL given where
/// a key or a duration belongs, a bad escape, a trailing newline in the
/// environment), on every scheme, for every command: no secret in any
/// output. The stores are unreachable (port 1) or refuse, so each case
/// also goes through the paths that report a failing store.
#[test]
fn a_sweep_of_hostile_command_lines_never_prints_a_secret() {
    let env = Env::new();
    let urls = [
        "redis://user:S3CRETPW@127.0.0.1:1/0",
        "rediss://:S3CRETPW@127.0.0.1:1",
        "etcd://root:S3CRETPW@127.0.0.1:1?prefix=p",
        "etcds://root:S3CR%zzETPW@127.0.0.1:1",
        "postgres://postgres:S3CRETPW@127.0.0.1:1/db",
        "postgresql://u:S3CRETPW@127.0.0.1:1/db?password=S3CRETQ",
        "azblob://c?sv=2024&sig=S3CRETSIG%2Bx",
        "azblob://acct:S3CRETPW@c",
        "dynamodb://t?endpoint=http%3A%2F%2F127.0.0.1%3A1&token=S3CRETTOK",
        "sqlite:/proc/none/x.db?key=S3CRETQ",
    ];
    let mut cases: Vec<(Vec<String>, Option<String>)> = Vec::new();
    for url in urls {
        let u = url.to_string();
        let argv = |a: &[&str]| -> Vec<String> {
            a.iter()
                .map(|s| {
                    if *s == "URL" {
                        u.clone()
                    } else {
                        s.to_string()
                    }
                })
                .collect()
        };
        for args in [
            &["--store", "URL", "list"][..],
            &["--store=", "URL", "list"],
            &["--store", "URL", "--store", "URL", "status", "k"],
            &["list", "--store", "URL"],
            &["--store=URL", "lsit"],
            &["run", "--json", "URL", "--", "true"],
            &["run", "--json", "--store=", "URL", "k", "--", "true"],
            &["run", "k", "--ttl", "URL", "--", "true"],
            &["run", "--json", "k", "--store", "URL", "--", "true"],
            &["leader", "--store", "URL", "URL"],
            &["break", "k", "--store", "URL"],
        ] {
            cases.push((argv(args), None));
        }
        cases.push((
            argv(&["run", "--json", "k", "--", "true"]),
            Some(format!("{url}\n")),
        ));
        cases.push((argv(&["status", "k"]), Some(format!(" {url}"))));
    }
    assert!(cases.len() >= 100, "{} cases", cases.len());
    // Unreachable stores answer at once, but some retry: run the cases
    // side by side.
    let env = &env;
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = cases
            .chunks(cases.len().div_ceil(8))
            .map(|chunk| {
                scope.spawn(move || {
                    let mut failures = Vec::new();
                    for (args, store) in chunk {
                        let mut cmd = env.leasehold();
                        cmd.env_remove("LEASEHOLD_STORE").args(args);
                        if let Some(store) = store {
                            cmd.env("LEASEHOLD_STORE", store);
                        }
                        let out = cmd.output().unwrap();
                        let text = format!(
                            "{}{}",
                            String::from_utf8_lossy(&out.stdout),
                            String::from_utf8_lossy(&out.stderr)
                        );
                        if out.status.success()
                            || text.contains("S3CR")
                            || text.contains("panicked")
                        {
                            failures
                                .push(format!("{args:?} {store:?} -> {:?}: {text}", out.status));
                        }
                    }
                    failures
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_from_the_store_never_reach_the_terminal() {
    let env = Env::new();
    let evil = "vm\x1b]0;pwned\x07\x1b[2J\r\nfake: line";
    let guard = env
        .store()
        .lock_with("k", LockOptions::new().owner_label(evil).data(evil))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let outputs = [
        env.output(&["status", "k"]),
        env.output(&["list"]),
        env.output(&["run", "k", "--", "true"]),
        env.output(&["run", "--wait", "100ms", "k", "--", "true"]),
    ];
    for out in &outputs {
        for text in [&out.stdout, &out.stderr] {
            assert!(
                !text
                    .chars()
                    .any(|c| c.is_control() && c != '\n' && c != '\t'),
                "{text:?}"
            );
            assert!(!text.contains("\nfake: line"), "{text:?}");
        }
    }
    assert!(
        outputs[0].stdout.contains("vm\\u{1b}]0;pwned"),
        "{}",
        outputs[0].stdout
    );
    // JSON keeps the data exactly (escaped by JSON itself).
    let json: serde_json::Value =
        serde_json::from_str(&env.output(&["status", "k", "--json"]).stdout).unwrap();
    assert_eq!(json["holder"]["data"], evil);
    guard.release().await.unwrap();
}

#[test]
fn the_default_grace_fits_a_short_ttl_and_durations_are_quoted_exactly() {
    let env = Env::new();
    let out = env.output(&["run", "--ttl", "3s", "k", "--", "true"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = env.output(&["run", "--ttl", "1.5s", "--grace", "1s", "k", "--", "true"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .contains("--grace 1s is too long for --ttl 1s 500ms"),
        "{}",
        out.stderr
    );
}

/// `leasehold --store URL ARGS` in an environment of its own.
fn on_store(url: &str, args: &[&str]) -> Output {
    Env::new().output(&[&["--store", url][..], args].concat())
}

#[test]
fn errors_say_each_thing_once() {
    let out = on_store("sqlite:/proc/none/x.db", &["run", "k", "--", "true"]);
    assert_eq!(out.code, Some(2));
    assert_eq!(
        out.stderr
            .matches("the directory /proc/none of /proc/none/x.db does not exist")
            .count(),
        1,
        "{}",
        out.stderr
    );
}

#[test]
fn verbose_output_is_not_coloured_when_not_a_terminal() {
    let env = Env::new();
    let out = env.output(&["-v", "run", "k", "--", "true"]);
    assert_eq!(out.code, Some(0));
    assert!(out.stderr.contains("acquired"), "{}", out.stderr);
    assert!(!out.stderr.contains('\x1b'), "{:?}", out.stderr);
}

#[test]
fn a_repeated_dynamodb_parameter_is_an_error() {
    let out = on_store(
        "dynamodb://locks?region=eu-west-1&region=us-east-1",
        &["status", "k"],
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("\"region\" is given more than once"),
        "{}",
        out.stderr
    );
}

/// The last line of stderr, as JSON.
fn result_line(stderr: &str) -> serde_json::Value {
    let last = stderr.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

/// With `-v` or `-vv` the JSON line is still the last one: the metrics
/// summary and the logs of the process winding down come before it (the
/// summary came after it).
#[test]
fn run_json_is_the_last_line_even_when_verbose() {
    let env = Env::new();
    for verbose in ["-v", "-vv"] {
        for (args, result) in [
            (&["k", "--", "true"][..], "completed"),
            (&["--ttl", "-1s", "k", "--", "true"][..], "error"),
        ] {
            let mut all = vec![verbose, "run", "--json"];
            all.extend_from_slice(args);
            let out = env.output(&all);
            assert!(
                out.stderr.contains("metrics") || result == "error",
                "{out:?}"
            );
            let r = result_line(&out.stderr);
            assert_eq!(r["result"], result, "{all:?}: {out:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_json_tells_the_commands_exit_codes_from_leaseholds() {
    let env = Env::new();
    for code in [1, 2, 75, 76] {
        let out = env.output(&[
            "run",
            "--json",
            "k",
            "--",
            "sh",
            "-c",
            &format!("exit {code}"),
        ]);
        assert_eq!(out.code, Some(code), "{out:?}");
        let r = result_line(&out.stderr);
        assert_eq!(r["result"], "completed", "{r}");
        assert_eq!(r["exit_code"], code);
        assert_eq!(r["command_exit_code"], code);
        assert!(r["fencing_token"].as_u64().unwrap() >= 1);
    }
    let guard = env
        .store()
        .lock_with("k", LockOptions::new().owner_label("other"))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let out = env.output(&["run", "--json", "k", "--", "true"]);
    assert_eq!(out.code, Some(75));
    let r = result_line(&out.stderr);
    assert_eq!(r["result"], "not_obtained", "{r}");
    assert!(r["command_exit_code"].is_null());
    assert!(r["fencing_token"].is_null());
    guard.release().await.unwrap();

    let out = env.output(&["run", "--json", "k", "--", "/nonexistent/cmd"]);
    assert_eq!(out.code, Some(127));
    let r = result_line(&out.stderr);
    assert_eq!(r["result"], "not_started");
    // Why it could not be started, as said on stderr.
    let error = r["error"].as_str().unwrap_or_else(|| panic!("{r}"));
    assert!(error.contains("/nonexistent/cmd"), "{r}");

    let out = env.output(&[
        "--store",
        "sqlite:/proc/leasehold-no-such-file.db",
        "run",
        "--json",
        "k",
        "--",
        "true",
    ]);
    assert_eq!(out.code, Some(1));
    let r = result_line(&out.stderr);
    assert_eq!(r["result"], "error");
    assert_eq!(r["exit_code"], 1);
    assert!(r["error"].as_str().unwrap().contains("cannot open"), "{r}");

    let out = env.output(&["run", "--json", "--limit", "2", "s", "--", "true"]);
    let r = result_line(&out.stderr);
    assert_eq!(r["result"], "completed");
    assert!(r["slot"].as_u64().unwrap() < 2, "{r}");
}

#[test]
fn help_lists_every_limit_and_environment_variable() {
    let env = Env::new();
    for args in [&["--help"][..], &["run", "--help"]] {
        let out = env.output(args);
        for needle in [
            "LEASEHOLD_STORE",
            "NO_COLOR",
            "XDG_STATE_HOME",
            "AZURE_STORAGE_CONNECTION_STRING",
            "AWS_REGION",
            "LEASEHOLD_FENCING_TOKEN",
            "LEASEHOLD_SLOT",
            "1 to 1000",
            "at most 128 bytes",
            "at most 1024 bytes",
            "1-256 characters",
            "at most half the TTL",
            "15s to 60s",
            "run --json",
        ] {
            assert!(out.stdout.contains(needle), "{args:?} lacks {needle}");
        }
    }
}

/// Every store is in the default build, and its help says so: the same
/// binary whether built in the workspace, with `-p leasehold-cli` or by
/// `cargo install --path crates/leasehold-cli` (etcd used to be behind a
/// feature, since its client needed `protoc` to build).
#[test]
fn help_lists_every_store_and_the_default_build_has_each() {
    let env = Env::new();
    let out = env.output(&["--help"]);
    for scheme in [
        "sqlite:",
        "azblob://",
        "dynamodb://",
        "postgres://",
        "mysql://",
        "redis://",
        "rediss://",
        "etcd://",
        "etcds://",
        "zk://",
    ] {
        assert!(out.stdout.contains(scheme), "--help lacks {scheme}");
    }
    // Nothing listens on a port we bound and closed again: each store
    // fails to open (exit 1), none says it is not in this build.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for url in [
        format!("etcd://127.0.0.1:{port}"),
        format!("etcds://127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
        format!("postgres://u@127.0.0.1:{port}/db"),
    ] {
        let out = env.output(&["status", "--store", &url, "k"]);
        assert_eq!(out.code, Some(1), "{url}: {}", out.stderr);
        assert!(
            !out.stderr.contains("built without"),
            "{url}: {}",
            out.stderr
        );
    }
}

/// A TCP server on loopback that accepts connections and never answers: a
/// store behind a black hole.
fn black_hole() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

#[test]
fn waiting_on_an_unreachable_store_exits_1_with_the_error_on_time() {
    let env = Env::new();
    // Nothing listens on a port we bound and closed again.
    let refused = {
        let (l, port) = black_hole();
        drop(l);
        port
    };
    let (_hole, silent) = black_hole();
    for (port, what, wait) in [
        (refused, "refused", "2s"),
        (silent, "silent", "2s"),
        (silent, "silent, no wait", "0s"),
    ] {
        let cs = leasehold_azure::dev_connection_string(port);
        let started = std::time::Instant::now();
        let mut child = env
            .leasehold()
            .env("LEASEHOLD_STORE", "azblob://locks")
            .env("AZURE_STORAGE_CONNECTION_STRING", cs)
            .args([
                "run",
                "--connect-timeout",
                "2s",
                "--wait",
                wait,
                "--ttl",
                "15s",
                "k",
                "--",
                "echo",
                "ran",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let code = wait_with_timeout(&mut child, 60 * SECS);
        let took = started.elapsed();
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(code, Some(1), "{what}: {stderr}");
        assert!(!stderr.contains("held by"), "{what}: {stderr}");
        // Opening asks Azure for the container now (its builder sends
        // nothing), within --connect-timeout, as on every other store.
        assert!(
            stderr.contains("azblob backend failed") || stderr.contains("--connect-timeout"),
            "{what}: {stderr}"
        );
        assert_eq!(read_all(child.stdout.as_mut().unwrap()), "");
        // The bounds are 2 s; SDK retries must not stretch them (they did
        // to 21 s without --wait: a generous bound for process start and
        // shutdown on a loaded machine).
        assert!(took < 2 * SECS + 3 * SECS, "{what}: took {took:?}");
    }
}

fn keys_of(v: &serde_json::Value) -> Vec<&str> {
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    keys
}

/// The JSON shapes `docs/cli.md` documents, field for field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_has_the_documented_shapes() {
    let env = Env::new();
    let store = env.store();
    let guard = store
        .lock_with("k", LockOptions::new().owner_label("x").data("d"))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let permit = store
        .semaphore("s", 2)
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let leading = store.election("e").unwrap().campaign().await.unwrap();
    let holder_fields = [
        "acquired_at_unix_ms",
        "data",
        "expires_in_ms",
        "fencing_token",
        "owner",
        "ttl_ms",
    ];

    let status: serde_json::Value =
        serde_json::from_str(&env.output(&["status", "k", "--json"]).stdout).unwrap();
    assert_eq!(
        keys_of(&status),
        [
            "fencing_token",
            "holder",
            "key",
            "last_run",
            "last_success",
            "readers",
            "slots",
            "writer_waiting"
        ]
    );
    assert_eq!(keys_of(&status["holder"]), holder_fields);
    assert_eq!(
        keys_of(&status["holder"]["owner"]),
        ["host", "label", "pid"]
    );
    let sem: serde_json::Value =
        serde_json::from_str(&env.output(&["status", "s", "--json"]).stdout).unwrap();
    assert_eq!(
        keys_of(&sem["slots"][0]),
        [
            "fencing_token",
            "holder",
            "key",
            "last_run",
            "last_success",
            "slot"
        ]
    );

    let list: serde_json::Value =
        serde_json::from_str(&env.output(&["list", "--json"]).stdout).unwrap();
    for item in list.as_array().unwrap() {
        assert_eq!(
            keys_of(item),
            ["fencing_token", "holder", "key", "last_run", "last_success"]
        );
    }

    let leader: serde_json::Value =
        serde_json::from_str(&env.output(&["leader", "e", "--json"]).stdout).unwrap();
    assert_eq!(keys_of(&leader), holder_fields);
    assert_eq!(leader["fencing_token"], leading.term());
    let nobody = env.output(&["leader", "nobody", "--json"]);
    assert_eq!(nobody.stdout.trim(), "null");

    let run = env.output(&["run", "--json", "r", "--", "true"]);
    assert_eq!(
        keys_of(&result_line(&run.stderr)),
        [
            "command_exit_code",
            "error",
            "exit_code",
            "fencing_token",
            "fencing_tokens",
            "key",
            "last_success",
            "result",
            "slot"
        ]
    );
    // Run records (`run --once-per`), in status and in a skipped run's result.
    let once = env.output(&["run", "--once-per", "1h", "o", "--", "true"]);
    assert_eq!(once.code, Some(0), "{once:?}");
    let skipped = env.output(&["run", "--json", "--once-per", "1h", "o", "--", "true"]);
    let result = result_line(&skipped.stderr);
    assert_eq!(result["result"], "skipped", "{result}");
    let run_fields = [
        "ended_at_unix_ms",
        "exit_code",
        "fencing_token",
        "outcome",
        "owner",
        "started_at_unix_ms",
    ];
    assert_eq!(keys_of(&result["last_success"]), run_fields);
    let status: serde_json::Value =
        serde_json::from_str(&env.output(&["status", "o", "--json"]).stdout).unwrap();
    assert_eq!(keys_of(&status["last_success"]), run_fields);
    assert_eq!(keys_of(&status["last_run"]), run_fields);
    assert_eq!(
        keys_of(&status["last_run"]["owner"]),
        ["host", "label", "pid"]
    );
    guard.release().await.unwrap();
    permit.release().await.unwrap();
    leading.resign().await.unwrap();
}

/// DynamoDB checks its table when the store is opened: behind a black hole
/// that check ends at `--connect-timeout` (opening is not part of the
/// wait), with exit 1 and what it waited for.
#[test]
fn opening_an_unreachable_dynamodb_exits_1_at_the_connect_timeout() {
    exits_1_at_a_2s_connect_timeout_behind_a_black_hole(&[
        "run",
        "--connect-timeout",
        "2s",
        "--wait",
        "2s",
        "k",
        "--",
        "echo",
        "ran",
    ]);
}

/// `init` opens the store too (a look, then the creation): behind a black
/// hole it ends at `--connect-timeout` like every command, exit 1.
#[test]
fn init_on_an_unreachable_dynamodb_exits_1_at_the_connect_timeout() {
    exits_1_at_a_2s_connect_timeout_behind_a_black_hole(&["--connect-timeout", "2s", "init"]);
}

/// Runs leasehold with `args` on a DynamoDB store behind a black hole:
/// exit 1, saying it had no answer within the 2 s `args` give, within 5 s.
fn exits_1_at_a_2s_connect_timeout_behind_a_black_hole(args: &[&str]) {
    let env = Env::new();
    let (_hole, port) = black_hole();
    let started = std::time::Instant::now();
    let mut child = env
        .leasehold()
        .env(
            "LEASEHOLD_STORE",
            format!("dynamodb://locks?region=us-east-1&endpoint=http%3A%2F%2F127.0.0.1%3A{port}"),
        )
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let code = wait_with_timeout(&mut child, 60 * SECS);
    let took = started.elapsed();
    let stderr = read_all(child.stderr.as_mut().unwrap());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("no answer within --connect-timeout (2s)"),
        "{stderr}"
    );
    assert!(took < 2 * SECS + 3 * SECS, "took {took:?}");
}

/// `leasehold -v run ... 2>&1 | head -1`: stderr's reader is gone before
/// leasehold says anything; its messages are dropped, the command still
/// runs and its exit code is still leasehold's.
#[test]
fn a_closed_stderr_is_no_panic() {
    let env = Env::new();
    for args in [
        &["-v", "run", "k", "--", "sh", "-c", "exit 3"][..],
        &["run", "--json", "k", "--", "sh", "-c", "exit 3"],
    ] {
        let mut child = env
            .leasehold()
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stderr.take());
        assert_eq!(
            wait_with_timeout(&mut child, 30 * SECS),
            Some(3),
            "{args:?}"
        );
    }
}

/// `status`, `list` and `leader --json` print JSON on their error paths
/// too (they printed nothing on stdout): `{ "error", "exit_code" }`.
#[test]
fn looking_commands_print_json_when_they_fail() {
    let env = Env::new();
    let missing = format!("sqlite:{}", env.path("none.db").display());
    for args in [
        &["status", "k", "--json"][..],
        &["list", "--json"][..],
        &["leader", "k", "--json"][..],
    ] {
        let out = env
            .leasehold()
            .env("LEASEHOLD_STORE", &missing)
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let json: serde_json::Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout:?}"));
        assert_eq!(out.status.code(), Some(3), "{args:?}: {json}");
        assert_eq!(json["exit_code"], 3, "{args:?}: {json}");
        assert!(
            json["error"]
                .as_str()
                .unwrap()
                .contains("no leasehold store"),
            "{args:?}: {json}"
        );
    }
}

/// The confusing answers of a sweep, each now saying what to do: a path
/// without `sqlite:`, a scheme in capitals, the `--` left out, a negative
/// `--limit`.
#[test]
fn common_mistakes_are_told_the_fix() {
    let env = Env::new();
    for (args, says) in [
        (
            &["--store", "leases.db", "status", "k"][..],
            "sqlite:leases.db",
        ),
        (
            &["--store", "SQLITE:x.db", "status", "k"][..],
            "in capitals",
        ),
        (
            &["run", "k", "true"][..],
            "put -- between KEY and the command",
        ),
        (
            &["run", "--limit", "-1", "k", "--", "true"][..],
            "from 1 to 1000",
        ),
    ] {
        let out = env.output(args);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(says), "{args:?}: {out:?}");
        assert!(!out.stderr.contains("4294967295"), "{args:?}: {out:?}");
        assert!(!out.stderr.contains("Store::open"), "{args:?}: {out:?}");
    }
}
