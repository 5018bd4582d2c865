//! The figures of docs/benchmarks.md, each measured side by side with its
//! comparison in the same run.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde::Serialize;

use leasehold::LockOptions;

use crate::raw::RawLoop;
use crate::stats::{median, Latency};
use crate::stores::{self, Spec, AZURITE_PORT, DYNAMODB_PORT};
use crate::sys::{mono_ns, port_answers, url_answers};
use crate::worker::{self, handoffs, Acquisition, ManyReport, WaiterParams, WaiterReport};

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
}

/// Loads and durations of one run.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Plan {
    pub tiny: bool,
    pub overhead_rounds: usize,
    pub overhead_phase_ms: u64,
    pub overhead_max_cycles: u64,
    pub handoff_local_ms: u64,
    pub handoff_remote_ms: u64,
    pub waiting_tasks: Vec<usize>,
    pub waiting_ms: u64,
    pub contention_procs: usize,
    pub contention_tasks: usize,
    pub contention_ms: u64,
    pub contention_emulator_ms: u64,
    pub many_local: usize,
    pub many_emulator: usize,
    /// Figure 4 on moto (S3), which serves fewer requests than the others.
    #[serde(default)]
    pub many_moto: usize,
    pub many_ttl_ms: u64,
    pub many_emulator_ttl_ms: u64,
    pub many_hold_ms: u64,
    pub cli_runs: usize,
    pub peer_cycles_ms: u64,
    pub peer_handoff_ms: u64,
    /// Time given to child processes to start before a figure begins (ms).
    pub start_ms: u64,
}

impl Plan {
    fn new(tiny: bool) -> Plan {
        if tiny {
            Plan {
                tiny,
                overhead_rounds: 1,
                overhead_phase_ms: 200,
                overhead_max_cycles: 200,
                handoff_local_ms: 600,
                handoff_remote_ms: 1_200,
                waiting_tasks: vec![1, 8],
                waiting_ms: 500,
                contention_procs: 2,
                contention_tasks: 2,
                contention_ms: 800,
                contention_emulator_ms: 800,
                many_local: 200,
                many_emulator: 0,
                many_moto: 0,
                many_ttl_ms: 600,
                many_emulator_ttl_ms: 15_000,
                many_hold_ms: 700,
                cli_runs: 3,
                peer_cycles_ms: 0,
                peer_handoff_ms: 0,
                start_ms: 800,
            }
        } else {
            Plan {
                tiny,
                // Short rounds, many: the disk's latency here drifts over
                // seconds, and both loops should see the same machine.
                overhead_rounds: 32,
                overhead_phase_ms: 250,
                overhead_max_cycles: 50_000,
                handoff_local_ms: 5_000,
                handoff_remote_ms: 20_000,
                waiting_tasks: vec![1, 8, 64],
                waiting_ms: 5_000,
                contention_procs: 8,
                contention_tasks: 8,
                contention_ms: 15_000,
                contention_emulator_ms: 10_000,
                many_local: 10_000,
                many_emulator: 1_000,
                many_moto: 200,
                many_ttl_ms: 15_000,
                many_emulator_ttl_ms: 15_000,
                many_hold_ms: 20_000,
                cli_runs: 40,
                peer_cycles_ms: 10_000,
                peer_handoff_ms: 45_000,
                start_ms: 2_000,
            }
        }
    }
}

/// Figure 1's second SQLite row: the raw loop hops through `spawn_blocking`.
pub const SQLITE_HOP: &str = "SQLite (raw loop in async code)";

/// Figure 1, one store.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Overhead {
    pub store: String,
    pub leasehold_cps: f64,
    pub raw_cps: f64,
    /// Median over rounds of leasehold / raw.
    pub ratio: f64,
    pub round_ratios: Vec<f64>,
    pub leasehold_requests_per_cycle: f64,
    pub raw_requests_per_cycle: f64,
    pub minimum: u32,
}

/// Figure 2, one store.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Handoff {
    pub store: String,
    pub same_process: Option<Latency>,
    pub other_process: Option<Latency>,
    /// (tasks in the waiting process, its requests per second).
    pub waiting_requests: Vec<(usize, f64)>,
}

/// Figure 3, one store.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Contention {
    pub store: String,
    pub procs: usize,
    pub tasks: usize,
    pub seconds: f64,
    pub passes_per_s: f64,
    pub requests_per_s: f64,
    pub longest_wait_ms: f64,
    /// Share of passes that went to another process.
    pub cross_process_share: f64,
    /// Passes of the least and most served process.
    pub min_process_passes: usize,
    pub max_process_passes: usize,
    /// Tasks that never got the lock.
    pub starved_tasks: usize,
    pub errors: u64,
}

/// Figure 4, one store.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Many {
    pub store: String,
    #[serde(flatten)]
    pub report: ManyReport,
}

/// Figure 5.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Cli {
    pub runs: usize,
    pub leasehold_ms: f64,
    pub flock_ms: f64,
    pub ratio: f64,
    /// Size of the `leasehold` binary measured, and its build profile.
    #[serde(default)]
    pub binary_bytes: u64,
    #[serde(default)]
    pub binary_profile: String,
}

/// Figure 6, one peer.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Peer {
    pub peer: String,
    pub store: String,
    pub peer_cps: f64,
    pub leasehold_cps: Option<f64>,
    pub peer_requests_per_cycle: Option<f64>,
    pub peer_handoff: Option<Latency>,
    pub leasehold_handoff: Option<Latency>,
    pub note: String,
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize, serde::Deserialize, Default)]
pub struct Results {
    pub plan: Option<Plan>,
    pub started_unix: u64,
    pub seconds: f64,
    pub machine: String,
    pub overhead: Vec<Overhead>,
    pub handoff: Vec<Handoff>,
    pub contention: Vec<Contention>,
    pub many: Vec<Many>,
    pub cli: Option<Cli>,
    pub peers: Vec<Peer>,
    /// What was skipped or failed, and why.
    pub notes: Vec<String>,
}

struct Run {
    plan: Plan,
    exe: PathBuf,
    dir: PathBuf,
    args: RunArgs,
}

/// Runs every figure and writes the report.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let plan = Plan::new(args.tiny);
    std::fs::create_dir_all(&args.out)?;
    let dir = std::env::temp_dir().join(format!("leasehold-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let run = Run {
        plan: plan.clone(),
        exe: std::env::current_exe()?,
        dir: dir.clone(),
        args: args.clone(),
    };
    let mut res = Results {
        plan: Some(plan.clone()),
        started_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        machine: machine(),
        ..Default::default()
    };
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    // Every store, with why it is left out if it is.
    let mut candidates: Vec<(Spec, Option<String>)> =
        vec![(Spec::Sqlite(dir.join("leases.db")), None)];
    if args.no_emulators {
        res.notes
            .push("Azurite, DynamoDB Local and moto (S3) left out (--no-emulators).".into());
    } else {
        candidates.push((
            Spec::Azblob(format!("bench{tag}")),
            (!port_answers(AZURITE_PORT)).then(|| {
                format!(
                "Azurite: nothing listens on 127.0.0.1:{AZURITE_PORT}; its figures are left out."
            )
            }),
        ));
        candidates.push((
            Spec::Dynamodb(format!("leasehold_bench_{tag}")),
            (!port_answers(DYNAMODB_PORT)).then(|| format!(
                "DynamoDB Local: nothing listens on 127.0.0.1:{DYNAMODB_PORT}; its figures are left out."
            )),
        ));
        // A prefix of this run's own in the bench's bucket.
        let s3 = stores::s3_endpoint();
        candidates.push((
            Spec::S3(format!("leasehold-bench-{tag}")),
            (!url_answers(&s3)).then(|| {
                format!(
                    "{}: nothing answers at {s3} (scripts/moto.sh start); its figures are left out.",
                    stores::S3_LABEL
                )
            }),
        ));
    }

    // A server of the machine's own, not an emulator: --no-emulators
    // keeps it.
    candidates.push((
        Spec::Postgres(format!("leasehold_bench_{tag}")),
        stores::postgres_url().is_none().then(|| {
            format!(
                "PostgreSQL: no {} given; its figures are left out.",
                stores::POSTGRES_URL_ENV
            )
        }),
    ));
    candidates.push((
        Spec::Redis(format!("leasehold-bench-{tag}:")),
        stores::redis_url().is_none().then(|| {
            format!(
                "Redis: no {} given; its figures are left out.",
                stores::REDIS_URL_ENV
            )
        }),
    ));
    candidates.push((
        Spec::Etcd(format!("leasehold-bench-{tag}/")),
        stores::etcd_url().is_none().then(|| {
            format!(
                "etcd: no {} given; its figures are left out.",
                stores::ETCD_URL_ENV
            )
        }),
    ));

    // Only the stores asked for (--stores), and of those the ones there.
    let store_wanted = |kind: &str| args.stores.is_empty() || args.stores.iter().any(|s| s == kind);
    if !args.stores.is_empty() {
        res.notes.push(format!(
            "Only stores {:?} were run (--stores).",
            args.stores
        ));
    }
    let mut specs = Vec::new();
    for (spec, missing) in candidates {
        match missing {
            _ if !store_wanted(spec.kind()) => {}
            None => specs.push(spec),
            Some(why) => res.notes.push(why),
        }
    }

    // Every server store at once, each created proven-new (its name is
    // this run's own).
    let warmed = futures::future::join_all(specs.iter().map(|spec| async move {
        match spec {
            Spec::Azblob(_)
            | Spec::Dynamodb(_)
            | Spec::Postgres(_)
            | Spec::Redis(_)
            | Spec::Etcd(_)
            | Spec::S3(_) => {
                eprintln!("[0] creating {} (new, proven: no quarantine)", spec.label());
                stores::warm_up(spec).await
            }
            _ => Ok(()),
        }
    }))
    .await;
    let mut warm = Vec::new();
    for (spec, result) in specs.into_iter().zip(warmed) {
        match result {
            Ok(()) => warm.push(spec),
            Err(e) => res.notes.push(format!("{}: left out: {e:#}", spec.label())),
        }
    }
    let specs = warm;
    let want = |figure: u8| args.only.is_empty() || args.only.contains(&figure);
    if !args.only.is_empty() {
        res.notes
            .push(format!("Only figures {:?} were run (--only).", args.only));
    }
    for spec in specs.iter().filter(|_| want(1)) {
        eprintln!("[1] overhead over the raw SDK: {}", spec.label());
        match run.overhead(spec, false).await {
            Ok(o) => res.overhead.push(o),
            Err(e) => res
                .notes
                .push(format!("figure 1, {}: failed: {e:#}", spec.label())),
        }
        if matches!(spec, Spec::Sqlite(_)) {
            match run.overhead(spec, true).await {
                Ok(o) => res.overhead.push(o),
                Err(e) => res
                    .notes
                    .push(format!("figure 1, {SQLITE_HOP}: failed: {e:#}")),
            }
        }
    }
    // The memory store, unless --stores leaves it out.
    let memory = Some(Spec::Memory).filter(|m| store_wanted(m.kind()));
    for spec in memory.iter().chain(&specs).filter(|_| want(2)) {
        eprintln!("[2] handoff: {}", spec.label());
        match run.handoff(spec).await {
            Ok(h) => res.handoff.push(h),
            Err(e) => res
                .notes
                .push(format!("figure 2, {}: failed: {e:#}", spec.label())),
        }
    }
    for spec in specs.iter().filter(|_| want(3)) {
        eprintln!("[3] contention: {}", spec.label());
        match run.contention(spec).await {
            Ok(c) => res.contention.push(c),
            Err(e) => res
                .notes
                .push(format!("figure 3, {}: failed: {e:#}", spec.label())),
        }
    }
    for spec in memory.iter().chain(&specs).filter(|_| want(4)) {
        // The emulators hold 1,000 (they are slow by nature); moto 200: one
        // Python process, it serves about 130 requests a second here (figure
        // 1), less than 1,000 leases' renewals ask (two requests each: 400 a
        // second); the embedded stores and real servers 10,000.
        let (n, ttl) = match spec {
            Spec::Memory | Spec::Sqlite(_) | Spec::Postgres(_) | Spec::Redis(_) | Spec::Etcd(_) => {
                (plan.many_local, plan.many_ttl_ms)
            }
            Spec::S3(_) => (plan.many_moto, plan.many_emulator_ttl_ms),
            Spec::Azblob(_) | Spec::Dynamodb(_) => (plan.many_emulator, plan.many_emulator_ttl_ms),
        };
        // The servers refuse TTLs under a second, etcd under two (a
        // --tiny run asks 600 ms).
        let ttl = match spec {
            Spec::Postgres(_) | Spec::Redis(_) => ttl.max(1_000),
            Spec::Etcd(_) => ttl.max(leasehold_etcd::MIN_TTL.as_millis() as u64),
            _ => ttl,
        };
        if n == 0 {
            continue;
        }
        eprintln!("[4] holding {n} leases: {}", spec.label());
        match run.many(spec, n, ttl).await {
            Ok(report) => res.many.push(Many {
                store: spec.label().into(),
                report,
            }),
            Err(e) => res
                .notes
                .push(format!("figure 4, {}: failed: {e:#}", spec.label())),
        }
    }
    if want(5) {
        eprintln!("[5] CLI vs flock");
        match run.cli().await {
            Ok(c) => res.cli = Some(c),
            Err(e) => res.notes.push(format!("figure 5: failed: {e:#}")),
        }
    }
    if !want(6) {
    } else if plan.peer_cycles_ms == 0 {
        res.notes
            .push("Peers (figure 6) are not run in a --tiny run.".into());
    } else {
        if args.venv.is_none() {
            res.notes.push(
                "Peers (figure 6): no --venv given, so the Python peers were not run.".into(),
            );
        }
        for spec in &specs {
            // etcd's peer is etcd's v3lock service, run by this binary; the
            // others are Python scripts. SQLite and S3 have no peer here.
            if matches!(spec, Spec::Sqlite(_) | Spec::S3(_))
                || (args.venv.is_none() && !matches!(spec, Spec::Etcd(_)))
            {
                continue;
            }
            eprintln!("[6] peer on {}", spec.label());
            match run.peer(spec, args.venv.as_deref(), &res).await {
                Ok(p) => res.peers.push(p),
                Err(e) => res
                    .notes
                    .push(format!("figure 6, {}: failed: {e:#}", spec.label())),
            }
        }
    }
    run.cleanup(&specs).await;
    let _ = std::fs::remove_dir_all(&dir);
    res.seconds = started.elapsed().as_secs_f64();

    std::fs::write(
        args.out.join("results.json"),
        serde_json::to_string_pretty(&res)?,
    )?;
    let png = args.out.join("benchmarks.png");
    if let Err(e) = crate::chart::draw(&res, &png) {
        res.notes.push(format!("chart: {e:#}"));
    }
    std::fs::write(
        args.out.join("benchmarks.md"),
        crate::report::markdown(&res),
    )?;
    eprintln!(
        "wrote {} and {} in {:.0} s",
        args.out.join("benchmarks.md").display(),
        png.display(),
        res.seconds
    );
    Ok(())
}

/// Writes results.json, benchmarks.png and benchmarks.md to `out`.
pub fn write(res: &mut Results, out: &Path) -> anyhow::Result<()> {
    std::fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(&res)?,
    )?;
    if let Err(e) = crate::chart::draw(res, &out.join("benchmarks.png")) {
        res.notes.push(format!("chart: {e:#}"));
    }
    std::fs::write(out.join("benchmarks.md"), crate::report::markdown(res))?;
    Ok(())
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpus} cores ({model}), Linux")
}

impl Run {
    /// `hop`: the raw SQLite loop makes one `spawn_blocking` call per
    /// transaction, as async code must.
    async fn overhead(&self, spec: &Spec, hop: bool) -> anyhow::Result<Overhead> {
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
                (RawLoop::dynamo(d.client().clone(), t), 2)
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
            Spec::Memory => bail!("no raw loop for memory"),
        };
        let phase = Duration::from_millis(self.plan.overhead_phase_ms);
        let max = self.plan.overhead_max_cycles;
        // Warm-up: connections, JIT (DynamoDB Local is a JVM), caches.
        let warm = phase / 2;
        lh_cycles(&lock, warm, max).await?;
        raw.run(warm, max).await?;
        let (mut lh_n, mut lh_t, mut lh_req) = (0u64, Duration::ZERO, 0u64);
        let (mut raw_n, mut raw_t, mut raw_req) = (0u64, Duration::ZERO, 0u64);
        let mut ratios = Vec::new();
        for round in 0..self.plan.overhead_rounds {
            let mut lh = (0, Duration::ZERO);
            let mut rw = (0, Duration::ZERO);
            for leasehold_first in [round % 2 == 0, round % 2 == 1] {
                if leasehold_first {
                    let r0 = opened.requests();
                    lh = lh_cycles(&lock, phase, max).await?;
                    lh_req += opened.requests() - r0;
                } else {
                    let r0 = raw.own_requests().unwrap_or_else(|| opened.requests());
                    rw = raw.run(phase, max).await?;
                    raw_req += raw.own_requests().unwrap_or_else(|| opened.requests()) - r0;
                }
            }
            lh_n += lh.0;
            lh_t += lh.1;
            raw_n += rw.0;
            raw_t += rw.1;
            ratios.push(rate(lh) / rate(rw));
        }
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
        })
    }

    async fn handoff(&self, spec: &Spec) -> anyhow::Result<Handoff> {
        let key = format!("bench-handoff-{}", uuid::Uuid::new_v4().simple());
        // The same process: holder and waiter tasks on one store.
        let opened = stores::open(spec, false).await?;
        first_grant(&opened, &key).await?;
        let start = mono_ns() + 50_000_000;
        let d = Duration::from_millis(self.plan.handoff_local_ms);
        let params = WaiterParams {
            key: key.clone(),
            tasks: 1,
            start_ns: start,
            duration_ms: self.plan.handoff_local_ms,
            rest_ms: 20,
            hold_ms: 0,
            max_acquisitions: 100_000,
        };
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
        let params = WaiterParams {
            key: key.clone(),
            tasks: 1,
            start_ns: start,
            duration_ms: self.plan.handoff_remote_ms,
            rest_ms: 200,
            hold_ms: 0,
            max_acquisitions: 100_000,
        };
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

    async fn contention(&self, spec: &Spec) -> anyhow::Result<Contention> {
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

    async fn many(&self, spec: &Spec, n: usize, ttl_ms: u64) -> anyhow::Result<ManyReport> {
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

    async fn cli(&self) -> anyhow::Result<Cli> {
        let bin = crate::sibling_binary("leasehold").ok_or_else(|| {
            anyhow!("no leasehold binary beside leasehold-bench (build -p leasehold-cli)")
        })?;
        let binary_bytes = std::fs::metadata(&bin).map(|m| m.len()).unwrap_or(0);
        let binary_profile = bin
            .parent()
            .and_then(|d| d.file_name())
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default();
        let db = self.dir.join("cli.db");
        let lockfile = self.dir.join("cli.lock");
        let store = format!("sqlite:{}", db.display());
        let time = |mut cmd: std::process::Command| -> anyhow::Result<f64> {
            let t = Instant::now();
            let status = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status()?;
            if !status.success() {
                bail!("{cmd:?} failed: {status}");
            }
            Ok(t.elapsed().as_secs_f64() * 1000.0)
        };
        let leasehold = move || {
            let mut c = std::process::Command::new(&bin);
            c.args(["--store", &store, "run", "bench-cli", "--", "true"]);
            c
        };
        let flock = move || {
            let mut c = std::process::Command::new("flock");
            c.arg(&lockfile).arg("true");
            c
        };
        let runs = self.plan.cli_runs;
        tokio::task::spawn_blocking(move || {
            time(leasehold())?; // creates the database
            time(flock())?;
            let (mut l, mut f) = (Vec::new(), Vec::new());
            for i in 0..runs {
                if i % 2 == 0 {
                    l.push(time(leasehold())?);
                    f.push(time(flock())?);
                } else {
                    f.push(time(flock())?);
                    l.push(time(leasehold())?);
                }
            }
            let (lm, fm) = (median(&l).unwrap_or(0.0), median(&f).unwrap_or(0.0));
            Ok(Cli {
                runs,
                leasehold_ms: lm,
                flock_ms: fm,
                ratio: lm / fm,
                binary_bytes,
                binary_profile,
            })
        })
        .await?
    }

    async fn peer(&self, spec: &Spec, venv: Option<&Path>, res: &Results) -> anyhow::Result<Peer> {
        let leasehold_cps = res
            .overhead
            .iter()
            .find(|o| o.store == spec.label())
            .map(|o| o.leasehold_cps);
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
            Spec::Redis(_) => ("redis_py_lock.py", "redis-py Lock (Python)"),
            Spec::Etcd(_) => ("", "etcd v3lock Lock/Unlock on a session lease (Rust)"),
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
        Ok(Peer {
            peer: peer.into(),
            store: spec.label().into(),
            peer_cps: out.cycles as f64 / out.seconds.max(1e-9),
            leasehold_cps,
            peer_requests_per_cycle: out.requests_per_cycle,
            peer_handoff,
            leasehold_handoff,
            note: out.note,
        })
    }

    fn spawn_worker(&self, spec: &Spec, p: &WaiterParams) -> anyhow::Result<tokio::process::Child> {
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

    async fn cleanup(&self, specs: &[Spec]) {
        for spec in specs {
            let result: anyhow::Result<()> = async {
                match spec {
                    Spec::Azblob(_) => {
                        let o = stores::open(spec, false).await?;
                        drop(o);
                        let b = leasehold_azure::AzureBackend::builder()
                            .container(match spec {
                                Spec::Azblob(c) => c.clone(),
                                _ => unreachable!(),
                            })
                            .connection_string(stores::azurite_connection_string())
                            .build()?;
                        b.delete_container().await?;
                    }
                    Spec::Dynamodb(table) => {
                        let o = stores::open(spec, false).await?;
                        if let Some(d) = &o.dynamo {
                            d.client().delete_table().table_name(table).send().await?;
                        }
                    }
                    Spec::Postgres(table) => {
                        let url = stores::postgres_url().unwrap_or_default();
                        let config = leasehold_postgres::PostgresBackendBuilder::from_url(&url)?
                            .config()
                            .clone();
                        let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                        let connection = tokio::spawn(connection);
                        client
                            .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
                            .await?;
                        drop(client);
                        let _ = connection.await;
                    }
                    Spec::Redis(prefix) => {
                        use leasehold_redis::redis;
                        let url = stores::redis_url().unwrap_or_default();
                        let base = url.split('?').next().unwrap_or(&url).to_string();
                        let mut conn = redis::Client::open(base)?
                            .get_multiplexed_async_connection()
                            .await?;
                        // Every key of the bench's store (its prefix is its own).
                        redis::Script::new(
                            "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end",
                        )
                        .arg(format!("{prefix}*"))
                        .invoke_async::<()>(&mut conn)
                        .await?;
                    }
                    Spec::Etcd(_) | Spec::S3(_) => {
                        // Every key or object of the bench's store (its
                        // prefix is its own); etcd's holder keys' etcd
                        // leases run out, S3's bucket stays.
                        let o = stores::open(spec, false).await?;
                        if let Some(e) = &o.etcd {
                            e.delete_store().await?;
                        }
                        if let Some(b) = &o.s3 {
                            b.delete_store().await?;
                        }
                    }
                    _ => {}
                }
                Ok(())
            }
            .await;
            if let Err(e) = result {
                eprintln!("cleanup of {}: {e:#}", spec.label());
            }
        }
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

fn rate((n, t): (u64, Duration)) -> f64 {
    n as f64 / t.as_secs_f64().max(1e-9)
}

async fn lh_cycles(
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
async fn first_grant(opened: &stores::Opened, key: &str) -> anyhow::Result<()> {
    let lock = opened.store.lock_with(key, LockOptions::new())?;
    lh_cycles(&lock, Duration::from_secs(5), 1).await?;
    Ok(())
}

fn spawn_json(mut cmd: tokio::process::Command) -> anyhow::Result<tokio::process::Child> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    cmd.spawn().with_context(|| format!("starting {cmd:?}"))
}

/// Waits for a child's JSON report, for at most its run time plus a minute.
async fn wait_json<T: serde::de::DeserializeOwned>(
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
