//! [`Store`]: a backend plus the in-process state shared by its locks.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Backend, Creation, HolderInfo, KeyInfo};
use crate::clock::{SharedClock, SystemClock};
use crate::election::Election;
use crate::epoch::EpochGate;
use crate::error::{Error, Result};
use crate::key::{validate_prefix, Key};
use crate::local::{LocalKey, LocalKeys};
use crate::lock::Lock;
use crate::memory::MemoryBackend;
use crate::metric::Kind;
use crate::options::{LockOptions, ResolvedOptions};
use crate::runs::RunRecord;
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;

/// A lease store: where locks live. Cheap to clone; clones share one
/// backend connection and one set of in-process wake-ups.
///
/// ```
/// # async fn demo() -> leasehold::Result<()> {
/// let store = leasehold::Store::open("memory:")?;
/// let lock = store.lock("jobs/import-A")?;
/// let guard = lock.try_acquire().await?;
/// assert!(guard.fencing_token() >= 1);
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<StoreInner>,
}

#[derive(Debug)]
struct StoreInner {
    backend: Arc<dyn Backend>,
    clock: SharedClock,
    local: LocalKeys,
    /// In-process state of semaphores, apart from that of plain keys so that
    /// a lock and a semaphore on one key do not share a gate.
    groups: LocalKeys,
    /// Which store epoch this store may grant in (the quarantine).
    epochs: EpochGate,
    /// The confirmation window ([`Store::confirmation_window`]).
    window: Duration,
    /// Set by [`Store::close`].
    closed: std::sync::atomic::AtomicBool,
}

/// Builds a [`Store`] with settings the constructors leave at their
/// defaults ([`Store::builder`]):
///
/// ```
/// use std::sync::Arc;
/// use leasehold::backend::SystemClock;
/// use leasehold::memory::MemoryBackend;
///
/// let store = leasehold::Store::builder(Arc::new(MemoryBackend::new()))
///     .clock(Arc::new(SystemClock))
///     .build();
/// assert_eq!(store.confirmation_window(), leasehold::CONFIRMATION_WINDOW);
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct StoreBuilder {
    backend: Arc<dyn Backend>,
    clock: SharedClock,
    window: Duration,
}

impl StoreBuilder {
    /// The clock the store's guards time their deadlines and quarantines
    /// on (default: the system's monotonic clock).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// The confirmation window W (default
    /// [`CONFIRMATION_WINDOW`](crate::CONFIRMATION_WINDOW), 60 s): the
    /// longest a guard trusts a lease it has not confirmed, and how long a
    /// store epoch new to this store is quarantined before it grants (see
    /// [store epochs](crate::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)).
    ///
    /// **A safety setting, and for tests: leave it alone in a program.**
    /// Every process that uses a store must use the same window. After a
    /// loss of the store's data, a process grants again one of *its*
    /// windows after it first sees the new epoch, and a holder of the lost
    /// data stops trusting its lease one of *its* windows after its last
    /// renewal; a process with a shorter window than a holder's can grant
    /// the key while that holder still works. The default is the same in
    /// every build of every version with windows, which is what makes it
    /// safe; nothing else (no URL, option or environment variable) changes
    /// it. Tests set a window of a few seconds so that a new store's
    /// quarantine does not take a minute (the `leasehold-testkit` crate's
    /// test stores use their backend's max TTL), with every store of the
    /// test set alike.
    ///
    /// It must be longer than every lock's safety margin: a lock whose
    /// margin is not is refused as [`Error::InvalidInput`].
    pub fn confirmation_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The store.
    pub fn build(self) -> Store {
        Store::build(self.backend, self.clock, self.window)
    }
}

/// URL schemes this crate opens by itself.
pub const BUILTIN_SCHEMES: &[&str] = &["sqlite:", "memory:"];

impl Store {
    /// A store over `backend`.
    pub fn new(backend: impl Backend) -> Self {
        Self::from_backend(Arc::new(backend))
    }

    /// A store over a shared backend. Two stores made from one backend see
    /// the same leases but do not share in-process wake-ups (they behave like
    /// two processes), which the conformance suite uses to race "processes".
    pub fn from_backend(backend: Arc<dyn Backend>) -> Self {
        Self::builder(backend).build()
    }

    /// A store whose guards time their deadlines on `clock`.
    pub fn with_clock(backend: Arc<dyn Backend>, clock: SharedClock) -> Self {
        Self::builder(backend).clock(clock).build()
    }

    /// A [`StoreBuilder`] for a store over `backend`: the clock and the
    /// confirmation window, which the constructors above leave at their
    /// defaults.
    pub fn builder(backend: Arc<dyn Backend>) -> StoreBuilder {
        StoreBuilder {
            backend,
            clock: SystemClock::shared(),
            window: crate::CONFIRMATION_WINDOW,
        }
    }

    fn build(backend: Arc<dyn Backend>, clock: SharedClock, window: Duration) -> Self {
        let epochs = EpochGate::new(clock.clone());
        let store = Store {
            inner: Arc::new(StoreInner {
                backend,
                clock: clock.clone(),
                local: LocalKeys::default(),
                groups: LocalKeys::default(),
                epochs,
                window,
                closed: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        if let Some(epoch) = store.backend().epoch_at_open() {
            // As if a first attempt had reported it; a first sight cannot be
            // refused.
            let _ = store
                .epochs()
                .saw(store.backend().name(), &epoch, store.confirmation_window());
        }
        store
    }

    /// The confirmation window this store's guards and quarantines use:
    /// [`CONFIRMATION_WINDOW`](crate::CONFIRMATION_WINDOW) unless the store
    /// was built with another
    /// ([`StoreBuilder::confirmation_window`]). Every store and process
    /// on one store must use the same (see
    /// [store epochs](crate::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)).
    pub fn confirmation_window(&self) -> Duration {
        self.inner.window
    }

    /// Opens a store from a URL:
    ///
    /// * `sqlite:PATH` or `sqlite:///ABSOLUTE/PATH`: the SQLite file at PATH,
    ///   created if missing; `sqlite:` alone is the default file
    ///   ([`default_sqlite_path`]). `?max_ttl=DURATION` (such as `5m`) sets
    ///   the max TTL a store created now records (default 60 s; see
    ///   [store epochs](crate::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)).
    /// * `memory:`: a new in-memory store, private to this `Store` and its
    ///   clones (for tests).
    ///
    /// Every other store lives in a crate of its own; the store opener,
    /// crate `leasehold-stores`, opens any of them by URL (the `leasehold`
    /// CLI does that for you). [`opens_url`](Self::opens_url) tells whether
    /// a URL is one of this crate's.
    ///
    /// A `sqlite:PATH` file's directory must exist: only the default
    /// file's is created (`0700`). A path starting with `~` is refused
    /// (`~` is not expanded: write `$HOME/...` and let the shell expand
    /// it). `?shared_file=yes` lets leasehold add its tables to another
    /// application's database (refused otherwise; see
    /// [`SqliteBackendBuilder::shared_file`](crate::sqlite::SqliteBackendBuilder::shared_file)).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("leases.db");
    /// let store = leasehold::Store::open(&format!("sqlite:{}?max_ttl=5m", path.display()))?;
    /// let guard = store.lock("nightly")?.try_acquire().await?;
    /// drop(guard); // released in the background...
    /// store.close().await?; // ...and done before the program goes on to exit
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidInput`] (what: `"store URL"`) for a malformed URL,
    /// one whose scheme this crate does not open (another store's, such
    /// as `redis://`, or none), a SQLite path whose directory does not
    /// exist, or another application's SQLite file;
    /// [`Error::NotSupported`] for `sqlite:` in a build without the
    /// `sqlite` feature; backend errors opening the store.
    pub fn open(url: &str) -> Result<Store> {
        Self::open_with(url, Creation::IfMissing)
    }

    /// Like [`open`](Self::open), with what opening may do to the store
    /// (see [`Creation`]; `memory:` is always a new store).
    ///
    /// # Errors
    /// As [`open`](Self::open); [`Error::NoStore`] with
    /// [`Creation::Never`] when there is no store at the URL.
    pub fn open_with(url: &str, creation: Creation) -> Result<Store> {
        if url == "memory:" {
            return Ok(Store::new(MemoryBackend::new()));
        }
        if let Some(rest) = url.strip_prefix("sqlite:") {
            return open_sqlite(rest, creation);
        }
        // Every other store lives in a crate of its own; the store opener
        // (crate leasehold-stores) knows them all, this crate only its own
        // (which it checks with `opens_url`, to say so in its own words).
        Err(Error::invalid(
            "store URL",
            format!("{url:?}: Store::open opens sqlite:PATH, sqlite:///ABS/PATH, sqlite: and memory:; open the other stores with their own crates, or by URL with the leasehold-stores crate"),
        ))
    }

    /// Whether `url` names a store this crate opens itself (its scheme is
    /// `sqlite:` or it is `memory:`), however malformed the rest: what
    /// [`open`](Self::open) does not refuse for its scheme. For store
    /// openers that know more stores and word their own message for the
    /// rest.
    pub fn opens_url(url: &str) -> bool {
        url == "memory:" || url.starts_with("sqlite:")
    }

    /// Finishes what this process still does for its leases in the
    /// background, then closes the store: it refuses every further use
    /// (taking, inspecting, listing, breaking) with [`Error::Closed`], in
    /// every clone.
    ///
    /// A guard dropped without [`release`](crate::LeaseGuard::release) is
    /// released in the background, on the runtime that granted it; a
    /// program that returns from `main` (or shuts its runtime down) right
    /// after cuts that release short, and the lease stays held until its
    /// TTL runs out. So a program awaits `close` last, after its guards
    /// are released or dropped: it waits until those releases have ended
    /// (each within the store's own timeouts; bound it with
    /// `tokio::time::timeout` to exit sooner when a store does not answer).
    /// It waits for every request leasehold finishes in the background in
    /// this process, for any store, as [`finish_background`](crate::finish_background)
    /// does.
    ///
    /// Guards still held when it is called are neither released nor
    /// waited for: they keep their leases (renewed) until released or
    /// dropped. Waits already under way end with [`Error::Closed`] at
    /// their next attempt. Closing twice is harmless.
    ///
    /// # Errors
    /// None today; the `Result` leaves room for stores whose closing can
    /// fail.
    ///
    /// # Cancel safety
    /// Cancel safe: the store is closed at once, and dropping the future
    /// only stops waiting (the releases go on in the background).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// let store = leasehold::Store::open("memory:")?;
    /// let guard = store.lock("k")?.try_acquire().await?;
    /// drop(guard);
    /// store.close().await?;
    /// assert!(matches!(store.lock("k"), Err(leasehold::Error::Closed)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn close(&self) -> Result<()> {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        crate::detach::finish_background().await;
        Ok(())
    }

    /// Whether [`close`](Self::close) was called on this store or a clone.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// [`Error::Closed`] once the store is closed.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// The backend underneath.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// The clock guards of this store use.
    pub fn clock(&self) -> &SharedClock {
        &self.inner.clock
    }

    pub(crate) fn epochs(&self) -> &EpochGate {
        &self.inner.epochs
    }

    pub(crate) fn local_key(&self, key: &Key) -> Arc<LocalKey> {
        self.inner.local.get(key)
    }

    pub(crate) fn local_group(&self, key: &Key) -> Arc<LocalKey> {
        self.inner.groups.get(key)
    }

    /// `key` and `options`, checked against the key rule and this store's
    /// backend.
    fn resolve(&self, key: &str, options: LockOptions) -> Result<(Key, ResolvedOptions)> {
        self.check_open()?;
        let key = Key::new(key)?;
        refuse_slot_key(&key)?;
        let backend = self.backend();
        let resolved = options.resolve(
            &backend.capabilities(),
            backend.name(),
            self.confirmation_window(),
        )?;
        Ok((key, resolved))
    }

    /// A lock on `key` with default [`LockOptions`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the key breaks the [key rule](Key) or the
    /// default TTL is outside the backend's range.
    pub fn lock(&self, key: &str) -> Result<Lock> {
        self.lock_with(key, LockOptions::default())
    }

    /// A lock on `key` with `options`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the key breaks the [key rule](Key), has a
    /// segment starting with `:slot:` (reserved for [semaphore](Semaphore)
    /// slots, so that no lock can alias a permit), or the
    /// options do not fit together or with the backend (the message says
    /// what is allowed).
    pub fn lock_with(&self, key: &str, options: LockOptions) -> Result<Lock> {
        let (key, resolved) = self.resolve(key, options)?;
        Ok(Lock::new(self.clone(), key, resolved, Kind::Lock))
    }

    /// A [`MultiLock`](crate::MultiLock): plain locks on every one of
    /// `keys`, held all together or not at all, taken in byte order of the
    /// keys whatever order they are given in (so that two multi-key locks
    /// never deadlock), with default [`LockOptions`].
    ///
    /// # Errors
    /// As [`lock_all_with`](Self::lock_all_with).
    pub fn lock_all<K: AsRef<str>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<crate::MultiLock> {
        self.lock_all_with(keys, LockOptions::default())
    }

    /// [`lock_all`](Self::lock_all), every lease taken with `options`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if there is no key (what: `"keys"`), a key
    /// breaks the rule of [`lock_with`](Self::lock_with), or the options do
    /// not fit together or with the backend. A key named twice counts
    /// once.
    pub fn lock_all_with<K: AsRef<str>>(
        &self,
        keys: impl IntoIterator<Item = K>,
        options: LockOptions,
    ) -> Result<crate::MultiLock> {
        crate::MultiLock::locks(self, keys, options)
    }

    /// A [`Semaphore`] on `key` admitting `limit` holders at once, with
    /// default [`LockOptions`].
    ///
    /// # Errors
    /// As [`semaphore_with`](Self::semaphore_with).
    pub fn semaphore(&self, key: &str, limit: u32) -> Result<Semaphore> {
        self.semaphore_with(key, limit, LockOptions::default())
    }

    /// A [`Semaphore`] on `key` admitting `limit` holders at once; every
    /// permit is a lease taken with `options` (its TTL, renewal, owner label
    /// and data).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the key breaks the [key rule](Key), has a
    /// segment starting with `:slot:`, or is longer than [`MAX_SEMAPHORE_KEY_LEN`](crate::MAX_SEMAPHORE_KEY_LEN)
    /// (what: `"semaphore key"`), if `limit` is 0 or above
    /// [`MAX_SEMAPHORE_LIMIT`](crate::MAX_SEMAPHORE_LIMIT)
    /// (what: `"semaphore limit"`), or if the options do not fit together or
    /// with the backend.
    pub fn semaphore_with(&self, key: &str, limit: u32, options: LockOptions) -> Result<Semaphore> {
        let (key, resolved) = self.resolve(key, options)?;
        Semaphore::new(self.clone(), key, limit, resolved)
    }

    /// A [`RwLock`] on `key` admitting [`DEFAULT_MAX_READERS`](crate::DEFAULT_MAX_READERS)
    /// readers at once, with default [`LockOptions`].
    ///
    /// # Errors
    /// As [`rw_lock_with`](Self::rw_lock_with).
    pub fn rw_lock(&self, key: &str) -> Result<RwLock> {
        self.rw_lock_with(key, crate::DEFAULT_MAX_READERS, LockOptions::default())
    }

    /// A [`RwLock`] on `key` admitting `max_readers` readers at once; both
    /// sides' leases are taken with `options` (TTL, renewal, owner label
    /// and data).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the key breaks the [key rule](Key), has a
    /// segment starting with `:slot:` or `:read:`, or is longer than
    /// [`MAX_RW_LOCK_KEY_LEN`](crate::MAX_RW_LOCK_KEY_LEN) (what: `"rw lock
    /// key"`), if `max_readers` is 0 or above
    /// [`MAX_SEMAPHORE_LIMIT`](crate::MAX_SEMAPHORE_LIMIT) (what: `"max
    /// readers"`), or if the options do not fit together or with the
    /// backend.
    pub fn rw_lock_with(
        &self,
        key: &str,
        max_readers: u32,
        options: LockOptions,
    ) -> Result<RwLock> {
        let (key, resolved) = self.resolve(key, options)?;
        RwLock::new(self.clone(), key, max_readers, resolved)
    }

    /// An [`Election`] on `key` with default [`LockOptions`].
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn election(&self, key: &str) -> Result<Election> {
        self.election_with(key, LockOptions::default())
    }

    /// An [`Election`] on `key`; leadership is a lease taken with `options`
    /// (its TTL, renewal, and the owner label and data the leader
    /// publishes).
    ///
    /// # Errors
    /// As [`lock_with`](Self::lock_with).
    pub fn election_with(&self, key: &str, options: LockOptions) -> Result<Election> {
        let (key, resolved) = self.resolve(key, options)?;
        Ok(Election::new(Lock::new(
            self.clone(),
            key,
            resolved,
            Kind::Election,
        )))
    }

    /// What the store holds for `key`.
    ///
    /// # Errors
    /// A bad key; backend failures.
    pub async fn inspect(&self, key: &str) -> Result<KeyInfo> {
        self.check_open()?;
        self.backend().inspect(&Key::new(key)?).await
    }

    /// Every key with a record in the store whose name starts with `prefix`.
    ///
    /// # Errors
    /// A bad prefix; backend failures.
    pub async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        self.check_open()?;
        validate_prefix(prefix)?;
        self.backend().list(prefix).await
    }

    /// The key's last successful run (see [run records](crate::backend#run-records)),
    /// if it ended less than `period` ago by this machine's wall clock;
    /// `None` if it ended longer ago or none is recorded. This is the test
    /// of `leasehold run --once-per`: call it while holding the key's lock,
    /// so that no run can succeed between the answer and your own run.
    ///
    /// A success whose end lies in this machine's future (clock skew)
    /// counts as just now: see the clock rule in the run-record docs.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] (what: `"period"`) for a zero period; a bad
    /// key; backend failures.
    pub async fn last_success_within(
        &self,
        key: &str,
        period: std::time::Duration,
    ) -> Result<Option<RunRecord>> {
        if period.is_zero() {
            return Err(Error::invalid("period", "must be longer than zero"));
        }
        let info = self.inspect(key).await?;
        let now = std::time::SystemTime::now();
        Ok(info.last_success.filter(|s| s.ended_ago(now) < period))
    }

    /// Ends any lease on `key`, whoever holds it, and returns the holder it
    /// ended. The holder's guard notices at its next renewal. The fencing
    /// counter is kept, so the next holder's token is still greater.
    ///
    /// # Errors
    /// A bad key; backend failures.
    pub async fn break_lease(&self, key: &str) -> Result<Option<HolderInfo>> {
        self.check_open()?;
        let key = Key::new(key)?;
        let broken = self.backend().break_lease(&key).await?;
        tracing::info!(%key, holder = ?broken.as_ref().map(|h| h.owner.to_string()), "lease broken");
        Ok(broken)
    }
}

/// Refuses a key with a segment starting with `:slot:`: such keys name
/// semaphore slots (`KEY/:slot:N`), and a lock or election on one would
/// alias a permit. (`inspect`, `list` and `break_lease` still take slot
/// keys.)
fn refuse_slot_key(key: &Key) -> Result<()> {
    if key.as_str().split('/').any(|seg| seg.starts_with(":slot:")) {
        return Err(Error::invalid(
            "key",
            format!("{key:?} has a segment starting with \":slot:\", which names a semaphore slot (KEY/:slot:N); such keys are reserved for semaphores"),
        ));
    }
    if key.as_str().split('/').any(|seg| seg.starts_with(":read:")) {
        return Err(Error::invalid(
            "key",
            format!("{key:?} has a segment starting with \":read:\", which names a reader slot of a reader-writer lock (KEY/:read:N); such keys are reserved for reader-writer locks"),
        ));
    }
    Ok(())
}

/// The SQLite file a `sqlite:` URL names (`sqlite:` alone: the default
/// file), or `None` if `url` is not a `sqlite:` URL. Opens nothing.
///
/// # Errors
/// [`Error::InvalidInput`] for a malformed `sqlite:` URL, or when the
/// default file has no directory.
pub fn sqlite_url_path(url: &str) -> Option<Result<PathBuf>> {
    url.strip_prefix("sqlite:")
        .map(|rest| split_params(rest).and_then(|(path, _)| sqlite_path(path)))
}

#[cfg(feature = "sqlite")]
fn open_sqlite(rest: &str, creation: Creation) -> Result<Store> {
    let (rest, params) = split_params(rest)?;
    let path = sqlite_path(rest)?;
    // Only the default file's directory is made (also when the URL names
    // the default file by its path): any other missing directory is most
    // likely a typo, refused by the backend.
    if creation.creates() && (rest.is_empty() || default_sqlite_path().ok() == Some(path.clone())) {
        create_private_dir(&path)?;
    }
    let mut builder = crate::sqlite::SqliteBackend::builder(path)
        .creation(creation)
        .shared_file(params.shared_file);
    if let Some(max_ttl) = params.max_ttl {
        builder = builder.max_ttl(max_ttl);
    }
    Ok(Store::new(builder.build()?))
}

/// The query parameters of a `sqlite:` URL.
const SQLITE_PARAMS: crate::backend::params::QuerySpec =
    crate::backend::params::QuerySpec::new("sqlite", &["max_ttl", "shared_file"]);

/// What a `sqlite:` URL's query says.
#[derive(Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
struct SqliteParams {
    max_ttl: Option<std::time::Duration>,
    shared_file: bool,
}

/// Splits `PATH?max_ttl=DURATION&shared_file=yes` at its last `?`.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
fn split_params(rest: &str) -> Result<(&str, SqliteParams)> {
    let Some((path, query)) = rest.rsplit_once('?') else {
        return Ok((rest, SqliteParams::default()));
    };
    let query = SQLITE_PARAMS.parse(Some(query))?;
    Ok((
        path,
        SqliteParams {
            max_ttl: query.duration("max_ttl")?,
            shared_file: query.boolean("shared_file")?.unwrap_or(false),
        },
    ))
}

#[cfg(not(feature = "sqlite"))]
fn open_sqlite(_rest: &str, _creation: Creation) -> Result<Store> {
    Err(Error::NotSupported(
        "the sqlite: store is not in this build (cargo feature \"sqlite\")".into(),
    ))
}

/// The path a `sqlite:` URL names.
fn sqlite_path(rest: &str) -> Result<PathBuf> {
    if rest.is_empty() {
        return default_sqlite_path();
    }
    if rest.starts_with('~') {
        return Err(Error::invalid(
            "store URL",
            match rest.strip_prefix("~/") {
                Some(after) if !after.is_empty() => format!("sqlite:{rest}: `~` is not expanded in a store URL (it would be a directory named `~`); write the path out, or let the shell expand $HOME: \"sqlite:$HOME/{after}\""),
                _ => format!("sqlite:{rest}: `~` is not expanded in a store URL (it would be a directory named `~`); write the path out, such as sqlite:/home/NAME/leases.db, or let the shell expand $HOME: \"sqlite:$HOME/leases.db\""),
            },
        ));
    }
    if let Some(after) = rest.strip_prefix("//") {
        return match after.strip_prefix('/') {
            Some(_) => Ok(PathBuf::from(after)),
            None => Err(Error::invalid(
                "store URL",
                format!("sqlite:{rest}: use sqlite:PATH or sqlite:///ABSOLUTE/PATH (no host part)"),
            )),
        };
    }
    Ok(PathBuf::from(rest))
}

/// Creates the default file's directory, if missing, readable by its user
/// only (0700, as the XDG base directory spec asks of the state directory;
/// holders' data is stored there).
#[cfg(feature = "sqlite")]
fn create_private_dir(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let Some(dir) = path.parent() else {
        return Ok(());
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            Error::backend(
                "sqlite",
                "open",
                false,
                format!("cannot create {}: {e}", dir.display()),
            )
        })
}

/// The default SQLite file: `$XDG_STATE_HOME/leasehold/leases.db` (that is,
/// `~/.local/state/leasehold/leases.db` when the variable is unset), or the
/// platform's local data directory where there is no state directory.
///
/// # Errors
/// [`Error::InvalidInput`] when no home directory can be found.
pub fn default_sqlite_path() -> Result<PathBuf> {
    #[cfg(feature = "sqlite")]
    let dir = dirs::state_dir().or_else(dirs::data_local_dir);
    #[cfg(not(feature = "sqlite"))]
    let dir: Option<PathBuf> = None;
    dir.map(|d| d.join("leasehold").join("leases.db")).ok_or_else(|| {
        Error::invalid(
            "store URL",
            "no state directory for the default SQLite file (set HOME or XDG_STATE_HOME, or pass sqlite:PATH)",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_name_paths() {
        assert_eq!(
            sqlite_path("/tmp/a.db").unwrap(),
            PathBuf::from("/tmp/a.db")
        );
        assert_eq!(sqlite_path("rel/a.db").unwrap(), PathBuf::from("rel/a.db"));
        assert_eq!(
            sqlite_path("///tmp/a.db").unwrap(),
            PathBuf::from("/tmp/a.db")
        );
        assert!(sqlite_path("//host/a.db").is_err());
    }

    #[test]
    fn keys_naming_semaphore_slots_are_refused_for_locks_and_semaphores() {
        let store = Store::open("memory:").unwrap();
        for key in ["sem/:slot:0", ":slot:1", "a/:slot:x/b"] {
            for err in [
                store.lock(key).err(),
                store.semaphore(key, 2).err(),
                store.election(key).err(),
            ] {
                let err = err.expect("refused");
                assert!(
                    matches!(err, Error::InvalidInput { what: "key", .. }),
                    "{err}"
                );
                assert!(err.to_string().contains("semaphore slot"), "{err}");
            }
        }
        store.lock("a/b:slot:0").unwrap();
        store.lock("a/:slots").unwrap();
    }

    #[test]
    fn sqlite_urls_may_set_the_max_ttl_and_share_a_file() {
        let max = |rest| split_params(rest).unwrap().1.max_ttl;
        assert_eq!(split_params("/tmp/a.db").unwrap().0, "/tmp/a.db");
        assert_eq!(max("/tmp/a.db"), None);
        assert_eq!(
            max("/tmp/a.db?max_ttl=5m"),
            Some(std::time::Duration::from_secs(300))
        );
        assert!(split_params("/tmp/a.db?max_ttl=soon").is_err());
        assert_eq!(
            max("/tmp/a.db?max_ttl=1m30s"),
            Some(std::time::Duration::from_secs(90))
        );
        assert!(split_params("/tmp/a.db?max_ttl=5m&max_ttl=1m").is_err());
        let err = split_params("/tmp/a.db?other=1").unwrap_err();
        assert!(
            err.to_string()
                .contains("the sqlite store's parameters are max_ttl and shared_file"),
            "{err}"
        );
        assert!(
            split_params("/tmp/a.db?shared_file=yes")
                .unwrap()
                .1
                .shared_file
        );
        assert!(
            !split_params("/tmp/a.db?shared_file=no")
                .unwrap()
                .1
                .shared_file
        );
        assert!(split_params("/tmp/a.db?shared_file=maybe").is_err());
    }

    /// The window a store is built with is the one its quarantine lasts
    /// (the default: [`CONFIRMATION_WINDOW`](crate::CONFIRMATION_WINDOW)),
    /// and its clones share it.
    #[tokio::test]
    async fn the_builder_window_is_the_quarantine() {
        for (window, built) in [
            (crate::CONFIRMATION_WINDOW, None),
            (Duration::from_secs(2), Some(Duration::from_secs(2))),
        ] {
            let backend = MemoryBackend::new();
            let mut builder = Store::builder(Arc::new(backend.clone()));
            if let Some(w) = built {
                builder = builder.confirmation_window(w);
            }
            let store = builder.build();
            assert_eq!(store.clone().confirmation_window(), window);
            let held = store.lock("k").unwrap().try_acquire().await.unwrap();
            backend.lose_data();
            let Err(Error::Quarantined { remaining, .. }) =
                store.lock("k").unwrap().try_acquire().await
            else {
                panic!("a lost store's new epoch is not quarantined");
            };
            assert!(
                remaining <= window + window / 1000 && remaining > window / 2,
                "{remaining:?} for a window of {window:?}"
            );
            drop(held);
        }
    }

    /// Panics unless `err` is [`Error::InvalidInput`] about the store URL.
    fn assert_invalid_url(err: &Error) {
        assert!(
            matches!(
                err,
                Error::InvalidInput {
                    what: "store URL",
                    ..
                }
            ),
            "not invalid store URL: {err}"
        );
    }

    #[test]
    fn a_sqlite_path_starting_with_a_tilde_is_refused_with_the_reason() {
        for url in ["sqlite:~/x.db", "sqlite:~", "sqlite:~user/x.db"] {
            let err = Store::open(url).unwrap_err();
            assert_invalid_url(&err);
            assert!(err.to_string().contains("`~` is not expanded"), "{err}");
        }
        assert!(sqlite_url_path("sqlite:~/x.db").unwrap().is_err());
        assert!(!std::path::Path::new("~").exists());
    }

    #[test]
    fn unknown_and_future_schemes_are_clear_errors() {
        let err = Store::open("bogus://x").unwrap_err();
        assert_invalid_url(&err);
        assert!(err.to_string().contains("sqlite:PATH"));
        let err = Store::open("azblob://container").unwrap_err();
        assert!(err.to_string().contains("leasehold-stores"), "{err}");
        assert!(!Store::opens_url("azblob://container"));
        assert!(!Store::opens_url("bogus"));
        assert!(Store::opens_url("sqlite:x.db"));
        assert!(Store::opens_url("sqlite:"));
        assert!(Store::opens_url("memory:"));
    }
}
