//! The etcd backend's own tests against a real server: a stale holder's
//! release or renewal never touching a newer holder's key (etcd issue
//! 22082), tokens above everything issued, cut connections, bad addresses
//! and credentials.
//! (Server restarts and a wiped cluster: `restart.rs`, on a private server.)

mod common;

use std::time::{Duration, Instant};

use leasehold::{
    backend::{AcquireOutcome, Backend, Lease},
    Error, Key,
};
use leasehold_etcd::{EtcdBackend, EtcdBackendBuilder};
use leasehold_test_servers::suite;
use leasehold_testkit::conformance::current_epoch;

async fn grant(backend: &EtcdBackend, key: &Key, ttl: Duration) -> Lease {
    common::grant(backend, key, ttl).await.0
}

/// etcd issue 22082's scenario: holder A's lease runs out (its process was
/// paused), B is granted the key, then A's release arrives (a retry, or the
/// paused process waking up). With `etcdctl lock`, whose unlock deletes the
/// key by name, that deletes B's lock. Here A's release (and renewal) acts
/// on A's own etcd lease only: it answers "lost" and B keeps the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_release_cannot_delete_a_newer_holders_key() {
    let Some(backend) = common::backend().await else {
        return;
    };
    let key = Key::new(common::unique_key("stale-release")).unwrap();
    let a = grant(&backend, &key, Duration::from_secs(2)).await;
    // A is "paused": nobody renews its lease until etcd expires it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while backend.inspect(&key).await.unwrap().holder.is_some() {
        assert!(Instant::now() < deadline, "A's lease never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b = grant(&backend, &key, Duration::from_secs(5)).await;
    assert!(b.fencing_token > a.fencing_token);

    let released = backend.release(&a).await;
    assert!(
        matches!(released, Err(Error::LeaseLost { .. })),
        "{released:?}"
    );
    let renewed = backend.renew(&a).await;
    assert!(
        matches!(renewed, Err(Error::LeaseLost { .. })),
        "{renewed:?}"
    );
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(
        info.holder.map(|h| h.fencing_token),
        Some(b.fencing_token),
        "A's stale release or renewal touched B's key"
    );
    backend.renew(&b).await.unwrap();
    backend.release(&b).await.unwrap();
}

/// The same after a break instead of an expiry: the broken holder's retried
/// release cannot end the next holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_holders_release_cannot_end_the_next_lease() {
    let Some(backend) = common::backend().await else {
        return;
    };
    let key = Key::new(common::unique_key("broken-release")).unwrap();
    let a = grant(&backend, &key, Duration::from_secs(5)).await;
    assert!(backend.break_lease(&key).await.unwrap().is_some());
    let b = grant(&backend, &key, Duration::from_secs(5)).await;
    assert!(backend.release(&a).await.unwrap_err().is_lease_lost());
    assert_eq!(
        backend
            .inspect(&key)
            .await
            .unwrap()
            .holder
            .map(|h| h.fencing_token),
        Some(b.fencing_token)
    );
    backend.release(&b).await.unwrap();
}

/// Tokens come from the key's own counter, which releases, expiries and
/// breaks keep: each grant is above the last, and the counter (not the
/// cluster's revision) is in the low bits of the epoch's token space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_count_per_key_within_the_epoch() {
    let Some(backend) = common::backend().await else {
        return;
    };
    let key = Key::new(common::unique_key("tokens")).unwrap();
    let epoch = current_epoch(&backend).await;
    for n in 1..=3 {
        let l = grant(&backend, &key, Duration::from_secs(5)).await;
        assert_eq!(l.fencing_token, epoch.token_base() + n);
        backend.release(&l).await.unwrap();
    }
    assert_eq!(
        backend.inspect(&key).await.unwrap().fencing_token,
        epoch.token_base() + 3
    );
}

/// No server at the address: opening fails, retryably, within the request
/// timeout.
#[tokio::test]
async fn unreachable_server_fails_retryably() {
    suite::unreachable_server_fails_retryably::<common::Etcd>(
        |port| format!("etcd://127.0.0.1:{port}"),
        Duration::from_secs(5),
    )
    .await;
}

/// A user and password the server refuses (here: auth not enabled) fail
/// at open, and the password is in no message.
#[tokio::test]
async fn refused_credentials_fail_at_open_without_the_password() {
    if !common::available() {
        return;
    }
    let url = common::url().replacen("://", "://someone:hunter22-pw@", 1);
    let err = EtcdBackendBuilder::from_url(&url)
        .unwrap()
        .build()
        .await
        .unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(!text.contains("hunter22-pw"), "{text}");
    assert!(!err.is_retryable(), "{text}");
}

/// A TCP forwarder to the test server whose connections can all be cut at
/// once (what a load balancer or a network blip does to a gRPC channel).
struct Forwarder {
    addr: std::net::SocketAddr,
    cut: tokio::sync::broadcast::Sender<()>,
}

impl Forwarder {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, _) = tokio::sync::broadcast::channel::<()>(4);
        let upstream = common::endpoint();
        let cuts = cut.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut down, _)) = listener.accept().await else {
                    return;
                };
                let mut cut = cuts.subscribe();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(mut up) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                        _ = cut.recv() => {}
                    }
                });
            }
        });
        Forwarder { addr, cut }
    }
}

/// Every connection of the holder's client cut: its next renewals
/// reconnect, it keeps its lease past its TTL, and nobody else gets it
/// meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_survives_its_connections_being_cut() {
    if !common::available() {
        return;
    }
    let fwd = Forwarder::start().await;
    let url =
        common::url_for(common::prefix()).replacen(&common::endpoint(), &fwd.addr.to_string(), 1);
    let backend = EtcdBackendBuilder::from_url(&url)
        .unwrap()
        .build()
        .await
        .unwrap();
    common::settled(&backend).await;
    let store = leasehold_testkit::test_store(backend);
    let other = leasehold_testkit::test_store(common::backend().await.unwrap());
    suite::holder_survives_lost_connections(store, other, Duration::from_secs(2), 3, || async {
        assert!(fwd.cut.send(()).unwrap() >= 1, "no connection to cut");
    })
    .await;
}

/// An attempt on a held key is one request (the read): a waiting process
/// polls with one request per poll, and the answer still names the holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_on_a_held_key_is_one_request() {
    let Some(backend) = common::backend().await else {
        return;
    };
    let key = Key::new(common::unique_key("held-poll")).unwrap();
    let held = grant(&backend, &key, Duration::from_secs(5)).await;
    let ttl = Duration::from_secs(5);
    let request =
        leasehold_testkit::conformance::acquire_request(key.as_str(), ttl, Some(held.epoch));
    let before = backend.requests_sent();
    let outcome = backend.try_acquire(&request).await.unwrap();
    assert_eq!(backend.requests_sent() - before, 1);
    match outcome {
        AcquireOutcome::Held(Some(holder)) => {
            assert_eq!(holder.fencing_token, held.fencing_token)
        }
        other => panic!("expected Held with the holder, got {other:?}"),
    }
    backend.release(&held).await.unwrap();
}
