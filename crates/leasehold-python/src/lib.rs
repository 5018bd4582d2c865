//! The native half of the `leasehold` Python package (`leasehold._leasehold`):
//! stores, locks, semaphores, elections and their guards, over the Rust
//! library. The Python half (`python/leasehold/__init__.py`) gives them their
//! idiomatic form (context managers, `async with`, durations); this module is
//! its only caller.
//!
//! # What runs where
//! * Each process has one tokio runtime (one worker thread), made when it
//!   first opens a store. Renewals and loss signals run there, without the
//!   GIL, and nothing that runs there ever waits for the GIL: every call
//!   into Python from the runtime (asyncio completions, `on_wait` and
//!   `on_loss` callbacks) runs on one of the runtime's blocking threads
//!   ([`call_python`]), so Python code that keeps the GIL (a long call into
//!   a C extension) holds up no renewal (test: `tests/test_gil.py`). One
//!   worker rather than two: each blocking call's requests cross between
//!   fewer threads (measured: docs/benchmarks.md, section 8).
//! * Blocking calls release the GIL and are polled on the calling thread,
//!   which spins briefly before it sleeps ([`drive`]: a request's answer
//!   then reaches it without a wake-up). A wait for a lease runs in slices
//!   of [`SLICE`]; between slices it takes the GIL back and
//!   runs Python's signal handlers, so Ctrl-C (KeyboardInterrupt) ends the
//!   wait: the acquisition is dropped, which is cancel safe (a lease granted
//!   to a request in flight is released), and nothing stays held.
//! * Async acquisitions run as tasks on the runtime and complete an asyncio
//!   future through the loop's `call_soon_threadsafe` (done in Python).
//!
//! # Fork
//! leasehold's threads (the runtime's, the lease timer's, SQLite's wake-up
//! watcher) do not survive `fork()`, and its process-wide state refers to
//! them. Every object records the process that made it; used in another
//! process (a child of `os.fork()`, `multiprocessing` with the fork start
//! method, gunicorn's preloaded workers) it raises `UsageError`, and so
//! does `open()` in a child of a process that had used leasehold; when it
//! is garbage collected there it is forgotten, not dropped: nothing the
//! parent holds is released or renewed by the child.
//!
//! # What is not guaranteed
//! A Python thread cannot be stopped from outside: the loss of a lease is
//! *signalled* (a callback, `held.lost`, an asyncio task cancelled), and the
//! code that holds it must stop on that signal. `leasehold run` stops a
//! command for sure.

use std::future::Future;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::{
    HolderInfo, KeyInfo, LeaseGuard, LockOptions, LossPolicy, MultiGuard, RunRecord, RunReport,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

mod drive;
mod errors;

use errors::{to_py, usage_error, LeaseLost, StoreError};

/// How long a blocking wait runs without the GIL before it looks at
/// Python's signals (Ctrl-C) again.
const SLICE: Duration = Duration::from_millis(50);

/// This process's runtime, made at the first use in this process (a child
/// of `fork()` makes its own). Never dropped: dropping a runtime joins its
/// threads, which a forked child does not have.
static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);

fn runtime() -> PyResult<&'static Runtime> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, rt)) = *slot {
        if owner == pid {
            return Ok(rt);
        }
        // A child of fork() of a process that used leasehold: the library's
        // own threads (the runtime's, the lease timer's, SQLite's wake-up
        // watcher) were not copied, and its process-wide state refers to
        // them; a store opened here would wait on timers that never fire.
        return Err(usage_error(forked_message(owner, pid, None)));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("leasehold")
        .enable_all()
        .build()
        .map_err(|e| StoreError::new_err(format!("cannot start leasehold's runtime: {e}")))?;
    let rt: &'static Runtime = Box::leak(Box::new(rt));
    *slot = Some((pid, rt));
    Ok(rt)
}

/// What a forked child of a process that used leasehold is told, by every
/// call (`what`: the object it called, if it was one of the parent's).
/// Every object of the parent implies that the parent had made its runtime,
/// so `open()` in the child is refused too: the advice must not be to open
/// the store again there (the library's process-wide state, its renewal
/// scheduler and background-release count, refers to the parent's threads;
/// starting afresh in a child would need the core to reset that state).
fn forked_message(owner: u32, pid: u32, what: Option<&str>) -> String {
    let used = match what {
        Some(what) => format!("this {what} belongs to process {owner}, which used leasehold"),
        None => format!("leasehold was used in process {owner}"),
    };
    format!(
        "{used} before it forked this process ({pid}): its threads do not survive fork(), \
         so nothing of leasehold works in a forked child, not even a store opened again \
         here; use the \"spawn\" or \"forkserver\" start method \
         (multiprocessing.get_context(\"spawn\")), or fork (start gunicorn or \
         multiprocessing workers) before the parent's first use of leasehold, and open \
         the store in each process that uses it"
    )
}

/// The process an object was made in, and its runtime.
#[derive(Clone, Copy)]
struct Home {
    pid: u32,
    rt: &'static Runtime,
}

impl Home {
    fn here() -> PyResult<Home> {
        Ok(Home {
            pid: std::process::id(),
            rt: runtime()?,
        })
    }

    fn is_here(&self) -> bool {
        self.pid == std::process::id()
    }

    /// Refuses use in another process than the one that made the object.
    fn check(&self, what: &str) -> PyResult<()> {
        if self.is_here() {
            return Ok(());
        }
        Err(usage_error(forked_message(
            self.pid,
            std::process::id(),
            Some(what),
        )))
    }

    /// Runs `fut` to completion on this thread, without the GIL.
    fn block_on<F>(&self, py: Python<'_>, fut: F) -> PyResult<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        refuse_runtime_thread()?;
        let rt = self.rt;
        Ok(py.detach(|| drive::run(rt, fut)))
    }

    /// Runs `fut` to completion on this thread, without the GIL, in slices
    /// with Python's signal handlers and `tick` run between them. If either
    /// raises, `fut` is dropped (cancelled) and the error returned.
    fn block_on_interruptible<F>(
        &self,
        py: Python<'_>,
        fut: F,
        mut tick: impl FnMut(Python<'_>) -> PyResult<()>,
    ) -> PyResult<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        refuse_runtime_thread()?;
        let rt = self.rt;
        let mut fut = Box::pin(fut);
        let spin_until = Instant::now() + drive::WINDOW;
        loop {
            let end = Instant::now() + SLICE;
            let done = py.detach(|| drive::run_until(rt, fut.as_mut(), Some(end), spin_until));
            if let Some(out) = done {
                return Ok(out);
            }
            if let Err(e) = py.check_signals().and_then(|()| tick(py)) {
                // Dropped inside the runtime: a lease granted to a request
                // in flight is released in the background there; that
                // release ends (up to SETTLE) before the error is raised.
                {
                    let _entered = rt.enter();
                    drop(fut);
                }
                py.detach(|| {
                    rt.block_on(async {
                        let _ = tokio::time::timeout(SETTLE, leasehold::finish_background()).await;
                    })
                });
                return Err(e);
            }
        }
    }
}

/// A blocking call from one of the runtime's own threads (a loss callback
/// that calls back into leasehold) would block the runtime on itself.
fn refuse_runtime_thread() -> PyResult<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(usage_error(
            "a blocking leasehold call from a leasehold callback (an on_loss callback runs on \
             leasehold's own thread): set an event or schedule the work elsewhere instead",
        ));
    }
    Ok(())
}

fn duration(what: &str, secs: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| {
        usage_error(format!(
            "invalid {what}: {secs} s (expected a duration of zero or more seconds)"
        ))
    })
}

/// Opens the store `url` names (`None`: the default SQLite file), with the
/// same URLs as the `leasehold` command, and as it does: refusing the
/// stores no other process sees (`memory:`, in-memory SQLite), whose
/// locks would exclude nobody.
#[pyfunction]
#[pyo3(signature = (url=None))]
fn open(py: Python<'_>, url: Option<String>) -> PyResult<Store> {
    use leasehold_stores::Access;
    let home = Home::here()?;
    let given = url.clone().unwrap_or_default();
    let shown = leasehold_stores::redact(leasehold_stores::effective_url(url.as_deref()));
    let opened = home.block_on(
        py,
        leasehold_stores::open_with(url.as_deref(), Access::Lease),
    )?;
    let store = opened.map_err(|e| to_py(e, &given))?;
    Ok(Store {
        inner: ManuallyDrop::new(store),
        home,
        url: given,
        shown,
    })
}

/// Creates the store at `url` (as `leasehold init`), or opens it if one
/// exists already (nothing changed). With `new`, the caller states that no
/// store existed there before: the new store's epoch is settled at once,
/// without the quarantine a new store otherwise has; refused (UsageError)
/// when a store exists there, as `leasehold init --new` refuses.
#[pyfunction]
#[pyo3(signature = (url=None, new=false))]
fn init(py: Python<'_>, url: Option<String>, new: bool) -> PyResult<Store> {
    use leasehold_stores::Access;
    let home = Home::here()?;
    let given = url.clone().unwrap_or_default();
    let shown = leasehold_stores::redact(leasehold_stores::effective_url(url.as_deref()));
    let store = home.block_on(py, async {
        // First a look, which creates nothing. (The look at a missing
        // default SQLite file answers with an empty in-memory store: no
        // store there yet.)
        match leasehold_stores::open_with(url.as_deref(), Access::Look).await {
            Ok(found) if found.backend().name() != "memory" => {
                if new {
                    return Err(leasehold::Error::invalid(
                        "new",
                        format!(
                            "a leasehold store already exists at {shown}: new=True states \
                             that no store existed here before, which would let a new epoch \
                             skip the wait for holders of its data; nothing changed (open it \
                             with leasehold.open, or init without new=True)"
                        ),
                    ));
                }
                drop(found);
                leasehold_stores::open_with(url.as_deref(), Access::Lease).await
            }
            Ok(_) | Err(leasehold::Error::NoStore { .. }) => {
                leasehold_stores::open_with(url.as_deref(), Access::Create { proven: new }).await
            }
            Err(e) => Err(e),
        }
    })?;
    let store = store.map_err(|e| to_py(e, &given))?;
    Ok(Store {
        inner: ManuallyDrop::new(store),
        home,
        url: given,
        shown,
    })
}

/// A duration in the `leasehold` command's syntax ("30s", "500ms", "5m"),
/// in seconds.
#[pyfunction]
fn parse_duration(text: &str) -> PyResult<f64> {
    const FORM: &str = "a number with a unit, e.g. 30s, 500ms, 5m, 1h 30m";
    let trimmed = text.trim();
    if trimmed.starts_with('-') {
        return Err(usage_error(format!(
            "invalid duration {text:?}: a duration must not be negative (expected {FORM})"
        )));
    }
    humantime::parse_duration(trimmed)
        .map(|d| d.as_secs_f64())
        .map_err(|e| usage_error(format!("invalid duration {text:?}: {e} (expected {FORM})")))
}

/// Calls into Python from the runtime: `call` runs with the GIL on one of
/// the runtime's blocking threads, never on a worker, so that Python code
/// that keeps the GIL (a long call into a C extension) holds up only this
/// call, never the renewals and loss signals the workers run (test:
/// `tests/test_gil.py`). What `call` raises is reported as unraisable:
/// there is no Python caller to raise it to.
fn call_python(
    call: impl for<'py> FnOnce(Python<'py>) -> PyResult<Py<PyAny>> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_blocking(move || {
        Python::attach(|py| {
            if let Err(e) = call(py) {
                e.write_unraisable(py, None);
            }
        })
    })
}

/// Waits (up to `timeout` seconds) for the releases that dropped guards
/// left in the background; called at exit.
#[pyfunction]
fn finish_background(py: Python<'_>, timeout: f64) -> PyResult<()> {
    let Some((pid, rt)) = *RUNTIME.lock().unwrap_or_else(|e| e.into_inner()) else {
        return Ok(());
    };
    if pid != std::process::id() || tokio::runtime::Handle::try_current().is_ok() {
        return Ok(());
    }
    let timeout = duration("timeout", timeout)?;
    py.detach(|| {
        rt.block_on(async {
            let _ = tokio::time::timeout(timeout, leasehold::finish_background()).await;
        })
    });
    Ok(())
}

/// Calls `done()` (on a blocking thread of the runtime, with the GIL) once the releases
/// left in the background (dropped guards, cancelled acquisitions) have
/// ended, or after 5 s.
#[pyfunction]
fn settle(done: Py<PyAny>) -> PyResult<()> {
    let home = Home::here()?;
    home.rt.spawn(async move {
        let _ = tokio::time::timeout(SETTLE, leasehold::finish_background()).await;
        let _ = call_python(move |py| done.call0(py)).await;
    });
    Ok(())
}

/// The pid of the process an object belongs to (for tests of fork).
#[pyfunction]
fn runtime_pid() -> Option<u32> {
    RUNTIME
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .map(|(pid, _)| pid)
}

#[pyclass(frozen, module = "leasehold._leasehold")]
struct Store {
    inner: ManuallyDrop<leasehold::Store>,
    home: Home,
    /// As given, for scrubbing messages.
    url: String,
    /// Without secrets, for showing.
    shown: String,
}

impl Drop for Store {
    fn drop(&mut self) {
        // SAFETY: not used again.
        let store = unsafe { ManuallyDrop::take(&mut self.inner) };
        if self.home.is_here() {
            let _entered = self.home.rt.enter();
            drop(store);
        } else {
            // In a forked child: the parent's connections and runtime are
            // not this process's to close.
            std::mem::forget(store);
        }
    }
}

impl Store {
    fn err(&self, e: leasehold::Error) -> PyErr {
        to_py(e, &self.url)
    }

    fn run<T: Send>(
        &self,
        py: Python<'_>,
        fut: impl Future<Output = leasehold::Result<T>> + Send,
    ) -> PyResult<T> {
        self.home.check("store")?;
        self.home.block_on(py, fut)?.map_err(|e| self.err(e))
    }
}

#[pymethods]
impl Store {
    /// The store's URL without its secrets.
    #[getter(url)]
    fn shown_url(&self) -> &str {
        &self.shown
    }

    /// The pid of the process that opened the store.
    #[getter]
    fn pid(&self) -> u32 {
        self.home.pid
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Closes the store (every further use is a UsageError), after the
    /// releases left in the background have ended (up to `timeout`
    /// seconds). Leases still held stay held until released.
    fn close(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let timeout = duration("timeout", timeout)?;
        self.run(py, async {
            match tokio::time::timeout(timeout, self.inner.close()).await {
                Ok(closed) => closed,
                // Closed at once; only the wait for the releases ran out.
                Err(_) => Ok(()),
            }
        })
    }

    /// A lock (`kind` "lock"), semaphore ("semaphore", with `limit`),
    /// election ("election"), or a reader-writer lock's reader side
    /// ("read") or writer side ("write", both with `limit` the maximum
    /// number of readers) on `key`.
    #[pyo3(signature = (kind, key, limit=1, ttl=None, data=None, label=None, abort_on_loss=false, renew_interval=None, poll_cap=None))]
    #[allow(clippy::too_many_arguments)]
    fn target(
        slf: Bound<'_, Self>,
        kind: &str,
        key: &str,
        // Any Python int that fits: a negative or huge limit is a usage
        // error like zero (the Python half refuses what does not fit).
        limit: i64,
        ttl: Option<f64>,
        data: Option<String>,
        label: Option<String>,
        abort_on_loss: bool,
        renew_interval: Option<f64>,
        poll_cap: Option<f64>,
    ) -> PyResult<Target> {
        let this = slf.get();
        this.home.check("store")?;
        let options = lock_options(ttl, data, label, abort_on_loss, renew_interval, poll_cap)?;
        let store = &*this.inner;
        let size = |what: &str| {
            u32::try_from(limit).map_err(|_| {
                usage_error(format!(
                    "invalid {what}: {limit} is not in 1..={}",
                    leasehold::MAX_SEMAPHORE_LIMIT
                ))
            })
        };
        let kind = match kind {
            "lock" => Kind::Lock(store.lock_with(key, options).map_err(|e| this.err(e))?),
            "semaphore" => Kind::Semaphore(
                store
                    .semaphore_with(key, size("semaphore limit")?, options)
                    .map_err(|e| this.err(e))?,
            ),
            "election" => {
                Kind::Election(store.election_with(key, options).map_err(|e| this.err(e))?)
            }
            "read" | "write" => {
                let rw = store
                    .rw_lock_with(key, size("max readers")?, options)
                    .map_err(|e| this.err(e))?;
                if kind == "read" {
                    Kind::Read(rw)
                } else {
                    Kind::Write(rw)
                }
            }
            other => return Err(usage_error(format!("unknown kind {other:?}"))),
        };
        Ok(Target {
            kind: Arc::new(kind),
            home: this.home,
            url: this.url.clone(),
            store: slf.clone().unbind(),
        })
    }

    /// Plain locks on every one of `keys`, held all or none (a
    /// `MultiLock`: taken in byte order of the keys).
    #[pyo3(signature = (keys, ttl=None, data=None, label=None, abort_on_loss=false, renew_interval=None, poll_cap=None))]
    #[allow(clippy::too_many_arguments)]
    fn multi_target(
        slf: Bound<'_, Self>,
        keys: Vec<String>,
        ttl: Option<f64>,
        data: Option<String>,
        label: Option<String>,
        abort_on_loss: bool,
        renew_interval: Option<f64>,
        poll_cap: Option<f64>,
    ) -> PyResult<Target> {
        let this = slf.get();
        this.home.check("store")?;
        let options = lock_options(ttl, data, label, abort_on_loss, renew_interval, poll_cap)?;
        let all = this
            .inner
            .lock_all_with(&keys, options)
            .map_err(|e| this.err(e))?;
        Ok(Target {
            kind: Arc::new(Kind::Multi(all)),
            home: this.home,
            url: this.url.clone(),
            store: slf.clone().unbind(),
        })
    }

    /// What the store holds for `key`, as a dict.
    fn status<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyDict>> {
        let info = self.run(py, self.inner.inspect(key))?;
        key_info(py, &info)
    }

    /// Every key whose name starts with `prefix`, as dicts.
    fn list<'py>(&self, py: Python<'py>, prefix: &str) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let infos = self.run(py, self.inner.list(prefix))?;
        infos.iter().map(|i| key_info(py, i)).collect()
    }

    /// Ends any lease on `key`; the holder it ended, as a dict, or None.
    /// Refused (UsageError, nothing broken) when `key` is a semaphore's or
    /// a reader-writer lock's whose slots are held, naming them, as
    /// `leasehold break` refuses: their holders hold slot keys, each
    /// broken on its own.
    fn break_lease<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
        let store = &*self.inner;
        let broken = self.run(py, async {
            if let Some(holder) = store.break_lease(key).await? {
                return Ok(Ok(Some(holder)));
            }
            // Only looks: a TTL the store accepts.
            let caps = store.backend().capabilities();
            let look =
                || LockOptions::new().ttl(leasehold::DEFAULT_TTL.clamp(caps.min_ttl, caps.max_ttl));
            let permits = match store.semaphore_with(key, 1, look()) {
                Ok(sem) => sem.inspect().await.unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            let held = held_slots(&permits);
            if !held.is_empty() {
                return Ok(Err(format!(
                    "{key} is a semaphore: nothing was broken; its permits are its slot keys, \
                     broken one at a time with break_lease(\"{key}/:slot:N\"): {}",
                    held.join(", ")
                )));
            }
            let readers = match store.rw_lock_with(key, leasehold::DEFAULT_MAX_READERS, look()) {
                Ok(rw) => rw.readers().await.unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            let held = held_slots(&readers);
            if !held.is_empty() {
                return Ok(Err(format!(
                    "{key} is held by readers of a reader-writer lock: nothing was broken; \
                     each holds a reader slot, broken one at a time with \
                     break_lease(\"{key}/:read:N\"): {}",
                    held.join(", ")
                )));
            }
            Ok(Ok(None))
        })?;
        let broken = broken.map_err(usage_error)?;
        broken.as_ref().map(|h| holder_info(py, h)).transpose()
    }

    /// The key's last success if it ended less than `period` seconds ago.
    fn last_success_within<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        period: f64,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let period = duration("period", period)?;
        let found = self.run(py, self.inner.last_success_within(key, period))?;
        found.as_ref().map(|r| run_record(py, r)).transpose()
    }
}

/// The options of a lock, semaphore, election or reader-writer lock.
fn lock_options(
    ttl: Option<f64>,
    data: Option<String>,
    label: Option<String>,
    abort_on_loss: bool,
    renew_interval: Option<f64>,
    poll_cap: Option<f64>,
) -> PyResult<LockOptions> {
    let mut options = LockOptions::new();
    if let Some(ttl) = ttl {
        options = options.ttl(duration("ttl", ttl)?);
    }
    if let Some(every) = renew_interval {
        options = options.renew_interval(duration("renew_interval", every)?);
    }
    if let Some(cap) = poll_cap {
        options = options.poll_cap(duration("poll_cap", cap)?);
    }
    if let Some(data) = data {
        options = options.data(data);
    }
    if let Some(label) = label {
        options = options.owner_label(label);
    }
    if abort_on_loss {
        options = options.loss_policy(LossPolicy::Abort);
    }
    Ok(options)
}

/// The held ones of a semaphore's or a reader-writer lock's slots, as
/// `KEY (held by HOST pid PID)`, for `break_lease`'s refusal.
fn held_slots(slots: &[leasehold::SlotInfo]) -> Vec<String> {
    slots
        .iter()
        .filter_map(|s| {
            let h = s.info.holder.as_ref()?;
            Some(format!(
                "{} (held by {} pid {})",
                s.info.key, h.owner.host, h.owner.pid
            ))
        })
        .collect()
}

/// What a Target takes. A reader-writer lock's two sides are two Targets,
/// each with the lock.
enum Kind {
    Lock(leasehold::Lock),
    Semaphore(leasehold::Semaphore),
    Election(leasehold::Election),
    Read(leasehold::RwLock),
    Write(leasehold::RwLock),
    Multi(leasehold::MultiLock),
}

/// A lease granted: its guard and what the kind adds.
struct Granted {
    guard: Guard,
    slot: Option<u32>,
}

/// What a Held holds: one key's lease, or several keys' (a `MultiLock`'s).
enum Guard {
    One(Box<LeaseGuard>),
    All(MultiGuard),
}

impl From<LeaseGuard> for Guard {
    fn from(guard: LeaseGuard) -> Self {
        Guard::One(Box::new(guard))
    }
}

impl Guard {
    /// The key, or the keys in byte order separated by spaces.
    fn key(&self) -> String {
        match self {
            Guard::One(g) => g.key().to_string(),
            Guard::All(g) => g.keys().map(|k| k.as_str()).collect::<Vec<_>>().join(" "),
        }
    }

    /// Each key and its fencing token.
    fn tokens(&self) -> Vec<(String, u64)> {
        match self {
            Guard::One(g) => vec![(g.key().to_string(), g.fencing_token())],
            Guard::All(g) => g
                .iter()
                .map(|(k, g)| (k.to_string(), g.fencing_token()))
                .collect(),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Guard::One(g) => g.is_lost(),
            Guard::All(g) => g.is_lost(),
        }
    }

    /// Why a lease is lost (with several keys, which one), or None.
    fn loss_reason(&self) -> Option<String> {
        match self {
            Guard::One(g) => g.loss_reason().map(|r| r.to_string()),
            Guard::All(g) => g.loss().map(|(key, r)| format!("{key}: {r}")),
        }
    }

    fn valid_for(&self) -> Duration {
        match self {
            Guard::One(g) => g.valid_for(),
            Guard::All(g) => g.valid_for(),
        }
    }

    fn lost_token(&self) -> CancellationToken {
        match self {
            Guard::One(g) => g.lost_token(),
            Guard::All(g) => g.lost_token(),
        }
    }

    async fn release(self) -> leasehold::Result<()> {
        match self {
            Guard::One(g) => (*g).release().await,
            Guard::All(g) => g.release().await,
        }
    }
}

impl Kind {
    async fn acquire(
        &self,
        wait: leasehold::Wait,
        mut waiting: impl FnMut() + Send,
    ) -> leasehold::Result<Granted> {
        let mut on_wait = |_: leasehold::WaitReason<'_>| waiting();
        let on_wait = &mut on_wait;
        Ok(match self {
            Kind::Lock(l) => Granted {
                guard: l.acquire_reporting(wait, on_wait).await?.into(),
                slot: None,
            },
            Kind::Semaphore(s) => {
                let permit = s.acquire_reporting(wait, on_wait).await?;
                Granted {
                    slot: Some(permit.slot()),
                    guard: permit.into_guard().into(),
                }
            }
            Kind::Election(e) => Granted {
                guard: e
                    .campaign_reporting(wait, on_wait)
                    .await?
                    .into_guard()
                    .into(),
                slot: None,
            },
            Kind::Read(rw) => Granted {
                guard: rw.read_reporting(wait, on_wait).await?.into_guard().into(),
                slot: None,
            },
            Kind::Write(rw) => Granted {
                guard: rw.write_reporting(wait, on_wait).await?.into_guard().into(),
                slot: None,
            },
            Kind::Multi(all) => Granted {
                guard: Guard::All(all.acquire_reporting(wait, |_, _| waiting()).await?),
                slot: None,
            },
        })
    }

    /// One attempt; `None` when the key is taken or the store grants
    /// nothing yet (quarantine).
    async fn try_acquire(&self) -> leasehold::Result<Option<Granted>> {
        let got = match self {
            Kind::Lock(l) => l.try_acquire().await.map(|guard| Granted {
                guard: guard.into(),
                slot: None,
            }),
            Kind::Semaphore(s) => s.try_acquire().await.map(|p| Granted {
                slot: Some(p.slot()),
                guard: p.into_guard().into(),
            }),
            Kind::Election(e) => e.try_campaign().await.map(|l| Granted {
                guard: l.into_guard().into(),
                slot: None,
            }),
            Kind::Read(rw) => rw.try_read().await.map(|g| Granted {
                guard: g.into_guard().into(),
                slot: None,
            }),
            Kind::Write(rw) => rw.try_write().await.map(|g| Granted {
                guard: g.into_guard().into(),
                slot: None,
            }),
            Kind::Multi(all) => all.try_acquire().await.map(|g| Granted {
                guard: Guard::All(g),
                slot: None,
            }),
        };
        match got {
            Ok(g) => Ok(Some(g)),
            Err(leasehold::Error::Held { .. } | leasehold::Error::Quarantined { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn key(&self) -> String {
        match self {
            Kind::Lock(l) => l.key().to_string(),
            Kind::Semaphore(s) => s.key().to_string(),
            Kind::Election(e) => e.key().to_string(),
            Kind::Read(rw) | Kind::Write(rw) => rw.key().to_string(),
            Kind::Multi(all) => all.keys().map(|k| k.as_str()).collect::<Vec<_>>().join(" "),
        }
    }
}

/// A lock, semaphore or election of a store.
#[pyclass(frozen, module = "leasehold._leasehold")]
struct Target {
    kind: Arc<Kind>,
    home: Home,
    url: String,
    /// Keeps the store (and its backend) alive while this is.
    #[allow(dead_code)]
    store: Py<Store>,
}

impl Target {
    fn held(&self, granted: Granted) -> Held {
        Held::new(granted, self.home, self.url.clone())
    }
}

fn wait_of(wait: Option<f64>) -> PyResult<leasehold::Wait> {
    Ok(match wait {
        None => leasehold::Wait::Forever,
        Some(secs) => leasehold::Wait::Timeout(duration("wait", secs)?),
    })
}

#[pymethods]
impl Target {
    #[getter]
    fn key(&self) -> String {
        self.kind.key()
    }

    /// Takes it, waiting up to `wait` seconds (None: as long as it takes).
    /// `on_wait()` is called (from this thread) the first time an attempt
    /// finds it taken.
    #[pyo3(signature = (wait=None, on_wait=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        wait: Option<f64>,
        on_wait: Option<Py<PyAny>>,
    ) -> PyResult<Held> {
        self.home.check("lock")?;
        let wait = wait_of(wait)?;
        let waits = AtomicU64::new(0);
        let mut told = false;
        let kind = self.kind.clone();
        let count = || {
            waits.fetch_add(1, Ordering::Relaxed);
        };
        let got = self
            .home
            .block_on_interruptible(py, kind.acquire(wait, count), |py| {
                if !told && waits.load(Ordering::Relaxed) > 0 {
                    told = true;
                    if let Some(cb) = &on_wait {
                        cb.call0(py)?;
                    }
                }
                Ok(())
            })?;
        let granted = got.map_err(|e| to_py(e, &self.url))?;
        Ok(self.held(granted))
    }

    /// A semaphore's `permits` permits at once, all or none, waiting up to
    /// `wait` seconds (None: as long as it takes); with `once`, one
    /// attempt, None back when fewer are free.
    #[pyo3(signature = (permits, wait=None, once=false))]
    fn acquire_many(
        &self,
        py: Python<'_>,
        permits: i64,
        wait: Option<f64>,
        once: bool,
    ) -> PyResult<Option<Held>> {
        self.home.check("semaphore")?;
        let Kind::Semaphore(sem) = &*self.kind else {
            return Err(usage_error("acquire_many() is a semaphore's"));
        };
        let permits = u32::try_from(permits).map_err(|_| {
            usage_error(format!(
                "invalid permits: {permits} is not in 1..={}",
                sem.limit()
            ))
        })?;
        let wait = wait_of(wait)?;
        let kind = self.kind.clone();
        let got =
            self.home.block_on_interruptible(
                py,
                async move {
                    let Kind::Semaphore(sem) = &*kind else {
                        unreachable!("checked above")
                    };
                    let got = match (once, wait) {
                        (true, _) => sem.try_acquire_many(permits).await,
                        (false, leasehold::Wait::Forever) => sem.acquire_many(permits).await,
                        (false, leasehold::Wait::Timeout(t)) => {
                            sem.acquire_many_timeout(permits, t).await
                        }
                    };
                    match got {
                        Err(
                            leasehold::Error::Held { .. } | leasehold::Error::Quarantined { .. },
                        ) if once => Ok(None),
                        other => other.map(Some),
                    }
                },
                |_| Ok(()),
            )?;
        Ok(got.map_err(|e| to_py(e, &self.url))?.map(|g| {
            self.held(Granted {
                guard: Guard::All(g),
                slot: None,
            })
        }))
    }

    /// One attempt: a Held, or None when it is taken.
    fn try_acquire(&self, py: Python<'_>) -> PyResult<Option<Held>> {
        self.home.check("lock")?;
        let kind = self.kind.clone();
        let got = self
            .home
            .block_on(py, async move { kind.try_acquire().await })?;
        Ok(got.map_err(|e| to_py(e, &self.url))?.map(|g| self.held(g)))
    }

    /// Starts taking it on the runtime; `done(ok, value)` is called (on a
    /// blocking thread of the runtime, with the GIL) with the Held or the
    /// exception. The returned Pending cancels it.
    /// `on_wait()` is called once (on such a thread, with the GIL, and
    /// before `done`) if the first attempt finds it taken.
    #[pyo3(signature = (wait, on_wait, done))]
    fn acquire_start(
        &self,
        wait: Option<f64>,
        on_wait: Option<Py<PyAny>>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        self.home.check("lock")?;
        let wait = wait_of(wait)?;
        let kind = self.kind.clone();
        let home = self.home;
        let url = self.url.clone();
        // The call of on_wait, awaited before done's.
        let told = Arc::new(Mutex::new(None));
        let telling = told.clone();
        let acquiring = self.home.rt.spawn(async move {
            let mut on_wait = on_wait;
            let waiting = move || {
                if let Some(cb) = on_wait.take() {
                    let call = call_python(move |py| cb.call0(py));
                    *telling.lock().unwrap_or_else(|e| e.into_inner()) = Some(call);
                }
            };
            kind.acquire(wait, waiting).await
        });
        let abort = acquiring.abort_handle();
        // Not aborted by a cancel (only `acquiring` is): once it has an
        // outcome, done is called, and a cancel waits for that call.
        let task = self.home.rt.spawn(async move {
            let got = acquiring.await;
            let told = told.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(call) = told {
                let _ = call.await;
            }
            // Cancelled: the cancel tells the caller.
            let Ok(got) = got else { return };
            let _ = call_python(move |py| {
                let args = match got {
                    Ok(granted) => match Py::new(py, Held::new(granted, home, url.clone())) {
                        Ok(held) => (true, held.into_any()),
                        Err(e) => (false, e.into_value(py).into_any()),
                    },
                    Err(e) => (false, to_py(e, &url).into_value(py).into_any()),
                };
                done.call1(py, args)
            })
            .await;
        });
        Ok(Pending {
            task: Mutex::new(Some((abort, task))),
            rt: self.home.rt,
        })
    }

    /// For the benchmark (scripts/python-bench.py): acquire + release
    /// cycles of this lock in a Rust loop (no Python between them) for
    /// `seconds`, on this thread as a Rust program's `block_on` would run
    /// them (`same_wait`: as this package's blocking calls wait instead,
    /// [`drive`]); the number of cycles.
    #[pyo3(signature = (seconds, same_wait=false))]
    fn bench_rust_cycles(&self, py: Python<'_>, seconds: f64, same_wait: bool) -> PyResult<u64> {
        self.home.check("lock")?;
        let Kind::Lock(lock) = &*self.kind else {
            return Err(usage_error("the benchmark runs on a lock"));
        };
        let span = duration("seconds", seconds)?;
        refuse_runtime_thread()?;
        let rt = self.home.rt;
        let got = py.detach(|| {
            let start = std::time::Instant::now();
            let mut cycles = 0u64;
            if same_wait {
                // Two calls a cycle, each waited for as a blocking call of
                // this package waits (its spin is per call).
                while start.elapsed() < span {
                    let held = drive::run(rt, lock.acquire())?;
                    drive::run(rt, held.release())?;
                    cycles += 1;
                }
                return Ok(cycles);
            }
            rt.block_on(async {
                while start.elapsed() < span {
                    lock.acquire().await?.release().await?;
                    cycles += 1;
                }
                Ok::<_, leasehold::Error>(cycles)
            })
        });
        got.map_err(|e| to_py(e, &self.url))
    }

    /// An observer of an election's leader, asking every `every` seconds
    /// (and woken by releases where the store tells of them).
    fn observer(&self, every: f64) -> PyResult<Observer> {
        self.home.check("election")?;
        let Kind::Election(election) = &*self.kind else {
            return Err(usage_error("observe() is an election's"));
        };
        let every = duration("every", every)?;
        Ok(Observer {
            inner: Arc::new(tokio::sync::Mutex::new(election.observe(every))),
            home: self.home,
            url: self.url.clone(),
        })
    }

    /// Who holds the key (a lock's or election's holder; a semaphore's
    /// slots' holders; a reader-writer lock's readers, or its writer), as
    /// a list of dicts.
    fn holders<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.home.check("lock")?;
        let kind = self.kind.clone();
        let got = self.home.block_on(py, async move {
            match &*kind {
                Kind::Lock(l) => l.inspect().await.map(|i| i.holder.into_iter().collect()),
                Kind::Election(e) => e.leader().await.map(|h| h.into_iter().collect()),
                Kind::Semaphore(s) => s.inspect().await.map(|slots| {
                    slots
                        .into_iter()
                        .filter_map(|s| s.info.holder)
                        .collect::<Vec<_>>()
                }),
                Kind::Read(rw) => rw.readers().await.map(|slots| {
                    slots
                        .into_iter()
                        .filter_map(|s| s.info.holder)
                        .collect::<Vec<_>>()
                }),
                Kind::Write(rw) => rw
                    .inspect()
                    .await
                    .map(|i| i.writer.holder.into_iter().collect()),
                Kind::Multi(all) => all
                    .inspect()
                    .await
                    .map(|infos| infos.into_iter().filter_map(|i| i.holder).collect()),
            }
        })?;
        let holders: Vec<HolderInfo> = got.map_err(|e| to_py(e, &self.url))?;
        holders.iter().map(|h| holder_info(py, h)).collect()
    }
}

/// Follows an election's leader (`Election::observe`).
#[pyclass(frozen, module = "leasehold._leasehold")]
struct Observer {
    inner: Arc<tokio::sync::Mutex<leasehold::LeaderObserver>>,
    home: Home,
    url: String,
}

#[pymethods]
impl Observer {
    /// The next change: (leader dict or None, last term, missed terms); the
    /// current state at the first call. None if `timeout` seconds pass
    /// first (None: wait as long as it takes). Ctrl-C ends the wait.
    #[pyo3(signature = (timeout=None))]
    #[allow(clippy::type_complexity)]
    fn next<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Option<(Option<Bound<'py, PyDict>>, u64, u64)>> {
        self.home.check("observer")?;
        let limit = timeout.map(|t| duration("timeout", t)).transpose()?;
        let inner = self.inner.clone();
        let got = self.home.block_on_interruptible(
            py,
            async move {
                let mut observer = inner.lock().await;
                match limit {
                    None => Some(observer.next().await),
                    Some(t) => tokio::time::timeout(t, observer.next()).await.ok(),
                }
            },
            |_| Ok(()),
        )?;
        let Some(change) = got else {
            return Ok(None);
        };
        let change = change.map_err(|e| to_py(e, &self.url))?;
        let leader = change
            .leader
            .as_ref()
            .map(|h| holder_info(py, h))
            .transpose()?;
        Ok(Some((leader, change.last_term, change.missed_terms)))
    }
}

/// An async operation under way on the runtime.
#[pyclass(frozen, module = "leasehold._leasehold")]
struct Pending {
    /// The acquisition (aborted by a cancel), and the task that calls
    /// `done` once it has an outcome (awaited by a cancel).
    task: Mutex<Option<(tokio::task::AbortHandle, tokio::task::JoinHandle<()>)>>,
    rt: &'static Runtime,
}

/// How long a cancellation waits for the releases it started.
const SETTLE: Duration = Duration::from_secs(5);

#[pymethods]
impl Pending {
    /// Cancels it (if it has not completed), then calls `done()` (on a
    /// blocking thread of the runtime, with the GIL) once the operation has
    /// stopped and its own `done` (if it completed first) has been called:
    /// a lease it was granted is being released in the background then
    /// (see `settle`).
    fn cancel(&self, done: Py<PyAny>) {
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.rt.spawn(async move {
            if let Some((abort, task)) = task {
                abort.abort();
                let _ = task.await;
            }
            let _ = call_python(move |py| done.call0(py)).await;
        });
    }
}

/// A lease held: the guard renews it on the runtime until released.
#[pyclass(frozen, module = "leasehold._leasehold")]
struct Held {
    guard: Mutex<Option<Guard>>,
    /// The key, or the keys in byte order separated by spaces.
    key: String,
    /// Each key held and its fencing token.
    tokens: Vec<(String, u64)>,
    slot: Option<u32>,
    /// Cancelled when the lease is lost.
    lost: CancellationToken,
    /// Cancelled when the guard is released (before the release starts),
    /// which ends the loss watchers.
    released: CancellationToken,
    /// Whether the lease was lost before it was released.
    lost_before_release: Arc<AtomicBool>,
    reason: Mutex<Option<String>>,
    home: Home,
    url: String,
}

impl Held {
    fn new(granted: Granted, home: Home, url: String) -> Held {
        let guard = granted.guard;
        Held {
            key: guard.key(),
            tokens: guard.tokens(),
            slot: granted.slot,
            lost: guard.lost_token(),
            released: CancellationToken::new(),
            lost_before_release: Arc::new(AtomicBool::new(false)),
            reason: Mutex::new(None),
            guard: Mutex::new(Some(guard)),
            home,
            url,
        }
    }

    /// Takes the guard out for its release; None if it was released.
    fn take(&self) -> PyResult<Option<Guard>> {
        self.home.check("lease")?;
        let taken = self.guard.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(guard) = &taken {
            if let Some(reason) = guard.loss_reason() {
                self.lost_before_release.store(true, Ordering::Relaxed);
                *self.reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
            }
            self.released.cancel();
        }
        Ok(taken)
    }

    fn loss_reason_now(&self) -> Option<String> {
        match &*self.guard.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(guard) => guard.loss_reason(),
            None => self
                .reason
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    fn lost_error(&self, reason: &str) -> PyErr {
        LeaseLost::new_err(format!("lease on {} lost: {reason}", self.key))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let guard = self
            .guard
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(guard) = guard {
            if self.home.is_here() {
                // Released in the background on the runtime.
                self.released.cancel();
                let _entered = self.home.rt.enter();
                drop(guard);
            } else {
                // The parent's lease, in a forked child: not this
                // process's to release or renew.
                std::mem::forget(guard);
            }
        }
    }
}

#[pymethods]
impl Held {
    /// The key held (a semaphore's slot key for a permit).
    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    /// The fencing token of this grant (of one key).
    #[getter]
    fn token(&self) -> PyResult<u64> {
        match self.tokens.as_slice() {
            [(_, token)] => Ok(*token),
            _ => Err(usage_error(format!(
                "this lease is on {} keys ({}), each with its own fencing token: use held.tokens",
                self.tokens.len(),
                self.key
            ))),
        }
    }

    /// Each key held and its fencing token, in byte order of the keys.
    #[getter]
    fn tokens(&self) -> Vec<(String, u64)> {
        self.tokens.clone()
    }

    /// A semaphore permit's slot; None otherwise.
    #[getter]
    fn slot(&self) -> Option<u32> {
        self.slot
    }

    /// Whether the lease is lost (checked against the clock now). False
    /// after a release that came before any loss.
    #[getter]
    fn lost(&self) -> bool {
        match &*self.guard.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(guard) => guard.is_lost(),
            None => self.lost_before_release.load(Ordering::Relaxed),
        }
    }

    /// Whether the lease was released.
    #[getter]
    fn released(&self) -> bool {
        self.released.is_cancelled()
    }

    /// Why the lease is lost, or None.
    #[getter]
    fn loss_reason(&self) -> Option<String> {
        self.loss_reason_now()
    }

    /// Raises LeaseLost if the lease is lost, UsageError if released.
    fn check(&self) -> PyResult<()> {
        self.home.check("lease")?;
        if let Some(reason) = self.loss_reason_now() {
            return Err(self.lost_error(&reason));
        }
        if self.released.is_cancelled() {
            return Err(usage_error(format!(
                "the lease on {} was released",
                self.key
            )));
        }
        Ok(())
    }

    /// Seconds the lease is certainly still ours without another renewal.
    fn valid_for(&self) -> f64 {
        match &*self.guard.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(guard) => guard.valid_for().as_secs_f64(),
            None => 0.0,
        }
    }

    /// Ends the lease; raises LeaseLost if it was lost first. A second
    /// release does nothing.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let Some(guard) = self.take()? else {
            return Ok(());
        };
        self.home
            .block_on(py, guard.release())?
            .map_err(|e| to_py(e, &self.url))
    }

    /// Records a run (succeeded or failed, started at `started_at` Unix
    /// seconds), then ends the lease (`leasehold run --once-per`'s record).
    fn release_with(&self, py: Python<'_>, succeeded: bool, started_at: f64) -> PyResult<()> {
        if self.tokens.len() > 1 {
            // Before anything is taken: the lease stays held.
            return Err(usage_error("a run is recorded under the lease of one key"));
        }
        let Some(guard) = self.take()? else {
            return Err(usage_error(format!(
                "the lease on {} was already released",
                self.key
            )));
        };
        let started = UNIX_EPOCH + duration("started_at", started_at)?;
        let report = if succeeded {
            RunReport::succeeded(started)
        } else {
            RunReport::failed(started)
        };
        let Guard::One(guard) = guard else {
            return Err(usage_error("a run is recorded under the lease of one key"));
        };
        self.home
            .block_on(py, (*guard).release_with(report))?
            .map_err(|e| to_py(e, &self.url))
    }

    /// Starts the release on the runtime; `done(ok, value)` is called as
    /// for `Target.acquire_start` (value None when it went well).
    fn release_start(&self, done: Py<PyAny>) -> PyResult<()> {
        let Some(guard) = self.take()? else {
            Python::attach(|py| done.call1(py, (true, py.None())))?;
            return Ok(());
        };
        let url = self.url.clone();
        self.home.rt.spawn(async move {
            let result = guard.release().await;
            let _ = call_python(move |py| {
                let args = match result {
                    Ok(()) => (true, py.None()),
                    Err(e) => (false, to_py(e, &url).into_value(py).into_any()),
                };
                done.call1(py, args)
            })
            .await;
        });
        Ok(())
    }

    /// Releases in the background, without waiting.
    fn release_background(&self) -> PyResult<()> {
        if let Some(guard) = self.take()? {
            let _entered = self.home.rt.enter();
            drop(guard);
        }
        Ok(())
    }

    /// Calls `callback(reason)` once, on a thread of leasehold's (a blocking
    /// thread of the runtime, not a worker), when the lease
    /// is lost (at once if it is already); never after a release that came
    /// first.
    fn on_loss(&self, callback: Py<PyAny>) -> PyResult<()> {
        self.home.check("lease")?;
        let lost = self.lost.clone();
        let released = self.released.clone();
        let guard_reason = {
            let guard = self.guard.lock().unwrap_or_else(|e| e.into_inner());
            match &*guard {
                Some(g) => g.loss_reason(),
                None => return Ok(()),
            }
        };
        let key = self.key.clone();
        let lost_first = self.lost_before_release.clone();
        self.home.rt.spawn(async move {
            if guard_reason.is_none() {
                tokio::select! {
                    biased;
                    // Released: the callback runs only if the lease was
                    // lost first (seen by the holder before the renewal
                    // task marked it).
                    _ = released.cancelled() => if !lost_first.load(Ordering::Relaxed) {
                        return;
                    },
                    _ = lost.cancelled() => {}
                }
            }
            let reason = guard_reason.unwrap_or_else(|| format!("lease on {key} lost"));
            // Not awaited: the handle is dropped and the call runs on.
            drop(call_python(move |py| callback.call1(py, (reason,))));
        });
        Ok(())
    }
}

fn unix_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn holder_info<'py>(py: Python<'py>, h: &HolderInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("host", &h.owner.host)?;
    d.set_item("pid", h.owner.pid)?;
    d.set_item("label", &h.owner.label)?;
    d.set_item("data", &h.data)?;
    d.set_item("token", h.fencing_token)?;
    d.set_item("acquired_at", h.acquired_at.map(unix_secs))?;
    d.set_item("expires_in", h.expires_in.map(|d| d.as_secs_f64()))?;
    d.set_item("ttl", h.ttl.map(|d| d.as_secs_f64()))?;
    Ok(d)
}

fn run_record<'py>(py: Python<'py>, r: &RunRecord) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("succeeded", r.succeeded())?;
    d.set_item("outcome", format!("{:?}", r.outcome))?;
    d.set_item("started_at", unix_secs(r.started_at))?;
    d.set_item("ended_at", unix_secs(r.ended_at))?;
    d.set_item("token", r.fencing_token)?;
    d.set_item("host", &r.owner.host)?;
    d.set_item("pid", r.owner.pid)?;
    Ok(d)
}

fn key_info<'py>(py: Python<'py>, i: &KeyInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("key", i.key.to_string())?;
    d.set_item("token", i.fencing_token)?;
    d.set_item(
        "holder",
        i.holder.as_ref().map(|h| holder_info(py, h)).transpose()?,
    )?;
    d.set_item(
        "last_success",
        i.last_success
            .as_ref()
            .map(|r| run_record(py, r))
            .transpose()?,
    )?;
    d.set_item(
        "last_run",
        i.last_run.as_ref().map(|r| run_record(py, r)).transpose()?,
    )?;
    Ok(d)
}

#[pymodule]
fn _leasehold(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::add_to(m)?;
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(parse_duration, m)?)?;
    m.add_function(wrap_pyfunction!(finish_background, m)?)?;
    m.add_function(wrap_pyfunction!(settle, m)?)?;
    m.add_function(wrap_pyfunction!(runtime_pid, m)?)?;
    m.add_class::<Store>()?;
    m.add_class::<Target>()?;
    m.add_class::<Held>()?;
    m.add_class::<Pending>()?;
    m.add_class::<Observer>()?;
    Ok(())
}
