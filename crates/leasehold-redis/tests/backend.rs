//! The Redis backend's own tests against real servers: connection loss,
//! failover to a replica, expiry by the server's clock, records deleted by
//! hand, eviction policies, and secrets kept out of messages. (Restarts:
//! `restart.rs`; FLUSHALL: `store_loss.rs`.)

mod common;

use std::time::Duration;

use common::{PrivateServer, Redis};
use leasehold::backend::{AcquireOutcome, Backend};
use leasehold_redis::{redis, RedisBackendBuilder};
use leasehold_test_servers::suite::{self, ServerExpiry};

/// Every client connection killed by the server (`CLIENT KILL`, as an
/// administrator or a proxy restart would): the holder's next renewals
/// reconnect, it keeps its lease past its TTL, and nobody else gets it
/// meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_survives_its_connections_being_killed() {
    let Some(server) = PrivateServer::start(false).await else {
        return;
    };
    let backend = server.backend().await;
    common::settled(&backend).await;
    let store = leasehold_testkit::test_store(backend);
    let other = leasehold_testkit::test_store(server.backend().await);
    suite::holder_survives_lost_connections(store, other, Duration::from_secs(2), 1, || async {
        let killed: i64 = server
            .admin(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal"))
            .await;
        assert!(killed >= 2, "only {killed} connections were killed");
    })
    .await;
}

/// Failover to a replica that has the epoch marker but missed the last
/// grant: the promoted replica is another server process, so it starts a
/// new epoch (above the old one); the holder's renewal there is refused,
/// and the next token is above every token the old primary issued, the
/// one the replica never saw included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_to_a_lagging_replica_starts_a_new_epoch() {
    let Some(primary) = PrivateServer::start(false).await else {
        return;
    };
    let replica = PrivateServer::start(false).await.unwrap();
    replica.replicate_from(&primary).await;
    let a = primary.backend().await;
    let before = a.epoch().await.unwrap();
    let ttl = Duration::from_secs(4);
    let key = common::unique_key("failover");
    let replicated = leasehold_testkit::conformance::raw_lease(&a, &key, ttl).await;
    primary.replicated().await;
    // The replica stops replicating (a partition), then the primary grants
    // once more: a write the replica never gets.
    replica.promote().await;
    a.release(&replicated).await.unwrap();
    let unseen = leasehold_testkit::conformance::raw_lease(&a, &key, ttl).await;
    assert!(unseen.fencing_token > replicated.fencing_token);

    // Clients now reach the promoted replica.
    let b = replica.backend().await;
    let err = b.renew(&unseen).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let after = b.epoch().await.unwrap();
    // Above the token the old primary granted.
    let (epochs, wait) = ((&before, &after), common::MAX_TTL * 3);
    let above = unseen.fencing_token;
    suite::new_epoch_grants_above(b, &key, epochs, ttl, wait, above).await;
}

/// Failover to a replica that has the grant: the promoted replica starts a
/// new epoch that carries the leases it has. The holder's renewals there
/// succeed (it keeps working), nobody else is granted its key while it
/// holds it, its release is not a loss, and the next token is above its.
/// Without the carry (every new server process voiding every lease), the
/// renewal is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_to_a_replica_that_has_the_grant_keeps_its_holder() {
    let Some(primary) = PrivateServer::start(false).await else {
        return;
    };
    let replica = PrivateServer::start(false).await.unwrap();
    replica.replicate_from(&primary).await;
    let a = primary.backend().await;
    let before = a.epoch().await.unwrap();
    let ttl = common::MAX_TTL;
    let key = common::unique_key("carried");
    let held = leasehold_testkit::conformance::raw_lease(&a, &key, ttl).await;
    a.renew(&held).await.unwrap();
    primary.replicated().await;

    // The replica is promoted; clients now reach it.
    replica.promote().await;
    let b = replica.backend().await;
    let after = b.epoch().await.unwrap();
    assert!(after.epoch > before.epoch, "a promotion starts a new epoch");
    let marker = format!("{}#epoch", leasehold_redis::DEFAULT_PREFIX);
    let protocol: String = replica
        .admin(redis::cmd("HGET").arg(&marker).arg("protocol"))
        .await;
    assert_eq!(
        protocol, "2",
        "an epoch that carries leases is protocol 2 (earlier builds refuse it)"
    );
    b.renew(&held)
        .await
        .expect("the holder's renewal on the promoted replica that has its grant");
    let req = leasehold_testkit::conformance::acquire_request(&key, ttl, Some(after.epoch));
    match b.try_acquire(&req).await.unwrap() {
        AcquireOutcome::Held(_) => {}
        other => panic!("the carried lease's key must stay held: {other:?}"),
    }
    let info = b.inspect(&held.key).await.unwrap();
    assert!(info.holder.is_some(), "inspect shows the carried holder");
    b.release(&held)
        .await
        .expect("releasing a carried lease is no loss");
    let next = leasehold_testkit::conformance::raw_lease(&b, &key, ttl).await;
    assert!(next.fencing_token > held.fencing_token);
    assert_eq!(next.epoch, after.epoch);

    // A second promotion (back to the old primary, after it resynchronised
    // from the new one) carries the chain: the lease of the new epoch is
    // renewed there too.
    primary.replicate_from(&replica).await;
    replica.replicated().await;
    primary.promote().await;
    let c = primary.backend().await;
    assert!(c.epoch().await.unwrap().epoch > after.epoch);
    c.renew(&next)
        .await
        .expect("the lease survives a failback that kept it");
}

/// Expiry is decided by the server's clock alone: a lease whose expiry
/// the server finds past is free at once, whatever the TTL the client
/// asked for; one the server finds in the future stays held past its TTL
/// by any client's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_is_decided_by_the_server_clock() {
    let Some(a) = common::backend().await else {
        return;
    };
    let b = common::backend().await.unwrap();
    let record = |key: &str| format!("{}k:{key}", common::prefix());
    let server_ms = || async {
        let (s, us): (i64, i64) = common::admin(&common::url(), &redis::cmd("TIME")).await;
        s * 1000 + us / 1000
    };
    suite::expiry_is_decided_by_the_server_clock(a, b, |key, when| async move {
        let expires_ms = match when {
            ServerExpiry::JustPast => server_ms().await - 1,
            ServerExpiry::InAnHour => server_ms().await + 3_600_000,
        };
        let _: () = common::admin(
            &common::url(),
            redis::cmd("HSET")
                .arg(record(&key))
                .arg("expires_ms")
                .arg(expires_ms),
        )
        .await;
    })
    .await;
}

/// A key's record deleted by hand (or evicted): its next token is still
/// above every token the store issued, not the epoch's first again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_record_never_repeats_a_token() {
    let Some(a) = common::backend().await else {
        return;
    };
    let key = common::unique_key("deleted");
    let first = leasehold_testkit::conformance::raw_lease(&a, &key, Duration::from_secs(2)).await;
    a.release(&first).await.unwrap();
    let _: i64 = common::admin(
        &common::url(),
        redis::cmd("DEL").arg(format!("{}k:{key}", common::prefix())),
    )
    .await;
    let second = leasehold_testkit::conformance::raw_lease(&a, &key, Duration::from_secs(2)).await;
    assert!(
        second.fencing_token > first.fencing_token,
        "{} after {}",
        second.fencing_token,
        first.fencing_token
    );
    a.release(&second).await.unwrap();
}

/// A server that may evict any key under memory pressure could drop a
/// lease record or the epoch marker: the backend refuses to open on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_that_evicts_any_key_is_refused() {
    let Some(server) = PrivateServer::start(false).await else {
        return;
    };
    let _: () = server
        .admin(
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-policy")
                .arg("allkeys-lru"),
        )
        .await;
    let err = RedisBackendBuilder::from_url(&server.url())
        .unwrap()
        .build()
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains("allkeys-lru"), "{err}");
    let _: () = server
        .admin(
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-policy")
                .arg("volatile-lru"),
        )
        .await;
    server.backend().await;
}

/// A marker of a protocol above the highest this build reads (2, the
/// epochs that carry leases) is refused before anything is written, and
/// the refusal names protocol 2, not the core's 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_of_a_newer_protocol_is_refused_naming_protocol_2() {
    let Some(server) = PrivateServer::start(false).await else {
        return;
    };
    let a = server.settled_store().await;
    let key = common::unique_key("protocol");
    let options = leasehold::LockOptions::new().ttl(common::MAX_TTL);
    leasehold_testkit::conformance::take(&a, &key, options.clone())
        .await
        .release()
        .await
        .unwrap();
    let marker = format!("{}#epoch", leasehold_redis::DEFAULT_PREFIX);
    let _: i64 = server
        .admin(redis::cmd("HSET").arg(&marker).arg("protocol").arg("3"))
        .await;
    let err = a
        .lock_with(&key, options)
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    match &err {
        leasehold::Error::UnsupportedProtocol {
            backend: "redis",
            found,
            supported: 2,
            ..
        } if found == "3" => {}
        other => panic!("expected a refusal of protocol 3, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("speaks protocol 2 and older"), "{text}");
}

/// A request naming an epoch other than the store's is refused without a
/// grant, and the answer names the store's epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_only_in_the_epoch_asked_for() {
    let Some(a) = common::backend().await else {
        return;
    };
    let epoch = a.epoch().await.unwrap();
    let key = common::unique_key("epoch");
    let stale = Some(epoch.epoch - 1);
    let req = leasehold_testkit::conformance::acquire_request(&key, Duration::from_secs(2), stale);
    match a.try_acquire(&req).await.unwrap() {
        AcquireOutcome::OtherEpoch(e) => assert_eq!(e.epoch, epoch.epoch),
        other => panic!("granted in another epoch: {other:?}"),
    }
    assert_eq!(a.inspect(&req.key).await.unwrap().fencing_token, 0);
}

/// The password shows nowhere: not in the builder's or the backend's
/// `Debug`, not in the error of a refused login, not in URL errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_is_never_printed() {
    let Some(backend) = common::backend().await else {
        return;
    };
    let url = common::url_for(common::prefix());
    let (err, password) =
        suite::password_is_never_printed::<Redis>(&backend, &url, "&wake_ups=nope").await;
    let shown = format!("{err} {err:?}");
    assert!(!err.is_retryable(), "{shown}");
    assert!(
        shown.contains("WRONGPASS") || shown.to_lowercase().contains("password"),
        "{shown}"
    );
    // No password at all: refused when opening, not at the first lease.
    let no_password = url.replacen(&format!(":{password}@"), "", 1);
    let err = RedisBackendBuilder::from_url(&no_password)
        .unwrap()
        .build()
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains("NOAUTH"), "{err}");
    assert!(err.to_string().contains("during open"), "{err}");
}

/// Nothing listening at the address: a retryable error, quickly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_a_retryable_error() {
    let err = suite::unreachable_server_fails_retryably::<Redis>(
        |port| format!("redis://:pw-xyz-123@127.0.0.1:{port}"),
        Duration::from_secs(10),
    )
    .await;
    assert!(!err.to_string().contains("pw-xyz-123"), "{err}");
}
