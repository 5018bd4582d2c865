//! The embedded SQLite store: the default on one machine.
//!
//! # Protocol
//! One database file shared by every process on the machine that uses it
//! (WAL journal; commits that issue a fencing token are fsynced
//! (`synchronous=FULL`), renewals and releases are not (`NORMAL`); busy
//! waits retried every millisecond for up to 5 s). One table:
//!
//! ```sql
//! CREATE TABLE leasehold_leases (
//!     key            TEXT PRIMARY KEY,  -- the lock key
//!     fence          INTEGER NOT NULL,  -- last fencing token issued for the key
//!     lease_id       TEXT,              -- current lease; NULL when free
//!     boot_id        TEXT,              -- the boot the expiry was measured in
//!     expires_at_ns  INTEGER,           -- expiry on the boot clock, ns
//!     ttl_ms         INTEGER,
//!     owner_host TEXT, owner_pid INTEGER, owner_label TEXT,
//!     data TEXT, acquired_at_ms INTEGER -- wall clock, for display only
//! ) WITHOUT ROWID;
//! ```
//!
//! A lease is *live* when `lease_id` is set, `boot_id` is this boot's, and
//! `expires_at_ns` is after now.
//!
//! * **Acquire** runs in a `BEGIN IMMEDIATE` transaction (the database write
//!   lock, so attempts are serialised): if the key's lease is live and not
//!   ours, answer held; if it is live and ours (a retry), extend it and
//!   answer the same token; otherwise set `fence = fence + 1`, write our
//!   lease and answer the new fence.
//! * **Renew** is `UPDATE … WHERE key AND lease_id = ours AND live`; no row
//!   changed means the lease is not ours any more (definitive loss).
//! * **Release** is `UPDATE … SET lease_id = NULL WHERE key AND lease_id =
//!   ours`. **Break** clears `lease_id` whoever holds it.
//! * Rows are never deleted, so the fence of a key never goes back.
//!
//! # Clock
//! Expiries are measured on `CLOCK_BOOTTIME` ([`SystemClock`]): one clock for
//! every process on the machine, so deadlines written by one process mean the
//! same to another; it does not jump when the wall clock is set (NTP steps,
//! an administrator, a VM resuming), which would make a wall-clock lease
//! expire early or late; and it keeps counting during suspend. It restarts at
//! boot, so every lease records the boot id
//! (`/proc/sys/kernel/random/boot_id`) and a lease from an earlier boot is
//! never live (its holder died with that boot). On other Unix systems the
//! clock is `CLOCK_MONOTONIC` and there is no boot id: leases from before a
//! reboot stay until their recorded expiry comes round again.
//!
//! The file must be on a local file system: SQLite's locking is not reliable
//! over network file systems, and the clock is only shared on one machine.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};

use crate::backend::{
    AcquireOutcome, AcquireRequest, Backend, Capabilities, Grant, HolderInfo, KeyInfo, Lease, Owner,
};
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, LossReason, Result};
use crate::key::Key;
use crate::memory::{LOCAL_MAX_TTL, LOCAL_MIN_TTL};

const NAME: &str = "sqlite";
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS leasehold_leases (
    key            TEXT PRIMARY KEY NOT NULL,
    fence          INTEGER NOT NULL,
    lease_id       TEXT,
    boot_id        TEXT,
    expires_at_ns  INTEGER,
    ttl_ms         INTEGER,
    owner_host     TEXT,
    owner_pid      INTEGER,
    owner_label    TEXT,
    data           TEXT,
    acquired_at_ms INTEGER
) WITHOUT ROWID;
";

/// The SQLite [`Backend`]. See the [module docs](self) for the protocol.
#[derive(Debug, Clone)]
pub struct SqliteBackend {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
    boot_id: Arc<str>,
}

impl SqliteBackend {
    /// Opens (creating if needed) the store at `path`, and its parent
    /// directory.
    ///
    /// # Errors
    /// [`Error::Backend`] if the directory or database cannot be created or
    /// opened.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let fail = |what: String| Error::backend(NAME, "open", false, what);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
        }
        let mut conn = Connection::open(&path)
            .map_err(|e| fail(format!("cannot open {}: {e}", path.display())))?;
        conn.busy_handler(Some(retry_while_busy))
            .map_err(|e| db_error("open", e))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| db_error("open", e))?;
        // NORMAL: renewals and releases need no fsync of their own (a
        // renewal lost in a power cut belongs to a holder that died with the
        // machine); acquisitions switch to FULL, see `durable`.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| db_error("open", e))?;
        conn.execute_batch(SCHEMA)
            .map_err(|e| db_error("open", e))?;
        Ok(SqliteBackend {
            conn: Arc::new(Mutex::new(conn)),
            path,
            boot_id: boot_id().into(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the connection in the blocking pool (SQLite calls block,
    /// up to the busy timeout).
    async fn run<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut Connection, &Ctx) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let conn = self.conn.clone();
        let ctx = Ctx {
            boot_id: self.boot_id.clone(),
        };
        tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut conn, &ctx)
        })
        .await
        .map_err(|e| Error::backend(NAME, op, false, format!("database task failed: {e}")))?
    }
}

struct Ctx {
    boot_id: Arc<str>,
}

impl Ctx {
    fn now_ns(&self) -> i64 {
        SystemClock.now().as_nanos() as i64
    }
}

/// Called by SQLite while another connection holds the write lock: wait a
/// millisecond or so and retry, for up to [`BUSY_TIMEOUT`]. SQLite's own
/// `busy_timeout` backs off to 100 ms sleeps, which would add up to 100 ms
/// to every handover between processes; lock holds here last well under a
/// millisecond (plus one fsync), so short retries cost little.
fn retry_while_busy(attempt: i32) -> bool {
    const STEP: Duration = Duration::from_millis(1);
    if STEP * attempt.max(0) as u32 >= BUSY_TIMEOUT {
        return false;
    }
    std::thread::sleep(STEP);
    true
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn db_error(op: &'static str, e: rusqlite::Error) -> Error {
    let retryable = matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    );
    Error::backend(NAME, op, retryable, e)
}

/// A row as read back.
struct Row {
    fence: u64,
    lease_id: Option<String>,
    boot_id: Option<String>,
    expires_at_ns: Option<i64>,
    ttl_ms: Option<i64>,
    owner_host: Option<String>,
    owner_pid: Option<i64>,
    owner_label: Option<String>,
    data: Option<String>,
    acquired_at_ms: Option<i64>,
}

const SELECT: &str = "SELECT key, fence, lease_id, boot_id, expires_at_ns, ttl_ms, owner_host, owner_pid, owner_label, data, acquired_at_ms FROM leasehold_leases";

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, Row)> {
    Ok((
        r.get(0)?,
        Row {
            fence: r.get::<_, i64>(1)? as u64,
            lease_id: r.get(2)?,
            boot_id: r.get(3)?,
            expires_at_ns: r.get(4)?,
            ttl_ms: r.get(5)?,
            owner_host: r.get(6)?,
            owner_pid: r.get(7)?,
            owner_label: r.get(8)?,
            data: r.get(9)?,
            acquired_at_ms: r.get(10)?,
        },
    ))
}

impl Row {
    fn is_live(&self, ctx: &Ctx, now_ns: i64) -> bool {
        self.lease_id.is_some()
            && self.boot_id.as_deref() == Some(&*ctx.boot_id)
            && self.expires_at_ns.is_some_and(|e| e > now_ns)
    }

    fn holder(&self, ctx: &Ctx, now_ns: i64) -> Option<HolderInfo> {
        if !self.is_live(ctx, now_ns) {
            return None;
        }
        let owner = Owner {
            host: self.owner_host.clone().unwrap_or_default(),
            pid: self.owner_pid.unwrap_or_default() as u32,
            label: self.owner_label.clone(),
        };
        let expires_in = self
            .expires_at_ns
            .map(|e| Duration::from_nanos((e - now_ns).max(0) as u64));
        Some(
            HolderInfo::new(owner, self.fence)
                .with_data(self.data.clone())
                .with_acquired_at(
                    self.acquired_at_ms
                        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms as u64)),
                )
                .with_expires_in(expires_in)
                .with_ttl(self.ttl_ms.map(|ms| Duration::from_millis(ms as u64))),
        )
    }

    fn info(&self, key: Key, ctx: &Ctx, now_ns: i64) -> KeyInfo {
        KeyInfo::new(key, self.fence, self.holder(ctx, now_ns))
    }
}

fn get_row(conn: &Connection, key: &str) -> rusqlite::Result<Option<Row>> {
    conn.query_row(&format!("{SELECT} WHERE key = ?1"), [key], read_row)
        .optional()
        .map(|r| r.map(|(_, row)| row))
}

fn lost(lease: &Lease, why: &str) -> Error {
    Error::LeaseLost {
        key: lease.key.to_string(),
        reason: LossReason::Revoked(why.into()),
    }
}

/// Why `lease` is not ours in `row`.
fn why_not_ours(row: Option<&Row>, lease: &Lease) -> &'static str {
    match row {
        None => "the key has no record",
        Some(r) if r.lease_id.is_none() => "the lease was released or broken",
        Some(r) if r.lease_id.as_deref() != Some(lease.lease_id.as_str()) => {
            "the key is held by another lease"
        }
        Some(_) => "the lease expired",
    }
}

fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

/// The acquire transaction (see the module docs).
fn acquire_in(conn: &mut Connection, ctx: &Ctx, req: &AcquireRequest) -> Result<AcquireOutcome> {
    let op = |e| db_error("acquire", e);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(op)?;
    let now = ctx.now_ns();
    let expires = now + req.ttl.as_nanos() as i64;
    let row = get_row(&tx, req.key.as_str()).map_err(op)?;
    let fence = match &row {
        Some(r) if r.is_live(ctx, now) => {
            if r.lease_id.as_deref() != Some(req.lease_id.as_str()) {
                return Ok(AcquireOutcome::Held(r.holder(ctx, now)));
            }
            // Our own lease, asked for again: extend, same token.
            tx.execute(
                "UPDATE leasehold_leases SET expires_at_ns = ?2 WHERE key = ?1",
                params![req.key.as_str(), expires],
            )
            .map_err(op)?;
            tx.commit().map_err(op)?;
            return Ok(AcquireOutcome::Acquired(Grant::new(r.fence)));
        }
        Some(r) => r.fence + 1,
        None => 1,
    };
    let acquired_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(ms)
        .unwrap_or(0);
    tx.execute(
            "INSERT INTO leasehold_leases (key, fence, lease_id, boot_id, expires_at_ns, ttl_ms, owner_host, owner_pid, owner_label, data, acquired_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
             ON CONFLICT(key) DO UPDATE SET fence = excluded.fence, lease_id = excluded.lease_id,
               boot_id = excluded.boot_id, expires_at_ns = excluded.expires_at_ns, ttl_ms = excluded.ttl_ms,
               owner_host = excluded.owner_host, owner_pid = excluded.owner_pid, owner_label = excluded.owner_label,
               data = excluded.data, acquired_at_ms = excluded.acquired_at_ms",
            params![
                req.key.as_str(),
                fence as i64,
                req.lease_id.as_str(),
                &*ctx.boot_id,
                expires,
                ms(req.ttl),
                req.owner.host,
                req.owner.pid as i64,
                req.owner.label,
                req.data,
                acquired_at,
            ],
        )
        .map_err(op)?;
    tx.commit().map_err(op)?;
    Ok(AcquireOutcome::Acquired(Grant::new(fence)))
}

#[async_trait]
impl Backend for SqliteBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(LOCAL_MIN_TTL, LOCAL_MAX_TTL).shared_across_processes(true)
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        let req = req.clone();
        self.run("acquire", move |conn, ctx| {
            // A commit that issues a fencing token is fsynced before it is
            // acknowledged, so a power cut can never make the same token be
            // issued twice (in WAL mode that fsync also covers every NORMAL
            // commit before it).
            conn.pragma_update(None, "synchronous", "FULL")
                .map_err(|e| db_error("acquire", e))?;
            let result = acquire_in(conn, ctx, &req);
            let normal = conn.pragma_update(None, "synchronous", "NORMAL");
            let outcome = result?;
            normal.map_err(|e| db_error("acquire", e))?;
            Ok(outcome)
        })
        .await
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.run("renew", move |conn, ctx| {
            let op = |e| db_error("renew", e);
            let now = ctx.now_ns();
            let changed = conn
                .execute(
                    "UPDATE leasehold_leases SET expires_at_ns = ?3
                     WHERE key = ?1 AND lease_id = ?2 AND boot_id = ?4 AND expires_at_ns > ?5",
                    params![
                        lease.key.as_str(),
                        lease.lease_id.as_str(),
                        now + lease.ttl.as_nanos() as i64,
                        &*ctx.boot_id,
                        now
                    ],
                )
                .map_err(op)?;
            if changed == 1 {
                return Ok(());
            }
            let row = get_row(conn, lease.key.as_str()).map_err(op)?;
            Err(lost(&lease, why_not_ours(row.as_ref(), &lease)))
        })
        .await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.run("release", move |conn, _ctx| {
            let op = |e| db_error("release", e);
            let changed = conn
                .execute(
                    "UPDATE leasehold_leases SET lease_id = NULL, boot_id = NULL, expires_at_ns = NULL
                     WHERE key = ?1 AND lease_id = ?2",
                    params![lease.key.as_str(), lease.lease_id.as_str()],
                )
                .map_err(op)?;
            if changed == 1 {
                return Ok(());
            }
            let row = get_row(conn, lease.key.as_str()).map_err(op)?;
            Err(lost(&lease, why_not_ours(row.as_ref(), &lease)))
        })
        .await
    }

    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        let key = key.clone();
        self.run("inspect", move |conn, ctx| {
            let row = get_row(conn, key.as_str()).map_err(|e| db_error("inspect", e))?;
            let now = ctx.now_ns();
            Ok(match row {
                Some(r) => r.info(key, ctx, now),
                None => KeyInfo::new(key, 0, None),
            })
        })
        .await
    }

    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        let key = key.clone();
        self.run("break", move |conn, ctx| {
            let op = |e| db_error("break", e);
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(op)?;
            let now = ctx.now_ns();
            let holder = get_row(&tx, key.as_str())
                .map_err(op)?
                .and_then(|r| r.holder(ctx, now));
            tx.execute(
                "UPDATE leasehold_leases SET lease_id = NULL, boot_id = NULL, expires_at_ns = NULL WHERE key = ?1",
                [key.as_str()],
            )
            .map_err(op)?;
            tx.commit().map_err(op)?;
            Ok(holder)
        })
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        // Key characters include no GLOB metacharacters, so a prefix GLOB is
        // an exact prefix match (and can use the primary key index).
        let pattern = format!("{prefix}*");
        self.run("list", move |conn, ctx| {
            let op = |e| db_error("list", e);
            let now = ctx.now_ns();
            let mut stmt = conn
                .prepare(&format!("{SELECT} WHERE key GLOB ?1 ORDER BY key"))
                .map_err(op)?;
            let rows = stmt
                .query_map([pattern], read_row)
                .map_err(op)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(op)?;
            rows.into_iter()
                .map(|(k, r)| {
                    let key = Key::new(k)?;
                    Ok(r.info(key, ctx, now))
                })
                .collect()
        })
        .await
    }
}
