//! Figure 9's processes: readers and a writer on one reader-writer lock,
//! and the same readers on a semaphore, in alternating rounds.
//!
//! Every process gets the same schedule: round `i` is a reader-writer
//! window (readers and the writer on the lock) followed by a semaphore
//! window (the readers alone, on a semaphore of as many permits as the
//! lock admits readers); a short gap after each window lets holds that
//! straddle its end finish before the next begins. A process starts
//! nothing in a gap and gives up any wait at its window's end.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

use leasehold::{Error, LockOptions};

use crate::stores::Opened;
use crate::sys::{mono_ns, sleep_until_ns};

/// What a process of figure 9 does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
pub enum Role {
    /// Read holds on the lock in its windows, permits of the semaphore in
    /// the semaphore's windows.
    Reader,
    /// Write holds on the lock in its windows; idle in the semaphore's.
    Writer,
}

/// A figure 9 process's schedule and loads.
#[derive(Debug, Clone, clap::Args)]
pub struct RwParams {
    /// The reader-writer lock's key.
    #[arg(long)]
    pub key: String,
    /// The semaphore's key.
    #[arg(long)]
    pub sem_key: String,
    /// The process's role.
    #[arg(long, value_enum)]
    pub role: Role,
    /// Readers the lock admits at once, and the semaphore's permits.
    #[arg(long)]
    pub slots: u32,
    /// Lease TTL of every hold (ms).
    #[arg(long)]
    pub ttl_ms: u64,
    /// Start of the first window (monotonic ns).
    #[arg(long)]
    pub start_ns: u64,
    /// Length of each window (ms).
    #[arg(long)]
    pub window_ms: u64,
    /// Gap after each window (ms).
    #[arg(long)]
    pub gap_ms: u64,
    /// Rounds (one window of each kind per round).
    #[arg(long)]
    pub rounds: u32,
    /// A read hold lasts a random time in `read_min_ms..=read_max_ms`.
    #[arg(long)]
    pub read_min_ms: u64,
    /// See `read_min_ms`.
    #[arg(long)]
    pub read_max_ms: u64,
    /// A reader's pause after each release (ms).
    #[arg(long)]
    pub think_ms: u64,
    /// How long the writer holds (ms).
    #[arg(long)]
    pub write_ms: u64,
    /// The writer pauses a random time in `pause_min_ms..=pause_max_ms`
    /// after each release (and before its first write of a window).
    #[arg(long)]
    pub pause_min_ms: u64,
    /// See `pause_min_ms`.
    #[arg(long)]
    pub pause_max_ms: u64,
    /// At most this many holds per window.
    #[arg(long)]
    pub max_holds: u64,
}

impl RwParams {
    /// The `n`-th window's start and end (monotonic ns): even windows are
    /// the reader-writer lock's, odd ones the semaphore's.
    pub fn window(&self, n: u32) -> (u64, u64) {
        let step = (self.window_ms + self.gap_ms) * 1_000_000;
        let start = self.start_ns + u64::from(n) * step;
        (start, start + self.window_ms * 1_000_000)
    }

    /// When the last window's gap ends (monotonic ns).
    pub fn end_ns(&self) -> u64 {
        self.window(2 * self.rounds).0
    }

    /// The arguments that give a child process these parameters.
    pub fn args(&self) -> Vec<String> {
        let role = match self.role {
            Role::Reader => "reader",
            Role::Writer => "writer",
        };
        let mut v = vec![
            ("key", self.key.clone()),
            ("sem-key", self.sem_key.clone()),
            ("role", role.into()),
        ];
        for (name, value) in [
            ("slots", u64::from(self.slots)),
            ("ttl-ms", self.ttl_ms),
            ("start-ns", self.start_ns),
            ("window-ms", self.window_ms),
            ("gap-ms", self.gap_ms),
            ("rounds", u64::from(self.rounds)),
            ("read-min-ms", self.read_min_ms),
            ("read-max-ms", self.read_max_ms),
            ("think-ms", self.think_ms),
            ("write-ms", self.write_ms),
            ("pause-min-ms", self.pause_min_ms),
            ("pause-max-ms", self.pause_max_ms),
            ("max-holds", self.max_holds),
        ] {
            v.push((name, value.to_string()));
        }
        v.into_iter()
            .flat_map(|(name, value)| [format!("--{name}"), value])
            .collect()
    }
}

/// One hold (monotonic ns).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Hold {
    /// The window it was taken in (even: the lock's, odd: the semaphore's).
    pub window: u32,
    /// When the acquire call was made.
    pub call: u64,
    /// When it returned the guard.
    pub acq: u64,
    /// When release was called.
    pub rel: u64,
}

/// What a figure 9 process reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RwReport {
    /// The process's role.
    pub role: Option<Role>,
    /// Every hold.
    pub holds: Vec<Hold>,
    /// Waits the window's end cut short (ns), by window.
    pub cut_short: Vec<(u32, u64)>,
    /// Requests sent to the store in the lock's windows and in the
    /// semaphore's (with their gaps).
    pub requests: [u64; 2],
    /// Failed acquire or release calls (other than running out of time,
    /// or failing at the window's end), and guards found lost at release.
    pub errors: u64,
}

/// Runs one figure 9 process on `opened` and reports.
pub async fn run(opened: &Opened, p: &RwParams) -> anyhow::Result<RwReport> {
    let opts = LockOptions::new().ttl(Duration::from_millis(p.ttl_ms));
    let rw = opened.store.rw_lock_with(&p.key, p.slots, opts.clone())?;
    let sem = opened.store.semaphore_with(&p.sem_key, p.slots, opts)?;
    let mut report = RwReport {
        role: Some(p.role),
        ..Default::default()
    };
    let pid = std::process::id();
    for n in 0..2 * p.rounds {
        let (start, end) = p.window(n);
        let on_lock = n % 2 == 0;
        sleep_until_ns(start).await;
        let requests0 = opened.requests();
        if p.role == Role::Writer && !on_lock {
            continue;
        }
        let mut holds = 0;
        while holds < p.max_holds {
            if p.role == Role::Writer {
                let pause = rand::rng().random_range(p.pause_min_ms..=p.pause_max_ms);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            let call = mono_ns();
            if call >= end {
                break;
            }
            let left = Duration::from_nanos(end - call);
            let granted = match (p.role, on_lock) {
                (Role::Writer, _) => rw.write_timeout(left).await.map(|g| g.into_guard()),
                (Role::Reader, true) => rw.read_timeout(left).await.map(|g| g.into_guard()),
                (Role::Reader, false) => sem.acquire_timeout(left).await.map(|g| g.into_guard()),
            };
            match granted {
                Ok(guard) => {
                    let acq = mono_ns();
                    let hold = match p.role {
                        Role::Writer => p.write_ms,
                        Role::Reader => rand::rng().random_range(p.read_min_ms..=p.read_max_ms),
                    };
                    tokio::time::sleep(Duration::from_millis(hold)).await;
                    let rel = mono_ns();
                    let lost = guard.is_lost();
                    if let Err(e) = guard.release().await {
                        eprintln!("rw worker {pid} ({:?}): release: {e}", p.role);
                        report.errors += 1;
                    } else if lost {
                        eprintln!("rw worker {pid} ({:?}): a guard was lost", p.role);
                        report.errors += 1;
                    }
                    report.holds.push(Hold {
                        window: n,
                        call,
                        acq,
                        rel,
                    });
                    holds += 1;
                    if p.role == Role::Reader {
                        tokio::time::sleep(Duration::from_millis(p.think_ms)).await;
                    }
                }
                Err(Error::TimedOut { .. }) => {
                    report.cut_short.push((n, mono_ns() - call));
                    break;
                }
                // A request the window's end cut short is no error (the
                // engine says a store "did not answer within the wait").
                Err(_) if mono_ns() >= end => {
                    report.cut_short.push((n, mono_ns() - call));
                    break;
                }
                Err(e) => {
                    eprintln!("rw worker {pid} ({:?}): acquire: {e}", p.role);
                    report.errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        // The window's requests, counted to the end of its gap.
        sleep_until_ns(p.window(n + 1).0).await;
        report.requests[usize::from(!on_lock)] += opened.requests() - requests0;
    }
    Ok(report)
}
