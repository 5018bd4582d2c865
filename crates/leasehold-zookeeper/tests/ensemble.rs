//! A three-server ensemble of the test's own (`scripts/zookeeper-ensemble.sh`,
//! on ports of its own): the leader killed under a holder. Whichever
//! server the holder's session is on, its renewals fail until another
//! server leads (every write goes through the leader: about 1.6-1.9 s
//! here), and a session on the killed server moves to another. Every
//! write is committed by a quorum before it is answered, so nothing
//! granted is lost: the holder keeps its lease (its TTL outlasts the
//! election), nobody else is granted the key meanwhile, and the next
//! grant's token is greater.

mod common;

use std::time::Duration;

use common::Zk;
use leasehold_test_servers::store::ServerStore;
use leasehold_test_servers::{self as servers, suite, ScriptServer};

/// The repository's root, whose `scripts/` run the servers.
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_crash_under_a_holder_loses_nothing() {
    let installed = std::path::Path::new("/usr/share/java/zookeeper.jar").exists();
    let Some(ensemble) = ScriptServer::start(
        REPO,
        "zookeeper-ensemble",
        installed,
        "zookeeper",
        servers::free_port(),
        |port, dir| {
            vec![
                ("LEASEHOLD_ZOOKEEPER_ENSEMBLE_PORT", port.to_string()),
                (
                    "LEASEHOLD_ZOOKEEPER_ENSEMBLE_DIR",
                    dir.display().to_string(),
                ),
            ]
        },
    )
    .await
    else {
        return;
    };
    let url = format!(
        "{}/leasehold?max_ttl=10s",
        ensemble.output("url").await.trim()
    );
    let (a, b) = suite::two_stores(|| Zk::private_backend(&url)).await;
    // Out of the new store's quarantine, by the server's clock.
    let backend = Zk::private_backend(&url).await;
    common::settled(&backend).await;

    let ttl = Duration::from_secs(8);
    let key = "ensemble/job";
    let guard = suite::hold(&a, key, ttl).await;
    let first = guard.fencing_token();
    suite::holder_survives_a_quick_restart(&guard, &b, key, ttl, ensemble.script("crash-leader"))
        .await;
    guard.release().await.unwrap();
    let g2 = b
        .lock_with(key, suite::restart_opts(ttl))
        .unwrap()
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(g2.fencing_token() > first);
    g2.release().await.unwrap();
}
