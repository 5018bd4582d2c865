//! The S3 backend's own tests against an S3 emulator (moto): ETags that
//! never repeat, takeover of a dead holder only, request counts, the
//! bucket, a key's object deleted by hand, and the store lost.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use leasehold::{backend::Backend, Creation, Error, Key, LockOptions};
use leasehold_s3::S3Backend;
use leasehold_test_servers::suite::{self, Recreation};

fn opts(ttl: Duration) -> LockOptions {
    LockOptions::new()
        .ttl(ttl)
        .poll_interval(Duration::from_millis(50), Duration::from_millis(150))
}

async fn etag(backend: &S3Backend, key: &str) -> String {
    common::client()
        .await
        .head_object()
        .bucket(backend.bucket())
        .key(backend.object_name(&Key::new(key).unwrap()))
        .send()
        .await
        .expect("head the key's object")
        .e_tag()
        .expect("an ETag")
        .to_string()
}

/// The ABA case: a holder whose wall clock stands still writes records
/// whose every field is the same at each renewal (its expiry stamp is its
/// wall clock plus the TTL). S3's ETag is a hash of the bytes, so without
/// the nonce each renewal would leave the ETag as it was, and a waiter that
/// has seen that ETag for a whole TTL would take the key from a live
/// holder. With it, every renewal changes the ETag, and the waiter never
/// gets the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renewals_change_the_etag_even_with_a_frozen_wall_clock() {
    // Alone at the emulator: the other tests' traffic delayed the holder's
    // renewals past its TTL in a CI run.
    let _alone = common::EMULATOR.write().await;
    let Some(prefix) = common::prefix_of_its_own() else {
        return;
    };
    let frozen = SystemTime::now();
    let holder_backend = Arc::new(
        common::builder_for(common::BUCKET, &prefix)
            .creation(Creation::NewProven)
            .wall_clock(Arc::new(move || frozen))
            .build()
            .await
            .unwrap(),
    );
    let key = common::unique_key("aba");
    let ttl = leasehold_s3::MIN_TTL;

    // Two renewals of one lease at one wall-clock instant: other ETags.
    let lease = leasehold_testkit::conformance::raw_lease(holder_backend.as_ref(), &key, ttl).await;
    let first = etag(&holder_backend, &key).await;
    holder_backend.renew(&lease).await.unwrap();
    let second = etag(&holder_backend, &key).await;
    assert_ne!(first, second, "a renewal left the ETag as it was");
    holder_backend.release(&lease).await.unwrap();

    // A live holder renewing (frozen wall clock) keeps its key from a
    // waiter that watches for three TTLs. A round in which the emulator
    // answered a renewal too late for the holder to keep its lease says
    // nothing either way (the waiter may then take the key); it is run
    // again, up to three rounds.
    let waiter = leasehold_testkit::test_store(
        common::builder_for(common::BUCKET, &prefix)
            .build()
            .await
            .unwrap(),
    );
    for round in 1..=3 {
        let holder = leasehold_testkit::test_store_from(holder_backend.clone())
            .lock_with(&key, opts(ttl).renew_interval(ttl / 4))
            .unwrap()
            .try_acquire()
            .await
            .unwrap();
        // Polls a few times a TTL: enough to see the ETag stand still for
        // a TTL, without crowding the holder's renewals at the emulator.
        let got = waiter
            .lock_with(&key, opts(ttl).poll_interval(ttl / 8, ttl / 4))
            .unwrap()
            .acquire_timeout(ttl * 3)
            .await;
        match got {
            Err(Error::TimedOut { .. }) if !holder.is_lost() => {
                holder.release().await.unwrap();
                return;
            }
            // The holder let its lease go (a renewal answered too late on
            // a loaded machine, as in a CI run) and the waiter, slow too,
            // did not take the key in time: this round says nothing.
            Err(Error::TimedOut { .. }) => {
                eprintln!(
                    "round {round}: the holder lost its lease ({:?}) and the waiter timed out: the emulator answered too slowly for this round to say anything",
                    holder.loss_reason()
                );
            }
            Ok(g) if holder.is_lost() => {
                eprintln!(
                    "round {round}: the holder lost its lease ({:?}) and the waiter took the key (token {}): the emulator answered too slowly for this round to say anything",
                    holder.loss_reason(),
                    g.fencing_token()
                );
                g.release().await.unwrap();
            }
            Ok(g) => panic!(
                "a waiter took the key (token {}) from a live holder (token {}): a stale If-Match matched",
                g.fencing_token(),
                holder.fencing_token()
            ),
            Err(e) => panic!("expected a timeout, got {e}"),
        }
    }
    panic!("in three rounds the emulator never answered the holder's renewals in time");
}

/// Two backends (two SDK clients, as two machines): after B takes over A's
/// lease, which A stopped renewing, A's renew and release are definitive
/// losses and change nothing for B; B waited at least A's TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_holder_renew_after_takeover_fails() {
    let _emulator = common::EMULATOR.read().await;
    let Some(a) = common::backend().await else {
        return;
    };
    let b = Arc::new(common::backend().await.unwrap());
    let key = common::unique_key("stale");
    let ttl = leasehold_s3::MIN_TTL;
    let stale = leasehold_testkit::conformance::raw_lease(&a, &key, ttl).await;
    let started = std::time::Instant::now();
    let guard = leasehold_testkit::test_store_from(b.clone())
        .lock_with(&key, opts(ttl))
        .unwrap()
        .acquire_timeout(Duration::from_secs(20))
        .await
        .unwrap();
    assert!(
        started.elapsed() >= ttl,
        "taken over after {:?}, before the holder's TTL of {ttl:?}",
        started.elapsed()
    );
    assert!(guard.fencing_token() > stale.fencing_token);
    suite::assert_revoked(a.renew(&stale).await.unwrap_err());
    suite::assert_revoked(a.release(&stale).await.unwrap_err());
    let info = a.inspect(&Key::new(&key).unwrap()).await.unwrap();
    assert_eq!(info.fencing_token, guard.fencing_token());
    assert!(info.holder.is_some());
    guard.release().await.unwrap();
}

/// An acquire + release of a key this process released last costs three
/// requests (the write, the marker read after it, the release); a failed
/// try-acquire costs one and names the holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_counts() {
    let _emulator = common::EMULATOR.read().await;
    let Some(backend) = common::backend().await else {
        return;
    };
    // Long enough that no renewal runs during the measurement.
    suite::request_counts(
        Arc::new(backend),
        S3Backend::requests_sent,
        common::MAX_TTL,
        3,
    )
    .await;
}

async fn bucket_exists(bucket: &str) -> bool {
    common::client()
        .await
        .head_bucket()
        .bucket(bucket)
        .send()
        .await
        .is_ok()
}

/// A missing bucket: looking (`Creation::Never`) is `NoStore` and creates
/// nothing; with `create_bucket` off it is an error naming the bucket; by
/// default it is created, and a second backend uses it as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_is_created_only_when_allowed() {
    let _emulator = common::EMULATOR.read().await;
    let Some(bucket) = common::bucket_of_its_own() else {
        return;
    };
    let err = common::open_bucket(&bucket, Creation::Never)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoStore { .. }), "{err}");
    assert!(err.to_string().contains(&bucket), "{err}");
    assert!(!bucket_exists(&bucket).await, "looking created the bucket");

    let err = common::builder_for(&bucket, "")
        .create_bucket(false)
        .build()
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&bucket) && text.contains("create_bucket"),
        "{text}"
    );
    assert!(!bucket_exists(&bucket).await);

    let backend = common::builder_for(&bucket, "").build().await.unwrap();
    assert!(bucket_exists(&bucket).await, "the bucket was not created");
    let epoch = backend.epoch().epoch;
    let again = common::open_bucket(&bucket, Creation::Never).await.unwrap();
    assert_eq!(again.epoch().epoch, epoch, "the second backend's store");
    common::delete_bucket(&common::client().await, &bucket).await;
}

/// A store URL opens the store it names, and malformed ones are refused
/// before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opens_from_url() {
    let _emulator = common::EMULATOR.read().await;
    let Some(prefix) = common::prefix_of_its_own() else {
        return;
    };
    let url = format!(
        "s3://{}/{prefix}?region={}&endpoint={}&max_ttl=7s",
        common::BUCKET,
        common::REGION,
        common::endpoint()
    );
    let backend = S3Backend::builder_from_url(&url)
        .unwrap()
        .credentials_provider(common::credentials())
        .build()
        .await
        .unwrap();
    assert_eq!(backend.bucket(), common::BUCKET);
    assert_eq!(backend.prefix(), format!("{prefix}/"));
    assert_eq!(backend.epoch().max_ttl, Duration::from_secs(7));
    for bad in [
        "s3://",
        "s3://Bad_Bucket",
        "s3://ok-bucket?max_ttl=25h",
        "s3://ok-bucket?nonsense=1",
        "s3://ok-bucket/a b",
    ] {
        let err = match S3Backend::builder_from_url(bad) {
            Err(e) => e,
            Ok(b) => b.build().await.unwrap_err(),
        };
        assert!(matches!(err, Error::InvalidInput { .. }), "{bad}: {err}");
    }
}

/// A key's object deleted by hand while the store lives on (its epoch
/// marker kept): the key's next object starts its tokens above every token
/// of the deleted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_by_hand_still_gets_greater_tokens() {
    let _emulator = common::EMULATOR.read().await;
    let Some(backend) = common::backend().await else {
        return;
    };
    let store = leasehold_testkit::test_store(backend);
    let key = common::unique_key("deleted");
    let lock = store.lock_with(&key, opts(Duration::from_secs(5))).unwrap();
    let mut last = 0;
    for _ in 0..3 {
        let g = lock.try_acquire().await.unwrap();
        assert!(g.fencing_token() > last);
        last = g.fencing_token();
        g.release().await.unwrap();
    }
    let client = common::client().await;
    let name = format!("{}/{key}", common::prefix());
    client
        .delete_object()
        .bucket(common::BUCKET)
        .key(&name)
        .send()
        .await
        .unwrap();
    // Another process (which never saw the key) asks for it.
    let other = leasehold_testkit::test_store(common::backend().await.unwrap());
    let g = leasehold_testkit::conformance::take(&other, &key, opts(Duration::from_secs(5))).await;
    assert!(
        g.fencing_token() > last,
        "token {} for the key's new object is not above the deleted one's {last}",
        g.fencing_token()
    );
    g.release().await.unwrap();
    // And this process, which remembers its last write to the object.
    let g = lock.try_acquire().await.unwrap();
    assert!(g.fencing_token() > last);
    g.release().await.unwrap();
}

/// The bucket emptied and deleted under a live holder with a waiter: the
/// waiter re-creates it, waits out the quarantine, and is granted only
/// after the holder was told lost, with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bucket_deleted_under_a_live_holder() {
    let _emulator = common::EMULATOR.read().await;
    let Some(bucket) = common::bucket_of_its_own() else {
        return;
    };
    let backend = common::open_bucket(&bucket, Creation::NewProven)
        .await
        .unwrap();
    let before = backend.epoch().epoch;
    let store = leasehold_testkit::test_store(backend);
    let gone = bucket.clone();
    leasehold_testkit::conformance::store_loss_stops_holder_before_next_grant(
        store,
        move |_| async move {
            common::delete_bucket(&common::client().await, &gone).await;
        },
    )
    .await;
    let after = common::builder_for(&bucket, "")
        .build()
        .await
        .unwrap()
        .epoch()
        .epoch;
    assert!(after > before, "epoch {after} after {before}");
    common::delete_bucket(&common::client().await, &bucket).await;
}

/// A backend on store `prefix` with `max_ttl`.
async fn open_store(prefix: &str, max_ttl: Duration) -> Arc<dyn Backend> {
    Arc::new(
        common::builder_for(common::BUCKET, prefix)
            .max_ttl(max_ttl)
            .build()
            .await
            .unwrap(),
    )
}

leasehold_test_servers::recreation_tests!(store_deleted_and_recreated);

/// `test` on a store of its own, opened with a 30-minute max TTL, its
/// objects deleted, and re-created with the default.
async fn store_deleted_and_recreated(test: Recreation) {
    let _emulator = common::EMULATOR.read().await;
    let Some(prefix) = common::prefix_of_its_own() else {
        return;
    };
    let holder = open_store(&prefix, Duration::from_secs(30 * 60)).await;
    test.run(
        holder,
        || async { common::delete_store(&common::client().await, common::BUCKET, &prefix).await },
        || async { open_store(&prefix, leasehold::backend::DEFAULT_STORE_MAX_TTL).await },
    )
    .await;
}

/// The store's objects deleted one by one, the epoch marker first (as a
/// recursive `aws s3 rm` does): a holder whose own object is not deleted
/// yet must not go on trusting its lease by renewing that object. Its
/// renewals read the marker, so it is told of the loss at its next
/// renewal, not only once its own object is gone (by which time another
/// process may have started the new epoch and been granted its key).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holder_is_told_of_loss_once_the_epoch_marker_is_gone() {
    let _emulator = common::EMULATOR.read().await;
    let Some(prefix) = common::prefix_of_its_own() else {
        return;
    };
    let store = leasehold_testkit::test_store(common::fresh_backend(&prefix).await);
    let key = common::unique_key("marker-gone");
    let ttl = Duration::from_secs(4);
    let guard = store
        .lock_with(&key, opts(ttl).renew_interval(Duration::from_millis(300)))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    common::client()
        .await
        .delete_object()
        .bucket(common::BUCKET)
        .key(format!("{prefix}/!leasehold-epoch"))
        .send()
        .await
        .unwrap();
    // Well before the lease's own deadline (4 s, less a margin): the
    // renewals, every 300 ms, are what tell it.
    let lost = tokio::time::timeout(Duration::from_secs(2), guard.lost()).await;
    assert!(
        lost.is_ok(),
        "the holder still trusts its lease 2 s after the store's epoch marker was deleted"
    );
}

/// A copy of the store put back over it (a backup restored: the marker
/// first, then the key's object, byte for byte, so with the ETag it had):
/// a process that remembers its last write to the key (that very ETag)
/// must not be granted the key again in the epoch it knew, with the token
/// after its last one, which another process has been granted since.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restored_copy_repeats_no_token_for_a_process_that_wrote_it() {
    let _emulator = common::EMULATOR.read().await;
    let Some(prefix) = common::prefix_of_its_own() else {
        return;
    };
    let first = common::fresh_backend(&prefix).await;
    let second = common::builder_for(common::BUCKET, &prefix)
        .build()
        .await
        .unwrap();
    let key = common::unique_key("restored");
    let ttl = Duration::from_secs(5);
    let lease = leasehold_testkit::conformance::raw_lease(&first, &key, ttl).await;
    first.release(&lease).await.unwrap();

    // The backup.
    let client = common::client().await;
    let get = |name: String| {
        let client = client.clone();
        async move {
            client
                .get_object()
                .bucket(common::BUCKET)
                .key(name)
                .send()
                .await
                .unwrap()
                .body
                .collect()
                .await
                .unwrap()
                .into_bytes()
        }
    };
    let object = first.object_name(&Key::new(&key).unwrap());
    let marker = format!("{prefix}/!leasehold-epoch");
    let saved_object = get(object.clone()).await;
    let saved_marker = get(marker.clone()).await;

    // Another process is granted the key after it.
    let later = leasehold_testkit::conformance::raw_lease(&second, &key, ttl).await;
    second.release(&later).await.unwrap();
    assert!(later.fencing_token > lease.fencing_token);

    // The store restored from the backup, the marker first.
    common::delete_store(&client, common::BUCKET, &prefix).await;
    for (name, bytes) in [(marker, saved_marker), (object, saved_object)] {
        client
            .put_object()
            .bucket(common::BUCKET)
            .key(name)
            .body(bytes.into())
            .send()
            .await
            .unwrap();
    }

    let req = leasehold_testkit::conformance::acquire_request(&key, ttl, Some(lease.epoch));
    match first.try_acquire(&req).await.unwrap() {
        leasehold::backend::AcquireOutcome::Acquired(g) => assert!(
            g.fencing_token > later.fencing_token,
            "granted token {} in the restored copy, not above {} granted before the restore",
            g.fencing_token,
            later.fencing_token
        ),
        leasehold::backend::AcquireOutcome::OtherEpoch(e) => assert!(e.epoch > lease.epoch),
        leasehold::backend::AcquireOutcome::Held(h) => panic!("held by {h:?}"),
    }
}

/// `init --new` (`Creation::NewProven`) states that no store existed under
/// the prefix; where objects of one are left (its marker deleted first, the
/// rest not yet), the statement is not taken: the new epoch is quarantined
/// as any other, since a holder of a deleted key may still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_store_over_left_objects_is_not_settled_at_once() {
    let _emulator = common::EMULATOR.read().await;
    let Some(prefix) = common::prefix_of_its_own() else {
        return;
    };
    let backend = common::fresh_backend(&prefix).await;
    assert!(backend.epoch().is_proven(), "a new prefix: proven");
    let lease =
        leasehold_testkit::conformance::raw_lease(&backend, "k", Duration::from_secs(5)).await;
    let client = common::client().await;
    client
        .delete_object()
        .bucket(common::BUCKET)
        .key(format!("{prefix}/!leasehold-epoch"))
        .send()
        .await
        .unwrap();
    let again = common::fresh_backend(&prefix).await;
    assert!(
        !again.epoch().is_proven(),
        "settled at once over a key object of the deleted store (token {})",
        lease.fencing_token
    );
}

/// The emulator applies each conditional write atomically, as S3 does:
/// of 16 simultaneous `If-None-Match: *` PUTs of a fresh key, exactly one
/// succeeds, in each of 40 rounds. Plain moto checks the condition and then
/// writes with nothing between the two, and failed this (10 of 300 rounds
/// under CPU load had two winners; the conformance suite once saw two
/// winners of one key); the test command serializes moto's requests
/// (scripts/moto_serial_server.py). If this fails, the S3 tests' results
/// say nothing about leasehold.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_emulator_applies_conditional_writes_one_at_a_time() {
    // Alone: its floods would slow the other tests' renewals past their TTLs.
    let _alone = common::EMULATOR.write().await;
    if !common::available() {
        return;
    }
    let client = common::client().await;
    // The bucket may be there already (another test made it).
    let _ = client.create_bucket().bucket(common::BUCKET).send().await;
    let prefix = common::unique_prefix();
    for round in 0..40 {
        let key = format!("{prefix}/canary/{round}");
        let puts = (0..16).map(|i| {
            let client = client.clone();
            let key = key.clone();
            tokio::spawn(async move {
                client
                    .put_object()
                    .bucket(common::BUCKET)
                    .key(key)
                    .if_none_match("*")
                    .body(format!("writer {i}").into_bytes().into())
                    .send()
                    .await
                    .is_ok()
            })
        });
        let mut winners = 0;
        for put in puts.collect::<Vec<_>>() {
            winners += usize::from(put.await.unwrap());
        }
        assert_eq!(
            winners, 1,
            "round {round}: {winners} writes of one new key succeeded"
        );
    }
}
