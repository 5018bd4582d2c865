//! The two kinds of holders: a library worker (a process that takes the lock
//! through the library in a loop) and a section (the command a `leasehold
//! run` process runs under the lock).

use std::time::Duration;

use leasehold::{Error, LeaseGuard, Lock, LockOptions, RwLock, Store};
use rand::Rng;

use crate::witness::{now_ns, Kind, Witness};

/// Pause between two units of work inside a critical section.
pub const TICK: Duration = Duration::from_millis(20);

/// Which hold a library worker takes on its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Side {
    /// A plain [`Lock`].
    Lock,
    /// A reader of the [`RwLock`] on the key.
    Read,
    /// The writer of the [`RwLock`] on the key.
    Write,
}

/// A worker's lock on its key, of its side.
#[derive(Clone)]
enum Holder {
    Lock(Lock),
    Read(RwLock),
    Write(RwLock),
}

impl Holder {
    fn new(store: &Store, key: &str, side: Side, options: LockOptions) -> leasehold::Result<Self> {
        let rw = || store.rw_lock_with(key, leasehold::DEFAULT_MAX_READERS, options.clone());
        Ok(match side {
            Side::Lock => Holder::Lock(store.lock_with(key, options.clone())?),
            Side::Read => Holder::Read(rw()?),
            Side::Write => Holder::Write(rw()?),
        })
    }

    async fn acquire_timeout(&self, wait: Duration) -> leasehold::Result<LeaseGuard> {
        match self {
            Holder::Lock(l) => l.acquire_timeout(wait).await,
            Holder::Read(rw) => rw.read_timeout(wait).await.map(|g| g.into_guard()),
            Holder::Write(rw) => rw.write_timeout(wait).await.map(|g| g.into_guard()),
        }
    }
}

pub struct WorkerArgs {
    pub store: Store,
    pub side: Side,
    pub key: String,
    pub witness: Witness,
    pub id: String,
    pub ttl: Duration,
    /// A long holder (mixed max TTLs): each lease's TTL is drawn between
    /// half this and this (within the store's max TTL), and it is held for
    /// three quarters to one and a half of it, so that it spans a store loss.
    pub ttl_max: Option<Duration>,
    pub until_ns: u64,
    /// Keep writing (as `late`) for a random while, up to a TTL, after the
    /// guard said lost, as a buggy user would; fencing must reject those
    /// writes once a newer holder has written.
    pub misbehave: bool,
}

/// Takes the lock, works, releases, until `until_ns`. Every ordinary write to
/// the witness is made only while the guard says the lease is held (checked
/// under the witness's lock, so the check and the write are one step); when
/// the guard says lost, the worker records it and sends one deliberate late
/// write (a misbehaving worker: late writes every tick for a random while
/// up to a TTL), which fencing must reject if a newer holder has written.
/// A reader's records are marked shared (see the witness).
pub async fn library_worker(mut a: WorkerArgs) -> anyhow::Result<()> {
    a.witness = a.witness.shared(a.side == Side::Read);
    let options = |ttl| LockOptions::new().ttl(ttl).owner_label(a.id.clone());
    let holder = |ttl| Holder::new(&a.store, &a.key, a.side, options(ttl));
    let short = holder(a.ttl)?;
    // After a refused long TTL (the store's epoch was begun with a shorter
    // max TTL than this holder's URL says), one attempt with the short one.
    let mut refused = false;
    while now_ns() < a.until_ns {
        let left = Duration::from_nanos(a.until_ns.saturating_sub(now_ns()));
        let (lock, ttl) = match a.ttl_max {
            Some(max) if !refused => {
                let max = max.min(a.store.backend().capabilities().max_ttl);
                let ttl = long_ttl(a.ttl, max);
                match holder(ttl) {
                    Ok(lock) => (lock, ttl),
                    Err(_) => (short.clone(), a.ttl),
                }
            }
            _ => (short.clone(), a.ttl),
        };
        refused = false;
        let guard = match lock.acquire_timeout(left.min(a.ttl * 5)).await {
            Ok(g) => g,
            Err(Error::TimedOut { .. }) => continue,
            Err(_) if ttl > a.ttl => {
                refused = true;
                continue;
            }
            Err(e) => {
                eprintln!("{}: acquire failed: {e}", a.id);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let token = guard.fencing_token();
        // Record the loss the moment the guard declares it.
        let on_loss = {
            let lost = guard.lost_token();
            let (w, key, id) = (a.witness.clone(), a.key.clone(), a.id.clone());
            tokio::spawn(async move {
                lost.cancelled().await;
                let _ = w.write(Kind::Lost, &key, token, &id);
            })
        };
        let ticks = match a.ttl_max {
            Some(_) => long_ticks(ttl),
            None => rand::rng().random_range(3..12),
        };
        let mut held = a
            .witness
            .write_if(Kind::Begin, &a.key, token, &a.id, || !guard.is_lost())?
            .is_some();
        for _ in 0..ticks {
            // A long section ends with the run, not seconds after it.
            if !held || now_ns() >= a.until_ns {
                break;
            }
            tokio::time::sleep(TICK).await;
            held = a
                .witness
                .write_if(Kind::Tick, &a.key, token, &a.id, || !guard.is_lost())?
                .is_some();
        }
        if held {
            held = a
                .witness
                .write_if(Kind::End, &a.key, token, &a.id, || !guard.is_lost())?
                .is_some();
        }
        if held {
            on_loss.abort();
            match guard.release().await {
                // Broken from outside before the guard noticed: expected.
                Ok(()) | Err(Error::LeaseLost { .. }) => {}
                Err(e) => eprintln!("{}: release failed: {e}", a.id),
            }
        } else {
            a.witness.write(Kind::Lost, &a.key, token, &a.id)?;
            a.witness.write(Kind::Late, &a.key, token, &a.id)?;
            on_loss.abort();
            if a.misbehave {
                let until = now_ns() + rand::rng().random_range(0..a.ttl.as_nanos() as u64);
                while now_ns() < until {
                    tokio::time::sleep(TICK).await;
                    a.witness.write(Kind::Late, &a.key, token, &a.id)?;
                }
            }
            let _ = guard.release().await;
        }
        let think = match a.ttl_max {
            // A long holder leaves the key to the short ones for a while
            // (half to all of the short TTL's 10-fold), or they would
            // rarely get it.
            Some(_) => rand::rng().random_range(a.ttl.as_millis() * 5..=a.ttl.as_millis() * 10),
            None => rand::rng().random_range(0..30),
        };
        // Never past the run's end: a long holder's pause (75 to 150 s with
        // Azure's 15 s TTL) held every run of the mixed variant that long.
        let left = Duration::from_nanos(a.until_ns.saturating_sub(now_ns()));
        tokio::time::sleep(Duration::from_millis(think as u64).min(left)).await;
    }
    Ok(())
}

/// A long holder's TTL: between half of `max` and `max`, at least `ttl`,
/// in whole seconds (Azure leases are).
pub fn long_ttl(ttl: Duration, max: Duration) -> Duration {
    let low = (max / 2).max(ttl).as_secs().max(1);
    let high = max.as_secs().max(low);
    let pick = Duration::from_secs(rand::rng().random_range(low..=high));
    if pick <= ttl || pick > max {
        return ttl;
    }
    pick
}

/// Ticks of a long holder's section: three quarters of its TTL to one and
/// a half (renewed meanwhile), so that a store loss is likely to come in
/// the middle of one with more than a confirmation window of work left.
pub fn long_ticks(ttl: Duration) -> u32 {
    let (ms, tick) = (ttl.as_millis() as u64, TICK.as_millis() as u64);
    let low = (ms * 3 / 4 / tick).max(3);
    rand::rng().random_range(low..=(ms * 3 / 2 / tick).max(low)) as u32
}

/// The command run by `leasehold run`: begin, a few ticks, end. It knows
/// nothing of leases; `leasehold run` must stop it when the lease is lost.
/// A forking command runs it three times under `sh`: `begin` alone, then
/// two background jobs that only tick, then `end` alone.
pub fn section(
    witness: &Witness,
    id: &str,
    ticks: u32,
    begin: bool,
    end: bool,
) -> anyhow::Result<()> {
    let key = std::env::var("LEASEHOLD_KEY")?;
    let token: u64 = std::env::var("LEASEHOLD_FENCING_TOKEN")?.parse()?;
    if begin {
        witness.write(Kind::Begin, &key, token, id)?;
    }
    for _ in 0..ticks {
        std::thread::sleep(TICK);
        witness.write(Kind::Tick, &key, token, id)?;
    }
    if end {
        witness.write(Kind::End, &key, token, id)?;
    }
    Ok(())
}
