//! Figure 6: peer libraries on the same stores.

use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail};

use super::harness::{spawn_json, wait_json, Run};
use crate::results::{Peer, Results};
use crate::stats::Latency;
use crate::stores::Spec;
use crate::worker::{handoffs, Acquisition};

impl Run {
    pub async fn peer(
        &self,
        spec: &Spec,
        venv: Option<&Path>,
        res: &Results,
    ) -> anyhow::Result<Peer> {
        let overhead = res.overhead.iter().find(|o| o.store == spec.label());
        let leasehold_cps = overhead.map(|o| o.leasehold_cps);
        // A peer that ran in figure 1's rounds (etcd's): its cycles there.
        let rounds = overhead.and_then(|o| o.peer.clone());
        let leasehold_handoff = res
            .handoff
            .iter()
            .find(|h| h.store == spec.label())
            .and_then(|h| h.other_process);
        let (script, peer) = match spec {
            Spec::Azblob(_) => (
                "azure_blob_lease.py",
                "azure-storage-blob BlobLeaseClient (Python)",
            ),
            Spec::Dynamodb(_) => ("dynamodb_lock.py", "python-dynamodb-lock (Python)"),
            Spec::Postgres(_) => (
                "postgres_advisory_lock.py",
                "session advisory lock, psycopg (Python)",
            ),
            Spec::Mysql(_) => ("mysql_get_lock.py", "GET_LOCK, PyMySQL (Python)"),
            Spec::Redis(_) => ("redis_py_lock.py", "redis-py Lock (Python)"),
            Spec::Etcd(_) => ("", "etcd v3lock Lock/Unlock on a session lease (Rust)"),
            Spec::Zookeeper(_) => ("zookeeper_kazoo_lock.py", "kazoo Lock recipe (Python)"),
            _ => bail!("no peer for {}", spec.label()),
        };
        let mut cmd = if matches!(spec, Spec::Etcd(_)) {
            // No maintained Python etcd client: the peer is this binary.
            let mut cmd = tokio::process::Command::new(&self.exe);
            cmd.arg("peer-etcd");
            cmd
        } else {
            let venv = venv.ok_or_else(|| anyhow!("no --venv given"))?;
            let mut cmd = tokio::process::Command::new(venv.join("bin/python"));
            cmd.arg(self.args.peers.join(script));
            cmd
        };
        cmd.arg("--cycles-ms")
            .arg(self.plan.peer_cycles_ms.to_string())
            .arg("--handoff-ms")
            .arg(self.plan.peer_handoff_ms.to_string());
        let child = spawn_json(cmd)?;
        let out: PeerOut = wait_json(
            child,
            Duration::from_millis(self.plan.peer_cycles_ms + self.plan.peer_handoff_ms)
                + Duration::from_secs(60),
        )
        .await?;
        let peer_handoff = out
            .releases
            .as_ref()
            .zip(out.acquisitions.as_ref())
            .and_then(|(rel, acq)| {
                let acq: Vec<Acquisition> = acq
                    .iter()
                    .map(|(call, acq)| Acquisition {
                        call: *call,
                        acq: *acq,
                        rel: 0,
                        token: 0,
                        pid: 0,
                        task: 0,
                    })
                    .collect();
                Latency::from_ns(&handoffs(rel, &acq))
            });
        let mut note = out.note;
        if rounds.is_some() {
            note.push_str(
                " Its cycles here ran in figure 1's rounds, interleaved with leasehold's and the \
raw loop's (this process, a connection of its own); the ratio is the median of the rounds' ratios.",
            );
        }
        Ok(Peer {
            peer: peer.into(),
            store: spec.label().into(),
            peer_cps: rounds
                .as_ref()
                .map_or(out.cycles as f64 / out.seconds.max(1e-9), |r| r.peer_cps),
            leasehold_cps,
            ratio: rounds.as_ref().map(|r| r.ratio),
            round_ratios: rounds.map(|r| r.round_ratios).unwrap_or_default(),
            peer_requests_per_cycle: out.requests_per_cycle,
            peer_handoff,
            leasehold_handoff,
            note,
        })
    }
}

#[derive(Debug, serde::Deserialize)]
struct PeerOut {
    cycles: u64,
    seconds: f64,
    requests_per_cycle: Option<f64>,
    releases: Option<Vec<u64>>,
    acquisitions: Option<Vec<(u64, u64)>>,
    #[serde(default)]
    note: String,
}
