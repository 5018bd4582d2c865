//! Shared helpers for the CLI tests: a private SQLite store per test, the
//! built binary, and ways to await processes without sleeping.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use leasehold_test_servers::with_params;

pub struct Env {
    pub dir: tempfile::TempDir,
    /// Another store than the test's own SQLite file, with the environment
    /// its URL needs (credentials).
    pub store: Option<(String, Vec<(String, String)>)>,
}

/// `$var`, the test server a store's tests use; if it is not set, `None`
/// after a visible SKIPPED line (see `leasehold_testkit::conformance::skip`).
fn test_var(store: &str, var: &str, server: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(value) => Some(value),
        Err(_) => leasehold_testkit::conformance::skip(
            store,
            &format!("{var} is not set (scripts/test.sh sets it and starts {server})"),
        ),
    }
}

/// The credentials DynamoDB Local and moto are given in the tests.
fn aws_test_credentials() -> Vec<(String, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID".into(), "leaseholdtests".into()),
        (
            "AWS_SECRET_ACCESS_KEY".into(),
            "leasehold-test-secret".into(),
        ),
    ]
}

impl Env {
    pub fn new() -> Self {
        Env {
            dir: tempfile::tempdir().unwrap(),
            store: None,
        }
    }

    /// An environment on the store named `sqlite`, `azblob`, `dynamodb`,
    /// `postgres`, `mysql`, `redis`, `etcd`, `s3` or `zookeeper`;
    /// `None` (with a visible SKIPPED line, or a panic under
    /// `LEASEHOLD_REQUIRE_EMULATORS=1`) when that store's emulator is not
    /// configured. Each call gets a container/table of its own.
    pub fn on(store: &str) -> Option<Self> {
        let mut env = Env::new();
        let unique = &uuid::Uuid::new_v4().simple().to_string()[..12];
        match store {
            "sqlite" => {}
            "azblob" => {
                let cs = test_var(store, "LEASEHOLD_TEST_AZBLOB_CONNECTION_STRING", "Azurite")?;
                env.store = Some((
                    // A new container grants nothing for its store max TTL
                    // (the epoch quarantine): Azure's shortest, 15 s.
                    format!("azblob://cli-{unique}?max_ttl=15s"),
                    vec![("AZURE_STORAGE_CONNECTION_STRING".into(), cs)],
                ));
            }
            "dynamodb" => {
                let endpoint =
                    test_var(store, "LEASEHOLD_TEST_DYNAMODB_ENDPOINT", "DynamoDB Local")?;
                env.store = Some((
                    // A new table grants nothing for its store max TTL
                    // (the epoch quarantine): keep that short.
                    format!(
                        "dynamodb://cli-{unique}?region=us-east-1&endpoint={endpoint}&max_ttl=2s"
                    ),
                    aws_test_credentials(),
                ));
            }
            "postgres" | "mysql" | "redis" | "etcd" => {
                let (var, server, own) = match store {
                    "postgres" => ("POSTGRES", "PostgreSQL", format!("table=cli_{unique}")),
                    "mysql" => ("MYSQL", "MySQL", format!("table=cli_{unique}")),
                    "redis" => ("REDIS", "Redis", format!("prefix=cli-{unique}:")),
                    _ => ("ETCD", "etcd", format!("prefix=cli-{unique}/")),
                };
                let url = test_var(store, &format!("LEASEHOLD_TEST_{var}_URL"), server)?;
                // A table or key prefix of its own, quarantined for 2 s
                // when new.
                let params = format!("{own}&max_ttl=2s");
                env.store = Some((with_params(&url, &params), vec![]));
            }
            "zookeeper" => {
                let url = test_var(store, "LEASEHOLD_TEST_ZOOKEEPER_URL", "ZooKeeper")?;
                // A store (chroot) of its own, quarantined for 2 s when new.
                let base = url.split('?').next().unwrap_or(&url).trim_end_matches('/');
                env.store = Some((format!("{base}/cli-{unique}?max_ttl=2s"), vec![]));
            }
            "s3" => {
                let endpoint = test_var(store, "LEASEHOLD_TEST_S3_ENDPOINT", "moto")?;
                env.store = Some((
                    // A store (prefix) of its own, quarantined for 4 s (its
                    // max TTL, S3's shortest TTL) when new.
                    format!(
                        "s3://leasehold-cli-tests/cli-{unique}?region=us-east-1&endpoint={endpoint}&max_ttl=4s"
                    ),
                    aws_test_credentials(),
                ));
            }
            other => panic!("unknown store {other}"),
        }
        Some(env)
    }

    pub fn url(&self) -> String {
        match &self.store {
            Some((url, _)) => url.clone(),
            None => format!("sqlite:{}", self.dir.path().join("leases.db").display()),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The `leasehold` binary on this test's store.
    pub fn leasehold(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
        cmd.env("LEASEHOLD_STORE", self.url())
            .env("D", self.dir.path())
            .env_remove("RUST_LOG");
        if let Some((_, vars)) = &self.store {
            cmd.envs(vars.iter().map(|(k, v)| (k, v)));
        }
        cmd
    }

    /// Runs `leasehold ARGS` to completion. A grant answered after its
    /// lease's safety deadline (a store slowed down by the test command's
    /// load, such as moto under three test binaries at once: `leasehold`
    /// let the grant go, ran nothing, and exited 1 saying "try again") is
    /// tried again, for up to two minutes: no test here is about a slow
    /// store's answer, and none runs anything in such an attempt.
    pub fn output(&self, args: &[&str]) -> Output {
        let started = std::time::Instant::now();
        loop {
            let out = self.leasehold().args(args).output().unwrap();
            let out = Output {
                code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            };
            if !(out.late() && started.elapsed() < Duration::from_secs(120)) {
                return out;
            }
        }
    }

    /// Runs `leasehold ARGS` (a `--json` command) to completion: it exits 0
    /// and prints JSON, returned.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.output(args);
        assert_eq!(out.code, Some(0), "{args:?}: {out:?}");
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {out:?}"))
    }

    /// Starts `leasehold ARGS` with piped stdout and stderr.
    pub fn spawn(&self, args: &[&str]) -> Child {
        piped(self.leasehold().args(args))
    }

    /// Starts `leasehold ARGS` ([`spawn`](Self::spawn)) and reads the
    /// first line of its stdout, which must be `line`; returns the child and
    /// the rest of its stdout.
    ///
    /// A grant answered after its lease's safety deadline (a store slowed
    /// down by the test command's load: `leasehold` releases it and exits
    /// 1 before the command starts) is asked for again, for up to two
    /// minutes, as [`warm_up`](Self::warm_up) does: the tests that use this
    /// check what follows a grant.
    pub fn spawn_until(&self, args: &[&str], line: &str) -> (Child, BufReader<ChildStdout>) {
        let started = std::time::Instant::now();
        loop {
            let mut child = self.spawn(args);
            let mut out = stdout_reader(&mut child);
            let first = read_line(&mut out);
            if first == line {
                return (child, out);
            }
            // It has exited, or is killed here; say why from its stderr.
            let _ = child.kill();
            let status = child.wait();
            let mut stderr = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut stderr);
            }
            let late = first.is_empty()
                && status.as_ref().is_ok_and(|s| s.code() == Some(1))
                && stderr.contains(LATE);
            if !late || started.elapsed() > Duration::from_secs(120) {
                panic!(
                    "{args:?}: first line {first:?}, not {line:?}; {status:?}; stderr: {stderr}"
                );
            }
        }
    }

    /// The same store, opened by the library in this test process.
    pub fn store(&self) -> leasehold::Store {
        leasehold_testkit::with_test_window(&leasehold::Store::open(&self.url()).unwrap())
    }
}

/// Starts `cmd` with piped stdout and stderr.
pub fn piped(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[derive(Debug)]
pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// Whether `leasehold` let a grant go that the store answered after
    /// the lease's safety deadline (exit 1, nothing run).
    pub fn late(&self) -> bool {
        self.code == Some(1) && self.stderr.contains(LATE)
    }
}

/// What `leasehold` says of a grant the store answered after the lease's
/// safety deadline.
pub const LATE: &str = "answered after the lease's safety deadline";

/// The arguments of `leasehold ARGS -- sh -c SCRIPT`: `args` split at white
/// space (so no argument of it may hold a space), then the script.
pub fn sh<'a>(args: &'a str, script: &'a str) -> Vec<&'a str> {
    let mut all: Vec<&str> = args.split_whitespace().collect();
    all.extend(["--", "sh", "-c", script]);
    all
}

/// Reads one line of a `leasehold` process's stderr, passing over reports
/// of processes it killed that another run left behind (another test's
/// `leasehold run`, whose watchdog it killed on purpose: every run sweeps
/// such leftovers as it starts, and says so first).
pub fn read_message(from: &mut BufReader<impl Read>) -> String {
    loop {
        let line = read_line(from);
        if !line.contains("left running by a `leasehold` run whose watchdog was killed") {
            return line;
        }
    }
}

/// Reads one line (blocking until the process writes it or closes).
pub fn read_line(from: &mut BufReader<impl Read>) -> String {
    let mut line = String::new();
    from.read_line(&mut line).unwrap();
    line.trim_end().to_string()
}

pub fn stdout_reader(child: &mut Child) -> BufReader<ChildStdout> {
    BufReader::new(child.stdout.take().unwrap())
}

/// Waits, without polling, until process `pid` (not necessarily our child)
/// has ended, or `timeout` passes; true if it ended.
pub fn wait_gone(pid: i32, timeout: Duration) -> bool {
    // SAFETY: plain syscalls; the fd is closed before returning.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        if fd < 0 {
            // ESRCH: no such process any more.
            return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let n = libc::poll(&mut pfd, 1, timeout.as_millis() as i32);
        libc::close(fd);
        n == 1
    }
}

pub fn kill(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
}

/// Waits for a child with a bound, killing it if the bound passes.
pub fn wait_with_timeout(child: &mut Child, timeout: Duration) -> Option<i32> {
    assert!(
        wait_gone(child.id() as i32, timeout),
        "process {} still running after {timeout:?}",
        child.id()
    );
    child.wait().unwrap().code()
}

pub fn read_all(r: &mut impl Read) -> String {
    let mut s = String::new();
    r.read_to_string(&mut s).unwrap();
    s
}

/// Whether process `pid` exists (a zombie counts).
pub fn alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Eight `leasehold run` processes on one key of `env`'s store, each with
/// `extra` options: their commands never overlap, all of them run, and
/// their tokens grow.
pub fn processes_take_turns_with_growing_tokens(env: &Env, extra: &[&str]) {
    // mkdir is atomic: it fails if another command is inside at the same time.
    let section = r#"mkdir "$D/inside" || exit 99
echo "$LEASEHOLD_FENCING_TOKEN" >> "$D/log"
sleep 0.05
rmdir "$D/inside""#;
    let mut args = vec!["run", "--wait", "60s"];
    args.extend(extra);
    args.extend(["shared", "--", "sh", "-c", section]);
    let mut children: Vec<_> = (0..8).map(|_| env.spawn(&args)).collect();
    for child in &mut children {
        assert_eq!(
            wait_with_timeout(child, Duration::from_secs(60)),
            Some(0),
            "a command overlapped another or failed"
        );
    }
    let log = std::fs::read_to_string(env.path("log")).unwrap();
    let tokens: Vec<u64> = log.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(tokens.len(), 8);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

/// A TCP proxy in front of a test server that can stop answering as a
/// server or network does: [`cut`](Proxy::cut) shuts every connection
/// through it and refuses new ones (accepted and closed at once) until
/// [`restore`](Proxy::restore).
pub struct Proxy {
    pub addr: std::net::SocketAddr,
    state: std::sync::Arc<ProxyState>,
}

struct ProxyState {
    target: std::net::SocketAddr,
    refusing: std::sync::atomic::AtomicBool,
    live: std::sync::Mutex<Vec<std::net::TcpStream>>,
    /// Chunks forwarded from clients to the server.
    writes: std::sync::atomic::AtomicUsize,
    /// Connections refused while cut.
    refused: std::sync::atomic::AtomicUsize,
}

impl Proxy {
    pub fn start(target: std::net::SocketAddr) -> Proxy {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = std::sync::Arc::new(ProxyState {
            target,
            refusing: Default::default(),
            live: Default::default(),
            writes: Default::default(),
            refused: Default::default(),
        });
        let s = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if s.refusing.load(Ordering::SeqCst) {
                    drop(client);
                    s.refused.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(s.target) else {
                    continue;
                };
                let mut live = s.live.lock().unwrap();
                live.push(client.try_clone().unwrap());
                live.push(server.try_clone().unwrap());
                drop(live);
                let pump = |mut from: std::net::TcpStream,
                            mut to: std::net::TcpStream,
                            count: Option<std::sync::Arc<ProxyState>>| {
                    std::thread::spawn(move || {
                        use std::io::Write;
                        let mut buf = [0u8; 16384];
                        loop {
                            match from.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => {
                                    if to.write_all(&buf[..n]).is_err() {
                                        break;
                                    }
                                    if let Some(s) = &count {
                                        s.writes.fetch_add(1, Ordering::SeqCst);
                                    }
                                }
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                        let _ = from.shutdown(std::net::Shutdown::Both);
                    });
                };
                pump(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    Some(s.clone()),
                );
                pump(server, client, None);
            }
        });
        Proxy { addr, state }
    }

    /// Every connection through the proxy shut, new ones refused.
    pub fn cut(&self) {
        use std::sync::atomic::Ordering;
        self.state.refusing.store(true, Ordering::SeqCst);
        for s in self.state.live.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// New connections forwarded again.
    pub fn restore(&self) {
        self.state
            .refusing
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many connections were refused while cut.
    pub fn refused(&self) -> usize {
        self.state.refused.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many chunks clients have sent through the proxy.
    pub fn writes(&self) -> usize {
        self.state.writes.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Env {
    /// Sends this environment's server store through a new [`Proxy`]
    /// (its URL, or Azure's connection string, rewritten); `None` for
    /// SQLite.
    pub fn through_proxy(&mut self) -> Option<Proxy> {
        let (url, vars) = self.store.as_mut()?;
        for (_, v) in vars.iter_mut() {
            if v == "UseDevelopmentStorage=true" {
                *v = leasehold_azure::dev_connection_string(10000);
            }
        }
        let find = |text: &str| {
            let at = text.find("127.0.0.1:")? + "127.0.0.1:".len();
            let port: String = text[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            Some(format!("127.0.0.1:{port}"))
        };
        let target = find(url).or_else(|| vars.iter().find_map(|(_, v)| find(v)))?;
        let proxy = Proxy::start(target.parse().unwrap());
        let to = proxy.addr.to_string();
        *url = url.replace(&target, &to);
        for (_, v) in vars.iter_mut() {
            *v = v.replace(&target, &to);
        }
        Some(proxy)
    }
}

impl Env {
    /// Waits out a new store's quarantine until any new process is granted
    /// at once: a `run` of a key of its own with no wait (one try), again
    /// until it is granted, and then a little more, since the age a store
    /// vouches for is taken short (by a thousandth, for a clock that runs
    /// fast; on etcd, to whole seconds; DynamoDB's dates are whole seconds
    /// too; Azure's, from two whole-second dates, up to 2 s short), so a
    /// process just after the first grant may still meet the quarantine's
    /// last moment.
    pub fn warm_up(&self, ttl: &str) {
        let started = std::time::Instant::now();
        loop {
            let out = self.output(&["run", "warm-up", "--ttl", ttl, "--", "true"]);
            // A grant answered after its lease's safety deadline (a store
            // slowed down by the test command's load; released again) is
            // tried again too: the warm-up is not what the tests check.
            let late = out.late();
            match out.code {
                Some(0) => break,
                Some(75) | Some(1)
                    if (out.code == Some(75) || late)
                        && started.elapsed() < Duration::from_secs(120) =>
                {
                    std::thread::sleep(Duration::from_millis(100))
                }
                _ => panic!("{out:?}"),
            }
        }
        std::thread::sleep(Duration::from_millis(2100));
    }
}

/// The store-loss tests' first command: prints its fencing token, the pid
/// of a grandchild in the background and its own, and waits.
pub const TREE: &str = "echo $LEASEHOLD_FENCING_TOKEN; sleep 300 & echo $!; echo $$; wait";

/// What a [`TREE`] command printed: its token and the two pids (the rest of
/// its stdout is drained in the background).
pub fn token_and_pids(child: &mut Child) -> (u64, [i32; 2]) {
    let mut out = stdout_reader(child);
    let token: u64 = read_line(&mut out).parse().expect("the first token");
    let pids = [(); 2].map(|_| read_line(&mut out).parse().expect("a pid"));
    std::thread::spawn(move || read_all(&mut out));
    (token, pids)
}

/// The store-loss tests' second command: says `alive PID` for each of
/// `pids` still running when it starts, then prints its fencing token.
pub fn tree_check(pids: [i32; 2]) -> String {
    format!(
        "for p in {} {}; do kill -0 $p 2>/dev/null && echo alive $p; done; echo $LEASEHOLD_FENCING_TOKEN",
        pids[0], pids[1]
    )
}

/// The stdout of a [`tree_check`] command run after the store was `lost`
/// under a holder with token `first_token`: only a token, above that one
/// (none of the first command's processes still ran).
pub fn assert_new_token_and_no_tree(stdout: &str, first_token: u64, lost: &str) {
    let mut lines = stdout.lines();
    let token: u64 = lines
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("the first command still ran when the second started: {stdout}"));
    assert!(
        token > first_token,
        "token {token} after the {lost} was lost, {first_token} before"
    );
    assert_eq!(
        lines.next(),
        None,
        "the first command's processes were gone: {stdout}"
    );
}

/// For each store listed (`name` or `name if "feature"`), a module of that
/// name with a `#[test]` for each test listed, calling the test function
/// of the same name with the store's name.
#[allow(unused_macros)]
macro_rules! on_stores {
    ([$($store:ident $(if $feature:literal)?),+ $(,)?] $tests:tt) => {
        $( $crate::common::on_stores!(@one $store [$($feature)?] $tests); )+
    };
    (@one $store:ident [$($feature:literal)?] [$($test:ident),+ $(,)?]) => {
        $(#[cfg(feature = $feature)])?
        mod $store { $( #[test] fn $test() { super::$test(stringify!($store)) } )+ }
    };
}
#[allow(unused_imports)]
pub(crate) use on_stores;

/// [`on_stores!`] on every store.
#[allow(unused_macros)]
macro_rules! on_every_store {
    ($($test:ident),+ $(,)?) => {
        $crate::common::on_stores!(
            [
                sqlite, azblob, dynamodb, postgres, mysql if "mysql", redis, etcd if "etcd",
                s3 if "s3", zookeeper if "zookeeper"
            ]
            [$($test),+]
        );
    };
}
#[allow(unused_imports)]
pub(crate) use on_every_store;

/// [`on_stores!`] on every store that is a server reached by URL.
#[allow(unused_macros)]
macro_rules! on_every_server {
    ($($test:ident),+ $(,)?) => {
        $crate::common::on_stores!(
            [postgres, mysql if "mysql", redis, etcd if "etcd", zookeeper if "zookeeper"]
            [$($test),+]
        );
    };
}
#[allow(unused_imports)]
pub(crate) use on_every_server;
