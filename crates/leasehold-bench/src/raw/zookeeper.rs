//! The raw ZooKeeper loop: leasehold's requests for an uncontended acquire
//! and release (a read of the key's record and a write conditional on its
//! version; a write conditional on the version of that write), sent on a
//! session of its own.

use anyhow::{anyhow, Context};
use leasehold_zookeeper::zookeeper_client as zk;
use serde_json::{json, Value};

use super::key::unix_ms;

/// The `HOST:PORT,...` of a `zk://[USER:PASSWORD@]HOST:PORT[,...][/CHROOT][?...]`
/// store URL (the bench's server has no auth).
pub fn zk_hosts(url: &str) -> anyhow::Result<String> {
    let rest = url
        .strip_prefix("zk://")
        .ok_or_else(|| anyhow!("expected a zk:// URL, not {url:?}"))?;
    let hosts = rest.split(['?', '/']).next().unwrap_or(rest);
    Ok(hosts.rsplit_once('@').map_or(hosts, |(_, h)| h).to_string())
}

/// The raw loop's session and the record it takes.
pub struct ZkRaw {
    /// Its own session.
    pub client: zk::Client,
    /// The raw key's record node.
    pub path: String,
    /// The store's epoch.
    pub epoch: u64,
}

/// One cycle, as leasehold-zookeeper sends it (see its crate docs'
/// protocol): read the record, write it held with the next token
/// conditional on the version read; write it free with `released_by`
/// conditional on the version that write got (leasehold's remembered last
/// write). Three requests; records of leasehold's layout (JSON), so that
/// both encode and decode as much.
pub async fn zk_cycle(raw: &ZkRaw) -> anyhow::Result<()> {
    let lease_id = uuid::Uuid::new_v4().to_string();
    let (bytes, stat) = raw
        .client
        .get_data(&raw.path)
        .await
        .context("raw ZooKeeper read")?;
    let mut record: Value = serde_json::from_slice(&bytes)?;
    if record.get("lease").is_some() {
        return Err(anyhow!("raw ZooKeeper acquire: the key is held"));
    }
    let fence = record["fence"].as_u64().unwrap_or(0);
    let now = unix_ms();
    record["fence"] = json!(leasehold::backend::next_token(fence, raw.epoch));
    record["lease"] = json!({
        "id": lease_id,
        "owner": { "host": "host", "pid": std::process::id(), "label": null },
        "ttl_ms": 30_000,
        "acquired_ms": now,
        "renewed_ms": now,
    });
    if let Some(o) = record.as_object_mut() {
        o.remove("released_by");
    }
    let stat = raw
        .client
        .set_data(&raw.path, &serde_json::to_vec(&record)?, Some(stat.version))
        .await
        .context("raw ZooKeeper acquire")?;

    if let Some(o) = record.as_object_mut() {
        o.remove("lease");
        o.insert("released_by".into(), json!(lease_id));
    }
    raw.client
        .set_data(&raw.path, &serde_json::to_vec(&record)?, Some(stat.version))
        .await
        .context("raw ZooKeeper release")?;
    Ok(())
}
