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
//!   lease and answer the new fence.
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
//!     settled_at_ns INTEGER NOT NULL
//! );
//! ```
//!
//! * **The file under an open connection.** A connection knows the identity
//!   of the file it opened (checked by `stat` before and after opening).
//!   Every operation first compares it with what the path names now: a file
//!   deleted or replaced (a cleanup script, a restored backup, `mv`) makes
//!   renewals and releases a definitive loss, and every other operation
//!   re-opens the path, so a missing file is never an empty store without
//!   the epoch rule below. A renewal checks the epoch in the same `UPDATE`.
//! * **Many processes creating one file** at once all open it: the schema
//!   is `CREATE TABLE IF NOT EXISTS` (SQLite runs each under its write lock
//!   and re-reads the schema first, so a creator that waited finds the
//!   other's tables), the run columns and the epoch row are written in
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
//!   shared `flock` on the database's directory. The process starting an
//!   epoch tries an exclusive, non-blocking `flock` on the directory: if it
//!   gets it, no process on this machine holds a lease of any epoch there,
//!   and the new epoch is settled at once; otherwise it is settled one
//!   [confirmation window](crate::CONFIRMATION_WINDOW) (+0.1 %) later on
//!   the boot clock, which every process on the machine shares. The epoch's
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
//!   `leader`), nothing is created or written: no file, or a file without
//!   the lease table, is [`Error::NoStore`], and an epoch row of another
//!   file or boot is reported as it is, not renewed.
//!
//!   The directory is the one the file really is in (symbolic links
//!   resolved), so processes that reach one file by different paths share
//!   the proof.
//!
//!   Not covered: the *directory itself* deleted and re-created by
//!   something else while a lease is held (the old holder's lock is on the
//!   old directory). Do not delete the directory of a store in use. Nor a
//!   copy written *over* the file in place (`cp backup.db leases.db` keeps
//!   the inode, so the file's identity does not change and its counters go
//!   back): restore a backup by moving it into place.
//!   Several stores in one directory share the proof: starting an epoch
//!   while another store there has holders costs the quarantine.
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

use crate::backend::{
    epoch_at, next_token, AcquireOutcome, AcquireRequest, Backend, Capabilities, Creation,
    EpochRead, Grant, HolderInfo, KeyInfo, Lease, Owner, StoreEpoch, CONFIRMATION_WINDOW,
    DEFAULT_STORE_MAX_TTL, EPOCH_ORIGIN_UNIX_SECS,
};
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, LossReason, Result};
use crate::key::Key;
use crate::memory::{check_ttl, LOCAL_MAX_TTL, LOCAL_MIN_TTL};
use crate::runs::RunRecord;

mod wake;

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
    acquired_at_ms INTEGER,
    last_success   TEXT,
    last_run       TEXT,
    last_run_token INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leasehold_store (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    epoch         INTEGER NOT NULL,
    max_ttl_ms    INTEGER NOT NULL,
    file_dev      INTEGER NOT NULL,
    file_ino      INTEGER NOT NULL,
    boot_id       TEXT NOT NULL,
    settled_at_ns INTEGER NOT NULL
);
";

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
    /// What opening may do to the file (see [`Creation`]).
    creation: Creation,
}

/// A connection and what it was opened on.
#[derive(Debug)]
struct Open {
    conn: Connection,
    file: FileId,
    /// The store's epoch when the connection was opened.
    epoch: StoreEpoch,
}

/// The size of the WAL file up to which closing a connection leaves it as
/// it is, for the next process to use. See [`Open`]'s `Drop`.
const WAL_KEPT_AT_CLOSE: u64 = 256 * 1024;

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

/// A file's identity: device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(path: &Path) -> std::io::Result<FileId> {
        let m = std::fs::metadata(path)?;
        Ok(FileId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// The epoch row.
#[derive(Debug, Clone)]
struct EpochRow {
    epoch: u64,
    max_ttl: Duration,
    file: FileId,
    boot_id: String,
    settled_at_ns: i64,
}

impl SqliteBackend {
    /// Opens (creating if needed) the store at `path`, and its parent
    /// directory. A store created here gets the default max TTL
    /// ([`DEFAULT_STORE_MAX_TTL`]).
    ///
    /// Many processes may open (and create) the same file at once: every
    /// step waits on SQLite's lock like any other operation.
    ///
    /// # Errors
    /// [`Error::Backend`] if the directory or database cannot be created or
    /// opened.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with_max_ttl(path, DEFAULT_STORE_MAX_TTL)
    }

    /// Like [`open`](Self::open); a store this call creates (or a new epoch
    /// it starts) records `max_ttl` (100 ms to 24 h) as its max TTL: no lease
    /// may be longer. An existing store keeps its own. (After the store's
    /// data is lost under a live holder, grants wait one
    /// [confirmation window](crate::CONFIRMATION_WINDOW), whatever the max
    /// TTL.)
    ///
    /// # Errors
    /// As [`open`](Self::open); [`Error::InvalidInput`] for a max TTL out of
    /// range.
    pub fn open_with_max_ttl(path: impl AsRef<Path>, max_ttl: Duration) -> Result<Self> {
        Self::open_with(path, max_ttl, Creation::IfMissing)
    }

    /// Like [`open_with_max_ttl`](Self::open_with_max_ttl), with what
    /// opening may do to the file: with [`Creation::Never`] nothing is
    /// created or written, ever (a file without leasehold's tables, or no
    /// file, is [`Error::NoStore`]; an epoch row of another file or boot is
    /// reported as it is, not renewed); with [`Creation::NewProven`] a new
    /// file's epoch is settled at once (the caller states that no earlier
    /// store existed here), as it is when no process on the machine holds
    /// a lease in its directory.
    ///
    /// # Errors
    /// As [`open_with_max_ttl`](Self::open_with_max_ttl);
    /// [`Error::NoStore`] as above.
    pub fn open_with(
        path: impl AsRef<Path>,
        max_ttl: Duration,
        creation: Creation,
    ) -> Result<Self> {
        if !(LOCAL_MIN_TTL..=LOCAL_MAX_TTL).contains(&max_ttl) {
            return Err(Error::invalid(
                "max ttl",
                format!("{max_ttl:?} is outside {LOCAL_MIN_TTL:?}..={LOCAL_MAX_TTL:?}"),
            ));
        }
        let path = path.as_ref().to_path_buf();
        // A store is a file: a path that names a directory would otherwise
        // fail later as "unable to open database file", or, with a
        // trailing '/', create a file where the directory was meant.
        if path.as_os_str().as_encoded_bytes().ends_with(b"/") || path.is_dir() {
            return Err(Error::invalid(
                "store URL",
                format!(
                    "{} names a directory: a SQLite store is a file (e.g. {})",
                    path.display(),
                    path.join("leases.db").display()
                ),
            ));
        }
        let backend = SqliteBackend {
            conn: Arc::new(Mutex::new(None)),
            holders: Arc::new(HolderLock::new(path.clone())),
            wake: Arc::new(wake::Wake::new(&path)),
            path,
            boot_id: boot_id().into(),
            max_ttl,
            store_max_ttl_ms: Arc::new(AtomicU64::new(max_ttl.as_millis() as u64)),
            opened_epoch: None,
            creation,
        };
        let open = backend.connect()?;
        let backend = SqliteBackend {
            opened_epoch: Some(EpochRead::now(open.epoch.clone())),
            // A file created again later is not the operator's new store.
            creation: creation.after_open(),
            ..backend
        };
        *backend.conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(open);
        Ok(backend)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the path, retrying while another process holds SQLite's lock
    /// (creating a file and its schema takes locks a busy handler does not
    /// always cover), and settles its epoch.
    fn connect(&self) -> Result<Open> {
        let started = std::time::Instant::now();
        loop {
            match self.try_connect() {
                Err(
                    e @ Error::Backend {
                        retryable: true, ..
                    },
                ) => {
                    if started.elapsed() >= BUSY_TIMEOUT {
                        return Err(e);
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                other => return other,
            }
        }
    }

    fn try_connect(&self) -> Result<Open> {
        let fail = |what: String| Error::backend(NAME, "open", false, what);
        let look = self.creation == Creation::Never;
        let dir = dir_of(&self.path);
        if look {
            if !self.path.exists() {
                return Err(Error::no_store(format!(
                    "{} does not exist",
                    self.path.display()
                )));
            }
        } else {
            std::fs::create_dir_all(&dir).map_err(|e| {
                // One of the path's parents is a file.
                let not_a_dir = dir.ancestors().find(|a| a.is_file());
                match not_a_dir {
                    Some(file) => fail(format!(
                        "cannot create the directory {}: {} is a file, not a directory",
                        dir.display(),
                        file.display()
                    )),
                    None => fail(format!(
                        "cannot create the directory {}: {e}",
                        dir.display()
                    )),
                }
            })?;
        }
        let mut attempts = 0;
        let (mut conn, file) = loop {
            attempts += 1;
            // The file's identity before and after opening: equal, the
            // connection is on that file (a swap in between shows).
            let before = FileId::of(&self.path).ok();
            // Looking never creates the file (it may vanish meanwhile).
            let flags = if look {
                OpenFlags::default() - OpenFlags::SQLITE_OPEN_CREATE
            } else {
                OpenFlags::default()
            };
            let conn = Connection::open_with_flags(&self.path, flags).map_err(|e| {
                fail(format!(
                    "cannot open {}: {e}{}",
                    self.path.display(),
                    why_not_writable(&self.path, &dir)
                ))
            })?;
            let after = FileId::of(&self.path).ok();
            match (before, after) {
                (Some(b), Some(a)) if a == b => break (conn, a),
                _ if attempts < 10 => continue,
                _ => {
                    return Err(Error::backend(
                        NAME,
                        "open",
                        true,
                        format!("{} keeps being replaced", self.path.display()),
                    ))
                }
            }
        };
        // The busy handler before anything that takes a lock.
        conn.busy_handler(Some(retry_while_busy))
            .map_err(|e| db_error("open", e))?;
        if look && !has_lease_table(&conn).map_err(|e| db_error("open", e))? {
            return Err(Error::no_store(format!(
                "{} has no leasehold tables",
                self.path.display()
            )));
        }
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| db_error("open", e))?;
        // The WAL outlives this connection unless it has grown (see `Open`).
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(|e| db_error("open", e))?;
        // NORMAL: renewals and releases need no fsync of their own (a
        // renewal lost in a power cut belongs to a holder that died with the
        // machine); acquisitions switch to FULL, see `try_acquire`.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| db_error("open", e))?;
        // Idempotent, whoever created the file; skipped when the file has
        // it all, which one query tells (parsing the statements is a fifth
        // of opening a store in a short-lived process).
        if !look && !has_schema(&conn).map_err(|e| db_error("open", e))? {
            conn.execute_batch(SCHEMA)
                .map_err(|e| db_error("open", e))?;
            add_run_columns(&mut conn).map_err(|e| db_error("open", e))?;
        }
        let row = self.settle(&mut conn, file)?;
        self.store_max_ttl_ms
            .store(row.max_ttl.as_millis() as u64, Ordering::Relaxed);
        let ctx = Ctx {
            boot_id: self.boot_id.clone(),
            path: self.path.clone(),
            file,
        };
        let epoch = store_epoch(&row, &ctx, ctx.now_ns());
        Ok(Open { conn, file, epoch })
    }

    /// Reads the epoch row, starting a new epoch if the file has none, or
    /// one written in another file or boot (see the module docs).
    fn settle(&self, conn: &mut Connection, file: FileId) -> Result<EpochRow> {
        let op = |e| db_error("open", e);
        let found = read_epoch(conn).map_err(op)?;
        if let Some(row) = &found {
            if row.file == file && row.boot_id == *self.boot_id {
                return Ok(row.clone());
            }
        }
        if self.creation == Creation::Never {
            // Looking writes nothing: the row as it is (another file's or
            // boot's epoch, which the next acquirer renews), or, in a file
            // with no epoch row yet, an epoch of unknown age.
            return Ok(found.unwrap_or(EpochRow {
                epoch: epoch_at(SystemTime::now()),
                max_ttl: self.max_ttl,
                file,
                boot_id: String::new(),
                settled_at_ns: 0,
            }));
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(op)?;
        let old = read_epoch(&tx).map_err(op)?;
        if let Some(row) = &old {
            if row.file == file && row.boot_id == *self.boot_id {
                return Ok(row.clone());
            }
            // Inside the write transaction: a process that opened the
            // replaced file first would have named it in the row before
            // writing anything else, so pages in the WAL now were written
            // for another file. Nothing is written (the transaction is
            // rolled back).
            let pages = wal_pages_not_in_file(&self.path);
            if row.file != file && pages > 0 {
                let path = self.path.display();
                return Err(Error::backend(
                    NAME,
                    "open",
                    false,
                    format!(
                        "{path} was replaced (a copy or a restored backup) while {path}-wal still holds {pages} pages written for the file it replaced, which SQLite reads over this one; stop every process using the store, remove {path}-wal and {path}-shm, and open it again (a new store epoch begins; nothing in that WAL is needed)"
                    ),
                ));
            }
        }
        let now = SystemClock.now().as_nanos() as i64;
        let has_rows = tx
            .query_row("SELECT EXISTS (SELECT 1 FROM leasehold_leases)", [], |r| {
                r.get::<_, bool>(0)
            })
            .map_err(op)?;
        let live_rows = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM leasehold_leases WHERE lease_id IS NOT NULL)",
                [],
                |r| r.get::<_, bool>(0),
            )
            .map_err(op)?;
        let (epoch, settled, why) = match &old {
            // Written before epochs: same file, nothing lost, leases kept.
            None if has_rows => (
                epoch_at(SystemTime::now()),
                PROVEN,
                "a store from before epochs",
            ),
            None => {
                // The creator's statement that no earlier store existed
                // (`leasehold init --new`), or the directory lock's proof.
                let stated = self.creation == Creation::NewProven;
                let safe = stated || self.holders.none_in_directory();
                (
                    next_epoch(0),
                    if safe { PROVEN } else { now + quarantine_ns() },
                    if stated {
                        "a new file, stated to have no earlier store"
                    } else {
                        "a new file"
                    },
                )
            }
            Some(row) => {
                let replaced = row.file != file;
                let other_boot = row.boot_id != *self.boot_id;
                // Holders of a replaced file's data are invisible here (in
                // another file): only the directory lock can tell. Holders
                // of another boot are rows of this file.
                let safe =
                    (!replaced || self.holders.none_in_directory()) && (!other_boot || !live_rows);
                let why = if replaced {
                    "the file was replaced (a copy or a restored backup)"
                } else {
                    "the file was last used by another boot"
                };
                (
                    next_epoch(row.epoch),
                    if safe { PROVEN } else { now + quarantine_ns() },
                    why,
                )
            }
        };
        let keep_leases = old.is_none() && has_rows;
        if !keep_leases {
            // Leases of the old epoch (a copy's, another boot's) are void.
            tx.execute(
                "UPDATE leasehold_leases SET lease_id = NULL, boot_id = NULL, expires_at_ns = NULL WHERE lease_id IS NOT NULL",
                [],
            )
            .map_err(op)?;
        }
        let row = EpochRow {
            epoch,
            max_ttl: self.max_ttl,
            file,
            boot_id: self.boot_id.to_string(),
            settled_at_ns: settled,
        };
        tx.execute(
            "INSERT OR REPLACE INTO leasehold_store (id, epoch, max_ttl_ms, file_dev, file_ino, boot_id, settled_at_ns)
             VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                row.epoch as i64,
                ms(row.max_ttl),
                row.file.dev as i64,
                row.file.ino as i64,
                row.boot_id,
                row.settled_at_ns
            ],
        )
        .map_err(op)?;
        tx.commit().map_err(op)?;
        tracing::info!(
            path = %self.path.display(),
            epoch,
            quarantine = ?Duration::from_nanos(settled.saturating_sub(now).max(0) as u64),
            "new store epoch: {why}"
        );
        Ok(row)
    }

    /// Runs `f` on a connection to the file the path names now, in the
    /// blocking pool (SQLite calls block, up to the busy timeout). With
    /// `same_file`, a connection whose file was deleted or replaced is not
    /// re-opened: `f` gets `None` (the lease it is about is lost).
    async fn run<T: Send + 'static>(
        &self,
        op: &'static str,
        same_file: bool,
        f: impl FnOnce(Option<&mut Connection>, &Ctx) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut slot = this.conn.lock().unwrap_or_else(|e| e.into_inner());
            let current = FileId::of(&this.path).ok();
            let fresh = matches!((&*slot, current), (Some(o), Some(c)) if o.file == c);
            if !fresh {
                if same_file {
                    *slot = None;
                    return f(None, &this.ctx());
                }
                tracing::warn!(path = %this.path.display(), "the database file was deleted or replaced; re-opening");
                *slot = None;
                *slot = Some(this.connect()?);
            }
            let open = slot.as_mut().expect("connected above");
            let file = open.file;
            f(Some(&mut open.conn), &this.ctx_for(file))
        })
        .await
        .map_err(|e| Error::backend(NAME, op, false, format!("database task failed: {e}")))?
    }

    fn ctx(&self) -> Ctx {
        self.ctx_for(FileId { dev: 0, ino: 0 })
    }

    fn ctx_for(&self, file: FileId) -> Ctx {
        Ctx {
            boot_id: self.boot_id.clone(),
            path: self.path.clone(),
            file,
        }
    }
}

/// The parent directory of a database path (`.` for a bare file name).
fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The epoch to start after `old`: the wall clock's next whole second
/// (waiting for it, so that no later epoch on this clock can equal it), and
/// above `old`.
fn next_epoch(old: u64) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let next = Duration::from_secs(now.as_secs() + 1);
    std::thread::sleep(next.saturating_sub(now));
    (next.as_secs().saturating_sub(EPOCH_ORIGIN_UNIX_SECS)).max(old + 1)
}

/// `settled_at_ns` of an epoch that began when no lease of an earlier one
/// could be live (proved by the directory lock, or by the file's rows).
/// A version that reads it as a time has it settled long ago, as it is.
const PROVEN: i64 = i64::MIN;

/// How long after an epoch began without proof it is settled: one
/// confirmation window (+0.1 %). The epoch's age is read back from
/// `settled_at_ns` with the same constant, so it is the time since the
/// epoch began whatever window a process uses.
fn quarantine_ns() -> i64 {
    (CONFIRMATION_WINDOW + CONFIRMATION_WINDOW / 1000).as_nanos() as i64
}

/// What keeps this process from writing the store's file or its
/// directory, if anything can be told (SQLite says "unable to open
/// database file" for every cause): "" if nothing is found.
fn why_not_writable(path: &Path, dir: &Path) -> String {
    let writable = |p: &Path| {
        use std::os::unix::ffi::OsStrExt;
        let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
            return true;
        };
        // SAFETY: a valid NUL-terminated path; access() only reads it.
        unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) == 0 }
    };
    if path.exists() && !writable(path) {
        format!(
            " ({} cannot be read and written by this user)",
            path.display()
        )
    } else if !writable(dir) {
        format!(
            " (this user cannot write in {}, where SQLite keeps the file and its -wal and -shm files)",
            dir.display()
        )
    } else {
        String::new()
    }
}

/// How many pages the WAL beside `path` holds that are not yet copied into
/// the database file: `mxFrame - nBackfill` from the WAL-index in the
/// `-shm` file (SQLite's documented format, <https://sqlite.org/walformat.html>:
/// `isInit` at byte 12, `mxFrame` at 16, `nBackfill` at 96, native byte
/// order), current once a connection has read the file. SQLite has no call
/// that tells this without checkpointing, which would copy the pages in.
/// 0 when there is no such file or it is not initialised.
fn wal_pages_not_in_file(path: &Path) -> u32 {
    use std::io::Read;
    let mut shm = path.as_os_str().to_owned();
    shm.push("-shm");
    let mut header = [0u8; 100];
    let read = std::fs::File::open(shm).and_then(|mut f| f.read_exact(&mut header));
    if read.is_err() || header[12] == 0 {
        return 0;
    }
    let word = |at: usize| {
        u32::from_ne_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    word(16).saturating_sub(word(96))
}

fn read_epoch(conn: &Connection) -> rusqlite::Result<Option<EpochRow>> {
    // Cached statements (here and in the other hot paths): parsing the SQL
    // again each time costs about as much as running it.
    conn.prepare_cached(
        "SELECT epoch, max_ttl_ms, file_dev, file_ino, boot_id, settled_at_ns FROM leasehold_store WHERE id = 1",
    )?
    .query_row(
        [],
        |r| {
            Ok(EpochRow {
                epoch: r.get::<_, i64>(0)? as u64,
                max_ttl: Duration::from_millis(r.get::<_, i64>(1)? as u64),
                file: FileId {
                    dev: r.get::<_, i64>(2)? as u64,
                    ino: r.get::<_, i64>(3)? as u64,
                },
                boot_id: r.get(4)?,
                settled_at_ns: r.get(5)?,
            })
        },
    )
    .optional()
}

/// The shared `flock` on the database's directory that this process keeps
/// while it holds (or is about to be granted) any lease, and the check that
/// no process holds one (see the module docs). `flock` through libc: std's
/// `File::lock` needs Rust 1.89, above this crate's MSRV.
#[derive(Debug)]
struct HolderLock {
    /// The database file as opened (maybe a symbolic link).
    db: PathBuf,
    state: Mutex<HolderState>,
}

#[derive(Debug, Default)]
struct HolderState {
    /// Lease ids held or being asked for.
    leases: HashSet<String>,
    /// The directory, opened for the database file it was resolved for;
    /// locked shared while `leases` is not empty. Kept open between leases
    /// (unlocked), so that an uncontended cycle costs one `stat` and two
    /// `flock`s, not a path resolution and an `open`.
    dir: Option<(FileId, std::fs::File)>,
}

impl HolderLock {
    fn new(db: PathBuf) -> Self {
        HolderLock {
            db,
            state: Mutex::default(),
        }
    }

    /// The directory the database file really is in: symbolic links
    /// resolved (SQLite resolves them too), so that processes reaching one
    /// file by different paths lock the same directory.
    fn dir(&self) -> PathBuf {
        std::fs::canonicalize(&self.db)
            .ok()
            .and_then(|real| real.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| dir_of(&self.db))
    }

    /// Notes that `lease_id` holds or is about to be granted a lease.
    fn hold(&self, lease_id: &str) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.leases.is_empty() {
            // The directory of the file the path names now: the one opened
            // before if the path still names the same file (a path that
            // names another file, maybe through a re-pointed link, is
            // resolved again).
            let file = FileId::of(&self.db).ok();
            let reuse = matches!((&state.dir, file), (Some((was, _)), Some(now)) if *was == now);
            if !reuse {
                state.dir = None;
                let path = self.dir();
                let dir = std::fs::File::open(&path).map_err(|e| {
                    Error::backend(
                        NAME,
                        "acquire",
                        false,
                        format!("cannot open {}: {e}", path.display()),
                    )
                })?;
                // With no file yet (it is about to be created), a FileId
                // that matches none: resolved again next time.
                state.dir = Some((file.unwrap_or(FileId { dev: 0, ino: 0 }), dir));
            }
            let (_, dir) = state.dir.as_ref().expect("opened above");
            // SAFETY: flock on a valid open descriptor; blocks only while an
            // epoch's creator holds the exclusive lock (a moment).
            let rc = unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_SH) };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                state.dir = None;
                return Err(Error::backend(
                    NAME,
                    "acquire",
                    true,
                    format!("cannot lock the directory of {}: {e}", self.db.display()),
                ));
            }
        }
        state.leases.insert(lease_id.to_string());
        Ok(())
    }

    /// Notes that `lease_id` holds nothing any more.
    fn let_go(&self, lease_id: &str) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.leases.remove(lease_id) && state.leases.is_empty() {
            if let Some((_, dir)) = &state.dir {
                // SAFETY: as above; unlocking never blocks.
                if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_UN) } != 0 {
                    // Closing the descriptor drops the lock for sure.
                    state.dir = None;
                }
            }
        }
    }

    /// Whether no process (this one included) holds a lease in the
    /// directory: an exclusive lock on it can be had.
    fn none_in_directory(&self) -> bool {
        let Ok(dir) = std::fs::File::open(self.dir()) else {
            return false;
        };
        // SAFETY: as above; non-blocking. The lock is dropped with `dir`.
        unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
    }
}

struct Ctx {
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

/// Adds the run-record columns to a table made before they existed (under
/// the write lock, so two openers cannot both add them).
/// Whether the file has both tables, with the run record columns.
/// Whether the file has leasehold's lease table (looking needs no more).
fn has_lease_table(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'leasehold_leases')",
        [],
        |r| r.get(0),
    )
}

fn has_schema(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT (SELECT COUNT(*) FROM sqlite_schema
                 WHERE type = 'table' AND name IN ('leasehold_leases', 'leasehold_store')) = 2
            AND EXISTS (SELECT 1 FROM pragma_table_info('leasehold_leases')
                        WHERE name = 'last_run_token')",
        [],
        |r| r.get(0),
    )
}

fn add_run_columns(conn: &mut Connection) -> rusqlite::Result<()> {
    let has = |conn: &Connection| {
        conn.query_row(
            "SELECT COUNT(*) FROM pragma_table_info('leasehold_leases') WHERE name = 'last_run_token'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n > 0)
    };
    if has(conn)? {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if !has(&tx)? {
        tx.execute_batch(
            "ALTER TABLE leasehold_leases ADD COLUMN last_success TEXT;
             ALTER TABLE leasehold_leases ADD COLUMN last_run TEXT;
             ALTER TABLE leasehold_leases ADD COLUMN last_run_token INTEGER;",
        )?;
    }
    tx.commit()
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
    last_success: Option<String>,
    last_run: Option<String>,
}

const SELECT: &str = "SELECT key, fence, lease_id, boot_id, expires_at_ns, ttl_ms, owner_host, owner_pid, owner_label, data, acquired_at_ms, last_success, last_run FROM leasehold_leases";

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
            last_success: r.get(11)?,
            last_run: r.get(12)?,
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

    fn info(&self, key: Key, ctx: &Ctx, now_ns: i64) -> Result<KeyInfo> {
        let decode = |text: &Option<String>| {
            text.as_deref()
                .map(|t| RunRecord::from_stored(NAME, t))
                .transpose()
        };
        Ok(KeyInfo::new(key, self.fence, self.holder(ctx, now_ns))
            .with_runs(decode(&self.last_success)?, decode(&self.last_run)?))
    }
}

fn get_row(conn: &Connection, key: &str) -> rusqlite::Result<Option<Row>> {
    conn.prepare_cached(&format!("{SELECT} WHERE key = ?1"))?
        .query_row([key], read_row)
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

/// The epoch as reported to the core: its age on the boot clock, which
/// every process of this boot shares (unknown for another boot's row,
/// which `settle` never leaves in place).
fn store_epoch(row: &EpochRow, ctx: &Ctx, now_ns: i64) -> StoreEpoch {
    let age = (row.boot_id == *ctx.boot_id).then(|| {
        if row.settled_at_ns == PROVEN {
            // No lease of an earlier epoch was live when it began.
            return Duration::MAX;
        }
        // Since the epoch began: settled_at_ns is its beginning plus the
        // quarantine. (A row an older version wrote without proof records
        // its beginning plus that version's quarantine, one max TTL.)
        let began = row.settled_at_ns.saturating_sub(quarantine_ns());
        Duration::from_nanos(now_ns.saturating_sub(began).max(0) as u64)
    });
    StoreEpoch::new(row.epoch, row.max_ttl).with_age(age)
}

fn replaced(lease: &Lease) -> Error {
    lost(
        lease,
        "the database file was deleted or replaced (its data, and the lease, are gone)",
    )
}

/// The acquire transaction (see the module docs).
fn acquire_in(conn: &mut Connection, ctx: &Ctx, req: &AcquireRequest) -> Result<AcquireOutcome> {
    let op = |e| db_error("acquire", e);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(op)?;
    if !ctx.same_file() {
        // Replaced since the connection was checked: the next attempt
        // re-opens the path.
        return Err(Error::backend(
            NAME,
            "acquire",
            true,
            "the database file was replaced during the attempt",
        ));
    }
    let now = ctx.now_ns();
    let Some(epoch_row) = read_epoch(&tx).map_err(op)? else {
        return Err(Error::backend(
            NAME,
            "acquire",
            true,
            "the store has no epoch row",
        ));
    };
    if req.epoch != Some(epoch_row.epoch) || epoch_row.boot_id != *ctx.boot_id {
        return Ok(AcquireOutcome::OtherEpoch(store_epoch(
            &epoch_row, ctx, now,
        )));
    }
    check_ttl(req.ttl, &store_epoch(&epoch_row, ctx, now))?;
    let expires = now + req.ttl.as_nanos() as i64;
    let row = get_row(&tx, req.key.as_str()).map_err(op)?;
    let fence = match &row {
        Some(r) if r.is_live(ctx, now) => {
            if r.lease_id.as_deref() != Some(req.lease_id.as_str()) {
                return Ok(AcquireOutcome::Held(r.holder(ctx, now)));
            }
            // Our own lease, asked for again: extend, same token.
            tx.prepare_cached("UPDATE leasehold_leases SET expires_at_ns = ?2 WHERE key = ?1")
                .and_then(|mut st| st.execute(params![req.key.as_str(), expires]))
                .map_err(op)?;
            tx.commit().map_err(op)?;
            return Ok(AcquireOutcome::Acquired(Grant::new(r.fence)));
        }
        Some(r) => next_token(r.fence, epoch_row.epoch),
        None => next_token(0, epoch_row.epoch),
    };
    let acquired_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(ms)
        .unwrap_or(0);
    tx.prepare_cached(
            "INSERT INTO leasehold_leases (key, fence, lease_id, boot_id, expires_at_ns, ttl_ms, owner_host, owner_pid, owner_label, data, acquired_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
             ON CONFLICT(key) DO UPDATE SET fence = excluded.fence, lease_id = excluded.lease_id,
               boot_id = excluded.boot_id, expires_at_ns = excluded.expires_at_ns, ttl_ms = excluded.ttl_ms,
               owner_host = excluded.owner_host, owner_pid = excluded.owner_pid, owner_label = excluded.owner_label,
               data = excluded.data, acquired_at_ms = excluded.acquired_at_ms",
        )
        .and_then(|mut st| st.execute(
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
        ))
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
        let max = Duration::from_millis(self.store_max_ttl_ms.load(Ordering::Relaxed));
        Capabilities::new(LOCAL_MIN_TTL, max).shared_across_processes(true)
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        let req = req.clone();
        let holders = self.holders.clone();
        // Held from before the grant is asked for (see the module docs).
        if req.epoch.is_some() {
            holders.hold(req.lease_id.as_str())?;
        }
        let lease_id = req.lease_id.clone();
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
                let result = acquire_in(conn, ctx, &req);
                let normal = conn
                    .prepare_cached("PRAGMA synchronous = NORMAL")
                    .and_then(|mut st| st.execute([]));
                let outcome = result?;
                normal.map_err(|e| db_error("acquire", e))?;
                Ok(outcome)
            })
            .await;
        match &result {
            Ok(AcquireOutcome::Acquired(_)) => {}
            // An error may hide a grant: keep the lock until it is released.
            Err(e) if e.is_retryable() => {}
            _ => holders.let_go(lease_id.as_str()),
        }
        result
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
        self.run("inspect", false, move |conn, ctx| {
            let conn = conn.expect("inspect re-opens");
            let row = get_row(conn, key.as_str()).map_err(|e| db_error("inspect", e))?;
            let now = ctx.now_ns();
            match row {
                Some(r) => r.info(key, ctx, now),
                None => Ok(KeyInfo::new(key, 0, None)),
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

    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        // Key characters include no GLOB metacharacters, so a prefix GLOB is
        // an exact prefix match (and can use the primary key index).
        let pattern = format!("{prefix}*");
        self.run("list", false, move |conn, ctx| {
            let conn = conn.expect("list re-opens");
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
                    r.info(key, ctx, now)
                })
                .collect()
        })
        .await
    }
}
