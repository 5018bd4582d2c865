//! The raw loops: the same minimal requests leasehold's protocols send for
//! an uncontended acquire + release, issued directly with the same SDK and
//! client settings, without leasehold. They are the physical limit that
//! figure 1 compares leasehold with.

mod azure;
mod dynamo;
mod etcd;
mod key;
mod mysql;
mod postgres;
mod redis;
mod s3;
mod sqlite;
mod zookeeper;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use azure_core::http::{Etag, RequestContent};
use azure_storage_blob::models::BlockBlobClientUploadOptions;
use azure_storage_blob::BlobClient;
use rusqlite::Connection;

use azure::azure_cycle;
use dynamo::dynamo_cycle;
pub use etcd::etcd_endpoints;
use etcd::{etcd_cycle, EtcdRaw};
use key::RAW_KEY;
use mysql::{mysql_cycle, MysqlSql};
use postgres::postgres_cycle;
use redis::redis_cycle;
use s3::S3Raw;
use sqlite::{sqlite_acquire, sqlite_cycle, sqlite_release};
pub use zookeeper::zk_hosts;
use zookeeper::{zk_cycle, ZkRaw};

/// One raw acquire + release loop.
pub enum RawLoop {
    /// rusqlite on its own connection, same pragmas, same statements.
    Sqlite(Option<Connection>),
    /// The same, but each of the two transactions is its own
    /// `spawn_blocking` call from async code, as leasehold's backend does.
    SqliteHop(Arc<std::sync::Mutex<Connection>>),
    /// azure_storage_blob, same client options: write record, lease, release.
    Azure {
        /// The lock blob.
        blob: BlobClient,
        /// Its ETag after our last write.
        etag: String,
        /// Requests sent.
        requests: Arc<AtomicU64>,
        /// Last fencing counter written.
        fence: u64,
    },
    /// redis-rs on a connection of its own: leasehold's acquire and release
    /// scripts (EVALSHA), one round trip each.
    Redis {
        /// The connection.
        conn: leasehold_redis::redis::aio::ConnectionManager,
        /// leasehold's acquire script.
        acquire: leasehold_redis::redis::Script,
        /// leasehold's release script.
        release: leasehold_redis::redis::Script,
        /// The store's key prefix.
        prefix: String,
        /// The store's epoch.
        epoch: u64,
        /// Scripts sent.
        requests: Arc<AtomicU64>,
    },
    /// tokio-postgres on a connection of its own: leasehold's acquire and
    /// release statements, one round trip each.
    Postgres {
        /// The connection.
        client: tokio_postgres::Client,
        /// leasehold's acquire statement, prepared once.
        acquire: tokio_postgres::Statement,
        /// leasehold's release statement, prepared once.
        release: tokio_postgres::Statement,
        /// The table's store epoch.
        epoch: i64,
        /// Statements sent.
        requests: Arc<AtomicU64>,
    },
    /// mysql_async on a connection of its own: leasehold's acquire
    /// transaction (five statements) and release statement.
    Mysql {
        /// The connection.
        conn: leasehold_mysql::mysql_async::Conn,
        /// leasehold's statements.
        sql: MysqlSql,
        /// The table's store epoch.
        epoch: u64,
        /// Statements sent.
        requests: Arc<AtomicU64>,
    },
    /// etcd's gRPC API on a connection (channel) of its own: leasehold's
    /// compare-and-put `Txn` on a session lease to acquire, compare-and-delete
    /// `Txn` to release; two round trips.
    Etcd {
        /// The connection.
        client: leasehold_etcd::grpc::Connection,
        /// The store's key prefix.
        prefix: String,
        /// The session, and the stored bytes the next grant compares.
        state: EtcdRaw,
        /// Requests sent.
        requests: Arc<AtomicU64>,
    },
    /// Figure 6's etcd peer, run in figure 1's rounds: etcd's lock service
    /// (`Lock` / `Unlock` on a session lease kept alive in the background),
    /// on a connection of its own; two round trips.
    EtcdPeer {
        /// The client and its session.
        session: crate::peer_etcd::Session,
        /// The lock's name.
        name: String,
        /// Requests sent.
        requests: Arc<AtomicU64>,
    },
    /// zookeeper-client on a session of its own: leasehold's read and
    /// version-checked write of the key's record to acquire, and a write
    /// checked against that write's version to release; three round trips.
    Zookeeper {
        /// The session and the record.
        raw: ZkRaw,
        /// Requests sent.
        requests: Arc<AtomicU64>,
    },
    /// aws-sdk-dynamodb on leasehold's own client: conditional grant, release.
    Dynamo {
        /// The client (leasehold's, so the same settings).
        client: aws_sdk_dynamodb::Client,
        /// The table.
        table: String,
    },
    /// aws-sdk-s3 on leasehold's own client: leasehold's warm path, a
    /// conditional `PutObject` and a read of the epoch marker to grant, a
    /// conditional `PutObject` to release.
    S3(S3Raw),
}

impl RawLoop {
    /// A loop on the SQLite file at `path` (whose schema leasehold created).
    pub fn sqlite(path: &Path) -> anyhow::Result<RawLoop> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // As leasehold's store: NORMAL, and FULL around each acquisition.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        Ok(RawLoop::Sqlite(Some(conn)))
    }

    /// Like [`RawLoop::sqlite`], one `spawn_blocking` per transaction.
    pub fn sqlite_hop(path: &Path) -> anyhow::Result<RawLoop> {
        match RawLoop::sqlite(path)? {
            RawLoop::Sqlite(Some(conn)) => {
                Ok(RawLoop::SqliteHop(Arc::new(std::sync::Mutex::new(conn))))
            }
            _ => unreachable!(),
        }
    }

    /// A loop on a blob of `container` in Azurite (created here).
    pub async fn azure(container: &str) -> anyhow::Result<RawLoop> {
        let requests = Arc::new(AtomicU64::new(0));
        let backend = azure::backend(container, requests.clone())?;
        let client = backend.container_client();
        if let Err(e) = client.create(None).await {
            if e.http_status().map(u16::from) != Some(409) {
                return Err(e.into());
            }
        }
        let blob = client.blob_client(RAW_KEY);
        let options = BlockBlobClientUploadOptions {
            if_none_match: Some(Etag::from("*")),
            ..Default::default()
        };
        let _ = blob
            .upload(RequestContent::from(Vec::<u8>::new()), Some(options))
            .await;
        let props = blob.get_properties(None).await?;
        let etag = props
            .headers()
            .get_optional_str(&azure_core::http::headers::ETAG)
            .unwrap_or_default()
            .to_string();
        requests.store(0, Ordering::Relaxed);
        Ok(RawLoop::Azure {
            blob,
            etag,
            requests,
            fence: 0,
        })
    }

    /// A loop on `client`'s `table` (its item put here).
    pub async fn dynamo(client: aws_sdk_dynamodb::Client, table: &str) -> anyhow::Result<RawLoop> {
        dynamo::dynamo_prime(&client, table).await?;
        Ok(RawLoop::Dynamo {
            client,
            table: table.to_string(),
        })
    }

    /// A loop on an object of `backend`'s store (created here), on
    /// leasehold's own client.
    pub async fn s3(backend: &leasehold_s3::S3Backend) -> anyhow::Result<RawLoop> {
        Ok(RawLoop::S3(S3Raw::new(backend).await?))
    }

    /// A loop on `backend`'s table, on a connection of its own to the
    /// server `url` names.
    pub async fn postgres(
        backend: &leasehold_postgres::PostgresBackend,
        url: &str,
    ) -> anyhow::Result<RawLoop> {
        let config = leasehold_postgres::PostgresBackendBuilder::from_url(url)?
            .config()
            .clone();
        let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        let (acquire, release) = backend.acquire_release_sql();
        // Prepared once, as leasehold prepares its statements on a direct
        // connection (and types as leasehold gives them).
        use tokio_postgres::types::Type;
        let acquire = client
            .prepare_typed(
                acquire,
                &[
                    Type::TEXT,
                    Type::TEXT,
                    Type::INT8,
                    Type::INT8,
                    Type::TEXT,
                    Type::INT8,
                    Type::TEXT,
                    Type::TEXT,
                ],
            )
            .await?;
        let release = client
            .prepare_typed(release, &[Type::TEXT, Type::TEXT])
            .await?;
        Ok(RawLoop::Postgres {
            client,
            acquire,
            release,
            epoch: backend.epoch().await?.epoch as i64,
            requests: Arc::new(AtomicU64::new(0)),
        })
    }

    /// A loop on `backend`'s table, on a connection of its own to the
    /// server `url` names.
    pub async fn mysql(
        backend: &leasehold_mysql::MysqlBackend,
        url: &str,
    ) -> anyhow::Result<RawLoop> {
        let opts = leasehold_mysql::MysqlBackendBuilder::from_url(url)?
            .opts()
            .clone();
        // Over TCP to the address the URL names, as the backend connects:
        // left to the client's default, a loopback connection moves to the
        // server's Unix socket, and the raw loop ran over a faster
        // transport than leasehold (the general log said "using Socket"
        // for it, "using TCP/IP" for the backend's pool).
        let opts = leasehold_mysql::mysql_async::OptsBuilder::from_opts(opts).prefer_socket(false);
        let conn = leasehold_mysql::mysql_async::Conn::new(opts).await?;
        let raw = backend.raw_sql();
        Ok(RawLoop::Mysql {
            conn,
            sql: MysqlSql {
                share_epoch: raw.share_epoch.into(),
                lock_key: raw.lock_key.into(),
                insert_grant: raw.insert_grant.into(),
                update_grant: raw.update_grant.into(),
                release: raw.release.into(),
            },
            epoch: backend.epoch().await?.epoch,
            requests: Arc::new(AtomicU64::new(0)),
        })
    }

    /// A loop on `backend`'s store, on a connection of its own to the
    /// server `url` names.
    pub async fn redis(
        backend: &leasehold_redis::RedisBackend,
        url: &str,
    ) -> anyhow::Result<RawLoop> {
        use leasehold_redis::redis;
        let base = url.split('?').next().unwrap_or(url);
        let client = redis::Client::open(base)?;
        let conn = redis::aio::ConnectionManager::new(client).await?;
        let (acquire, release) = leasehold_redis::acquire_and_release_scripts();
        Ok(RawLoop::Redis {
            conn,
            acquire: redis::Script::new(&acquire),
            release: redis::Script::new(&release),
            prefix: backend.prefix().to_string(),
            epoch: backend.epoch().await?.epoch,
            requests: Arc::new(AtomicU64::new(0)),
        })
    }

    /// A loop on `backend`'s store, on a client of its own to the server
    /// `url` names (with the connect options leasehold-etcd's builder
    /// sets).
    pub async fn etcd(backend: &leasehold_etcd::EtcdBackend, url: &str) -> anyhow::Result<RawLoop> {
        let endpoints: Vec<String> = etcd_endpoints(url)?
            .into_iter()
            .map(|e| format!("http://{e}"))
            .collect();
        let timeout = Duration::from_secs(5);
        let client = leasehold_etcd::grpc::Connection::connect(&endpoints, timeout, None)
            .await
            .context("connecting the raw etcd client")?;
        let prefix = backend.prefix().to_string();
        let state = EtcdRaw::start(&client, &prefix).await?;
        Ok(RawLoop::Etcd {
            client,
            prefix,
            state,
            requests: Arc::new(AtomicU64::new(0)),
        })
    }

    /// A loop on `backend`'s store, on a session of its own to the
    /// ensemble `url` names; the raw key's record is created first by one
    /// leasehold cycle on `store` (`backend`'s).
    pub async fn zookeeper(
        backend: &leasehold_zookeeper::ZkBackend,
        store: &leasehold::Store,
        url: &str,
    ) -> anyhow::Result<RawLoop> {
        store.lock(RAW_KEY)?.try_acquire().await?.release().await?;
        let client = leasehold_zookeeper::zookeeper_client::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(&zk_hosts(url)?)
            .await
            .context("connecting the raw ZooKeeper client")?;
        let epoch = backend.epoch().await?.epoch;
        let path = backend.record_path(epoch, &leasehold::Key::new(RAW_KEY)?);
        Ok(RawLoop::Zookeeper {
            raw: ZkRaw {
                client,
                path,
                epoch,
            },
            requests: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The etcd peer (see [`RawLoop::EtcdPeer`]), its session opened.
    pub async fn etcd_peer() -> anyhow::Result<RawLoop> {
        Ok(RawLoop::EtcdPeer {
            session: crate::peer_etcd::Session::open().await?,
            name: format!("leasehold-bench-peer/etcd-rounds-{}", std::process::id()),
            requests: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Ends the loop: the etcd peer's session is revoked (the others hold
    /// nothing between cycles).
    pub async fn close(self) {
        if let RawLoop::EtcdPeer { session, .. } = self {
            session.close().await;
        }
    }

    /// Requests the loop's own client sent (all but SQLite, DynamoDB and
    /// S3, which the caller counts).
    pub fn own_requests(&self) -> Option<u64> {
        match self {
            RawLoop::Azure { requests, .. }
            | RawLoop::Postgres { requests, .. }
            | RawLoop::Mysql { requests, .. }
            | RawLoop::Redis { requests, .. }
            | RawLoop::Etcd { requests, .. }
            | RawLoop::Zookeeper { requests, .. }
            | RawLoop::EtcdPeer { requests, .. } => Some(requests.load(Ordering::Relaxed)),
            _ => None,
        }
    }

    /// Runs cycles for up to `time` and `max` cycles; returns the count and
    /// the elapsed time.
    pub async fn run(&mut self, time: Duration, max: u64) -> anyhow::Result<(u64, Duration)> {
        let start = Instant::now();
        let mut n = 0;
        match self {
            RawLoop::Sqlite(slot) => {
                let mut conn = slot.take().ok_or_else(|| anyhow!("no connection"))?;
                let (conn, result) = tokio::task::spawn_blocking(move || {
                    let mut n = 0;
                    let result = (|| {
                        while n < max && start.elapsed() < time {
                            sqlite_cycle(&mut conn)?;
                            n += 1;
                        }
                        anyhow::Ok(n)
                    })();
                    (conn, result)
                })
                .await?;
                *slot = Some(conn);
                n = result?;
            }
            _ => {
                while n < max && start.elapsed() < time {
                    self.cycle().await?;
                    n += 1;
                }
            }
        }
        Ok((n, start.elapsed()))
    }

    /// One acquire + release of the loops that run on the async runtime.
    async fn cycle(&mut self) -> anyhow::Result<()> {
        match self {
            RawLoop::Sqlite(_) => {
                unreachable!("the SQLite loop runs its cycles on one blocking thread")
            }
            RawLoop::SqliteHop(conn) => {
                let c = conn.clone();
                let lease_id = tokio::task::spawn_blocking(move || {
                    sqlite_acquire(&mut c.lock().unwrap_or_else(|e| e.into_inner()))
                })
                .await??;
                let c = conn.clone();
                tokio::task::spawn_blocking(move || {
                    sqlite_release(&c.lock().unwrap_or_else(|e| e.into_inner()), &lease_id)
                })
                .await??;
            }
            RawLoop::Azure {
                blob, etag, fence, ..
            } => azure_cycle(blob, etag, fence).await?,
            RawLoop::Dynamo { client, table } => dynamo_cycle(client, table).await?,
            RawLoop::S3(raw) => raw.cycle().await?,
            RawLoop::Redis {
                conn,
                acquire,
                release,
                prefix,
                epoch,
                requests,
            } => {
                redis_cycle(conn, acquire, release, prefix, *epoch).await?;
                requests.fetch_add(2, Ordering::Relaxed);
            }
            RawLoop::Postgres {
                client,
                acquire,
                release,
                epoch,
                requests,
            } => {
                postgres_cycle(client, acquire, release, *epoch).await?;
                requests.fetch_add(2, Ordering::Relaxed);
            }
            RawLoop::Mysql {
                conn,
                sql,
                epoch,
                requests,
            } => {
                mysql_cycle(conn, sql, *epoch).await?;
                // Counted as leasehold's are (backend calls: the acquire's
                // transaction is one), so the two columns compare.
                requests.fetch_add(2, Ordering::Relaxed);
            }
            RawLoop::Etcd {
                client,
                prefix,
                state,
                requests,
            } => etcd_cycle(client, prefix, state, requests).await?,
            RawLoop::Zookeeper { raw, requests } => {
                zk_cycle(raw).await?;
                requests.fetch_add(3, Ordering::Relaxed);
            }
            RawLoop::EtcdPeer {
                session,
                name,
                requests,
            } => {
                crate::peer_etcd::cycle(&session.client, name, session.lease).await?;
                requests.fetch_add(2, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}
