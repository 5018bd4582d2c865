//! Figure 4: one process holding many leases at once.

use std::time::Duration;

use super::harness::{spawn_json, wait_json, Run};
use crate::stores::Spec;
use crate::worker::ManyReport;

impl Run {
    pub async fn many(&self, spec: &Spec, n: usize, ttl_ms: u64) -> anyhow::Result<ManyReport> {
        // Memory is per process: the child's own store.
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.arg("hold-many")
            .arg("--store")
            .arg(spec.arg())
            .arg("--leases")
            .arg(n.to_string())
            .arg("--ttl-ms")
            .arg(ttl_ms.to_string())
            .arg("--hold-ms")
            .arg(self.plan.many_hold_ms.to_string());
        let child = spawn_json(cmd)?;
        // Acquiring on a slow store takes a while: allow for it.
        wait_json(
            child,
            Duration::from_millis(self.plan.many_hold_ms) + Duration::from_secs(240),
        )
        .await
    }
}
