//! Where the store's server is (one server, the primary Sentinel names, or
//! a Redis Cluster), how a store URL names it, and the connection each
//! gives. Everything above this module sends scripts on a [`Conn`] and asks
//! a [`Connector`] for a new one when the old one stops answering.

use std::sync::Arc;

use leasehold::{Error, Result};
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::SentinelClient;
use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};

/// Sentinels listen here unless the URL says otherwise.
pub(crate) const SENTINEL_PORT: u16 = 26379;

/// The servers a store URL names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One server (`redis://`, `rediss://`): a standalone server or the
    /// address of a primary.
    Single,
    /// The primary the sentinels at `sentinels` name `master`
    /// (`redis+sentinel://`, `rediss+sentinel://`).
    Sentinel {
        sentinels: Vec<ConnectionAddr>,
        master: String,
    },
    /// A Redis Cluster reached first through `nodes`
    /// (`redis+cluster://`, `rediss+cluster://`).
    Cluster { nodes: Vec<ConnectionAddr> },
}

/// What a multi-host URL (`redis+sentinel://`, `redis+cluster://`) says:
/// the servers, and the data nodes' settings (user, password, database)
/// as redis-rs parses them from a one-host URL of the same authority.
pub(crate) struct MultiHost {
    pub(crate) topology: Topology,
    pub(crate) info: redis::ConnectionInfo,
}

/// Parses the part of a multi-host URL before its query: `base` is
/// `SCHEME://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/PATH]`, with
/// `tls` for the `rediss+` schemes. `form` ends every error message; no
/// message holds the password.
pub(crate) fn parse_multi_host(
    base: &str,
    sentinel: bool,
    tls: bool,
    form: &str,
) -> Result<MultiHost> {
    let invalid = |why: String| Error::invalid("store URL", format!("{why}; {form}"));
    let rest = base.split_once("://").map(|(_, r)| r).unwrap_or(base);
    let (authority, path) = match rest.split_once('/') {
        Some((a, p)) => (a, p),
        None => (rest, ""),
    };
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let default_port = if sentinel { SENTINEL_PORT } else { 6379 };
    let mut addrs = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err(invalid(
                "a host is missing (HOST:PORT, separated by commas)".into(),
            ));
        }
        let with_port = if has_port(host) {
            host.to_string()
        } else {
            format!("{host}:{default_port}")
        };
        // redis-rs parses the host (IPv6 in brackets too) and the port.
        let info = format!("redis://{with_port}")
            .into_connection_info()
            .map_err(|e| invalid(format!("host {host:?}: {e}")))?;
        let addr = match info.addr() {
            ConnectionAddr::Tcp(h, p) if tls => ConnectionAddr::TcpTls {
                host: h.clone(),
                port: *p,
                insecure: false,
                tls_params: None,
            },
            other => other.clone(),
        };
        addrs.push(addr);
    }
    let first = addrs[0].clone();
    let mut segments = path.split('/').filter(|s| !s.is_empty());
    let (topology, db) = if sentinel {
        let master = segments.next().ok_or_else(|| {
            invalid("the primary's name is missing (/MASTER_NAME after the sentinels)".into())
        })?;
        let master =
            percent_decoded(master).map_err(|e| invalid(format!("the primary's name: {e}")))?;
        (
            Topology::Sentinel {
                sentinels: addrs,
                master,
            },
            segments.next(),
        )
    } else {
        (Topology::Cluster { nodes: addrs }, segments.next())
    };
    if let Some(extra) = segments.next() {
        return Err(invalid(format!("unexpected path segment {extra:?}")));
    }
    let db = match db {
        None => 0,
        Some(d) => d
            .parse::<i64>()
            .ok()
            .filter(|d| *d >= 0)
            .ok_or_else(|| invalid(format!("database {d:?} is not a number")))?,
    };
    if !sentinel && db != 0 {
        return Err(invalid(format!(
            "database {db}: a Redis Cluster has database 0 only"
        )));
    }
    // The user and password, percent-decoded by redis-rs, from a URL of
    // the same authority with one host.
    let one = match userinfo {
        Some(u) => format!("redis://{u}@localhost/{db}"),
        None => format!("redis://localhost/{db}"),
    };
    let parsed = one
        .into_connection_info()
        .map_err(|e| invalid(e.to_string()))?;
    let info = parsed.set_addr(first);
    Ok(MultiHost { topology, info })
}

/// Whether `host` names a port (after the last `:`, not inside an IPv6
/// literal's brackets).
fn has_port(host: &str) -> bool {
    match host.rsplit_once(':') {
        Some((before, port)) => {
            !port.contains(']')
                && !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!before.starts_with('[') || before.ends_with(']'))
        }
        None => false,
    }
}

/// `%XX` sequences decoded (a master name may hold any character).
fn percent_decoded(s: &str) -> std::result::Result<String, String> {
    leasehold::backend::params::decode_percent(s)
        .ok_or_else(|| format!("{s:?} is not well percent-encoded UTF-8"))
}

/// The prefix a cluster store writes under: `prefix` if it holds a Redis
/// Cluster hash tag (a non-empty `{...}`), else the whole prefix made one
/// (`leasehold:` becomes `{leasehold:}`), so that every key of the store
/// hashes to one slot and each script's keys are on one node.
pub(crate) fn cluster_prefix(prefix: &str) -> String {
    if has_hash_tag(prefix) {
        prefix.to_string()
    } else {
        format!("{{{prefix}}}")
    }
}

/// Whether `key` has a hash tag: a `{` followed later by a `}` with
/// something between (Redis Cluster then hashes only what is between).
pub(crate) fn has_hash_tag(key: &str) -> bool {
    match key.find('{') {
        Some(open) => matches!(key[open + 1..].find('}'), Some(close) if close > 0),
        None => false,
    }
}

/// Makes connections to the store's server, wherever it is now.
pub(crate) enum Connector {
    Single(redis::Client),
    /// Asks the sentinels for the current primary at every (re)connection.
    Sentinel(tokio::sync::Mutex<SentinelClient>),
    Cluster(ClusterClient),
}

impl Connector {
    /// A connection to the server as it is now: for Sentinel, to the
    /// primary the sentinels name (checked with `ROLE`). `lazy` is for a
    /// single server's connection manager only (connect at its first
    /// request, as a replacement does); Sentinel's and a cluster's
    /// connections are made at once.
    pub(crate) async fn connect(
        &self,
        config: &ConnectionManagerConfig,
        timeout: std::time::Duration,
        lazy: bool,
    ) -> redis::RedisResult<Conn> {
        match self {
            Connector::Single(client) => Ok(Conn::Single(if lazy {
                ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?
            } else {
                ConnectionManager::new_with_config(client.clone(), config.clone()).await?
            })),
            // Not a connection manager, which would reconnect by itself to
            // the same address: after a crash and failover, that may be the
            // old primary started again, empty, and still a primary until
            // the sentinels demote it (10-20 s). A dead connection is
            // replaced instead (see `follows_primary`), by asking the
            // sentinels again.
            Connector::Sentinel(sentinel) => {
                let client = sentinel.lock().await.async_get_client().await?;
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout));
                Ok(Conn::Multiplexed(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                ))
            }
            Connector::Cluster(client) => Ok(Conn::Cluster(client.get_async_connection().await?)),
        }
    }

    /// A client for a pub/sub connection: the server, the current primary,
    /// or, for a cluster, the `attempt`-th node in turn (a message
    /// published on any node of a cluster reaches the subscribers of
    /// every node).
    pub(crate) async fn pubsub_client(
        &self,
        nodes: &[redis::ConnectionInfo],
        attempt: usize,
    ) -> redis::RedisResult<redis::Client> {
        match self {
            Connector::Single(client) => Ok(client.clone()),
            Connector::Sentinel(sentinel) => sentinel.lock().await.async_get_client().await,
            Connector::Cluster(_) => {
                let info = nodes[attempt % nodes.len().max(1)].clone();
                redis::Client::open(info)
            }
        }
    }

    /// Whether a request that failed with `e` should make a new connection
    /// first (the primary may have moved): only Sentinel's, whose
    /// connection manager would reconnect to the old address.
    pub(crate) fn follows_primary(&self, e: &redis::RedisError) -> bool {
        matches!(self, Connector::Sentinel(_))
            && (e.is_io_error()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || e.is_timeout()
                || matches!(
                    e.code(),
                    Some("READONLY" | "MASTERDOWN" | "LOADING" | "NOREPLICAS")
                ))
    }
}

/// One connection, on which every task's requests are pipelined.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Multiplexed(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Multiplexed(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Multiplexed(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Multiplexed(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The data nodes' connection settings for `addr`, with `redis`'s user,
/// password and database.
pub(crate) fn node_info(
    addr: &ConnectionAddr,
    redis: &RedisConnectionInfo,
) -> redis::ConnectionInfo {
    let base: redis::ConnectionInfo = "redis://localhost"
        .into_connection_info()
        .expect("a constant URL parses");
    base.set_addr(addr.clone())
        .set_redis_settings(redis.clone())
}

/// Shared by the backend and its listener.
pub(crate) type SharedConnector = Arc<Connector>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_tags() {
        assert!(has_hash_tag("{a}"));
        assert!(has_hash_tag("x{jobs}:"));
        assert!(!has_hash_tag("{}x"));
        assert!(!has_hash_tag("leasehold:"));
        assert!(!has_hash_tag("a}{"));
        assert_eq!(cluster_prefix("leasehold:"), "{leasehold:}");
        assert_eq!(cluster_prefix("{jobs}:"), "{jobs}:");
        assert_eq!(cluster_prefix("a{}b"), "{a{}b}");
    }

    #[test]
    fn ports() {
        assert!(has_port("h:1"));
        assert!(!has_port("h"));
        assert!(has_port("[::1]:26379"));
        assert!(!has_port("[::1]"));
        assert!(!has_port("h:"));
    }
}
