//! Figure 16: several keys at once. Uncontended cycles of a multi-key lock
//! (`Store::lock_all`: every key taken in byte order, then released side by
//! side) against the same keys' single locks taken one after the other
//! and released one after the other, as user code without it would; and
//! requests per cycle.

use std::time::{Duration, Instant};

use leasehold::LockOptions;

use super::harness::{rate, Run};
use crate::results::MultiKey;
use crate::stats::median;
use crate::stores::{self, Spec};

impl Run {
    pub async fn multi_key(&self, spec: &Spec) -> anyhow::Result<Vec<MultiKey>> {
        let opened = stores::open(spec, false).await?;
        let mut rows = Vec::new();
        for n in [2usize, 8] {
            let keys: Vec<String> = (0..n).map(|i| format!("bench-multi-{n}/{i}")).collect();
            let all = opened.store.lock_all_with(&keys, LockOptions::new())?;
            let singles = keys
                .iter()
                .map(|k| opened.store.lock_with(k, LockOptions::new()))
                .collect::<leasehold::Result<Vec<_>>>()?;
            let phase = Duration::from_millis(self.plan.overhead_phase_ms);
            let max = self.plan.overhead_max_cycles;
            // Warm-up: every key's first grant (S3's waits a second), the
            // connections.
            multi_cycles(&all, phase, max.max(1)).await?;
            single_cycles(&singles, phase / 2, max.max(1)).await?;
            let (mut m, mut s) = ((0u64, Duration::ZERO), (0u64, Duration::ZERO));
            let (mut m_req, mut s_req) = (0u64, 0u64);
            let mut ratios = Vec::new();
            for round in 0..self.plan.overhead_rounds {
                let (mut mr, mut sr) = ((0, Duration::ZERO), (0, Duration::ZERO));
                for i in 0..2 {
                    let r0 = opened.requests();
                    if (round + i) % 2 == 0 {
                        mr = multi_cycles(&all, phase, max).await?;
                        m_req += opened.requests() - r0;
                    } else {
                        sr = single_cycles(&singles, phase, max).await?;
                        s_req += opened.requests() - r0;
                    }
                }
                m = (m.0 + mr.0, m.1 + mr.1);
                s = (s.0 + sr.0, s.1 + sr.1);
                ratios.push(rate(mr) / rate(sr));
            }
            rows.push(MultiKey {
                store: spec.label().into(),
                keys: n,
                multi_cps: rate(m),
                singles_cps: rate(s),
                ratio: median(&ratios).unwrap_or(f64::NAN),
                multi_requests_per_cycle: m_req as f64 / m.0.max(1) as f64,
                singles_requests_per_cycle: s_req as f64 / s.0.max(1) as f64,
            });
        }
        Ok(rows)
    }
}

/// Cycles of `all` (take every key, release them together) for `time` or
/// `max` cycles.
async fn multi_cycles(
    all: &leasehold::MultiLock,
    time: Duration,
    max: u64,
) -> anyhow::Result<(u64, Duration)> {
    let start = Instant::now();
    let mut n = 0;
    while n < max && start.elapsed() < time {
        all.acquire_timeout(Duration::from_secs(5))
            .await?
            .release()
            .await?;
        n += 1;
    }
    Ok((n, start.elapsed()))
}

/// Cycles of `locks` taken one after the other and released one after the
/// other (what code without a multi-key lock writes).
async fn single_cycles(
    locks: &[leasehold::Lock],
    time: Duration,
    max: u64,
) -> anyhow::Result<(u64, Duration)> {
    let start = Instant::now();
    let mut n = 0;
    while n < max && start.elapsed() < time {
        let mut guards = Vec::with_capacity(locks.len());
        for lock in locks {
            guards.push(lock.acquire_timeout(Duration::from_secs(5)).await?);
        }
        for guard in guards {
            guard.release().await?;
        }
        n += 1;
    }
    Ok((n, start.elapsed()))
}
