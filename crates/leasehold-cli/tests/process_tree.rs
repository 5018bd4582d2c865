//! `leasehold run` and `elect` stop the command's whole process tree, not
//! just its first process, and do so even when leasehold itself is killed or
//! frozen. Real processes on every store: SQLite always; Azurite and
//! DynamoDB Local when their emulators are configured (scripts/test.sh).

mod common;

use std::time::Duration;

use common::*;

/// TTL and grace per store (Azure leases last at least 15 s).
fn lease(store: &str) -> [&'static str; 4] {
    match store {
        "azblob" => ["--ttl", "15s", "--grace", "1s"],
        _ => ["--ttl", "2s", "--grace", "500ms"],
    }
}

fn ttl(store: &str) -> Duration {
    match store {
        "azblob" => Duration::from_secs(15),
        _ => Duration::from_secs(2),
    }
}

/// A command whose real work runs in two grandchildren: one in the
/// background of a shell, one that left the process group (`setsid`). It
/// prints their pids, then waits.
const FORKS: &str = "sleep 300 & echo $!; setsid sleep 300 & echo $!; wait";

/// Starts `leasehold run KEY` with `script` and reads the pids it prints.
fn start(env: &Env, store: &str, key: &str, script: &str) -> (std::process::Child, Vec<i32>) {
    let mut args = vec!["run", key];
    args.extend(lease(store));
    args.extend(["--", "sh", "-c", script]);
    let mut child = env.spawn(&args);
    let mut out = stdout_reader(&mut child);
    let mut pids = vec![];
    for _ in 0..2 {
        match read_line(&mut out).parse() {
            Ok(pid) => pids.push(pid),
            Err(_) => {
                let code = child.wait().unwrap();
                let err = read_all(child.stderr.as_mut().unwrap());
                panic!("leasehold run did not start the command ({code}): {err}");
            }
        }
    }
    // Keep reading in the background so the pipe never fills.
    std::thread::spawn(move || read_all(&mut out));
    (child, pids)
}

fn grandchildren_are_stopped_when_the_lease_is_broken(store: &str) {
    let Some(env) = Env::on(store) else { return };
    let (mut holder, pids) = start(&env, store, "tree/break", FORKS);
    let broke = env.output(&["break", "tree/break"]);
    assert_eq!(broke.code, Some(0), "{broke:?}");
    let code = wait_with_timeout(&mut holder, ttl(store) * 2);
    assert_eq!(code, Some(76), "a lost lease exits 76");
    for pid in pids {
        assert!(
            !alive(pid),
            "process {pid} of the command outlived the lease"
        );
    }
}

fn grandchildren_die_within_a_second_of_kill_9(store: &str) {
    let Some(env) = Env::on(store) else { return };
    let (mut holder, pids) = start(&env, store, "tree/kill", FORKS);
    kill(holder.id(), libc::SIGKILL);
    holder.wait().unwrap();
    for pid in pids {
        assert!(
            wait_gone(pid, Duration::from_secs(1)),
            "process {pid} of the command still runs 1 s after leasehold was killed"
        );
    }
}

fn the_tree_is_dead_before_the_next_holder_starts_while_leasehold_is_frozen(store: &str) {
    let Some(env) = Env::on(store) else { return };
    let (mut frozen, pids) = start(&env, store, "tree/frozen", FORKS);
    kill(frozen.id(), libc::SIGSTOP);
    // The next holder's command looks for the first holder's processes as
    // soon as it starts.
    let check = format!(
        "for p in {} {}; do kill -0 $p 2>/dev/null && echo alive $p; done; echo checked",
        pids[0], pids[1]
    );
    let mut args = vec!["run", "tree/frozen", "--wait", "120s"];
    args.extend(lease(store));
    args.extend(["--", "sh", "-c", &check]);
    let next = env.output(&args);
    kill(frozen.id(), libc::SIGCONT);
    assert_eq!(next.code, Some(0), "{next:?}");
    assert_eq!(
        next.stdout, "checked\n",
        "the frozen holder's command still ran when the next one started"
    );
    assert_eq!(wait_with_timeout(&mut frozen, ttl(store)), Some(76));
}

fn signals_reach_the_whole_group(store: &str) {
    let Some(env) = Env::on(store) else { return };
    // The grandchild says when it is ready and when SIGTERM reaches it.
    std::fs::write(
        env.path("worker.sh"),
        "trap 'echo got-term; exit 0' TERM\necho ready\nsleep 300 &\nwait\n",
    )
    .unwrap();
    let mut args = vec!["run", "tree/signal"];
    args.extend(lease(store));
    args.extend(["--", "sh", "-c", "sh \"$D/worker.sh\" & wait"]);
    let mut holder = env.spawn(&args);
    let mut out = stdout_reader(&mut holder);
    assert_eq!(read_line(&mut out), "ready");
    kill(holder.id(), libc::SIGTERM);
    assert_eq!(read_line(&mut out), "got-term");
    let code = wait_with_timeout(&mut holder, Duration::from_secs(10));
    assert_eq!(
        code,
        Some(128 + libc::SIGTERM),
        "the command's shell died of the forwarded SIGTERM"
    );
}

macro_rules! on_every_store {
    ($($test:ident),+ $(,)?) => {
        mod sqlite { $( #[test] fn $test() { super::$test("sqlite") } )+ }
        mod azblob { $( #[test] fn $test() { super::$test("azblob") } )+ }
        mod dynamodb { $( #[test] fn $test() { super::$test("dynamodb") } )+ }
    };
}

on_every_store!(
    grandchildren_are_stopped_when_the_lease_is_broken,
    grandchildren_die_within_a_second_of_kill_9,
    the_tree_is_dead_before_the_next_holder_starts_while_leasehold_is_frozen,
    signals_reach_the_whole_group,
);

#[test]
fn elect_stops_the_tree_before_campaigning_again() {
    let env = Env::new();
    let mut leader = env.spawn(&[
        "elect",
        "tree/elect",
        "--ttl",
        "2s",
        "--grace",
        "500ms",
        "--",
        "sh",
        "-c",
        "sleep 300 & echo $!; wait",
    ]);
    let mut out = stdout_reader(&mut leader);
    let first: i32 = read_line(&mut out).parse().unwrap();
    assert_eq!(env.output(&["break", "tree/elect"]).code, Some(0));
    // Leadership lost, the tree stopped, elected again: a new term's
    // command prints its grandchild's pid.
    let second: i32 = read_line(&mut out).parse().unwrap();
    assert_ne!(first, second);
    assert!(
        !alive(first),
        "the first term's grandchild ran into the second term"
    );
    kill(leader.id(), libc::SIGTERM);
    wait_with_timeout(&mut leader, Duration::from_secs(10));
    assert!(wait_gone(second, Duration::from_secs(1)));
}

#[test]
fn a_command_that_exits_leaves_nothing_running() {
    let env = Env::new();
    // The shell exits at once, leaving a background job behind.
    let mut holder = env.spawn(&[
        "run",
        "tree/leftover",
        "--grace",
        "500ms",
        "--",
        "sh",
        "-c",
        "sleep 300 & echo $!",
    ]);
    let mut out = stdout_reader(&mut holder);
    let pid: i32 = read_line(&mut out).parse().unwrap();
    let code = wait_with_timeout(&mut holder, Duration::from_secs(10));
    assert_eq!(code, Some(0));
    assert!(
        !alive(pid),
        "a process the command left behind outlived the lease"
    );
}

#[test]
fn the_command_inherits_the_callers_open_files() {
    let env = Env::new();
    // fds 3 and 4 (a script's `3>log`, a socket from a service manager)
    // reach the command through leasehold and its watchdog.
    let out = env
        .leasehold()
        .args([
            "run",
            "tree/fds",
            "--",
            "sh",
            "-c",
            "echo three >&3; echo four >&4",
        ])
        .env("F", env.path("f"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn_with_fds(&env.path("three"), &env.path("four"));
    assert_eq!(out.0, Some(0), "{}", out.1);
    assert_eq!(
        std::fs::read_to_string(env.path("three")).unwrap(),
        "three\n"
    );
    assert_eq!(std::fs::read_to_string(env.path("four")).unwrap(), "four\n");
}

trait SpawnWithFds {
    fn spawn_with_fds(
        &mut self,
        three: &std::path::Path,
        four: &std::path::Path,
    ) -> (Option<i32>, String);
}

impl SpawnWithFds for std::process::Command {
    /// Runs the command with `three` and `four` open for writing as its fds
    /// 3 and 4; its exit code and stderr.
    fn spawn_with_fds(
        &mut self,
        three: &std::path::Path,
        four: &std::path::Path,
    ) -> (Option<i32>, String) {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let files = [
            std::fs::File::create(three).unwrap(),
            std::fs::File::create(four).unwrap(),
        ];
        let fds = [files[0].as_raw_fd(), files[1].as_raw_fd()];
        assert!(fds[0] != 4 && fds[1] != 3, "{fds:?}");
        // SAFETY: dup2 in the forked child before exec is async-signal-safe;
        // the sources are open files of this process; if they are 3 and 4 in the
        // other order the second dup2 would clobber the first, so check.
        unsafe {
            self.pre_exec(move || {
                for (from, to) in [(fds[0], 3), (fds[1], 4)] {
                    // dup2 onto itself keeps close-on-exec: clear it then.
                    let rc = if from == to {
                        libc::fcntl(to, libc::F_SETFD, 0)
                    } else {
                        libc::dup2(from, to)
                    };
                    if rc < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let out = self.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}
