//! `leasehold-bench`: the benchmarks of docs/benchmarks.md, side by side
//! with the raw SDKs, `flock` and peer libraries. `scripts/bench.sh` runs it.
//!
//! ```text
//! leasehold-bench run [--tiny] --out DIR [--venv DIR] [--peers DIR] [--only 1,2] [--stores s3,…]
//! ```
//!
//! The `worker`, `hold-many` and `rw-worker` subcommands are the child
//! processes that `run` starts for the multi-process figures; each prints
//! one JSON report.
//! `peer-etcd` is figure 6's etcd peer (etcd's own v3lock service), which has
//! no Python counterpart.

mod chart;
mod figures;
mod peer_etcd;
mod raw;
mod report;
mod results;
mod rw_worker;
mod stores;
mod summary;
mod worker;

use leasehold_bench::{stats, sys};

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "leasehold-bench", about = "leasehold benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs every figure and writes benchmarks.md, benchmarks.png and results.json to --out.
    Run(figures::RunArgs),
    /// Writes the page and chart again from a results.json.
    Report {
        /// The results.json of a run.
        #[arg(long)]
        results: PathBuf,
        /// Where to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// (child) Waiter tasks on one key; prints a JSON report.
    #[command(hide = true)]
    Worker {
        /// Store spec.
        #[arg(long)]
        store: String,
        #[command(flatten)]
        params: worker::WaiterParams,
    },
    /// (child) Holds many leases at once; prints a JSON report.
    #[command(hide = true)]
    HoldMany {
        /// Store spec.
        #[arg(long)]
        store: String,
        /// How many leases.
        #[arg(long)]
        leases: usize,
        /// Their TTL (ms).
        #[arg(long)]
        ttl_ms: u64,
        /// How long to hold them (ms).
        #[arg(long)]
        hold_ms: u64,
    },
    /// (child) A reader or the writer of figure 9; prints a JSON report.
    #[command(hide = true)]
    RwWorker {
        /// Store spec.
        #[arg(long)]
        store: String,
        #[command(flatten)]
        params: rw_worker::RwParams,
    },
    /// (child) Figure 6's etcd peer, etcd's v3lock service; prints a JSON report.
    #[command(hide = true)]
    PeerEtcd(peer_etcd::PeerArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // DynamoDB Local accepts any credentials made of letters and digits;
    // moto, any at all.
    for (name, value) in [
        ("AWS_ACCESS_KEY_ID", "local"),
        ("AWS_SECRET_ACCESS_KEY", "local"),
        ("AWS_REGION", "us-east-1"),
    ] {
        if std::env::var_os(name).is_none() {
            // SAFETY: single-threaded here, before the runtime starts.
            unsafe { std::env::set_var(name, value) };
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        match cli.command {
            // The figures run in a task on a worker thread, as most code
            // runs: on the thread that block_ons main, every answer has to
            // wake that thread, which hid a cost paid on worker threads
            // (a task woken at every grant; docs/benchmarks.md, section 13).
            Command::Run(args) => tokio::spawn(figures::run(args)).await?,
            Command::Report { results, out } => {
                let mut res = results::Results::read(&results)?;
                std::fs::create_dir_all(&out)?;
                figures::write(&mut res, &out)
            }
            Command::Worker { store, params } => {
                let opened = stores::open(&stores::Spec::parse(&store)?, false).await?;
                let report = worker::run_waiters(&opened, &params).await?;
                println!("{}", serde_json::to_string(&report)?);
                Ok(())
            }
            Command::HoldMany {
                store,
                leases,
                ttl_ms,
                hold_ms,
            } => {
                let opened = stores::open(&stores::Spec::parse(&store)?, true).await?;
                let report = worker::run_many(
                    &opened,
                    leases,
                    Duration::from_millis(ttl_ms),
                    Duration::from_millis(hold_ms),
                )
                .await?;
                println!("{}", serde_json::to_string(&report)?);
                Ok(())
            }
            Command::RwWorker { store, params } => {
                let opened = stores::open(&stores::Spec::parse(&store)?, false).await?;
                let report = rw_worker::run(&opened, &params).await?;
                println!("{}", serde_json::to_string(&report)?);
                Ok(())
            }
            Command::PeerEtcd(args) => peer_etcd::run(args).await,
        }
    })?;
    // Background releases and renewal tasks must not keep a child alive.
    rt.shutdown_timeout(Duration::from_secs(2));
    Ok(())
}
