//! [`MultiLock`]: several keys held together, all or none.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join_all, select, select_all, Either};
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::engine::{Batch, Engine, WaitReason};
use crate::error::{Error, LossReason, Result};
use crate::guard::LeaseGuard;
use crate::key::Key;
use crate::options::{LockOptions, Wait};
use crate::store::Store;

/// The most keys one [`MultiLock`] takes (each is a lease of its own,
/// renewed by a task of its own, and the guard's loss watch looks at
/// every one on each renewal).
pub const MAX_MULTI_KEYS: usize = 1000;

/// Several keys held together: either every key is held or none is.
/// Made by [`Store::lock_all`], [`Store::lock_all_with`] or, to mix locks
/// with either side of [reader-writer locks](crate::RwLock),
/// [`MultiLock::builder`].
///
/// ```
/// # async fn demo() -> leasehold::Result<()> {
/// use std::time::Duration;
/// let store = leasehold::Store::open("memory:")?;
/// // The same two keys in another order elsewhere: no deadlock.
/// let both = store.lock_all(["accounts/bob", "accounts/alice"])?;
/// let held = both.acquire_timeout(Duration::from_secs(60)).await?;
/// for (key, guard) in held.iter() {
///     println!("{key}: fencing token {}", guard.fencing_token());
/// }
/// held.release().await?;
/// # Ok(()) }
/// ```
///
/// # How it works
/// Each key is an ordinary lease, taken by the same engine as a
/// [`Lock`](crate::Lock)'s (so `inspect KEY` shows its holder, and a plain lock on one
/// of the keys competes with the multi-key lock for it). The keys are
/// taken one after the other in one global order, their byte order, not
/// the order the caller gave: a holder only ever waits for a key greater
/// than every key it holds, so two multi-key locks (or a multi-key lock
/// and any single locks) can never wait for each other in a circle, in
/// this process or across processes. Keys already taken are renewed in
/// the background while the next is waited for.
///
/// Where the store can take several keys in one atomic request (SQLite:
/// one transaction and one fsync; PostgreSQL and MySQL: one transaction;
/// Redis: one script; etcd: one `Txn`; DynamoDB: one
/// `TransactWriteItems`; see
/// [`Backend::try_acquire_all`](crate::backend::Backend::try_acquire_all)),
/// the first attempt of a multi-key lock whose keys are plain locks or
/// writers of reader-writer locks asks for every key in one request: all
/// granted (each writer's grant then passes its check that no reader
/// holds the key, as one key's does; one held back lets every key go),
/// or nothing written. Once it finds a key held (or on any other store,
/// or with a reader among the keys) the keys are taken one by one as
/// above.
///
/// All or none: when a wait runs out, fails or is cancelled, the keys
/// already taken are released at once (awaited before the error is
/// returned; in the background when the future is dropped). If a key
/// taken earlier is lost while a later one is waited for (a renewal
/// failed), every key is let go and the acquisition starts again, within
/// the same wait.
///
/// # Fencing tokens
/// Each key keeps its own fencing token ([`MultiGuard::fencing_token`]),
/// strictly greater than every token issued before for that key; a
/// resource fences on the token of the key that protects it.
///
/// # Loss
/// The [`MultiGuard`] counts as lost as soon as any one of its keys is
/// lost ([`MultiGuard::lost`] says which), and its
/// [`deadline_watch`](MultiGuard::deadline_watch) is the earliest of the
/// keys' safety deadlines.
#[derive(Debug, Clone)]
pub struct MultiLock {
    /// One per key, in key order.
    parts: Arc<[Part]>,
}

/// One key of a [`MultiLock`], and how it is held.
#[derive(Debug)]
struct Part {
    key: Key,
    engine: Arc<Engine>,
}

/// How a [`MultiLock`] holds one of its keys ([`MultiLockBuilder`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    /// A plain lock on the key.
    Lock,
    /// A reader of the reader-writer lock on the key.
    Read,
    /// The writer of the reader-writer lock on the key.
    Write,
}

/// Builds a [`MultiLock`] whose keys may be held in different ways: a plain
/// [`Lock`](crate::Lock), or either side of a [`RwLock`](crate::RwLock) (so a job can read one key and
/// write another, all or none). Made by [`MultiLock::builder`].
///
/// ```
/// # async fn demo() -> leasehold::Result<()> {
/// use leasehold::{LockOptions, MultiLock};
/// let store = leasehold::Store::open("memory:")?;
/// let job = MultiLock::builder(&store, LockOptions::new())
///     .read("tables/customers")
///     .write("indexes/customers-by-name")
///     .build()?;
/// let held = job.acquire().await?;
/// held.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until built"]
pub struct MultiLockBuilder {
    store: Store,
    options: LockOptions,
    max_readers: u32,
    keys: Vec<(String, Side)>,
}

impl MultiLockBuilder {
    /// Holds `key` as a plain [`Lock`](crate::Lock) (exclusive).
    pub fn lock(mut self, key: impl Into<String>) -> Self {
        self.keys.push((key.into(), Side::Lock));
        self
    }

    /// Holds `key` as a reader of the [`RwLock`](crate::RwLock) on it (shared with other
    /// readers; see [`RwLock::read`](crate::RwLock::read)).
    pub fn read(mut self, key: impl Into<String>) -> Self {
        self.keys.push((key.into(), Side::Read));
        self
    }

    /// Holds `key` as the writer of the [`RwLock`](crate::RwLock) on it (exclusive of
    /// readers and of plain locks on the key; see [`RwLock::write`](crate::RwLock::write)).
    pub fn write(mut self, key: impl Into<String>) -> Self {
        self.keys.push((key.into(), Side::Write));
        self
    }

    /// How many readers the reader-writer locks of [`read`](Self::read) and
    /// [`write`](Self::write) keys admit at once (default
    /// [`DEFAULT_MAX_READERS`](crate::DEFAULT_MAX_READERS); every user of a
    /// key must agree on it, as for [`Store::rw_lock_with`]).
    pub fn max_readers(mut self, max_readers: u32) -> Self {
        self.max_readers = max_readers;
        self
    }

    /// The multi-key lock.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if there is no key or more than
    /// [`MAX_MULTI_KEYS`] (what: `"keys"`), a key
    /// is named twice in different ways (what: `"keys"`; the same key
    /// named twice the same way counts once), a key breaks the rule of its
    /// kind (as [`Store::lock_with`] and [`Store::rw_lock_with`] say), or
    /// the options do not fit together or with the backend.
    pub fn build(self) -> Result<MultiLock> {
        let MultiLockBuilder {
            store,
            options,
            max_readers,
            mut keys,
        } = self;
        if keys.is_empty() {
            return Err(Error::invalid(
                "keys",
                "a multi-key lock needs at least one key".to_string(),
            ));
        }
        if keys.len() > MAX_MULTI_KEYS {
            return Err(Error::invalid(
                "keys",
                format!(
                    "{} keys; a multi-key lock takes at most {MAX_MULTI_KEYS}",
                    keys.len()
                ),
            ));
        }
        keys.sort();
        keys.dedup();
        if let Some(pair) = keys.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::invalid(
                "keys",
                format!(
                    "{} is named twice, held in two different ways; name each key once",
                    pair[0].0
                ),
            ));
        }
        let mut parts = Vec::with_capacity(keys.len());
        for (key, side) in keys {
            let engine = match side {
                Side::Lock => {
                    let lock = store.lock_with(&key, options.clone())?;
                    lock.shared_engine()
                }
                Side::Read | Side::Write => {
                    let rw = store.rw_lock_with(&key, max_readers, options.clone())?;
                    rw.shared_engine(side == Side::Write)
                }
            };
            parts.push(Part {
                key: engine.name().clone(),
                engine,
            });
        }
        Ok(MultiLock {
            parts: parts.into(),
        })
    }
}

impl MultiLock {
    /// A builder of a multi-key lock whose keys are held in different ways
    /// (see [`MultiLockBuilder`]), every lease taken with `options`.
    pub fn builder(store: &Store, options: LockOptions) -> MultiLockBuilder {
        MultiLockBuilder {
            store: store.clone(),
            options,
            max_readers: crate::DEFAULT_MAX_READERS,
            keys: Vec::new(),
        }
    }

    /// Plain locks on `keys` (what [`Store::lock_all_with`] makes).
    pub(crate) fn locks<K: AsRef<str>>(
        store: &Store,
        keys: impl IntoIterator<Item = K>,
        options: LockOptions,
    ) -> Result<Self> {
        keys.into_iter()
            .fold(Self::builder(store, options), |b, k| b.lock(k.as_ref()))
            .build()
    }

    /// The keys, in the order they are taken (byte order), each once.
    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.parts.iter().map(|p| &p.key)
    }

    /// What the store holds for each key, in byte order of the keys.
    ///
    /// # Errors
    /// Backend failures.
    pub async fn inspect(&self) -> Result<Vec<crate::KeyInfo>> {
        let mut infos = Vec::with_capacity(self.parts.len());
        for part in self.parts.iter() {
            infos.push(part.engine.store().backend().inspect(&part.key).await?);
        }
        Ok(infos)
    }

    /// Takes every key if each is free now, with one attempt per key,
    /// without waiting; releases those it took if one is not.
    ///
    /// # Errors
    /// [`Error::Held`] naming the first key (in byte order) that was held;
    /// [`Error::Quarantined`] while the store's data is new;
    /// [`Error::LeaseLost`] if a key taken was lost before the last was
    /// granted (nothing is held); backend failures.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future releases, in the background, the
    /// keys it took.
    pub async fn try_acquire(&self) -> Result<MultiGuard> {
        self.take(None, &mut |_, _| {}).await
    }

    /// Takes every key, waiting as long as it takes.
    ///
    /// # Errors
    /// Non-retryable backend failures (retryable ones are retried).
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn acquire(&self) -> Result<MultiGuard> {
        self.take(Some(Wait::Forever), &mut |_, _| {}).await
    }

    /// Takes every key, waiting up to `timeout` in all (each key is waited
    /// for as [`Lock::acquire_timeout`](crate::Lock::acquire_timeout) waits, within what is left).
    ///
    /// # Errors
    /// [`Error::TimedOut`] naming the key that was waited for when the
    /// wait ran out (and how long the whole wait took); the keys taken
    /// before it were released. Non-retryable backend failures.
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<MultiGuard> {
        self.take(Some(Wait::Timeout(timeout)), &mut |_, _| {})
            .await
    }

    /// Takes every key, waiting as `wait` says, and calls `on_wait` with
    /// the key waited for and the reason every time an attempt on it gets
    /// nothing (see [`Lock::acquire_reporting`](crate::Lock::acquire_reporting)).
    ///
    /// # Errors
    /// As [`acquire_timeout`](Self::acquire_timeout).
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn acquire_reporting(
        &self,
        wait: impl Into<Wait>,
        mut on_wait: impl FnMut(&Key, WaitReason<'_>),
    ) -> Result<MultiGuard> {
        self.take(Some(wait.into()), &mut on_wait).await
    }

    /// Takes the keys in order: one attempt each (`wait` `None`), or
    /// waiting for each within what is left of `wait`.
    async fn take(
        &self,
        wait: Option<Wait>,
        on_wait: &mut impl FnMut(&Key, WaitReason<'_>),
    ) -> Result<MultiGuard> {
        let started = tokio::time::Instant::now();
        let deadline = wait.and_then(|w| w.deadline(started));
        // First, every key in one request where the store can (plain locks
        // and writers): all or none at once. Anything but a grant of every
        // key goes one by one, as below.
        let engines: Vec<&Engine> = self.parts.iter().map(|p| &*p.engine).collect();
        let batch = crate::engine::take_all(&engines);
        let batch = match deadline {
            None => batch.await?,
            // A wait already over sends nothing (as one key's does not).
            Some(end) if tokio::time::Instant::now() >= end => Batch::OneByOne,
            Some(end) => match tokio::time::timeout_at(end, batch).await {
                Ok(batch) => batch?,
                Err(_) => {
                    return Err(Error::TimedOut {
                        key: self.parts[0].key.to_string(),
                        waited: started.elapsed(),
                    })
                }
            },
        };
        if let Batch::Granted(held) = batch {
            if !held.iter().any(LeaseGuard::is_lost) {
                let keys = self.parts.iter().map(|p| p.key.clone()).collect();
                return Ok(MultiGuard::new(keys, held));
            }
            release_all(held).await;
        }
        'attempt: loop {
            let mut held: Vec<LeaseGuard> = Vec::with_capacity(self.parts.len());
            for part in self.parts.iter() {
                let acquiring = async {
                    let this = match (wait, deadline) {
                        (None, _) => return part.engine.try_acquire().await,
                        (Some(_), None) => Wait::Forever,
                        (Some(_), Some(end)) => Wait::Timeout(
                            end.saturating_duration_since(tokio::time::Instant::now()),
                        ),
                    };
                    part.engine
                        .acquire(this, &mut |reason| on_wait(&part.key, reason))
                        .await
                };
                // A key taken earlier that is lost meanwhile ends the wait
                // for this one: all or none.
                let outcome = if held.is_empty() {
                    Ok(acquiring.await)
                } else {
                    let lost = select_all(held.iter().map(|g| Box::pin(g.lost())));
                    match select(Box::pin(acquiring), lost).await {
                        Either::Left((granted, _)) => Ok(granted),
                        Either::Right(((reason, i, _), _)) => {
                            Err((self.parts[i].key.clone(), reason))
                        }
                    }
                };
                match outcome {
                    Ok(Ok(granted)) => held.push(granted.guard),
                    Ok(Err(e)) => {
                        release_all(held).await;
                        return Err(match e {
                            Error::TimedOut { key, .. } => Error::TimedOut {
                                key,
                                waited: started.elapsed(),
                            },
                            e => e,
                        });
                    }
                    Err((key, reason)) => {
                        tracing::debug!(%key, %reason, "a key taken earlier was lost while waiting for the next; starting again");
                        release_all(held).await;
                        match (wait, deadline) {
                            (None, _) => {
                                return Err(Error::LeaseLost {
                                    key: key.to_string(),
                                    reason,
                                })
                            }
                            (Some(_), Some(end)) if tokio::time::Instant::now() >= end => {
                                return Err(Error::TimedOut {
                                    key: part.key.to_string(),
                                    waited: started.elapsed(),
                                })
                            }
                            _ => continue 'attempt,
                        }
                    }
                }
            }
            // A key lost just as the last was granted: all or none still.
            if let Some(i) = held.iter().position(LeaseGuard::is_lost) {
                let key = self.parts[i].key.to_string();
                let reason = held[i]
                    .loss_reason()
                    .unwrap_or(crate::error::LossReason::Expired);
                release_all(held).await;
                match (wait, deadline) {
                    (None, _) => return Err(Error::LeaseLost { key, reason }),
                    (Some(_), Some(end)) if tokio::time::Instant::now() >= end => {
                        return Err(Error::TimedOut {
                            key,
                            waited: started.elapsed(),
                        })
                    }
                    _ => continue 'attempt,
                }
            }
            let keys = self.parts.iter().map(|p| p.key.clone()).collect();
            return Ok(MultiGuard::new(keys, held));
        }
    }
}

/// Releases `guards` side by side, at once; their errors are logged only
/// (the acquisition that took them failed, and says why).
pub(crate) async fn release_all(guards: Vec<LeaseGuard>) {
    for result in join_all(guards.into_iter().map(LeaseGuard::release)).await {
        if let Err(e) = result {
            tracing::debug!(error = %e, "releasing a key of a multi-key lock that was not completed");
        }
    }
}

/// Every key of a [`MultiLock`], held: one [`LeaseGuard`] per key, renewed
/// in the background, released together by [`release`](Self::release) or
/// (best effort, in the background) when dropped.
#[must_use = "the keys are released as soon as the guard is dropped"]
pub struct MultiGuard {
    keys: Box<[Key]>,
    guards: Vec<LeaseGuard>,
    /// The earliest of the guards' safety deadlines.
    deadline: watch::Receiver<Duration>,
    /// Cancelled when any guard is lost.
    lost: CancellationToken,
    /// Stops the task that keeps `deadline` and `lost`.
    _watcher: DropGuard,
}

impl std::fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiGuard")
            .field("guards", &self.guards)
            .finish_non_exhaustive()
    }
}

impl MultiGuard {
    pub(crate) fn new(keys: Box<[Key]>, guards: Vec<LeaseGuard>) -> Self {
        let deadlines: Vec<_> = guards.iter().map(LeaseGuard::deadline_watch).collect();
        let earliest = deadlines
            .iter()
            .map(|d| *d.borrow())
            .min()
            .unwrap_or_default();
        let (tx, deadline) = watch::channel(earliest);
        let lost = CancellationToken::new();
        let stop = CancellationToken::new();
        let helds = guards.iter().map(LeaseGuard::held).collect();
        tokio::spawn(watch_all(helds, deadlines, tx, lost.clone(), stop.clone()));
        MultiGuard {
            keys,
            guards,
            deadline,
            lost,
            _watcher: stop.drop_guard(),
        }
    }

    /// The keys held, in byte order (for a reader, the key of its
    /// reader-writer lock; its guard's [`key`](LeaseGuard::key) is the
    /// reader slot's).
    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.keys.iter()
    }

    /// Each key with its guard, in byte order of the keys.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &LeaseGuard)> {
        self.keys.iter().zip(&self.guards)
    }

    /// The guard of `key`, if it is one of the keys.
    pub fn guard(&self, key: &str) -> Option<&LeaseGuard> {
        self.iter().find(|(k, _)| k.as_str() == key).map(|(_, g)| g)
    }

    /// The fencing token of `key`'s lease, if it is one of the keys
    /// (see [`LeaseGuard::fencing_token`]).
    pub fn fencing_token(&self, key: &str) -> Option<u64> {
        self.guard(key).map(LeaseGuard::fencing_token)
    }

    /// Whether any key's lease is lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LeaseGuard::is_lost)
    }

    /// The first key (in byte order) whose lease is lost, and why; `None`
    /// while every key is held.
    pub fn loss(&self) -> Option<(&Key, LossReason)> {
        self.iter()
            .find_map(|(k, g)| g.loss_reason().map(|reason| (k, reason)))
    }

    /// How much longer every key is certainly held without another
    /// successful renewal: the least of the keys' (zero once one is lost).
    pub fn valid_for(&self) -> Duration {
        self.guards
            .iter()
            .map(LeaseGuard::valid_for)
            .min()
            .unwrap_or_default()
    }

    /// The earliest of the keys' safety deadlines, as it moves (see
    /// [`LeaseGuard::deadline_watch`]).
    pub fn deadline_watch(&self) -> watch::Receiver<Duration> {
        self.deadline.clone()
    }

    /// Completes when any key's lease is lost, with the key and the
    /// reason (see [`LeaseGuard::lost`]).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future changes nothing.
    pub async fn lost(&self) -> (&Key, LossReason) {
        let (reason, i, _) = select_all(self.guards.iter().map(|g| Box::pin(g.lost()))).await;
        (&self.keys[i], reason)
    }

    /// A token cancelled when any key's lease is lost (see
    /// [`LeaseGuard::lost_token`]).
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.child_token()
    }

    /// The guards, one per key in byte order of the keys, to release or
    /// keep one by one. The combined signals handed out before
    /// ([`lost_token`](Self::lost_token), [`deadline_watch`](Self::deadline_watch))
    /// stop with this guard: watch each guard's own from then on.
    pub fn into_guards(self) -> Vec<LeaseGuard> {
        self.guards
    }

    /// Ends every key's lease, side by side, and reports how that went.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if a key's lease was lost before the release
    /// (the first such key), else the first other error of a release (that
    /// key's lease then ends at its TTL); every other key is released
    /// whatever happened to one.
    ///
    /// # Cancel safety
    /// The releases go on in the background if this future is dropped.
    pub async fn release(self) -> Result<()> {
        let mut errors: Vec<Error> = join_all(self.guards.into_iter().map(LeaseGuard::release))
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        let first = errors
            .iter()
            .position(|e| matches!(e, Error::LeaseLost { .. }))
            .unwrap_or(0);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.swap_remove(first))
        }
    }
}

/// Keeps `tx` at the earliest of `deadlines` and cancels `lost` when a
/// lease is lost, until `stop`.
async fn watch_all(
    helds: Vec<crate::guard::HeldLease>,
    mut deadlines: Vec<watch::Receiver<Duration>>,
    tx: watch::Sender<Duration>,
    lost: CancellationToken,
    stop: CancellationToken,
) {
    if helds.is_empty() {
        return;
    }
    let mut watching = true;
    loop {
        let earliest = deadlines
            .iter_mut()
            .map(|d| *d.borrow_and_update())
            .min()
            .unwrap_or_default();
        tx.send_if_modified(|d| std::mem::replace(d, earliest) != earliest);
        let changed = async {
            if watching {
                select_all(deadlines.iter_mut().map(|d| Box::pin(d.changed())))
                    .await
                    .0
            } else {
                std::future::pending().await
            }
        };
        let any_lost = async {
            if lost.is_cancelled() {
                std::future::pending::<()>().await;
            }
            select_all(helds.iter().map(|h| Box::pin(h.lost()))).await;
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            () = any_lost => lost.cancel(),
            changed = changed => {
                // The senders live in the guards' states, which `helds`
                // keeps: not expected to close; stop watching if one does.
                if changed.is_err() {
                    watching = false;
                }
            }
        }
    }
}
