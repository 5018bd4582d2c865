//! etcd's own authentication, on a private etcd with auth enabled (the
//! shared server has none): a user and password open the store and take a
//! lock; a wrong password fails at open and is in no message; an auth token
//! that expired while the process was idle (etcd's simple tokens last
//! `--auth-token-ttl` seconds without use) is renewed, and a waiting
//! acquire still gets the lock.

mod common;

use std::time::Duration;

use common::{etcdctl_at, PrivateServer};
use leasehold::{LockOptions, Store};
use leasehold_etcd::EtcdBackendBuilder;

const PASSWORD: &str = "Au7h-pw-9f3e";

/// A private etcd whose auth tokens expire after `token_ttl_s` idle
/// seconds, with the user `root` (password [`PASSWORD`]) and auth enabled.
async fn server_with_auth(token_ttl_s: u32) -> Option<PrivateServer> {
    let server = PrivateServer::start_with(&format!("--auth-token-ttl={token_ttl_s}")).await?;
    let endpoint = format!("127.0.0.1:{}", server.port);
    etcdctl_at(
        &endpoint,
        &[
            "user",
            "add",
            "root",
            "--interactive=false",
            &format!("--new-user-password={PASSWORD}"),
        ],
    )
    .await;
    etcdctl_at(&endpoint, &["auth", "enable"]).await;
    Some(server)
}

fn url(server: &PrivateServer, password: &str) -> String {
    format!(
        "etcd://root:{password}@127.0.0.1:{}?prefix=auth/&max_ttl=2s",
        server.port
    )
}

fn opts() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(2))
}

/// A store on `server`, opened with the right password.
async fn open_with_the_password(server: &PrivateServer) -> Store {
    let backend = EtcdBackendBuilder::from_url(&url(server, PASSWORD))
        .unwrap()
        .build()
        .await
        .expect("open with the right password");
    leasehold_testkit::test_store(backend)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_and_password_open_the_store_and_take_a_lock() {
    let Some(server) = server_with_auth(300).await else {
        return;
    };
    let store = open_with_the_password(&server).await;
    // A new store: the wait covers its quarantine (max TTL 2 s).
    let guard = store
        .lock_with("k", opts())
        .unwrap()
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("the lock, authenticated");
    guard.release().await.expect("release, authenticated");

    let err = EtcdBackendBuilder::from_url(&url(&server, "wrong-pw-1d4c"))
        .unwrap()
        .build()
        .await
        .expect_err("a wrong password fails at open");
    let message = format!("{err} {err:?}");
    assert!(message.contains("authentication failed"), "{message}");
    assert!(!message.contains("wrong-pw-1d4c"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_auth_token_is_renewed_and_the_wait_succeeds() {
    let Some(server) = server_with_auth(1).await else {
        return;
    };
    let store = open_with_the_password(&server).await;
    // Idle for longer than the token's TTL (a server-side timer: nothing
    // to wait on but the time itself).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let guard = store
        .lock_with("k", opts())
        .unwrap()
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("the lock, after the token was renewed");
    guard.release().await.expect("release");
}
