//! Real failovers, on a Sentinel set and a Redis Cluster of this test
//! binary's own (`scripts/redis-sentinel.sh` and `scripts/redis-cluster.sh`
//! on other ports, so the shared ones the conformance suite runs on are
//! never disturbed): a holder whose grant the promoted replica has keeps
//! working (its renewals go to the new primary), nobody else gets its key
//! meanwhile, a waiter elsewhere is still woken by a release (pub/sub
//! follows the primary), and the next token is above the holder's. A
//! failover that lost the grant (replication cut before it, by hand): the
//! holder is told lost before anyone else gets its key, and the next token
//! is above its own (on two bare servers too: `backend.rs`,
//! `failover_to_a_lagging_replica_starts_a_new_epoch`).

mod common;

use std::time::Duration;

use common::{Redis, PRIVATE_PASSWORD, REPO};
use leasehold::{LeaseGuard, Store};
use leasehold_redis::redis;
use leasehold_test_servers::store::ServerStore;
use leasehold_test_servers::suite::quick_polls;
use leasehold_test_servers::{installed, unique_name, ScriptServer};

const SENTINEL_PORT: u16 = 26390;
const SENTINEL_DATA_PORT: u16 = 63814;
/// The lost-grant test's own set (the tests of a binary run side by side).
const LOST_SENTINEL_PORT: u16 = 26395;
const LOST_DATA_PORT: u16 = 63818;
const CLUSTER_PORT: u16 = 63840;
const CLUSTER_BUS_PORT: u16 = 63850;
const LOST_CLUSTER_PORT: u16 = 63880;
const LOST_CLUSTER_BUS_PORT: u16 = 63890;
/// The holder's TTL: longer than the outage a crash-and-promote takes
/// (about 2.5 s with the set-up's `down-after-milliseconds` 1000).
const TTL: Duration = Duration::from_secs(8);
const MAX_TTL: &str = "10s";

async fn start(script: &str, port: u16, more: Vec<(&'static str, String)>) -> Option<ScriptServer> {
    let var = match script {
        "redis-sentinel" => "LEASEHOLD_REDIS_SENTINEL_PORT",
        _ => "LEASEHOLD_REDIS_CLUSTER_PORT",
    };
    let password = match script {
        "redis-sentinel" => "LEASEHOLD_REDIS_SENTINEL_PASSWORD",
        _ => "LEASEHOLD_REDIS_CLUSTER_PASSWORD",
    };
    ScriptServer::start(
        REPO,
        script,
        installed("redis-server"),
        "redis-server",
        port,
        move |port, _| {
            let mut env = vec![
                (var, port.to_string()),
                (password, PRIVATE_PASSWORD.to_string()),
            ];
            env.extend(more);
            env
        },
    )
    .await
}

/// A Sentinel set of the test's own (sentinels from `port`, data nodes
/// from `data_port`) and a store URL on it with a prefix named after
/// `name`; `None` (skipped) without Redis.
async fn sentinel_set(port: u16, data_port: u16, name: &str) -> Option<(ScriptServer, String)> {
    let set = start(
        "redis-sentinel",
        port,
        vec![("LEASEHOLD_REDIS_SENTINEL_DATA_PORT", data_port.to_string())],
    )
    .await?;
    let p = set.port;
    let url = format!(
        "redis+sentinel://:{PRIVATE_PASSWORD}@127.0.0.1:{p},127.0.0.1:{},127.0.0.1:{}/leasehold/0?prefix={}:&max_ttl={MAX_TTL}",
        p + 1,
        p + 2,
        unique_name(name)
    );
    Some((set, url))
}

/// A holder's store and another process's, on `url` (a store of the test's
/// own), both out of quarantine.
async fn two_processes(url: &str) -> (Store, Store) {
    let a = Redis::private_backend(url).await;
    common::settled(&a).await;
    let b = Redis::private_backend(url).await;
    b.listening().await;
    (
        leasehold_testkit::test_store(a),
        leasehold_testkit::test_store(b),
    )
}

/// Waits (at most `within`) until `guard` has been renewed twice more: the
/// second renewal was sent after this call began.
async fn renewed_twice(guard: &LeaseGuard, within: Duration) {
    let mut deadline = guard.deadline_watch();
    deadline.borrow_and_update();
    let twice = async {
        for _ in 0..2 {
            deadline
                .changed()
                .await
                .expect("the guard's deadline watch");
        }
    };
    tokio::time::timeout(within, twice)
        .await
        .expect("the holder was not renewed twice after the failover");
    assert!(!guard.is_lost(), "the holder lost its lease");
}

/// What every failover test checks once the store's primary has changed
/// under `holder`'s lease on `key`.
async fn after_failover(holder: &Store, other: &Store, guard: LeaseGuard, key: &str) {
    renewed_twice(&guard, TTL * 3).await;
    // Another process is refused (held, or in quarantine), not merely
    // cut off from the old primary.
    let lock = other.lock_with(key, quick_polls(TTL)).unwrap();
    loop {
        match lock.try_acquire().await {
            Ok(g) => panic!("another process got the held key: {g:?}"),
            Err(e) if matches!(e, leasehold::Error::Backend { .. }) && e.is_retryable() => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(_) => break,
        }
    }
    // Once the new epoch's quarantine is over for the other process, a
    // release by the holder wakes it long before its next poll.
    let backend = other.backend().clone();
    loop {
        let e = leasehold_testkit::conformance::current_epoch(backend.as_ref()).await;
        let full = other.confirmation_window() + Duration::from_millis(100);
        match e.age {
            Some(age) if age >= full => break,
            Some(age) => tokio::time::sleep(full - age).await,
            None => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let handoff = leasehold_testkit::conformance::wake_up_handoff(holder.clone(), other.clone())
        .await
        .expect("a waiter elsewhere was not woken by a release after the failover");
    assert!(handoff < Duration::from_secs(5), "{handoff:?}");
    let token = guard.fencing_token();
    guard
        .release()
        .await
        .expect("the holder's release after the failover");
    let next = leasehold_testkit::conformance::take(other, key, quick_polls(TTL)).await;
    assert!(
        next.fencing_token() > token,
        "{} after {token}",
        next.fencing_token()
    );
}

/// The primary crashes (`SIGSTOP`: it neither answers nor takes writes);
/// the sentinels promote the replica, which has the holder's grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_after_a_crash_keeps_the_holder() {
    let Some((set, url)) = sentinel_set(SENTINEL_PORT, SENTINEL_DATA_PORT, "failover").await else {
        return;
    };
    let (holder, other) = two_processes(&url).await;
    let key = unique_name("kept/");
    let guard = leasehold_testkit::conformance::take(&holder, &key, quick_polls(TTL)).await;

    // The replica has the grant (and its renewal) before the crash.
    let primary = format!("redis://:{PRIVATE_PASSWORD}@127.0.0.1:{SENTINEL_DATA_PORT}/0");
    let acked: i64 = common::admin(&primary, redis::cmd("WAIT").arg(1).arg(5000)).await;
    assert_eq!(acked, 1);
    let pid = pid_of(&primary).await;
    signal("STOP", &pid);
    let result = tokio::time::timeout(Duration::from_secs(60), async {
        promoted(&set, SENTINEL_DATA_PORT).await;
        after_failover(&holder, &other, guard, &key).await;
    })
    .await;
    signal("CONT", &pid);
    result.expect("the failover test took over a minute");
}

/// The sentinels promote a replica that never got the holder's grant:
/// replication is cut just before it (the replica frozen, its link closed
/// by the primary, which then has no replica to send the grant to), and
/// the primary freezes just after it. The holder must be told lost (its
/// renewal refused by the new primary, or its deadline passed) before
/// another process gets its key, and that process's token must be above
/// the holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_that_lost_the_grant_stops_the_holder_first() {
    let Some((set, url)) = sentinel_set(LOST_SENTINEL_PORT, LOST_DATA_PORT, "lost").await else {
        return;
    };
    let (holder, other) = two_processes(&url).await;
    let key = unique_name("lost/");
    let data = |port: u16| format!("redis://:{PRIVATE_PASSWORD}@127.0.0.1:{port}/0");
    let (guard, frozen) = grant_lost_to_the_replica(
        &holder,
        &key,
        &data(LOST_DATA_PORT),
        &data(LOST_DATA_PORT + 1),
    )
    .await;
    let result = tokio::time::timeout(Duration::from_secs(60), async {
        promoted(&set, LOST_DATA_PORT).await;
        stopped_before_takeover(&other, guard, &key).await;
    })
    .await;
    signal("CONT", &frozen);
    result.expect("the failover test took over a minute");
}

/// Takes `key` for `holder` on `primary` while its `replica` cannot get the
/// grant (frozen, its link closed by the primary, which then has no
/// replica to send the grant to), then freezes the primary and thaws the
/// replica: a promotion now loses the grant. Returns the guard and the
/// frozen primary's pid (to thaw at the end).
async fn grant_lost_to_the_replica(
    holder: &Store,
    key: &str,
    primary: &str,
    replica: &str,
) -> (LeaseGuard, String) {
    let (primary_pid, replica_pid) = (pid_of(primary).await, pid_of(replica).await);
    signal("STOP", &replica_pid);
    let cut: i64 = common::admin(
        primary,
        redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica"),
    )
    .await;
    let guard = leasehold_testkit::conformance::take(holder, key, quick_polls(TTL)).await;
    signal("STOP", &primary_pid);
    signal("CONT", &replica_pid);
    assert_eq!(cut, 1, "the primary had one replica to cut off");
    (guard, primary_pid)
}

/// After a failover that lost `guard`'s grant: another process asks for
/// `key` until it gets it; by then the holder must have been told lost,
/// and the new token must be above the holder's.
async fn stopped_before_takeover(other: &Store, guard: LeaseGuard, key: &str) {
    let token = guard.fencing_token();
    let lost_at = {
        let lost = guard.lost_token();
        tokio::spawn(async move {
            lost.cancelled().await;
            tokio::time::Instant::now()
        })
    };
    let lock = other.lock_with(key, quick_polls(TTL)).unwrap();
    let next = loop {
        match lock.try_acquire().await {
            Ok(g) => break g,
            // Refused meanwhile: the new epoch's quarantine, or errors
            // while the primary moves. (Had the replica the grant, the
            // holder would keep it, renewed, and this would go on until
            // the test's minute.)
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("another process's attempt: {e}"),
        }
    };
    let granted_at = tokio::time::Instant::now();
    assert!(
        guard.is_lost(),
        "another process got the key while its holder, whose grant the failover lost, still held it"
    );
    assert!(lost_at.await.unwrap() <= granted_at);
    assert!(
        next.fencing_token() > token,
        "{} after {token}",
        next.fencing_token()
    );
}

/// A cluster shard's coordinated failover (`CLUSTER FAILOVER` on the
/// replica of the primary that serves the store's slot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_shard_failover_keeps_the_holder() {
    let Some(cluster) = start(
        "redis-cluster",
        CLUSTER_PORT,
        vec![(
            "LEASEHOLD_REDIS_CLUSTER_BUS_PORT",
            CLUSTER_BUS_PORT.to_string(),
        )],
    )
    .await
    else {
        return;
    };
    let p = cluster.port;
    let prefix = format!("{}:", unique_name("failover"));
    let url = format!(
        "redis+cluster://:{PRIVATE_PASSWORD}@127.0.0.1:{p},127.0.0.1:{}?prefix={prefix}&max_ttl={MAX_TTL}",
        p + 1
    );
    let (holder, other) = two_processes(&url).await;
    let key = unique_name("kept/");
    let guard = leasehold_testkit::conformance::take(&holder, &key, quick_polls(TTL)).await;
    // The store's slot is its prefix's: `{prefix}`.
    let marker = format!("{{{prefix}}}#epoch");
    tokio::time::timeout(Duration::from_secs(60), async {
        cluster.script_with("failover", &[&marker]).await;
        after_failover(&holder, &other, guard, &key).await;
    })
    .await
    .expect("the failover test took over a minute");
}

/// A cluster shard's failover that lost the holder's grant: replication
/// cut by hand as in the Sentinel test, the shard's primary frozen, then
/// `CLUSTER FAILOVER TAKEOVER` on its replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_shard_failover_that_lost_the_grant_stops_the_holder_first() {
    let Some(cluster) = start(
        "redis-cluster",
        LOST_CLUSTER_PORT,
        vec![(
            "LEASEHOLD_REDIS_CLUSTER_BUS_PORT",
            LOST_CLUSTER_BUS_PORT.to_string(),
        )],
    )
    .await
    else {
        return;
    };
    let p = cluster.port;
    let prefix = format!("{}:", unique_name("lost"));
    let url = format!(
        "redis+cluster://:{PRIVATE_PASSWORD}@127.0.0.1:{p},127.0.0.1:{}?prefix={prefix}&max_ttl={MAX_TTL}",
        p + 1
    );
    let (holder, other) = two_processes(&url).await;
    let key = unique_name("lost/");
    let node = |port: u16| format!("redis://:{PRIVATE_PASSWORD}@127.0.0.1:{port}/0");
    let (primary, replica) = shard_of(&node(p), &format!("{{{prefix}}}#epoch")).await;
    let (guard, frozen) =
        grant_lost_to_the_replica(&holder, &key, &node(primary), &node(replica)).await;
    let result = tokio::time::timeout(Duration::from_secs(60), async {
        let answer: String = common::admin(
            &node(replica),
            redis::cmd("CLUSTER").arg("FAILOVER").arg("TAKEOVER"),
        )
        .await;
        assert_eq!(answer, "OK");
        stopped_before_takeover(&other, guard, &key).await;
    })
    .await;
    signal("CONT", &frozen);
    result.expect("the failover test took over a minute");
}

/// The ports of the primary that serves `key`'s slot and of its replica,
/// by `CLUSTER NODES` on the node at `any`.
async fn shard_of(any: &str, key: &str) -> (u16, u16) {
    let slot: u16 = common::admin(any, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)).await;
    let nodes: String = common::admin(any, redis::cmd("CLUSTER").arg("NODES")).await;
    let nodes: Vec<Vec<&str>> = nodes
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    // "ID HOST:PORT@BUS FLAGS PRIMARY-ID PING PONG EPOCH LINK SLOTS..."
    let port = |addr: &str| -> u16 {
        let host_port = addr.split('@').next().unwrap();
        host_port.rsplit(':').next().unwrap().parse().unwrap()
    };
    let serves = |range: &str| match range.split_once('-') {
        Some((a, b)) => {
            a.parse::<u16>().is_ok_and(|a| a <= slot) && b.parse::<u16>().is_ok_and(|b| slot <= b)
        }
        None => range.parse::<u16>() == Ok(slot),
    };
    let primary = nodes
        .iter()
        .find(|f| f[2].contains("master") && f[8..].iter().any(|r| serves(r)))
        .unwrap_or_else(|| panic!("no primary serves slot {slot}"));
    let replica = nodes
        .iter()
        .find(|f| f[3] == primary[0])
        .unwrap_or_else(|| panic!("the primary of slot {slot} has no replica"));
    (port(primary[1]), port(replica[1]))
}

/// The process id of the Redis server at `url`.
async fn pid_of(url: &str) -> String {
    let info: String = common::admin(url, redis::cmd("INFO").arg("server")).await;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .unwrap()
        .trim()
        .to_string()
}

/// Sends `SIG{name}` to `pid`.
fn signal(name: &str, pid: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid)
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{name} {pid}");
}

/// Waits until the sentinels name a primary other than the one on
/// `old_port`.
async fn promoted(set: &ScriptServer, old_port: u16) {
    loop {
        let now = set.output("primary").await;
        if !now.trim().ends_with(&format!(":{old_port}")) && !now.trim().is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
