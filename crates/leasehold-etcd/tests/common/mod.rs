//! Shared set-up for the tests against a real etcd server.
//!
//! The server is `LEASEHOLD_TEST_ETCD_URL` (default: the one
//! `scripts/etcd.sh start` runs, see [`Etcd::DEFAULT_URL`]). Without a server
//! there the tests are skipped, loudly, unless
//! `LEASEHOLD_REQUIRE_EMULATORS=1`, which makes them fail instead.

#![allow(dead_code)]

use std::ops::Deref;
use std::time::Duration;

use leasehold_etcd::{EtcdBackend, EtcdBackendBuilder};
use leasehold_test_servers::store::ServerStore;
use leasehold_test_servers::{self as servers, ScriptServer};

/// The etcd store, as the shared test set-up sees it.
pub struct Etcd;

impl ServerStore for Etcd {
    leasehold_test_servers::server_store_methods!(EtcdBackend, EtcdBackendBuilder);

    const NAME: &'static str = "etcd";
    const SERVER: &'static str = "etcd";
    const URL_VAR: &'static str = "LEASEHOLD_TEST_ETCD_URL";
    const DEFAULT_URL: &'static str = "etcd://127.0.0.1:23799";
    const DEFAULT_PORT: u16 = 2379;
    const NAMESPACE: &'static str = "prefix";

    fn unique_namespace() -> String {
        format!("{}/", servers::unique_name("leasehold-test-"))
    }
}

leasehold_test_servers::server_store_helpers!(Etcd, prefix, unique_prefix);

/// The first endpoint, `HOST:PORT`.
pub fn endpoint() -> String {
    servers::host_port(&url(), Etcd::DEFAULT_PORT)
}

/// Runs `etcdctl` (v3 API) against the test server, as an administrator
/// would; returns its stdout.
pub async fn etcdctl(args: &[&str]) -> String {
    etcdctl_at(&endpoint(), args).await
}

/// [`etcdctl`] against the server at `endpoint` (`HOST:PORT`).
pub async fn etcdctl_at(endpoint: &str, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new("etcdctl");
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints=http://{endpoint}"))
        .args(args);
    servers::admin_tool(cmd).await
}

/// An etcd of a test's own (started with `scripts/etcd.sh` on ports of its
/// own, stopped and removed on drop), so the shared server is never
/// disturbed.
pub struct PrivateServer(ScriptServer);

impl Deref for PrivateServer {
    type Target = ScriptServer;
    fn deref(&self) -> &ScriptServer {
        &self.0
    }
}

/// Two consecutive free ports (client, peer): the first.
fn free_port_pair() -> u16 {
    loop {
        let port = servers::free_port();
        if port < 65000 && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
}

impl PrivateServer {
    /// Starts one, or `None` (skipped) when etcd is not installed.
    pub async fn start() -> Option<Self> {
        Self::start_with("").await
    }

    /// Starts one with more etcd flags (`args`, split on spaces).
    pub async fn start_with(args: &str) -> Option<Self> {
        let installed = servers::installed("etcd");
        let port = free_port_pair();
        ScriptServer::start(REPO, "etcd", installed, "etcd", port, |port, dir| {
            vec![
                ("LEASEHOLD_ETCD_PORT", port.to_string()),
                ("LEASEHOLD_ETCD_DIR", dir.display().to_string()),
                ("LEASEHOLD_ETCD_ARGS", args.to_string()),
            ]
        })
        .await
        .map(PrivateServer)
    }

    /// A backend on this server (max TTL 10 s, 1 s request timeout).
    pub async fn backend(&self) -> EtcdBackend {
        Etcd::private_backend(&format!("etcd://127.0.0.1:{}?max_ttl=10s", self.port)).await
    }
}
/// The repository's root, whose `scripts/` run the servers.
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// A lease taken straight from `backend` in `epoch` (nobody renews it),
/// and the backend's grant; panics if it is not granted.
pub async fn grant_in(
    backend: &EtcdBackend,
    key: &leasehold::Key,
    ttl: Duration,
    epoch: u64,
) -> (leasehold::backend::Lease, leasehold::backend::Grant) {
    use leasehold::backend::{AcquireOutcome, Backend};
    let request = leasehold_testkit::conformance::acquire_request(key.as_str(), ttl, Some(epoch));
    match backend.try_acquire(&request).await.unwrap() {
        AcquireOutcome::Acquired(g) => (
            leasehold::backend::Lease {
                key: key.clone(),
                lease_id: request.lease_id,
                ttl,
                fencing_token: g.fencing_token,
                epoch,
            },
            g,
        ),
        other => panic!("not granted: {other:?}"),
    }
}

/// [`grant_in`] the store's current epoch (one more request, to learn it).
pub async fn grant(
    backend: &EtcdBackend,
    key: &leasehold::Key,
    ttl: Duration,
) -> (leasehold::backend::Lease, leasehold::backend::Grant) {
    let epoch = leasehold_testkit::conformance::current_epoch(backend)
        .await
        .epoch;
    grant_in(backend, key, ttl, epoch).await
}
