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

use std::sync::OnceLock;
use std::time::Duration;

use leasehold::conformance::servers::{self, ScriptServer};
use leasehold_redis::{redis, RedisBackend, RedisBackendBuilder};

/// What `scripts/redis.sh url` prints.
pub const DEFAULT_URL: &str = "redis://:leasehold-test-pw-5c1d@127.0.0.1:63799/0";

/// The test stores' max TTL: above every TTL the tests use, and the
/// quarantine of a new store (see `settled`).
pub const MAX_TTL: Duration = Duration::from_secs(5);

pub fn url() -> String {
    servers::server_url("LEASEHOLD_TEST_REDIS_URL", DEFAULT_URL)
}

/// `url` with `prefix` and `max_ttl` parameters added.
pub fn url_for(prefix: &str) -> String {
    with_params(&url(), prefix)
}

pub fn with_params(url: &str, prefix: &str) -> String {
    servers::with_params(
        url,
        &format!("prefix={prefix}&max_ttl={}s", MAX_TTL.as_secs()),
    )
}

/// Whether something accepts TCP connections at the URL's host and port.
pub fn reachable() -> Result<(), String> {
    servers::reachable(&url(), 6379, "Redis", "redis", "LEASEHOLD_TEST_REDIS_URL")
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
    format!("{}:", servers::unique_name("lh-test-"))
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
    servers::unique_name(&format!("{test}/"))
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
    server: ScriptServer,
}

pub const PRIVATE_PASSWORD: &str = "private-test-pw-40e1";

impl PrivateServer {
    /// Starts one (with an append-only file if `persist`), or `None`
    /// (skipped) when Redis is not installed.
    pub async fn start(persist: bool) -> Option<Self> {
        if !servers::installed("redis-server") {
            return leasehold::conformance::skip(
                "redis",
                "redis-server is not installed (scripts/redis.sh start installs it)",
            );
        }
        let server = ScriptServer::new(REPO, "redis", servers::free_port(), |port, dir| {
            vec![
                ("LEASEHOLD_REDIS_PORT", port.to_string()),
                ("LEASEHOLD_REDIS_DIR", dir.display().to_string()),
                ("LEASEHOLD_REDIS_PASSWORD", PRIVATE_PASSWORD.to_string()),
                (
                    "LEASEHOLD_REDIS_PERSIST",
                    if persist { "1" } else { "0" }.to_string(),
                ),
            ]
        });
        server.run("start").await;
        Some(PrivateServer {
            port: server.port,
            server,
        })
    }

    /// Runs `scripts/redis.sh COMMAND` on this server.
    pub async fn script(&self, command: &str) {
        self.server.run(command).await
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

/// The repository's root, whose `scripts/` run the servers.
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
