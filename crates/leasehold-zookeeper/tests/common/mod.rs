//! Shared set-up for the tests against a real ZooKeeper server.
//!
//! The server is `LEASEHOLD_TEST_ZOOKEEPER_URL` (default: the one
//! `scripts/zookeeper.sh start` runs, see [`Zk::DEFAULT_URL`]). Without a
//! server there the tests are skipped, loudly, unless
//! `LEASEHOLD_REQUIRE_EMULATORS=1`, which makes them fail instead.

#![allow(dead_code)]

use std::ops::Deref;
use std::sync::Arc;

use leasehold::backend::Backend;
use leasehold_test_servers::store::ServerStore;
use leasehold_test_servers::{self as servers, ScriptServer};
use leasehold_zookeeper::{ZkBackend, ZkBackendBuilder};

/// The ZooKeeper store, as the shared test set-up sees it. A store of its
/// own is a chroot of its own: the URL's path, not a query parameter, so
/// this names it in [`url_for`](ServerStore::url_for) and
/// [`open`](ServerStore::open) itself.
pub struct Zk;

impl ServerStore for Zk {
    leasehold_test_servers::server_store_methods!(ZkBackend, ZkBackendBuilder);

    const NAME: &'static str = "zookeeper";
    const SERVER: &'static str = "ZooKeeper";
    const URL_VAR: &'static str = "LEASEHOLD_TEST_ZOOKEEPER_URL";
    const DEFAULT_URL: &'static str = "zk://127.0.0.1:21819";
    const DEFAULT_PORT: u16 = 2181;
    const NAMESPACE: &'static str = "chroot";

    fn unique_namespace() -> String {
        format!("/{}", servers::unique_name("leasehold-test-"))
    }

    fn url_for(namespace: &str) -> String {
        format!(
            "{}{namespace}?max_ttl={}s",
            Self::url(),
            Self::MAX_TTL.as_secs()
        )
    }

    fn open(
        namespace: &str,
        params: &str,
    ) -> impl std::future::Future<Output = Arc<dyn Backend>> + Send {
        // `params` starts with `&` (a parameter added to a query).
        let params = params.strip_prefix('&').unwrap_or(params);
        let url = format!("{}{namespace}?{params}", Self::url());
        async move { Self::open_url(&url).await }
    }
}

leasehold_test_servers::server_store_helpers!(Zk, chroot, unique_chroot);

/// The server's `HOST:PORT`.
pub fn endpoint() -> String {
    servers::host_port(&url(), Zk::DEFAULT_PORT)
}

/// Runs `zkCli.sh` against `endpoint` (`HOST:PORT`), as an administrator
/// would; returns its stdout.
pub async fn zkcli_at(endpoint: &str, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new("/usr/share/zookeeper/bin/zkCli.sh");
    cmd.arg("-server").arg(endpoint).args(args);
    servers::admin_tool(cmd).await
}

/// Deletes `chroot` with everything under it (`deleteall`), on the shared
/// test server: the store's data lost.
pub async fn delete_store(chroot: &str) {
    zkcli_at(&endpoint(), &["deleteall", chroot]).await;
}

/// A ZooKeeper of a test's own (started with `scripts/zookeeper.sh` on a
/// port of its own, stopped and removed on drop), so the shared server is
/// never disturbed.
pub struct PrivateServer(ScriptServer);

impl Deref for PrivateServer {
    type Target = ScriptServer;
    fn deref(&self) -> &ScriptServer {
        &self.0
    }
}

impl PrivateServer {
    /// Starts one, or `None` (skipped) when ZooKeeper is not installed.
    pub async fn start() -> Option<Self> {
        let installed = std::path::Path::new("/usr/share/java/zookeeper.jar").exists();
        ScriptServer::start(
            REPO,
            "zookeeper",
            installed,
            "zookeeper",
            servers::free_port(),
            |port, dir| {
                vec![
                    ("LEASEHOLD_ZOOKEEPER_PORT", port.to_string()),
                    ("LEASEHOLD_ZOOKEEPER_DIR", dir.display().to_string()),
                ]
            },
        )
        .await
        .map(PrivateServer)
    }

    /// This server's store URL (max TTL 20 s: the restart tests' TTL of
    /// 16 s outlasts a JVM's restart on a loaded two-core machine, which
    /// took 7.7 s in a CI run).
    pub fn url(&self) -> String {
        format!("zk://127.0.0.1:{}/leasehold?max_ttl=20s", self.port)
    }

    /// A backend on this server (max TTL 20 s, 1 s request timeout).
    pub async fn backend(&self) -> ZkBackend {
        Zk::private_backend(&self.url()).await
    }
}

/// The repository's root, whose `scripts/` run the servers.
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Deletes `chroot` with everything under it in one transaction
/// ([`ZkBackend::delete_store`]): in milliseconds, where `zkCli.sh` first
/// starts a JVM (about a second), for tests that lose the store "at once".
pub async fn delete_store_now(chroot: &str) {
    let backend = ZkBackendBuilder::from_url(&format!("zk://{}{chroot}", endpoint()))
        .expect("URL")
        .creation(leasehold::Creation::Never)
        .build()
        .await;
    match backend {
        Ok(b) => b.delete_store().await.expect("delete the store"),
        // No store there: nothing to delete.
        Err(leasehold::Error::NoStore { .. }) => {}
        // A store this build refuses to open (a test wrote a newer
        // protocol): delete it as an operator would.
        Err(leasehold::Error::UnsupportedProtocol { .. }) => delete_store(chroot).await,
        Err(e) => panic!("open the store to delete it: {e}"),
    }
}
