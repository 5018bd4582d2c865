//! The [`Backend`] implementation (see the crate docs for the protocol).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::backend::shared_builder::{RecordedMaxTtl, ServerCommon};
use leasehold::backend::table_epoch::check_ttl;
use leasehold::backend::{
    next_token, AcquireOutcome, AcquireRequest, Backend, BatchOutcome, Capabilities, Grant, Lease,
    ReleaseWatch,
};
use leasehold::{backend::StoreEpoch, Error, HolderInfo, Key, KeyInfo, Result};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Pool, Row, TxOpts, Value};
use tokio::time::{timeout_at, Instant};

use crate::error::{self, code, NAME};
use crate::record::{self, col, EpochRow};
use crate::statements::Statements;
use crate::MIN_TTL;

/// The MySQL/MariaDB [`Backend`]. See the [crate docs](crate) for the
/// protocol. Cheap to clone (the pool is shared).
#[derive(Clone)]
pub struct MysqlBackend {
    pub(crate) inner: Arc<Inner>,
}

/// What a backend is made of (the builder sets it up).
pub(crate) struct Inner {
    /// The store's epoch as read while opening (no listener: waiters poll).
    pub(crate) common: ServerCommon,
    pub(crate) pool: Pool,
    pub(crate) table: String,
    pub(crate) sql: Statements,
    /// The max TTL a table (or epoch) started by this backend records.
    pub(crate) max_ttl: Duration,
    /// The table's recorded max TTL (for `capabilities`).
    pub(crate) store_max_ttl: RecordedMaxTtl,
    pub(crate) request_timeout: Duration,
    /// `host:port/db`, for Debug (never the user or password).
    pub(crate) target: String,
    /// What opening (and any later settling) may do to the table.
    pub(crate) creation: leasehold::Creation,
}

impl std::fmt::Debug for MysqlBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlBackend")
            .field("target", &self.inner.target)
            .field("table", &self.inner.table)
            .finish_non_exhaustive()
    }
}

/// The statements [`MysqlBackend::raw_sql`] gives.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct RawSql<'a> {
    /// The epoch row, `LOCK IN SHARE MODE` (no parameters).
    pub share_epoch: &'a str,
    /// The key's row `FOR UPDATE` (the key).
    pub lock_key: &'a str,
    /// A grant of a key without a row (key, fence, epoch, lease id, TTL
    /// µs, TTL ms, host, pid, label, data).
    pub insert_grant: &'a str,
    /// A grant of a key with a row (fence, epoch, lease id, TTL µs, TTL
    /// ms, host, pid, label, data, whether to keep `acquired_at`, key).
    pub update_grant: &'a str,
    /// A release (key, lease id).
    pub release: &'a str,
}

/// A failed operation: the client's error (to look at its code) or one of
/// ours.
pub(crate) enum Fail {
    Db(mysql_async::Error),
    Other(Error),
}

impl From<mysql_async::Error> for Fail {
    fn from(e: mysql_async::Error) -> Self {
        Fail::Db(e)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Other(e)
    }
}

impl Fail {
    pub(crate) fn into_error(self, op: &'static str) -> Error {
        match self {
            Fail::Db(e) => error::db(op, e),
            Fail::Other(e) => e,
        }
    }

    fn code(&self) -> Option<u16> {
        match self {
            Fail::Db(e) => error::server_code(e),
            Fail::Other(_) => None,
        }
    }

    fn missing_table(&self) -> bool {
        self.code() == Some(code::NO_SUCH_TABLE)
    }

    /// A lost race that another try settles: a deadlock (rolled back), or
    /// a row inserted meanwhile by another acquirer.
    pub(crate) fn lost_race(&self) -> bool {
        matches!(self.code(), Some(code::LOCK_DEADLOCK | code::DUP_ENTRY))
    }
}

pub(crate) type Outcome<T> = std::result::Result<T, Fail>;

/// How many times an operation that lost a race to another is tried.
pub(crate) const RACE_TRIES: usize = 5;

/// What one acquire transaction found.
enum Step {
    /// No epoch row, or one restored from another table.
    NoEpoch,
    /// The store is in another epoch.
    Other(EpochRow),
    /// Every key granted: their tokens, in the requests' order.
    Granted(Vec<u64>, EpochRow),
    /// The key of the request at this index is held; nothing was written.
    Held(usize, Option<HolderInfo>, EpochRow),
}

impl MysqlBackend {
    /// Opens a backend on `inner`: creates the table if missing and reads
    /// its store epoch.
    pub(crate) async fn open(inner: Inner) -> Result<Self> {
        let backend = MysqlBackend {
            inner: Arc::new(inner),
        };
        let (row, created) = backend.check_epoch("open").await?;
        backend.inner.common.opened(row.store_epoch());
        backend.inner.common.created(created);
        Ok(backend)
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// The table's store epoch, read now.
    ///
    /// # Errors
    /// [`Error::Backend`] when the server cannot be reached.
    pub async fn epoch(&self) -> Result<StoreEpoch> {
        Ok(self.check_epoch("epoch").await?.0.store_epoch())
    }

    /// The statements of an acquire's transaction and of a release, as
    /// `try_acquire` and `release` send them (their parameters as
    /// [`statements`](crate) lists them), for the benchmarks' raw loop,
    /// which sends the same statements on a client of its own.
    #[doc(hidden)]
    pub fn raw_sql(&self) -> RawSql<'_> {
        let sql = &self.inner.sql;
        RawSql {
            share_epoch: &sql.share_epoch,
            lock_key: &sql.lock_key,
            insert_grant: &sql.insert_grant,
            update_grant: &sql.update_grant,
            release: &sql.release,
        }
    }

    /// For tests: a connection of the backend's pool left inside a
    /// transaction that holds `key`'s row lock, as an acquire frozen between
    /// its statements leaves it (the caller keeps it, idle).
    ///
    /// # Errors
    /// [`Error::Backend`] when the server cannot be reached.
    #[doc(hidden)]
    pub async fn freeze_mid_acquire(&self, key: &str) -> Result<Conn> {
        let op = "freeze";
        let mut conn = self
            .inner
            .pool
            .get_conn()
            .await
            .map_err(|e| error::db(op, e))?;
        conn.query_drop("START TRANSACTION")
            .await
            .map_err(|e| error::db(op, e))?;
        conn.exec_drop(self.inner.sql.lock_key.as_str(), (key,))
            .await
            .map_err(|e| error::db(op, e))?;
        Ok(conn)
    }

    /// Waits until the backend is ready to be told of releases: at once,
    /// as MySQL has no notifications (waiters poll; see the crate docs).
    pub async fn listening(&self) {
        self.inner.common.listening().await;
    }

    /// Runs `f` on a pooled connection within the request timeout (from
    /// getting the connection to the last answer). A connection whose
    /// operation timed out is dropped mid-way: the pool finishes or
    /// discards it (an open transaction is rolled back) before reuse.
    pub(crate) async fn on_conn<T, F, Fut>(
        &self,
        op: &'static str,
        extra: Duration,
        f: F,
    ) -> Outcome<T>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = Outcome<T>>,
    {
        let timeout = self.inner.request_timeout + extra;
        let deadline = Instant::now() + timeout;
        let run = async {
            let conn = self.inner.pool.get_conn().await?;
            f(conn).await
        };
        match timeout_at(deadline, run).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Fail::Other(error::timed_out(op, timeout))),
        }
    }

    fn check_ttl(&self, ttl: Duration, max: Duration) -> Result<()> {
        check_ttl(ttl, MIN_TTL, max)
    }

    /// One acquire transaction (see the crate docs, "Acquire") of every
    /// key of `reqs`, in their order: all granted, or none.
    async fn acquire_once(
        &self,
        mut conn: Conn,
        reqs: &[AcquireRequest],
        epoch: u64,
    ) -> Outcome<Step> {
        let sql = &self.inner.sql;
        let mut tx = conn.start_transaction(TxOpts::default()).await?;
        let meta = tx
            .exec_first::<Row, _, _>(sql.share_epoch.as_str(), ())
            .await?
            .as_ref()
            .and_then(record::epoch);
        let meta = match meta {
            Some(m) => {
                // Nothing is granted in a store of a protocol this build
                // does not speak.
                m.check_protocol(NAME)?;
                m
            }
            None => return Ok(Step::NoEpoch),
        };
        if !meta.same_table {
            return Ok(Step::NoEpoch);
        }
        if meta.epoch != epoch {
            return Ok(Step::Other(meta));
        }
        for req in reqs {
            self.check_ttl(req.ttl, meta.max_ttl)?;
        }
        let mut fences = Vec::with_capacity(reqs.len());
        for (index, req) in reqs.iter().enumerate() {
            let key = req.key.as_str();
            let ours = req.lease_id.as_str();
            let ttl_us = req.ttl.as_micros() as u64;
            let ttl_ms = req.ttl.as_millis() as u64;
            let owner = |v: &mut Vec<Value>| {
                v.extend([
                    Value::from(ttl_us),
                    Value::from(ttl_ms),
                    Value::from(req.owner.host.as_str()),
                    Value::from(req.owner.pid),
                    Value::from(req.owner.label.as_deref()),
                    Value::from(req.data.as_deref()),
                ])
            };
            let row = tx
                .exec_first::<Row, _, _>(sql.lock_key.as_str(), (key,))
                .await?;
            let fence = match row {
                None => {
                    let fence = next_token(0, epoch);
                    let mut params = vec![
                        Value::from(key),
                        Value::from(fence),
                        Value::from(epoch),
                        Value::from(ours),
                    ];
                    owner(&mut params);
                    tx.exec_drop(sql.insert_grant.as_str(), params).await?;
                    fence
                }
                Some(row) => {
                    // A fence that cannot be read is an error, never 0 (its
                    // next token would repeat an earlier one).
                    let last = col::<u64>(&row, "fence").ok_or_else(|| {
                        Error::backend(
                            NAME,
                            "acquire",
                            false,
                            "the key's row has no readable fence",
                        )
                    })?;
                    let same = col::<String>(&row, "lease_id").as_deref() == Some(ours)
                        && col::<u64>(&row, "epoch") == Some(epoch);
                    let free = col::<i64>(&row, "free").unwrap_or(0) == 1;
                    if !same && !free {
                        // Nothing of this transaction is kept: the keys
                        // before this one are not granted either.
                        tx.rollback().await?;
                        return Ok(Step::Held(index, record::holder(&row), meta));
                    }
                    // Our own lease asked for again (a retry after an
                    // ambiguous failure) keeps its token.
                    let fence = if same { last } else { next_token(last, epoch) };
                    let mut params =
                        vec![Value::from(fence), Value::from(epoch), Value::from(ours)];
                    owner(&mut params);
                    params.extend([Value::from(same), Value::from(key)]);
                    tx.exec_drop(sql.update_grant.as_str(), params).await?;
                    fence
                }
            };
            fences.push(fence);
        }
        tx.commit().await?;
        Ok(Step::Granted(fences, meta))
    }

    /// The acquire transaction of `reqs`, tried again after a lost race
    /// (see the crate docs), and what it found.
    async fn acquire_step(&self, reqs: &[AcquireRequest], epoch: u64) -> Result<Step> {
        const OP: &str = "acquire";
        self.check_ttl_all(reqs)?;
        let mut tries = 0;
        let step = loop {
            tries += 1;
            let outcome = self
                .on_conn(OP, Duration::ZERO, |conn| {
                    self.acquire_once(conn, reqs, epoch)
                })
                .await;
            match outcome {
                Ok(step) => break step,
                Err(f) if f.missing_table() => break Step::NoEpoch,
                Err(f) if f.lost_race() && tries < RACE_TRIES => continue,
                Err(f) => return Err(f.into_error(OP)),
            }
        };
        match &step {
            Step::NoEpoch => {}
            Step::Other(meta) | Step::Granted(_, meta) | Step::Held(_, _, meta) => {
                self.inner.store_max_ttl.set(meta.max_ttl)
            }
        }
        Ok(step)
    }

    fn check_ttl_all(&self, reqs: &[AcquireRequest]) -> Result<()> {
        let max = self.inner.store_max_ttl.get();
        reqs.iter().try_for_each(|r| self.check_ttl(r.ttl, max))
    }

    /// Runs a statement on `lease`'s key whose parameters are `params`:
    /// done when it changed the key's row; otherwise the lease is lost,
    /// and the error says why.
    async fn on_lease(
        &self,
        op: &'static str,
        sql: &str,
        lease: &Lease,
        params: Vec<Value>,
    ) -> Result<()> {
        let outcome = self
            .on_conn(op, Duration::ZERO, |mut conn| async move {
                conn.exec_drop(sql, params).await?;
                if conn.affected_rows() > 0 {
                    return Ok(None);
                }
                Ok(Some(self.why_not(&mut conn, lease).await?))
            })
            .await;
        on_lease_outcome(op, lease, outcome)
    }

    /// Why a statement on `lease` changed nothing.
    async fn why_not(&self, conn: &mut Conn, lease: &Lease) -> Outcome<String> {
        let row = conn
            .exec_first::<Row, _, _>(self.inner.sql.why_not.as_str(), (lease.key.as_str(),))
            .await?;
        let lease_id = row.as_ref().and_then(|r| col::<String>(r, "lease_id"));
        let store_epoch = row.as_ref().and_then(|r| col::<u64>(r, "store_epoch"));
        Ok(if store_epoch != Some(lease.epoch) {
            "the store's epoch changed (the table was re-created or restored: its data, and the lease, were lost)".into()
        } else {
            match lease_id {
                None => "the lease was released or broken, or the key has no record".into(),
                Some(id) if id != lease.lease_id.as_str() => {
                    "the key is held by another lease".into()
                }
                Some(_) => "the lease expired".into(),
            }
        })
    }
}

/// What a statement on `lease` came to: done (`None`), or the lease is
/// lost, and why (also when the table is gone).
fn on_lease_outcome(
    op: &'static str,
    lease: &Lease,
    outcome: Outcome<Option<String>>,
) -> Result<()> {
    match outcome {
        Ok(None) => Ok(()),
        Ok(Some(why)) => Err(Error::revoked(&lease.key, why)),
        Err(f) if f.missing_table() => Err(Error::revoked(
            &lease.key,
            "the table was dropped (its data, and the lease, were lost)",
        )),
        Err(f) => Err(f.into_error(op)),
    }
}

#[async_trait]
impl Backend for MysqlBackend {
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
        Ok(
            match self.acquire_step(std::slice::from_ref(req), epoch).await? {
                // Dropped, or restored: re-created or renewed (a new epoch).
                Step::NoEpoch => {
                    AcquireOutcome::OtherEpoch(self.check_epoch(OP).await?.0.store_epoch())
                }
                Step::Other(meta) => AcquireOutcome::OtherEpoch(meta.store_epoch()),
                Step::Granted(fences, _) => match fences[..] {
                    [fence] => AcquireOutcome::Acquired(Grant::new(fence)),
                    _ => unreachable!("one request, one grant"),
                },
                Step::Held(_, holder, _) => AcquireOutcome::Held(holder),
            },
        )
    }

    async fn try_acquire_all(&self, reqs: &[AcquireRequest]) -> Result<BatchOutcome> {
        const OP: &str = "acquire";
        let Some(epoch) = reqs.first().and_then(|r| r.epoch) else {
            return Ok(BatchOutcome::OtherEpoch(
                self.check_epoch(OP).await?.0.store_epoch(),
            ));
        };
        Ok(match self.acquire_step(reqs, epoch).await? {
            Step::NoEpoch => BatchOutcome::OtherEpoch(self.check_epoch(OP).await?.0.store_epoch()),
            Step::Other(meta) => BatchOutcome::OtherEpoch(meta.store_epoch()),
            Step::Granted(fences, _) => {
                BatchOutcome::Acquired(fences.into_iter().map(Grant::new).collect())
            }
            Step::Held(index, holder, _) => BatchOutcome::Held { index, holder },
        })
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        let params = vec![
            Value::from(lease.ttl.as_micros() as u64),
            Value::from(lease.key.as_str()),
            Value::from(lease.lease_id.as_str()),
            Value::from(lease.epoch),
        ];
        self.on_lease("renew", &self.inner.sql.renew, lease, params)
            .await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let params = vec![
            Value::from(lease.key.as_str()),
            Value::from(lease.lease_id.as_str()),
        ];
        self.on_lease("release", &self.inner.sql.release, lease, params)
            .await
    }

    async fn record_run(&self, lease: &Lease, run: &leasehold::RunRecord) -> Result<()> {
        const OP: &str = "record_run";
        let stored = run.to_stored();
        let token = lease.fencing_token;
        let succeeded = run.succeeded();
        let sql = &self.inner.sql;
        let outcome = self
            .on_conn(OP, Duration::ZERO, |mut conn| {
                let stored = stored.clone();
                async move {
                    let ours = vec![
                        Value::from(succeeded),
                        Value::from(stored.as_str()),
                        Value::from(stored.as_str()),
                        Value::from(token),
                        Value::from(lease.key.as_str()),
                        Value::from(lease.lease_id.as_str()),
                    ];
                    conn.exec_drop(sql.record_run_ours.as_str(), ours).await?;
                    if conn.affected_rows() > 0 {
                        return Ok(None);
                    }
                    if !succeeded {
                        // Not under our lease: a failure is kept only over
                        // an earlier run's record.
                        let late = vec![
                            Value::from(stored.as_str()),
                            Value::from(token),
                            Value::from(lease.key.as_str()),
                            Value::from(token),
                        ];
                        conn.exec_drop(sql.record_run_late.as_str(), late).await?;
                    }
                    Ok(Some(self.why_not(&mut conn, lease).await?))
                }
            })
            .await;
        on_lease_outcome(OP, lease, outcome)
    }

    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        const OP: &str = "inspect";
        let sql = self.inner.sql.inspect.as_str();
        let outcome = self
            .on_conn(OP, Duration::ZERO, |mut conn| async move {
                Ok(conn.exec_first::<Row, _, _>(sql, (key.as_str(),)).await?)
            })
            .await;
        match outcome {
            Ok(Some(row)) => record::key_info(key.clone(), &row),
            Ok(None) => Ok(KeyInfo::new(key.clone(), 0, None)),
            Err(f) if f.missing_table() => Ok(KeyInfo::new(key.clone(), 0, None)),
            Err(f) => Err(f.into_error(OP)),
        }
    }

    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        const OP: &str = "break";
        let sql = &self.inner.sql;
        let outcome = self
            .on_conn(OP, Duration::ZERO, |mut conn| async move {
                let mut tx = conn.start_transaction(TxOpts::default()).await?;
                let row = tx
                    .exec_first::<Row, _, _>(sql.lock_for_break.as_str(), (key.as_str(),))
                    .await?;
                let Some(row) = row.filter(|r| col::<String>(r, "lease_id").is_some()) else {
                    tx.rollback().await?;
                    return Ok(None);
                };
                tx.exec_drop(sql.break_lease.as_str(), (key.as_str(),))
                    .await?;
                tx.commit().await?;
                Ok(record::holder(&row))
            })
            .await;
        match outcome {
            Ok(holder) => Ok(holder),
            Err(f) if f.missing_table() => Ok(None),
            Err(f) => Err(f.into_error(OP)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        const OP: &str = "list";
        let sql = self.inner.sql.list.as_str();
        let outcome = self
            .on_conn(OP, Duration::ZERO, |mut conn| async move {
                Ok(conn
                    .exec::<Row, _, _>(sql, (prefix.len() as u64, prefix))
                    .await?)
            })
            .await;
        let rows = match outcome {
            Ok(rows) => rows,
            Err(f) if f.missing_table() => return Ok(Vec::new()),
            Err(f) => return Err(f.into_error(OP)),
        };
        rows.iter()
            .map(|row| {
                let key = Key::new(col::<String>(row, "k").unwrap_or_default())?;
                record::key_info(key, row)
            })
            .collect()
    }
}
