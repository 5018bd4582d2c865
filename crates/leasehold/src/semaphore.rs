//! [`Semaphore`]: at most N holders of one key at a time, across processes.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::backend::KeyInfo;
use crate::engine::{Engine, Granted};
use crate::error::{Error, Result};
use crate::guard::LeaseGuard;
use crate::key::{Key, MAX_KEY_LEN};
use crate::metric::Kind;
use crate::multi::{release_all, MultiGuard};
use crate::options::ResolvedOptions;
use crate::options::Wait;
use crate::store::Store;
use crate::waits::Waits;

/// The largest semaphore limit.
pub const MAX_SEMAPHORE_LIMIT: u32 = 1000;

/// What goes between a semaphore key and a slot number.
const SLOT_SEGMENT: &str = "/:slot:";

/// The longest semaphore key, so that every slot key
/// (`KEY/:slot:999` at most) obeys the key rule.
pub const MAX_SEMAPHORE_KEY_LEN: usize = MAX_KEY_LEN - SLOT_SEGMENT.len() - 3;

/// A counting semaphore: at most `limit` holders of one key at a time
/// across every process that uses the same store. Made by
/// [`Store::semaphore`] or [`Store::semaphore_with`]; see the
/// notes below for how it works.
///
/// Cheap to clone; clones share in-process wake-ups. Permits are owned
/// ([`SemaphorePermit`] borrows nothing), so they can move into tasks.
///
/// ```
/// # async fn demo() -> leasehold::Result<()> {
/// use std::time::Duration;
/// let store = leasehold::Store::open("memory:")?;
/// let sem = store.semaphore("render-farm", 3)?;
/// let permit = sem.acquire_timeout(Duration::from_secs(60)).await?;
/// println!("slot {} token {}", permit.slot(), permit.fencing_token());
/// permit.release().await?;
/// # Ok(()) }
/// ```
///
/// # How it works
/// A semaphore on `KEY` with limit N is N ordinary leases on N *slot keys*,
/// `KEY/:slot:0` … `KEY/:slot:{N-1}`. A permit is a [`LeaseGuard`] on one
/// slot, taken by the same acquisition engine as a [`Lock`](crate::Lock)'s, so it renews in
/// the background, says when it is lost, is cancel safe, and ends at its TTL
/// if its holder dies. Nothing else is stored: no counter, no list of
/// waiters, so it works on every backend unchanged.
///
/// The slot segment `:slot:` is a key segment starting with `:`, which
/// ordinary keys almost never have; keep such keys out of your own naming and
/// a semaphore's slots cannot collide with your locks. Slot keys are ordinary
/// keys otherwise: `store.list("KEY/")` shows a semaphore's holders,
/// `store.break_lease("KEY/:slot:2")` ends one permit. Because a slot key
/// must obey the [key rule](crate::Key), a semaphore key is at most
/// [`MAX_SEMAPHORE_KEY_LEN`] characters and the limit at most
/// [`MAX_SEMAPHORE_LIMIT`].
///
/// # Fencing tokens
/// Tokens are **per slot**: each slot key has its own counter, and a
/// permit's token is strictly greater than every token issued before for
/// the same slot. Two permits on different slots may carry the same token,
/// so a resource that fences on permits must compare the pair
/// ([`slot`](SemaphorePermit::slot), [`fencing_token`](LeaseGuard::fencing_token)).
///
/// # Waiting
/// Each attempt tries every slot once, in a fresh random order, and stops at
/// the first that is granted; between attempts a waiter pauses for a random
/// time within the poll bounds. So waiters spread over the slots, and when a
/// permit is released the next poll of *one* waiter takes it: the others'
/// attempts find it held again and go back to sleep. In one process (one
/// [`Store`]) the waiters of a semaphore queue in FIFO order and only the
/// first polls the backend; a permit released in that process wakes it at
/// once. Slots held by a guard of the same process are not asked for.
///
/// # Changing the limit
/// The limit is not stored; each [`Semaphore`] value uses its own. Raising
/// it takes effect at once for holders that use the new value (they also
/// try the new slots). Lowering it does not revoke permits already held on
/// slots at or above the new limit: they stay valid until released or
/// expired, while holders with the new limit never take those slots, so the
/// number of holders falls to the new limit as they go. Processes that
/// disagree on the limit admit up to the largest of their limits.
#[derive(Debug, Clone)]
pub struct Semaphore {
    engine: Arc<Engine>,
}

/// A permit of a [`Semaphore`]: a held lease on one of its slots, renewed
/// in the background, released on drop (best effort) or by
/// [`release`](Self::release).
///
/// It derefs to the [`LeaseGuard`] on its slot, whose methods it shares
/// ([`fencing_token`](LeaseGuard::fencing_token),
/// [`lost`](LeaseGuard::lost), [`is_lost`](LeaseGuard::is_lost),
/// [`valid_for`](LeaseGuard::valid_for), ...). Its [`key`](LeaseGuard::key)
/// is the slot's key (`KEY/:slot:N`), and its fencing token is per slot:
/// strictly greater than every token issued before for this *slot* (compare
/// `(slot, token)` pairs).
#[must_use = "the permit is released as soon as it is dropped"]
#[derive(Debug)]
pub struct SemaphorePermit {
    semaphore: Key,
    slot: u32,
    guard: LeaseGuard,
}

/// What the store holds for one slot of a semaphore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SlotInfo {
    /// The slot number.
    pub slot: u32,
    /// What the store holds for the slot key, holder included.
    #[serde(flatten)]
    pub info: KeyInfo,
}

impl Semaphore {
    pub(crate) fn new(store: Store, key: Key, limit: u32, opts: ResolvedOptions) -> Result<Self> {
        if limit == 0 || limit > MAX_SEMAPHORE_LIMIT {
            return Err(Error::invalid(
                "semaphore limit",
                format!("{limit} is not in 1..={MAX_SEMAPHORE_LIMIT}"),
            ));
        }
        if key.as_str().len() > MAX_SEMAPHORE_KEY_LEN {
            return Err(Error::invalid(
                "semaphore key",
                format!(
                    "the key is {} characters long; a semaphore key may have at most {MAX_SEMAPHORE_KEY_LEN}, leaving room for the slot keys (KEY{SLOT_SEGMENT}N) under the {MAX_KEY_LEN}-character key limit",
                    key.as_str().len()
                ),
            ));
        }
        let slots = (0..limit).map(|slot| slot_key(&key, slot)).collect();
        Ok(Semaphore {
            engine: Arc::new(Engine::new(store, key, slots, opts, Kind::Semaphore)),
        })
    }

    /// The semaphore's key.
    pub fn key(&self) -> &Key {
        self.engine.name()
    }

    /// How many holders it admits at once.
    pub fn limit(&self) -> u32 {
        self.engine.slots().len() as u32
    }

    /// The key of slot `slot` (`KEY/:slot:N`), also for slots beyond the
    /// limit.
    pub fn slot_key(&self, slot: u32) -> Key {
        slot_key(self.key(), slot)
    }

    /// The lease TTL of permits.
    pub fn ttl(&self) -> Duration {
        self.engine.ttl()
    }

    /// Every slot of this semaphore the store has a record of, held or not,
    /// in slot order, including slots at or above the limit (left by holders
    /// with a larger limit). One `list` request.
    ///
    /// # Errors
    /// Backend failures.
    pub async fn inspect(&self) -> Result<Vec<SlotInfo>> {
        let prefix = format!("{}{SLOT_SEGMENT}", self.key());
        let listed = self.engine.store().list(&prefix).await?;
        Ok(numbered_slots(&prefix, listed))
    }

    /// Takes a permit if it is free now, with one attempt, without waiting.
    ///
    /// # Errors
    /// [`Error::Held`](crate::Error::Held) when every slot is held (with the
    /// semaphore's key and one of the holders, if the backend described one;
    /// slots held in this process are not asked for);
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
    /// let x = store.semaphore("uploads", 1)?;
    /// let held = x.try_acquire().await?;
    /// // Another attempt, even from this process, finds it taken.
    /// let again = x.try_acquire().await;
    /// assert!(matches!(again, Err(leasehold::Error::Held { .. })));
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self) -> Result<SemaphorePermit> {
        self.waits().once().await
    }

    /// Takes a permit, waiting as long as it takes (see
    /// [`acquire_timeout`](Self::acquire_timeout) for how waiting works).
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
    /// let held = store.semaphore("uploads", 1)?.acquire().await?;
    /// println!("fencing token {}", held.fencing_token());
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self) -> Result<SemaphorePermit> {
        self.waits().forever().await
    }

    /// Takes a permit, waiting up to `timeout` for it to come free.
    ///
    /// Waiting works as it does for a lock (see
    /// [`Lock::acquire_timeout`](crate::Lock::acquire_timeout)): the backend is
    /// polled after a random pause between the poll bounds, a release by a
    /// guard of this same process wakes the first local waiter at once, and
    /// tasks of one process queue in FIFO order. A zero timeout is one attempt,
    /// as [`try_acquire`](Self::try_acquire) makes, that ends in
    /// [`Error::TimedOut`](crate::Error::TimedOut) if it gets nothing.
    ///
    /// # Errors
    /// [`Error::TimedOut`](crate::Error::TimedOut) when the wait runs
    /// out; non-retryable backend failures (retryable ones are retried
    /// while the wait lasts).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let x = store.semaphore("uploads", 1)?;
    /// let held = x.acquire_timeout(Duration::from_secs(60)).await?;
    /// let waited = x.acquire_timeout(Duration::from_millis(50)).await;
    /// assert!(matches!(waited, Err(leasehold::Error::TimedOut { .. })));
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<SemaphorePermit> {
        self.waits().timeout(timeout).await
    }

    /// Takes a permit, waiting as `wait` says
    /// ([`Wait::Forever`](crate::Wait::Forever), as [`acquire`](Self::acquire),
    /// or [`Wait::Timeout`](crate::Wait::Timeout), as
    /// [`acquire_timeout`](Self::acquire_timeout)), and calls `on_wait` with
    /// the reason every time an attempt gets nothing: it is held
    /// ([`WaitReason::Held`](crate::WaitReason::Held), with the holders the
    /// backend described), or the store's data is new and in quarantine (see
    /// [`Error::Quarantined`](crate::Error::Quarantined)). For status lines.
    ///
    /// # Errors
    /// As [`acquire_timeout`](Self::acquire_timeout).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Examples
    /// ```
    /// use leasehold::{Wait, WaitReason};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let held = store.semaphore("uploads", 1)?
    ///     .acquire_reporting(Wait::Forever, |reason| {
    ///         if let WaitReason::Held([holder, ..]) = reason {
    ///             eprintln!("waiting for {}", holder.owner.host);
    ///         }
    ///     })
    ///     .await?;
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_reporting(
        &self,
        wait: impl Into<crate::Wait>,
        on_wait: impl FnMut(crate::WaitReason<'_>),
    ) -> Result<SemaphorePermit> {
        self.waits().reporting(wait.into(), on_wait).await
    }

    /// Takes `permits` permits at once if they are free now, all or none:
    /// one attempt at each slot until it has them, the ones it took given
    /// back if it cannot have them all (see
    /// [`acquire_many_timeout`](Self::acquire_many_timeout)).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] (what: `"permits"`) unless `permits` is in
    /// 1..=the limit; [`Error::Held`](crate::Error::Held) (with the
    /// semaphore's key) when fewer are free; as
    /// [`try_acquire`](Self::try_acquire) otherwise.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future releases what it took, in the
    /// background.
    pub async fn try_acquire_many(&self, permits: u32) -> Result<MultiGuard> {
        self.take_many(permits, None).await
    }

    /// Takes `permits` permits at once, all or none, waiting as long as it
    /// takes (see [`acquire_many_timeout`](Self::acquire_many_timeout)).
    ///
    /// # Errors
    /// As [`acquire_many_timeout`](Self::acquire_many_timeout), without the
    /// timeout.
    ///
    /// # Cancel safety
    /// As [`try_acquire_many`](Self::try_acquire_many).
    pub async fn acquire_many(&self, permits: u32) -> Result<MultiGuard> {
        self.take_many(permits, Some(Wait::Forever)).await
    }

    /// Takes `permits` permits at once (a job that needs 3 of 10 slots),
    /// all or none, waiting up to `timeout`: a [`MultiGuard`] over their
    /// slot keys, each with its own fencing token (per slot), lost when
    /// any is.
    ///
    /// Deadlock-free by never waiting while holding: it waits for one
    /// permit as [`acquire_timeout`](Self::acquire_timeout) does, then
    /// makes one attempt at each other free slot; if it cannot have them
    /// all at once, it gives back what it took at once and tries again
    /// after a pause that starts between the poll bounds and doubles with
    /// each such round, up to the poll cap (what it costs: up to the
    /// limit's number of requests a round). The permits' keys are in byte
    /// order of the slot keys. So two takers of
    /// several permits never hold part each while waiting for the rest;
    /// the price is that a taker of many permits can be kept waiting by a
    /// steady flow of takers of one (it needs that many free at the same
    /// moment).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] (what: `"permits"`) unless `permits` is in
    /// 1..=the limit; [`Error::TimedOut`](crate::Error::TimedOut) when the
    /// wait runs out (nothing held); non-retryable backend failures.
    ///
    /// # Cancel safety
    /// As [`try_acquire_many`](Self::try_acquire_many).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let store = leasehold::Store::open("memory:")?;
    /// let gpus = store.semaphore("gpu-slots", 10)?;
    /// let three = gpus.acquire_many_timeout(3, Duration::from_secs(60)).await?;
    /// for (slot_key, permit) in three.iter() {
    ///     println!("{slot_key}: token {}", permit.fencing_token());
    /// }
    /// three.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_many_timeout(
        &self,
        permits: u32,
        timeout: Duration,
    ) -> Result<MultiGuard> {
        self.take_many(permits, Some(Wait::Timeout(timeout))).await
    }

    /// `permits` permits, all or none: one round of attempts (`wait`
    /// `None`) or waiting as `wait` says.
    async fn take_many(&self, permits: u32, wait: Option<Wait>) -> Result<MultiGuard> {
        if permits == 0 || permits > self.limit() {
            return Err(Error::invalid(
                "permits",
                format!(
                    "{permits} permits of a semaphore of limit {}: ask for 1 to {}",
                    self.limit(),
                    self.limit()
                ),
            ));
        }
        let started = tokio::time::Instant::now();
        let deadline = wait.and_then(|w| w.deadline(started));
        let timed_out = || Error::TimedOut {
            key: self.key().to_string(),
            waited: started.elapsed(),
        };
        // Rounds that found too few free: the pause after each doubles, up
        // to the poll cap, as a wait for one permit backs off.
        let mut short_rounds = 0u32;
        loop {
            // The first permit: waited for as one permit is.
            let first = match (wait, deadline) {
                (None, _) => self.engine.try_acquire().await,
                (Some(_), None) => self.engine.acquire(Wait::Forever, &mut |_| {}).await,
                (Some(_), Some(end)) => {
                    let left = end.saturating_duration_since(tokio::time::Instant::now());
                    self.engine.acquire(Wait::Timeout(left), &mut |_| {}).await
                }
            };
            let first = match first {
                Ok(granted) => granted.guard,
                Err(Error::TimedOut { .. }) => return Err(timed_out()),
                Err(e) => return Err(e),
            };
            // The rest: one attempt each (slots we hold are skipped); the
            // first slot found held ends the round.
            let mut held = vec![first];
            let mut short_by = None;
            while held.len() < permits as usize {
                match self.engine.try_acquire().await {
                    Ok(granted) => held.push(granted.guard),
                    Err(e) if matches!(e, Error::Held { .. }) || e.is_retryable() => {
                        short_by = Some(e);
                        break;
                    }
                    Err(e) => {
                        release_all(held).await;
                        return Err(e);
                    }
                }
            }
            if held.len() == permits as usize {
                // In byte order of the slot keys, as a MultiGuard's keys are.
                held.sort_by(|a, b| a.key().cmp(b.key()));
                let keys = held.iter().map(|g| g.key().clone()).collect();
                return Ok(MultiGuard::new(keys, held));
            }
            let had = held.len();
            release_all(held).await;
            if wait.is_none() {
                // One attempt: a store failure is said as itself.
                return Err(match short_by {
                    Some(e @ Error::Held { .. }) | Some(e @ Error::Quarantined { .. }) => {
                        let _ = e;
                        Error::Held {
                            key: self.key().to_string(),
                            holder: None,
                            readers: 0,
                        }
                    }
                    Some(e) => e,
                    None => Error::Held {
                        key: self.key().to_string(),
                        holder: None,
                        readers: 0,
                    },
                });
            }
            let cap = self.engine.poll_cap();
            let pause = self
                .engine
                .poll_pause()
                .saturating_mul(1 << short_rounds.min(8))
                .min(cap);
            short_rounds += 1;
            let pause = match deadline {
                Some(end) => {
                    let left = end.saturating_duration_since(tokio::time::Instant::now());
                    if left.is_zero() {
                        return Err(timed_out());
                    }
                    pause.min(left)
                }
                None => pause,
            };
            tracing::debug!(key = %self.key(), permits, had, ?pause, "not enough permits free at once; trying again");
            tokio::time::sleep(pause).await;
        }
    }

    /// This semaphore's waits: a grant is a permit.
    fn waits(&self) -> Waits<'_, impl FnOnce(Granted) -> SemaphorePermit + '_> {
        Waits::new(&self.engine, |granted| self.grant(granted))
    }

    fn grant(&self, granted: Granted) -> SemaphorePermit {
        tracing::debug!(key = %self.key(), slot = granted.slot, token = granted.guard.fencing_token(), "permit acquired");
        SemaphorePermit {
            semaphore: self.key().clone(),
            slot: granted.slot,
            guard: granted.guard,
        }
    }
}

fn slot_key(key: &Key, slot: u32) -> Key {
    Key::new(format!("{key}{SLOT_SEGMENT}{slot}"))
        .expect("a semaphore key within MAX_SEMAPHORE_KEY_LEN makes valid slot keys")
}

impl std::ops::Deref for SemaphorePermit {
    type Target = LeaseGuard;

    fn deref(&self) -> &LeaseGuard {
        &self.guard
    }
}

impl SemaphorePermit {
    /// The semaphore's key.
    pub fn semaphore_key(&self) -> &Key {
        &self.semaphore
    }

    /// The slot this permit holds, in `0..limit`.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The lease guard underneath, which keeps the slot when the permit is
    /// gone.
    pub fn into_guard(self) -> LeaseGuard {
        self.guard
    }

    /// Gives the permit back and reports how that went.
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

/// Of the keys listed under `prefix`, the numbered slots (`PREFIX{N}`: a
/// semaphore's `KEY/:slot:N`, a reader-writer lock's `KEY/:read:N`), in
/// slot order. Only canonical numbers: "007" is no slot of ours.
pub(crate) fn numbered_slots(prefix: &str, listed: Vec<KeyInfo>) -> Vec<SlotInfo> {
    let mut slots: Vec<SlotInfo> = listed
        .into_iter()
        .filter_map(|info| {
            let n = info.key.as_str().strip_prefix(prefix)?;
            let slot: u32 = n.parse().ok()?;
            (slot.to_string() == n).then_some(SlotInfo { slot, info })
        })
        .collect();
    slots.sort_by_key(|s| s.slot);
    slots
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::fast_for_tests as fast;

    fn store() -> Store {
        Store::open("memory:").unwrap()
    }

    #[test]
    fn slot_keys_are_documented_and_valid() {
        let k = Key::new("jobs/render").unwrap();
        assert_eq!(slot_key(&k, 0).as_str(), "jobs/render/:slot:0");
        let longest = Key::new("k".repeat(MAX_SEMAPHORE_KEY_LEN)).unwrap();
        assert_eq!(
            slot_key(&longest, MAX_SEMAPHORE_LIMIT - 1).as_str().len(),
            MAX_KEY_LEN
        );
    }

    #[tokio::test]
    async fn bad_limits_and_long_keys_are_clear_errors() {
        let s = store();
        for limit in [0, MAX_SEMAPHORE_LIMIT + 1] {
            let err = s.semaphore("sem", limit).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidInput {
                        what: "semaphore limit",
                        ..
                    }
                ),
                "{err}"
            );
        }
        let err = s
            .semaphore(&"k".repeat(MAX_SEMAPHORE_KEY_LEN + 1), 2)
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidInput {
                    what: "semaphore key",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("at most 246"), "{err}");
        s.semaphore(&"k".repeat(MAX_SEMAPHORE_KEY_LEN), MAX_SEMAPHORE_LIMIT)
            .unwrap();
        assert!(matches!(
            s.semaphore("bad key", 2).unwrap_err(),
            Error::InvalidInput { what: "key", .. }
        ));
    }

    #[tokio::test]
    async fn limit_permits_then_held_then_free_again() {
        let s = store();
        let sem = s.semaphore_with("sem", 3, fast()).unwrap();
        let mut permits = Vec::new();
        for _ in 0..3 {
            permits.push(sem.try_acquire().await.unwrap());
        }
        let mut slots: Vec<_> = permits.iter().map(|p| p.slot()).collect();
        slots.sort();
        assert_eq!(slots, [0, 1, 2]);
        let err = sem.try_acquire().await.unwrap_err();
        assert!(
            matches!(&err, Error::Held { key, .. } if key == "sem"),
            "{err}"
        );
        // Another process is told who holds a slot.
        let other = Store::from_backend(s.backend().clone())
            .semaphore_with("sem", 3, fast())
            .unwrap();
        let err = other.try_acquire().await.unwrap_err();
        assert!(
            matches!(&err, Error::Held { key, holder: Some(_), .. } if key == "sem"),
            "{err}"
        );
        let freed = permits.pop().unwrap();
        let slot = freed.slot();
        freed.release().await.unwrap();
        let again = sem.try_acquire().await.unwrap();
        assert_eq!(again.slot(), slot);
        let listed = sem.inspect().await.unwrap();
        assert_eq!(listed.iter().map(|s| s.slot).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(listed.iter().all(|s| s.info.holder.is_some()));
    }

    #[tokio::test]
    async fn lowering_the_limit_keeps_held_permits_until_released() {
        let s = store();
        let wide = s.semaphore_with("sem", 3, fast()).unwrap();
        let narrow = Store::from_backend(s.backend().clone())
            .semaphore_with("sem", 2, fast())
            .unwrap();
        let mut wide_permits = Vec::new();
        for _ in 0..3 {
            wide_permits.push(wide.try_acquire().await.unwrap());
        }
        // Free slots 0 and 1; slot 2 stays held by the wider holder.
        wide_permits.sort_by_key(|p| p.slot());
        let on_two = wide_permits.pop().unwrap();
        assert_eq!(on_two.slot(), 2);
        for p in wide_permits {
            p.release().await.unwrap();
        }
        let a = narrow.try_acquire().await.unwrap();
        let b = narrow.try_acquire().await.unwrap();
        assert!(a.slot() < 2 && b.slot() < 2);
        assert!(narrow.try_acquire().await.is_err());
        // Three holders for now: the old permit on slot 2 is not revoked.
        let held: Vec<_> = narrow
            .inspect()
            .await
            .unwrap()
            .into_iter()
            .filter(|s| s.info.holder.is_some())
            .map(|s| s.slot)
            .collect();
        assert_eq!(held, [0, 1, 2]);
        assert!(!on_two.is_lost());
        on_two.release().await.unwrap();
        // Slot 2 is never taken by the narrower semaphore.
        a.release().await.unwrap();
        let again = narrow.try_acquire().await.unwrap();
        assert!(again.slot() < 2);
    }

    #[tokio::test]
    async fn local_release_wakes_a_local_waiter_at_once() {
        let s = store();
        // Polls far apart: only the local wake-up can be quick.
        let sem = s
            .semaphore_with(
                "sem",
                1,
                fast().poll_interval(Duration::from_secs(30), Duration::from_secs(30)),
            )
            .unwrap();
        let held = sem.try_acquire().await.unwrap();
        let (full_tx, full_rx) = tokio::sync::oneshot::channel();
        let waiter = {
            let sem = sem.clone();
            let mut full_tx = Some(full_tx);
            tokio::spawn(async move {
                sem.acquire_reporting(Duration::from_secs(20), |reason| {
                    // The only slot is held here, so not even asked for.
                    assert!(matches!(reason, crate::WaitReason::Held([])));
                    if let Some(tx) = full_tx.take() {
                        let _ = tx.send(());
                    }
                })
                .await
            })
        };
        // The waiter's first pass found the semaphore full.
        full_rx.await.unwrap();
        let started = tokio::time::Instant::now();
        held.release().await.unwrap();
        let permit = waiter.await.unwrap().unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(permit.slot(), 0);
    }
}
