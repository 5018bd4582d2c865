//! The locks that tell whether any process may hold a lease: in the
//! database's directory (any file), and of one file name there.
//!
//! Every holder keeps a shared `flock` on the directory (as every version
//! has) and, on Linux, a read lock (an open file description lock,
//! `F_OFD_SETLK`) on one byte of the directory's *holders file*
//! `.leasehold-holders`, at an offset that is a hash of its database's
//! file name. A process starting an epoch for file NAME has proof that no
//! holder of NAME's earlier history is live when either
//!
//! * it gets an exclusive `flock` on the directory (no holder of any file
//!   there), or
//! * the holders file is *trusted* and it gets a write lock on NAME's byte
//!   (no holder of a file of that name there).
//!
//! A holders file is trusted when it holds the marker written into it by
//! a process that had the exclusive directory lock, naming the file's own
//! device and inode: it was then the directory's holders file while no
//! process held any lease there, so every holder since took its byte lock
//! in this very file (a holder takes the directory lock first, then opens
//! the holders file). A holders file deleted and made again, or copied in
//! from elsewhere, names another inode, or none, and is not trusted until
//! the directory is next free of holders: until then a new file waits the
//! quarantine, as every file of the directory did before.
//!
//! A holder that cannot open the holders file (no read permission) is
//! refused its lease: its byte lock is part of the proof. It is created
//! with the database file's permission bits (as SQLite makes its `-shm`
//! file), so every user who can use the store can read it.

use super::*;

/// The holders file's name, in the database's directory.
pub(super) const HOLDERS_FILE: &str = ".leasehold-holders";

/// The shared `flock` on the database's directory that this process keeps
/// while it holds (or is about to be granted) any lease, and the check that
/// no process holds one (see the module docs). `flock` through libc: std's
/// `File::lock` needs Rust 1.89, above this crate's MSRV.
#[derive(Debug)]
pub(super) struct HolderLock {
    /// The database file as opened (maybe a symbolic link).
    pub(super) db: PathBuf,
    pub(super) state: Mutex<HolderState>,
}

#[derive(Debug, Default)]
pub(super) struct HolderState {
    /// Lease ids held or being asked for.
    pub(super) leases: HashSet<String>,
    /// The directory, opened for the database file it was resolved for;
    /// locked shared while `leases` is not empty. Kept open between leases
    /// (unlocked), so that an uncontended cycle costs one `stat` and two
    /// `flock`s, not a path resolution and an `open`.
    pub(super) dir: Option<(FileId, std::fs::File)>,
    /// The holders file and the byte of this database's name in it, read
    /// locked while `leases` is not empty, and the file's path (opened
    /// with `dir`, kept open with it while the path names it).
    pub(super) name: Option<(std::fs::File, i64, PathBuf)>,
}

impl HolderLock {
    pub(super) fn new(db: PathBuf) -> Self {
        HolderLock {
            db,
            state: Mutex::default(),
        }
    }

    /// The directory the database file really is in: symbolic links
    /// resolved (SQLite resolves them too), so that processes reaching one
    /// file by different paths lock the same directory.
    pub(super) fn dir(&self) -> PathBuf {
        std::fs::canonicalize(&self.db)
            .ok()
            .and_then(|real| real.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| dir_of(&self.db))
    }

    /// Notes that `lease_id` holds or is about to be granted a lease.
    pub(super) fn hold(&self, lease_id: &str) -> Result<()> {
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
            // Then the name's byte, in the holders file the directory has
            // now (after the directory lock: see the module docs).
            if let Err(e) = self.lock_name(&mut state, reuse) {
                if let Some((_, dir)) = &state.dir {
                    // SAFETY: as above; unlocking never blocks.
                    unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_UN) };
                }
                state.dir = None;
                state.name = None;
                return Err(e);
            }
        }
        state.leases.insert(lease_id.to_string());
        Ok(())
    }

    /// Notes that `lease_id` holds nothing any more.
    pub(super) fn let_go(&self, lease_id: &str) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.leases.remove(lease_id) && state.leases.is_empty() {
            if let Some((file, at, _)) = &state.name {
                if byte_lock(file, *at, libc::F_UNLCK as _, false).is_err() {
                    state.name = None;
                }
            }
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
    /// directory: an exclusive lock on it can be had. (While it is had,
    /// the holders file is made trusted: see the module docs.)
    pub(super) fn none_in_directory(&self) -> bool {
        let dir_path = self.dir();
        let Ok(dir) = std::fs::File::open(&dir_path) else {
            return false;
        };
        // SAFETY: as above; non-blocking. The lock is dropped with `dir`.
        let free = unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 };
        if free {
            // No holder anywhere in the directory: the holders file there
            // now is the one every later holder locks its byte in.
            #[cfg(target_os = "linux")]
            if let Err(e) = trust_holders_file(&dir_path, &self.db) {
                tracing::debug!(dir = %dir_path.display(), error = %e, "could not mark the holders file trusted");
            }
        }
        free
    }

    /// Whether no process (this one included) may hold a lease of a file
    /// of this database's name in its directory: none in the directory at
    /// all, or none on the name's byte of a trusted holders file (see the
    /// module docs). False when it cannot be told.
    pub(super) fn none_of_this_name(&self) -> bool {
        if self.none_in_directory() {
            return true;
        }
        #[cfg(target_os = "linux")]
        {
            let (dir, name) = self.dir_and_name();
            let holders = dir.join(HOLDERS_FILE);
            let Ok(file) = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&holders)
            else {
                return false;
            };
            if !is_trusted(&file) {
                return false;
            }
            // Non-blocking; the lock goes with `file`.
            byte_lock(&file, name_offset(&name), libc::F_WRLCK as _, false).is_ok()
        }
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// The directory the database file really is in, and its name there.
    fn dir_and_name(&self) -> (PathBuf, std::ffi::OsString) {
        match std::fs::canonicalize(&self.db) {
            Ok(real) => match (real.parent(), real.file_name()) {
                (Some(dir), Some(name)) => (dir.to_path_buf(), name.to_owned()),
                _ => (dir_of(&self.db), self.db.as_os_str().to_owned()),
            },
            Err(_) => (
                dir_of(&self.db),
                self.db.file_name().unwrap_or_default().to_owned(),
            ),
        }
    }

    /// Read-locks this database name's byte in the directory's holders
    /// file (Linux; elsewhere only the directory lock is kept), opening
    /// (or making) the file unless `reuse` and it is open.
    fn lock_name(&self, state: &mut HolderState, reuse: bool) -> Result<()> {
        #[cfg(target_os = "linux")]
        {
            // The holders file the directory has now: one deleted or
            // replaced since it was opened takes no part in any proof.
            let current = match &state.name {
                Some((file, _, path)) if reuse => {
                    let open = file.metadata().ok().map(|m| (m.dev(), m.ino()));
                    let named = FileId::of(path).ok().map(|f| (f.dev, f.ino));
                    open.is_some() && open == named
                }
                _ => false,
            };
            if !current {
                state.name = None;
                let (dir, name) = self.dir_and_name();
                let file = open_holders_file(&dir, &self.db).map_err(|e| {
                    Error::backend(
                        NAME,
                        "acquire",
                        false,
                        format!(
                            "cannot open {}: {e} (every holder of a lease in {} marks its file there; it needs read access)",
                            dir.join(HOLDERS_FILE).display(),
                            dir.display()
                        ),
                    )
                })?;
                state.name = Some((file, name_offset(&name), dir.join(HOLDERS_FILE)));
            }
            let (file, at, _) = state.name.as_ref().expect("opened above");
            // Blocks only while an epoch's creator tests the byte (a moment).
            byte_lock(file, *at, libc::F_RDLCK as _, true).map_err(|e| {
                Error::backend(
                    NAME,
                    "acquire",
                    true,
                    format!(
                        "cannot lock the holders file beside {}: {e}",
                        self.db.display()
                    ),
                )
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (state, reuse);
            Ok(())
        }
    }
}

/// The byte of the holders file that stands for database file `name`: a
/// hash of it (FNV-1a), below 2^31. Two names on one byte only cost a
/// quarantine that was not needed.
fn name_offset(name: &std::ffi::OsStr) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h & 0x7fff_ffff) as i64
}

/// Locks (`F_RDLCK`, `F_WRLCK`) or unlocks (`F_UNLCK`) one byte of `file`
/// with an open file description lock, waiting for it if `wait`.
#[cfg(target_os = "linux")]
fn byte_lock(
    file: &std::fs::File,
    at: i64,
    kind: libc::c_short,
    wait: bool,
) -> std::io::Result<()> {
    // SAFETY: an all-zero flock is valid (l_pid must be 0 for OFD locks).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind;
    lock.l_whence = libc::SEEK_SET as _;
    lock.l_start = at;
    lock.l_len = 1;
    let cmd = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    loop {
        // SAFETY: a valid descriptor and a valid flock.
        if unsafe { libc::fcntl(file.as_raw_fd(), cmd, &lock) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn byte_lock(_: &std::fs::File, _: i64, _: libc::c_short, _: bool) -> std::io::Result<()> {
    Ok(())
}

/// How a holders file's marker begins.
#[cfg(target_os = "linux")]
const MARKER_PREFIX: &str = "leasehold holders file ";

/// What a trusted holders file holds: the marker and its own identity.
#[cfg(target_os = "linux")]
fn marker(file: &std::fs::File) -> std::io::Result<String> {
    let m = file.metadata()?;
    Ok(format!("{MARKER_PREFIX}1 {} {}\n", m.dev(), m.ino()))
}

/// Whether `file` is a trusted holders file: it holds the marker naming
/// itself.
#[cfg(target_os = "linux")]
fn is_trusted(file: &std::fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    let Ok(want) = marker(file) else {
        return false;
    };
    let mut got = vec![0u8; want.len() + 1];
    match file.read_at(&mut got, 0) {
        Ok(n) => n == want.len() && got[..n] == *want.as_bytes(),
        Err(_) => false,
    }
}

/// Opens the holders file in `dir` for reading (and writing where allowed),
/// making it, with the permission bits of the database `db` (or 0644), if
/// it is missing.
#[cfg(target_os = "linux")]
fn open_holders_file(dir: &Path, db: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let path = dir.join(HOLDERS_FILE);
    let mode = std::fs::metadata(db)
        .map(|m| m.permissions().mode() & 0o666)
        .unwrap_or(0o644);
    let made = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(mode)
        .open(&path);
    match made {
        Ok(f) => Ok(f),
        // Not ours to write: reading is all a holder needs.
        Err(_) => std::fs::File::open(&path),
    }
}

/// Writes the marker into the directory's holders file (making it if
/// missing), unless it is there. Only while no process holds a lease in
/// the directory (the caller has its exclusive lock).
#[cfg(target_os = "linux")]
fn trust_holders_file(dir: &Path, db: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = open_holders_file(dir, db)?;
    if is_trusted(&file) {
        return Ok(());
    }
    // Only a file of ours is rewritten (empty, or an earlier marker): a
    // file of that name made by something else stays as it is, and
    // proves nothing.
    let mut start = [0u8; MARKER_PREFIX.len()];
    let n = file.read_at(&mut start, 0)?;
    if n > 0 && start[..n] != MARKER_PREFIX.as_bytes()[..n] {
        return Err(std::io::Error::other("not a holders file of leasehold's"));
    }
    let want = marker(&file)?;
    file.set_len(0)?;
    file.write_all_at(want.as_bytes(), 0)?;
    Ok(())
}
