//! Shared set-up for the tests against a real Redis server.
//!
//! The shared server is `LEASEHOLD_TEST_REDIS_URL` (default: the one
//! `scripts/redis.sh start` runs, see [`DEFAULT_URL`]); each test binary
//! uses a key prefix of its own there. Tests that restart, empty or kill
//! connections of a server start a private one ([`PrivateServer`]), so the
//! shared one is never disturbed. Without a server the tests are skipped,
//! loudly, unless `LEASEHOLD_REQUIRE_EMULATORS=1`, which makes them fail
//! instead.

#![allow(dead_code)]

use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use leasehold_redis::{redis, RedisBackend, RedisBackendBuilder};

/// What `scripts/redis.sh url` prints.
pub const DEFAULT_URL: &str = "redis://:leasehold-test-pw-5c1d@127.0.0.1:63799/0";

/// The test stores' max TTL: above every TTL the tests use, and the
/// quarantine of a new store (see `settled`).
pub const MAX_TTL: Duration = Duration::from_secs(5);

pub fn url() -> String {
    std::env::var("LEASEHOLD_TEST_REDIS_URL").unwrap_or_else(|_| DEFAULT_URL.to_string())
}

/// `url` with `prefix` and `max_ttl` parameters added.
pub fn url_for(prefix: &str) -> String {
    with_params(&url(), prefix)
}

pub fn with_params(url: &str, prefix: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}prefix={prefix}&max_ttl={}s", MAX_TTL.as_secs())
}

/// Whether something accepts TCP connections at the URL's host and port.
pub fn reachable() -> Result<(), String> {
    let url = url();
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(&url);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let hostport = authority
        .rsplit_once('@')
        .map(|(_, h)| h)
        .unwrap_or(authority);
    let hostport = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:6379")
    };
    let addrs = hostport
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {hostport}: {e}"))?;
    for addr in addrs {
        if TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok() {
            return Ok(());
        }
    }
    Err(format!(
        "no Redis server at {hostport} (run scripts/redis.sh start, or set LEASEHOLD_TEST_REDIS_URL)"
    ))
}

/// Whether the server is there; if not, says so (or fails the test under
/// `LEASEHOLD_REQUIRE_EMULATORS=1`).
pub fn available() -> bool {
    match reachable() {
        Ok(()) => true,
        Err(why) => leasehold::conformance::skip::<()>("redis", &why).is_some(),
    }
}

/// One key prefix per test binary run: unique, so runs never see each
/// other.
pub fn prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(unique_prefix)
}

pub fn unique_prefix() -> String {
    format!(
        "lh-test-{}:",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// A builder on `prefix`, or `None` (skipped) when there is no server.
pub fn builder_for(prefix: &str) -> Option<RedisBackendBuilder> {
    match reachable() {
        Ok(()) => Some(RedisBackendBuilder::from_url(&url_for(prefix)).expect("test URL")),
        Err(why) => leasehold::conformance::skip("redis", &why),
    }
}

/// A backend on the run's prefix, or `None` (skipped), once the store is
/// out of quarantine.
pub async fn backend() -> Option<RedisBackend> {
    let backend = builder_for(prefix())?.build().await.expect("open Redis");
    settled(&backend).await;
    Some(backend)
}

/// Waits until a new store's quarantine is over.
pub async fn settled(backend: &RedisBackend) {
    // A new epoch begins at the server clock's next second: until then
    // its age reads 0, so ask again until it is old enough.
    loop {
        let epoch = backend.epoch().await.expect("read the epoch");
        let full = epoch.max_ttl + epoch.max_ttl / 1000 + Duration::from_millis(50);
        let age = epoch.age.unwrap_or_default();
        if age >= full {
            return;
        }
        tokio::time::sleep(full - age).await;
    }
}

pub fn unique_key(test: &str) -> String {
    format!(
        "{test}/{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Runs one command on a connection of its own (as an administrator
/// would), on the server `url` names.
pub async fn admin<T: redis::FromRedisValue>(url: &str, cmd: &redis::Cmd) -> T {
    let base = url.split('?').next().unwrap();
    let client = redis::Client::open(base).expect("admin URL");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("admin connection");
    cmd.query_async(&mut conn).await.expect("admin command")
}

/// A Redis server of a test's own (started with `scripts/redis.sh`, on a
/// port of its own), for restarts, FLUSHALL and killed connections.
pub struct PrivateServer {
    pub port: u16,
    dir: PathBuf,
    persist: bool,
}

pub const PRIVATE_PASSWORD: &str = "private-test-pw-40e1";

impl PrivateServer {
    /// Starts one (with an append-only file if `persist`), or `None`
    /// (skipped) when Redis is not installed.
    pub async fn start(persist: bool) -> Option<Self> {
        let installed = std::process::Command::new("redis-server")
            .arg("--version")
            .output()
            .is_ok();
        if !installed {
            return leasehold::conformance::skip(
                "redis",
                "redis-server is not installed (scripts/redis.sh start installs it)",
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!(
            "leasehold-redis-private-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        let server = PrivateServer { port, dir, persist };
        server.script("start").await;
        Some(server)
    }

    pub async fn script(&self, command: &str) {
        let status = tokio::process::Command::new(script_path())
            .arg(command)
            .envs(self.env())
            .status()
            .await
            .unwrap();
        assert!(status.success(), "scripts/redis.sh {command} failed");
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LEASEHOLD_REDIS_PORT", self.port.to_string()),
            ("LEASEHOLD_REDIS_DIR", self.dir.display().to_string()),
            ("LEASEHOLD_REDIS_PASSWORD", PRIVATE_PASSWORD.to_string()),
            (
                "LEASEHOLD_REDIS_PERSIST",
                if self.persist { "1" } else { "0" }.to_string(),
            ),
        ]
    }

    /// The server's URL (no prefix or max TTL).
    pub fn base_url(&self) -> String {
        format!("redis://:{PRIVATE_PASSWORD}@127.0.0.1:{}/0", self.port)
    }

    /// The store's URL: the default prefix, max TTL [`MAX_TTL`].
    pub fn url(&self) -> String {
        format!("{}?max_ttl={}s", self.base_url(), MAX_TTL.as_secs())
    }

    pub async fn backend(&self) -> RedisBackend {
        RedisBackendBuilder::from_url(&self.url())
            .unwrap()
            .request_timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap()
    }

    pub async fn admin<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        admin(&self.base_url(), cmd).await
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = std::process::Command::new(script_path())
            .arg("stop")
            .envs(self.env())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn script_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/redis.sh")
}
