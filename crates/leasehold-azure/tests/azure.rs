//! Azure-specific behaviour, against a real Azurite (no mocks): faults are
//! injected by pipeline policies around real requests.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use azure_core::http::Request;
use common::{Around, Injected};
use leasehold::{
    backend::{AcquireOutcome, AcquireRequest, Backend, LeaseId},
    Error, LockOptions, LossReason, WaitReason,
};
use leasehold_azure::AzureBackend;

const TTL: Duration = Duration::from_secs(15);

fn request(key: &str, lease_id: &LeaseId, epoch: u64) -> AcquireRequest {
    AcquireRequest {
        lease_id: lease_id.clone(),
        data: Some("payload".into()),
        ..leasehold_testkit::conformance::acquire_request(key, TTL, Some(epoch))
    }
}

fn granted(outcome: AcquireOutcome) -> u64 {
    match outcome {
        AcquireOutcome::Acquired(g) => g.fencing_token,
        other => panic!("unexpectedly not granted: {other:?}"),
    }
}

/// Counts requests (every try) and, while `drop_answers` is above zero,
/// sends matching requests but loses their answers: the ambiguous failure
/// of a dropped connection.
#[derive(Debug, Default)]
struct Faults {
    sent: AtomicUsize,
    drop_answers: AtomicUsize,
    drop_query: std::sync::Mutex<String>,
}

#[async_trait]
impl Around for Faults {
    /// Whether the request is one whose answer may be lost.
    type Seen = bool;

    async fn before(&self, request: &mut Request) -> bool {
        self.sent.fetch_add(1, Ordering::SeqCst);
        let query = request.url().query().unwrap_or("").to_string();
        let wanted = self.drop_query.lock().unwrap();
        !wanted.is_empty() && query.contains(wanted.as_str())
    }

    fn lose_answer(&self, matches: bool) -> bool {
        matches
            && self
                .drop_answers
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
    }
}

fn faulty_backend() -> (AzureBackend, Arc<Injected<Faults>>) {
    common::with_policy(common::builder())
}

/// A backend with request counting on the shared container (out of
/// quarantine), under `prefix`.
async fn counted_backend(prefix: &str) -> (AzureBackend, Arc<Injected<Faults>>) {
    common::with_policy(common::shared(prefix).await)
}

/// The metadata write succeeds but its answer is lost, on every try the
/// SDK makes: the acquisition fails ambiguously. Asking again with the same
/// lease id gets the lease with the token that was written, and the next
/// holder's token is one more.
#[tokio::test]
async fn ambiguous_acquire_retry_gets_the_same_token() {
    common::require_azurite!();
    let (backend, faults) = faulty_backend();
    // Straight from the backend (no quarantine): creates the container.
    let epoch = leasehold_testkit::conformance::current_epoch(&backend)
        .await
        .epoch;
    let id = LeaseId::random();
    let req = request("ambiguous", &id, epoch);

    // Warm up: creates the blob; the epoch's first token.
    let warm = LeaseId::random();
    let t1 = granted(
        backend
            .try_acquire(&request("ambiguous", &warm, epoch))
            .await
            .unwrap(),
    );
    assert_eq!(t1, leasehold::backend::next_token(0, epoch));
    backend
        .release(&leasehold::backend::Lease {
            key: req.key.clone(),
            lease_id: warm,
            ttl: TTL,
            fencing_token: t1,
            epoch,
        })
        .await
        .unwrap();

    *faults.drop_query.lock().unwrap() = "comp=metadata".into();
    faults.drop_answers.store(100, Ordering::SeqCst);
    let err = backend.try_acquire(&req).await.unwrap_err();
    assert!(
        err.is_retryable(),
        "an ambiguous failure is retryable: {err}"
    );
    faults.drop_answers.store(0, Ordering::SeqCst);

    let t2 = granted(backend.try_acquire(&req).await.unwrap());
    assert_eq!(t2, t1 + 1, "the lost write counted once");
    assert_eq!(
        granted(backend.try_acquire(&req).await.unwrap()),
        t2,
        "idempotent"
    );
    let info = backend.inspect(&req.key).await.unwrap();
    assert_eq!(info.fencing_token, t2);
    assert_eq!(info.holder.unwrap().data.as_deref(), Some("payload"));

    // One lost answer only: the SDK's own retry sees 412 ConditionNotMet,
    // the backend re-reads and recognises its own write.
    let lease = leasehold::backend::Lease {
        key: req.key.clone(),
        lease_id: id,
        ttl: TTL,
        fencing_token: t2,
        epoch,
    };
    backend.release(&lease).await.unwrap();
    faults.drop_answers.store(1, Ordering::SeqCst);
    let id3 = LeaseId::random();
    let t3 = granted(
        backend
            .try_acquire(&request("ambiguous", &id3, epoch))
            .await
            .unwrap(),
    );
    assert_eq!(t3, t2 + 1);
    assert_eq!(faults.drop_answers.load(Ordering::SeqCst), 0);
    backend.delete_container().await.unwrap();
}

/// Once a lock blob exists, an uncontended acquire + release costs three
/// requests (metadata write, acquire, release) in a process that has seen
/// the blob's record; a failed attempt on a held key costs one (reading the
/// blob, which says who holds it). A new process (a new backend) first
/// learns the store epoch: its first acquire + release costs five (the lock
/// blob and the epoch marker read, then the three). After another process
/// held the key, six: a write refused on the stale ETag, the blob and the
/// marker read, then the three.
#[tokio::test]
async fn request_counts() {
    common::require_azurite!();
    let prefix = common::unique_prefix();
    let (backend, faults) = counted_backend(&prefix).await;
    let store = leasehold_testkit::test_store(backend.clone());
    let lock = store
        .lock_with("counted", LockOptions::new().ttl(TTL))
        .unwrap();
    lock.try_acquire().await.unwrap().release().await.unwrap();

    let before = faults.sent.load(Ordering::SeqCst);
    let guard = lock.try_acquire().await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(faults.sent.load(Ordering::SeqCst) - before, 3, "warm");

    // A new process, an existing key of this epoch.
    let (cold, cold_faults) = counted_backend(&prefix).await;
    let cold_store = leasehold_testkit::test_store(cold.clone());
    let options = LockOptions::new().ttl(TTL);
    let guard = leasehold_testkit::conformance::take(&cold_store, "counted", options).await;
    guard.release().await.unwrap();
    assert_eq!(cold_faults.sent.load(Ordering::SeqCst), 5, "cold");

    // The first process again, after the other one held the key: its
    // remembered ETag is stale (one refused write), then read, marker,
    // write, acquire, release.
    let before = faults.sent.load(Ordering::SeqCst);
    lock.try_acquire().await.unwrap().release().await.unwrap();
    assert_eq!(
        faults.sent.load(Ordering::SeqCst) - before,
        6,
        "after another process"
    );

    let guard = lock.try_acquire().await.unwrap();
    let other = leasehold_testkit::test_store(backend.clone())
        .lock_with("counted", LockOptions::new().ttl(TTL))
        .unwrap();
    let before = faults.sent.load(Ordering::SeqCst);
    assert!(matches!(
        other.try_acquire().await,
        Err(Error::Held {
            holder: Some(_),
            ..
        })
    ));
    assert_eq!(faults.sent.load(Ordering::SeqCst) - before, 1);
    assert!(matches!(other.try_acquire().await, Err(Error::Held { .. })));
    assert_eq!(
        faults.sent.load(Ordering::SeqCst) - before,
        2,
        "each attempt one request"
    );
    guard.release().await.unwrap();
}

/// A lease broken by someone else (another process, with its own backend)
/// is noticed at the holder's next renewal, as a revocation.
#[tokio::test]
async fn lease_broken_from_outside_is_noticed_at_next_renewal() {
    common::require_azurite!();
    let prefix = common::unique_prefix();
    let holder = common::shared(&prefix).await.build().unwrap();
    let admin = common::shared(&prefix).await.build().unwrap();
    let store = leasehold_testkit::test_store(holder.clone());
    let guard = store
        .lock_with(
            "broken-outside",
            LockOptions::new()
                .ttl(TTL)
                .renew_interval(Duration::from_secs(1)),
        )
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let broken = leasehold_testkit::test_store(admin)
        .break_lease("broken-outside")
        .await
        .unwrap();
    assert_eq!(broken.map(|h| h.fencing_token), Some(guard.fencing_token()));
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("noticed at the next renewal (1 s)");
    assert!(matches!(reason, LossReason::Revoked(_)), "{reason:?}");
    assert!(guard.release().await.unwrap_err().is_lease_lost());
}

/// The container deleted under a live holder while another process (a
/// backend of its own) waits for the key: the waiter re-creates the
/// container, reports the new epoch's quarantine, and is granted only after
/// the holder's guard was told lost (a 404 at its renewal), with a token
/// above every token granted before (the new epoch's). Without epochs the
/// waiter was granted token 1 at once, while the holder still ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn container_deleted_under_a_holder_with_a_waiter() {
    common::require_azurite!();
    let container = common::fresh_container();
    let holder = common::builder().container(&container).build().unwrap();
    common::settled(&holder).await;
    let old_epoch = holder.epoch().expect("learnt").epoch;
    // Default renewal (every TTL/3): the holder hears of the loss only then.
    let opts = LockOptions::new().ttl(TTL);
    let lock = leasehold_testkit::test_store(holder.clone())
        .lock_with("doomed", opts.clone())
        .unwrap();
    let mut earlier = Vec::new();
    for _ in 0..3 {
        let g = lock.try_acquire().await.unwrap();
        earlier.push(g.fencing_token());
        g.release().await.unwrap();
    }
    let guard = lock.try_acquire().await.unwrap();
    earlier.push(guard.fencing_token());

    let other = common::builder().container(&container).build().unwrap();
    let waiter = leasehold_testkit::test_store(other.clone())
        .lock_with(
            "doomed",
            opts.poll_interval(Duration::from_millis(100), Duration::from_millis(500)),
        )
        .unwrap();
    let (seen_held, held) = tokio::sync::oneshot::channel();
    let quarantines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let q = quarantines.clone();
    let waiting = tokio::spawn(async move {
        let mut seen_held = Some(seen_held);
        waiter
            .acquire_reporting(Duration::from_secs(120), move |reason| match reason {
                WaitReason::Held(_) => {
                    if let Some(tx) = seen_held.take() {
                        let _ = tx.send(());
                    }
                }
                WaitReason::Quarantine { epoch, remaining } => {
                    q.lock().unwrap().push((epoch, remaining))
                }
                _ => {}
            })
            .await
    });
    held.await.expect("the waiter found the key held");

    holder.delete_container().await.unwrap();
    let granted = waiting.await.unwrap().unwrap();
    // Checked the moment the new grant is in hand.
    assert!(
        guard.is_lost(),
        "granted (token {}) while the holder of the deleted container was not yet told lost",
        granted.fencing_token()
    );
    let new_epoch = other.epoch().expect("learnt").epoch;
    assert!(new_epoch > old_epoch, "epoch {new_epoch} after {old_epoch}");
    let highest = *earlier.iter().max().unwrap();
    assert!(
        granted.fencing_token() > highest,
        "token {} after the container was lost, earlier ones up to {highest}",
        granted.fencing_token()
    );
    assert_eq!(
        granted.fencing_token(),
        leasehold::backend::next_token(0, new_epoch),
        "the new epoch's first token"
    );
    let quarantines = quarantines.lock().unwrap().clone();
    assert!(
        quarantines.iter().any(|(e, _)| *e == new_epoch),
        "the waiter reported the new epoch's quarantine: {quarantines:?}"
    );
    match guard.lost().await {
        LossReason::Revoked(why) => assert!(why.contains("404"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(guard.release().await.unwrap_err().is_lease_lost());
    granted.release().await.unwrap();
    other.delete_container().await.unwrap();
}

/// Wrong keys fail clearly (not retryable, naming the refusal) and never
/// echo the key.
#[tokio::test]
async fn wrong_key_is_a_clear_error_without_the_key() {
    common::require_azurite!();
    let wrong = "V3JvbmdLZXlXcm9uZ0tleVdyb25nS2V5V3JvbmdLZXk=";
    // The Azurite under test, with the wrong key.
    let cs = match common::connection_string() {
        dev if dev == "UseDevelopmentStorage=true" => common::dev_connection_string(),
        cs => cs,
    };
    let with_wrong_key: Vec<String> = cs
        .split(';')
        .map(|part| match part.strip_prefix("AccountKey=") {
            Some(_) => format!("AccountKey={wrong}"),
            None => part.to_string(),
        })
        .collect();
    let backend = AzureBackend::builder()
        .connection_string(with_wrong_key.join(";"))
        .container(common::fresh_container())
        .build()
        .unwrap();
    assert!(!format!("{backend:?}").contains(wrong));
    let store = leasehold_testkit::test_store(backend);
    let err = store
        .lock_with("k", LockOptions::new().ttl(TTL))
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    let text = format!("{err} / {err:?}");
    assert!(
        matches!(
            err,
            Error::Backend {
                retryable: false,
                ..
            }
        ),
        "{text}"
    );
    assert!(text.contains("403"), "{text}");
    assert!(
        !text.contains(wrong) && !text.contains("V3JvbmdLZXl"),
        "{text}"
    );
    let err = store.inspect("k").await.unwrap_err();
    assert!(!format!("{err:?}").contains(wrong));
}

/// Malformed connection strings are invalid input that names what is wrong
/// but shows no value; nothing panics.
#[tokio::test]
async fn bad_connection_strings_are_clear_errors() {
    let secret = "c2VjcmV0LXNlY3JldC1zZWNyZXQ=";
    for (cs, expect) in [
        (format!("AccountName=a;AccountKey={secret}"), None),
        ("".to_string(), Some("neither")),
        ("just-garbage".to_string(), Some("NAME=VALUE")),
        (
            format!("AccountName=a;Key={secret}"),
            Some("unknown setting"),
        ),
        (
            format!("AccountKey={secret};BlobEndpoint=http://127.0.0.1:1/x"),
            Some("AccountName"),
        ),
        (
            "AccountName=a;AccountKey=%%%not-base64%%%".to_string(),
            Some("base64"),
        ),
        (
            format!("AccountName=a;AccountKey={secret};DefaultEndpointsProtocol=ftp"),
            Some("http or https"),
        ),
    ] {
        let result = AzureBackend::builder()
            .connection_string(cs.clone())
            .container("locks")
            .build();
        match (result, expect) {
            // Well-formed (https without the rustls feature is NotSupported).
            (Ok(_), None) | (Err(Error::NotSupported(_)), None) => {}
            (Err(e @ Error::InvalidInput { .. }), Some(words)) => {
                let text = format!("{e} / {e:?}");
                assert!(text.contains(words), "{cs:?}: {text}");
                assert!(
                    !text.contains(secret) && !text.contains("not-base64"),
                    "{text}"
                );
            }
            (other, _) => panic!("{cs:?}: {other:?}"),
        }
    }
    let err = AzureBackend::from_url("azblob://No_Such")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    let err = AzureBackend::from_url("azblob://").await.unwrap_err();
    leasehold_testkit::conformance::assert_invalid_input(&err, "store URL");
}

/// TTLs outside Azure's 15-60 s are rejected, naming the range.
#[tokio::test]
async fn ttl_outside_azure_range_is_rejected_with_the_range() {
    // Azure's own range (the default store max TTL is its longest lease).
    let backend = common::builder()
        .max_ttl(leasehold_azure::MAX_TTL)
        .build()
        .unwrap();
    let store = leasehold_testkit::test_store(backend);
    for secs in [10, 90] {
        let err = store
            .lock_with("ttl", LockOptions::new().ttl(Duration::from_secs(secs)))
            .unwrap_err();
        match &err {
            Error::InvalidInput {
                what: "ttl",
                message,
            } => {
                assert!(
                    message.contains("15s") && message.contains("60s"),
                    "{message}"
                );
            }
            other => panic!("{secs}: {other}"),
        }
    }
}

/// Keys whose segments end in dots, and prefixes ending in dots, map to
/// valid blob names and list back correctly.
#[tokio::test]
async fn awkward_keys_round_trip_through_list() {
    common::require_azurite!();
    let prefix = format!("{}/p.", common::unique_prefix());
    let backend = common::shared(&prefix).await.build().unwrap();
    let store = leasehold_testkit::test_store(backend.clone());
    let keys = ["a.", "a./b", "a/../c", "a..b", "x:y_z-1"];
    for k in keys {
        let g = leasehold_testkit::conformance::take(&store, k, LockOptions::new().ttl(TTL)).await;
        g.release().await.unwrap();
    }
    let all = common::listed_keys(&store, "").await;
    let mut expected: Vec<String> = keys.iter().map(|s| s.to_string()).collect();
    expected.sort();
    assert_eq!(all, expected);
    let dotted = common::listed_keys(&store, "a.").await;
    assert_eq!(dotted, vec!["a.", "a..b", "a./b"]);
}

/// A copy of the container put back in its place (a backup restored by
/// copying every blob, records and marker included) is a new epoch: the
/// copied marker's Last-Modified is new. A process that cleared the old
/// epoch, and whose records say that epoch, is not granted on the copy
/// before the new epoch's quarantine, and its next token is above the old
/// ones. (Records are never taken as proof of their container: the marker
/// is read after the blob.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_copy_of_the_container_is_a_new_epoch() {
    use azure_core::http::RequestContent;
    use azure_storage_blob::models::{
        BlobClientGetPropertiesResultHeaders, BlockBlobClientUploadOptions,
    };
    use futures::TryStreamExt;

    common::require_azurite!();
    let backend = common::builder().build().unwrap();
    common::settled(&backend).await;
    let old_epoch = backend.epoch().expect("learnt").epoch;
    let lock = leasehold_testkit::test_store(backend.clone())
        .lock_with("copied", LockOptions::new().ttl(TTL))
        .unwrap();
    let before = lock.try_acquire().await.unwrap();
    let old_token = before.fencing_token();
    before.release().await.unwrap();

    // The backup: every blob's metadata, then the container deleted and
    // re-created from it.
    let client = backend.container_client();
    let mut backup = Vec::new();
    let mut pages = client.list_blobs(None).unwrap();
    while let Some(item) = pages.try_next().await.unwrap() {
        let name = item.name.unwrap();
        let props = client
            .blob_client(&name)
            .get_properties(None)
            .await
            .unwrap();
        backup.push((name, props.metadata().unwrap()));
    }
    assert!(
        backup.len() >= 2,
        "the marker and the lock blob: {backup:?}"
    );
    backend.delete_container().await.unwrap();
    client.create(None).await.unwrap();
    for (name, metadata) in backup {
        let options = BlockBlobClientUploadOptions {
            metadata: Some(metadata),
            ..Default::default()
        };
        client
            .blob_client(&name)
            .upload(RequestContent::from(Vec::<u8>::new()), Some(options))
            .await
            .unwrap();
    }

    // This process cleared the old epoch and the copied record says it.
    match lock.try_acquire().await {
        Err(Error::Quarantined { epoch, .. }) => {
            assert!(epoch > old_epoch, "epoch {epoch} after {old_epoch}")
        }
        Err(e) => panic!("expected the quarantine, got {e}"),
        Ok(g) => panic!(
            "granted token {} on a restored copy without a quarantine",
            g.fencing_token()
        ),
    }
    let after = lock.acquire_timeout(Duration::from_secs(60)).await.unwrap();
    assert!(after.fencing_token() > old_token);
    assert_eq!(
        after.fencing_token(),
        leasehold::backend::next_token(old_token, backend.epoch().unwrap().epoch)
    );
    after.release().await.unwrap();
    backend.delete_container().await.unwrap();
}

/// A container deleted and re-created at once (Azurite allows it within
/// milliseconds) still gets a later epoch: the marker is written only a
/// second after Azure said there was none, so the two markers'
/// `Last-Modified` seconds differ. (Without that wait both fall in the same
/// second nearly always, and the two containers' tokens would collide.)
#[tokio::test]
async fn a_container_re_created_at_once_has_a_later_epoch() {
    common::require_azurite!();
    let container = common::fresh_container();
    let mut epochs = Vec::new();
    for _ in 0..3 {
        // A new backend each time: another process, nothing remembered.
        let backend = common::builder().container(&container).build().unwrap();
        epochs.push(
            leasehold_testkit::conformance::current_epoch(&backend)
                .await
                .epoch,
        );
        backend.delete_container().await.unwrap();
    }
    assert!(epochs.windows(2).all(|w| w[1] > w[0]), "epochs {epochs:?}");
}

/// A container's recorded max TTL wins over the backend's setting, and a
/// longer TTL is refused at once (not after the new container's
/// quarantine), naming the max TTL.
#[tokio::test]
async fn a_ttl_above_the_recorded_max_ttl_is_refused_at_once() {
    common::require_azurite!();
    // Writes the marker with the tests' 15 s.
    let first = common::builder().build().unwrap();
    assert_eq!(
        leasehold_testkit::conformance::current_epoch(&first)
            .await
            .max_ttl,
        common::MAX_TTL
    );
    // Another process set up for 60 s.
    let other = AzureBackend::builder()
        .connection_string(common::connection_string())
        .container(first.container())
        .build()
        .unwrap();
    let lock = leasehold_testkit::test_store(other.clone())
        .lock_with("long", LockOptions::new().ttl(Duration::from_secs(30)))
        .unwrap();
    match lock.try_acquire().await {
        Err(Error::InvalidInput {
            what: "ttl",
            message,
        }) => {
            assert!(message.contains("max TTL of 15s"), "{message}")
        }
        Err(e) => panic!("expected invalid input, got {e}"),
        Ok(g) => panic!("granted token {}", g.fencing_token()),
    }
    assert_eq!(other.epoch().unwrap().max_ttl, common::MAX_TTL);
    first.delete_container().await.unwrap();
}
