//! A store URL with several endpoints, one of which is down: every
//! operation still succeeds, whichever place the dead endpoint has in the
//! list (a refused connection moves the request on to the next endpoint at
//! once; an endpoint that accepts connections but never answers costs one
//! request timeout, then the next endpoint takes over).

mod common;

use std::time::Duration;

use leasehold::LockOptions;
use leasehold_etcd::EtcdBackendBuilder;

/// A port nothing listens on (bound, then closed again).
fn refused() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

async fn every_operation_succeeds(endpoints: &str, what: &str) {
    let prefix = common::unique_prefix();
    let url = format!("etcd://{endpoints}?prefix={prefix}&max_ttl=2s");
    let backend = EtcdBackendBuilder::from_url(&url)
        .unwrap()
        .request_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap_or_else(|e| panic!("{what}: open: {e}"));
    let store = leasehold_testkit::test_store(backend);
    let lock = store
        .lock_with("k", LockOptions::new().ttl(Duration::from_secs(2)))
        .unwrap();
    let mut last = 0;
    for round in 0..12 {
        // The first round also waits out the new store's quarantine.
        let guard = lock
            .acquire_timeout(Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("{what}: round {round}: acquire: {e}"));
        assert!(guard.fencing_token() > last, "{what}: round {round}");
        last = guard.fencing_token();
        store
            .inspect("k")
            .await
            .unwrap_or_else(|e| panic!("{what}: round {round}: inspect: {e}"));
        guard
            .release()
            .await
            .unwrap_or_else(|e| panic!("{what}: round {round}: release: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_endpoint_down_in_any_place_fails_nothing() {
    if !common::available() {
        return;
    }
    let live = common::endpoint();
    let dead = refused();
    every_operation_succeeds(&format!("{dead},{live}"), "refused first").await;
    every_operation_succeeds(&format!("{live},{dead}"), "refused last").await;
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_at = silent.local_addr().unwrap().to_string();
    every_operation_succeeds(&format!("{silent_at},{live}"), "silent first").await;
}
