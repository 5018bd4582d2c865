//! The embedded SQLite store: the default on one machine.
//!
//! # Protocol
//! One database file shared by every process on the machine that uses it
//! (WAL journal; commits that issue a fencing token are fsynced
//! (`synchronous=FULL`), renewals and releases are not (`NORMAL`); busy
//! waits retried every millisecond for up to 5 s). A closing connection
//! leaves the WAL for the next process unless it has grown past 256 KiB
//! (then the last one out checkpoints it into the database and deletes it),
//! so a short-lived process pays two fsyncs (its grant's, and the directory
//! sync SQLite does on a connection's first write to the WAL) rather than
//! five. A WAL left beside a database file that was deleted is deleted by SQLite
//! when the empty file is opened; copying a database file in while the old
//! WAL stays is the same mistake it is for any SQLite file (remove the
//! `-wal` and `-shm` files with it): SQLite reads the WAL's pages over the
//! new file. leasehold refuses to open such a file, writing nothing, when
//! the epoch row (read through the WAL) names another file and the WAL
//! holds pages not yet copied into a file (from the `-shm` file's
//! WAL-index header), inside the write transaction that would start the
//! new epoch, so a process that named the new file first is never taken
//! for a leftover (test: `tests/sqlite_restore.rs`). One table:
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
//!     data TEXT, acquired_at_ms INTEGER, -- wall clock, for display only
//!     last_success TEXT, last_run TEXT,  -- run records (JSON)
//!     last_run_token INTEGER             -- last_run's fencing token
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
//!   lease and answer the new fence. Several keys at once (a multi-key
//!   lock's first attempt, [`Backend::try_acquire_all`]) are the same
//!   transaction over every key: each checked by that rule, then each
//!   granted by it, or nothing written when one is held; one commit (one
//!   fsync) for all of them, and each lease id's directory lock is held
//!   from before the transaction, as for one key.
//! * **Renew** is `UPDATE … WHERE key AND lease_id = ours AND live`; no row
//!   changed means the lease is not ours any more (definitive loss).
//! * **Release** is `UPDATE … SET lease_id = NULL WHERE key AND lease_id =
//!   ours`. **Break** clears `lease_id` whoever holds it.
//! * Rows are never deleted, so the fence of a key never goes back.
//! * **Record a run** (see [run records](crate::backend#run-records)) is
//!   `UPDATE … SET last_run, last_success (if it succeeded) WHERE key AND
//!   lease_id = ours`, the release's condition, in one statement. If no
//!   row changed, a run that did not succeed is kept as `last_run` `WHERE
//!   last_run_token < ours` (or none). The times are the machine's wall
//!   clock, the one clock every reader of the file shares (the file is
//!   local), so the once-per-period test has no skew but the clock's own
//!   steps. A file from before run records gets the three columns when it
//!   is opened.
//!
//! # Store epoch, file identity and quarantine
//! A second table holds one row: the store's epoch (see
//! [store epochs](crate::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)),
//! its max TTL (60 s unless opened with
//! [`SqliteBackend::open_with_max_ttl`]; no lease may be longer), the
//! identity of the file it was written in (device and inode), the boot id
//! of the kernel using it, and the time on the boot clock from which no
//! lease of an earlier epoch can be live (`settled_at_ns`: the epoch's
//! beginning plus one confirmation window, or `i64::MIN` when it began
//! with proof that none was live).
//!
//! ```sql
//! CREATE TABLE leasehold_store (
//!     id INTEGER PRIMARY KEY CHECK (id = 1), epoch INTEGER NOT NULL,
//!     max_ttl_ms INTEGER NOT NULL, file_dev INTEGER NOT NULL,
//!     file_ino INTEGER NOT NULL, boot_id TEXT NOT NULL,
//!     settled_at_ns INTEGER NOT NULL, protocol INTEGER
//! );
//! ```
//!
//! **Protocol.** The row's `protocol` is the store's
//! [protocol version](crate::backend::protocol), written with every new
//! epoch. Builds from before versions were recorded name their columns, so
//! they neither read the column nor fail on it, and a row they write has it
//! NULL: protocol 1, theirs. A file without the column gets it (`ALTER
//! TABLE`, under the write lock) from the first build that records
//! versions and opens the file to take leases. The protocol is checked,
//! before anything is written, when a process opens the file (before even
//! the journal mode), and inside every acquire transaction (before the
//! grant): a newer protocol is
//! [`Error::UnsupportedProtocol`](crate::Error::UnsupportedProtocol).
//! Tests: `tests/protocol.rs`; with the previous release's binary,
//! `scripts/compat.sh`.
//!
//! * **The file under an open connection.** A connection knows the identity
//!   of the file it opened (checked by `stat` before and after opening).
//!   Every operation first compares it with what the path names now: a file
//!   deleted or replaced (a cleanup script, a restored backup, `mv`) makes
//!   renewals and releases a definitive loss, and every other operation
//!   re-opens the path, so a missing file is never an empty store without
//!   the epoch rule below. A renewal checks the epoch in the same `UPDATE`.
//! * **Many processes creating one file** at once all open it: the schema
//!   is `CREATE TABLE IF NOT EXISTS`, both tables in one `BEGIN IMMEDIATE`
//!   transaction (SQLite re-reads the schema under the write lock, so a
//!   creator that waited finds the other's tables, and a look finds both
//!   tables or neither), the run columns and the epoch row are written in
//!   `BEGIN IMMEDIATE` transactions that look first, every lock is waited
//!   on (busy handler), and opening is tried again on `SQLITE_BUSY` for up
//!   to 5 s (creating a file and its schema takes locks a busy handler does
//!   not always cover). Test: leasehold-cli's `tests/concurrent_open.rs`
//!   (ten processes on five new files, one epoch).
//! * **A new epoch begins** when a file has no epoch row (a new file), when
//!   the row names another file (a copy: a backup restored, a file copied
//!   in) or another boot id (a reboot, or another kernel sharing the file).
//!   The epoch is the wall clock's next second (the creator waits for it,
//!   so two epochs are never equal on one clock), and at least the old
//!   epoch + 1; every lease in the file is voided and every key's next
//!   token is above the epoch's base.
//! * **Quarantine, or proof that none is needed.** Every process that holds
//!   a lease (from just before its grant until its release or loss) keeps a
//!   shared `flock` on the database's directory and then, on Linux, a read
//!   lock on the byte of its database's file name in the directory's
//!   *holders file* `.leasehold-holders` (see `holders.rs`). The process
//!   starting an epoch for file NAME tries an exclusive, non-blocking
//!   `flock` on the directory: if it gets it, no process on this machine
//!   holds a lease of any epoch there (and it marks the holders file
//!   *trusted*, writing into it the file's own device and inode). Failing
//!   that, if the holders file is trusted and it gets a write lock on
//!   NAME's byte, no process holds a lease of a file named NAME there.
//!   Either way the new epoch is settled at once; otherwise it is settled
//!   one [confirmation window](crate::CONFIRMATION_WINDOW) (+0.1 %) later
//!   on the boot clock, which every process on the machine shares.
//!
//!   Why the byte proof is enough: a lease of NAME's lost history (a file
//!   of that name deleted or replaced) was granted to a holder that took
//!   its byte lock before the grant, and keeps it until its release or
//!   loss, so it is seen, whatever happened to the file (the name outlives
//!   the file). It took it in the trusted holders file: a holders file is
//!   marked only while no process holds a lease in the directory, and a
//!   holder takes the directory lock before it opens the holders file, so
//!   every holder since the marking locked its byte in that very file (a
//!   holder that kept the file open checks, each time, that the path still
//!   names it). A holders file deleted, made again or copied in names
//!   another inode than its marker (or has none) and proves nothing until
//!   the directory is next free of holders. Stores in one directory no
//!   longer share the quarantine: a new file beside a held store is
//!   granted at once (test: `a_new_file_beside_a_held_store_grants_at_once`
//!   in `tests/sqlite_processes.rs`; the safety side,
//!   `file_deleted_under_a_holder_beside_another_held_store`, with and
//!   without the holders file deleted too). Elsewhere than Linux only the
//!   directory lock is used, as before. The epoch's
//!   age, which the core's quarantine counts from, is read back from
//!   `settled_at_ns` with the same window, so it is the time since the
//!   epoch began. The max TTL in the row is the new store's own (the
//!   creator's setting) and plays no part: a holder of the lost file trusts
//!   its lease for at most a window, whatever max TTL it opened the file
//!   with (before, the quarantine was the creator's max TTL, or the larger
//!   of it and a replaced file's, while the row kept only the creator's, so
//!   the loss after it quarantined too short; test
//!   `store_loss_quarantine_survives_an_epoch_renewed_with_a_shorter_max_ttl`
//!   in `tests/conformance_sqlite.rs`). An acquirer checks that the path
//!   still names its file inside its write transaction, after taking its
//!   shared lock, so it
//!   cannot be granted on a file that was replaced before an epoch's
//!   creator looked. For a boot change (same file) the proof is in the
//!   file: no row holds a lease. A file written before epochs existed keeps
//!   its leases and counters (nothing was lost) and gets an epoch at once.
//!
//!   A new file opened with [`Creation::NewProven`] (`leasehold init
//!   --new`: its creator states that no earlier store existed there) is
//!   settled at once too, recorded the same way (`settled_at_ns` = PROVEN).
//!   Opened with [`Creation::Never`] (`leasehold list`, `status`,
//!   `leader`), nothing is created or written: no file, a file without
//!   the lease table, or one with the tables but no epoch row yet and no
//!   lease (a creator between its two transactions, or one cut short) is
//!   [`Error::NoStore`], and an epoch row of another
//!   file or boot is reported as it is, not renewed.
//!
//!   The directory and the file name are the ones the file really has
//!   (symbolic links resolved), so processes that reach one file by
//!   different paths share the proof.
//!
//!   Not covered: the *directory itself* deleted and re-created by
//!   something else while a lease is held (the old holder's lock is on the
//!   old directory). Do not delete the directory of a store in use. Nor a
//!   copy written *over* the file in place (`cp backup.db leases.db` keeps
//!   the inode, so the file's identity does not change and its counters go
//!   back): restore a backup by moving it into place.
//!   Nor a holder of a leasehold version from before the holders file
//!   (it locks no byte) that took its lease after the holders file was
//!   marked: upgrade every process using a directory together.
//!
//! # Opening
//! [`SqliteBackend::open`] (and [`SqliteBackend::builder`]) never makes a
//! directory: a missing one is [`Error::InvalidInput`] naming it (only
//! `Store::open("sqlite:")` makes the default file's). A file with tables
//! that are not leasehold's, and none of leasehold's, is refused before
//! anything is written (adding the tables would switch another
//! application's database to WAL for good), unless
//! [`SqliteBackendBuilder::shared_file`] (`?shared_file=yes`). A max TTL
//! asked for that the store does not have is logged as a warning: a
//! store's max TTL is fixed when it is created. Test:
//! `tests/sqlite_opening.rs`.
//!
//! # Clock
//! Expiries are measured on `CLOCK_BOOTTIME` ([`SystemClock`]): one clock for
//! every process on the machine, so deadlines written by one process mean the
//! same to another; it does not jump when the wall clock is set (NTP steps,
//! an administrator, a VM resuming), which would make a wall-clock lease
//! expire early or late; and it keeps counting during suspend. It restarts at
//! boot, so every lease records the boot id
//! (`/proc/sys/kernel/random/boot_id`) and a lease from an earlier boot is
//! never live (its holder died with that boot). A process of another boot
//! also starts a new epoch (above), so a database shared by two kernels
//! (two VMs or hosts on a shared file system) is never taken as dead by
//! one while the other runs: the other's holders are told lost at their
//! next renewal and grants wait the quarantine. Such sharing is still not
//! supported (each side keeps voiding the other's leases). On other Unix
//! systems the clock is `CLOCK_MONOTONIC` and there is no boot id: leases
//! from before a reboot stay until their recorded expiry comes round again.
//!
//! # Wake-ups
//! A release or break in one process wakes the waiters of other processes on
//! this machine at once, through inotify on small files beside the database
//! (see `wake.rs`); waiters still poll, so a missed wake-up costs at most a
//! poll interval.
//!
//! # Threads
//! A connection's statements can wait (for the disk, for another process's
//! lock, up to the busy timeout), so operations run in tokio's blocking
//! pool, one at a time on the store's connection. Reads (`inspect`, `list`)
//! run on the calling thread instead when they need not wait: the
//! connection free, open on the file the path names, and SQLite answering
//! with its busy handler off (a WAL reader almost never waits); a read
//! that would have waited goes to the pool and waits there as before
//! (tests: `tests/sqlite_reads.rs`, `open.rs`'s unit tests). The hop to
//! the pool and back cost more than such a read.
//!
//! The file must be on a local file system: SQLite's locking is not reliable
//! over network file systems, and the clock is only shared on one machine.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::config::DbConfig;
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};

use crate::backend::protocol::{check_protocol_number, PROTOCOL};
use crate::backend::{
    epoch_at, next_token, AcquireOutcome, AcquireRequest, Backend, BatchOutcome, Capabilities,
    Creation, EpochRead, Grant, HolderInfo, KeyInfo, Lease, Owner, StoreEpoch, CONFIRMATION_WINDOW,
    DEFAULT_STORE_MAX_TTL, EPOCH_ORIGIN_UNIX_SECS,
};
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, LossReason, Result};
use crate::key::Key;
use crate::memory::{check_ttl, LOCAL_MAX_TTL, LOCAL_MIN_TTL};
use crate::runs::RunRecord;

mod acquire;
mod builder;
mod epoch;
mod holders;
mod open;
mod row;
mod schema;
mod wake;

#[doc(hidden)]
pub use acquire::GRANT;
use acquire::*;
pub use builder::SqliteBackendBuilder;
use epoch::*;
use holders::*;
use open::*;
use row::*;
use schema::*;

const NAME: &str = "sqlite";
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The SQLite [`Backend`]. See the [module docs](self) for the protocol.
#[derive(Debug, Clone)]
pub struct SqliteBackend {
    conn: Arc<Mutex<Option<Open>>>,
    path: PathBuf,
    boot_id: Arc<str>,
    /// The max TTL a store created by this backend gets.
    max_ttl: Duration,
    /// The store's recorded max TTL, in ms (for `capabilities`).
    store_max_ttl_ms: Arc<AtomicU64>,
    holders: Arc<HolderLock>,
    /// Same-machine wake-ups of waiters in other processes.
    wake: Arc<wake::Wake>,
    /// The store's epoch as [`open`](Self::open) found it.
    opened_epoch: Option<EpochRead>,
    /// Whether [`open`](Self::open) created the store (see
    /// [`Backend::created_at_open`]).
    created_at_open: Option<bool>,
    /// What opening may do to the file (see [`Creation`]).
    creation: Creation,
    /// Whether a file with other applications' tables may be used (see
    /// [`SqliteBackendBuilder::shared_file`]).
    shared_file: bool,
}

/// A connection and what it was opened on.
#[derive(Debug)]
pub(super) struct Open {
    conn: Connection,
    file: FileId,
    /// The store's epoch when the connection was opened.
    epoch: StoreEpoch,
    /// The store's recorded max TTL then.
    max_ttl: Duration,
    /// Whether this connection's opening created the store.
    created: bool,
}

/// The size of the WAL file up to which closing a connection leaves it as
/// it is, for the next process to use. See [`Open`]'s `Drop`.
pub(super) const WAL_KEPT_AT_CLOSE: u64 = 256 * 1024;

impl Open {
    /// Whether `path` names the file this connection was opened on now (a
    /// file deleted or replaced since does not).
    pub(super) fn is_at(&self, path: &Path) -> bool {
        FileId::of(path).is_ok_and(|now| now == self.file)
    }
}

impl Drop for Open {
    /// SQLite's last connection to a database checkpoints the WAL into the
    /// database file and deletes it when it closes: two fsyncs, and the next
    /// process to write creates the WAL again (one more, its header, besides
    /// the directory sync SQLite does on any connection's first write to the
    /// WAL). A short-lived process (`leasehold run`) paid five fsyncs where
    /// two are needed. Connections are opened with that
    /// checkpoint off, and a closing connection turns it back on only when
    /// the WAL has grown past [`WAL_KEPT_AT_CLOSE`], so the next process's
    /// first read, which rebuilds the WAL's index from the whole file, stays
    /// short. Nothing is less durable: every commit is already in the WAL
    /// (fsynced where it issues a token), and a WAL left behind is what any
    /// killed process leaves, which SQLite recovers on the next open (and
    /// deletes when the database file is empty, so a deleted database does
    /// not inherit it).
    fn drop(&mut self) {
        let big = self
            .conn
            .path()
            .and_then(|db| std::fs::metadata(format!("{db}-wal")).ok())
            .is_some_and(|wal| wal.len() > WAL_KEPT_AT_CLOSE);
        if big {
            let _ = self
                .conn
                .set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, false);
        }
    }
}

pub(super) struct Ctx {
    boot_id: Arc<str>,
    path: PathBuf,
    /// The file the connection is on.
    file: FileId,
}

impl Ctx {
    fn now_ns(&self) -> i64 {
        SystemClock.now().as_nanos() as i64
    }

    /// Whether the path still names the connection's file.
    fn same_file(&self) -> bool {
        FileId::of(&self.path).ok() == Some(self.file)
    }
}

pub(super) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub(super) fn db_error(op: &'static str, e: rusqlite::Error) -> Error {
    let retryable = matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    );
    Error::backend(NAME, op, retryable, e)
}

/// What an acquisition's answer says of its leases.
trait Granted {
    fn granted(&self) -> bool;
}

impl Granted for AcquireOutcome {
    fn granted(&self) -> bool {
        matches!(self, AcquireOutcome::Acquired(_))
    }
}

impl Granted for BatchOutcome {
    fn granted(&self) -> bool {
        matches!(self, BatchOutcome::Acquired(_))
    }
}

impl SqliteBackend {
    /// Runs the acquire transaction `attempt` of `requests`: the directory
    /// lock held for each lease id from before the grant is asked for
    /// (see the module docs), and the commit fsynced.
    async fn acquiring<T: Granted + Send + 'static>(
        &self,
        requests: &[AcquireRequest],
        attempt: impl FnOnce(&mut Connection, &Ctx) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let holders = self.holders.clone();
        let lease_ids: Vec<_> = requests.iter().map(|r| r.lease_id.clone()).collect();
        if requests.iter().any(|r| r.epoch.is_some()) {
            for id in &lease_ids {
                holders.hold(id.as_str())?;
            }
        }
        let result = self
            .run("acquire", false, move |conn, ctx| {
                let conn = conn.expect("acquire re-opens");
                // A commit that issues a fencing token is fsynced before it is
                // acknowledged, so a power cut can never make the same token be
                // issued twice (in WAL mode that fsync also covers every NORMAL
                // commit before it).
                conn.prepare_cached("PRAGMA synchronous = FULL")
                    .and_then(|mut st| st.execute([]))
                    .map_err(|e| db_error("acquire", e))?;
                let result = attempt(conn, ctx);
                let normal = conn
                    .prepare_cached("PRAGMA synchronous = NORMAL")
                    .and_then(|mut st| st.execute([]));
                let outcome = result?;
                normal.map_err(|e| db_error("acquire", e))?;
                Ok(outcome)
            })
            .await;
        match &result {
            Ok(outcome) if outcome.granted() => {}
            // An error may hide a grant: keep the lock until it is released.
            Err(e) if e.is_retryable() => {}
            _ => lease_ids.iter().for_each(|id| holders.let_go(id.as_str())),
        }
        result
    }
}

#[async_trait]
impl Backend for SqliteBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        let max = Duration::from_millis(self.store_max_ttl_ms.load(Ordering::Relaxed));
        Capabilities::new(LOCAL_MIN_TTL, max).shared_across_processes(true)
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        let owned = req.clone();
        self.acquiring(std::slice::from_ref(req), move |conn, ctx| {
            acquire_in(conn, ctx, &owned)
        })
        .await
    }

    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<BatchOutcome> {
        let reqs = requests.to_vec();
        self.acquiring(requests, move |conn, ctx| acquire_all_in(conn, ctx, &reqs))
            .await
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        let lease_id = lease.lease_id.clone();
        let lease = lease.clone();
        let result = self
            .run("renew", true, move |conn, ctx| {
                let Some(conn) = conn else {
                    return Err(replaced(&lease));
                };
                let op = |e| db_error("renew", e);
                let now = ctx.now_ns();
                let changed = conn
                    .prepare_cached(
                        "UPDATE leasehold_leases SET expires_at_ns = ?3
                         WHERE key = ?1 AND lease_id = ?2 AND boot_id = ?4 AND expires_at_ns > ?5
                           AND (SELECT epoch FROM leasehold_store WHERE id = 1) = ?6",
                    )
                    .and_then(|mut st| {
                        st.execute(params![
                            lease.key.as_str(),
                            lease.lease_id.as_str(),
                            now + lease.ttl.as_nanos() as i64,
                            &*ctx.boot_id,
                            now,
                            lease.epoch as i64
                        ])
                    })
                    .map_err(op)?;
                if changed == 1 {
                    return Ok(());
                }
                if read_epoch(conn).map_err(op)?.map(|r| r.epoch) != Some(lease.epoch) {
                    return Err(lost(
                        &lease,
                        "the store's epoch changed (its data was lost)",
                    ));
                }
                let row = get_row(conn, lease.key.as_str()).map_err(op)?;
                Err(lost(&lease, why_not_ours(row.as_ref(), &lease)))
            })
            .await;
        if matches!(result, Err(Error::LeaseLost { .. })) {
            self.holders.let_go(lease_id.as_str());
        }
        result
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        let lease_id = lease.lease_id.clone();
        let key = lease.key.clone();
        let result = self
            .run("release", true, move |conn, _ctx| {
                let Some(conn) = conn else {
                    return Err(replaced(&lease));
                };
                let op = |e| db_error("release", e);
                let changed = conn
                    .prepare_cached(
                        "UPDATE leasehold_leases SET lease_id = NULL, boot_id = NULL, expires_at_ns = NULL
                         WHERE key = ?1 AND lease_id = ?2",
                    )
                    .and_then(|mut st| st.execute(params![lease.key.as_str(), lease.lease_id.as_str()]))
                    .map_err(op)?;
                if changed == 1 {
                    return Ok(());
                }
                let row = get_row(conn, lease.key.as_str()).map_err(op)?;
                Err(lost(&lease, why_not_ours(row.as_ref(), &lease)))
            })
            .await;
        if !matches!(&result, Err(e) if e.is_retryable()) {
            self.holders.let_go(lease_id.as_str());
        }
        if result.is_ok() {
            self.wake.notify(&key);
        }
        result
    }

    async fn record_run(&self, lease: &Lease, run: &RunRecord) -> Result<()> {
        let lease = lease.clone();
        let run = run.clone();
        self.run("record_run", true, move |conn, _ctx| {
            let Some(conn) = conn else {
                return Err(replaced(&lease));
            };
            let op = |e| db_error("record_run", e);
            let text = run.to_stored();
            let token = run.fencing_token as i64;
            let changed = conn
                .execute(
                    "UPDATE leasehold_leases SET last_run = ?3, last_run_token = ?4,
                       last_success = CASE WHEN ?5 THEN ?3 ELSE last_success END
                     WHERE key = ?1 AND lease_id = ?2",
                    params![
                        lease.key.as_str(),
                        lease.lease_id.as_str(),
                        text,
                        token,
                        run.succeeded()
                    ],
                )
                .map_err(op)?;
            if changed == 1 {
                return Ok(());
            }
            if !run.succeeded() {
                // Not ours any more: still the last run, unless a later
                // run's record is there.
                conn.execute(
                    "UPDATE leasehold_leases SET last_run = ?2, last_run_token = ?3
                     WHERE key = ?1 AND (last_run_token IS NULL OR last_run_token < ?3)",
                    params![lease.key.as_str(), text, token],
                )
                .map_err(op)?;
            }
            let row = get_row(conn, lease.key.as_str()).map_err(op)?;
            Err(lost(&lease, why_not_ours(row.as_ref(), &lease)))
        })
        .await
    }

    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        let key = key.clone();
        self.read("inspect", move |conn, ctx| {
            let row = get_row(conn, key.as_str()).map_err(|e| db_error("inspect", e))?;
            let now = ctx.now_ns();
            match row {
                Some(r) => r.info(key.clone(), ctx, now),
                None => Ok(KeyInfo::new(key.clone(), 0, None)),
            }
        })
        .await
    }

    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        let broken = key.clone();
        let key = key.clone();
        let result = self.run("break", false, move |conn, ctx| {
            let conn = conn.expect("break re-opens");
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
        .await;
        if result.is_ok() {
            self.wake.notify(&broken);
        }
        result
    }

    fn watch_release(&self, keys: &[Key]) -> Option<crate::backend::ReleaseWatch> {
        self.wake.watch(keys)
    }

    fn epoch_at_open(&self) -> Option<StoreEpoch> {
        self.opened_epoch.as_ref().map(EpochRead::as_of_now)
    }

    fn created_at_open(&self) -> Option<bool> {
        self.created_at_open
    }

    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        // Key characters include no GLOB metacharacters, so a prefix GLOB is
        // an exact prefix match (and can use the primary key index).
        let pattern = format!("{prefix}*");
        self.read("list", move |conn, ctx| {
            let op = |e| db_error("list", e);
            let now = ctx.now_ns();
            let mut stmt = conn
                .prepare(&format!("{SELECT} WHERE key GLOB ?1 ORDER BY key"))
                .map_err(op)?;
            let rows = stmt
                .query_map([&pattern], read_row)
                .map_err(op)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(op)?;
            rows.into_iter()
                .map(|(k, r)| {
                    let key = Key::new(k)?;
                    r.info(key, ctx, now)
                })
                .collect()
        })
        .await
    }
}
