//! In-process coordination of tasks that use the same key through one
//! [`Store`](crate::Store).
//!
//! Each key in use has a [`LocalKey`]: a FIFO gate that one task at a time
//! holds while it waits on the backend or holds the lease, and a notifier
//! rung when a guard of this process lets the key go. So N tasks of one
//! process waiting on one key cost the backend what one waiter costs, and a
//! local waiter takes over the moment a local guard releases, without waiting
//! for its next poll.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::key::Key;

/// In-process state of one key.
#[derive(Debug, Default)]
pub(crate) struct LocalKey {
    /// Held by the one task of this process that polls the backend for the
    /// key, and then by the guard it obtains. tokio's mutex is fair (FIFO).
    pub gate: Arc<tokio::sync::Mutex<()>>,
    /// Rung when a guard of this process has released the key (shared: a
    /// leader observer keeps a wait on it past a borrow).
    pub released: Arc<Notify>,
    /// The current run of local handoffs, and when the store last said
    /// another process held the key: for giving way (see
    /// [`give_way`](Self::give_way)).
    turns: Mutex<Turns>,
    /// When the store last answered an attempt on the key from this
    /// process (held, granted, another epoch): a task that queued behind
    /// the poller knows the store answered even if it never asked itself.
    last_answer: Mutex<Option<Instant>>,
    /// How many guards of this process hold the key (one, but a
    /// `try_acquire` may be told "held" by one that does not keep the gate).
    guards: AtomicU32,
}

#[derive(Debug, Default)]
struct Turns {
    /// Since when grants have followed local releases without a break.
    streak_since: Option<Instant>,
    last_release: Option<Instant>,
    held_elsewhere: Option<Instant>,
    /// The fencing token of this process's last grant, per slot (a lock
    /// has one, slot 0).
    last_tokens: HashMap<u32, u64>,
}

impl LocalKey {
    /// A guard of this process got the key.
    pub fn guard_started(&self) {
        self.guards.fetch_add(1, Ordering::AcqRel);
    }

    /// A guard of this process let the key go (once per guard).
    pub fn guard_ended(&self) {
        self.guards.fetch_sub(1, Ordering::AcqRel);
    }

    /// Whether a guard of this process holds the key.
    pub fn guarded_here(&self) -> bool {
        self.guards.load(Ordering::Acquire) > 0
    }

    /// A guard of this process let the key go.
    pub fn note_release(&self) {
        self.turns().last_release = Some(Instant::now());
    }

    /// A guard of this process got the key; `handoff` is how soon after a
    /// local release a grant counts as a local handoff.
    pub fn note_grant(&self, handoff: Duration) {
        let mut t = self.turns();
        let now = Instant::now();
        let handed_over = t.last_release.is_some_and(|r| now - r <= handoff);
        if !handed_over || t.streak_since.is_none() {
            t.streak_since = Some(now);
        }
    }

    /// A guard of this process got `slot` with `token`: whether it was
    /// granted to someone else since this process last had it (tokens grow
    /// by one per grant within a store epoch; a gap means another grant).
    pub fn note_token(&self, slot: u32, token: u64) -> bool {
        let mut t = self.turns();
        let last = t.last_tokens.insert(slot, token);
        last.is_some_and(|last| token > last.saturating_add(1))
    }

    /// The store said the key is held, and not by a guard of this process
    /// (whose waiters are queued behind it, not asking): another process
    /// wants it too.
    pub fn note_held_elsewhere(&self) {
        self.turns().held_elsewhere = Some(Instant::now());
    }

    /// Whether a waiter about to try the key should first leave it free for
    /// a moment: it is taking over from a local release (one within
    /// `handoff`), and either another process has held the key within
    /// `contended` (so it may be waiting too), or local handoffs have kept
    /// the key here for `probe` (so a waiter elsewhere would not have been
    /// seen: it only ever found the key held).
    ///
    /// Local waiters are woken at once, other processes' only by the
    /// store's release notice or their next poll, so without this a process
    /// with a queue of waiting tasks would keep a contended key for as long
    /// as its queue lasts. Answers true at most once per local release.
    pub fn give_way(&self, handoff: Duration, contended: Duration, probe: Duration) -> bool {
        let mut t = self.turns();
        let now = Instant::now();
        let handed_over = t.last_release.is_some_and(|r| now - r <= handoff);
        let wanted = t.held_elsewhere.is_some_and(|h| now - h <= contended);
        let long = t.streak_since.is_some_and(|s| now - s >= probe);
        if handed_over && (wanted || long) {
            t.last_release = None;
            t.streak_since = None;
            return true;
        }
        false
    }

    /// The store answered an attempt on the key.
    pub fn note_answer(&self) {
        *self.last_answer.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    /// Whether the store answered an attempt on the key from this process
    /// at `since` or later.
    pub fn answered_since(&self, since: Instant) -> bool {
        self.last_answer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|t| t >= since)
    }

    fn turns(&self) -> std::sync::MutexGuard<'_, Turns> {
        self.turns.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The registry of [`LocalKey`]s of one store. Entries live as long as some
/// waiter or guard uses them; dead ones are pruned as the map grows.
#[derive(Debug, Default)]
pub(crate) struct LocalKeys {
    map: Mutex<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    keys: HashMap<Key, Weak<LocalKey>>,
    prune_at: usize,
}

impl LocalKeys {
    pub fn get(&self, key: &Key) -> Arc<LocalKey> {
        let mut reg = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(live) = reg.keys.get(key).and_then(Weak::upgrade) {
            return live;
        }
        let fresh = Arc::new(LocalKey::default());
        reg.keys.insert(key.clone(), Arc::downgrade(&fresh));
        if reg.keys.len() >= reg.prune_at {
            reg.keys.retain(|_, w| w.strong_count() > 0);
            reg.prune_at = (reg.keys.len() * 2).max(64);
        }
        fresh
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.lock().unwrap().keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_key_shares_state_while_in_use() {
        let reg = LocalKeys::default();
        let k = Key::new("a").unwrap();
        let one = reg.get(&k);
        let two = reg.get(&k);
        assert!(Arc::ptr_eq(&one, &two));
    }

    #[test]
    fn unused_entries_are_pruned() {
        let reg = LocalKeys::default();
        for i in 0..1000 {
            drop(reg.get(&Key::new(format!("k{i}")).unwrap()));
        }
        assert!(reg.len() <= 64, "{} entries left", reg.len());
    }
}
