//! [`RwLock`]: a reader-writer lock on one key of a store, with writer
//! preference.
//!
//! # What is stored
//! Nothing new: ordinary leases, taken by the one acquisition engine (see
//! the crate's `engine` module) with a *gate* checked after each grant.
//!
//! * The **writer** holds the lock's key `KEY` itself: the same lease a
//!   [`Lock`](crate::Lock) on `KEY` takes, with `KEY`'s fencing counter.
//! * A **reader** holds one of R *reader slots* `KEY/:read:0` …
//!   `KEY/:read:{R-1}` (R = the lock's maximum number of readers), as a
//!   semaphore permit holds a slot.
//!
//! # The two sides, in store operations
//! * **Reader**: (1) take a free reader slot S (a grant); then (2) read
//!   `KEY` ([`inspect`](crate::backend::Backend::inspect)). If `KEY` has
//!   no holder, (3) read S: if S is still its own lease, the reader holds
//!   the lock (as long as its lease on S); if not, it starts over.
//!   If it has one (a writer holding, or waiting for readers to go), the
//!   reader gives S back and waits, watching `KEY`'s release.
//! * **Writer**: (1) take `KEY` (a grant); then (2) read the reader slots
//!   ([`list`](crate::backend::Backend::list)`("KEY/:read:")`). If none is
//!   held, (3) read `KEY`: if it is still its own lease, the writer holds
//!   the lock; if not, it starts over. If some are, the writer **keeps
//!   `KEY`** (renewed as any lease) and waits, watching the slots'
//!   releases and reading them again, until none is held or its wait runs
//!   out (then it gives `KEY` back). Keeping `KEY` is the writer
//!   preference: every reader that comes after finds `KEY` held at its
//!   step (2) and waits behind the writer, while readers already holding
//!   finish (or are lost at their TTL) before the writer is granted.
//!
//! # Why a reader and a writer never both believe they hold
//! Each side writes its own mark (step 1, a grant) *before* it reads the
//! other's (step 2), and every store is linearizable for these operations
//! (a grant, a read and a consistent list see every grant that completed
//! before them). Suppose a reader and a writer both passed step 2 while
//! both leases were live. The reader's read of `KEY` found it free, so the
//! writer's grant of `KEY` took effect after that read (or the writer's
//! lease had ended before it, and the writer was told lost first), hence
//! after the reader's grant of S, which came before the read. The
//! writer's read of the slots came after its own grant, so after the
//! reader's grant of S, and found S held (unless the reader's lease had
//! ended, and the reader was told lost first): the writer did not pass.
//! Contradiction.
//!
//! That argument needs the grant and the read after it to see the same
//! data, which a loss of the store's data (a flush, a deleted table or
//! prefix) between them breaks: a writer granted `KEY` on the old data
//! whose list runs on the emptied store finds no slot, while readers
//! granted on the old data have not yet been told that their slots are
//! gone (the torture run found this on Redis). Step (3) closes it: the
//! side's own lease, granted before the loss, is gone after it, so a side
//! that finds its lease still there at (3) read the other side at (2)
//! before any loss (no loss is undone: the store's data only ever goes
//! forward, to a new epoch). A side that finds it gone starts over, in the
//! new epoch, behind its quarantine, which outlasts every lease of the
//! lost data, as for any grant after a loss. Test:
//! `rw_lock_a_gate_that_reads_after_a_loss_waits_for_the_other_side` in
//! the suite's `loss.rs`, on every store.
//!
//! Two writers exclude each other on `KEY` as two
//! [`Lock`](crate::Lock)s do. What a guard is told about loss is the
//! engine's, unchanged: each side's guard is its own lease's (a reader's
//! on its slot, a writer's on `KEY`), renewed, and lost by its own clock
//! before the store lets anyone else take that lease over. A read that
//! finds a holder is only taken as "held" where the store's own takeover
//! rule agrees: where taking a key over needs an observation (S3,
//! DynamoDB), a read shows a dead holder's record until someone takes it
//! over, so the gate then makes one ordinary attempt on that key (counting
//! towards the observation) and, if granted, gives it back at once and
//! counts the key free. So a dead reader or writer blocks the other side
//! for its TTL (two TTLs where takeover needs an observation), not for
//! good. Tests: the conformance suite's `rw_lock_*` tests, on every store;
//! `rw_lock_reader_and_writer_never_overlap` races readers and writers in
//! several processes.
//!
//! # Fencing tokens
//! A writer's token is `KEY`'s: [`next_token`](crate::backend::next_token)
//! over `KEY`'s counter, strictly greater than every token issued for
//! `KEY` before. A reader's token is `max(T, epoch << 22)`, where `T` is
//! `KEY`'s last issued token as its step (2) read it (with any attempt the
//! gate made on `KEY`), and the epoch is its own grant's store epoch. So a
//! writer granted after a reader has a greater token than that reader (the
//! writer's grant of `KEY` took effect after the reader's read, and a
//! later epoch's tokens are above every earlier epoch's); readers that
//! share a writer-free stretch share its token, which is the token of the
//! last writer before them (readers do not advance `KEY`'s counter),
//! but for one case: where taking a key over needs an observation (S3,
//! DynamoDB), a reader whose read found `KEY` held makes one attempt on it
//! (the probe below), and if that attempt is granted (the writer released
//! in between) its token, one above the last writer's, is the reader's
//! (the conformance test `rw_lock_a_waiting_writer_goes_before_later_readers`
//! met it on DynamoDB Local).
//! Where a grant writes its token before it takes the key (Azure: the
//! record, then the blob lease;
//! [`token_visible_before_holder`](crate::backend::Capabilities::token_visible_before_holder)),
//! a read can show a writer's token while `KEY` still looks free; there a
//! reader that reads `KEY` free then takes it once and gives it back (an
//! ordinary attempt, as the probe above), whose grant changes the record
//! under the writer's second request, so the writer starts over with a
//! greater token (or the reader's attempt finds `KEY` held, and it waits).
//! That grant's token is the reader's: on such a store readers do advance
//! `KEY`'s counter, and each reader's token is its own, still above every
//! earlier writer's and below every later one's.
//! The torture harness found this on Azurite: a writer with its reader's
//! token.
//!
//! A resource fences a reader-writer lock with two numbers per key, the
//! greatest token of a write and of a read it has accepted: it accepts a
//! read whose token is not below the greatest write token, and a write
//! whose token is not below the greatest write token *and above* the
//! greatest read token. A reader's token is never below the last writer's
//! that held before it, and a writer's is above every earlier reader's, so
//! no holder is refused; a stale reader cannot read past a newer writer's
//! write; and a writer that was lost cannot write once a reader that came
//! after it (holding its token) has read. The torture harness's witness is
//! such a resource (`crates/leasehold-torture/src/witness.rs`, `Fence`).
//!
//! # What a plain lock on `KEY` is
//! A [`Lock`](crate::Lock) on `KEY` takes the same lease as the writer, so
//! readers wait for it, but it does not wait for readers already holding:
//! use [`RwLock::write`] for that. (`leasehold run KEY` takes the writer's
//! side, so it and `leasehold run --shared KEY` exclude each other.)

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::backend::KeyInfo;
use crate::engine::{Engine, Gate, Granted};
use crate::error::{Error, Result};
use crate::guard::LeaseGuard;
use crate::key::{Key, MAX_KEY_LEN};
use crate::metric::Kind;
use crate::options::ResolvedOptions;
use crate::semaphore::{numbered_slots, SlotInfo, MAX_SEMAPHORE_LIMIT};
use crate::store::Store;
use crate::waits::Waits;

/// How many readers an [`RwLock`] admits at once unless told otherwise.
pub const DEFAULT_MAX_READERS: u32 = 16;

/// What goes between a reader-writer lock's key and a reader slot number:
/// the reader slots of the lock `KEY` are the keys `KEY/:read:N` a backend
/// stores (and `list` shows).
pub const READ_SEGMENT: &str = "/:read:";

/// The longest reader-writer lock key, so that every reader slot key
/// (`KEY/:read:999` at most) obeys the key rule.
pub const MAX_RW_LOCK_KEY_LEN: usize = MAX_KEY_LEN - READ_SEGMENT.len() - 3;

/// A reader-writer lock: any number of readers up to a maximum, or one
/// writer, across every process that uses the same store, with writer
/// preference. Made by [`Store::rw_lock`] or [`Store::rw_lock_with`].
///
/// * A writer excludes every reader and every other writer.
/// * Readers share, up to [`max_readers`](Self::max_readers) at once.
/// * Writer preference: once a writer waits, readers that come after wait
///   behind it; readers already holding finish (or are lost) before the
///   writer is granted.
/// * A dead reader's or writer's hold ends at its TTL (two TTLs where the
///   store's takeover needs an observation).
/// * A reader gets a [`ReadGuard`], a writer a [`WriteGuard`]: two types,
///   so that code that needs the write hold cannot be handed a read one.
///   Both deref to the [`LeaseGuard`] underneath: renewed in the
///   background, lost (and told so, by [`lost`](LeaseGuard::lost)) before
///   anyone else can take over, released on drop. A reader's guard holds a
///   reader slot (its [`key`](LeaseGuard::key) is `KEY/:read:N`), a
///   writer's holds `KEY` itself. A write hold cannot be downgraded to a
///   read hold in place: release it and read.
/// * A writer's fencing token is greater than every token granted for the
///   key before it, readers' included; readers may share a token (see
///   [Fencing tokens](#fencing-tokens)).
///
/// The waits have the shape of [`Lock`](crate::Lock)'s (one attempt, as long
/// as it takes, up to a timeout, reporting), are cancel safe, and release a
/// grant that arrives too late, as every lock type's do: they are the same
/// engine's.
///
/// ```
/// # async fn demo() -> leasehold::Result<()> {
/// use std::time::Duration;
/// let store = leasehold::Store::open("memory:")?;
/// let config = store.rw_lock("config")?;
/// let a = config.read_timeout(Duration::from_secs(60)).await?;
/// let b = config.read_timeout(Duration::from_secs(60)).await?; // readers share
/// assert!(config.try_write().await.is_err());
/// drop((a, b));
/// let w = config.write_timeout(Duration::from_secs(60)).await?;
/// println!("writing with token {}", w.fencing_token());
/// w.release().await?;
/// # Ok(()) }
/// ```
///
/// # How it works
/// The writer holds the lease on `KEY`; each reader holds a lease on one
/// of the reader slots `KEY/:read:N`. A reader, once granted its slot,
/// reads `KEY` and gives the slot back if a writer holds or waits; a
/// writer, once granted `KEY`, reads the reader slots and keeps `KEY`
/// while it waits for them to be free. Each side writes before it reads
/// the other's, which is why they never both hold; the argument is written
/// out at the top of this type's source module (`rwlock.rs`). The reader
/// segment `:read:` is reserved as `:slot:` is: no lock, semaphore or
/// reader-writer lock key may have a segment starting with it. A key is at
/// most [`MAX_RW_LOCK_KEY_LEN`] characters, the maximum number of readers
/// at most [`MAX_SEMAPHORE_LIMIT`]. Processes that disagree on the maximum
/// admit up to the largest; a writer waits for readers on every slot.
///
/// # Fencing tokens
/// A writer's token is the key's own, strictly greater than every token
/// issued for `KEY` before. A reader's token is the key's last issued token
/// when the reader was granted (the last writer's), or the first token of
/// its store epoch less one if that is greater: a later writer's token is
/// greater than it, and readers between two writers share it. A resource
/// that fences readers and writers accepts a reader's token when it is at
/// least the greatest it has seen, and a writer's when it is greater.
#[derive(Debug, Clone)]
pub struct RwLock {
    reader: Arc<Engine>,
    writer: Arc<Engine>,
}

/// What the store holds for a reader-writer lock: its key (the writer's
/// lease) and its reader slots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RwLockInfo {
    /// What the store holds for the key itself: its holder is the writer
    /// (holding, or waiting for readers if some reader slot is held too).
    pub writer: KeyInfo,
    /// Every reader slot the store has a record of, held or not, in slot
    /// order.
    pub readers: Vec<SlotInfo>,
}

impl RwLockInfo {
    /// The reader slots held now.
    pub fn holding_readers(&self) -> impl Iterator<Item = &SlotInfo> {
        self.readers.iter().filter(|s| s.info.holder.is_some())
    }

    /// Whether a writer holds the key while readers still hold slots: it is
    /// waiting for them to finish, and new readers wait behind it.
    pub fn writer_waiting(&self) -> bool {
        self.writer.holder.is_some() && self.holding_readers().next().is_some()
    }
}

impl RwLock {
    pub(crate) fn new(
        store: Store,
        key: Key,
        max_readers: u32,
        opts: ResolvedOptions,
    ) -> Result<Self> {
        if max_readers == 0 || max_readers > MAX_SEMAPHORE_LIMIT {
            return Err(Error::invalid(
                "max readers",
                format!("{max_readers} is not in 1..={MAX_SEMAPHORE_LIMIT}"),
            ));
        }
        if key.as_str().len() > MAX_RW_LOCK_KEY_LEN {
            return Err(Error::invalid(
                "rw lock key",
                format!(
                    "the key is {} characters long; a reader-writer lock key may have at most {MAX_RW_LOCK_KEY_LEN}, leaving room for the reader slot keys (KEY{READ_SEGMENT}N) under the {MAX_KEY_LEN}-character key limit",
                    key.as_str().len()
                ),
            ));
        }
        let slots: Vec<Key> = (0..max_readers).map(|n| reader_key(&key, n)).collect();
        let reader = Engine::gated(
            store.clone(),
            key.clone(),
            slots.clone(),
            opts.clone(),
            Kind::Read,
            Some(Gate::Reader {
                writer: key.clone(),
            }),
        );
        let writer = Engine::gated(
            store,
            key.clone(),
            vec![key.clone()],
            opts,
            Kind::Write,
            Some(Gate::Writer {
                readers: format!("{key}{READ_SEGMENT}"),
                slots: slots.into(),
            }),
        );
        Ok(RwLock {
            reader: Arc::new(reader),
            writer: Arc::new(writer),
        })
    }

    /// The lock's key (the writer's lease).
    pub fn key(&self) -> &Key {
        self.writer.name()
    }

    /// How many readers it admits at once.
    pub fn max_readers(&self) -> u32 {
        self.reader.slots().len() as u32
    }

    /// The key of reader slot `slot` (`KEY/:read:N`), also beyond the
    /// maximum.
    pub fn reader_key(&self, slot: u32) -> Key {
        reader_key(self.key(), slot)
    }

    /// The lease TTL of both sides.
    pub fn ttl(&self) -> Duration {
        self.writer.ttl()
    }

    /// What the store holds for the key and its reader slots now: an
    /// `inspect` of the key and a `list` of the slots. The holders are as
    /// the store reports them (where takeover needs an observation, a dead
    /// holder shows until someone takes it over).
    ///
    /// # Errors
    /// Backend failures.
    pub async fn inspect(&self) -> Result<RwLockInfo> {
        let writer = self.writer.store().backend().inspect(self.key()).await?;
        let readers = self.readers().await?;
        Ok(RwLockInfo { writer, readers })
    }

    /// Every reader slot the store has a record of, held or not, in slot
    /// order, including slots at or above the maximum (left by readers
    /// with a larger one). One `list` request.
    ///
    /// # Errors
    /// Backend failures.
    pub async fn readers(&self) -> Result<Vec<SlotInfo>> {
        let store = self.writer.store();
        let prefix = format!("{}{READ_SEGMENT}", self.key());
        Ok(numbered_slots(&prefix, store.list(&prefix).await?))
    }

    /// Takes a read hold (shared with other readers) if it is free now, with
    /// one attempt, without waiting.
    ///
    /// # Errors
    /// [`Error::Held`](crate::Error::Held) when a writer holds or waits (with
    /// the writer's description), or every reader slot is held;
    /// [`Error::Quarantined`](crate::Error::Quarantined) while the store's data
    /// is new; backend failures.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped while a request is in
    /// flight and the backend grants the lease anyway, it is released
    /// in the background at once.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let x = store.rw_lock("config")?;
    /// let held = x.try_read().await?;
    /// // A writer, even in this process, finds it taken.
    /// let again = x.try_write().await;
    /// assert!(matches!(again, Err(leasehold::Error::Held { .. })));
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_read(&self) -> Result<ReadGuard> {
        self.read_waits().once().await
    }

    /// Takes a read hold (shared with other readers), waiting as long as it
    /// takes (see [`read_timeout`](Self::read_timeout) for how waiting works).
    ///
    /// # Errors
    /// Non-retryable backend failures (retryable ones are retried).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future never leaves a lease behind (a
    /// lease granted to a request in flight is released in the
    /// background), and gives up this task's place in the local queue.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let held = store.rw_lock("config")?.read().await?;
    /// println!("fencing token {}", held.fencing_token());
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read(&self) -> Result<ReadGuard> {
        self.read_waits().forever().await
    }

    /// Takes a read hold (shared with other readers), waiting up to `timeout`
    /// for it to come free.
    ///
    /// Waiting works as it does for a lock (see
    /// [`Lock::acquire_timeout`](crate::Lock::acquire_timeout)): the
    /// backend is polled after a random pause between the poll bounds, a
    /// release by a guard of this same process wakes the first local
    /// waiter at once, and tasks of one process queue in FIFO order. A
    /// zero timeout is one attempt, as [`try_read`](Self::try_read) makes,
    /// that ends in [`Error::TimedOut`](crate::Error::TimedOut) if it
    /// gets nothing.
    ///
    /// # Errors
    /// [`Error::TimedOut`](crate::Error::TimedOut) when the wait runs
    /// out; non-retryable backend failures (retryable ones are retried
    /// while the wait lasts).
    ///
    /// # Cancel safety
    /// As [`read`](Self::read).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let x = store.rw_lock("config")?;
    /// let held = x.read_timeout(Duration::from_secs(60)).await?;
    /// let waited = x.write_timeout(Duration::from_millis(50)).await;
    /// assert!(matches!(waited, Err(leasehold::Error::TimedOut { .. })));
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read_timeout(&self, timeout: Duration) -> Result<ReadGuard> {
        self.read_waits().timeout(timeout).await
    }

    /// Takes a read hold (shared with other readers), waiting as `wait` says
    /// ([`Wait::Forever`](crate::Wait::Forever), as [`read`](Self::read), or
    /// [`Wait::Timeout`](crate::Wait::Timeout), as
    /// [`read_timeout`](Self::read_timeout)), and calls `on_wait` with the
    /// reason every time an attempt gets nothing: it is held
    /// ([`WaitReason::Held`](crate::WaitReason::Held), with the holders the
    /// backend described), or the store's data is new and in quarantine (see
    /// [`Error::Quarantined`](crate::Error::Quarantined)). For status lines.
    ///
    /// # Errors
    /// As [`read_timeout`](Self::read_timeout).
    ///
    /// # Cancel safety
    /// As [`read`](Self::read).
    ///
    /// # Examples
    /// ```
    /// use leasehold::{Wait, WaitReason};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let held = store.rw_lock("config")?
    ///     .read_reporting(Wait::Forever, |reason| {
    ///         if let WaitReason::Held([holder, ..]) = reason {
    ///             eprintln!("waiting for {}", holder.owner.host);
    ///         }
    ///     })
    ///     .await?;
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read_reporting(
        &self,
        wait: impl Into<crate::Wait>,
        on_wait: impl FnMut(crate::WaitReason<'_>),
    ) -> Result<ReadGuard> {
        self.read_waits().reporting(wait.into(), on_wait).await
    }

    /// Takes the write hold (exclusive: no readers, no other writer) if it is
    /// free now, with one attempt, without waiting.
    ///
    /// # Errors
    /// [`Error::Held`](crate::Error::Held) when another writer holds the key
    /// (with its description) or readers hold (with theirs);
    /// [`Error::Quarantined`](crate::Error::Quarantined) while the store's data
    /// is new; backend failures.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped while a request is in
    /// flight and the backend grants the lease anyway, it is released
    /// in the background at once.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let x = store.rw_lock("config")?;
    /// let held = x.try_write().await?;
    /// // A reader, even in this process, finds it taken.
    /// let again = x.try_read().await;
    /// assert!(matches!(again, Err(leasehold::Error::Held { .. })));
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_write(&self) -> Result<WriteGuard> {
        self.write_waits().once().await
    }

    /// Takes the write hold (exclusive: no readers, no other writer), waiting
    /// as long as it takes (see [`write_timeout`](Self::write_timeout) for how
    /// waiting works).
    ///
    /// # Errors
    /// Non-retryable backend failures (retryable ones are retried).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future never leaves a lease behind (a
    /// lease granted to a request in flight is released in the
    /// background), and gives up this task's place in the local queue.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let held = store.rw_lock("config")?.write().await?;
    /// println!("fencing token {}", held.fencing_token());
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write(&self) -> Result<WriteGuard> {
        self.write_waits().forever().await
    }

    /// Takes the write hold (exclusive: no readers, no other writer), waiting
    /// up to `timeout` for it to come free.
    ///
    /// Waiting works as it does for a lock (see
    /// [`Lock::acquire_timeout`](crate::Lock::acquire_timeout)): the
    /// backend is polled after a random pause between the poll bounds, a
    /// release by a guard of this same process wakes the first local
    /// waiter at once, and tasks of one process queue in FIFO order. A
    /// zero timeout is one attempt, as [`try_write`](Self::try_write) makes,
    /// that ends in [`Error::TimedOut`](crate::Error::TimedOut) if it
    /// gets nothing.
    ///
    /// # Errors
    /// [`Error::TimedOut`](crate::Error::TimedOut) when the wait runs
    /// out; non-retryable backend failures (retryable ones are retried
    /// while the wait lasts).
    ///
    /// # Cancel safety
    /// As [`write`](Self::write).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let x = store.rw_lock("config")?;
    /// let held = x.write_timeout(Duration::from_secs(60)).await?;
    /// let waited = x.read_timeout(Duration::from_millis(50)).await;
    /// assert!(matches!(waited, Err(leasehold::Error::TimedOut { .. })));
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write_timeout(&self, timeout: Duration) -> Result<WriteGuard> {
        self.write_waits().timeout(timeout).await
    }

    /// Takes the write hold (exclusive: no readers, no other writer), waiting
    /// as `wait` says ([`Wait::Forever`](crate::Wait::Forever), as
    /// [`write`](Self::write), or [`Wait::Timeout`](crate::Wait::Timeout), as
    /// [`write_timeout`](Self::write_timeout)), and calls `on_wait` with the
    /// reason every time an attempt gets nothing: it is held
    /// ([`WaitReason::Held`](crate::WaitReason::Held), with the holders the
    /// backend described), or the store's data is new and in quarantine (see
    /// [`Error::Quarantined`](crate::Error::Quarantined)). For status lines.
    ///
    /// # Errors
    /// As [`write_timeout`](Self::write_timeout).
    ///
    /// # Cancel safety
    /// As [`write`](Self::write).
    ///
    /// # Examples
    /// ```
    /// use leasehold::{Wait, WaitReason};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let held = store.rw_lock("config")?
    ///     .write_reporting(Wait::Forever, |reason| {
    ///         if let WaitReason::Held([holder, ..]) = reason {
    ///             eprintln!("waiting for {}", holder.owner.host);
    ///         }
    ///     })
    ///     .await?;
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write_reporting(
        &self,
        wait: impl Into<crate::Wait>,
        on_wait: impl FnMut(crate::WaitReason<'_>),
    ) -> Result<WriteGuard> {
        self.write_waits().reporting(wait.into(), on_wait).await
    }

    /// The writer's engine (`write`) or the readers', shared (a key of a
    /// [`MultiLock`](crate::MultiLock)).
    pub(crate) fn shared_engine(&self, write: bool) -> Arc<Engine> {
        if write {
            self.writer.clone()
        } else {
            self.reader.clone()
        }
    }

    /// The waits of readers: a grant of the reader engine is a read hold.
    fn read_waits(&self) -> Waits<'_, impl FnOnce(Granted) -> ReadGuard + '_> {
        Waits::new(&self.reader, |granted| self.grant_read(granted))
    }

    /// The waits of writers: a grant of the writer engine is the write
    /// hold.
    fn write_waits(&self) -> Waits<'_, impl FnOnce(Granted) -> WriteGuard> {
        Waits::new(&self.writer, |granted: Granted| WriteGuard {
            guard: granted.guard,
        })
    }

    fn grant_read(&self, granted: Granted) -> ReadGuard {
        tracing::debug!(key = %self.key(), slot = granted.slot, token = granted.guard.fencing_token(), "read hold acquired");
        ReadGuard {
            slot: granted.slot,
            guard: granted.guard,
        }
    }
}

/// A read hold of a [`RwLock`]: a held lease on one of its reader slots
/// (`KEY/:read:N`), shared with other readers, renewed in the background,
/// released on drop (best effort) or by [`release`](Self::release).
///
/// It derefs to the [`LeaseGuard`] on its slot, whose methods it shares
/// ([`fencing_token`](LeaseGuard::fencing_token) (the key's, see
/// [Fencing tokens](RwLock#fencing-tokens)), [`lost`](LeaseGuard::lost),
/// [`is_lost`](LeaseGuard::is_lost), ...).
#[must_use = "the read hold is released as soon as it is dropped"]
#[derive(Debug)]
pub struct ReadGuard {
    slot: u32,
    guard: LeaseGuard,
}

impl ReadGuard {
    /// The reader slot this hold is on.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The lease guard underneath.
    pub fn into_guard(self) -> LeaseGuard {
        self.guard
    }

    /// Gives the read hold back and reports how that went.
    ///
    /// # Errors
    /// As [`LeaseGuard::release`].
    ///
    /// # Cancel safety
    /// The release goes on in the background if this future is dropped.
    pub async fn release(self) -> Result<()> {
        self.guard.release().await
    }
}

impl std::ops::Deref for ReadGuard {
    type Target = LeaseGuard;

    fn deref(&self) -> &LeaseGuard {
        &self.guard
    }
}

/// The write hold of a [`RwLock`]: a held lease on its key, excluding
/// every reader and every other writer, renewed in the background,
/// released on drop (best effort) or by [`release`](Self::release).
///
/// It derefs to the [`LeaseGuard`] on the key, whose methods it shares.
/// It cannot be downgraded to a read hold in place: a reader's safety
/// rests on reading the key free after taking its slot, which a writer
/// turning reader would skip; release it, then read.
#[must_use = "the write hold is released as soon as it is dropped"]
#[derive(Debug)]
pub struct WriteGuard {
    guard: LeaseGuard,
}

impl WriteGuard {
    /// The lease guard underneath.
    pub fn into_guard(self) -> LeaseGuard {
        self.guard
    }

    /// Gives the write hold back and reports how that went.
    ///
    /// # Errors
    /// As [`LeaseGuard::release`].
    ///
    /// # Cancel safety
    /// The release goes on in the background if this future is dropped.
    pub async fn release(self) -> Result<()> {
        self.guard.release().await
    }
}

impl std::ops::Deref for WriteGuard {
    type Target = LeaseGuard;

    fn deref(&self) -> &LeaseGuard {
        &self.guard
    }
}

fn reader_key(key: &Key, slot: u32) -> Key {
    Key::new(format!("{key}{READ_SEGMENT}{slot}"))
        .expect("a key within MAX_RW_LOCK_KEY_LEN makes valid reader slot keys")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::fast_for_tests as fast;

    #[test]
    fn reader_keys_are_documented_and_valid() {
        let k = Key::new("jobs/config").unwrap();
        assert_eq!(reader_key(&k, 3).as_str(), "jobs/config/:read:3");
        let longest = Key::new("k".repeat(MAX_RW_LOCK_KEY_LEN)).unwrap();
        assert_eq!(
            reader_key(&longest, MAX_SEMAPHORE_LIMIT - 1).as_str().len(),
            MAX_KEY_LEN
        );
    }

    #[tokio::test]
    async fn bad_limits_long_keys_and_reserved_segments_are_clear_errors() {
        let s = Store::open("memory:").unwrap();
        for n in [0, MAX_SEMAPHORE_LIMIT + 1] {
            let err = s.rw_lock_with("k", n, fast()).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidInput {
                        what: "max readers",
                        ..
                    }
                ),
                "{err}"
            );
        }
        let err = s.rw_lock(&"k".repeat(MAX_RW_LOCK_KEY_LEN + 1)).unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidInput {
                    what: "rw lock key",
                    ..
                }
            ),
            "{err}"
        );
        s.rw_lock(&"k".repeat(MAX_RW_LOCK_KEY_LEN)).unwrap();
        for key in ["a/:read:0", "a/:read:x/b"] {
            assert!(matches!(
                s.lock(key).unwrap_err(),
                Error::InvalidInput { what: "key", .. }
            ));
        }
    }

    #[tokio::test]
    async fn a_local_writer_release_wakes_a_local_reader_at_once() {
        let s = Store::open("memory:").unwrap();
        // Polls far apart: only the local wake-up can be quick.
        let rw = s
            .rw_lock_with(
                "k",
                2,
                fast().poll_interval(Duration::from_secs(30), Duration::from_secs(30)),
            )
            .unwrap();
        let w = rw.try_write().await.unwrap();
        let (held_tx, held_rx) = tokio::sync::oneshot::channel();
        let reader = {
            let rw = rw.clone();
            let mut held_tx = Some(held_tx);
            tokio::spawn(async move {
                rw.read_reporting(Duration::from_secs(20), |_| {
                    if let Some(tx) = held_tx.take() {
                        let _ = tx.send(());
                    }
                })
                .await
            })
        };
        held_rx.await.unwrap();
        let started = tokio::time::Instant::now();
        let token = w.fencing_token();
        w.release().await.unwrap();
        let r = reader.await.unwrap().unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(r.fencing_token(), token);
    }
}
