//! What every server store's tests share, written once (not published:
//! see its `Cargo.toml`): the shared test
//! server's URL from the environment, whether it is there (skip or fail,
//! see [`skip`](leasehold_testkit::conformance::skip)), unique names, and private servers run by the
//! repository's `scripts/*.sh` for tests that restart, empty or stop one.
//! A store's own test helpers keep only what is its own (its URL's shape,
//! its builder): a store reached by URL says it once, as a
//! [`ServerStore`](store::ServerStore), and the tests every such store runs
//! on its servers are in [`suite`].

pub mod store;
pub mod suite;

// What the macros name through `$crate`.
#[doc(hidden)]
pub use leasehold;
#[doc(hidden)]
pub use leasehold_testkit;

use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The shared test server's URL: `$var` if set, else `default` (what the
/// store's `scripts/*.sh url` prints).
pub fn server_url(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_string())
}

/// `url` with `params` (`a=1&b=2`) added to its query.
pub fn with_params(url: &str, params: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{params}")
}

/// The first `HOST:PORT` of `url`'s authority (after any `user:pass@`;
/// of several, comma-separated, the first), with `default_port` when it
/// names none.
pub fn host_port(url: &str, default_port: u16) -> String {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let hosts = authority
        .rsplit_once('@')
        .map(|(_, h)| h)
        .unwrap_or(authority);
    let first = hosts.split(',').next().unwrap_or_default();
    // A port after the last ':' (not inside an IPv6 literal's brackets).
    match first.rsplit_once(':') {
        Some((_, port)) if !port.contains(']') && port.parse::<u16>().is_ok() => first.to_string(),
        _ => format!("{first}:{default_port}"),
    }
}

/// Whether something accepts TCP connections at `url`'s first host and
/// port; if not, why, saying how to start the `store`'s server
/// (`scripts/{script}.sh start`) or point the tests elsewhere (`$var`).
pub fn reachable(
    url: &str,
    default_port: u16,
    store: &str,
    script: &str,
    var: &str,
) -> Result<(), String> {
    let hostport = host_port(url, default_port);
    let addrs = hostport
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {hostport}: {e}"))?;
    for addr in addrs {
        if TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok() {
            return Ok(());
        }
    }
    Err(format!(
        "no {store} server at {hostport} (run scripts/{script}.sh start, or set {var})"
    ))
}

/// `prefix` followed by 12 random hex digits: a name no other test run
/// uses.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Where [`free_port`] looks: above every default port of the test
/// command's servers (8000, 10000, 23799 to 23809 and torture's 238xx) and
/// below the kernel's usual ephemeral range (32768 and up).
const PRIVATE_PORTS: std::ops::Range<u16> = 24_000..32_000;

/// A free TCP port on 127.0.0.1 for a test's own server, whose next port is
/// free too (etcd listens on both). Free when asked: another process may
/// take it before the server does, which the server's start then reports.
///
/// It is drawn outside the kernel's ephemeral range (where the machine's
/// range allows), because a server a test restarts leaves its ports free
/// meanwhile, and in that range any outgoing connection of any process may
/// get one as its source port: a restart of a test's etcd failed in CI
/// with its peer port taken so.
pub fn free_port() -> u16 {
    use rand::Rng;
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    if let Some(range) = private_ports() {
        for _ in 0..200 {
            let p = rand::rng().random_range(range.start..range.end - 1);
            if free(p) && free(p + 1) {
                return p;
            }
        }
    }
    // A machine whose ephemeral range starts lower: the kernel's choice.
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port on 127.0.0.1")
}

/// [`PRIVATE_PORTS`] below this machine's ephemeral range, if any is.
fn private_ports() -> Option<std::ops::Range<u16>> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let range = PRIVATE_PORTS.start..PRIVATE_PORTS.end.min(ephemeral_low);
    (range.len() > 2).then_some(range)
}

/// Whether `program --version` runs: the server is installed.
pub fn installed(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs an administrator's tool (`psql`, `pg_dump`, `etcdctl`, ...) to
/// its end, as an operator would, off the async threads; returns its
/// standard output. Panics, with the command line and the tool's standard
/// error, if it cannot be run or fails.
// Not an `async fn`: the build script takes every `pub async fn` at the
// start of a line in this folder for a conformance test.
#[allow(clippy::manual_async_fn)]
pub fn admin_tool(mut cmd: std::process::Command) -> impl std::future::Future<Output = String> {
    async move {
        let shown = format!("{cmd:?}");
        let out = tokio::task::spawn_blocking(move || cmd.output())
            .await
            .expect("the tool's task")
            .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
        assert!(
            out.status.success(),
            "{shown}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// An emulator the tests reach at an endpoint URL given by an environment
/// variable (DynamoDB Local, moto for S3): where it is, and whether it is
/// there (if not, the tests are skipped, or fail under
/// `LEASEHOLD_REQUIRE_EMULATORS=1`, see [`skip`](leasehold_testkit::conformance::skip)).
#[derive(Debug, Clone, Copy)]
pub struct Emulator {
    /// The store's name, as skip messages give it (`"s3"`).
    pub store: &'static str,
    /// What the emulator is called in messages (`"S3 emulator (moto)"`).
    pub name: &'static str,
    /// The script that starts it: `scripts/{script}.sh start`.
    pub script: &'static str,
    /// The variable that gives its endpoint.
    pub var: &'static str,
    /// The endpoint when the variable is not set (where the script runs it).
    pub default: &'static str,
}

impl Emulator {
    /// Its endpoint URL.
    pub fn endpoint(&self) -> String {
        server_url(self.var, self.default)
    }

    /// Whether something accepts TCP connections at the endpoint; if not,
    /// why, and how to start it.
    pub fn reachable(&self) -> Result<(), String> {
        reachable(&self.endpoint(), 80, self.name, self.script, self.var)
    }

    /// `Some(make())` when the emulator is there; else `None`, after saying
    /// so (or failing the test, see [`skip`](leasehold_testkit::conformance::skip)).
    pub fn then<T>(&self, make: impl FnOnce() -> T) -> Option<T> {
        match self.reachable() {
            Ok(()) => Some(make()),
            Err(why) => leasehold_testkit::conformance::skip(self.store, &why),
        }
    }

    /// Whether the emulator is there (see [`then`](Self::then)).
    pub fn available(&self) -> bool {
        self.then(|| ()).is_some()
    }
}

/// A server of a test's own, run by one of the repository's scripts
/// (`scripts/NAME.sh start|stop|...`) on a port of its own, with its data
/// in a fresh temporary directory, both passed to the script through the
/// environment the store's script reads. Stopped, and its directory
/// removed, when dropped.
#[derive(Debug)]
pub struct ScriptServer {
    script: PathBuf,
    env: Vec<(String, String)>,
    /// The port it listens on.
    pub port: u16,
    dir: PathBuf,
}

impl ScriptServer {
    /// A server `scripts/{name}.sh` will run on `port` (see [`free_port`]),
    /// in a new temporary directory; `env(port, dir)` gives the variables
    /// the script takes them (and anything else) from. Not started: call
    /// [`script`](Self::script)`("start")` (or use [`start`](Self::start)). `repo` is the repository's root
    /// (from a store crate: `concat!(env!("CARGO_MANIFEST_DIR"), "/../..")`).
    pub fn new(
        repo: impl AsRef<Path>,
        name: &str,
        port: u16,
        env: impl FnOnce(u16, &Path) -> Vec<(&'static str, String)>,
    ) -> Self {
        let dir = std::env::temp_dir().join(unique_name(&format!("leasehold-{name}-private-")));
        let env = env(port, &dir)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        ScriptServer {
            script: repo.as_ref().join("scripts").join(format!("{name}.sh")),
            env,
            port,
            dir,
        }
    }

    /// A server [`new`](Self::new) on a free port, started; or `None`
    /// (skipped, see [`skip`](leasehold_testkit::conformance::skip)) when the server is not
    /// `installed` (`program` names it in the message).
    pub async fn start(
        repo: impl AsRef<Path>,
        name: &str,
        installed: bool,
        program: &str,
        port: u16,
        env: impl FnOnce(u16, &Path) -> Vec<(&'static str, String)>,
    ) -> Option<Self> {
        if !installed {
            return leasehold_testkit::conformance::skip(
                name,
                &format!("{program} is not installed (scripts/{name}.sh start installs it)"),
            );
        }
        let server = ScriptServer::new(repo, name, port, env);
        server.script("start").await;
        Some(server)
    }

    /// Its data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `scripts/NAME.sh COMMAND` on this server (`start`, `stop`,
    /// `restart`, ...); panics if the script fails.
    pub async fn script(&self, command: &str) {
        let mut cmd = self.command(command);
        let status = tokio::task::spawn_blocking(move || cmd.status())
            .await
            .expect("the script's task")
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.script.display()));
        assert!(
            status.success(),
            "{} {command} failed: {status}",
            self.script.display()
        );
    }

    /// Runs `scripts/NAME.sh COMMAND ARGS...` on this server (a
    /// `failover KEY`); panics if the script fails.
    pub async fn script_with(&self, command: &str, args: &[&str]) {
        let mut cmd = self.command(command);
        cmd.args(args);
        admin_tool(cmd).await;
    }

    /// What `scripts/NAME.sh COMMAND` prints (`url`, `primary`); panics if
    /// the script fails.
    pub async fn output(&self, command: &str) -> String {
        admin_tool(self.command(command)).await
    }

    fn command(&self, command: &str) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.script);
        cmd.arg(command).envs(self.env.iter().cloned());
        cmd
    }
}

impl Drop for ScriptServer {
    fn drop(&mut self) {
        let _ = self.command("stop").status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_takes_the_first_host_after_credentials_with_a_default_port() {
        assert_eq!(
            host_port("redis://:pw@127.0.0.1:63799/0", 6379),
            "127.0.0.1:63799"
        );
        assert_eq!(host_port("redis://localhost/0", 6379), "localhost:6379");
        assert_eq!(host_port("etcd://a:1,b:2?prefix=x/", 2379), "a:1");
        assert_eq!(host_port("postgres://u:p@h?x=1", 5432), "h:5432");
        assert_eq!(host_port("etcd://[::1]:23", 2379), "[::1]:23");
    }

    #[test]
    fn with_params_appends_to_a_query_or_starts_one() {
        assert_eq!(with_params("x://h", "a=1"), "x://h?a=1");
        assert_eq!(with_params("x://h?b=2", "a=1"), "x://h?b=2&a=1");
    }

    #[test]
    fn unique_names_differ() {
        let a = unique_name("p-");
        assert!(a.starts_with("p-") && a.len() == 14, "{a}");
        assert_ne!(a, unique_name("p-"));
    }

    #[test]
    fn private_ports_are_free_with_their_next_and_outside_the_ephemeral_range() {
        for _ in 0..20 {
            let p = free_port();
            if let Some(range) = private_ports() {
                assert!(range.contains(&p) && range.contains(&(p + 1)), "{p}");
            }
            for q in [p, p + 1] {
                std::net::TcpListener::bind(("127.0.0.1", q)).unwrap();
            }
        }
    }

    #[test]
    fn a_closed_port_is_not_reachable_and_says_how_to_start_the_server() {
        let port = free_port();
        let why = reachable(
            &format!("x://127.0.0.1:{port}"),
            1,
            "demo",
            "demo",
            "DEMO_URL",
        )
        .unwrap_err();
        assert!(
            why.contains("scripts/demo.sh start") && why.contains("DEMO_URL"),
            "{why}"
        );
        let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = open.local_addr().unwrap().port();
        reachable(
            &format!("x://127.0.0.1:{port}"),
            1,
            "demo",
            "demo",
            "DEMO_URL",
        )
        .unwrap();
    }
}
