//! The raw etcd loop: leasehold's compare-and-put and compare-and-delete
//! `Txn`s on a session lease.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{anyhow, Context};

use super::key::{unix_ms, RAW_KEY};

/// The `host:port` endpoints of an `etcd://[USER:PASSWORD@]HOST:PORT[,...][?...]`
/// store URL (the bench's servers have no auth and no TLS).
pub fn etcd_endpoints(url: &str) -> anyhow::Result<Vec<String>> {
    let rest = url
        .strip_prefix("etcd://")
        .ok_or_else(|| anyhow!("expected an etcd:// URL, not {url:?}"))?;
    let hosts = rest.split(['?', '/']).next().unwrap_or(rest);
    let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, h)| h);
    Ok(hosts.split(',').map(str::to_string).collect())
}

/// The raw etcd loop's session and what it last wrote.
pub struct EtcdRaw {
    /// Its etcd lease of 30 s, and when it was granted.
    session: i64,
    fresh: std::time::Instant,
    marker: Vec<u8>,
    /// The key's record as last written (`None`: none yet).
    record: Option<Vec<u8>>,
    epoch: u64,
    last: u64,
}

impl EtcdRaw {
    /// Reads the marker and the raw key's record, and grants the session.
    pub async fn start(
        client: &leasehold_etcd::grpc::Connection,
        prefix: &str,
    ) -> anyhow::Result<Self> {
        let (marker, fresh) = (format!("{prefix}epoch"), format!("{prefix}epoch-fresh"));
        let (rk, hk) = (
            format!("{prefix}k/{RAW_KEY}"),
            format!("{prefix}h/{RAW_KEY}"),
        );
        let snap = etcd_read(client, [&marker, &fresh, &rk, &hk]).await?;
        let [Some(marker_kv), _, record, None] = snap else {
            return Err(anyhow!("raw etcd: no store marker, or the key is held"));
        };
        let m: serde_json::Value = serde_json::from_slice(&marker_kv.value)?;
        let epoch = m["epoch"].as_u64().ok_or_else(|| anyhow!("bad marker"))?;
        let last = match &record {
            Some(kv) => serde_json::from_slice::<serde_json::Value>(&kv.value)?["token"]
                .as_u64()
                .unwrap_or(0),
            None => 0,
        };
        let (session, fresh) = etcd_session(client).await?;
        Ok(EtcdRaw {
            session,
            fresh,
            marker: marker_kv.value,
            record: record.map(|kv| kv.value),
            epoch,
            last,
        })
    }
}

/// A new session for the raw loop: an etcd lease of 30 s, and when its
/// grant was sent.
async fn etcd_session(
    client: &leasehold_etcd::grpc::Connection,
) -> anyhow::Result<(i64, std::time::Instant)> {
    use leasehold_etcd::grpc::etcdserverpb::LeaseGrantRequest;
    let sent = std::time::Instant::now();
    let id = client
        .lease()
        .lease_grant(LeaseGrantRequest { ttl: 30, id: 0 })
        .await
        .context("raw etcd grant")?
        .into_inner()
        .id;
    Ok((id, sent))
}

/// leasehold's etcd requests for a free key this process used last (see
/// `crates/leasehold-etcd`: the crate docs' protocol and `backend.rs`),
/// with values of the same shape: the `Txn` that compares the marker's and
/// the record's values with those last seen and the holder key's absence,
/// and puts the holder key (on the session's etcd lease) and the record
/// with the next token; the `Txn` that deletes the holder key if it still
/// has our value. A new session is granted as leasehold grants one, when
/// less than 95 % of its 30 s would be left.
pub async fn etcd_cycle(
    client: &leasehold_etcd::grpc::Connection,
    prefix: &str,
    state: &mut EtcdRaw,
    requests: &AtomicU64,
) -> anyhow::Result<()> {
    use leasehold_etcd::grpc::{self, etcdserverpb::*};
    let (marker, rk, hk) = (
        format!("{prefix}epoch"),
        format!("{prefix}k/{RAW_KEY}"),
        format!("{prefix}h/{RAW_KEY}"),
    );
    if state.fresh.elapsed() > Duration::from_millis(1500) {
        (state.session, state.fresh) = etcd_session(client).await?;
        requests.fetch_add(1, Ordering::Relaxed);
    }
    let lease_id = uuid::Uuid::new_v4().to_string();
    let token = leasehold::backend::next_token(state.last, state.epoch);
    let holder = serde_json::to_vec(&serde_json::json!({
        "lease_id": lease_id,
        "token": token,
        "epoch": state.epoch,
        "ttl_ms": 30_000,
        "host": "host",
        "pid": std::process::id(),
        "acquired_at_ms": unix_ms(),
    }))?;
    let record = serde_json::to_vec(
        &serde_json::json!({ "token": token, "epoch": state.epoch, "last_run_token": 0 }),
    )?;
    let txn = TxnRequest {
        compare: vec![
            grpc::value_is(marker, state.marker.clone()),
            match &state.record {
                Some(bytes) => grpc::value_is(rk.clone(), bytes.clone()),
                None => grpc::created_at(rk.clone(), 0),
            },
            grpc::created_at(hk.clone(), 0),
        ],
        success: vec![
            grpc::put(hk.clone(), holder.clone(), state.session),
            grpc::put(rk.clone(), record.clone(), 0),
        ],
        failure: vec![grpc::get(rk.clone()), grpc::get(hk.clone())],
    };
    if !send(client, txn, requests, "raw etcd acquire").await? {
        return Err(anyhow!("raw etcd acquire granted nothing"));
    }
    state.record = Some(record);
    state.last = token;

    let txn = TxnRequest {
        compare: vec![grpc::value_is(hk.clone(), holder)],
        success: vec![grpc::delete(hk)],
        failure: Vec::new(),
    };
    if !send(client, txn, requests, "raw etcd release").await? {
        return Err(anyhow!("raw etcd release: the key is not ours"));
    }
    Ok(())
}

/// Sends `txn`, counting it in `requests`; whether it succeeded.
async fn send(
    client: &leasehold_etcd::grpc::Connection,
    txn: leasehold_etcd::grpc::etcdserverpb::TxnRequest,
    requests: &AtomicU64,
    what: &'static str,
) -> anyhow::Result<bool> {
    let resp = client.kv().txn(txn).await.context(what)?.into_inner();
    requests.fetch_add(1, Ordering::Relaxed);
    Ok(resp.succeeded)
}

/// One `Txn` of `Range` requests: the keys' values at one revision.
async fn etcd_read(
    client: &leasehold_etcd::grpc::Connection,
    keys: [&String; 4],
) -> anyhow::Result<[Option<leasehold_etcd::grpc::mvccpb::KeyValue>; 4]> {
    use leasehold_etcd::grpc;
    let txn = grpc::etcdserverpb::TxnRequest {
        success: keys.map(|k| grpc::get(k.as_str())).to_vec(),
        ..Default::default()
    };
    let resp = client
        .kv()
        .txn(txn)
        .await
        .context("raw etcd read")?
        .into_inner();
    let mut kvs = resp
        .responses
        .into_iter()
        .map(|r| grpc::range_kvs(r).into_iter().next());
    Ok(std::array::from_fn(|_| kvs.next().flatten()))
}
