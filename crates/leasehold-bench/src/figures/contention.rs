//! Figure 3: processes of tasks contending for one key.

use std::time::Duration;

use super::harness::{first_grant, wait_json, Run};
use crate::results::Contention;
use crate::stores::{self, Spec};
use crate::sys::mono_ns;
use crate::worker::{Acquisition, WaiterParams, WaiterReport};

impl Run {
    pub async fn contention(&self, spec: &Spec) -> anyhow::Result<Contention> {
        let key = format!("bench-contention-{}", uuid::Uuid::new_v4().simple());
        first_grant(&stores::open(spec, false).await?, &key).await?;
        let ms = if matches!(spec, Spec::Sqlite(_)) {
            self.plan.contention_ms
        } else {
            self.plan.contention_emulator_ms
        };
        let params = WaiterParams {
            key,
            tasks: self.plan.contention_tasks,
            start_ns: mono_ns() + self.plan.start_ms * 1_000_000,
            duration_ms: ms,
            rest_ms: 0,
            hold_ms: 1,
            max_acquisitions: 1_000_000,
        };
        let mut children = Vec::new();
        for _ in 0..self.plan.contention_procs {
            children.push(self.spawn_worker(spec, &params)?);
        }
        let mut reports = Vec::new();
        for c in children {
            reports.push(wait_json::<WaiterReport>(c, Duration::from_millis(ms)).await?);
        }
        let mut all: Vec<Acquisition> = reports
            .iter()
            .flat_map(|r| r.acquisitions.iter().copied())
            .collect();
        all.sort_by_key(|a| (a.token, a.acq));
        let cross = all.windows(2).filter(|w| w[0].pid != w[1].pid).count();
        let per_proc: Vec<usize> = reports.iter().map(|r| r.acquisitions.len()).collect();
        let mut served = std::collections::HashSet::new();
        for a in &all {
            served.insert((a.pid, a.task));
        }
        let secs = ms as f64 / 1000.0;
        Ok(Contention {
            store: spec.label().into(),
            procs: self.plan.contention_procs,
            tasks: self.plan.contention_tasks,
            seconds: secs,
            passes_per_s: all.len() as f64 / secs,
            requests_per_s: reports.iter().map(|r| r.requests).sum::<u64>() as f64 / secs,
            longest_wait_ms: reports.iter().map(|r| r.max_wait_ns).max().unwrap_or(0) as f64 / 1e6,
            cross_process_share: cross as f64 / all.len().saturating_sub(1).max(1) as f64,
            min_process_passes: per_proc.iter().copied().min().unwrap_or(0),
            max_process_passes: per_proc.iter().copied().max().unwrap_or(0),
            starved_tasks: self.plan.contention_procs * self.plan.contention_tasks - served.len(),
            errors: reports.iter().map(|r| r.errors).sum(),
        })
    }
}
