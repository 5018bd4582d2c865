//! Shared set-up for the tests against a real MySQL or MariaDB server.
//!
//! The server is `LEASEHOLD_TEST_MYSQL_URL` (default: the one
//! `scripts/mysql.sh start` runs, see [`Mysql::DEFAULT_URL`]), each test
//! binary on a table of its own there. Without a server there the tests
//! are skipped, loudly, unless `LEASEHOLD_REQUIRE_EMULATORS=1`, which makes
//! them fail instead.

#![allow(dead_code)]

use leasehold_mysql::mysql_async::prelude::Queryable;
use leasehold_mysql::mysql_async::{self, Conn, Row};
use leasehold_mysql::{MysqlBackend, MysqlBackendBuilder};
use leasehold_test_servers::store::ServerStore;
use leasehold_test_servers::{self as servers};

/// The MySQL store, as the shared test set-up sees it.
pub struct Mysql;

impl ServerStore for Mysql {
    type Backend = MysqlBackend;
    type Builder = MysqlBackendBuilder;

    const NAME: &'static str = "mysql";
    const SERVER: &'static str = "MySQL";
    const URL_VAR: &'static str = "LEASEHOLD_TEST_MYSQL_URL";
    const DEFAULT_URL: &'static str =
        "mysql://leasehold:leasehold-test-pw-5d1b@127.0.0.1:33069/leasehold";
    const DEFAULT_PORT: u16 = 3306;
    const NAMESPACE: &'static str = "table";

    fn unique_namespace() -> String {
        servers::unique_name("leasehold_test_")
    }

    fn from_url(url: &str) -> leasehold::Result<MysqlBackendBuilder> {
        MysqlBackendBuilder::from_url(url)
    }

    /// MySQL has no notifications: waiters always poll.
    fn wake_ups(builder: MysqlBackendBuilder, _on: bool) -> MysqlBackendBuilder {
        builder
    }

    fn request_timeout(
        builder: MysqlBackendBuilder,
        t: std::time::Duration,
    ) -> MysqlBackendBuilder {
        builder.request_timeout(t)
    }

    async fn build(builder: MysqlBackendBuilder) -> leasehold::Result<MysqlBackend> {
        builder.build().await
    }

    async fn epoch(backend: &MysqlBackend) -> leasehold::Result<leasehold::backend::StoreEpoch> {
        backend.epoch().await
    }

    async fn listening(backend: &MysqlBackend) {
        backend.listening().await
    }
}

leasehold_test_servers::server_store_helpers!(Mysql, table, unique_table);

/// A connection of its own (as an administrator would have).
pub async fn admin() -> Conn {
    let opts = MysqlBackendBuilder::from_url(&url())
        .expect("test URL")
        .opts()
        .clone();
    Conn::new(opts).await.expect("connect")
}

/// Runs `sql` (one or more statements) on a connection of its own.
pub async fn sql(sql: &str) {
    admin().await.query_drop(sql).await.expect(sql);
}

/// The single number `sql` returns, on a connection of its own.
pub async fn query_i64(sql: &str) -> i64 {
    let row: Row = admin()
        .await
        .query_first(sql)
        .await
        .expect(sql)
        .expect("a row");
    mysql_async::from_value(row[0].clone())
}

const PRIVATE_PASSWORD: &str = "restart-test-pw-62d0";

/// A MariaDB server of a test's own (a new data directory, started with
/// `scripts/mysql.sh` on a port of its own, stopped and removed on drop),
/// so the shared server is never disturbed.
pub struct PrivateServer(servers::ScriptServer);

impl std::ops::Deref for PrivateServer {
    type Target = servers::ScriptServer;
    fn deref(&self) -> &servers::ScriptServer {
        &self.0
    }
}

impl PrivateServer {
    /// Starts one, or `None` (skipped) when MariaDB is not installed.
    pub async fn start() -> Option<Self> {
        let installed = std::path::Path::new("/usr/sbin/mariadbd").exists();
        let port = servers::free_port();
        servers::ScriptServer::start(REPO, "mysql", installed, "MariaDB", port, |port, dir| {
            vec![
                ("LEASEHOLD_MYSQL_PORT", port.to_string()),
                ("LEASEHOLD_MYSQL_DIR", dir.display().to_string()),
                ("LEASEHOLD_MYSQL_PASSWORD", PRIVATE_PASSWORD.to_string()),
            ]
        })
        .await
        .map(PrivateServer)
    }

    /// Its URL (database `leasehold`, max TTL 4 s, the default table).
    pub fn url(&self) -> String {
        format!(
            "mysql://leasehold:{PRIVATE_PASSWORD}@127.0.0.1:{}/leasehold?max_ttl=4s",
            self.port
        )
    }

    /// A backend on [`PrivateServer::url`] (1 s request timeout).
    pub async fn backend(&self) -> MysqlBackend {
        Mysql::private_backend(&self.url()).await
    }
}

/// The repository's root, whose `scripts/` run the servers.
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
