//! Multi-key holders: library workers that take several keys at once
//! through [`MultiLock`], in an order of their own (the library must sort
//! them), and two multi-key acquisitions with a bug injected on purpose.
//!
//! A multi-key worker records, besides its sections (one per key, each
//! with that key's token, written only while the guard says every key is
//! held), when each attempt starts ([`Kind::Wait`], one record per key, its
//! wait's length as the detail) and when it ends without the keys
//! ([`Kind::GaveUp`]). With the coordinator's snapshots of who holds each
//! key ([`Kind::Held`]), the checker finds deadlocks (waiters that hold
//! keys each other wait for) and orphan holds (a lease kept alive after
//! the attempt that took it ended): see [`crate::liveness`].
//!
//! The bugs (`run --inject-bug`), each a hand-made acquisition in place of
//! the library's, the way a user who rolls their own gets it wrong:
//! * `multi-caller-order`: the keys one by one in the caller's order, each
//!   held while the next is waited for. Two workers given the keys in other
//!   orders deadlock (until one's wait runs out).
//! * `multi-keeps-first`: the first key in byte order waited for, the
//!   later ones only tried; when one is busy, the keys after the first are
//!   released and the first is kept (its guard leaked, renewing for ever). Its worker's next
//!   attempt then waits for a key it holds itself, and so does everyone
//!   else who wants it.

use std::time::Duration;

use leasehold::{Error, LeaseGuard, LockOptions, MultiGuard, MultiLock, Store};
use rand::Rng;

use crate::witness::{now_ns, Kind, Witness};
use crate::worker::TICK;

/// The multi-key bugs `--inject-bug` knows.
pub const BUGS: &[&str] = &["multi-caller-order", "multi-keeps-first"];

/// A key of a multi-key worker, and how it is held: a plain lock, or
/// either side of its reader-writer lock (on keys that readers share).
#[derive(Debug, Clone)]
pub struct Part {
    pub key: String,
    pub side: Side,
}

/// How a multi-key worker holds one of its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Lock,
    Read,
    Write,
}

impl Part {
    /// `KEY` (a plain lock), `KEY=read` or `KEY=write`.
    pub fn parse(s: &str) -> anyhow::Result<Part> {
        let (key, side) = match s.split_once('=') {
            None => (s, Side::Lock),
            Some((key, "read")) => (key, Side::Read),
            Some((key, "write")) => (key, Side::Write),
            Some(_) => anyhow::bail!("{s:?}: a key, KEY=read or KEY=write"),
        };
        Ok(Part {
            key: key.into(),
            side,
        })
    }
}

pub struct MultiArgs {
    pub store: Store,
    /// In the caller's order.
    pub parts: Vec<Part>,
    pub witness: Witness,
    pub id: String,
    pub ttl: Duration,
    pub until_ns: u64,
    pub bug: Option<String>,
}

/// What an attempt got: the library's guard, or a hand-made one's guards.
enum Held {
    All(MultiGuard),
    Each(Vec<(String, LeaseGuard)>),
}

impl Held {
    fn token(&self, key: &str) -> u64 {
        match self {
            Held::All(g) => g.fencing_token(key).unwrap_or(0),
            Held::Each(gs) => gs
                .iter()
                .find(|(k, _)| k == key)
                .map_or(0, |(_, g)| g.fencing_token()),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::All(g) => g.is_lost(),
            Held::Each(gs) => gs.iter().any(|(_, g)| g.is_lost()),
        }
    }

    async fn release(self) -> leasehold::Result<()> {
        match self {
            Held::All(g) => g.release().await,
            Held::Each(gs) => {
                let mut first = Ok(());
                for (_, g) in gs {
                    let r = g.release().await;
                    if first.is_ok() {
                        first = r;
                    }
                }
                first
            }
        }
    }
}

/// Takes every key, works under all of them, releases, until `until_ns`.
/// Each attempt waits a random while (a quarter of a TTL to three TTLs),
/// so that waits run out now and then and the release of what was taken
/// is exercised too.
pub async fn multi_worker(a: MultiArgs) -> anyhow::Result<()> {
    let options = LockOptions::new().ttl(a.ttl).owner_label(a.id.clone());
    let mut builder = MultiLock::builder(&a.store, options.clone());
    for p in &a.parts {
        builder = match p.side {
            Side::Lock => builder.lock(&p.key),
            Side::Read => builder.read(&p.key),
            Side::Write => builder.write(&p.key),
        };
    }
    let multi = builder.build()?;
    let keys: Vec<&str> = a.parts.iter().map(|p| p.key.as_str()).collect();
    // A read's records are marked shared, as a single-key reader's.
    let witnesses: Vec<Witness> = a
        .parts
        .iter()
        .map(|p| a.witness.clone().shared(p.side == Side::Read))
        .collect();
    while now_ns() < a.until_ns {
        let left = Duration::from_nanos(a.until_ns.saturating_sub(now_ns()));
        let wait_ms = rand::rng().random_range(a.ttl.as_millis() / 4..=a.ttl.as_millis() * 3);
        let wait = Duration::from_millis(wait_ms as u64).min(left);
        for key in &keys {
            a.witness
                .mark(Kind::Wait, key, 0, &a.id, &wait.as_millis().to_string())?;
        }
        let got = match a.bug.as_deref() {
            None => multi.acquire_timeout(wait).await.map(Held::All),
            Some(bug) => by_hand(&a, bug, &options, wait).await.map(Held::Each),
        };
        let held = match got {
            Ok(h) => h,
            Err(e) => {
                if !matches!(e, Error::TimedOut { .. }) {
                    eprintln!("{}: acquire failed: {e}", a.id);
                }
                for key in &keys {
                    a.witness.mark(Kind::GaveUp, key, 0, &a.id, "")?;
                }
                tokio::time::sleep(Duration::from_millis(rand::rng().random_range(0..30))).await;
                continue;
            }
        };
        work(&a, &keys, &witnesses, &held).await?;
        match held.release().await {
            Ok(()) | Err(Error::LeaseLost { .. }) => {}
            Err(e) => eprintln!("{}: release failed: {e}", a.id),
        }
        tokio::time::sleep(Duration::from_millis(rand::rng().random_range(0..30))).await;
    }
    Ok(())
}

/// A section on every key: `begin`, a few ticks, `end` on each, each
/// written only while no key is lost; once one is, `lost` on every key.
async fn work(
    a: &MultiArgs,
    keys: &[&str],
    witnesses: &[Witness],
    held: &Held,
) -> anyhow::Result<()> {
    // One record of `kind` on every key; false once a key is lost.
    let each = |kind: Kind| -> anyhow::Result<bool> {
        for (key, witness) in keys.iter().zip(witnesses) {
            let written =
                witness.write_if(kind, key, held.token(key), &a.id, || !held.is_lost())?;
            if written.is_none() {
                return Ok(false);
            }
        }
        Ok(true)
    };
    let mut on = each(Kind::Begin)?;
    for _ in 0..rand::rng().random_range(3..12) {
        // A section ends with the run, not after it.
        if !on || now_ns() >= a.until_ns {
            break;
        }
        tokio::time::sleep(TICK).await;
        on = each(Kind::Tick)?;
    }
    if on {
        on = each(Kind::End)?;
    }
    if !on {
        for (key, witness) in keys.iter().zip(witnesses) {
            witness.write(Kind::Lost, key, held.token(key), &a.id)?;
        }
    }
    Ok(())
}

/// The hand-made acquisitions with a bug (see the module docs).
async fn by_hand(
    a: &MultiArgs,
    bug: &str,
    options: &LockOptions,
    wait: Duration,
) -> leasehold::Result<Vec<(String, LeaseGuard)>> {
    let mut parts = a.parts.clone();
    if bug == "multi-keeps-first" {
        parts.sort_by(|x, y| x.key.as_bytes().cmp(y.key.as_bytes()));
    }
    let deadline = tokio::time::Instant::now() + wait;
    let mut held: Vec<(String, LeaseGuard)> = Vec::new();
    for p in &parts {
        let left = match bug {
            // Later keys are only tried, the way a user who "gives up if
            // the second key is busy" writes it: the bug then acts as soon
            // as a single-key worker holds a later key, not only when a
            // long wait runs out (rare under load: it once never did in a
            // 15 s run).
            "multi-keeps-first" if !held.is_empty() => Duration::ZERO,
            _ => deadline.saturating_duration_since(tokio::time::Instant::now()),
        };
        let rw = || {
            a.store
                .rw_lock_with(&p.key, leasehold::DEFAULT_MAX_READERS, options.clone())
        };
        let got = match p.side {
            Side::Lock => {
                a.store
                    .lock_with(&p.key, options.clone())?
                    .acquire_timeout(left)
                    .await
            }
            Side::Read => rw()?.read_timeout(left).await.map(|g| g.into_guard()),
            Side::Write => rw()?.write_timeout(left).await.map(|g| g.into_guard()),
        };
        match got {
            Ok(g) => held.push((p.key.clone(), g)),
            Err(e) => {
                let mut taken = held.into_iter();
                if bug == "multi-keeps-first" {
                    // The bug: the first key's guard is kept (leaked, its
                    // renewal running) and only the others are let go.
                    if let Some((_, first)) = taken.next() {
                        std::mem::forget(first);
                    }
                }
                for (_, g) in taken {
                    let _ = g.release().await;
                }
                return Err(e);
            }
        }
    }
    Ok(held)
}
