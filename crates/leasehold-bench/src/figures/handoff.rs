//! Figure 2: how long the lock takes to pass to a waiter, in this process
//! and another, and what a waiting process asks of the store.

use std::time::Duration;

use anyhow::bail;
use leasehold::LockOptions;

use super::harness::{first_grant, wait_json, Run};
use crate::results::Handoff;
use crate::stats::Latency;
use crate::stores::{self, Spec};
use crate::sys::mono_ns;
use crate::worker::{self, handoffs, WaiterParams, WaiterReport};

impl Run {
    pub async fn handoff(&self, spec: &Spec) -> anyhow::Result<Handoff> {
        let key = format!("bench-handoff-{}", uuid::Uuid::new_v4().simple());
        // The same process: holder and waiter tasks on one store.
        let opened = stores::open(spec, false).await?;
        first_grant(&opened, &key).await?;
        let start = mono_ns() + 50_000_000;
        let d = Duration::from_millis(self.plan.handoff_local_ms);
        let params = handoff_waiter(&key, start, self.plan.handoff_local_ms, 20);
        let (releases, waiter) = tokio::join!(
            worker::run_holder(
                &opened,
                &key,
                start,
                d,
                (Duration::from_millis(25), Duration::from_millis(40)),
                Duration::from_millis(5),
            ),
            worker::run_waiters(&opened, &params)
        );
        let same = Latency::from_ns(&handoffs(&releases?, &waiter?.acquisitions));
        if matches!(spec, Spec::Memory) {
            return Ok(Handoff {
                store: spec.label().into(),
                same_process: same,
                other_process: None,
                waiting_requests: Vec::new(),
            });
        }

        // Another process: the waiter is a child process.
        let key = format!("bench-handoff-x-{}", uuid::Uuid::new_v4().simple());
        first_grant(&opened, &key).await?;
        let start = mono_ns() + self.plan.start_ms * 1_000_000;
        let d = Duration::from_millis(self.plan.handoff_remote_ms);
        let params = handoff_waiter(&key, start, self.plan.handoff_remote_ms, 200);
        let child = self.spawn_worker(spec, &params)?;
        let holder = worker::run_holder(
            &opened,
            &key,
            start,
            d,
            (Duration::from_millis(100), Duration::from_millis(200)),
            Duration::from_millis(150),
        );
        let (releases, waiter) = tokio::join!(holder, wait_json::<WaiterReport>(child, d));
        let other = Latency::from_ns(&handoffs(&releases?, &waiter?.acquisitions));

        // Requests per second of one waiting process, by its number of tasks.
        let mut waiting = Vec::new();
        for &tasks in &self.plan.waiting_tasks {
            let key = format!("bench-waiting-{}", uuid::Uuid::new_v4().simple());
            let lock = opened.store.lock_with(&key, LockOptions::new())?;
            let guard = lock.try_acquire().await?;
            let params = WaiterParams {
                key: key.clone(),
                tasks,
                start_ns: mono_ns() + self.plan.start_ms * 1_000_000,
                duration_ms: self.plan.waiting_ms,
                rest_ms: 0,
                hold_ms: 0,
                max_acquisitions: 1,
            };
            let child = self.spawn_worker(spec, &params)?;
            let report: WaiterReport =
                wait_json(child, Duration::from_millis(self.plan.waiting_ms)).await?;
            guard.release().await?;
            if !report.acquisitions.is_empty() {
                bail!("a waiter acquired a held lock");
            }
            waiting.push((
                tasks,
                report.requests as f64 / (self.plan.waiting_ms as f64 / 1000.0),
            ));
        }
        Ok(Handoff {
            store: spec.label().into(),
            same_process: same,
            other_process: other,
            waiting_requests: waiting,
        })
    }
}

/// The waiter of a handoff measurement: one task on `key` from `start_ns`
/// for `duration_ms`, resting `rest_ms` before each acquire and holding
/// nothing, for at most 100,000 acquisitions.
fn handoff_waiter(key: &str, start_ns: u64, duration_ms: u64, rest_ms: u64) -> WaiterParams {
    WaiterParams {
        key: key.into(),
        tasks: 1,
        start_ns,
        duration_ms,
        rest_ms,
        hold_ms: 0,
        max_acquisitions: 100_000,
    }
}
