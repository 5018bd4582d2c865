//! The [`Backend`] implementation: one statement per operation (see the
//! crate docs for the protocol).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Object, Pool};
use futures_util::future::{join, join_all};
use leasehold::backend::{
    AcquireOutcome, AcquireRequest, Backend, BatchOutcome, Capabilities, Grant, Lease, ReleaseWatch,
};
use leasehold::{backend::StoreEpoch, Error, HolderInfo, Key, KeyInfo, Result};
use tokio::time::{timeout_at, Instant};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use crate::error::{self, NAME};
use crate::record;
use crate::statements::Statements;
use crate::MIN_TTL;
use leasehold::backend::shared_builder::RecordedMaxTtl;
use leasehold::backend::shared_builder::ServerCommon;
use leasehold::backend::table_epoch::check_ttl;

/// The PostgreSQL [`Backend`]. See the [crate docs](crate) for the protocol.
/// Cheap to clone (the pool is shared).
#[derive(Clone)]
pub struct PostgresBackend {
    pub(crate) inner: Arc<Inner>,
}

/// What a backend is made of (the builder sets it up).
pub(crate) struct Inner {
    /// The store's epoch as read while opening; the listener for releases.
    pub(crate) common: ServerCommon,
    pub(crate) pool: Pool,
    pub(crate) table: String,
    pub(crate) sql: Statements,
    /// The max TTL a table (or epoch) started by this backend records.
    pub(crate) max_ttl: Duration,
    /// The table's recorded max TTL, in ms (for `capabilities`).
    pub(crate) store_max_ttl: RecordedMaxTtl,
    pub(crate) request_timeout: Duration,
    /// Statements are named and prepared once per connection (see the
    /// builder's `prepared`).
    pub(crate) prepared: bool,
    /// `host:port/db`, for Debug (never the user or password).
    pub(crate) target: String,
    /// What opening (and any later settling) may do to the table.
    pub(crate) creation: leasehold::Creation,
    /// Whether the table must be UNLOGGED (`Some(true)`) or logged
    /// (`Some(false)`), checked at opening; `None`: either.
    pub(crate) unlogged: Option<bool>,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
    /// Opens a backend on `inner`: creates the table if missing and reads
    /// its store epoch.
    pub(crate) async fn open(inner: Inner) -> Result<Self> {
        let backend = PostgresBackend {
            inner: Arc::new(inner),
        };
        let (row, created) = backend.check_epoch("open").await?;
        if let Some(want) = backend.inner.unlogged {
            backend.check_persistence(want).await?;
        }
        backend.inner.common.opened(row.store_epoch());
        backend.inner.common.created(created);
        Ok(backend)
    }

    /// Refuses a table that is UNLOGGED when `want` says logged, or the
    /// other way round (the builder's `unlogged`).
    async fn check_persistence(&self, want: bool) -> Result<()> {
        let op = "open";
        let row = self
            .one(op, &self.inner.sql.is_unlogged, &[])
            .await
            .map_err(|f| f.into_error(op))?;
        if row.get::<_, bool>("unlogged") == want {
            return Ok(());
        }
        let (asked, is, make) = if want {
            ("an UNLOGGED", "logged", "UNLOGGED")
        } else {
            ("a logged", "UNLOGGED", "LOGGED")
        };
        let t = &self.inner.table;
        Err(Error::invalid(
            "store URL",
            format!(
                "the parameter unlogged asks for {asked} table, but the table {t} exists and is {is}; make it {} with `ALTER TABLE {t} SET {make}` (which rewrites it under an exclusive lock), or leave the parameter out to use the table as it is",
                make.to_lowercase()
            ),
        ))
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
        Ok(self.check_epoch("epoch").await?.0.store_epoch())
    }

    /// Waits until this backend LISTENs for releases (started on the first
    /// wait otherwise). Returns at once when wake-ups are off.
    ///
    /// # Cancel safety
    /// Cancel safe: the listening goes on.
    pub async fn listening(&self) {
        self.inner.common.listening().await;
    }

    /// A pooled connection, within `deadline`.
    pub(crate) async fn client(&self, op: &'static str, deadline: Instant) -> Result<Object> {
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
        let run = self.query_on(&client, sql, params);
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

    /// One statement on `client` (see [`rows`](Self::rows)).
    async fn query_on(
        &self,
        client: &Object,
        sql: &str,
        params: &Params<'_>,
    ) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
        if self.inner.prepared {
            let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
            let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
            let statement = client.prepare_typed_cached(sql, &types).await?;
            client.query(&statement, &values).await
        } else {
            client.query_typed(sql, params).await
        }
    }

    /// `BEGIN`, `sql` once for each of `each` in their order, then `COMMIT`
    /// if `keep` says so of the answers, else `ROLLBACK`: two round trips on
    /// one connection (`BEGIN` and the statements are pipelined), one
    /// commit. A connection that failed in between is not reused.
    async fn transaction(
        &self,
        op: &'static str,
        sql: &str,
        each: &[&Params<'_>],
        keep: impl FnOnce(&[Vec<Row>]) -> bool,
    ) -> std::result::Result<Vec<Vec<Row>>, Fail> {
        let deadline = Instant::now() + self.inner.request_timeout;
        let client = self.client(op, deadline).await.map_err(Fail::Other)?;
        let run = async {
            let statements = join_all(each.iter().map(|p| self.query_on(&client, sql, p)));
            let (begun, answers) = join(client.batch_execute("BEGIN"), statements).await;
            let answers: std::result::Result<Vec<Vec<Row>>, _> = answers.into_iter().collect();
            let end = match (&begun, &answers) {
                (Ok(()), Ok(rows)) if keep(rows) => "COMMIT",
                _ => "ROLLBACK",
            };
            let ended = client.batch_execute(end).await;
            begun?;
            let rows = answers?;
            ended.map(|()| rows)
        };
        match timeout_at(deadline, run).await {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(e)) => {
                drop(Object::take(client));
                Err(Fail::Db(e))
            }
            Err(_) => {
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

    /// Runs a statement on `lease`'s key that answers whether it was done
    /// and, if not, why: the lease is lost unless it was. Its parameters
    /// are the key and the lease's id, then `more`.
    async fn on_lease(
        &self,
        op: &'static str,
        sql: &str,
        lease: &Lease,
        more: &Params<'_>,
    ) -> Result<()> {
        let (key, lease_id) = (lease.key.as_str(), lease.lease_id.as_str());
        let mut params: Vec<(&(dyn ToSql + Sync), Type)> =
            vec![(&key, Type::TEXT), (&lease_id, Type::TEXT)];
        params.extend_from_slice(more);
        let row = match self.one(op, sql, &params).await {
            Ok(row) => row,
            Err(f) if f.missing_table() => {
                return Err(Error::revoked(
                    &lease.key,
                    "the table was dropped (its data, and the lease, were lost)",
                ))
            }
            Err(f) => return Err(f.into_error(op)),
        };
        if row.get::<_, bool>("done") {
            return Ok(());
        }
        Err(Error::revoked(&lease.key, why_not_ours(&row, lease)))
    }

    fn check_ttl(&self, ttl: Duration, max: Duration) -> Result<()> {
        check_ttl(ttl, MIN_TTL, max)
    }
}

/// The acquire statement's values of one request that are not in it.
struct AcquireValues<'a> {
    key: &'a str,
    lease_id: &'a str,
    ttl_ms: i64,
    epoch: i64,
    pid: i64,
}

impl<'a> AcquireValues<'a> {
    fn of(req: &'a AcquireRequest, epoch: u64) -> Self {
        AcquireValues {
            key: req.key.as_str(),
            lease_id: req.lease_id.as_str(),
            ttl_ms: req.ttl.as_millis() as i64,
            epoch: epoch as i64,
            pid: req.owner.pid as i64,
        }
    }

    /// The acquire statement's parameters (see `Statements::acquire`).
    fn params<'b>(&'b self, req: &'b AcquireRequest) -> [(&'b (dyn ToSql + Sync), Type); 8] {
        [
            (&self.key, Type::TEXT),
            (&self.lease_id, Type::TEXT),
            (&self.ttl_ms, Type::INT8),
            (&self.epoch, Type::INT8),
            (&req.owner.host, Type::TEXT),
            (&self.pid, Type::INT8),
            (&req.owner.label, Type::TEXT),
            (&req.data, Type::TEXT),
        ]
    }
}

impl PostgresBackend {
    /// What the acquire statement's answer `row` says of `req`.
    async fn acquire_answer(
        &self,
        row: &Row,
        req: &AcquireRequest,
        epoch: u64,
    ) -> Result<AcquireOutcome> {
        const OP: &str = "acquire";
        let meta = record::epoch(row);
        if let Some(m) = &meta {
            // The statement granted nothing in a store of a protocol this
            // build does not speak.
            m.check_protocol(NAME)?;
        }
        let meta = match meta {
            Some(m) if m.same_table => m,
            // No epoch row, or one restored from another table.
            _ => {
                return Ok(AcquireOutcome::OtherEpoch(
                    self.check_epoch(OP).await?.0.store_epoch(),
                ))
            }
        };
        self.inner.store_max_ttl.set(meta.max_ttl);
        if meta.epoch != epoch {
            return Ok(AcquireOutcome::OtherEpoch(meta.store_epoch()));
        }
        self.check_ttl(req.ttl, meta.max_ttl)?;
        if let Some(fence) = row.get::<_, Option<i64>>("granted") {
            return Ok(AcquireOutcome::Acquired(Grant::new(fence as u64)));
        }
        Ok(AcquireOutcome::Held(record::holder(row)))
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
        self.inner.store_max_ttl.capabilities(MIN_TTL)
    }

    fn epoch_at_open(&self) -> Option<StoreEpoch> {
        self.inner.common.epoch_at_open()
    }

    fn created_at_open(&self) -> Option<bool> {
        self.inner.common.created_at_open()
    }

    fn watch_release(&self, keys: &[Key]) -> Option<ReleaseWatch> {
        self.inner.common.watch_release(keys)
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        const OP: &str = "acquire";
        let Some(epoch) = req.epoch else {
            return Ok(AcquireOutcome::OtherEpoch(
                self.check_epoch(OP).await?.0.store_epoch(),
            ));
        };
        let cached_max = self.inner.store_max_ttl.get();
        self.check_ttl(req.ttl, cached_max)?;
        let values = AcquireValues::of(req, epoch);
        let row = match self
            .one(OP, &self.inner.sql.acquire, &values.params(req))
            .await
        {
            Ok(row) => row,
            Err(f) if f.missing_table() => {
                // Dropped: re-create it (a new epoch) and say so.
                return Ok(AcquireOutcome::OtherEpoch(
                    self.check_epoch(OP).await?.0.store_epoch(),
                ));
            }
            Err(f) => return Err(f.into_error(OP)),
        };
        self.acquire_answer(&row, req, epoch).await
    }

    async fn try_acquire_all(&self, reqs: &[AcquireRequest]) -> Result<BatchOutcome> {
        const OP: &str = "acquire";
        let Some(epoch) = reqs.first().and_then(|r| r.epoch) else {
            return Ok(BatchOutcome::OtherEpoch(
                self.check_epoch(OP).await?.0.store_epoch(),
            ));
        };
        let cached_max = self.inner.store_max_ttl.get();
        for req in reqs {
            self.check_ttl(req.ttl, cached_max)?;
        }
        let values: Vec<AcquireValues<'_>> =
            reqs.iter().map(|r| AcquireValues::of(r, epoch)).collect();
        let params: Vec<_> = reqs.iter().zip(&values).map(|(r, v)| v.params(r)).collect();
        let each: Vec<&Params<'_>> = params.iter().map(|p| p.as_slice()).collect();
        // Kept only if every key was granted: a statement grants only in
        // the request's epoch, in a table of a protocol this build speaks,
        // within the max TTL, so a grant needs nothing more checked.
        let granted = |rows: &[Vec<Row>]| {
            rows.iter().all(|r| {
                r.first()
                    .is_some_and(|row| row.get::<_, Option<i64>>("granted").is_some())
            })
        };
        let answers = match self
            .transaction(OP, &self.inner.sql.acquire, &each, granted)
            .await
        {
            Ok(answers) => answers,
            Err(f) if f.missing_table() => {
                return Ok(BatchOutcome::OtherEpoch(
                    self.check_epoch(OP).await?.0.store_epoch(),
                ));
            }
            Err(f) => return Err(f.into_error(OP)),
        };
        let all = granted(&answers);
        let mut grants = Vec::with_capacity(reqs.len());
        for (index, (req, rows)) in reqs.iter().zip(&answers).enumerate() {
            let Some(row) = rows.first() else {
                return Err(Error::backend(
                    NAME,
                    OP,
                    true,
                    "the statement returned no row",
                ));
            };
            match self.acquire_answer(row, req, epoch).await? {
                AcquireOutcome::Acquired(grant) => grants.push(grant),
                AcquireOutcome::Held(holder) => return Ok(BatchOutcome::Held { index, holder }),
                AcquireOutcome::OtherEpoch(found) => return Ok(BatchOutcome::OtherEpoch(found)),
            }
        }
        if !all {
            // Rolled back, though no key answered held: never a grant.
            return Err(Error::backend(
                NAME,
                OP,
                true,
                "the keys' transaction was rolled back",
            ));
        }
        Ok(BatchOutcome::Acquired(grants))
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        const OP: &str = "renew";
        let epoch = lease.epoch as i64;
        let ttl_ms = lease.ttl.as_millis() as i64;
        self.on_lease(
            OP,
            &self.inner.sql.renew,
            lease,
            &[(&epoch, Type::INT8), (&ttl_ms, Type::INT8)],
        )
        .await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        const OP: &str = "release";
        self.on_lease(OP, &self.inner.sql.release, lease, &[]).await
    }

    async fn record_run(&self, lease: &Lease, run: &leasehold::RunRecord) -> Result<()> {
        const OP: &str = "record_run";
        let stored = run.to_stored();
        let token = lease.fencing_token as i64;
        let succeeded = run.succeeded();
        self.on_lease(
            OP,
            &self.inner.sql.record_run,
            lease,
            &[
                (&stored.as_str(), Type::TEXT),
                (&token, Type::INT8),
                (&succeeded, Type::BOOL),
            ],
        )
        .await
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
