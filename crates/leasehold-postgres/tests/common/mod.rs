//! Shared set-up for the tests against a real PostgreSQL server.
//!
//! The server is `LEASEHOLD_TEST_POSTGRES_URL` (default: the one
//! `scripts/postgres.sh start` runs, see [`Postgres::DEFAULT_URL`]), each
//! test binary on a table of its own there. Without a server there the
//! tests are skipped, loudly, unless `LEASEHOLD_REQUIRE_EMULATORS=1`, which
//! makes them fail instead.

#![allow(dead_code)]

use std::ops::Deref;

use leasehold_postgres::{PostgresBackend, PostgresBackendBuilder};
use leasehold_test_servers::store::ServerStore;
use leasehold_test_servers::{self as servers, ScriptServer};

/// The PostgreSQL store, as the shared test set-up sees it.
pub struct Postgres;

impl ServerStore for Postgres {
    leasehold_test_servers::server_store_methods!(PostgresBackend, PostgresBackendBuilder);

    const NAME: &'static str = "postgres";
    const SERVER: &'static str = "PostgreSQL";
    const URL_VAR: &'static str = "LEASEHOLD_TEST_POSTGRES_URL";
    const DEFAULT_URL: &'static str =
        "postgres://postgres:leasehold-test-pw-7e3a@127.0.0.1:54329/postgres";
    const DEFAULT_PORT: u16 = 5432;
    const NAMESPACE: &'static str = "table";

    fn unique_namespace() -> String {
        servers::unique_name("leasehold_test_")
    }
}

leasehold_test_servers::server_store_helpers!(Postgres, table, unique_table);

/// A client on a connection of its own (as an administrator would have).
pub async fn admin() -> tokio_postgres::Client {
    let config: tokio_postgres::Config = PostgresBackendBuilder::from_url(&url())
        .expect("test URL")
        .config()
        .clone();
    let (client, conn) = config
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    client
}

/// Runs `sql` on a connection of its own (as an administrator would).
pub async fn sql(sql: &str) {
    admin().await.batch_execute(sql).await.expect(sql);
}

/// The single number `sql` returns, on a connection of its own.
pub async fn query_i64(sql: &str) -> i64 {
    admin().await.query_one(sql, &[]).await.expect(sql).get(0)
}

const PRIVATE_PASSWORD: &str = "restart-test-pw-91c2";

/// A PostgreSQL server of a test's own (a new `initdb` cluster, started
/// with `scripts/postgres.sh` on a port of its own, stopped and removed on
/// drop), so the shared server is never disturbed.
pub struct PrivateServer(ScriptServer);

impl Deref for PrivateServer {
    type Target = ScriptServer;
    fn deref(&self) -> &ScriptServer {
        &self.0
    }
}

impl PrivateServer {
    /// Starts one, or `None` (skipped) when PostgreSQL is not installed.
    pub async fn start() -> Option<Self> {
        let installed = std::fs::read_dir("/usr/lib/postgresql").is_ok();
        let port = servers::free_port();
        ScriptServer::start(
            REPO,
            "postgres",
            installed,
            "PostgreSQL",
            port,
            |port, dir| {
                vec![
                    ("LEASEHOLD_PG_PORT", port.to_string()),
                    ("LEASEHOLD_PG_DIR", dir.display().to_string()),
                    ("LEASEHOLD_PG_PASSWORD", PRIVATE_PASSWORD.to_string()),
                ]
            },
        )
        .await
        .map(PrivateServer)
    }

    /// Its URL (database `postgres`, max TTL 4 s, the default table).
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres:{PRIVATE_PASSWORD}@127.0.0.1:{}/postgres?max_ttl=4s",
            self.port
        )
    }

    /// A backend on [`PrivateServer::url`] (1 s request timeout).
    pub async fn backend(&self) -> PostgresBackend {
        self.backend_with("").await
    }

    /// As [`backend`](Self::backend), with `params` (`&name=value…`)
    /// added to the URL.
    pub async fn backend_with(&self, params: &str) -> PostgresBackend {
        Postgres::private_backend(&format!("{}{params}", self.url())).await
    }
}

/// The repository's root, whose `scripts/` run the servers.
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
