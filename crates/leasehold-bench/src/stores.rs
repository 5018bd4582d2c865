//! The stores under test, each opened with request counters: backend calls
//! through a [`Counting`] wrapper, and HTTP requests where a store sends
//! several per call (Azure, through a pipeline policy; DynamoDB, S3 and
//! etcd, through the backend's own counter).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context};
use async_trait::async_trait;
use leasehold::{
    backend::{AcquireOutcome, AcquireRequest, Backend, Lease, Wrapper},
    HolderInfo, Key, KeyInfo, Store,
};
use leasehold_dynamodb::DynamoDbBackend;
use leasehold_postgres::PostgresBackend;
use leasehold_s3::S3Backend;

use crate::sys::mono_ns;

/// Azurite's default blob port (the development connection string's).
pub const AZURITE_PORT: u16 = 10000;
/// DynamoDB Local's default port.
pub const DYNAMODB_PORT: u16 = 8000;
/// DynamoDB Local's endpoint (scripts/bench.sh sets it from
/// `$DYNAMODB_LOCAL_PORT`); without it, [`DYNAMODB_PORT`] on 127.0.0.1.
pub const DYNAMODB_ENDPOINT_ENV: &str = "LEASEHOLD_BENCH_DYNAMODB_ENDPOINT";

/// moto's S3 endpoint (scripts/bench.sh sets it from `scripts/moto.sh
/// url`); without it, moto's default port on 127.0.0.1. S3's figures run
/// when the endpoint answers.
pub const S3_ENDPOINT_ENV: &str = "LEASEHOLD_BENCH_S3_ENDPOINT";
/// The port `scripts/moto.sh` starts moto on by default.
pub const MOTO_PORT: u16 = 45399;
/// The bucket of S3's figures; each run's store is a prefix of its own in it.
pub const S3_BUCKET: &str = "leasehold-bench";

/// moto's S3 endpoint: the environment's, or moto's default.
pub fn s3_endpoint() -> String {
    std::env::var(S3_ENDPOINT_ENV)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| format!("http://127.0.0.1:{MOTO_PORT}"))
}

/// The PostgreSQL server's URL (scripts/bench.sh sets it from
/// `scripts/postgres.sh url`); without it PostgreSQL's figures are left out.
pub const POSTGRES_URL_ENV: &str = "LEASEHOLD_BENCH_POSTGRES_URL";

/// The MySQL (MariaDB) server's URL (scripts/bench.sh sets it from
/// `scripts/mysql.sh url`); without it MySQL's figures are left out.
pub const MYSQL_URL_ENV: &str = "LEASEHOLD_BENCH_MYSQL_URL";

/// The MySQL server's URL, if one is given.
pub fn mysql_url() -> Option<String> {
    std::env::var(MYSQL_URL_ENV).ok().filter(|v| !v.is_empty())
}

/// The ZooKeeper server's store URL (scripts/bench.sh sets it from
/// `scripts/zookeeper.sh url`); without it ZooKeeper's figures are left
/// out.
pub const ZOOKEEPER_URL_ENV: &str = "LEASEHOLD_BENCH_ZOOKEEPER_URL";

/// The ZooKeeper server's store URL, if one is given.
pub fn zookeeper_url() -> Option<String> {
    std::env::var(ZOOKEEPER_URL_ENV)
        .ok()
        .filter(|v| !v.is_empty())
}

/// The Redis server's URL (scripts/bench.sh sets it from
/// `scripts/redis.sh url`); without it Redis's figures are left out.
pub const REDIS_URL_ENV: &str = "LEASEHOLD_BENCH_REDIS_URL";

/// The etcd server's store URL (scripts/bench.sh sets it from
/// `scripts/etcd.sh url`); without it etcd's figures are left out.
pub const ETCD_URL_ENV: &str = "LEASEHOLD_BENCH_ETCD_URL";

/// The etcd server's store URL, if one is given.
pub fn etcd_url() -> Option<String> {
    std::env::var(ETCD_URL_ENV).ok().filter(|v| !v.is_empty())
}

/// The Redis server's URL, if one is given.
pub fn redis_url() -> Option<String> {
    std::env::var(REDIS_URL_ENV).ok().filter(|v| !v.is_empty())
}

/// The PostgreSQL server's URL, if one is given.
pub fn postgres_url() -> Option<String> {
    std::env::var(POSTGRES_URL_ENV)
        .ok()
        .filter(|v| !v.is_empty())
}

/// Which store, as passed between processes (`memory:`, `sqlite:PATH`,
/// `azblob:CONTAINER`, `dynamodb:TABLE`, `postgres:TABLE`, `redis:PREFIX`,
/// `etcd:PREFIX`, `s3:PREFIX`, `zookeeper:CHROOT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// In-process memory store.
    Memory,
    /// SQLite file.
    Sqlite(PathBuf),
    /// Azurite container.
    Azblob(String),
    /// DynamoDB Local table.
    Dynamodb(String),
    /// A table on the PostgreSQL server of [`postgres_url`].
    Postgres(String),
    /// A table on the MySQL server of [`mysql_url`].
    Mysql(String),
    /// A key prefix on the Redis server of [`redis_url`].
    Redis(String),
    /// A key prefix on the etcd server of [`etcd_url`].
    Etcd(String),
    /// A prefix in [`S3_BUCKET`] on moto, at [`s3_endpoint`].
    S3(String),
    /// A chroot on the ZooKeeper server of [`zookeeper_url`].
    Zookeeper(String),
}

/// The store kinds, as [`Spec::kind`] names them (`run --stores`).
pub const KINDS: &[&str] = &[
    "memory",
    "sqlite",
    "azblob",
    "dynamodb",
    "postgres",
    "mysql",
    "redis",
    "etcd",
    "s3",
    "zookeeper",
];

impl Spec {
    /// Parses the form written by [`Spec::arg`].
    pub fn parse(s: &str) -> anyhow::Result<Spec> {
        Ok(match s.split_once(':') {
            Some(("memory", "")) => Spec::Memory,
            Some(("sqlite", p)) => Spec::Sqlite(PathBuf::from(p)),
            Some(("azblob", c)) => Spec::Azblob(c.to_string()),
            Some(("dynamodb", t)) => Spec::Dynamodb(t.to_string()),
            Some(("postgres", t)) => Spec::Postgres(t.to_string()),
            Some(("mysql", t)) => Spec::Mysql(t.to_string()),
            Some(("redis", p)) => Spec::Redis(p.to_string()),
            Some(("etcd", p)) => Spec::Etcd(p.to_string()),
            Some(("s3", p)) => Spec::S3(p.to_string()),
            Some(("zookeeper", c)) => Spec::Zookeeper(c.to_string()),
            _ => bail!("bad store spec {s:?}"),
        })
    }

    /// The form [`Spec::parse`] reads.
    pub fn arg(&self) -> String {
        let kind = self.kind();
        match self {
            Spec::Memory => format!("{kind}:"),
            Spec::Sqlite(p) => format!("{kind}:{}", p.display()),
            Spec::Azblob(name)
            | Spec::Dynamodb(name)
            | Spec::Postgres(name)
            | Spec::Mysql(name)
            | Spec::Redis(name)
            | Spec::Etcd(name)
            | Spec::S3(name)
            | Spec::Zookeeper(name) => format!("{kind}:{name}"),
        }
    }

    /// The kind of store, one of [`KINDS`].
    pub fn kind(&self) -> &'static str {
        match self {
            Spec::Memory => "memory",
            Spec::Sqlite(_) => "sqlite",
            Spec::Azblob(_) => "azblob",
            Spec::Dynamodb(_) => "dynamodb",
            Spec::Postgres(_) => "postgres",
            Spec::Mysql(_) => "mysql",
            Spec::Redis(_) => "redis",
            Spec::Etcd(_) => "etcd",
            Spec::S3(_) => "s3",
            Spec::Zookeeper(_) => "zookeeper",
        }
    }

    /// The store URL, as every leasehold binary reads it.
    pub fn url(&self) -> String {
        match self {
            Spec::Memory => "memory:".into(),
            Spec::Sqlite(p) => format!("sqlite:{}", p.display()),
            // Created proven-new by `warm_up` (no quarantine); the max TTL
            // is the shortest that fits the leases the figures take (the
            // default 30 s TTL).
            Spec::Azblob(c) => format!("azblob://{c}?max_ttl=30s"),
            Spec::Dynamodb(t) => format!(
                "dynamodb://{t}?region=us-east-1&endpoint={}&max_ttl=30s",
                dynamodb_endpoint()
            ),
            Spec::Postgres(t) => {
                let base = postgres_url().unwrap_or_default();
                let sep = if base.contains('?') { '&' } else { '?' };
                format!("{base}{sep}table={t}&max_ttl=30s")
            }
            Spec::Mysql(t) => {
                let base = mysql_url().unwrap_or_default();
                let sep = if base.contains('?') { '&' } else { '?' };
                format!("{base}{sep}table={t}&max_ttl=30s")
            }
            Spec::Redis(p) => {
                let base = redis_url().unwrap_or_default();
                let sep = if base.contains('?') { '&' } else { '?' };
                format!("{base}{sep}prefix={p}&max_ttl=30s")
            }
            Spec::Etcd(p) => {
                let base = etcd_url().unwrap_or_default();
                let sep = if base.contains('?') { '&' } else { '?' };
                format!("{base}{sep}prefix={p}&max_ttl=30s")
            }
            Spec::S3(p) => format!(
                "s3://{S3_BUCKET}/{p}?region=us-east-1&endpoint={}&max_ttl=30s",
                s3_endpoint()
            ),
            Spec::Zookeeper(c) => {
                let base = zookeeper_url().unwrap_or_default();
                let (hosts, query) = base.split_once('?').unwrap_or((&base, ""));
                let query = if query.is_empty() {
                    String::new()
                } else {
                    format!("&{query}")
                };
                format!("{}{c}?max_ttl=30s{query}", hosts.trim_end_matches('/'))
            }
        }
    }

    /// The name on the results page.
    pub fn label(&self) -> &'static str {
        match self {
            Spec::Memory => "memory",
            Spec::Sqlite(_) => "SQLite",
            Spec::Azblob(_) => "Azurite",
            Spec::Dynamodb(_) => "DynamoDB Local",
            Spec::Postgres(_) => "PostgreSQL",
            Spec::Mysql(_) => "MySQL",
            Spec::Redis(_) => "Redis",
            Spec::Etcd(_) => "etcd",
            Spec::S3(_) => S3_LABEL,
            Spec::Zookeeper(_) => "ZooKeeper",
        }
    }
}

/// S3's name on the results page (the store, and the emulator measured).
pub const S3_LABEL: &str = "S3 (moto)";

/// The Azurite connection string (the environment's, or the development one).
pub fn azurite_connection_string() -> String {
    std::env::var("AZURE_STORAGE_CONNECTION_STRING")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "UseDevelopmentStorage=true".into())
}

/// Azurite's blob port: the connection string's `BlobEndpoint` port
/// (scripts/bench.sh gives `scripts/azurite.sh connection-string`), or
/// [`AZURITE_PORT`] for the development one.
pub fn azurite_port() -> u16 {
    azurite_connection_string()
        .split(';')
        .find_map(|part| part.trim().strip_prefix("BlobEndpoint="))
        .and_then(|url| url.split_once("://"))
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|authority| authority.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or(AZURITE_PORT)
}

/// The DynamoDB Local endpoint: the environment's, or [`DYNAMODB_PORT`].
pub fn dynamodb_endpoint() -> String {
    std::env::var(DYNAMODB_ENDPOINT_ENV)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| format!("http://127.0.0.1:{DYNAMODB_PORT}"))
}

use leasehold_stores::RequestCounter as RequestCount;

/// A store and its counters.
pub struct Opened {
    /// The store.
    pub store: Store,
    /// Backend calls.
    pub calls: Arc<Counting>,
    /// The DynamoDB backend, for raw requests on the same client.
    pub dynamo: Option<Arc<DynamoDbBackend>>,
    /// The PostgreSQL backend, for its statements and epoch.
    pub postgres: Option<Arc<PostgresBackend>>,
    /// The MySQL backend, for its statements and epoch.
    pub mysql: Option<Arc<leasehold_mysql::MysqlBackend>>,
    /// The Redis backend, for its epoch.
    pub redis: Option<Arc<leasehold_redis::RedisBackend>>,
    /// The etcd backend, for its prefix and epoch.
    pub etcd: Option<Arc<leasehold_etcd::EtcdBackend>>,
    /// The S3 backend, for raw requests on the same client.
    pub s3: Option<Arc<S3Backend>>,
    /// The ZooKeeper backend, for its record paths and epoch.
    pub zookeeper: Option<Arc<leasehold_zookeeper::ZkBackend>>,
    requests: RequestCount,
}

impl Opened {
    /// Requests sent to the store so far (HTTP requests for the emulators,
    /// gRPC requests for etcd, backend calls, i.e. transactions,
    /// statements or scripts, for the others).
    pub fn requests(&self) -> u64 {
        (self.requests)()
    }
}

/// Creates `spec`'s container, table or prefix as a proven-new store and
/// takes one lease on it, so that no figure measures the creation.
pub async fn warm_up(spec: &Spec) -> anyhow::Result<()> {
    // Every run's stores are new (their names carry a fresh tag), so the
    // bench says so as `leasehold init --new` does: the new epoch is
    // proven and grants at once, instead of one confirmation window later.
    leasehold_stores::open_backend_with(&spec.url(), leasehold::Creation::NewProven)
        .await
        .with_context(|| format!("creating {}", spec.label()))?;
    let opened = open(spec, false).await?;
    let lock = opened.store.lock_with(
        "bench/warm-up",
        leasehold::LockOptions::new().ttl(std::time::Duration::from_secs(15)),
    )?;
    // Proven, the store grants at once; a few seconds cover a slow first
    // request (DynamoDB Local's first table, Redis's next-second epoch, the
    // second an S3 key's first grant waits).
    let guard = lock
        .acquire_timeout(std::time::Duration::from_secs(30))
        .await
        .with_context(|| format!("warming up {}", spec.label()))?;
    guard.release().await?;
    Ok(())
}

/// Opens `spec` through the store opener (the same as the CLI's);
/// `track_renewals` records each key's renewal times.
pub async fn open(spec: &Spec, track_renewals: bool) -> anyhow::Result<Opened> {
    let opened = leasehold_stores::open_backend(&spec.url())
        .await
        .with_context(|| format!("opening {}", spec.label()))?;
    let dynamo = opened.concrete.clone().downcast::<DynamoDbBackend>().ok();
    let postgres = opened.concrete.clone().downcast::<PostgresBackend>().ok();
    let mysql = opened
        .concrete
        .clone()
        .downcast::<leasehold_mysql::MysqlBackend>()
        .ok();
    let redis = opened
        .concrete
        .clone()
        .downcast::<leasehold_redis::RedisBackend>()
        .ok();
    let etcd = opened
        .concrete
        .clone()
        .downcast::<leasehold_etcd::EtcdBackend>()
        .ok();
    let zookeeper = opened
        .concrete
        .clone()
        .downcast::<leasehold_zookeeper::ZkBackend>()
        .ok();
    let s3 = opened.concrete.downcast::<S3Backend>().ok();
    let calls = Arc::new(Counting::new(opened.backend, track_renewals));
    let requests = match opened.requests {
        Some(f) => f,
        None => {
            let c = calls.clone();
            Arc::new(move || c.total())
        }
    };
    Ok(Opened {
        store: Store::from_backend(calls.clone()),
        calls,
        dynamo,
        postgres,
        mysql,
        redis,
        etcd,
        s3,
        zookeeper,
        requests,
    })
}

/// A backend wrapper that counts calls and, optionally, when each key was
/// last granted or renewed.
#[derive(Debug)]
pub struct Counting {
    inner: Arc<dyn Backend>,
    acquires: AtomicU64,
    renews: AtomicU64,
    releases: AtomicU64,
    others: AtomicU64,
    track: AtomicBool,
    schedule: Mutex<HashMap<String, Renewals>>,
}

/// The renewal record of one key.
#[derive(Debug, Clone, Copy, Default)]
pub struct Renewals {
    /// Last grant or successful renewal, monotonic ns.
    pub last_ns: u64,
    /// Longest time between two of them, ns.
    pub max_gap_ns: u64,
    /// Successful renewals.
    pub count: u64,
}

impl Counting {
    fn new(inner: Arc<dyn Backend>, track: bool) -> Self {
        Counting {
            inner,
            acquires: AtomicU64::new(0),
            renews: AtomicU64::new(0),
            releases: AtomicU64::new(0),
            others: AtomicU64::new(0),
            track: AtomicBool::new(track),
            schedule: Mutex::new(HashMap::new()),
        }
    }

    /// All calls so far.
    pub fn total(&self) -> u64 {
        self.acquires.load(Ordering::Relaxed)
            + self.renews.load(Ordering::Relaxed)
            + self.releases.load(Ordering::Relaxed)
            + self.others.load(Ordering::Relaxed)
    }

    /// Each tracked key's renewals.
    pub fn renewals(&self) -> Vec<Renewals> {
        self.schedule
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .copied()
            .collect()
    }

    fn mark(&self, key: &Key, renewal: bool) {
        if !self.track.load(Ordering::Relaxed) {
            return;
        }
        let now = mono_ns();
        let mut map = self.schedule.lock().unwrap_or_else(|e| e.into_inner());
        let r = map.entry(key.as_str().to_string()).or_default();
        if renewal && r.last_ns > 0 {
            r.max_gap_ns = r.max_gap_ns.max(now - r.last_ns);
            r.count += 1;
        }
        r.last_ns = now;
    }
}

#[async_trait]
impl Wrapper for Counting {
    fn inner(&self) -> &dyn Backend {
        self.inner.as_ref()
    }
    async fn try_acquire(&self, request: &AcquireRequest) -> leasehold::Result<AcquireOutcome> {
        self.acquires.fetch_add(1, Ordering::Relaxed);
        let out = self.inner.try_acquire(request).await;
        if let Ok(AcquireOutcome::Acquired(_)) = &out {
            self.mark(&request.key, false);
        }
        out
    }

    // One request for several keys, counted as one (a wrapper that does
    // not define it makes every multi-key lock go key by key).
    async fn try_acquire_all(
        &self,
        requests: &[AcquireRequest],
    ) -> leasehold::Result<leasehold::backend::BatchOutcome> {
        use leasehold::backend::BatchOutcome;
        let out = self.inner.try_acquire_all(requests).await;
        // A store that cannot was not asked.
        if !matches!(out, Ok(BatchOutcome::Unsupported)) {
            self.acquires.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(BatchOutcome::Acquired(_)) = &out {
            for request in requests {
                self.mark(&request.key, false);
            }
        }
        out
    }

    async fn renew(&self, lease: &Lease) -> leasehold::Result<()> {
        self.renews.fetch_add(1, Ordering::Relaxed);
        let out = self.inner.renew(lease).await;
        if out.is_ok() {
            self.mark(&lease.key, true);
        }
        out
    }

    // What the engine renews through (etcd's renewals share sessions
    // through it).
    async fn renew_ran(&self, lease: &Lease) -> leasehold::Result<std::time::Duration> {
        self.renews.fetch_add(1, Ordering::Relaxed);
        let out = self.inner.renew_ran(lease).await;
        if out.is_ok() {
            self.mark(&lease.key, true);
        }
        out
    }

    async fn release(&self, lease: &Lease) -> leasehold::Result<()> {
        self.releases.fetch_add(1, Ordering::Relaxed);
        self.inner.release(lease).await
    }

    async fn inspect(&self, key: &Key) -> leasehold::Result<KeyInfo> {
        self.others.fetch_add(1, Ordering::Relaxed);
        self.inner.inspect(key).await
    }

    async fn break_lease(&self, key: &Key) -> leasehold::Result<Option<HolderInfo>> {
        self.others.fetch_add(1, Ordering::Relaxed);
        self.inner.break_lease(key).await
    }

    async fn list(&self, prefix: &str) -> leasehold::Result<Vec<KeyInfo>> {
        self.others.fetch_add(1, Ordering::Relaxed);
        self.inner.list(prefix).await
    }

    async fn record_run(&self, lease: &Lease, run: &leasehold::RunRecord) -> leasehold::Result<()> {
        self.others.fetch_add(1, Ordering::Relaxed);
        self.inner.record_run(lease, run).await
    }
}
