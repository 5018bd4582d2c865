//! Figure 9: a writer among readers on one reader-writer lock, each in a
//! process of its own; and the same readers on a semaphore.

use std::time::Duration;

use futures::future::try_join_all;
use leasehold::LockOptions;

use super::harness::{spawn_json, wait_json, Run};
use crate::results::RwLockFigure;
use crate::rw_worker::{Hold, Role, RwParams, RwReport};
use crate::stats::Latency;
use crate::stores::{self, Spec};
use crate::sys::mono_ns;

/// Reader processes (the lock admits as many readers; the semaphore has as
/// many permits).
pub const READERS: u32 = 8;
/// A read hold's range (ms) and a reader's pause after each.
pub const READ_MS: (u64, u64) = (20, 60);
pub const THINK_MS: u64 = 5;
/// The writer's hold and its pause range after each (ms).
pub const WRITE_MS: u64 = 10;
pub const PAUSE_MS: (u64, u64) = (100, 200);
/// The shortest TTL the figure takes (the store's own minimum if longer:
/// Azure's 15 s).
pub const MIN_TTL: Duration = Duration::from_secs(4);

impl Run {
    pub async fn rw_lock(&self, spec: &Spec) -> anyhow::Result<RwLockFigure> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let key = format!("bench-rw-{id}");
        let sem_key = format!("bench-rw-sem-{id}");
        let opened = stores::open(spec, false).await?;
        let ttl = opened.store.backend().capabilities().min_ttl.max(MIN_TTL);
        warm_up(&opened, &key, &sem_key, ttl).await?;
        let gap_ms = READ_MS.1 + 200;
        let params = RwParams {
            key,
            sem_key,
            role: Role::Reader,
            slots: READERS,
            ttl_ms: ttl.as_millis() as u64,
            start_ns: mono_ns() + self.plan.start_ms * 1_000_000,
            window_ms: self.plan.rw_window_ms,
            gap_ms,
            rounds: self.plan.rw_rounds,
            read_min_ms: READ_MS.0,
            read_max_ms: READ_MS.1,
            think_ms: THINK_MS,
            write_ms: WRITE_MS,
            pause_min_ms: PAUSE_MS.0,
            pause_max_ms: PAUSE_MS.1,
            max_holds: 100_000,
        };
        let mut children = Vec::new();
        for role in std::iter::once(Role::Writer).chain((0..READERS).map(|_| Role::Reader)) {
            let p = RwParams {
                role,
                ..params.clone()
            };
            let mut cmd = tokio::process::Command::new(&self.exe);
            cmd.arg("rw-worker")
                .arg("--store")
                .arg(spec.arg())
                .args(p.args());
            children.push(spawn_json(cmd)?);
        }
        let run = Duration::from_nanos(params.end_ns().saturating_sub(mono_ns()));
        let mut reports = Vec::new();
        for c in children {
            reports.push(wait_json::<RwReport>(c, run).await?);
        }
        Ok(summarise(spec.label(), &params, &reports))
    }
}

/// Grants the lock's key, its reader slots and the semaphore's slots once,
/// before the figure times them: a store's first grant of a key may cost
/// more than the next ones (S3's waits a second).
async fn warm_up(
    opened: &stores::Opened,
    key: &str,
    sem_key: &str,
    ttl: Duration,
) -> anyhow::Result<()> {
    let opts = LockOptions::new().ttl(ttl);
    let wait = Duration::from_secs(30);
    let rw = opened.store.rw_lock_with(key, READERS, opts.clone())?;
    rw.write_timeout(wait).await?.release().await?;
    let reads = try_join_all((0..READERS).map(|_| rw.read_timeout(wait))).await?;
    try_join_all(reads.into_iter().map(|g| g.release())).await?;
    let sem = opened.store.semaphore_with(sem_key, READERS, opts)?;
    let permits = try_join_all((0..READERS).map(|_| sem.acquire_timeout(wait))).await?;
    try_join_all(permits.into_iter().map(|g| g.release())).await?;
    Ok(())
}

/// The figure's row from its processes' reports.
fn summarise(store: &str, p: &RwParams, reports: &[RwReport]) -> RwLockFigure {
    let of = |role: Role| {
        reports
            .iter()
            .filter(move |r| r.role == Some(role))
            .flat_map(|r| r.holds.iter().copied())
    };
    let writes: Vec<Hold> = of(Role::Writer).collect();
    let (reads, permits): (Vec<Hold>, Vec<Hold>) =
        of(Role::Reader).partition(|h| h.window % 2 == 0);
    let waits: Vec<u64> = writes.iter().map(|h| h.acq - h.call).collect();
    let reader_waits: Vec<u64> = reads.iter().map(|h| h.acq - h.call).collect();
    let cut_short = reports
        .iter()
        .filter(|r| r.role == Some(Role::Writer))
        .flat_map(|r| r.cut_short.iter().map(|(_, ns)| *ns))
        .max()
        .unwrap_or(0);
    let longest_read_ns = reads.iter().map(|h| h.rel - h.acq).max().unwrap_or(0);
    let bound_ms = 2.0 * (longest_read_ns as f64 / 1e6 + p.ttl_ms as f64 / 3.0);
    let secs = f64::from(p.rounds) * p.window_ms as f64 / 1000.0;
    let rw_reads_per_s = reads.len() as f64 / secs;
    let sem_reads_per_s = permits.len() as f64 / secs;
    // A window's requests are counted to the end of its gap.
    let counted = f64::from(p.rounds) * (p.window_ms + p.gap_ms) as f64 / 1000.0;
    let requests = |i: usize| reports.iter().map(|r| r.requests[i]).sum::<u64>() as f64 / counted;
    RwLockFigure {
        store: store.into(),
        readers: p.slots,
        ttl_ms: p.ttl_ms,
        rounds: p.rounds,
        window_ms: p.window_ms,
        read_ms: (p.read_min_ms, p.read_max_ms),
        think_ms: p.think_ms,
        write_ms: p.write_ms,
        pause_ms: (p.pause_min_ms, p.pause_max_ms),
        writer_wait: Latency::from_ns(&waits),
        writer_cut_short_ms: cut_short as f64 / 1e6,
        longest_read_ms: longest_read_ns as f64 / 1e6,
        bound_ms,
        reader_wait: Latency::from_ns(&reader_waits),
        rw_reads_per_s,
        sem_reads_per_s,
        ratio: rw_reads_per_s / sem_reads_per_s.max(1e-9),
        rw_requests_per_s: requests(0),
        sem_requests_per_s: requests(1),
        overlaps: writes
            .iter()
            .filter(|w| reads.iter().any(|r| w.acq < r.rel && r.acq < w.rel))
            .count(),
        max_concurrent_reads: max_concurrent(&reads),
        max_concurrent_permits: max_concurrent(&permits),
        errors: reports.iter().map(|r| r.errors).sum(),
    }
}

/// The most holds whose spans (grant to release call) met at one moment.
fn max_concurrent(holds: &[Hold]) -> usize {
    // Ends before starts at the same instant: spans that only touch do
    // not meet.
    let mut events: Vec<(u64, i32)> = holds
        .iter()
        .flat_map(|h| [(h.acq, 1), (h.rel, -1)])
        .collect();
    events.sort_unstable();
    let mut now = 0i32;
    let mut most = 0;
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    most as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(window: u32, acq: u64, rel: u64) -> Hold {
        Hold {
            window,
            call: acq,
            acq,
            rel,
        }
    }

    #[test]
    fn concurrency_counts_spans_that_meet() {
        let h = [
            hold(0, 0, 10),
            hold(0, 5, 15),
            hold(0, 10, 20),
            hold(0, 12, 13),
        ];
        assert_eq!(max_concurrent(&h), 3);
        assert_eq!(max_concurrent(&[]), 0);
    }
}
