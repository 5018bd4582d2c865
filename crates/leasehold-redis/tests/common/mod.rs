//! Shared set-up for the tests against a real Redis server.
//!
//! The shared server is `LEASEHOLD_TEST_REDIS_URL` (default: the one
//! `scripts/redis.sh start` runs, see [`Redis::DEFAULT_URL`]); each test
//! binary uses a key prefix of its own there. Tests that restart, empty or
//! kill connections of a server start a private one ([`PrivateServer`]),
//! so the shared one is never disturbed. Without a server the tests are
//! skipped, loudly, unless `LEASEHOLD_REQUIRE_EMULATORS=1`, which makes
//! them fail instead.

#![allow(dead_code)]

use std::ops::Deref;

use leasehold::Store;
use leasehold_redis::{redis, RedisBackend, RedisBackendBuilder};
use leasehold_test_servers::store::ServerStore;
use leasehold_test_servers::{self as servers, ScriptServer};

/// The Redis store, as the shared test set-up sees it.
pub struct Redis;

impl ServerStore for Redis {
    leasehold_test_servers::server_store_methods!(RedisBackend, RedisBackendBuilder);

    const NAME: &'static str = "redis";
    const SERVER: &'static str = "Redis";
    const URL_VAR: &'static str = "LEASEHOLD_TEST_REDIS_URL";
    const DEFAULT_URL: &'static str = "redis://:leasehold-test-pw-5c1d@127.0.0.1:63799/0";
    const DEFAULT_PORT: u16 = 6379;
    const NAMESPACE: &'static str = "prefix";

    fn unique_namespace() -> String {
        format!("{}:", servers::unique_name("lh-test-"))
    }
}

leasehold_test_servers::server_store_helpers!(Redis, prefix, unique_prefix);

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
pub struct PrivateServer(ScriptServer);

impl Deref for PrivateServer {
    type Target = ScriptServer;
    fn deref(&self) -> &ScriptServer {
        &self.0
    }
}

pub const PRIVATE_PASSWORD: &str = "private-test-pw-40e1";

impl PrivateServer {
    /// Starts one (with an append-only file if `persist`), or `None`
    /// (skipped) when Redis is not installed.
    pub async fn start(persist: bool) -> Option<Self> {
        let installed = servers::installed("redis-server");
        let port = servers::free_port();
        ScriptServer::start(
            REPO,
            "redis",
            installed,
            "redis-server",
            port,
            |port, dir| {
                vec![
                    ("LEASEHOLD_REDIS_PORT", port.to_string()),
                    ("LEASEHOLD_REDIS_DIR", dir.display().to_string()),
                    ("LEASEHOLD_REDIS_PASSWORD", PRIVATE_PASSWORD.to_string()),
                    (
                        "LEASEHOLD_REDIS_PERSIST",
                        if persist { "1" } else { "0" }.to_string(),
                    ),
                ]
            },
        )
        .await
        .map(PrivateServer)
    }

    /// The server's URL (no prefix or max TTL).
    pub fn base_url(&self) -> String {
        format!("redis://:{PRIVATE_PASSWORD}@127.0.0.1:{}/0", self.port)
    }

    /// The store's URL: the default prefix, max TTL [`MAX_TTL`].
    pub fn url(&self) -> String {
        format!("{}?max_ttl={}s", self.base_url(), MAX_TTL.as_secs())
    }

    /// A backend on [`PrivateServer::url`] (1 s request timeout).
    pub async fn backend(&self) -> RedisBackend {
        Redis::private_backend(&self.url()).await
    }

    /// A store on [`PrivateServer::url`], out of quarantine.
    pub async fn settled_store(&self) -> Store {
        let backend = self.backend().await;
        settled(&backend).await;
        leasehold_testkit::test_store(backend)
    }

    pub async fn admin<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        admin(&self.base_url(), cmd).await
    }

    /// Makes this server a replica of `primary` (as Sentinel would, with
    /// `REPLICAOF`) and waits until it has loaded the primary's data (a
    /// full resynchronisation when their histories differ).
    pub async fn replicate_from(&self, primary: &PrivateServer) {
        let set = |name: &str, value: String| {
            let mut cmd = redis::cmd("CONFIG");
            cmd.arg("SET").arg(name).arg(value);
            cmd
        };
        let _: () = self
            .admin(&set("masterauth", PRIVATE_PASSWORD.to_string()))
            .await;
        // Start the full sync at once (the default waits 5 s for more
        // replicas).
        let _: () = primary
            .admin(&set("repl-diskless-sync-delay", "0".to_string()))
            .await;
        let _: () = self
            .admin(redis::cmd("REPLICAOF").arg("127.0.0.1").arg(primary.port))
            .await;
        for _ in 0..200 {
            let info: String = self.admin(redis::cmd("INFO").arg("replication")).await;
            if info.contains("master_link_status:up") && info.contains("master_sync_in_progress:0")
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("the replica did not synchronise within 10 s");
    }

    /// Promotes this server (`REPLICAOF NO ONE`).
    pub async fn promote(&self) {
        let _: () = self
            .admin(redis::cmd("REPLICAOF").arg("NO").arg("ONE"))
            .await;
    }

    /// Waits until every write this primary took has reached its one
    /// replica (`WAIT`, 10 s at most).
    pub async fn replicated(&self) {
        for _ in 0..100 {
            let acked: i64 = self.admin(redis::cmd("WAIT").arg(1).arg(100)).await;
            if acked == 1 {
                return;
            }
        }
        panic!("the replica did not catch up within 10 s");
    }
}

/// The repository's root, whose `scripts/` run the servers.
pub const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The Redis store through Sentinel (`scripts/redis-sentinel.sh`: a
/// primary, a replica and three sentinels).
pub struct RedisSentinel;

impl ServerStore for RedisSentinel {
    leasehold_test_servers::server_store_methods!(RedisBackend, RedisBackendBuilder);

    const NAME: &'static str = "redis-sentinel";
    const SERVER: &'static str = "Redis Sentinel";
    const URL_VAR: &'static str = "LEASEHOLD_TEST_REDIS_SENTINEL_URL";
    const DEFAULT_URL: &'static str = "redis+sentinel://:leasehold-test-pw-5c1d@127.0.0.1:26380,127.0.0.1:26381,127.0.0.1:26382/leasehold/0";
    const DEFAULT_PORT: u16 = 26379;
    const NAMESPACE: &'static str = "prefix";

    fn unique_namespace() -> String {
        format!("{}:", servers::unique_name("lh-test-"))
    }
}

/// The Redis store on a Redis Cluster (`scripts/redis-cluster.sh`: three
/// primaries, each with a replica).
pub struct RedisCluster;

impl ServerStore for RedisCluster {
    leasehold_test_servers::server_store_methods!(RedisBackend, RedisBackendBuilder);

    const NAME: &'static str = "redis-cluster";
    const SERVER: &'static str = "Redis Cluster";
    const URL_VAR: &'static str = "LEASEHOLD_TEST_REDIS_CLUSTER_URL";
    const DEFAULT_URL: &'static str =
        "redis+cluster://:leasehold-test-pw-5c1d@127.0.0.1:63820,127.0.0.1:63821,127.0.0.1:63822";
    const DEFAULT_PORT: u16 = 6379;
    const NAMESPACE: &'static str = "prefix";

    fn unique_namespace() -> String {
        format!("{}:", servers::unique_name("lh-test-"))
    }
}

/// The test helpers of the store through Sentinel.
pub mod sentinel {
    leasehold_test_servers::server_store_helpers!(super::RedisSentinel, prefix, unique_prefix);
}

/// The test helpers of the store on a cluster.
pub mod cluster {
    leasehold_test_servers::server_store_helpers!(super::RedisCluster, prefix, unique_prefix);
}

/// Runs `scripts/{script}.sh` with `args` to its end; its output.
pub async fn script(script: &str, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new(format!("{REPO}/scripts/{script}.sh"));
    cmd.args(args);
    servers::admin_tool(cmd).await
}
