//! The [`Backend`] implementation: one statement per operation (see the
//! crate docs for the protocol).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use leasehold::backend::{AcquireOutcome, AcquireRequest, Backend, Capabilities, Grant, Lease};
use leasehold::{backend::StoreEpoch, Error, HolderInfo, Key, KeyInfo, LossReason, Result};
use tokio::time::{timeout_at, Instant};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use crate::builder::{PostgresBackendBuilder, SslMode};
use crate::error::{self, NAME};
use crate::listen::{self, Announcements};
use crate::record::{self, EpochRow, EPOCH_KEY, HOLDER_COLUMNS};
use crate::MIN_TTL;
use leasehold::backend::Listener;

/// The PostgreSQL [`Backend`]. See the [crate docs](crate) for the protocol.
/// Cheap to clone (the pool is shared).
#[derive(Clone)]
pub struct PostgresBackend {
    inner: Arc<Inner>,
}

struct Inner {
    /// The store's epoch as read while opening.
    opened: std::sync::OnceLock<leasehold::backend::EpochRead>,
    pool: Pool,
    table: String,
    sql: Statements,
    /// The max TTL a table (or epoch) started by this backend records.
    max_ttl: Duration,
    /// The table's recorded max TTL, in ms (for `capabilities`).
    store_max_ttl_ms: AtomicU64,
    request_timeout: Duration,
    /// Statements are named and prepared once per connection (see
    /// [`PostgresBackendBuilder::prepared`]).
    prepared: bool,
    /// `host:port/db`, for Debug (never the user or password).
    target: String,
    /// LISTENs for releases, when wake-ups are on.
    listener: Option<Listener>,
    /// What opening (and any later settling) may do to the table.
    creation: leasehold::Creation,
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("target", &self.inner.target)
            .field("table", &self.inner.table)
            .finish_non_exhaustive()
    }
}

/// A failed statement: the client's error (to look at its SQL state) or one
/// of ours.
enum Fail {
    Db(tokio_postgres::Error),
    Other(Error),
}

impl Fail {
    fn into_error(self, op: &'static str) -> Error {
        match self {
            Fail::Db(e) => error::db(op, e),
            Fail::Other(e) => e,
        }
    }

    fn missing_table(&self) -> bool {
        matches!(self, Fail::Db(e) if error::is_missing_table(e))
    }
}

type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

impl PostgresBackend {
    /// A builder for the server `config` describes (see
    /// [`PostgresBackendBuilder`]).
    pub fn builder(config: tokio_postgres::Config) -> PostgresBackendBuilder {
        PostgresBackendBuilder::new(config)
    }

    /// Opens the store a URL names (see the crate docs for its form; the
    /// `PG*` environment variables fill in what it omits): connects,
    /// creates the table if missing and reads its store epoch.
    ///
    /// # Errors
    /// As [`PostgresBackendBuilder::from_url`] and
    /// [`PostgresBackendBuilder::build`].
    pub async fn from_url(url: &str) -> Result<Self> {
        PostgresBackendBuilder::from_url(url)?.build().await
    }

    pub(crate) async fn connect(b: PostgresBackendBuilder) -> Result<Self> {
        let mut config = b.config.clone();
        config.ssl_mode(match b.ssl_mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        });
        let tls = crate::tls::connector(b.ssl_mode, b.root_cert.as_deref())?;
        let target = target_of(&config);
        let channel = b.wake_ups.then(|| listen::channel(&b.table));
        let listener = channel.clone().map(|channel| {
            Listener::new(Announcements {
                config: config.clone(),
                tls: tls.clone(),
                channel,
            })
        });
        let manager = Manager::from_config(
            config,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(b.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(b.request_timeout))
            .create_timeout(Some(b.request_timeout))
            .recycle_timeout(Some(b.request_timeout))
            .build()
            .map_err(|e| Error::backend(NAME, "open", false, e.to_string()))?;
        let backend = PostgresBackend {
            inner: Arc::new(Inner {
                pool,
                sql: Statements::new(&b.table, channel.as_deref()),
                table: b.table,
                max_ttl: b.max_ttl,
                store_max_ttl_ms: AtomicU64::new(b.max_ttl.as_millis() as u64),
                request_timeout: b.request_timeout,
                prepared: b.prepared.unwrap_or(b.wake_ups),
                target,
                listener,
                creation: b.creation,
                opened: Default::default(),
            }),
        };
        let row = backend.settle("open").await?;
        let _ = backend
            .inner
            .opened
            .set(leasehold::backend::EpochRead::now(row.store_epoch()));
        Ok(backend)
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// The acquire and release statements (their parameters as in
    /// `try_acquire` and `release`), for the benchmarks' raw loop, which
    /// sends the same statements on a client of its own.
    #[doc(hidden)]
    pub fn acquire_release_sql(&self) -> (&str, &str) {
        (&self.inner.sql.acquire, &self.inner.sql.release)
    }

    /// The table's store epoch, read now.
    ///
    /// # Errors
    /// [`Error::Backend`] when the server cannot be reached.
    pub async fn epoch(&self) -> Result<StoreEpoch> {
        Ok(self.settle("epoch").await?.store_epoch())
    }

    /// Waits until this backend LISTENs for releases (started on the first
    /// wait otherwise). Returns at once when wake-ups are off.
    ///
    /// # Cancel safety
    /// Cancel safe: the listening goes on.
    pub async fn listening(&self) {
        if let Some(l) = &self.inner.listener {
            l.listening().await;
        }
    }

    /// A pooled connection, within `deadline`.
    async fn client(&self, op: &'static str, deadline: Instant) -> Result<Object> {
        match timeout_at(deadline, self.inner.pool.get()).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(error::pool(op, e)),
            Err(_) => Err(error::timed_out(op, self.inner.request_timeout)),
        }
    }

    /// Runs one statement, in one round trip: prepared once per connection
    /// and then bound and executed (`prepared`), or parsed, bound and
    /// executed as an unnamed statement, which works through a
    /// transaction-mode pooler.
    async fn rows(
        &self,
        op: &'static str,
        sql: &str,
        params: &Params<'_>,
    ) -> std::result::Result<Vec<Row>, Fail> {
        let deadline = Instant::now() + self.inner.request_timeout;
        let client = self.client(op, deadline).await.map_err(Fail::Other)?;
        let run = async {
            if self.inner.prepared {
                let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
                let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
                let statement = client.prepare_typed_cached(sql, &types).await?;
                client.query(&statement, &values).await
            } else {
                client.query_typed(sql, params).await
            }
        };
        match timeout_at(deadline, run).await {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(e)) => Err(Fail::Db(e)),
            Err(_) => {
                // The connection may be dead (a partition): never reuse it.
                drop(Object::take(client));
                Err(Fail::Other(error::timed_out(
                    op,
                    self.inner.request_timeout,
                )))
            }
        }
    }

    async fn one(
        &self,
        op: &'static str,
        sql: &str,
        params: &Params<'_>,
    ) -> std::result::Result<Row, Fail> {
        let mut rows = self.rows(op, sql, params).await?;
        rows.pop().ok_or_else(|| {
            Fail::Other(Error::backend(
                NAME,
                op,
                true,
                "the statement returned no row",
            ))
        })
    }

    /// Creates the table if missing and reads its epoch, starting a new one
    /// where the epoch row is missing or was written in another table (see
    /// the crate docs).
    async fn settle(&self, op: &'static str) -> Result<EpochRow> {
        let deadline = Instant::now() + self.inner.request_timeout + Duration::from_secs(2);
        let mut client = self.client(op, deadline).await?;
        let result = timeout_at(deadline, self.settle_on(&mut client, op)).await;
        match result {
            Ok(Ok(row)) => {
                self.inner
                    .store_max_ttl_ms
                    .store(row.max_ttl.as_millis() as u64, Ordering::Relaxed);
                Ok(row)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => {
                drop(Object::take(client));
                Err(error::timed_out(op, self.inner.request_timeout))
            }
        }
    }

    async fn settle_on(&self, client: &mut Object, op: &'static str) -> Result<EpochRow> {
        let sql = &self.inner.sql;
        let db = |e| error::db(op, e);
        let look = self.inner.creation == leasehold::Creation::Never;
        // Fast path: the epoch row is there and was written in this table.
        match client.query_typed(&sql.read_epoch, &[]).await {
            Ok(rows) => {
                let found = rows.first().and_then(record::epoch);
                match found {
                    Some(row) if row.same_table => return Ok(row),
                    // Looking writes nothing: the row as it is (restored
                    // from another table, which the next acquirer renews),
                    // or an epoch of no age where there is none.
                    // (Not proven: the next acquirer starts a new epoch.)
                    Some(row) if look => {
                        return Ok(EpochRow {
                            proven: false,
                            ..row
                        })
                    }
                    None if look => return Ok(EpochRow::unknown(self.inner.max_ttl)),
                    _ => {}
                }
            }
            Err(e) if error::is_missing_table(&e) && look => {
                return Err(Error::no_store(format!(
                    "table {} does not exist",
                    self.inner.table
                )))
            }
            Err(e) if error::is_missing_table(&e) => {
                // Under the table's creation lock, which the transaction's
                // end releases (see the crate docs, "Creating the table").
                let tx = client.transaction().await.map_err(db)?;
                tx.batch_execute(&sql.create_table).await.map_err(db)?;
                tx.commit().await.map_err(db)?;
            }
            Err(e) => return Err(db(e)),
        }
        let max_ttl_ms = self.inner.max_ttl.as_millis() as i64;
        // Only the table created while opening is the operator's new store:
        // one created again later (dropped under us) is quarantined.
        let proven = op == "open" && self.inner.creation == leasehold::Creation::NewProven;
        let tx = client.transaction().await.map_err(db)?;
        let inserted = tx
            .query_typed(
                &sql.insert_epoch,
                &[(&max_ttl_ms, Type::INT8), (&proven, Type::BOOL)],
            )
            .await
            .map_err(db)?;
        let row = tx
            .query_typed(&sql.lock_epoch, &[])
            .await
            .map_err(db)?
            .first()
            .and_then(record::epoch)
            .ok_or_else(|| Error::backend(NAME, op, true, "the epoch row vanished"))?;
        if inserted.is_empty() && row.same_table {
            // Someone else settled it first.
            tx.commit().await.map_err(db)?;
            return Ok(row);
        }
        if !inserted.is_empty() {
            tracing::info!(table = %self.inner.table, "new store epoch: the table or its epoch row is new");
        } else {
            // The epoch row was written in another table: this one was
            // restored from a dump (or copied). Its counters may be behind
            // tokens already issued: start a new epoch above them.
            tracing::warn!(table = %self.inner.table, old_epoch = row.epoch, "the table was restored or copied: starting a new store epoch");
            tx.query_typed(&sql.renew_epoch, &[]).await.map_err(db)?;
        }
        // Every lease in the table belongs to data that was lost or restored.
        tx.query_typed(&sql.void_leases, &[]).await.map_err(db)?;
        // Commit only once the epoch's second has begun on the server's
        // clock, so that a table created after this one (dropped and
        // re-created) gets a greater epoch.
        tx.query_typed(&sql.wait_epoch_second, &[])
            .await
            .map_err(db)?;
        let row = tx
            .query_typed(&sql.lock_epoch, &[])
            .await
            .map_err(db)?
            .first()
            .and_then(record::epoch)
            .ok_or_else(|| Error::backend(NAME, op, true, "the epoch row vanished"))?;
        tx.commit().await.map_err(db)?;
        Ok(row)
    }

    fn check_ttl(&self, ttl: Duration, max: Duration) -> Result<()> {
        if ttl < MIN_TTL || ttl > max {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "{ttl:?} is outside {MIN_TTL:?}..={max:?} (the store's max TTL bounds the wait after the store's data is lost)"
                ),
            ));
        }
        Ok(())
    }
}

fn target_of(config: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "?".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", config.get_dbname().unwrap_or(""))
}

fn lost(key: &Key, why: impl Into<String>) -> Error {
    Error::LeaseLost {
        key: key.to_string(),
        reason: LossReason::Revoked(why.into()),
    }
}

/// The first key of the transaction-scoped advisory lock that serialises
/// creating a table (`pg_advisory_xact_lock(int, int)`; the second key is
/// the hash of the table's schema-qualified name): "lh" in ASCII. The
/// two-key form's lock space is apart from the one-key form's.
const CREATION_LOCK_CLASS: i32 = 0x6c68;

/// An SQL expression for the table's schema-qualified name, as `CREATE
/// TABLE` resolves it (an unqualified name goes to the current schema), so
/// that `leases` and `public.leases` take the same creation lock.
fn qualified_name(t: &str) -> String {
    match t.split_once('.') {
        Some((schema, table)) => format!("'{schema}.{table}'"),
        None => format!("current_schema() || '.{t}'"),
    }
}

/// The SQL of every operation, with the table's name in it.
struct Statements {
    create_table: String,
    read_epoch: String,
    insert_epoch: String,
    lock_epoch: String,
    renew_epoch: String,
    void_leases: String,
    wait_epoch_second: String,
    acquire: String,
    renew: String,
    release: String,
    inspect: String,
    list: String,
    break_lease: String,
    record_run: String,
}

impl Statements {
    /// With `channel`, releases and breaks NOTIFY it with the key.
    fn new(t: &str, channel: Option<&str>) -> Self {
        let notify = match channel {
            Some(ch) => format!(
                ", (SELECT count(*) FROM (SELECT pg_notify('{ch}', key) FROM u) AS n) AS notified"
            ),
            None => String::new(),
        };
        let origin = leasehold::backend::EPOCH_ORIGIN_UNIX_SECS;
        let epoch_cols = record::epoch_columns(t);
        let this_table = format!("'{t}'::regclass::oid");
        let this_cluster = record::THIS_CLUSTER;
        let same_table = record::same_table(t, "");
        let same_table_m = record::same_table(t, "m.");
        // The epoch of a store begun now: the server clock's next second.
        let next_second = format!(
            "greatest(1, floor(extract(epoch FROM clock_timestamp()))::bigint + 1 - {origin})"
        );
        Statements {
            create_table: format!(
                "SELECT pg_advisory_xact_lock({CREATION_LOCK_CLASS}, hashtext({qualified}));
                 {}",
                record::create_table(t),
                qualified = qualified_name(t),
            ),
            read_epoch: format!("SELECT {epoch_cols} FROM {t} WHERE key = '{EPOCH_KEY}'"),
            // $1 max TTL ms, $2 whether the creator states that no earlier
            // store existed: then a table with no lease rows gets a proven
            // epoch ([`PROVEN`](record::PROVEN) in the row's lease_id).
            insert_epoch: format!(
                "INSERT INTO {t} (key, fence, epoch, ttl_ms, acquired_at, table_oid, data, lease_id)
                 VALUES ('{EPOCH_KEY}', 0, {next_second}, $1, clock_timestamp(), {this_table},
                         {this_cluster},
                         CASE WHEN $2 AND NOT EXISTS (SELECT 1 FROM {t} WHERE key <> '{EPOCH_KEY}')
                              THEN '{proven}' END)
                 ON CONFLICT (key) DO NOTHING RETURNING epoch",
                proven = record::PROVEN,
            ),
            lock_epoch: format!(
                "SELECT {epoch_cols} FROM {t} WHERE key = '{EPOCH_KEY}' FOR UPDATE"
            ),
            renew_epoch: format!(
                "UPDATE {t} SET epoch = greatest(epoch + 1, {next_second}),
                   acquired_at = clock_timestamp(), table_oid = {this_table},
                   data = {this_cluster}, lease_id = NULL
                 WHERE key = '{EPOCH_KEY}'"
            ),
            void_leases: format!(
                "UPDATE {t} SET lease_id = NULL, expires_at = NULL
                 WHERE key <> '{EPOCH_KEY}' AND lease_id IS NOT NULL"
            ),
            wait_epoch_second: format!(
                "SELECT pg_sleep(least(1.1, greatest(0,
                   (SELECT epoch FROM {t} WHERE key = '{EPOCH_KEY}') + {origin}
                   - extract(epoch FROM clock_timestamp())::float8)))"
            ),
            // $1 key, $2 lease id, $3 ttl ms, $4 epoch, $5 host, $6 pid,
            // $7 label, $8 data.
            acquire: format!(
                "WITH m AS (
                    SELECT {epoch_cols} FROM {t} WHERE key = '{EPOCH_KEY}' FOR SHARE
                 ), g AS (
                    INSERT INTO {t} AS r (key, fence, epoch, lease_id, expires_at, ttl_ms,
                                          owner_host, owner_pid, owner_label, data, acquired_at)
                    SELECT $1, ($4 << 22) + 1, $4, $2,
                           clock_timestamp() + $3::float8 * interval '1 millisecond', $3,
                           $5, $6, $7, $8, clock_timestamp()
                    FROM m WHERE m.m_epoch = $4 AND m.m_same_table AND $3 <= m.m_ttl_ms
                    ON CONFLICT (key) DO UPDATE SET
                        fence = CASE WHEN r.lease_id = excluded.lease_id AND r.epoch = excluded.epoch
                                     THEN r.fence ELSE greatest(r.fence, excluded.epoch << 22) + 1 END,
                        acquired_at = CASE WHEN r.lease_id = excluded.lease_id AND r.epoch = excluded.epoch
                                     THEN r.acquired_at ELSE excluded.acquired_at END,
                        epoch = excluded.epoch, lease_id = excluded.lease_id,
                        expires_at = excluded.expires_at, ttl_ms = excluded.ttl_ms,
                        owner_host = excluded.owner_host, owner_pid = excluded.owner_pid,
                        owner_label = excluded.owner_label, data = excluded.data
                    WHERE r.lease_id IS NULL OR r.expires_at <= clock_timestamp()
                       OR r.lease_id = excluded.lease_id
                    RETURNING r.fence
                 )
                 SELECT (SELECT fence FROM g) AS granted, m.*, h.*
                 FROM (SELECT 1) AS one
                 LEFT JOIN m ON true
                 LEFT JOIN (SELECT {HOLDER_COLUMNS} FROM {t} WHERE key = $1) AS h ON true"
            ),
            // $1 key, $2 lease id, $3 epoch, $4 ttl ms.
            renew: format!(
                "WITH u AS (
                    UPDATE {t} SET expires_at = clock_timestamp() + $4::float8 * interval '1 millisecond'
                    WHERE key = $1 AND lease_id = $2 AND epoch = $3 AND expires_at > clock_timestamp()
                      AND EXISTS (SELECT 1 FROM {t} AS m WHERE m.key = '{EPOCH_KEY}'
                                  AND m.epoch = $3 AND {same_table_m})
                    RETURNING 1
                 )
                 SELECT EXISTS (SELECT 1 FROM u) AS done,
                   (SELECT lease_id FROM {t} WHERE key = $1) AS lease_id,
                   (SELECT epoch = $3 AND {same_table} FROM {t} WHERE key = '{EPOCH_KEY}') AS same_epoch"
            ),
            // $1 key, $2 lease id.
            release: format!(
                "WITH u AS (
                    UPDATE {t} SET lease_id = NULL, expires_at = NULL
                    WHERE key = $1 AND lease_id = $2
                    RETURNING key
                 )
                 SELECT EXISTS (SELECT 1 FROM u) AS done,
                   (SELECT lease_id FROM {t} WHERE key = $1) AS lease_id,
                   NULL::bool AS same_epoch {notify}"
            ),
            inspect: format!("SELECT key, {HOLDER_COLUMNS} FROM {t} WHERE key = $1"),
            list: format!(
                "SELECT key, {HOLDER_COLUMNS} FROM {t}
                 WHERE starts_with(key, $1) AND key <> '{EPOCH_KEY}'
                 ORDER BY key COLLATE \"C\""
            ),
            // $1 key, $2 lease id, $3 the run (JSON), $4 its fencing token,
            // $5 whether it succeeded. Under our lease: last run, and last
            // success if it succeeded. Not under it: never the success; a
            // failure only over an earlier run's. The end is stamped with
            // the server's clock.
            record_run: format!(
                "WITH r AS (
                    SELECT jsonb_set($3::jsonb, '{{ended_at_unix_ms}}',
                      to_jsonb(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint))::text AS run
                 ), u AS (
                    UPDATE {t} SET
                      last_success = CASE WHEN lease_id = $2 AND $5 THEN r.run ELSE last_success END,
                      last_run = r.run, last_run_token = $4
                    FROM r
                    WHERE key = $1 AND (lease_id = $2
                      OR (NOT $5 AND (last_run_token IS NULL OR last_run_token < $4)))
                    RETURNING lease_id = $2 AS ours
                 )
                 SELECT coalesce((SELECT ours FROM u), false) AS done,
                   (SELECT lease_id FROM {t} WHERE key = $1) AS lease_id,
                   NULL::bool AS same_epoch"
            ),
            break_lease: format!(
                "WITH u AS (
                    UPDATE {t} AS r SET lease_id = NULL, expires_at = NULL
                    FROM (SELECT key, {HOLDER_COLUMNS} FROM {t} WHERE key = $1 FOR UPDATE) AS old
                    WHERE r.key = old.key AND r.lease_id IS NOT NULL
                    RETURNING old.*
                 )
                 SELECT u.* {notify} FROM u"
            ),
        }
    }
}

/// Why a renewal or release changed nothing.
fn why_not_ours(row: &Row, lease: &Lease) -> String {
    if row.get::<_, Option<bool>>("same_epoch") == Some(false) {
        return "the store's epoch changed (the table was re-created or restored: its data, and the lease, were lost)".into();
    }
    match row.get::<_, Option<String>>("lease_id") {
        None => "the lease was released or broken, or the key has no record".into(),
        Some(id) if id != lease.lease_id.as_str() => "the key is held by another lease".into(),
        Some(_) => "the lease expired".into(),
    }
}

#[async_trait]
impl Backend for PostgresBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        let max = Duration::from_millis(self.inner.store_max_ttl_ms.load(Ordering::Relaxed));
        Capabilities::new(MIN_TTL, max)
            .shared_across_processes(true)
            .shared_across_machines(true)
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        const OP: &str = "acquire";
        let Some(epoch) = req.epoch else {
            return Ok(AcquireOutcome::OtherEpoch(
                self.settle(OP).await?.store_epoch(),
            ));
        };
        let cached_max = Duration::from_millis(self.inner.store_max_ttl_ms.load(Ordering::Relaxed));
        self.check_ttl(req.ttl, cached_max)?;
        let ttl_ms = req.ttl.as_millis() as i64;
        let epoch_i = epoch as i64;
        let pid = req.owner.pid as i64;
        let row = match self
            .one(
                OP,
                &self.inner.sql.acquire,
                &[
                    (&req.key.as_str(), Type::TEXT),
                    (&req.lease_id.as_str(), Type::TEXT),
                    (&ttl_ms, Type::INT8),
                    (&epoch_i, Type::INT8),
                    (&req.owner.host, Type::TEXT),
                    (&pid, Type::INT8),
                    (&req.owner.label, Type::TEXT),
                    (&req.data, Type::TEXT),
                ],
            )
            .await
        {
            Ok(row) => row,
            Err(f) if f.missing_table() => {
                // Dropped: re-create it (a new epoch) and say so.
                return Ok(AcquireOutcome::OtherEpoch(
                    self.settle(OP).await?.store_epoch(),
                ));
            }
            Err(f) => return Err(f.into_error(OP)),
        };
        let meta = match record::epoch(&row) {
            Some(m) if m.same_table => m,
            // No epoch row, or one restored from another table.
            _ => {
                return Ok(AcquireOutcome::OtherEpoch(
                    self.settle(OP).await?.store_epoch(),
                ))
            }
        };
        self.inner
            .store_max_ttl_ms
            .store(meta.max_ttl.as_millis() as u64, Ordering::Relaxed);
        if meta.epoch != epoch {
            return Ok(AcquireOutcome::OtherEpoch(meta.store_epoch()));
        }
        self.check_ttl(req.ttl, meta.max_ttl)?;
        if let Some(fence) = row.get::<_, Option<i64>>("granted") {
            return Ok(AcquireOutcome::Acquired(Grant::new(fence as u64)));
        }
        Ok(AcquireOutcome::Held(record::holder(&row)))
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        const OP: &str = "renew";
        let epoch = lease.epoch as i64;
        let ttl_ms = lease.ttl.as_millis() as i64;
        let row = match self
            .one(
                OP,
                &self.inner.sql.renew,
                &[
                    (&lease.key.as_str(), Type::TEXT),
                    (&lease.lease_id.as_str(), Type::TEXT),
                    (&epoch, Type::INT8),
                    (&ttl_ms, Type::INT8),
                ],
            )
            .await
        {
            Ok(row) => row,
            Err(f) if f.missing_table() => {
                return Err(lost(
                    &lease.key,
                    "the table was dropped (its data, and the lease, were lost)",
                ))
            }
            Err(f) => return Err(f.into_error(OP)),
        };
        if row.get::<_, bool>("done") {
            return Ok(());
        }
        Err(lost(&lease.key, why_not_ours(&row, lease)))
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        const OP: &str = "release";
        let row = match self
            .one(
                OP,
                &self.inner.sql.release,
                &[
                    (&lease.key.as_str(), Type::TEXT),
                    (&lease.lease_id.as_str(), Type::TEXT),
                ],
            )
            .await
        {
            Ok(row) => row,
            Err(f) if f.missing_table() => {
                return Err(lost(
                    &lease.key,
                    "the table was dropped (its data, and the lease, were lost)",
                ))
            }
            Err(f) => return Err(f.into_error(OP)),
        };
        if row.get::<_, bool>("done") {
            return Ok(());
        }
        Err(lost(&lease.key, why_not_ours(&row, lease)))
    }

    async fn record_run(&self, lease: &Lease, run: &leasehold::RunRecord) -> Result<()> {
        const OP: &str = "record_run";
        let stored = run.to_stored();
        let token = lease.fencing_token as i64;
        let succeeded = run.succeeded();
        let row = match self
            .one(
                OP,
                &self.inner.sql.record_run,
                &[
                    (&lease.key.as_str(), Type::TEXT),
                    (&lease.lease_id.as_str(), Type::TEXT),
                    (&stored.as_str(), Type::TEXT),
                    (&token, Type::INT8),
                    (&succeeded, Type::BOOL),
                ],
            )
            .await
        {
            Ok(row) => row,
            Err(f) if f.missing_table() => {
                return Err(lost(
                    &lease.key,
                    "the table was dropped (its data, and the lease, were lost)",
                ))
            }
            Err(f) => return Err(f.into_error(OP)),
        };
        if row.get::<_, bool>("done") {
            return Ok(());
        }
        Err(lost(&lease.key, why_not_ours(&row, lease)))
    }

    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        const OP: &str = "inspect";
        match self
            .rows(OP, &self.inner.sql.inspect, &[(&key.as_str(), Type::TEXT)])
            .await
        {
            Ok(rows) => match rows.first() {
                Some(row) => record::key_info(key.clone(), row),
                None => Ok(KeyInfo::new(key.clone(), 0, None)),
            },
            Err(f) if f.missing_table() => Ok(KeyInfo::new(key.clone(), 0, None)),
            Err(f) => Err(f.into_error(OP)),
        }
    }

    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        const OP: &str = "break";
        match self
            .rows(
                OP,
                &self.inner.sql.break_lease,
                &[(&key.as_str(), Type::TEXT)],
            )
            .await
        {
            Ok(rows) => Ok(rows.first().and_then(record::holder)),
            Err(f) if f.missing_table() => Ok(None),
            Err(f) => Err(f.into_error(OP)),
        }
    }

    fn epoch_at_open(&self) -> Option<StoreEpoch> {
        self.inner
            .opened
            .get()
            .map(leasehold::backend::EpochRead::as_of_now)
    }

    fn watch_release(&self, keys: &[Key]) -> Option<leasehold::backend::ReleaseWatch> {
        self.inner.listener.as_ref()?.watch(keys)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        const OP: &str = "list";
        let rows = match self
            .rows(OP, &self.inner.sql.list, &[(&prefix, Type::TEXT)])
            .await
        {
            Ok(rows) => rows,
            Err(f) if f.missing_table() => return Ok(Vec::new()),
            Err(f) => return Err(f.into_error(OP)),
        };
        rows.iter()
            .map(|row| {
                let key = Key::new(row.get::<_, String>("key"))?;
                record::key_info(key, row)
            })
            .collect()
    }
}
