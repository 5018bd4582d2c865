//! Shared set-up for the tests against a real etcd server.
//!
//! The server is `LEASEHOLD_TEST_ETCD_URL` (default: the one
//! `scripts/etcd.sh start` runs, see [`DEFAULT_URL`]). Without a server
//! there the tests are skipped, loudly, unless
//! `LEASEHOLD_REQUIRE_EMULATORS=1`, which makes them fail instead.

#![allow(dead_code)]

use std::sync::OnceLock;
use std::time::Duration;

use leasehold::conformance::servers::{self, ScriptServer};
use leasehold_etcd::{EtcdBackend, EtcdBackendBuilder};

/// What `scripts/etcd.sh url` prints.
pub const DEFAULT_URL: &str = "etcd://127.0.0.1:23799";

/// The test stores' max TTL: above every TTL the tests use, and the
/// quarantine of a new store (see `settled`).
pub const MAX_TTL: Duration = Duration::from_secs(5);

pub fn url() -> String {
    servers::server_url("LEASEHOLD_TEST_ETCD_URL", DEFAULT_URL)
}

/// `url` with `prefix` and `max_ttl` parameters added.
pub fn url_for(prefix: &str) -> String {
    servers::with_params(
        &url(),
        &format!("prefix={prefix}&max_ttl={}s", MAX_TTL.as_secs()),
    )
}

/// The first endpoint, `HOST:PORT`.
pub fn endpoint() -> String {
    servers::host_port(&url(), 2379)
}

/// Whether something accepts TCP connections at the URL's first endpoint
/// (a URL the store refuses is said first).
pub fn reachable() -> Result<(), String> {
    EtcdBackendBuilder::from_url(&url()).map_err(|e| e.to_string())?;
    servers::reachable(&url(), 2379, "etcd", "etcd", "LEASEHOLD_TEST_ETCD_URL")
}

/// Whether the server is there; if not, says so (or fails the test under
/// `LEASEHOLD_REQUIRE_EMULATORS=1`).
pub fn available() -> bool {
    match reachable() {
        Ok(()) => true,
        Err(why) => leasehold::conformance::skip::<()>("etcd", &why).is_some(),
    }
}

/// One prefix per test binary run: unique, so runs never see each other.
pub fn prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(unique_prefix)
}

pub fn unique_prefix() -> String {
    format!("{}/", servers::unique_name("leasehold-test-"))
}

/// A builder on `prefix`, or `None` (skipped) when there is no server.
pub fn builder_for(prefix: &str) -> Option<EtcdBackendBuilder> {
    match reachable() {
        Ok(()) => Some(EtcdBackendBuilder::from_url(&url_for(prefix)).expect("test URL")),
        Err(why) => leasehold::conformance::skip("etcd", &why),
    }
}

/// A backend on the run's prefix, or `None` (skipped), once the store is
/// out of quarantine.
pub async fn backend() -> Option<EtcdBackend> {
    let backend = builder_for(prefix())?.build().await.expect("open etcd");
    settled(&backend).await;
    Some(backend)
}

/// Waits until a new store's quarantine is over (one fresh prefix per test
/// binary run: every test would otherwise start with that wait).
pub async fn settled(backend: &EtcdBackend) {
    let epoch = backend.epoch().await.expect("read the epoch");
    let full = epoch.max_ttl + epoch.max_ttl / 1000;
    let age = epoch.age.unwrap_or_default();
    tokio::time::sleep(full.saturating_sub(age) + Duration::from_millis(50)).await;
}

pub fn unique_key(test: &str) -> String {
    servers::unique_name(&format!("{test}/"))
}

/// Runs `etcdctl` (v3 API) against the test server, as an administrator
/// would; returns its stdout.
pub async fn etcdctl(args: &[&str]) -> String {
    etcdctl_at(&endpoint(), args).await
}

/// [`etcdctl`] against the server at `endpoint` (`HOST:PORT`).
pub async fn etcdctl_at(endpoint: &str, args: &[&str]) -> String {
    let out = tokio::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints=http://{endpoint}"))
        .args(args)
        .output()
        .await
        .expect("run etcdctl");
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An etcd of a test's own (started with `scripts/etcd.sh` on ports of its
/// own, stopped and removed on drop), so the shared server is never
/// disturbed.
pub struct PrivateServer {
    pub port: u16,
    server: ScriptServer,
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
        if !servers::installed("etcd") {
            return leasehold::conformance::skip(
                "etcd",
                "etcd is not installed (scripts/etcd.sh start installs it)",
            );
        }
        let server = ScriptServer::new(REPO, "etcd", free_port_pair(), |port, dir| {
            vec![
                ("LEASEHOLD_ETCD_PORT", port.to_string()),
                ("LEASEHOLD_ETCD_DIR", dir.display().to_string()),
                ("LEASEHOLD_ETCD_ARGS", args.to_string()),
            ]
        });
        server.run("start").await;
        Some(PrivateServer {
            port: server.port,
            server,
        })
    }

    /// Runs `scripts/etcd.sh COMMAND` on this server.
    pub async fn script(&self, command: &str) {
        self.server.run(command).await
    }

    /// A backend on this server (max TTL 10 s, 1 s request timeout).
    pub async fn backend(&self) -> EtcdBackend {
        EtcdBackendBuilder::from_url(&format!("etcd://127.0.0.1:{}?max_ttl=10s", self.port))
            .unwrap()
            .request_timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap()
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
    use leasehold::{
        backend::{AcquireOutcome, AcquireRequest, Backend, LeaseId},
        Owner,
    };
    let request = AcquireRequest {
        key: key.clone(),
        lease_id: LeaseId::random(),
        ttl,
        owner: Owner::current(),
        data: None,
        epoch: Some(epoch),
    };
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
    let epoch = leasehold::conformance::current_epoch(backend).await.epoch;
    grant_in(backend, key, ttl, epoch).await
}
