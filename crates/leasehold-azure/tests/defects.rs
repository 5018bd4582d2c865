//! Azure defects found in review and by hostile tries (issue 11), each
//! against a real Azurite, or against a real HTTP server on loopback that
//! is not Azure. Faults are injected by a pipeline policy around real
//! requests.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use azure_core::http::headers::HeaderName;
use azure_core::http::Request;
use common::{Around, Injected};
use leasehold::{backend::Backend, Error, LockOptions};
use leasehold_azure::AzureBackend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

const TTL: Duration = Duration::from_secs(15);
const LEASE_ACTION: HeaderName = HeaderName::from_static("x-ms-lease-action");
const BREAK_PERIOD: HeaderName = HeaderName::from_static("x-ms-lease-break-period");

fn opts(label: &str) -> LockOptions {
    LockOptions::new().ttl(TTL).owner_label(label)
}

/// Interferes with lease requests: can lose the answer of the first
/// release, stretch a break's period, or pause the first break until the
/// test lets it go.
#[derive(Debug, Default)]
struct LeaseFaults {
    drop_release_answer: AtomicBool,
    releases_sent: AtomicUsize,
    slow_break: AtomicBool,
    /// (tell the test the break is about to go out, wait for its go-ahead)
    pause_break: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
    /// The same for the next lease acquisition.
    pause_acquire: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
}

#[async_trait]
impl Around for LeaseFaults {
    /// The request's lease action.
    type Seen = Option<String>;

    async fn before(&self, request: &mut Request) -> Option<String> {
        let action = request
            .headers()
            .get_optional_str(&LEASE_ACTION)
            .map(str::to_string);
        if action.as_deref() == Some("break") && self.slow_break.load(Ordering::SeqCst) {
            request.insert_header(BREAK_PERIOD, "30");
        }
        let pause = match action.as_deref() {
            Some("break") => self.pause_break.lock().unwrap().take(),
            Some("acquire") => self.pause_acquire.lock().unwrap().take(),
            _ => None,
        };
        if let Some((about_to, go)) = pause {
            let _ = about_to.send(());
            let _ = go.await;
        }
        action
    }

    fn lose_answer(&self, action: Option<String>) -> bool {
        action.as_deref() == Some("release") && {
            self.releases_sent.fetch_add(1, Ordering::SeqCst);
            self.drop_release_answer.swap(false, Ordering::SeqCst)
        }
    }
}

/// A backend on the shared container under `prefix`, with the faults.
async fn faulty(prefix: &str) -> (AzureBackend, Arc<Injected<LeaseFaults>>) {
    common::with_policy(common::shared(prefix).await)
}

/// `list` without a prefix, on a backend without a blob prefix: Azure
/// refused the request (403) because an empty `prefix=` was signed.
#[tokio::test]
async fn list_without_any_prefix_works() {
    common::require_azurite!();
    let backend = common::builder().build().unwrap();
    let store = leasehold_testkit::test_store(backend.clone());
    // Straight from the backend: a new container's quarantine is not what
    // this test is about.
    for key in ["a", "b/c"] {
        let lease = leasehold_testkit::conformance::raw_lease(&backend, key, TTL).await;
        backend.release(&lease).await.unwrap();
    }
    // The container's epoch marker is no key.
    let keys = common::listed_keys(&store, "").await;
    assert_eq!(keys, ["a", "b/c"]);
    assert_eq!(store.list("b/").await.unwrap().len(), 1);
    backend.delete_container().await.unwrap();
}

/// A real HTTP server on loopback that answers 404 to everything, with no
/// Azure error code: a wrong endpoint URL, or a proxy.
async fn bare_404_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut seen = Vec::new();
                loop {
                    let n = match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    seen.extend_from_slice(&buf[..n]);
                    // Requests here have small or no bodies: answer once the
                    // headers are in, and close.
                    if seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        let _ = socket
                            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                            .await;
                        return;
                    }
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn a_404_without_an_azure_error_code_is_an_error_not_no_blob() {
    let port = bare_404_server().await;
    let backend = AzureBackend::builder()
        .connection_string(leasehold_azure::dev_connection_string(port))
        .container("locks")
        .build()
        .unwrap();
    let store = leasehold_testkit::test_store(backend);
    let check = |what: &str, err: Option<Error>| {
        let err = err.unwrap_or_else(|| panic!("{what}: a bare 404 was taken for an answer"));
        assert!(matches!(err, Error::Backend { .. }), "{what}: {err}");
        assert!(err.to_string().contains("404"), "{what}: {err}");
    };
    check("inspect", store.inspect("k").await.err());
    check("break", store.break_lease("k").await.err());
    check("list", store.list("").await.err());
    check(
        "leader",
        store
            .election_with("k", opts("x"))
            .unwrap()
            .leader()
            .await
            .err(),
    );
    check(
        "acquire",
        store
            .lock_with("k", opts("x"))
            .unwrap()
            .try_acquire()
            .await
            .err(),
    );
}

/// A break is conditional on the record it read: when another holder takes
/// the key between the read and the break, the break reports the holder
/// whose lease it ended, never the earlier one.
#[tokio::test]
async fn break_reports_the_holder_whose_lease_it_ended() {
    common::require_azurite!();
    let prefix = common::unique_prefix();
    let (breaker, faults) = faulty(&prefix).await;
    let other = common::shared(&prefix).await.build().unwrap();
    let first = leasehold_testkit::conformance::take(
        &leasehold_testkit::test_store(other.clone()),
        "k",
        opts("first"),
    )
    .await;

    let (about_to_tx, about_to_rx) = oneshot::channel();
    let (go_tx, go_rx) = oneshot::channel();
    *faults.pause_break.lock().unwrap() = Some((about_to_tx, go_rx));
    let breaking = tokio::spawn(async move {
        leasehold_testkit::test_store(breaker)
            .break_lease("k")
            .await
    });
    // The breaker has read "first" and is about to break: "first" lets go
    // and "second" takes the key.
    about_to_rx.await.unwrap();
    first.release().await.unwrap();
    let second = leasehold_testkit::conformance::take(
        &leasehold_testkit::test_store(other.clone()),
        "k",
        opts("second"),
    )
    .await;
    go_tx.send(()).unwrap();

    let broken = breaking
        .await
        .unwrap()
        .unwrap()
        .expect("a holder was broken");
    assert_eq!(broken.owner.label.as_deref(), Some("second"), "{broken:?}");
    assert_eq!(broken.fencing_token, second.fencing_token());
    drop(second);
}

/// A reader of a reader-writer lock that reads the writer's key between
/// the writer's record write (which carries the writer's new token) and
/// its lease: the reader must not end up with the writer's token. (Found
/// by the torture run on Azurite: the writer, granted once the reader had
/// gone, had the reader's token.) The reader takes the key once to confirm
/// it free, which fails the writer's lease; the writer starts over with a
/// greater token.
#[tokio::test]
async fn a_reader_between_a_writers_record_and_its_lease_does_not_get_its_token() {
    common::require_azurite!();
    let prefix = common::unique_prefix();
    let (writer_backend, faults) = faulty(&prefix).await;
    let reader_store =
        leasehold_testkit::test_store(common::shared(&prefix).await.build().unwrap());
    let (about_to_tx, about_to_rx) = oneshot::channel();
    let (go_tx, go_rx) = oneshot::channel();
    *faults.pause_acquire.lock().unwrap() = Some((about_to_tx, go_rx));
    let writer = tokio::spawn(async move {
        leasehold_testkit::test_store(writer_backend)
            .rw_lock_with("k", 4, opts("writer"))
            .unwrap()
            .write_timeout(Duration::from_secs(60))
            .await
    });
    // The writer has written its record and is about to take the lease.
    about_to_rx.await.unwrap();
    let reader = reader_store
        .rw_lock_with("k", 4, opts("reader"))
        .unwrap()
        .try_read()
        .await
        .expect("the writer holds nothing yet");
    go_tx.send(()).unwrap();
    let read_token = reader.fencing_token();
    reader.release().await.unwrap();
    let w = writer.await.unwrap().unwrap();
    assert!(
        w.fencing_token() > read_token,
        "the writer's token {} is not above the earlier reader's {read_token}",
        w.fencing_token()
    );
    w.release().await.unwrap();
}

/// A lease whose break period runs is still its holder's: `inspect` says
/// held, and another acquirer is told held (not eight 412s and an error).
#[tokio::test]
async fn a_breaking_lease_counts_as_held() {
    common::require_azurite!();
    let prefix = common::unique_prefix();
    let (admin, faults) = faulty(&prefix).await;
    let holder = common::shared(&prefix).await.build().unwrap();
    let guard = leasehold_testkit::conformance::take(
        &leasehold_testkit::test_store(holder.clone()),
        "k",
        opts("holder"),
    )
    .await;
    faults.slow_break.store(true, Ordering::SeqCst);
    let admin_store = leasehold_testkit::test_store(admin);
    admin_store.break_lease("k").await.unwrap();

    let info = admin_store.inspect("k").await.unwrap();
    let h = info.holder.expect("breaking is held");
    assert_eq!(h.owner.label.as_deref(), Some("holder"));
    let listed = admin_store.list("").await.unwrap();
    assert!(listed[0].holder.is_some(), "{listed:?}");
    let err = leasehold_testkit::test_store(common::shared(&prefix).await.build().unwrap())
        .lock_with("k", opts("other"))
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Held { .. }), "{err}");
    drop(guard);
}

/// The first release lands but its answer is lost; the SDK's retry finds no
/// lease. That is a successful release, not a lost lease.
#[tokio::test]
async fn a_retried_release_whose_first_try_landed_succeeds() {
    common::require_azurite!();
    let prefix = common::unique_prefix();
    let (backend, faults) = faulty(&prefix).await;
    let store = leasehold_testkit::test_store(backend.clone());
    let lock = store.lock_with("k", opts("x")).unwrap();
    let guard = lock.try_acquire().await.unwrap();
    faults.drop_release_answer.store(true, Ordering::SeqCst);
    let before = faults.releases_sent.load(Ordering::SeqCst);
    guard.release().await.expect("released");
    assert!(
        faults.releases_sent.load(Ordering::SeqCst) - before >= 2,
        "the release was retried"
    );
    // And it is free for the next holder.
    lock.try_acquire().await.unwrap().release().await.unwrap();
    // A release of a lease someone else took since (here: released, then
    // taken) is still a loss: the record names the other holder.
    let lease = leasehold_testkit::conformance::raw_lease(&backend, "k", TTL).await;
    backend.release(&lease).await.unwrap();
    let thief = leasehold_testkit::conformance::take(
        &leasehold_testkit::test_store(common::shared(&prefix).await.build().unwrap()),
        "k",
        opts("thief"),
    )
    .await;
    let err = backend.release(&lease).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    drop(thief);
}
