//! The ZooKeeper store's own protocol corners, on a real server: takeover
//! only after a whole TTL of an unchanged record, a deleted record never
//! granted its first token again, the epoch on the server's clock, a newer
//! protocol refused before any write, and looking that writes nothing.

mod common;

use std::time::{Duration, Instant};

use leasehold::backend::{AcquireOutcome, Backend, Lease};
use leasehold::{Creation, Error, Key};
use leasehold_testkit::conformance::{acquire_request, current_epoch, raw_lease};
use leasehold_zookeeper::{ZkBackend, ZkBackendBuilder, DEFAULT_TAKEOVER_MARGIN};
use zookeeper_client as zk;

async fn client() -> zk::Client {
    zk::Client::connect(&common::endpoint())
        .await
        .expect("connect")
}

/// A backend on the shared server's store `chroot` (max TTL 5 s).
async fn open(chroot: &str, creation: Creation) -> leasehold::Result<ZkBackend> {
    ZkBackendBuilder::from_url(&common::url_for(chroot))
        .unwrap()
        .creation(creation)
        .build()
        .await
}

/// Tries `key` every 50 ms until granted (at most `within`): the grant's
/// token and when it came.
async fn take_over(backend: &ZkBackend, key: &str, epoch: u64, within: Duration) -> (u64, Instant) {
    let started = Instant::now();
    loop {
        let req = acquire_request(key, Duration::from_secs(2), Some(epoch));
        if let AcquireOutcome::Acquired(g) = backend.try_acquire(&req).await.unwrap() {
            return (g.fencing_token, Instant::now());
        }
        assert!(
            started.elapsed() < within,
            "not taken over within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A holder that stops renewing is taken over only once a waiter has seen
/// its record unchanged for its whole TTL (plus 0.1 % and the margin) on
/// the waiter's own clock; a renewal meanwhile starts the watch over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_waits_a_whole_ttl_of_an_unchanged_record() {
    let Some(holder) = common::backend().await else {
        return;
    };
    let waiter = common::backend().await.unwrap();
    let key = common::unique_key("takeover");
    let ttl = Duration::from_secs(2);
    let lease: Lease = raw_lease(&holder, &key, ttl).await;
    let epoch = lease.epoch;
    // The waiter first sees the record now.
    let req = acquire_request(&key, ttl, Some(epoch));
    assert!(matches!(
        waiter.try_acquire(&req).await.unwrap(),
        AcquireOutcome::Held(_)
    ));
    // A renewal 1.2 s later changes the record: the watch starts over.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    holder.renew(&lease).await.unwrap();
    let renewed = Instant::now();
    let (token, granted) = take_over(&waiter, &key, epoch, ttl * 3).await;
    let least = ttl + ttl / 1000 + DEFAULT_TAKEOVER_MARGIN;
    assert!(
        granted.duration_since(renewed) >= least,
        "taken over {:?} after the holder's renewal, before its TTL",
        granted.duration_since(renewed)
    );
    assert!(token > lease.fencing_token);
    // The old holder's renewal finds another lease: lost.
    let err = holder.renew(&lease).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
}

/// A key's record deleted by hand while the store's marker stays (a
/// recursive delete under way deletes records first): the key is not
/// granted the epoch's first token again, which its last holder had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_record_is_never_granted_its_first_token_again() {
    let Some((_, chroot)) = common::store_of_its_own().await else {
        return;
    };
    let backend = open(&chroot, Creation::IfMissing).await.unwrap();
    common::settled(&backend).await;
    let key = common::unique_key("deleted-record");
    let first = raw_lease(&backend, &key, Duration::from_secs(2)).await;
    backend.release(&first).await.unwrap();
    let path = format!(
        "{chroot}/epoch/keys-{}/{}",
        first.epoch,
        key.replace('/', "%2F")
    );
    client()
        .await
        .delete(&path, None)
        .await
        .expect("delete the record");
    let req = acquire_request(&key, Duration::from_secs(2), Some(first.epoch));
    match backend.try_acquire(&req).await {
        Err(e) => {
            assert!(e.is_retryable(), "{e}");
            assert!(e.to_string().contains("was deleted"), "{e}");
        }
        Ok(AcquireOutcome::Acquired(g)) => panic!(
            "granted token {} after the record of token {} was deleted",
            g.fencing_token, first.fencing_token
        ),
        Ok(other) => panic!("{other:?}"),
    }
    common::delete_store_now(&chroot).await;
}

/// The store's epoch is the server's clock, in whole seconds since
/// 2024-01-01, when its marker was created: the marker's `ctime` second,
/// or the one before (read just before the create).
#[tokio::test]
async fn the_epoch_is_the_markers_creation_second_on_the_servers_clock() {
    if !common::available() {
        return;
    }
    let chroot = common::unique_chroot();
    let backend = open(&chroot, Creation::IfMissing).await.unwrap();
    let epoch = backend.epoch().await.unwrap();
    let (_, stat) = client()
        .await
        .get_data(&format!("{chroot}/epoch"))
        .await
        .unwrap();
    let ctime = std::time::UNIX_EPOCH + Duration::from_millis(stat.ctime as u64);
    let created = leasehold::backend::epoch_at(ctime);
    assert!(
        epoch.epoch == created || epoch.epoch + 1 == created,
        "epoch {} for a marker created in second {created}",
        epoch.epoch
    );
    assert_eq!(backend.created_at_open(), Some(true));
    let again = open(&chroot, Creation::IfMissing).await.unwrap();
    assert_eq!(again.created_at_open(), Some(false));
    assert_eq!(again.epoch().await.unwrap().epoch, epoch.epoch);
    common::delete_store_now(&chroot).await;
}

/// A store whose marker names a protocol newer than this build's is
/// refused on opening, before anything is written (not even the clock
/// node the epoch's age is read with).
#[tokio::test]
async fn a_newer_protocol_is_refused_before_any_write() {
    if !common::available() {
        return;
    }
    let chroot = common::unique_chroot();
    let c = client().await;
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    c.create(&chroot, b"", &options).await.unwrap();
    let marker = br#"{"epoch":100,"max_ttl_ms":60000,"protocol":2}"#;
    c.create(&format!("{chroot}/epoch"), marker, &options)
        .await
        .unwrap();
    let err = open(&chroot, Creation::IfMissing).await.unwrap_err();
    assert!(matches!(err, Error::UnsupportedProtocol { .. }), "{err}");
    assert_eq!(
        c.check_stat(&format!("{chroot}/clock")).await.unwrap(),
        None
    );
    common::delete_store_now(&chroot).await;
}

/// Looking (`Creation::Never`) at a store that does not exist is
/// `NoStore`, and creates nothing; at one that does, it reads without
/// writing.
#[tokio::test]
async fn looking_never_creates_or_writes() {
    if !common::available() {
        return;
    }
    let chroot = common::unique_chroot();
    let err = open(&chroot, Creation::Never).await.unwrap_err();
    assert!(matches!(err, Error::NoStore { .. }), "{err}");
    let c = client().await;
    assert_eq!(c.check_stat(&chroot).await.unwrap(), None);

    let writer = open(&chroot, Creation::IfMissing).await.unwrap();
    let (_, clock_before) = c.get_data(&format!("{chroot}/clock")).await.unwrap();
    let looker = open(&chroot, Creation::Never).await.unwrap();
    let epoch = looker.epoch().await.unwrap();
    assert_eq!(epoch.epoch, writer.epoch().await.unwrap().epoch);
    assert_eq!(epoch.age, None, "a looker reads no server clock");
    let info = looker
        .inspect(&Key::new("nothing-here").unwrap())
        .await
        .unwrap();
    assert_eq!((info.fencing_token, info.holder), (0, None));
    // The writer's epoch() wrote the clock once; the looker never did.
    let (_, clock_after) = c.get_data(&format!("{chroot}/clock")).await.unwrap();
    assert_eq!(clock_after.version, clock_before.version + 1);
    common::delete_store_now(&chroot).await;
}

/// A store created with `Creation::NewProven` (`leasehold init --new`)
/// reports a proven epoch in every process; the same store created again
/// after its data was lost does not.
#[tokio::test]
async fn a_proven_store_is_proven_until_its_data_is_lost() {
    if !common::available() {
        return;
    }
    let chroot = common::unique_chroot();
    let creator = open(&chroot, Creation::NewProven).await.unwrap();
    assert!(creator.epoch_at_open().unwrap().is_proven());
    let other = open(&chroot, Creation::IfMissing).await.unwrap();
    assert!(other.epoch().await.unwrap().is_proven());
    common::delete_store_now(&chroot).await;
    // The creator's next epoch (its data lost) is not proven.
    let key = acquire_request("k", Duration::from_secs(2), None);
    let AcquireOutcome::OtherEpoch(epoch) = creator.try_acquire(&key).await.unwrap() else {
        panic!("a request naming no epoch was granted");
    };
    assert!(!epoch.is_proven(), "{epoch:?}");
    assert_eq!(current_epoch(&creator).await.epoch, epoch.epoch);
    common::delete_store_now(&chroot).await;
}

/// With `USER:PASSWORD@`, the backend authenticates with `digest` and its
/// nodes get the creator-only ACL: the same user takes and releases
/// leases; a client without the credentials is refused (not retryably),
/// and the password is never printed.
#[tokio::test]
async fn digest_credentials_make_the_store_the_users_own() {
    if !common::available() {
        return;
    }
    let chroot = common::unique_chroot();
    let with_user =
        |user: &str| common::url_for(&chroot).replacen("zk://", &format!("zk://{user}@"), 1);
    let url = with_user("app:S3CRET-pw");
    let backend = ZkBackend::from_url(&url).await.unwrap();
    assert!(!format!("{backend:?}").contains("S3CRET"));
    common::settled(&backend).await;
    let lease = raw_lease(&backend, "owned", Duration::from_secs(2)).await;
    backend.release(&lease).await.unwrap();
    let owner = zk::Client::connector()
        .with_auth("digest", b"app:S3CRET-pw")
        .connect(&common::endpoint())
        .await
        .unwrap();
    let (acls, _) = owner.get_acl(&format!("{chroot}/epoch")).await.unwrap();
    assert!(
        acls.iter()
            .all(|a| a.scheme() == "digest" && a.id().starts_with("app:")),
        "{acls:?}"
    );
    // Without credentials, or with another user's: refused.
    for url in [common::url_for(&chroot), with_user("other:pw")] {
        let err = ZkBackend::from_url(&url).await.unwrap_err();
        assert!(!err.is_retryable(), "{err}");
        assert!(err.to_string().contains("Permissions and ACLs"), "{err}");
        assert!(!err.to_string().contains("S3CRET"), "{err}");
    }
    // Clean up as the owner.
    let mut nodes = vec![chroot.clone()];
    let mut i = 0;
    while i < nodes.len() {
        let children = owner.list_children(&nodes[i]).await.unwrap_or_default();
        let parent = nodes[i].clone();
        nodes.extend(children.into_iter().map(|c| format!("{parent}/{c}")));
        i += 1;
    }
    for node in nodes.iter().rev() {
        owner.delete(node, None).await.unwrap();
    }
}

/// A release while our own last write (the grant or a renewal) still
/// stands is one version-checked write; once anyone else has written the
/// record (here a break, then another's grant), the release reads first
/// and ends as before: lost, and the other's lease untouched.
#[tokio::test]
async fn a_release_is_one_write_while_our_last_write_stands() {
    let Some(backend) = common::backend().await else {
        return;
    };
    let key = common::unique_key("release-once");
    let ttl = Duration::from_secs(2);
    let lease = raw_lease(&backend, &key, ttl).await;
    backend.renew(&lease).await.unwrap();
    let before = backend.requests_sent();
    backend.release(&lease).await.unwrap();
    assert_eq!(backend.requests_sent() - before, 1, "requests of a release");
    let k = Key::new(key.as_str()).unwrap();
    assert!(backend.inspect(&k).await.unwrap().holder.is_none());

    let stale = raw_lease(&backend, &key, ttl).await;
    let other = common::backend().await.unwrap();
    other.break_lease(&k).await.unwrap();
    let theirs = raw_lease(&other, &key, ttl).await;
    let err = backend.release(&stale).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let info = backend.inspect(&k).await.unwrap();
    assert_eq!(info.fencing_token, theirs.fencing_token);
    assert!(info.holder.is_some(), "the other's lease was released");
    other.release(&theirs).await.unwrap();
}

/// Keys new to the epoch, taken at once by many clients: each first
/// record's creation bumps the epoch folder's version, so all but one of
/// simultaneous creations fail their version check and read again. Every
/// one is still granted (a creation that lost to another key's is never
/// "held"; one that lost for a quarter of its TTL is a retryable error,
/// tried again here as a waiting acquire would), each with the epoch's
/// first token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_new_keys_at_once_are_all_granted() {
    let Some(first) = common::backend().await else {
        return;
    };
    let epoch = current_epoch(&first).await.epoch;
    let mut backends = vec![first];
    for _ in 1..8 {
        backends.push(common::backend().await.unwrap());
    }
    let backends: Vec<_> = backends.into_iter().map(std::sync::Arc::new).collect();
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let b = backends[i % backends.len()].clone();
            let key = common::unique_key(&format!("new-at-once-{i}"));
            tokio::spawn(async move {
                let req = acquire_request(&key, Duration::from_secs(2), Some(epoch));
                let started = Instant::now();
                loop {
                    match b.try_acquire(&req).await {
                        Err(e)
                            if e.is_retryable() && started.elapsed() < Duration::from_secs(30) => {}
                        other => return other,
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        match t.await.unwrap() {
            Ok(AcquireOutcome::Acquired(g)) => {
                assert_eq!(g.fencing_token, leasehold::backend::next_token(0, epoch))
            }
            other => panic!("a new key was not granted: {other:?}"),
        }
    }
}
