//! Building a [`RedisBackend`]: from a store URL or in code.

use std::path::PathBuf;
use std::time::Duration;

use leasehold::backend::params::QuerySpec;
use leasehold::backend::shared_builder::{
    check_max_ttl, require, split_scheme, RecordedMaxTtl, ServerCommon, ServerOptions,
};
use leasehold::{Creation, Error, Result};
use redis::{ConnectionAddr, IntoConnectionInfo};

use std::sync::{Arc, Mutex};

use leasehold::backend::Listener;
use redis::aio::ConnectionManagerConfig;
use redis::cluster::ClusterClientBuilder;
use redis::sentinel::{SentinelClientBuilder, SentinelServerType};

use crate::backend::{Inner, RedisBackend};
use crate::error;
use crate::listen::Announcements;
use crate::record::Names;
use crate::scripts::Scripts;
use crate::topology::{
    cluster_prefix, has_hash_tag, node_info, parse_multi_host, Connector, Topology,
};
use crate::{MAX_TTL, MIN_TTL};

const WHAT: &str = "store URL";
const FORM: &str = "the form is redis://[USER:PASSWORD@]HOST[:PORT][/DB][?prefix=P&max_ttl=DURATION&wake_ups=on|off&tls_ca=PATH], redis+sentinel://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME[/DB][?...] or redis+cluster://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][?...] (rediss for TLS)";
/// The schemes a Redis store URL may have.
const SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
];
/// The query parameters of a `redis://` URL.
const PARAMS: QuerySpec = QuerySpec::new("redis", &["prefix", "max_ttl", "wake_ups", "tls_ca"]);

/// The default prefix of every Redis key the store writes.
pub const DEFAULT_PREFIX: &str = "leasehold:";

/// Builds a [`RedisBackend`]. Its `Debug` output never shows the password.
#[derive(Clone)]
pub struct RedisBackendBuilder {
    pub(crate) info: redis::ConnectionInfo,
    pub(crate) tls_ca: Option<PathBuf>,
    pub(crate) prefix: String,
    /// One server, a primary found through Sentinel, or a cluster.
    pub(crate) topology: Topology,
    /// Max TTL, request timeout, wake-ups, creation.
    pub(crate) options: ServerOptions,
}

impl std::fmt::Debug for RedisBackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackendBuilder")
            .field("target", &describe(&self.topology, &self.info))
            .field("tls_ca", &self.tls_ca)
            .field("prefix", &self.prefix)
            .field("max_ttl", &self.options.max_ttl)
            .field("request_timeout", &self.options.request_timeout)
            .field("wake_ups", &self.options.wake_ups)
            .finish()
    }
}

/// `host:port/db` (with `tls` for TLS): never the user or password.
pub(crate) fn target_of(info: &redis::ConnectionInfo) -> String {
    let db = info.redis_settings().db();
    format!("{}/{db}", address(info.addr()))
}

/// `host:port` (`tls host:port` for TLS).
fn address(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
        ConnectionAddr::TcpTls { host, port, .. } => format!("tls {host}:{port}"),
        ConnectionAddr::Unix(path) => path.display().to_string(),
        _ => "?".to_string(),
    }
}

/// What a store's `Debug` names as its target: the server, the sentinels
/// and the primary's name, or the cluster's first nodes (never the user
/// or password).
pub(crate) fn describe(topology: &Topology, info: &redis::ConnectionInfo) -> String {
    let list = |addrs: &[ConnectionAddr]| addrs.iter().map(address).collect::<Vec<_>>().join(",");
    match topology {
        Topology::Single => target_of(info),
        Topology::Sentinel { sentinels, master } => format!(
            "sentinel {} /{master}/{}",
            list(sentinels),
            info.redis_settings().db()
        ),
        Topology::Cluster { nodes } => format!("cluster {}", list(nodes)),
    }
}

impl RedisBackend {
    /// A builder for the server `info` names (see [`RedisBackendBuilder`]).
    pub fn builder(info: redis::ConnectionInfo) -> RedisBackendBuilder {
        RedisBackendBuilder::new(info)
    }

    /// Opens the store a URL names (see the crate docs for its form):
    /// connects and reads (or starts) the store's epoch.
    ///
    /// # Errors
    /// As [`RedisBackendBuilder::from_url`] and
    /// [`RedisBackendBuilder::build`].
    pub async fn from_url(url: &str) -> Result<Self> {
        RedisBackendBuilder::from_url(url)?.build().await
    }
}

impl RedisBackendBuilder {
    /// A builder for the server `info` names, with the defaults: prefix
    /// [`DEFAULT_PREFIX`], max TTL 60 s, 5 s request timeout, wake-ups on.
    pub fn new(info: redis::ConnectionInfo) -> Self {
        RedisBackendBuilder {
            info,
            tls_ca: None,
            prefix: DEFAULT_PREFIX.to_string(),
            topology: Topology::Single,
            options: ServerOptions::default(),
        }
    }

    /// Parses a store URL (see the crate docs for its form). Nothing is
    /// contacted yet.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL or parameter; the message
    /// never holds the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let (scheme, _) = split_scheme(url, SCHEMES, FORM)?;
        if url.contains('#') {
            // redis-rs reads `#insecure` as "skip certificate checks".
            return Err(Error::invalid(
                WHAT,
                format!("a fragment (#...) is not accepted: certificates are always verified (tls_ca=PATH names a private CA); {FORM}"),
            ));
        }
        let (base, query) = PARAMS.parse_url(url)?;
        let tls_ca = query.string("tls_ca").map(PathBuf::from);
        // redis-rs's parse errors name the part that is wrong, never the
        // password's value (checked by bad_urls_are_refused_without_the_password).
        let tls = scheme.starts_with("rediss");
        let (info, topology) = match scheme {
            "redis" | "rediss" => (
                base.into_connection_info()
                    .map_err(|e| Error::invalid(WHAT, format!("{e}; {FORM}")))?,
                Topology::Single,
            ),
            _ => {
                let sentinel = scheme.ends_with("+sentinel");
                let multi = parse_multi_host(base, sentinel, tls, FORM)?;
                (multi.info, multi.topology)
            }
        };
        if tls_ca.is_some() && !tls {
            return Err(Error::invalid(
                WHAT,
                format!("tls_ca is for rediss:// (TLS) URLs; {FORM}"),
            ));
        }
        let mut builder = RedisBackendBuilder::new(info);
        builder.topology = topology;
        if let Some(prefix) = query.string("prefix") {
            builder = builder.prefix(prefix);
        }
        builder.options.read_query(&query)?;
        builder.tls_ca = tls_ca;
        builder.check()?;
        Ok(builder)
    }

    /// The prefix of every Redis key (and the pub/sub channel) the store
    /// uses ([`DEFAULT_PREFIX`] by default): stores with different prefixes
    /// on one server are independent, each with its own epoch.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The max TTL a store started by this backend records (1 s to 24 h;
    /// 60 s by default): no lease may be longer. An existing store keeps its
    /// own. After the store's data is lost (or the server restarts or fails
    /// over) grants wait one confirmation window
    /// ([`leasehold::CONFIRMATION_WINDOW`]), whatever this says.
    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.options.max_ttl = max_ttl;
        self
    }

    /// A PEM file of CA certificates to trust for `rediss://` *instead of*
    /// the system's.
    pub fn tls_ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls_ca = Some(path.into());
        self
    }

    /// How long one request may take before it counts as failed
    /// (retryable) and the connection is replaced (5 s by default).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.options.request_timeout = timeout;
        self
    }

    /// Whether waiters subscribe to releases (on by default). Off, waiters
    /// only poll, and releases publish nothing.
    pub fn wake_ups(mut self, on: bool) -> Self {
        self.options.wake_ups = on;
        self
    }

    /// The key prefix as given.
    pub fn prefix_name(&self) -> &str {
        &self.prefix
    }

    /// The connection settings (their `Debug` hides the password).
    pub fn connection_info(&self) -> &redis::ConnectionInfo {
        &self.info
    }

    pub(crate) fn check(&self) -> Result<()> {
        let ok = (1..=200).contains(&self.prefix.len())
            && self.prefix.chars().all(|c| c.is_ascii_graphic());
        require("prefix", ok, || {
            format!(
                "{:?}: use 1 to 200 printable ASCII characters without spaces",
                self.prefix
            )
        })?;
        if matches!(self.topology, Topology::Cluster { .. }) {
            // `}x:` would become `{}x:}`: an empty tag, which Redis ignores,
            // so the store's keys would spread over slots.
            require(
                "prefix",
                has_hash_tag(&cluster_prefix(&self.prefix)),
                || {
                    format!(
                    "{:?}: on a Redis Cluster the prefix is made a hash tag ({{PREFIX}}) unless it has one, and a prefix that starts with '}}' would make it empty; use another prefix, or one with a tag such as {{jobs}}:",
                    self.prefix
                )
                },
            )?;
        }
        check_max_ttl(self.options.max_ttl, MIN_TTL, MAX_TTL)?;
        Ok(())
    }

    /// What opening may do to the store (default
    /// [`Creation::IfMissing`](leasehold::Creation::IfMissing)): with
    /// `Never`, nothing is written (a prefix with neither epoch marker nor
    /// key index is [`Error::NoStore`](leasehold::Error::NoStore); a marker
    /// of another server process is reported, not renewed); with
    /// `NewProven`, the marker of a new store records that its epoch is
    /// proven (see [`Creation::NewProven`](leasehold::Creation::NewProven)).
    pub fn creation(mut self, creation: Creation) -> Self {
        self.options.creation = creation;
        self
    }

    /// Connects (checking that the server answers and the password is
    /// right), refuses a server that may evict the store's keys, and reads
    /// (or starts) the store's epoch.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad prefix, max TTL or CA file;
    /// [`Error::Backend`] when the server cannot be reached or refuses
    /// (retryable when that may pass), or evicts keys at will
    /// (`maxmemory-policy allkeys-*`, not retryable).
    pub async fn build(self) -> Result<RedisBackend> {
        self.check()?;
        const OP: &str = "open";
        let tls = matches!(self.info.addr(), ConnectionAddr::TcpTls { .. });
        if tls {
            install_crypto_provider();
        }
        let certificates = match &self.tls_ca {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    Error::invalid(
                        "tls_ca",
                        format!("cannot read CA certificates from {}: {e}", path.display()),
                    )
                })?;
                Some(redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                })
            }
            None => None,
        };
        let settings = self.info.redis_settings();
        let mut nodes = Vec::new();
        let connector = match &self.topology {
            Topology::Single => Connector::Single(
                match certificates {
                    Some(certs) => redis::Client::build_with_tls(self.info.clone(), certs),
                    None => redis::Client::open(self.info.clone()),
                }
                .map_err(|e| error::client(OP, e))?,
            ),
            Topology::Sentinel { sentinels, master } => {
                let mut b = SentinelClientBuilder::new(
                    sentinels.iter().cloned(),
                    master,
                    SentinelServerType::Master,
                )
                .map_err(|e| error::client(OP, e))?
                .set_client_to_redis_db(settings.db());
                if let Some(user) = settings.username() {
                    b = b.set_client_to_redis_username(user);
                }
                if let Some(password) = settings.password() {
                    b = b.set_client_to_redis_password(password);
                }
                if tls {
                    b = b
                        .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
                        .set_client_to_sentinel_tls_mode(redis::TlsMode::Secure);
                    if let Some(certs) = certificates {
                        b = b
                            .set_client_to_redis_certificates(certs.clone())
                            .set_client_to_sentinel_certificates(certs);
                    }
                }
                let client = b.build().map_err(|e| error::client(OP, e))?;
                Connector::Sentinel(tokio::sync::Mutex::new(client))
            }
            Topology::Cluster { nodes: addrs } => {
                nodes = addrs.iter().map(|a| node_info(a, settings)).collect();
                let mut b = ClusterClientBuilder::new(nodes.clone())
                    .connection_timeout(self.options.request_timeout)
                    .response_timeout(self.options.request_timeout)
                    .retries(2);
                if let Some(user) = settings.username() {
                    b = b.username(user);
                }
                if let Some(password) = settings.password() {
                    b = b.password(password);
                }
                if tls {
                    b = b.tls(redis::TlsMode::Secure);
                    if let Some(certs) = certificates {
                        b = b.certs(certs);
                    }
                }
                Connector::Cluster(b.build().map_err(|e| error::client(OP, e))?)
            }
        };
        let connector = Arc::new(connector);
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.options.request_timeout))
            .set_response_timeout(Some(self.options.request_timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1));
        let conn = match tokio::time::timeout(
            self.options.request_timeout * 2,
            connector.connect(&manager_config, self.options.request_timeout, false),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                let hint = match &self.topology {
                    Topology::Sentinel { master, .. } => format!(
                        " (asking the sentinels for the primary {master:?}: are the URL's hosts sentinels, and is that the name they monitor?)"
                    ),
                    Topology::Cluster { .. } => {
                        " (are the URL's hosts nodes of a Redis Cluster?)".to_string()
                    }
                    Topology::Single => String::new(),
                };
                return Err(error::client_with(OP, e, &hint));
            }
            Err(_) => return Err(error::timed_out(OP, self.options.request_timeout * 2)),
        };
        let prefix = match self.topology {
            Topology::Cluster { .. } => cluster_prefix(&self.prefix),
            _ => self.prefix.clone(),
        };
        let names = Names::new(&prefix);
        let generation = tokio::sync::watch::Sender::new(0);
        let listener = self.options.wake_ups.then(|| {
            Listener::new(Announcements {
                connector: connector.clone(),
                generation: generation.subscribe(),
                nodes,
                attempt: Default::default(),
                channel: names.channel.clone(),
            })
        });
        let inner = Inner {
            connector,
            manager_config,
            conn: Mutex::new((0, conn)),
            generation,
            names,
            scripts: Scripts::new(),
            max_ttl: self.options.max_ttl,
            store_max_ttl: RecordedMaxTtl::new(self.options.max_ttl),
            request_timeout: self.options.request_timeout,
            target: describe(&self.topology, &self.info),
            common: ServerCommon::new(listener),
        };
        RedisBackend::open(inner, self.options.creation).await
    }
}

/// redis-rs builds its TLS configuration with rustls's process-wide
/// default provider, which rustls cannot pick by itself when a build
/// enables two (the AWS SDK brings aws-lc-rs): install ring unless some
/// crate installed one already.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_testkit::builders::{assert_debug_hides, assert_refused_without};

    #[test]
    fn url_parts_and_parameters() {
        let b = RedisBackendBuilder::from_url(
            "redis://me:s3cret@cache.example:6380/3?prefix=jobs:&max_ttl=5m&wake_ups=off",
        )
        .unwrap();
        let s = b.info.redis_settings();
        assert_eq!(s.username(), Some("me"));
        assert_eq!(s.password(), Some("s3cret"));
        assert_eq!(s.db(), 3);
        assert_eq!(target_of(&b.info), "cache.example:6380/3");
        assert_eq!(b.prefix, "jobs:");
        assert_eq!(b.options.max_ttl, Duration::from_secs(300));
        assert!(!b.options.wake_ups);
        let b = RedisBackendBuilder::from_url("redis://h?prefix=a%3Ab:&wake_ups=0").unwrap();
        assert_eq!(b.prefix, "a:b:");
        assert!(!b.options.wake_ups);
        let b = RedisBackendBuilder::from_url("redis://h").unwrap();
        assert_eq!(target_of(&b.info), "h:6379/0");
        assert_eq!(b.prefix, DEFAULT_PREFIX);
        assert!(b.options.wake_ups);
        let b = RedisBackendBuilder::from_url("rediss://:pw@h:1?tls_ca=/x.pem").unwrap();
        assert_eq!(target_of(&b.info), "tls h:1/0");
        assert_eq!(b.info.redis_settings().password(), Some("pw"));
        assert_eq!(b.tls_ca.as_deref(), Some(std::path::Path::new("/x.pem")));
    }

    #[test]
    fn sentinel_and_cluster_urls() {
        let b = RedisBackendBuilder::from_url(
            "redis+sentinel://me:s3cret@h1:26380,h2,[::1]:1/my%20primary/2?prefix=jobs:",
        )
        .unwrap();
        let tcp = |h: &str, p: u16| ConnectionAddr::Tcp(h.into(), p);
        assert_eq!(
            b.topology,
            Topology::Sentinel {
                sentinels: vec![tcp("h1", 26380), tcp("h2", 26379), tcp("::1", 1)],
                master: "my primary".into(),
            }
        );
        let s = b.info.redis_settings();
        assert_eq!(
            (s.username(), s.password(), s.db()),
            (Some("me"), Some("s3cret"), 2)
        );
        assert_eq!(b.prefix, "jobs:");
        assert_eq!(
            describe(&b.topology, &b.info),
            "sentinel h1:26380,h2:26379,::1:1 /my primary/2"
        );
        let b = RedisBackendBuilder::from_url("redis+sentinel://h/m").unwrap();
        assert_eq!(b.info.redis_settings().db(), 0);

        let b = RedisBackendBuilder::from_url("redis+cluster://:pw@a:7000,b?wake_ups=off").unwrap();
        assert_eq!(
            b.topology,
            Topology::Cluster {
                nodes: vec![tcp("a", 7000), tcp("b", 6379)]
            }
        );
        assert_eq!(b.info.redis_settings().password(), Some("pw"));
        assert!(!b.options.wake_ups);
        assert_eq!(describe(&b.topology, &b.info), "cluster a:7000,b:6379");
        let b = RedisBackendBuilder::from_url("rediss+cluster://a:7000/0?tls_ca=/ca.pem").unwrap();
        assert!(matches!(
            &b.topology,
            Topology::Cluster { nodes } if matches!(nodes[0], ConnectionAddr::TcpTls { .. })
        ));
    }

    #[test]
    fn bad_urls_are_refused_without_the_password() {
        let urls = [
            "redis://u:hunter22@h/0?prefix=has space",
            "redis://u:hunter22@h/0?max_ttl=forever",
            "redis://u:hunter22@h/0?max_ttl=100ms",
            "redis://u:hunter22@h/0?wake_ups=maybe",
            "redis://u:hunter22@h/0?bogus=1",
            "redis://u:hunter22@h/0?prefix=a:&prefix=b:",
            "redis://u:hunter22@h/0?prefix=%zz",
            "redis://u:hunter22@h/0?tls_ca=/x.pem",
            "redis://u:hunter22@h:notaport/0",
            "redis://u:hunter22@h/notadb",
            "rediss://u:hunter22@h/0#insecure",
            "redis://u:hunter22@/0",
            "mysql://u:hunter22@h/d",
            "redis+sentinel://u:hunter22@h1:26379",
            "redis+sentinel://u:hunter22@h1,,h2/m",
            "redis+sentinel://u:hunter22@h1/m/notadb",
            "redis+sentinel://u:hunter22@h1/m/0/extra",
            "redis+sentinel://u:hunter22@h1/m%zz",
            "redis+sentinel://u:hunter22@h1:port/m",
            "redis+cluster://u:hunter22@h:7000/3",
            "redis+cluster://u:hunter22@",
            "redis+cluster://u:hunter22@h/0?tls_ca=/x.pem",
            "redis+cluster://u:hunter22@h/0#insecure",
            "redis+cluster://u:hunter22@h?prefix=%7Dx:",
            "redis+clusters://u:hunter22@h",
            "redis:u:hunter22@h/d",
        ];
        assert_refused_without(&urls, "hunter22", RedisBackendBuilder::from_url);
    }

    #[test]
    fn debug_never_shows_the_password() {
        let b = RedisBackendBuilder::from_url("redis://u:hunter22@h/0").unwrap();
        assert_debug_hides(&b, "hunter22", "h:6379/0");
        let b = RedisBackendBuilder::from_url("redis+sentinel://u:hunter22@h/m").unwrap();
        assert_debug_hides(&b, "hunter22", "sentinel h:26379 /m/0");
        let b = RedisBackendBuilder::from_url("redis+cluster://u:hunter22@h").unwrap();
        assert_debug_hides(&b, "hunter22", "cluster h:6379");
    }
}
