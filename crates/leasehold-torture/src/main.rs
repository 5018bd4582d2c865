//! `leasehold-torture`: many real processes contend for the same keys, through
//! the library and through `leasehold run`, while faults are injected; an
//! independent witness records what every holder did, and a checker reports
//! any violation of mutual exclusion or fencing.
//!
//! ```text
//! leasehold-torture run --store sqlite:/tmp/t.db --duration 60s
//! ```
//!
//! The `worker` and `section` subcommands are the processes `run` starts.

mod bug;
mod check;
mod coordinator;
mod liveness;
mod multi;
mod proxy;
mod report;
#[cfg(test)]
mod seeded;
mod witness;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "leasehold-torture", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a bounded torture session and report.
    Run(coordinator::RunArgs),
    /// Check the witness log of an earlier run again and print its report.
    Check {
        /// The run's witness directory (it holds `witness.log` and `meta`).
        #[arg(long)]
        witness: PathBuf,
        /// Also write the report (Markdown) to this file.
        #[arg(long)]
        report: Option<PathBuf>,
    },
    /// (internal) A library worker process.
    Worker {
        #[arg(long)]
        store: String,
        #[arg(long)]
        key: String,
        /// Which hold to take on the key.
        #[arg(long, value_enum, default_value = "lock")]
        side: worker::Side,
        #[arg(long)]
        witness: PathBuf,
        #[arg(long)]
        id: String,
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Duration,
        /// A long holder: TTLs up to this (see `run --long-max-ttl`).
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl_max: Option<Duration>,
        /// Stop taking the lock after this boot-clock time (ns).
        #[arg(long)]
        until_ns: u64,
        /// Keep writing for a while after the guard said lost.
        #[arg(long)]
        misbehave: bool,
        /// Wrap the store in a deliberate bug (see `run --inject-bug`).
        #[arg(long)]
        inject_bug: Option<String>,
    },
    /// (internal) A multi-key library worker process.
    MultiWorker {
        #[arg(long)]
        store: String,
        /// The keys in the caller's order: KEY (a plain lock), KEY=read or
        /// KEY=write (either side of its reader-writer lock).
        #[arg(long = "key", required = true)]
        keys: Vec<String>,
        #[arg(long)]
        witness: PathBuf,
        #[arg(long)]
        id: String,
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Duration,
        /// Stop taking the locks after this boot-clock time (ns).
        #[arg(long)]
        until_ns: u64,
        /// A multi-key bug (see `run --inject-bug`).
        #[arg(long)]
        inject_bug: Option<String>,
    },
    /// (internal) The command `leasehold run` runs under the lock.
    Section {
        #[arg(long)]
        witness: PathBuf,
        #[arg(long)]
        id: String,
        #[arg(long)]
        ticks: u32,
        /// Under `leasehold run --shared`: a reader.
        #[arg(long)]
        shared: bool,
        /// Do not write `begin` (a background job of a forking command).
        #[arg(long)]
        no_begin: bool,
        /// Do not write `end`.
        #[arg(long)]
        no_end: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Section {
            witness,
            id,
            ticks,
            shared,
            no_begin,
            no_end,
        } => worker::section(
            &witness::Witness::new(witness).shared(shared),
            &id,
            ticks,
            !no_begin,
            !no_end,
        )
        .map(|_| ExitCode::SUCCESS),
        Command::Worker {
            store,
            key,
            side,
            witness,
            id,
            ttl,
            ttl_max,
            until_ns,
            misbehave,
            inject_bug,
        } => runtime().and_then(|rt| {
            rt.block_on(async {
                let mut store = coordinator::open_store(&store).await?;
                if let Some(bug) = inject_bug.filter(|b| bug::wraps_backend(b)) {
                    store = bug::inject(store, &bug)?;
                }
                worker::library_worker(worker::WorkerArgs {
                    store,
                    side,
                    key,
                    witness: witness::Witness::new(witness),
                    id,
                    ttl,
                    ttl_max,
                    until_ns,
                    misbehave,
                })
                .await
                .map(|_| ExitCode::SUCCESS)
            })
        }),
        Command::MultiWorker {
            store,
            keys,
            witness,
            id,
            ttl,
            until_ns,
            inject_bug,
        } => runtime().and_then(|rt| {
            rt.block_on(async {
                let parts = keys
                    .iter()
                    .map(|k| multi::Part::parse(k))
                    .collect::<anyhow::Result<_>>()?;
                multi::multi_worker(multi::MultiArgs {
                    store: coordinator::open_store(&store).await?,
                    parts,
                    witness: witness::Witness::new(witness),
                    id,
                    ttl,
                    until_ns,
                    bug: inject_bug.filter(|b| multi::BUGS.contains(&b.as_str())),
                })
                .await
                .map(|_| ExitCode::SUCCESS)
            })
        }),
        Command::Run(args) => runtime().and_then(|rt| rt.block_on(coordinator::run(args))),
        Command::Check { witness, report } => coordinator::recheck(&witness, report.as_deref()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leasehold-torture: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}
