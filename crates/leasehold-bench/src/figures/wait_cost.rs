//! Figure 15: what a long wait costs. On every store at once, waiters
//! that find a key held by the same holder for minutes, each waiter a
//! store client of its own (so its requests are its own): backing off to
//! the default poll cap, and polling every 50-100 ms throughout as every
//! wait did before the cap (`poll_cap` = the poll interval's max, which
//! never backs off). Each holder releases between half the wait and its
//! end, and the waiter's grant after it is the handoff after a long wait.

use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use leasehold::LockOptions;

use crate::results::WaitCost;
use crate::stats::Latency;
use crate::stores::{self, Spec};

use super::harness::Run;

/// The two ways of waiting measured: a name, and the poll cap.
pub const MODES: [(&str, Duration); 2] = [
    (
        "backing off (the default cap, 2 s)",
        leasehold::DEFAULT_POLL_CAP,
    ),
    (
        "polling every 50–100 ms throughout (before the cap)",
        leasehold::DEFAULT_POLL_MAX,
    ),
];

impl Run {
    /// Figure 15 on every store in `specs`, all at once: one row per store
    /// and way of waiting.
    pub async fn wait_cost(&self, specs: &[Spec]) -> Vec<(String, anyhow::Result<WaitCost>)> {
        let wait = Duration::from_millis(self.plan.wait_cost_ms);
        let waiters = self.plan.wait_cost_waiters.max(1);
        let runs = specs.iter().flat_map(|spec| {
            MODES
                .iter()
                .enumerate()
                .map(move |(m, (mode, cap))| async move {
                    let what = format!("figure 15, {}, {mode}", spec.label());
                    (what, one(spec, m, mode, *cap, waiters, wait).await)
                })
        });
        futures::future::join_all(runs).await
    }
}

/// One store, one way of waiting: `waiters` waiters on keys of their own,
/// the last released after `wait`, the others spread from `wait / 2`.
async fn one(
    spec: &Spec,
    m: usize,
    mode: &str,
    cap: Duration,
    waiters: usize,
    wait: Duration,
) -> anyhow::Result<WaitCost> {
    let holder = stores::open(spec, false).await?;
    let waits = (0..waiters).map(|i| {
        let holder = &holder;
        async move {
            let key = format!("bench/wait-cost/{m}/{i}");
            // The default options (TTL 30 s), as a user's holder has.
            let guard = holder
                .store
                .lock(&key)?
                .acquire_timeout(Duration::from_secs(30))
                .await
                .context("the holder's grant")?;
            let waiter = stores::open(spec, false).await?;
            let lock = waiter
                .store
                .lock_with(&key, LockOptions::new().poll_cap(cap))?;
            let release_after = match waiters {
                1 => wait,
                n => wait / 2 + (wait / 2) * i as u32 / (n as u32 - 1),
            };
            let before = waiter.requests();
            let started = Instant::now();
            let acquire = tokio::spawn(async move {
                let g = lock.acquire().await?;
                anyhow::Ok((g, Instant::now()))
            });
            tokio::time::sleep(release_after).await;
            if acquire.is_finished() {
                return Err(anyhow!("the waiter got the key while it was held"));
            }
            let requests = waiter.requests() - before;
            let waited = started.elapsed();
            let released = Instant::now();
            guard.release().await?;
            let (g, granted) = tokio::time::timeout(cap * 4 + Duration::from_secs(30), acquire)
                .await
                .map_err(|_| anyhow!("no grant within 4 caps and 30 s of the release"))???;
            let handoff = granted.saturating_duration_since(released);
            g.release().await?;
            anyhow::Ok((waited, requests, handoff))
        }
    });
    let mut waits_s = Vec::new();
    let mut requests = Vec::new();
    let mut handoffs_ns = Vec::new();
    for r in futures::future::join_all(waits).await {
        let (waited, n, handoff) = r?;
        waits_s.push(waited.as_secs_f64());
        requests.push(n);
        handoffs_ns.push(handoff.as_nanos() as u64);
    }
    let total_s: f64 = waits_s.iter().sum();
    let total: u64 = requests.iter().sum();
    Ok(WaitCost {
        store: spec.label().into(),
        mode: mode.into(),
        cap_ms: cap.as_millis() as u64,
        requests_per_s: total as f64 / total_s.max(1e-9),
        waits_s,
        requests,
        handoff: Latency::from_ns(&handoffs_ns),
    })
}
