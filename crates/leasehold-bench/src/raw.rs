//! The raw loops: the same minimal requests leasehold's protocols send for
//! an uncontended acquire + release, issued directly with the same SDK and
//! client settings, without leasehold. They are the physical limit that
//! figure 1 compares leasehold with.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Context};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_s3::primitives::ByteStream;
use azure_core::credentials::Secret;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{
    ClientOptions, Context as AzContext, Etag, ExponentialRetryOptions, Request, RequestContent,
    RetryOptions, Transport, Url,
};
use azure_core::time::{to_rfc7231, OffsetDateTime};
use azure_storage_blob::models::{
    BlobClientAcquireLeaseOptions, BlobClientSetMetadataOptions, BlockBlobClientUploadOptions,
};
use azure_storage_blob::{BlobClient, BlobContainerClient, BlobContainerClientOptions};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde_json::json;

use crate::sys::mono_ns;
use leasehold_stores::CountTries as CountRequests;

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

const RAW_KEY: &str = "raw-overhead";

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
        let client = container_client(container, requests.clone())?;
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

    /// A loop on `client`'s `table`.
    pub fn dynamo(client: aws_sdk_dynamodb::Client, table: &str) -> RawLoop {
        RawLoop::Dynamo {
            client,
            table: table.to_string(),
        }
    }

    /// A loop on an object of `backend`'s store (created here), on
    /// leasehold's own client.
    pub async fn s3(backend: &leasehold_s3::S3Backend) -> anyhow::Result<RawLoop> {
        let mut raw = S3Raw {
            client: backend.client().clone(),
            bucket: backend.bucket().to_string(),
            object: backend.object_name(&leasehold::Key::new(RAW_KEY)?),
            // leasehold-s3's epoch marker, `!leasehold-epoch` under the
            // prefix (its crate docs, "Objects").
            marker: format!("{}!leasehold-epoch", backend.prefix()),
            etag: String::new(),
            epoch: backend.epoch().epoch,
            fence: 0,
            owner: serde_json::to_value(leasehold::Owner::current())?,
        };
        // The object's first write: a free record.
        let free = json!({ "v": 1, "nonce": s3_nonce(), "epoch": raw.epoch, "fence": 0 });
        raw.etag = raw.put(&free, None).await?;
        Ok(RawLoop::S3(raw))
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

    /// Requests the loop's own client sent (all but SQLite, DynamoDB and
    /// S3, which the caller counts).
    pub fn own_requests(&self) -> Option<u64> {
        match self {
            RawLoop::Azure { requests, .. }
            | RawLoop::Postgres { requests, .. }
            | RawLoop::Redis { requests, .. }
            | RawLoop::Etcd { requests, .. } => Some(requests.load(Ordering::Relaxed)),
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
            RawLoop::SqliteHop(conn) => {
                while n < max && start.elapsed() < time {
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
                    n += 1;
                }
            }
            RawLoop::Azure {
                blob, etag, fence, ..
            } => {
                while n < max && start.elapsed() < time {
                    azure_cycle(blob, etag, fence).await?;
                    n += 1;
                }
            }
            RawLoop::Dynamo { client, table } => {
                while n < max && start.elapsed() < time {
                    dynamo_cycle(client, table).await?;
                    n += 1;
                }
            }
            RawLoop::S3(raw) => {
                while n < max && start.elapsed() < time {
                    raw.cycle().await?;
                    n += 1;
                }
            }
            RawLoop::Redis {
                conn,
                acquire,
                release,
                prefix,
                epoch,
                requests,
            } => {
                while n < max && start.elapsed() < time {
                    redis_cycle(conn, acquire, release, prefix, *epoch).await?;
                    requests.fetch_add(2, Ordering::Relaxed);
                    n += 1;
                }
            }
            RawLoop::Postgres {
                client,
                acquire,
                release,
                epoch,
                requests,
            } => {
                while n < max && start.elapsed() < time {
                    postgres_cycle(client, acquire, release, *epoch).await?;
                    requests.fetch_add(2, Ordering::Relaxed);
                    n += 1;
                }
            }
            RawLoop::Etcd {
                client,
                prefix,
                state,
                requests,
            } => {
                while n < max && start.elapsed() < time {
                    etcd_cycle(client, prefix, state, requests).await?;
                    n += 1;
                }
            }
        }
        Ok((n, start.elapsed()))
    }
}

fn sqlite_cycle(conn: &mut Connection) -> anyhow::Result<()> {
    let lease_id = sqlite_acquire(conn)?;
    sqlite_release(conn, &lease_id)
}

/// The acquisition, committed with `synchronous=FULL` as leasehold does.
fn sqlite_acquire(conn: &mut Connection) -> anyhow::Result<String> {
    conn.pragma_update(None, "synchronous", "FULL")?;
    let acquired = sqlite_acquire_tx(conn);
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    acquired
}

fn sqlite_acquire_tx(conn: &mut Connection) -> anyhow::Result<String> {
    let lease_id = uuid::Uuid::new_v4().to_string();
    let now = mono_ns() as i64;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let row: Option<(i64, Option<String>, Option<i64>)> = tx
        .query_row(
            "SELECT fence, lease_id, expires_at_ns FROM leasehold_leases WHERE key = ?1",
            [RAW_KEY],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let fence = match row {
        Some((_, Some(_), Some(exp))) if exp > now => return Err(anyhow!("raw key held")),
        Some((f, _, _)) => f + 1,
        None => 1,
    };
    tx.execute(
        "INSERT INTO leasehold_leases (key, fence, lease_id, boot_id, expires_at_ns, ttl_ms, owner_host, owner_pid, owner_label, data, acquired_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
         ON CONFLICT(key) DO UPDATE SET fence = excluded.fence, lease_id = excluded.lease_id,
           boot_id = excluded.boot_id, expires_at_ns = excluded.expires_at_ns, ttl_ms = excluded.ttl_ms,
           owner_host = excluded.owner_host, owner_pid = excluded.owner_pid, owner_label = excluded.owner_label,
           data = excluded.data, acquired_at_ms = excluded.acquired_at_ms",
        params![
            RAW_KEY,
            fence,
            lease_id,
            "boot",
            now + 30_000_000_000,
            30_000,
            "host",
            std::process::id() as i64,
            Option::<String>::None,
            Option::<String>::None,
            unix_ms() as i64,
        ],
    )?;
    tx.commit()?;
    Ok(lease_id)
}

fn sqlite_release(conn: &Connection, lease_id: &str) -> anyhow::Result<()> {
    conn.execute(
        "UPDATE leasehold_leases SET lease_id = NULL, boot_id = NULL, expires_at_ns = NULL
         WHERE key = ?1 AND lease_id = ?2",
        params![RAW_KEY, lease_id],
    )?;
    Ok(())
}

/// leasehold's two scripts with the arguments its backend sends (see
/// `crates/leasehold-redis/src/lua/`).
async fn redis_cycle(
    conn: &mut leasehold_redis::redis::aio::ConnectionManager,
    acquire: &leasehold_redis::redis::Script,
    release: &leasehold_redis::redis::Script,
    prefix: &str,
    epoch: u64,
) -> anyhow::Result<()> {
    use leasehold_redis::redis::Value;
    let lease_id = uuid::Uuid::new_v4().to_string();
    let (marker, record) = (format!("{prefix}#epoch"), format!("{prefix}k:{RAW_KEY}"));
    let granted: Value = acquire
        .key(&marker)
        .key(&record)
        .key(format!("{prefix}#keys"))
        .arg(RAW_KEY)
        .arg(&lease_id)
        .arg(30_000u64)
        .arg(epoch)
        .arg(30_000u64)
        .arg("host")
        .arg(std::process::id())
        .arg("")
        .arg("")
        .invoke_async(conn)
        .await
        .context("raw Redis acquire")?;
    match &granted {
        Value::Array(items) if items.first() == Some(&Value::Int(1)) => {}
        other => return Err(anyhow!("raw Redis acquire granted nothing: {other:?}")),
    }
    let released: String = release
        .key(&marker)
        .key(&record)
        .arg(&lease_id)
        .arg(epoch)
        .arg(format!("{prefix}#released"))
        .arg(RAW_KEY)
        .invoke_async(conn)
        .await
        .context("raw Redis release")?;
    if released != "ok" {
        return Err(anyhow!("raw Redis release changed nothing: {released}"));
    }
    Ok(())
}

async fn postgres_cycle(
    client: &tokio_postgres::Client,
    acquire: &tokio_postgres::Statement,
    release: &tokio_postgres::Statement,
    epoch: i64,
) -> anyhow::Result<()> {
    let lease_id = uuid::Uuid::new_v4().to_string();
    let (ttl_ms, pid) = (30_000i64, std::process::id() as i64);
    let (label, data) = (Option::<String>::None, Option::<String>::None);
    let rows = client
        .query(
            acquire,
            &[
                &RAW_KEY,
                &lease_id.as_str(),
                &ttl_ms,
                &epoch,
                &"host",
                &pid,
                &label,
                &data,
            ],
        )
        .await
        .context("raw PostgreSQL acquire")?;
    let granted = rows
        .first()
        .and_then(|r| r.get::<_, Option<i64>>("granted"));
    if granted.is_none() {
        return Err(anyhow!("raw PostgreSQL acquire granted nothing"));
    }
    let rows = client
        .query(release, &[&RAW_KEY, &lease_id.as_str()])
        .await
        .context("raw PostgreSQL release")?;
    if !rows.first().is_some_and(|r| r.get::<_, bool>("done")) {
        return Err(anyhow!("raw PostgreSQL release changed nothing"));
    }
    Ok(())
}

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
    async fn start(
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
async fn etcd_cycle(
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
    let resp = client
        .kv()
        .txn(txn)
        .await
        .context("raw etcd acquire")?
        .into_inner();
    requests.fetch_add(1, Ordering::Relaxed);
    if !resp.succeeded {
        return Err(anyhow!("raw etcd acquire granted nothing"));
    }
    state.record = Some(record);
    state.last = token;

    let txn = TxnRequest {
        compare: vec![grpc::value_is(hk.clone(), holder)],
        success: vec![grpc::delete(hk)],
        failure: Vec::new(),
    };
    let resp = client
        .kv()
        .txn(txn)
        .await
        .context("raw etcd release")?
        .into_inner();
    requests.fetch_add(1, Ordering::Relaxed);
    if !resp.succeeded {
        return Err(anyhow!("raw etcd release: the key is not ours"));
    }
    Ok(())
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

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

async fn azure_cycle(blob: &BlobClient, etag: &mut String, fence: &mut u64) -> anyhow::Result<()> {
    let lease_id = uuid::Uuid::new_v4().to_string();
    let mut meta = HashMap::new();
    *fence += 1;
    meta.insert("leaseholdfence".to_string(), fence.to_string());
    meta.insert("leaseholdlease".to_string(), lease_id[..16].to_string());
    meta.insert("leaseholdhost".to_string(), "host".to_string());
    meta.insert("leaseholdpid".to_string(), std::process::id().to_string());
    meta.insert("leaseholdacquiredms".to_string(), unix_ms().to_string());
    meta.insert("leaseholdttlms".to_string(), "30000".to_string());
    let options = BlobClientSetMetadataOptions {
        if_match: Some(Etag::from(etag.as_str())),
        ..Default::default()
    };
    let resp = blob.set_metadata(&meta, Some(options)).await?;
    *etag = resp
        .headers()
        .get_optional_str(&azure_core::http::headers::ETAG)
        .unwrap_or_default()
        .to_string();
    let options = BlobClientAcquireLeaseOptions {
        proposed_lease_id: Some(lease_id.clone()),
        if_match: Some(Etag::from(etag.as_str())),
        ..Default::default()
    };
    blob.acquire_lease(30, Some(options)).await?;
    blob.release_lease(lease_id, None).await?;
    Ok(())
}

async fn dynamo_cycle(client: &aws_sdk_dynamodb::Client, table: &str) -> anyhow::Result<()> {
    let s = |v: &str| AttributeValue::S(v.to_string());
    let n = |v: u64| AttributeValue::N(v.to_string());
    let lease_id = uuid::Uuid::new_v4().to_string();
    let now = unix_ms();
    let names = [
        ("#f", "fence"),
        ("#r", "rvn"),
        ("#l", "lease_id"),
        ("#h", "owner_host"),
        ("#p", "owner_pid"),
        ("#t", "ttl_ms"),
        ("#a", "acquired_ms"),
        ("#e", "expires_ms"),
        ("#rb", "released_by"),
        ("#ol", "owner_label"),
        ("#d", "data"),
        ("#g", "gc_at"),
    ];
    let mut req = client
        .update_item()
        .table_name(table)
        .key("lease_key", s(RAW_KEY))
        .update_expression(
            "SET #f = if_not_exists(#f, :zero) + :one, #r = :rvn, #l = :lid, #h = :host, #p = :pid, #t = :ttl, #a = :now, #e = :exp REMOVE #rb, #ol, #d, #g",
        )
        .condition_expression("attribute_not_exists(#l)")
        .expression_attribute_values(":zero", n(0))
        .expression_attribute_values(":one", n(1))
        .expression_attribute_values(":rvn", s(&uuid::Uuid::new_v4().to_string()))
        .expression_attribute_values(":lid", s(&lease_id))
        .expression_attribute_values(":host", s("host"))
        .expression_attribute_values(":pid", n(std::process::id() as u64))
        .expression_attribute_values(":ttl", n(30_000))
        .expression_attribute_values(":now", n(now))
        .expression_attribute_values(":exp", n(now + 30_000))
        .return_values(ReturnValue::AllNew)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
    for (k, v) in names {
        req = req.expression_attribute_names(k, v);
    }
    let out = req.send().await.context("raw DynamoDB grant")?;
    let _fence = out
        .attributes()
        .and_then(|a| a.get("fence"))
        .and_then(|v| v.as_n().ok())
        .ok_or_else(|| anyhow!("no fence in the grant"))?;
    let names = [
        ("#r", "rvn"),
        ("#rb", "released_by"),
        ("#l", "lease_id"),
        ("#h", "owner_host"),
        ("#p", "owner_pid"),
        ("#t", "ttl_ms"),
        ("#a", "acquired_ms"),
        ("#e", "expires_ms"),
        ("#ol", "owner_label"),
        ("#d", "data"),
        ("#g", "gc_at"),
    ];
    let mut req = client
        .update_item()
        .table_name(table)
        .key("lease_key", s(RAW_KEY))
        .update_expression("SET #r = :rvn, #rb = :lid REMOVE #l, #h, #p, #t, #a, #e, #ol, #d, #g")
        .condition_expression("#l = :lid")
        .expression_attribute_values(":rvn", s(&uuid::Uuid::new_v4().to_string()))
        .expression_attribute_values(":lid", s(&lease_id))
        .return_values(ReturnValue::None)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
    for (k, v) in names {
        req = req.expression_attribute_names(k, v);
    }
    req.send().await.context("raw DynamoDB release")?;
    Ok(())
}

/// The raw S3 loop: its object, as it last wrote it, and the store's
/// epoch marker.
pub struct S3Raw {
    /// leasehold's client.
    client: aws_sdk_s3::Client,
    bucket: String,
    /// The raw key's object, in the store's prefix.
    object: String,
    /// The epoch marker's object.
    marker: String,
    /// The object's ETag after our last write.
    etag: String,
    /// The store's epoch and the record's last fencing token.
    epoch: u64,
    fence: u64,
    /// This process, as leasehold's records name a holder.
    owner: serde_json::Value,
}

impl S3Raw {
    /// leasehold's S3 requests for a free key this process wrote last (see
    /// `crates/leasehold-s3`: the crate docs' "Requests" and `backend.rs`),
    /// with records of leasehold's layout: the grant, `PutObject` of the
    /// record with the next token and our lease `If-Match` the ETag of our
    /// last write, then `GetObject` of the epoch marker, whose
    /// `Last-Modified` must still be the grant's epoch; the release,
    /// `PutObject` of the record freed (`released_by`) `If-Match` the
    /// grant's ETag. Every record has a fresh nonce, as leasehold's have.
    async fn cycle(&mut self) -> anyhow::Result<()> {
        let lease_id = uuid::Uuid::new_v4().to_string();
        let fence = leasehold::backend::next_token(self.fence, self.epoch);
        let now = unix_ms();
        let held = json!({
            "v": 1,
            "nonce": s3_nonce(),
            "epoch": self.epoch,
            "fence": fence,
            "lease": {
                "id": lease_id,
                "owner": self.owner,
                "ttl_ms": 30_000,
                "acquired_ms": now,
                "expires_ms": now + 30_000,
            },
        });
        self.etag = self
            .put(&held, Some(&self.etag))
            .await
            .context("raw S3 grant")?;
        self.fence = fence;
        let marker = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&self.marker)
            .send()
            .await
            .context("raw S3 marker read")?;
        let written = marker
            .last_modified()
            .and_then(|t| SystemTime::try_from(*t).ok())
            .map(leasehold::backend::epoch_at);
        let body = marker.body.collect().await?.into_bytes();
        serde_json::from_slice::<serde_json::Value>(&body).context("raw S3 marker")?;
        if written != Some(self.epoch) {
            return Err(anyhow!("raw S3: the store's epoch changed"));
        }
        let free = json!({
            "v": 1,
            "nonce": s3_nonce(),
            "epoch": self.epoch,
            "fence": fence,
            "released_by": lease_id,
        });
        self.etag = self
            .put(&free, Some(&self.etag))
            .await
            .context("raw S3 release")?;
        Ok(())
    }

    /// One `PutObject` of `record`, as leasehold-s3 sends it: `If-Match`
    /// the ETag given, or `If-None-Match: *` without one. Returns the new
    /// ETag.
    async fn put(&self, record: &serde_json::Value, etag: Option<&str>) -> anyhow::Result<String> {
        let put = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(&self.object)
            .content_type("application/json")
            .body(ByteStream::from(serde_json::to_vec(record)?));
        let put = match etag {
            Some(etag) => put.if_match(etag),
            None => put.if_none_match("*"),
        };
        let out = put.send().await?;
        out.e_tag()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("no ETag in the answer"))
    }
}

/// Fresh random bytes for a record, as leasehold-s3 makes them.
fn s3_nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A container client for Azurite with the settings leasehold-azure's
/// builder uses (API version, retry policy, reqwest transport and timeouts,
/// shared-key signing), counting requests.
fn container_client(
    container: &str,
    requests: Arc<AtomicU64>,
) -> anyhow::Result<BlobContainerClient> {
    let mut url = Url::parse(leasehold_azure::DEV_ENDPOINT)?;
    url.path_segments_mut()
        .map_err(|_| anyhow!("endpoint"))?
        .push(container);
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .build()?;
    let options = BlobContainerClientOptions {
        client_options: ClientOptions {
            per_try_policies: vec![
                Arc::new(CountRequests(requests)),
                Arc::new(SharedKey {
                    account: leasehold_azure::DEV_ACCOUNT.to_string(),
                    key: Secret::new(AZURITE_KEY),
                }),
            ],
            retry: RetryOptions::exponential(ExponentialRetryOptions {
                initial_delay: azure_core::time::Duration::milliseconds(200),
                max_retries: 3,
                max_total_elapsed: azure_core::time::Duration::seconds(10),
                max_delay: azure_core::time::Duration::seconds(2),
            }),
            transport: Some(Transport::new(Arc::new(http))),
            ..Default::default()
        },
        version: leasehold_azure::API_VERSION.to_string(),
    };
    Ok(BlobContainerClient::new(url, None, Some(options))?)
}

/// Azurite's published development account key.
const AZURITE_KEY: &str = leasehold_azure::DEV_KEY;

/// Shared-key signing (the SDK has none), as leasehold-azure does it.
#[derive(Debug)]
struct SharedKey {
    account: String,
    key: Secret,
}

#[async_trait]
impl Policy for SharedKey {
    async fn send(
        &self,
        ctx: &AzContext,
        request: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        request.insert_header("x-ms-date", to_rfc7231(&OffsetDateTime::now_utc()));
        let signature =
            azure_core::hmac::hmac_sha256(&canonical(&self.account, request), &self.key)?;
        request.insert_header(
            "authorization",
            format!("SharedKey {}:{signature}", self.account),
        );
        next[0].send(ctx, request, &next[1..]).await
    }
}

/// The string a shared-key signature covers: verb, standard headers,
/// `x-ms-*` headers sorted, then `/account/path` and the sorted query.
fn canonical(account: &str, request: &Request) -> String {
    let get = |name: &str| {
        request
            .headers()
            .iter()
            .find(|(n, _)| n.as_str().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str().to_string())
            .unwrap_or_default()
    };
    let mut length = get("content-length");
    if length == "0" || length.is_empty() {
        length = request
            .body()
            .len()
            .filter(|n| *n > 0)
            .map(|n| n.to_string())
            .unwrap_or_default();
    }
    let standard = [
        get("content-encoding"),
        get("content-language"),
        length,
        get("content-md5"),
        get("content-type"),
        String::new(),
        get("if-modified-since"),
        get("if-match"),
        get("if-none-match"),
        get("if-unmodified-since"),
        get("range"),
    ];
    let mut out = format!("{}\n{}\n", request.method().as_ref(), standard.join("\n"));
    let mut ms: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_ascii_lowercase(),
                v.as_str().trim().to_string(),
            )
        })
        .filter(|(n, _)| n.starts_with("x-ms-"))
        .collect();
    ms.sort();
    for (n, v) in ms {
        out.push_str(&format!("{n}:{v}\n"));
    }
    let url = request.url();
    out.push_str(&format!("/{account}{}", url.path()));
    let mut query: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.into_owned()))
        .collect();
    query.sort();
    let mut i = 0;
    while i < query.len() {
        let name = query[i].0.clone();
        let mut values = Vec::new();
        while i < query.len() && query[i].0 == name {
            values.push(query[i].1.clone());
            i += 1;
        }
        out.push_str(&format!("\n{name}:{}", values.join(",")));
    }
    out
}
