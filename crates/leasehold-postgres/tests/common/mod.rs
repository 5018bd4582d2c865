//! Shared set-up for the tests against a real PostgreSQL server.
//!
//! The server is `LEASEHOLD_TEST_POSTGRES_URL` (default: the one
//! `scripts/postgres.sh start` runs, see [`DEFAULT_URL`]). Without a server
//! there the tests are skipped, loudly, unless
//! `LEASEHOLD_REQUIRE_EMULATORS=1`, which makes them fail instead.

#![allow(dead_code)]

use std::sync::OnceLock;
use std::time::Duration;

use leasehold::conformance::servers::{self, ScriptServer};
use leasehold_postgres::{PostgresBackend, PostgresBackendBuilder};

/// What `scripts/postgres.sh url` prints.
pub const DEFAULT_URL: &str = "postgres://postgres:leasehold-test-pw-7e3a@127.0.0.1:54329/postgres";

/// The test tables' max TTL: above every TTL the tests use, and the
/// quarantine of a new table (see `settled`).
pub const MAX_TTL: Duration = Duration::from_secs(5);

pub fn url() -> String {
    servers::server_url("LEASEHOLD_TEST_POSTGRES_URL", DEFAULT_URL)
}

/// `url` with `table` and `max_ttl` parameters added.
pub fn url_for(table: &str) -> String {
    servers::with_params(
        &url(),
        &format!("table={table}&max_ttl={}s", MAX_TTL.as_secs()),
    )
}

/// Whether something accepts TCP connections at the URL's host and port
/// (a URL the store refuses is said first).
pub fn reachable() -> Result<(), String> {
    PostgresBackendBuilder::from_url(&url()).map_err(|e| e.to_string())?;
    servers::reachable(
        &url(),
        5432,
        "PostgreSQL",
        "postgres",
        "LEASEHOLD_TEST_POSTGRES_URL",
    )
}

/// Whether the server is there; if not, says so (or fails the test under
/// `LEASEHOLD_REQUIRE_EMULATORS=1`).
pub fn available() -> bool {
    match reachable() {
        Ok(()) => true,
        Err(why) => leasehold::conformance::skip::<()>("postgres", &why).is_some(),
    }
}

/// One table per test binary run: unique, so runs never see each other.
pub fn table() -> &'static str {
    static TABLE: OnceLock<String> = OnceLock::new();
    TABLE.get_or_init(unique_table)
}

pub fn unique_table() -> String {
    servers::unique_name("leasehold_test_")
}

/// A builder on `table`, or `None` (skipped) when there is no server.
pub fn builder_for(table: &str) -> Option<PostgresBackendBuilder> {
    match reachable() {
        Ok(()) => Some(PostgresBackendBuilder::from_url(&url_for(table)).expect("test URL")),
        Err(why) => leasehold::conformance::skip("postgres", &why),
    }
}

/// A backend on the run's table, or `None` (skipped), once the table is out
/// of quarantine.
pub async fn backend() -> Option<PostgresBackend> {
    let backend = builder_for(table())?
        .build()
        .await
        .expect("open PostgreSQL");
    settled(&backend).await;
    Some(backend)
}

/// Waits until a new table's quarantine is over (one fresh table per test
/// binary run: every test would otherwise start with that wait).
pub async fn settled(backend: &PostgresBackend) {
    let epoch = backend.epoch().await.expect("read the epoch");
    let full = epoch.max_ttl + epoch.max_ttl / 1000;
    let age = epoch.age.unwrap_or_default();
    tokio::time::sleep(full.saturating_sub(age) + Duration::from_millis(50)).await;
}

pub fn unique_key(test: &str) -> String {
    servers::unique_name(&format!("{test}/"))
}

/// Runs `sql` on a connection of its own (as an administrator would).
pub async fn sql(sql: &str) {
    let config: tokio_postgres::Config = PostgresBackendBuilder::from_url(&url())
        .expect("test URL")
        .config()
        .clone();
    let (client, conn) = config
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    client.batch_execute(sql).await.expect(sql);
}

/// The single number `sql` returns, on a connection of its own.
pub async fn query_i64(sql: &str) -> i64 {
    let config: tokio_postgres::Config = PostgresBackendBuilder::from_url(&url())
        .expect("test URL")
        .config()
        .clone();
    let (client, conn) = config
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    client.query_one(sql, &[]).await.expect(sql).get(0)
}

const PRIVATE_PASSWORD: &str = "restart-test-pw-91c2";

/// A PostgreSQL server of a test's own (a new `initdb` cluster, started
/// with `scripts/postgres.sh` on a port of its own, stopped and removed on
/// drop), so the shared server is never disturbed.
pub struct PrivateServer {
    pub port: u16,
    server: ScriptServer,
}

impl PrivateServer {
    /// Starts one, or `None` (skipped) when PostgreSQL is not installed.
    pub async fn start() -> Option<Self> {
        if std::fs::read_dir("/usr/lib/postgresql").is_err() {
            return leasehold::conformance::skip(
                "postgres",
                "PostgreSQL is not installed (scripts/postgres.sh start installs it)",
            );
        }
        let server = ScriptServer::new(REPO, "postgres", servers::free_port(), |port, dir| {
            vec![
                ("LEASEHOLD_PG_PORT", port.to_string()),
                ("LEASEHOLD_PG_DIR", dir.display().to_string()),
                ("LEASEHOLD_PG_PASSWORD", PRIVATE_PASSWORD.to_string()),
            ]
        });
        server.run("start").await;
        Some(PrivateServer {
            port: server.port,
            server,
        })
    }

    /// Runs `scripts/postgres.sh COMMAND` on this server.
    pub async fn script(&self, command: &str) {
        self.server.run(command).await
    }

    /// Its URL (database `postgres`, max TTL 4 s, the default table).
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres:{PRIVATE_PASSWORD}@127.0.0.1:{}/postgres?max_ttl=4s",
            self.port
        )
    }

    /// A backend on [`PrivateServer::url`].
    pub async fn backend(&self) -> PostgresBackend {
        PostgresBackendBuilder::from_url(&self.url())
            .unwrap()
            .request_timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap()
    }
}

/// The repository's root, whose `scripts/` run the servers.
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
