//! The roles processes play: waiters (tasks that acquire, hold, release and
//! log every acquisition), a holder that hands the lock to waiters, and a
//! process holding many leases at once.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use leasehold::{Error, LockOptions};

use crate::stores::Opened;
use crate::sys::{cpu_ns, mono_ns, rss_bytes, sleep_until_ns};

/// What waiter tasks do.
#[derive(Debug, Clone, clap::Args)]
pub struct WaiterParams {
    /// The key.
    #[arg(long)]
    pub key: String,
    /// Tasks in this process.
    #[arg(long, default_value_t = 1)]
    pub tasks: usize,
    /// Start at this monotonic time (ns).
    #[arg(long)]
    pub start_ns: u64,
    /// Stop after this long.
    #[arg(long)]
    pub duration_ms: u64,
    /// Pause before each acquire.
    #[arg(long, default_value_t = 0)]
    pub rest_ms: u64,
    /// How long each acquisition is held.
    #[arg(long, default_value_t = 0)]
    pub hold_ms: u64,
    /// At most this many acquisitions per task.
    #[arg(long, default_value_t = 1_000_000)]
    pub max_acquisitions: u64,
}

/// One acquisition (monotonic ns).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Acquisition {
    /// When acquire was called.
    pub call: u64,
    /// When it returned the guard.
    pub acq: u64,
    /// When release was called.
    pub rel: u64,
    /// The fencing token.
    pub token: u64,
    /// The process.
    pub pid: u32,
    /// The task within the process.
    pub task: u32,
}

/// What a waiter process reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WaiterReport {
    /// Every acquisition.
    pub acquisitions: Vec<Acquisition>,
    /// The longest any task waited in one acquire call (ns), including a
    /// wait cut short by the end of the run.
    pub max_wait_ns: u64,
    /// Requests sent to the store by this process.
    pub requests: u64,
    /// CPU time used (ns).
    pub cpu_ns: u64,
    /// Failed acquire or release calls (other than running out of time).
    pub errors: u64,
}

/// Runs waiter tasks on `opened` and reports.
pub async fn run_waiters(opened: &Opened, p: &WaiterParams) -> anyhow::Result<WaiterReport> {
    let lock = opened.store.lock_with(&p.key, LockOptions::new())?;
    sleep_until_ns(p.start_ns).await;
    let deadline = p.start_ns + p.duration_ms * 1_000_000;
    let requests0 = opened.requests();
    let cpu0 = cpu_ns();
    let report = Arc::new(Mutex::new(WaiterReport::default()));
    let mut tasks = Vec::new();
    for task in 0..p.tasks as u32 {
        let lock = lock.clone();
        let report = report.clone();
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            let pid = std::process::id();
            let mut n = 0;
            while n < p.max_acquisitions && mono_ns() < deadline {
                tokio::time::sleep(Duration::from_millis(p.rest_ms)).await;
                let call = mono_ns();
                if call >= deadline {
                    break;
                }
                let left = Duration::from_nanos(deadline - call);
                match lock.acquire_timeout(left).await {
                    Ok(guard) => {
                        let acq = mono_ns();
                        let token = guard.fencing_token();
                        if p.hold_ms > 0 {
                            tokio::time::sleep(Duration::from_millis(p.hold_ms)).await;
                        }
                        let rel = mono_ns();
                        let released = guard.release().await;
                        if let Err(e) = &released {
                            eprintln!("worker {pid}, task {task}: release: {e}");
                        }
                        let mut r = report.lock().await;
                        r.errors += u64::from(released.is_err());
                        r.max_wait_ns = r.max_wait_ns.max(acq - call);
                        r.acquisitions.push(Acquisition {
                            call,
                            acq,
                            rel,
                            token,
                            pid,
                            task,
                        });
                        n += 1;
                    }
                    Err(Error::TimedOut { .. }) => {
                        let mut r = report.lock().await;
                        r.max_wait_ns = r.max_wait_ns.max(mono_ns() - call);
                        break;
                    }
                    Err(e) => {
                        eprintln!("worker {pid}, task {task}: acquire: {e}");
                        report.lock().await.errors += 1;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let mut r = report.lock().await.clone();
    r.requests = opened.requests() - requests0;
    r.cpu_ns = cpu_ns() - cpu0;
    Ok(r)
}

/// A holder that takes the lock whenever it is free (a try every 10 ms),
/// holds it for a random time in `hold`, releases it and leaves it to the
/// waiters for `pause`; returns the monotonic times at which it called
/// release.
pub async fn run_holder(
    opened: &Opened,
    key: &str,
    start_ns: u64,
    duration: Duration,
    hold: (Duration, Duration),
    pause: Duration,
) -> anyhow::Result<Vec<u64>> {
    let lock = opened.store.lock_with(key, LockOptions::new())?;
    sleep_until_ns(start_ns).await;
    let deadline = start_ns + duration.as_nanos() as u64;
    let mut releases = Vec::new();
    while mono_ns() < deadline {
        match lock.try_acquire().await {
            Ok(guard) => {
                let h = rand::rng().random_range(hold.0..=hold.1);
                tokio::time::sleep(h).await;
                releases.push(mono_ns());
                guard.release().await?;
                tokio::time::sleep(pause).await;
            }
            Err(Error::Held { .. }) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(releases)
}

/// Handoff latencies (ns): for each acquisition by a waiter that was already
/// waiting when the holder last released before it, the time from that
/// release to the acquisition.
pub fn handoffs(releases: &[u64], acquisitions: &[Acquisition]) -> Vec<u64> {
    let mut rel = releases.to_vec();
    rel.sort_unstable();
    acquisitions
        .iter()
        .filter_map(|a| {
            let i = rel.partition_point(|r| *r < a.acq);
            let r = *rel.get(i.checked_sub(1)?)?;
            (a.call < r).then(|| a.acq - r)
        })
        .collect()
}

/// What holding many leases cost.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ManyReport {
    /// Leases held.
    pub leases: usize,
    /// Time to acquire them all (ms).
    pub acquire_ms: f64,
    /// How long they were held (ms).
    pub held_ms: f64,
    /// TTL and renewal interval (ms).
    pub ttl_ms: u64,
    /// Renewal interval (ms).
    pub renew_every_ms: u64,
    /// Successful renewals during the hold.
    pub renewals: u64,
    /// Renewals expected on schedule (leases × hold / interval, whole intervals).
    pub renewals_expected: u64,
    /// Longest time any lease went without a grant or renewal (ms),
    /// including from its last renewal to the end of the hold.
    pub max_gap_ms: f64,
    /// Leases lost during the hold.
    pub lost: usize,
    /// CPU used during the hold (ms).
    pub cpu_ms: f64,
    /// Resident memory before acquiring and after (bytes).
    pub rss_before: u64,
    /// Resident memory while holding (bytes).
    pub rss_holding: u64,
    /// Failed acquisitions.
    pub failed: usize,
}

/// Holds `n` leases for `hold` with TTL `ttl`, measuring.
pub async fn run_many(
    opened: &Opened,
    n: usize,
    ttl: Duration,
    hold: Duration,
) -> anyhow::Result<ManyReport> {
    let rss_before = rss_bytes();
    let opts = LockOptions::new().ttl(ttl);
    let t0 = mono_ns();
    let mut guards = Vec::with_capacity(n);
    let mut failed = 0;
    let prefix = uuid::Uuid::new_v4().simple().to_string();
    let mut set = tokio::task::JoinSet::new();
    let mut next = 0;
    while next < n || !set.is_empty() {
        while next < n && set.len() < 32 {
            let lock = opened
                .store
                .lock_with(&format!("many/{}/{next}", &prefix[..8]), opts.clone())?;
            set.spawn(async move { lock.try_acquire().await });
            next += 1;
        }
        match set.join_next().await {
            Some(Ok(Ok(g))) => guards.push(g),
            Some(_) => failed += 1,
            None => break,
        }
    }
    let t1 = mono_ns();
    let cpu1 = cpu_ns();
    let renew0 = opened.calls.renewals().iter().map(|r| r.count).sum::<u64>();
    tokio::time::sleep(hold).await;
    let t2 = mono_ns();
    let cpu2 = cpu_ns();
    let rss_holding = rss_bytes();
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let sched = opened.calls.renewals();
    let renewals = sched.iter().map(|r| r.count).sum::<u64>() - renew0;
    let max_gap = sched
        .iter()
        .map(|r| r.max_gap_ns.max(t2.saturating_sub(r.last_ns)))
        .max()
        .unwrap_or(0);
    let every = ttl / 3;
    // Each lease is due a renewal every interval after its own grant.
    let expected = guards.len() as u64 * (hold.as_nanos() / every.as_nanos()) as u64;
    let mut set = tokio::task::JoinSet::new();
    for g in guards.drain(..) {
        set.spawn(async move { g.release().await });
        if set.len() >= 32 {
            set.join_next().await;
        }
    }
    while set.join_next().await.is_some() {}
    Ok(ManyReport {
        leases: n - failed,
        acquire_ms: (t1 - t0) as f64 / 1e6,
        held_ms: (t2 - t1) as f64 / 1e6,
        ttl_ms: ttl.as_millis() as u64,
        renew_every_ms: every.as_millis() as u64,
        renewals,
        renewals_expected: expected,
        max_gap_ms: max_gap as f64 / 1e6,
        lost,
        cpu_ms: (cpu2 - cpu1) as f64 / 1e6,
        rss_before,
        rss_holding,
        failed,
    })
}
