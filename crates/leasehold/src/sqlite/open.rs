//! Opening a store file: connections, creating the file and its directory, the
//! store epoch's check at each connection, and running a call on the
//! blocking pool.

use super::*;

/// A file's identity: device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileId {
    pub(super) dev: u64,
    pub(super) ino: u64,
}

impl FileId {
    pub(super) fn of(path: &Path) -> std::io::Result<FileId> {
        let m = std::fs::metadata(path)?;
        Ok(FileId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

impl SqliteBackend {
    /// Opens (creating if needed) the store at `path`, whose directory
    /// must exist. A store created here gets the default max TTL
    /// ([`DEFAULT_STORE_MAX_TTL`]). As [`builder`](Self::builder)`(path)`
    /// with nothing else set.
    ///
    /// Many processes may open (and create) the same file at once: every
    /// step waits on SQLite's lock like any other operation.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the directory does not exist, the path
    /// names a directory, or the file is another application's database
    /// (see [`SqliteBackendBuilder::shared_file`]); [`Error::Backend`] if
    /// the database cannot be created or opened.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::builder(path).build()
    }

    /// Like [`open`](Self::open); a store this call creates (or a new epoch
    /// it starts) records `max_ttl` (100 ms to 24 h) as its max TTL: no lease
    /// may be longer. An existing store keeps its own (a warning is logged
    /// when it differs: see [`SqliteBackendBuilder::max_ttl`]). (After the
    /// store's data is lost under a live holder, grants wait one
    /// [confirmation window](crate::CONFIRMATION_WINDOW), whatever the max
    /// TTL.)
    ///
    /// # Errors
    /// As [`open`](Self::open); [`Error::InvalidInput`] for a max TTL out of
    /// range.
    pub fn open_with_max_ttl(path: impl AsRef<Path>, max_ttl: Duration) -> Result<Self> {
        Self::builder(path).max_ttl(max_ttl).build()
    }

    /// Like [`open_with_max_ttl`](Self::open_with_max_ttl), with what
    /// opening may do to the file (see [`SqliteBackendBuilder::creation`]).
    ///
    /// # Errors
    /// As [`open_with_max_ttl`](Self::open_with_max_ttl);
    /// [`Error::NoStore`] with [`Creation::Never`] when there is no store.
    pub fn open_with(
        path: impl AsRef<Path>,
        max_ttl: Duration,
        creation: Creation,
    ) -> Result<Self> {
        Self::builder(path)
            .max_ttl(max_ttl)
            .creation(creation)
            .build()
    }

    /// A builder for the store at `path`, for the settings
    /// [`open`](Self::open) leaves at their defaults.
    pub fn builder(path: impl AsRef<Path>) -> SqliteBackendBuilder {
        SqliteBackendBuilder::new(path.as_ref())
    }

    /// Opens the store as `b` says (see [`SqliteBackendBuilder::build`]).
    pub(super) fn from_builder(b: SqliteBackendBuilder) -> Result<Self> {
        let max_ttl = b.max_ttl.unwrap_or(DEFAULT_STORE_MAX_TTL);
        if !(LOCAL_MIN_TTL..=LOCAL_MAX_TTL).contains(&max_ttl) {
            return Err(Error::invalid(
                "max ttl",
                format!("{max_ttl:?} is outside {LOCAL_MIN_TTL:?}..={LOCAL_MAX_TTL:?}"),
            ));
        }
        let creation = b.creation;
        let path = b.path;
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
        // The directory's holders file is no store (and is rewritten).
        let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if [&path, &real]
            .iter()
            .any(|p| p.file_name() == Some(std::ffi::OsStr::new(HOLDERS_FILE)))
        {
            return Err(Error::invalid(
                "store URL",
                format!(
                    "{} is the name of leasehold's holders file, which is no store: give the store another name (e.g. {})",
                    path.display(),
                    dir_of(&path).join("leases.db").display()
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
            created_at_open: None,
            creation,
            shared_file: b.shared_file,
        };
        let open = backend.connect()?;
        if let Some(asked) = b.max_ttl {
            if open.max_ttl != asked {
                tracing::warn!(
                    path = %backend.path.display(),
                    "{}",
                    max_ttl_kept(&backend.path, asked, open.max_ttl)
                );
            }
        }
        let backend = SqliteBackend {
            opened_epoch: Some(EpochRead::now(open.epoch.clone())),
            created_at_open: Some(open.created),
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
    pub(super) fn connect(&self) -> Result<Open> {
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

    pub(super) fn try_connect(&self) -> Result<Open> {
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
        } else if !dir.is_dir() {
            // Never made here: a typo in a path would otherwise become a
            // directory (and a store nobody else uses). The default file's
            // directory is made by `Store::open` (`sqlite:`).
            let not_a_dir = dir.ancestors().find(|a| a.is_file());
            return Err(Error::invalid(
                "store URL",
                match not_a_dir {
                    Some(file) => format!(
                        "the directory {} of {} cannot exist: {} is a file, not a directory",
                        dir.display(),
                        self.path.display(),
                        file.display()
                    ),
                    None => format!(
                        "the directory {} of {} does not exist (leasehold creates only the default store's directory): create it first, or check the path for a typo",
                        dir.display(),
                        self.path.display()
                    ),
                },
            ));
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
        let ours = has_table(&conn, "leasehold_leases").map_err(|e| {
            if e.sqlite_error_code() == Some(ErrorCode::NotADatabase) {
                return Error::invalid(
                    "store URL",
                    format!(
                        "{} is not a SQLite database (SQLite: {e}): name a leasehold store, or a file that does not exist yet",
                        self.path.display()
                    ),
                );
            }
            db_error("open", e)
        })?;
        // A file whose epoch row names its protocol has every table and
        // column: the protocol column came last, after the run columns, in
        // every build that writes it.
        let complete = if ours {
            // An unknown protocol is refused before anything is written
            // (the journal mode, the schema, the epoch).
            let found = stored_protocol(&conn).map_err(|e| db_error("open", e))?;
            check_protocol_number(NAME, found)?;
            found.is_some()
        } else {
            false
        };
        if look && !ours {
            return Err(Error::no_store(format!(
                "{} has no leasehold tables",
                self.path.display()
            )));
        }
        if !look && !ours && !self.shared_file {
            // Before anything is written: WAL mode stays with the file.
            let others = foreign_tables(&conn).map_err(|e| db_error("open", e))?;
            if !others.is_empty() {
                return Err(Error::invalid(
                    "store URL",
                    foreign_file_message(&self.path, &others),
                ));
            }
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
        // it all, which its protocol or one query tells (parsing the
        // statements is a fifth of opening a store in a short-lived
        // process).
        if !look && !complete && !has_schema(&conn).map_err(|e| db_error("open", e))? {
            create_tables(&mut conn).map_err(|e| db_error("open", e))?;
            add_run_columns(&mut conn).map_err(|e| db_error("open", e))?;
            add_protocol_column(&mut conn).map_err(|e| db_error("open", e))?;
        }
        let (row, created) = self.check_epoch(&mut conn, file)?;
        self.store_max_ttl_ms
            .store(row.max_ttl.as_millis() as u64, Ordering::Relaxed);
        let ctx = Ctx {
            boot_id: self.boot_id.clone(),
            path: self.path.clone(),
            file,
        };
        let epoch = store_epoch(&row, &ctx, ctx.now_ns());
        Ok(Open {
            conn,
            file,
            epoch,
            max_ttl: row.max_ttl,
            created,
        })
    }

    /// Reads the epoch row, starting a new epoch if the file has none, or
    /// one written in another file or boot (see the module docs); with
    /// whether this call created the store (wrote the first epoch row of a
    /// new file, in the write transaction that decides it).
    pub(super) fn check_epoch(
        &self,
        conn: &mut Connection,
        file: FileId,
    ) -> Result<(EpochRow, bool)> {
        let op = |e| db_error("open", e);
        // A look may find the lease table alone: a file a creator of an
        // older build was making (its tables were committed one by one),
        // or left so when cut short. Opening to lease has made both. (The
        // schema is asked only when the read fails.)
        let found = match read_epoch(conn) {
            Err(_)
                if self.creation == Creation::Never
                    && !has_table(conn, "leasehold_store").map_err(op)? =>
            {
                None
            }
            read => read.map_err(op)?,
        };
        if let Some(row) = &found {
            row.check_protocol()?;
            if row.file == file && row.boot_id == *self.boot_id {
                return Ok((row.clone(), false));
            }
        }
        if self.creation == Creation::Never {
            // Looking writes nothing: the row as it is (another file's or
            // boot's epoch, which the next acquirer renews), or, in a file
            // of leases from before epochs, an epoch of unknown age. Tables
            // with neither an epoch row nor a lease are a store another
            // process is creating (its tables are committed before its
            // epoch row), or whose creation was cut short: no store yet.
            if found.is_none() && !has_lease_rows(conn).map_err(op)? {
                return Err(Error::no_store(format!(
                    "{} has leasehold's tables but no store epoch yet (another process is creating the store, or its creation was cut short)",
                    self.path.display()
                )));
            }
            let row = found.unwrap_or(EpochRow {
                epoch: epoch_at(SystemTime::now()),
                max_ttl: self.max_ttl,
                file,
                boot_id: String::new(),
                settled_at_ns: 0,
                protocol: None,
            });
            return Ok((row, false));
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(op)?;
        let old = read_epoch(&tx).map_err(op)?;
        if let Some(row) = &old {
            row.check_protocol()?;
            if row.file == file && row.boot_id == *self.boot_id {
                // Another process created it (or began its epoch) first.
                return Ok((row.clone(), false));
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
        let has_rows = has_lease_rows(&tx).map_err(op)?;
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
                let safe = stated || self.holders.none_of_this_name();
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
                    (!replaced || self.holders.none_of_this_name()) && (!other_boot || !live_rows);
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
        // The first epoch row of a file without leases: this call created
        // the store.
        let created = old.is_none() && !has_rows;
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
            protocol: Some(PROTOCOL as i64),
        };
        tx.execute(
            "INSERT OR REPLACE INTO leasehold_store (id, epoch, max_ttl_ms, file_dev, file_ino, boot_id, settled_at_ns, protocol)
             VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                row.epoch as i64,
                ms(row.max_ttl),
                row.file.dev as i64,
                row.file.ino as i64,
                row.boot_id,
                row.settled_at_ns,
                row.protocol
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
        Ok((row, created))
    }

    /// Runs `f` on a connection to the file the path names now, in the
    /// blocking pool (SQLite calls block, up to the busy timeout). With
    /// `same_file`, a connection whose file was deleted or replaced is not
    /// re-opened: `f` gets `None` (the lease it is about is lost).
    pub(super) async fn run<T: Send + 'static>(
        &self,
        op: &'static str,
        same_file: bool,
        f: impl FnOnce(Option<&mut Connection>, &Ctx) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut slot = this.conn.lock().unwrap_or_else(|e| e.into_inner());
            let fresh = slot.as_ref().is_some_and(|o| o.is_at(&this.path));
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

    /// Runs the read `f` (no write, a statement or two) on the calling
    /// thread when it can do so without waiting: the connection free and
    /// open on the file the path names, and SQLite answering without its
    /// busy handler (a WAL reader almost never waits). Otherwise, or if the
    /// read found the file locked, as [`run`](Self::run) does, in the
    /// blocking pool. A read on the caller's thread is tens of
    /// microseconds; the hop to the pool and back cost more than the read
    /// (a `leasehold run`'s two reads of its reader-writer gate after the
    /// grant took 0.21 ms that way, docs/benchmarks.md section 11).
    pub(super) async fn read<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl Fn(&mut Connection, &Ctx) -> Result<T> + Send + Sync + 'static,
    ) -> Result<T> {
        if let Some(answer) = self.read_here(&f) {
            return answer;
        }
        self.run(op, false, move |conn, ctx| {
            f(conn.expect("a read re-opens a replaced file"), ctx)
        })
        .await
    }

    /// [`read`](Self::read) on this thread, or `None` if it would wait.
    fn read_here<T>(&self, f: &impl Fn(&mut Connection, &Ctx) -> Result<T>) -> Option<Result<T>> {
        let mut slot = self.conn.try_lock().ok()?;
        let open = slot.as_mut().filter(|o| o.is_at(&self.path))?;
        // No busy handler for this read: a lock it would wait for sends it
        // to the pool instead, where waiting blocks no task.
        open.conn.busy_handler(None::<fn(i32) -> bool>).ok()?;
        let answer = f(&mut open.conn, &self.ctx_for(open.file));
        if open.conn.busy_handler(Some(retry_while_busy)).is_err() {
            // Not expected (it only sets a callback); a connection that
            // would not wait must not be kept.
            *slot = None;
        }
        match answer {
            Err(e) if e.is_retryable() => None,
            answer => Some(answer),
        }
    }

    pub(super) fn ctx(&self) -> Ctx {
        self.ctx_for(FileId { dev: 0, ino: 0 })
    }

    pub(super) fn ctx_for(&self, file: FileId) -> Ctx {
        Ctx {
            boot_id: self.boot_id.clone(),
            path: self.path.clone(),
            file,
        }
    }
}

/// What a warning says when the max TTL asked for is not the store's.
pub(super) fn max_ttl_kept(path: &Path, asked: Duration, has: Duration) -> String {
    format!(
        "{} keeps the max TTL it was created with, {}; the {} asked for is ignored. A store's max TTL is fixed when it is created: to raise it, use a new file, or remove this one (see docs/sqlite.md, \"Raising the max TTL\")",
        path.display(),
        crate::options::fmt_duration(has),
        crate::options::fmt_duration(asked)
    )
}

/// The message refusing a file with other applications' tables.
fn foreign_file_message(path: &Path, others: &[String]) -> String {
    let shown = others
        .iter()
        .take(5)
        .map(|t| format!("{t:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let more = if others.len() > 5 { ", ..." } else { "" };
    format!(
        "{} is another application's SQLite database (it has tables leasehold did not make: {shown}{more}); leasehold would add its own tables and switch the file to WAL journal mode for good. Give leasehold a file of its own (e.g. {}), or, to share this file on purpose, add ?shared_file=yes to the store URL (SqliteBackendBuilder::shared_file in Rust)",
        path.display(),
        dir_of(path).join("leases.db").display()
    )
}

/// The parent directory of a database path (`.` for a bare file name).
pub(super) fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// What keeps this process from writing the store's file or its
/// directory, if anything can be told (SQLite says "unable to open
/// database file" for every cause): "" if nothing is found.
pub(super) fn why_not_writable(path: &Path, dir: &Path) -> String {
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
pub(super) fn wal_pages_not_in_file(path: &Path) -> u32 {
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

/// Called by SQLite while another connection holds the write lock: wait a
/// millisecond or so and retry, for up to [`BUSY_TIMEOUT`]. SQLite's own
/// `busy_timeout` backs off to 100 ms sleeps, which would add up to 100 ms
/// to every handover between processes; lock holds here last well under a
/// millisecond (plus one fsync), so short retries cost little.
pub(super) fn retry_while_busy(attempt: i32) -> bool {
    const STEP: Duration = Duration::from_millis(1);
    if STEP * attempt.max(0) as u32 >= BUSY_TIMEOUT {
        return false;
    }
    std::thread::sleep(STEP);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend() -> (tempfile::TempDir, SqliteBackend) {
        let dir = tempfile::tempdir().unwrap();
        let backend = SqliteBackend::open(dir.path().join("r.db")).unwrap();
        (dir, backend)
    }

    #[test]
    fn a_read_is_answered_here_when_nothing_holds_the_connection() {
        let (_dir, backend) = backend();
        let answer = backend.read_here(&|conn, _| {
            conn.query_row("SELECT 7", [], |r| r.get::<_, i64>(0))
                .map_err(|e| db_error("test", e))
        });
        assert_eq!(answer.map(|a| a.unwrap()), Some(7));
    }

    #[test]
    fn a_read_goes_to_the_pool_while_another_operation_holds_the_connection() {
        let (_dir, backend) = backend();
        let held = backend.conn.lock().unwrap();
        let answer = backend.read_here(&|_, _| -> Result<()> { panic!("read here") });
        assert!(answer.is_none());
        drop(held);
    }

    #[test]
    fn a_read_that_found_the_file_locked_goes_to_the_pool_with_the_busy_handler_back() {
        let (_dir, backend) = backend();
        let busy = || {
            db_error(
                "test",
                rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                    None,
                ),
            )
        };
        assert!(backend
            .read_here(&|_, _| -> Result<()> { Err(busy()) })
            .is_none());
        // The busy handler is back for the operations that wait: a
        // connection that answered BUSY at once would fail them.
        let mut slot = backend.conn.lock().unwrap();
        let conn = &mut slot.as_mut().unwrap().conn;
        let other = Connection::open(conn.path().unwrap()).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let waited = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            other.execute_batch("COMMIT").unwrap();
        });
        conn.execute_batch("BEGIN IMMEDIATE; COMMIT;")
            .expect("the write waited for the other connection");
        waited.join().unwrap();
        drop(slot);
        // Any other failure is the read's answer.
        let failed = backend.read_here(&|_, _| -> Result<()> { Err(Error::invalid("x", "y")) });
        assert!(matches!(failed, Some(Err(Error::InvalidInput { .. }))));
    }
}
