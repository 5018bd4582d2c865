//! [`SqliteBackendBuilder`]: the settings of a SQLite store, for what
//! [`SqliteBackend::open`] leaves at their defaults.

use super::*;

/// Builds a [`SqliteBackend`]: made by [`SqliteBackend::builder`], opened
/// by [`build`](Self::build). A `sqlite:` store URL's parameters are these
/// settings (`?max_ttl=`, `?shared_file=`).
///
/// ```
/// # fn main() -> leasehold::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("leases.db");
/// use std::time::Duration;
/// use leasehold::{sqlite::SqliteBackend, Store};
///
/// let backend = SqliteBackend::builder(&path)
///     .max_ttl(Duration::from_secs(300))
///     .build()?;
/// let store = Store::new(backend);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteBackendBuilder {
    pub(super) path: PathBuf,
    pub(super) max_ttl: Option<Duration>,
    pub(super) creation: Creation,
    pub(super) shared_file: bool,
}

impl SqliteBackendBuilder {
    pub(super) fn new(path: &Path) -> Self {
        SqliteBackendBuilder {
            path: path.to_path_buf(),
            max_ttl: None,
            creation: Creation::IfMissing,
            shared_file: false,
        }
    }

    /// The max TTL (100 ms to 24 h) a store created by this backend
    /// records (also when it starts a new epoch after the file was lost):
    /// no lease may be longer. Default [`DEFAULT_STORE_MAX_TTL`] (60 s).
    ///
    /// A store's max TTL is fixed when it is created: an existing store
    /// keeps its own, and when it differs from the one set here a warning
    /// is logged (through `tracing`) saying so; the store's own is in
    /// [`capabilities`](crate::backend::Backend::capabilities)`().max_ttl`.
    /// To raise it, give the store a new file, or remove the file (see the
    /// project's `docs/sqlite.md`, "Raising the max TTL").
    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.max_ttl = Some(max_ttl);
        self
    }

    /// What opening may do to the file (default
    /// [`Creation::IfMissing`]): with [`Creation::Never`] nothing is
    /// created or written, ever (a file without leasehold's tables, or no
    /// file, is [`Error::NoStore`]; an epoch row of another file or boot is
    /// reported as it is, not renewed); with [`Creation::NewProven`] a new
    /// file's epoch is settled at once (the caller states that no earlier
    /// store existed here), as it is when no process on the machine holds
    /// a lease of a file of that name in its directory.
    pub fn creation(mut self, creation: Creation) -> Self {
        self.creation = creation;
        self
    }

    /// Whether leasehold may add its tables to a database that has tables
    /// of another application (default `false`: such a file is refused,
    /// with [`Error::InvalidInput`], before anything is written). Adding
    /// its tables also switches the file to WAL journal mode, for good
    /// (which every connection to it then uses). A file that has
    /// leasehold's tables already is opened either way.
    ///
    /// The URL parameter `?shared_file=yes` sets it.
    pub fn shared_file(mut self, shared: bool) -> Self {
        self.shared_file = shared;
        self
    }

    /// Opens the store (creating it as [`creation`](Self::creation)
    /// allows). The file's directory must exist.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a max TTL out of range, a path that
    /// names a directory, a directory that does not exist, or another
    /// application's database (unless [`shared_file`](Self::shared_file));
    /// [`Error::NoStore`] with [`Creation::Never`] when there is no store;
    /// [`Error::Backend`] if the database cannot be opened.
    pub fn build(self) -> Result<SqliteBackend> {
        SqliteBackend::from_builder(self)
    }
}
