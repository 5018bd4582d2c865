//! Figure 1: uncontended cycles per second, leasehold against the raw loop.

use std::time::Duration;

use anyhow::{anyhow, bail};
use leasehold::LockOptions;

use super::harness::{lh_cycles, rate, Run};
use crate::raw::RawLoop;
use crate::results::{Overhead, PeerRounds, SQLITE_HOP};
use crate::stats::median;
use crate::stores::{self, Spec};

impl Run {
    /// `hop`: the raw SQLite loop makes one `spawn_blocking` call per
    /// transaction, as async code must.
    pub async fn overhead(&self, spec: &Spec, hop: bool) -> anyhow::Result<Overhead> {
        let opened = stores::open(spec, false).await?;
        let lock = opened
            .store
            .lock_with("bench-overhead", LockOptions::new())?;
        // One cycle first: creates the SQLite schema, the blob, the table
        // item, the S3 object (after its second's wait).
        lh_cycles(&lock, Duration::from_secs(5), 1).await?;
        let (mut raw, minimum) = match spec {
            Spec::Sqlite(p) if hop => (RawLoop::sqlite_hop(p)?, 2),
            Spec::Sqlite(p) => (RawLoop::sqlite(p)?, 2),
            Spec::Azblob(c) => (RawLoop::azure(c).await?, 3),
            Spec::Dynamodb(t) => {
                let d = opened.dynamo.as_ref().ok_or_else(|| anyhow!("no client"))?;
                (RawLoop::dynamo(d.client().clone(), t).await?, 2)
            }
            // leasehold's warm path (this process wrote the key last): a
            // conditional PutObject and a read of the epoch marker to
            // acquire, a conditional PutObject to release.
            Spec::S3(_) => {
                let b = opened.s3.as_ref().ok_or_else(|| anyhow!("no client"))?;
                (RawLoop::s3(b).await?, 3)
            }
            Spec::Postgres(_) => {
                let p = opened
                    .postgres
                    .as_ref()
                    .ok_or_else(|| anyhow!("no client"))?;
                let url = stores::postgres_url().ok_or_else(|| anyhow!("no server"))?;
                (RawLoop::postgres(p, &url).await?, 2)
            }
            // One transaction of five statements to acquire (begin, the
            // epoch row shared, the key's row locked, the grant, commit),
            // one statement to release: two backend calls, as MySQL's
            // requests are counted.
            Spec::Mysql(_) => {
                let m = opened.mysql.as_ref().ok_or_else(|| anyhow!("no client"))?;
                let url = stores::mysql_url().ok_or_else(|| anyhow!("no server"))?;
                (RawLoop::mysql(m, &url).await?, 2)
            }
            Spec::Redis(_) => {
                let r = opened.redis.as_ref().ok_or_else(|| anyhow!("no client"))?;
                let url = stores::redis_url().ok_or_else(|| anyhow!("no server"))?;
                (RawLoop::redis(r, &url).await?, 2)
            }
            Spec::Etcd(_) => {
                let e = opened.etcd.as_ref().ok_or_else(|| anyhow!("no client"))?;
                let url = stores::etcd_url().ok_or_else(|| anyhow!("no server"))?;
                // Acquire one Txn on the session's etcd lease, release one
                // Txn (and a new session's LeaseGrant now and then).
                (RawLoop::etcd(e, &url).await?, 2)
            }
            // Read the record and write it conditionally to acquire; write
            // it conditionally on that write's version to release.
            Spec::Zookeeper(_) => {
                let z = opened
                    .zookeeper
                    .as_ref()
                    .ok_or_else(|| anyhow!("no client"))?;
                let url = stores::zookeeper_url().ok_or_else(|| anyhow!("no server"))?;
                (RawLoop::zookeeper(z, &opened.store, &url).await?, 3)
            }
            Spec::Memory => bail!("no raw loop for memory"),
        };
        // On etcd, figure 6's peer runs in the same rounds (one more phase
        // each), so that its ratio is measured side by side too.
        let mut peer = match spec {
            Spec::Etcd(_) => Some(RawLoop::etcd_peer().await?),
            _ => None,
        };
        let phase = Duration::from_millis(self.plan.overhead_phase_ms);
        let max = self.plan.overhead_max_cycles;
        // Warm-up: connections, JIT (DynamoDB Local is a JVM), caches.
        let warm = phase / 2;
        lh_cycles(&lock, warm, max).await?;
        raw.run(warm, max).await?;
        if let Some(p) = &mut peer {
            p.run(warm, max).await?;
        }
        let (mut lh_n, mut lh_t, mut lh_req) = (0u64, Duration::ZERO, 0u64);
        let (mut raw_n, mut raw_t, mut raw_req) = (0u64, Duration::ZERO, 0u64);
        let (mut peer_n, mut peer_t) = (0u64, Duration::ZERO);
        let mut ratios = Vec::new();
        let mut peer_ratios = Vec::new();
        // Each round runs every loop once, starting with a different one
        // each round.
        let loops = if peer.is_some() { 3 } else { 2 };
        for round in 0..self.plan.overhead_rounds {
            let mut lh = (0, Duration::ZERO);
            let mut rw = (0, Duration::ZERO);
            let mut pr = (0, Duration::ZERO);
            for i in 0..loops {
                match (round + i) % loops {
                    0 => {
                        let r0 = opened.requests();
                        lh = lh_cycles(&lock, phase, max).await?;
                        lh_req += opened.requests() - r0;
                    }
                    1 => {
                        let r0 = raw.own_requests().unwrap_or_else(|| opened.requests());
                        rw = raw.run(phase, max).await?;
                        raw_req += raw.own_requests().unwrap_or_else(|| opened.requests()) - r0;
                    }
                    _ => {
                        if let Some(p) = &mut peer {
                            pr = p.run(phase, max).await?;
                        }
                    }
                }
            }
            lh_n += lh.0;
            lh_t += lh.1;
            raw_n += rw.0;
            raw_t += rw.1;
            ratios.push(rate(lh) / rate(rw));
            if peer.is_some() {
                peer_n += pr.0;
                peer_t += pr.1;
                peer_ratios.push(rate(lh) / rate(pr));
            }
        }
        let peer_rounds = match peer {
            Some(p) => {
                p.close().await;
                Some(PeerRounds {
                    peer_cps: rate((peer_n, peer_t)),
                    ratio: median(&peer_ratios).unwrap_or(f64::NAN),
                    round_ratios: peer_ratios,
                })
            }
            None => None,
        };
        if matches!(spec, Spec::Sqlite(_)) {
            // The raw loop runs two transactions per cycle by construction.
            raw_req = raw_n * 2;
        }
        Ok(Overhead {
            store: if hop {
                SQLITE_HOP.into()
            } else {
                spec.label().into()
            },
            leasehold_cps: rate((lh_n, lh_t)),
            raw_cps: rate((raw_n, raw_t)),
            ratio: median(&ratios).unwrap_or(f64::NAN),
            round_ratios: ratios,
            leasehold_requests_per_cycle: lh_req as f64 / lh_n.max(1) as f64,
            raw_requests_per_cycle: raw_req as f64 / raw_n.max(1) as f64,
            minimum,
            peer: peer_rounds,
        })
    }
}
