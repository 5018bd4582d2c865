//! What every figure uses: the run's options and plan, child processes and
//! their JSON reports, timed leasehold cycles.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use leasehold::LockOptions;

use crate::results::Plan;
use crate::stores::{self, Spec};
use crate::worker::WaiterParams;

/// `leasehold-bench run` options.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// A run of seconds for CI: every figure, tiny loads, no peers.
    #[arg(long)]
    pub tiny: bool,
    /// Where to write benchmarks.md, benchmarks.png and results.json.
    #[arg(long)]
    pub out: PathBuf,
    /// Python virtual environment with the peer libraries (figure 6).
    #[arg(long)]
    pub venv: Option<PathBuf>,
    /// Directory of the peer scripts.
    #[arg(long, default_value = "scripts/peers")]
    pub peers: PathBuf,
    /// Leave out the Azurite, DynamoDB Local and moto (S3) figures.
    #[arg(long)]
    pub no_emulators: bool,
    /// Run only these figures (e.g. `--only 1,5`), for a quick look while
    /// working on one; the report then says the others were not run.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<u8>,
    /// Run the store figures only on these stores (e.g. `--stores s3`; of
    /// memory, sqlite, azblob, dynamodb, postgres, redis, etcd, s3), for a
    /// quick look at one; the report then says the others were not run.
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(stores::KINDS))]
    pub stores: Vec<String>,
    /// Figure 5 as an earlier run measured it (its results.json), instead
    /// of measuring it again: `scripts/bench.sh` measures it before it
    /// starts the servers, on a quiet machine, as its target asks.
    #[arg(long)]
    pub cli_from: Option<PathBuf>,
}

/// One run: its plan, this binary (the child processes' too), its scratch
/// directory and its options.
pub struct Run {
    pub plan: Plan,
    pub exe: PathBuf,
    pub dir: PathBuf,
    pub args: RunArgs,
}

impl Run {
    pub fn spawn_worker(
        &self,
        spec: &Spec,
        p: &WaiterParams,
    ) -> anyhow::Result<tokio::process::Child> {
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.arg("worker")
            .arg("--store")
            .arg(spec.arg())
            .arg("--key")
            .arg(&p.key)
            .arg("--tasks")
            .arg(p.tasks.to_string())
            .arg("--start-ns")
            .arg(p.start_ns.to_string())
            .arg("--duration-ms")
            .arg(p.duration_ms.to_string())
            .arg("--rest-ms")
            .arg(p.rest_ms.to_string())
            .arg("--hold-ms")
            .arg(p.hold_ms.to_string())
            .arg("--max-acquisitions")
            .arg(p.max_acquisitions.to_string());
        spawn_json(cmd)
    }
}

pub fn rate((n, t): (u64, Duration)) -> f64 {
    n as f64 / t.as_secs_f64().max(1e-9)
}

pub async fn lh_cycles(
    lock: &leasehold::Lock,
    time: Duration,
    max: u64,
) -> anyhow::Result<(u64, Duration)> {
    let start = Instant::now();
    let mut n = 0;
    while n < max && start.elapsed() < time {
        let guard = lock.acquire_timeout(Duration::from_secs(5)).await?;
        guard.release().await?;
        n += 1;
    }
    Ok((n, start.elapsed()))
}

/// A key's first grant (and release), before a figure times the key: a
/// store's first grant of a key may cost more than the next ones (S3's
/// waits a second: leasehold-s3's docs, "A key's first object"), and the
/// figures measure a key in use.
pub async fn first_grant(opened: &stores::Opened, key: &str) -> anyhow::Result<()> {
    let lock = opened.store.lock_with(key, LockOptions::new())?;
    lh_cycles(&lock, Duration::from_secs(5), 1).await?;
    Ok(())
}

pub fn spawn_json(mut cmd: tokio::process::Command) -> anyhow::Result<tokio::process::Child> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    cmd.spawn().with_context(|| format!("starting {cmd:?}"))
}

/// Waits for a child's JSON report, for at most its run time plus a minute.
pub async fn wait_json<T: serde::de::DeserializeOwned>(
    child: tokio::process::Child,
    run: Duration,
) -> anyhow::Result<T> {
    let out = tokio::time::timeout(run + Duration::from_secs(60), child.wait_with_output())
        .await
        .map_err(|_| anyhow!("a child process did not finish in time"))??;
    if !out.status.success() {
        bail!("a child process failed: {}", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| anyhow!("no report from a child process"))?;
    Ok(serde_json::from_str(line)?)
}
