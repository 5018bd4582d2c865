//! The directory lock that tells whether any process may hold a lease.

use super::*;

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
        }
        state.leases.insert(lease_id.to_string());
        Ok(())
    }

    /// Notes that `lease_id` holds nothing any more.
    pub(super) fn let_go(&self, lease_id: &str) {
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
    pub(super) fn none_in_directory(&self) -> bool {
        let Ok(dir) = std::fs::File::open(self.dir()) else {
            return false;
        };
        // SAFETY: as above; non-blocking. The lock is dropped with `dir`.
        unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
    }
}
