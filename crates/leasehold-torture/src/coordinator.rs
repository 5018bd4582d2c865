//! The coordinator: starts the holders, injects faults on a schedule, stops
//! everything when the time is up, and checks the witness log.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use leasehold::Store;
use rand::seq::IndexedRandom;
use rand::Rng;
use tokio::process::Command;

use std::net::SocketAddr;

use crate::check;
use crate::proxy::FaultProxy;
use crate::report::{self, RunMeta};
use crate::witness::{now_ns, Kind, Witness};

/// Fault kinds the coordinator can inject.
pub const FAULTS: &[&str] = &[
    "kill",
    "pause",
    "break",
    "loss",
    "restart",
    "partition",
    "delay",
    "reset",
    "loss-partition",
];

/// Faults that need the fault proxy (network stores only).
const NETWORK_FAULTS: &[&str] = &["partition", "delay", "reset"];

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The store to torture (sqlite:PATH, or a cloud store URL).
    #[arg(long)]
    pub store: String,
    /// How long to run.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Library worker processes.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Processes looping on `leasehold run`.
    #[arg(long, default_value_t = 2)]
    pub cli_workers: usize,
    /// Keys contended for.
    #[arg(long, default_value_t = 2)]
    pub keys: usize,
    /// Lease TTL.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
    /// Comma-separated fault kinds: kill (SIGKILL a holder, or the `leasehold
    /// run` process of one), pause (SIGSTOP a library holder or the
    /// `leasehold run` process of one for 1.5 TTL), break (break the key's
    /// lease; the store names the lease it ended), loss (the store loses its
    /// data: the SQLite file, the Azure container, the DynamoDB table is
    /// deleted; a new table is created), restart (run --restart-cmd: the
    /// store restarts with its state lost), and for network stores, through
    /// a fault proxy per holder: partition (blackhole for 1.5 TTL), delay
    /// (TTL/10 per chunk for 2 TTL), reset (RST every open connection).
    /// loss-partition: the store loses its data at the moment every holder
    /// is cut off from it (partitioned through its proxy for --cut-for on a
    /// network store; on SQLite, SIGSTOPped until another holder began after
    /// the loss, at most --cut-for), so
    /// that no holder of the lost data learns of the loss by renewing; the
    /// coordinator re-creates the store at once (with mixed max TTLs,
    /// alternately with the short and the long max TTL).
    #[arg(long, default_value = "kill,pause,break", value_delimiter = ',')]
    pub faults: Vec<String>,
    /// Library workers (of --workers) that keep writing for a random while
    /// after their guard said lost, as a buggy user would.
    #[arg(long, default_value_t = 2)]
    pub misbehaving: usize,
    /// `leasehold run` loops (of --cli-workers) whose command is a shell that
    /// forks two background workers writing to the witness.
    #[arg(long, default_value_t = 1)]
    pub forking: usize,
    /// Whether the pause fault also hits `leasehold run` holders (SIGSTOP of
    /// the `leasehold run` process while its command runs on).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub pause_run: bool,
    /// Inject a deliberate bug into the library workers' backend (to show
    /// the checker catches it): grant-held (now and then grant a key someone
    /// holds). A run with a bug must fail.
    #[arg(long)]
    pub inject_bug: Option<String>,
    /// Shell command that restarts the store with its state lost (for the
    /// restart fault), e.g. "scripts/azurite.sh stop && scripts/azurite.sh start".
    #[arg(long)]
    pub restart_cmd: Option<String>,
    /// Mixed max TTLs (issue 28): every second holder (lib-1, lib-3, ...,
    /// cli-1, ...) opens the store with this `max_ttl` in its URL instead of
    /// the store URL's, takes TTLs between half this and this, and holds a
    /// lease for three quarters to one and a half of its TTL. The store is first created
    /// with this max TTL, so that long leases exist when it is lost.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub long_max_ttl: Option<Duration>,
    /// How long the loss-partition fault cuts the holders off: two
    /// confirmation windows is enough for a new store's quarantine to end
    /// while a holder that trusted its lease for longer is still cut off.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub cut_for: Duration,
    /// Mean time between faults.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub fault_every: Duration,
    /// The `leasehold` binary (default: next to this one).
    #[arg(long)]
    pub leasehold: Option<PathBuf>,
    /// Where the witness keeps its files (default: a new temporary directory).
    #[arg(long)]
    pub witness: Option<PathBuf>,
    /// Also write the report (Markdown) to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// Opens a store URL the way the `leasehold` CLI does.
pub async fn open_store(url: &str) -> anyhow::Result<Store> {
    use anyhow::Context;
    leasehold_stores::open(Some(url))
        .await
        .with_context(|| format!("cannot open store {}", leasehold_stores::redact(url)))
}

/// Who holds a key now, as the witness log says.
#[derive(Debug, Clone)]
struct Holder {
    worker: String,
    token: u64,
    pid: u32,
    /// When its section began.
    since: u64,
}

#[derive(Default)]
struct Tracker {
    offset: u64,
    holders: HashMap<String, Holder>,
}

impl Tracker {
    fn update(&mut self, w: &Witness) {
        let Ok((records, offset)) = w.read_from(self.offset) else {
            return;
        };
        self.offset = offset;
        for r in records {
            match r.kind {
                Kind::Begin => {
                    self.holders.insert(
                        r.key.clone(),
                        Holder {
                            worker: r.worker,
                            token: r.token,
                            pid: r.pid,
                            since: r.t_ns,
                        },
                    );
                }
                Kind::End | Kind::Lost
                    if self
                        .holders
                        .get(&r.key)
                        .is_some_and(|h| h.token == r.token && h.worker == r.worker) =>
                {
                    self.holders.remove(&r.key);
                }
                _ => {}
            }
        }
    }
}

pub async fn run(mut args: RunArgs) -> anyhow::Result<std::process::ExitCode> {
    // `--faults ""` means none.
    args.faults.retain(|f| !f.trim().is_empty());
    if let Some(bug) = &args.inject_bug {
        anyhow::ensure!(
            crate::bug::BUGS.contains(&bug.as_str()),
            "unknown bug {bug:?}; known: {}",
            crate::bug::BUGS.join(", ")
        );
    }
    for f in &args.faults {
        anyhow::ensure!(
            FAULTS.contains(&f.as_str()),
            "unknown fault {f:?}; known: {}",
            FAULTS.join(", ")
        );
    }
    anyhow::ensure!(
        !args.faults.iter().any(|f| f == "restart") || args.restart_cmd.is_some(),
        "the restart fault needs --restart-cmd"
    );
    let me = std::env::current_exe()?;
    let leasehold = args
        .leasehold
        .clone()
        .unwrap_or_else(|| me.with_file_name("leasehold"));
    anyhow::ensure!(
        args.cli_workers == 0 || leasehold.exists(),
        "no leasehold binary at {} (build it, or pass --leasehold)",
        leasehold.display()
    );
    let witness_dir = match &args.witness {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("leasehold-torture-{}", std::process::id())),
    };
    std::fs::create_dir_all(&witness_dir)?;
    let witness = Witness::new(&witness_dir);
    if let Some(long) = args.long_max_ttl {
        anyhow::ensure!(long > args.ttl, "--long-max-ttl must be above --ttl");
        // The first epoch is a long one, so that long leases exist when it
        // is lost: begun before anything opens the store with the short
        // max TTL (opening a Redis store begins its epoch).
        recreate(&with_max_ttl(&args.store, long), args.ttl).await;
    }
    // Fails early on a bad URL; breaks leases for the break fault.
    let admin = open_store(&args.store).await?;

    let network = NETWORK_FAULTS
        .iter()
        .any(|f| args.faults.iter().any(|g| g == f));
    let upstream = match network {
        true => Some(
            upstream(&args.store)
                .context("network faults need a store reached over TCP on loopback")?,
        ),
        // The loss-partition fault partitions where it can (a network
        // store), and pauses the holders where it cannot (SQLite).
        false if args.faults.iter().any(|f| f == "loss-partition") => upstream(&args.store).ok(),
        false => None,
    };
    let old_window = args
        .inject_bug
        .as_deref()
        .is_some_and(crate::bug::removes_window);
    let mut routes = HashMap::new();
    for id in (0..args.workers)
        .map(|i| format!("lib-{i}"))
        .chain((0..args.cli_workers).map(|i| format!("cli-{i}")))
    {
        let mut route = match upstream {
            Some(up) => Route::through(&args.store, up, FaultProxy::start(up).await?)?,
            None => Route::direct(&args.store),
        };
        if let Some(long) = args.long_max_ttl.filter(|_| is_long(&args, &id)) {
            route.url = with_max_ttl(&route.url, long);
        }
        routes.insert(id, route);
    }
    let routes = Arc::new(routes);

    let started = now_ns();
    let until_ns = started + args.duration.as_nanos() as u64;
    let keys: Vec<String> = (0..args.keys.max(1))
        .map(|k| format!("torture/k{k}"))
        .collect();
    let cli_exits: Arc<Mutex<BTreeMap<i32, usize>>> = Arc::default();
    let cli_pids: CliPids = Arc::default();
    let mut tasks = Vec::new();

    for i in 0..args.workers {
        let route = routes[&format!("lib-{i}")].clone();
        let mut flags = Vec::new();
        if i < args.misbehaving {
            flags.push("--misbehave".to_string());
        }
        if let Some(bug) = args
            .inject_bug
            .as_ref()
            .filter(|b| crate::bug::wraps_backend(b))
        {
            flags.extend(["--inject-bug".to_string(), bug.clone()]);
        }
        if let Some(long) = args
            .long_max_ttl
            .filter(|_| is_long(&args, &format!("lib-{i}")))
        {
            flags.extend(["--ttl-max".to_string(), format!("{}ms", long.as_millis())]);
        }
        let (me, witness_dir, store, key, ttl) = (
            me.clone(),
            witness_dir.clone(),
            route.url.clone(),
            keys[i % keys.len()].clone(),
            args.ttl,
        );
        tasks.push(tokio::spawn(async move {
            // Restarted whenever it dies before the end (killed by a fault).
            while now_ns() < until_ns {
                let mut worker = Command::new(&me);
                if old_window {
                    worker.env_remove(WINDOW_VAR);
                }
                let status = worker
                    .args([
                        "worker",
                        "--store",
                        &store,
                        "--key",
                        &key,
                        "--id",
                        &format!("lib-{i}"),
                    ])
                    .arg("--witness")
                    .arg(&witness_dir)
                    .args([
                        "--ttl",
                        &format!("{}ms", ttl.as_millis()),
                        "--until-ns",
                        &until_ns.to_string(),
                    ])
                    .args(&flags)
                    .envs(route.env.clone())
                    .kill_on_drop(true)
                    .status()
                    .await;
                if let Ok(s) = status {
                    if !s.success() && s.code().is_some() {
                        eprintln!("lib-{i} exited with {s}");
                    }
                }
            }
        }));
    }
    for i in 0..args.cli_workers {
        let key = keys[(args.workers + i) % keys.len()].clone();
        let route = routes[&format!("cli-{i}")].clone();
        let (me, witness_dir, store, ttl, leasehold, exits, pids) = (
            me.clone(),
            witness_dir.clone(),
            route.url.clone(),
            args.ttl,
            leasehold.clone(),
            cli_exits.clone(),
            cli_pids.clone(),
        );
        let forking = i < args.forking;
        let id = format!("cli-{i}");
        let long = args.long_max_ttl.filter(|_| is_long(&args, &id));
        tasks.push(tokio::spawn(async move {
            while now_ns() < until_ns {
                let left = Duration::from_nanos(until_ns.saturating_sub(now_ns()));
                // A long holder asks for a long TTL one time in two (a
                // store begun with the short max TTL refuses it).
                let lease_ttl = match long {
                    Some(max) if rand::rng().random_ratio(1, 2) => {
                        crate::worker::long_ttl(ttl, max)
                    }
                    _ => ttl,
                };
                // One section in five outlives two TTLs, so that a pause or
                // a kill of its `leasehold run` leaves work that must be
                // stopped.
                let ticks = if lease_ttl > ttl {
                    // Not past the run's end.
                    let left = left.as_millis() / crate::worker::TICK.as_millis();
                    (crate::worker::long_ticks(lease_ttl) as u128).min(left.max(3))
                } else if rand::rng().random_ratio(1, 5) {
                    (ttl * 2).as_millis() / crate::worker::TICK.as_millis()
                } else {
                    rand::rng().random_range(3..12)
                };
                let mut child = Command::new(&leasehold);
                if old_window {
                    child.env_remove(WINDOW_VAR);
                }
                child
                    .args([
                        "--store",
                        &store,
                        "run",
                        "--ttl",
                        &format!("{}ms", lease_ttl.as_millis()),
                    ])
                    .args(["--grace", &format!("{}ms", (ttl / 4).as_millis())])
                    .args([
                        "--wait",
                        &format!("{}ms", left.min(ttl * 5).as_millis().max(1)),
                    ])
                    .args(["--owner", &id, &key, "--"]);
                if forking {
                    child
                        .args(["sh", "-c", FORKING_COMMAND])
                        .arg(&me)
                        .arg(&witness_dir)
                        .args([&id, &ticks.to_string()]);
                } else {
                    child
                        .arg(&me)
                        .args(["section", "--id", &id, "--ticks", &ticks.to_string()])
                        .arg("--witness")
                        .arg(&witness_dir);
                }
                let status = match child
                    .envs(route.env.clone())
                    .stderr(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                {
                    Ok(mut c) => {
                        if let Some(pid) = c.id() {
                            pids.lock().unwrap().insert(id.clone(), pid);
                        }
                        c.wait().await
                    }
                    Err(e) => Err(e),
                };
                let code = match status {
                    Ok(s) => s.code().unwrap_or_else(|| {
                        use std::os::unix::process::ExitStatusExt;
                        128 + s.signal().unwrap_or(0)
                    }),
                    Err(_) => -1,
                };
                *exits.lock().unwrap().entry(code).or_default() += 1;
            }
        }));
    }

    let orphans = inject_faults(&args, &witness, &admin, &cli_pids, until_ns, &routes).await;
    let orphaned_commands = orphans
        .iter()
        .map(|(n, _)| *n)
        .collect::<HashSet<_>>()
        .len();

    for t in tasks {
        let _ = tokio::time::timeout(args.ttl * 10 + Duration::from_secs(10), t).await;
    }
    let records = witness.read()?;
    let findings = check::check(&records, check::Limits::for_ttl(args.ttl));
    let meta = RunMeta {
        store: redact(&args.store),
        duration: args.duration,
        ttl: args.ttl,
        library_workers: args.workers,
        cli_workers: args.cli_workers,
        keys: keys.len(),
        orphaned_commands,
        orphans: orphans.into_iter().map(|(_, o)| o).collect(),
        cli_exits: cli_exits.lock().unwrap().clone(),
        misbehaving: args.misbehaving.min(args.workers),
        forking: args.forking.min(args.cli_workers),
        pause_run: args.pause_run,
        injected_bug: args.inject_bug.clone(),
        long_max_ttl: args.long_max_ttl,
    };
    std::fs::write(witness_dir.join("meta"), meta.to_lines())?;
    finish(&meta, &findings, args.report.as_deref())
}

/// Checks an earlier run's witness directory again.
pub fn recheck(
    dir: &std::path::Path,
    report: Option<&std::path::Path>,
) -> anyhow::Result<std::process::ExitCode> {
    let meta = std::fs::read_to_string(dir.join("meta"))
        .with_context(|| format!("no meta in {}", dir.display()))?;
    let meta = RunMeta::from_lines(&meta)?;
    let findings = check::check(&Witness::new(dir).read()?, check::Limits::for_ttl(meta.ttl));
    finish(&meta, &findings, report)
}

fn finish(
    meta: &RunMeta,
    findings: &check::Findings,
    report: Option<&std::path::Path>,
) -> anyhow::Result<std::process::ExitCode> {
    let text = report::render(meta, findings);
    println!("{text}");
    if let Some(path) = report {
        std::fs::write(path, &text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(if report::passed(meta, findings) {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}

/// Injects faults until `until_ns`; returns how many `leasehold run`
/// commands (any process of the command's tree) outlived their killed
/// leasehold by more than the checker's kill grace plus a second.
async fn inject_faults(
    args: &RunArgs,
    witness: &Witness,
    admin: &Store,
    cli_pids: &CliPids,
    until_ns: u64,
    routes: &HashMap<String, Route>,
) -> Vec<(usize, String)> {
    let mut tracker = Tracker::default();
    // (which kill, description) of every process found alive.
    let mut orphans = Vec::new();
    let mut kills = 0usize;
    let mut pauses = Vec::new();
    // Which max TTL the loss-partition fault re-creates the store with next
    // (mixed max TTLs): the first epoch was the long one.
    let mut recreate_long = false;
    // A loss-partition fault is due but no long holder holds yet.
    let mut waiting_for_long = false;
    // Let the holders get going first.
    tokio::time::sleep(args.ttl).await;
    while now_ns() + args.ttl.as_nanos() as u64 * 2 < until_ns && !args.faults.is_empty() {
        let pause = match waiting_for_long {
            true => Duration::from_millis(100),
            false => args.fault_every.mul_f64(rand::rng().random_range(0.5..1.5)),
        };
        waiting_for_long = false;
        tokio::time::sleep(pause).await;
        tracker.update(witness);
        let Some((key, holder)) = tracker
            .holders
            .iter()
            .map(|(k, h)| (k.clone(), h.clone()))
            .collect::<Vec<_>>()
            .choose(&mut rand::rng())
            .cloned()
        else {
            continue;
        };
        let is_cli = holder.worker.starts_with("cli-");
        // The process to signal: the `leasehold run` of a command, or the
        // library worker itself.
        let target = match is_cli {
            true => match cli_pids.lock().unwrap().get(&holder.worker) {
                Some(pid) => *pid,
                None => continue,
            },
            false => holder.pid,
        };
        let proxy = routes.get(&holder.worker).and_then(|r| r.proxy.clone());
        let kinds: Vec<&String> = args
            .faults
            .iter()
            .filter(|f| !(is_cli && !args.pause_run && *f == "pause"))
            .collect();
        let Some(kind) = kinds.choose(&mut rand::rng()).map(|s| s.as_str()) else {
            continue;
        };
        if kind == "loss-partition" {
            // With mixed max TTLs, only while a long holder holds, and
            // began its section less than a second ago (so that more than
            // a window of it is left): a loss with only short leases tests
            // nothing new.
            let recent = now_ns().saturating_sub(1_000_000_000);
            if args.long_max_ttl.is_some()
                && !tracker
                    .holders
                    .values()
                    .any(|h| is_long(args, &h.worker) && h.since >= recent)
            {
                // Looked at again soon.
                waiting_for_long = true;
                continue;
            }
            let recreate_with = match args.long_max_ttl {
                Some(long) if recreate_long => with_max_ttl(&args.store, long),
                _ => args.store.clone(),
            };
            recreate_long = !recreate_long;
            let for_ = args.cut_for;
            let cut_at = now_ns();
            let mut stopped = Vec::new();
            for (k, h) in &tracker.holders {
                let pid = match h.worker.starts_with("cli-") {
                    true => cli_pids
                        .lock()
                        .unwrap()
                        .get(&h.worker)
                        .copied()
                        .unwrap_or(0),
                    false => h.pid,
                };
                let _ = witness.fault(k, &h.worker, pid, h.token, kind);
                match routes.get(&h.worker).and_then(|r| r.proxy.clone()) {
                    Some(proxy) => {
                        proxy.blackhole();
                        pauses.push(tokio::spawn(async move {
                            tokio::time::sleep(for_).await;
                            proxy.heal();
                        }));
                    }
                    None => {
                        signal(pid, libc::SIGSTOP);
                        stopped.push((pid, h.worker.clone()));
                    }
                }
            }
            if !stopped.is_empty() {
                // Woken as soon as another holder began on the store after
                // the loss (its quarantine over), or after for_: a holder
                // still trusting its lease of the lost data then writes
                // beside the new store's holder. (A partitioned holder
                // needs no such help: it writes on while cut off.)
                let (w, from) = (witness.clone(), tracker.offset);
                pauses.push(tokio::spawn(async move {
                    let mut offset = from;
                    while now_ns() < cut_at + for_.as_nanos() as u64 {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        let Ok((records, next)) = w.read_from(offset) else {
                            continue;
                        };
                        offset = next;
                        if records.iter().any(|r| {
                            r.kind == Kind::Begin
                                && r.t_ns > cut_at
                                && !stopped.iter().any(|(_, s)| *s == r.worker)
                        }) {
                            // Let its section get going.
                            tokio::time::sleep(Duration::from_millis(30)).await;
                            break;
                        }
                    }
                    for (pid, _) in stopped {
                        signal(pid, libc::SIGCONT);
                    }
                }));
            }
            let _ = witness.bump_epoch(check::LOSS_BEGINS);
            if let Err(e) = lose_store(&args.store, &recreate_with).await {
                eprintln!("leasehold-torture: {kind}: {e:#}");
            }
            recreate(&recreate_with, args.ttl).await;
            let _ = witness.bump_epoch(check::STORE_LOST_CUT_OFF);
            continue;
        }
        if kind == "restart" || kind == "loss" {
            // Every key loses its holder; tokens start again (new epoch).
            for (k, h) in &tracker.holders {
                let _ = witness.fault(k, &h.worker, h.pid, h.token, kind);
            }
            // Tokens start again with the store's state: a new epoch for the
            // witness (a real resource would pair tokens with a store
            // generation the same way). Two of them: a transition epoch
            // begun before the store is lost (grants in it may come from
            // the old store or the fresh one; the checker does not order
            // their tokens), and the fresh store's, once the loss is done.
            let _ = witness.bump_epoch(check::LOSS_BEGINS);
            let lost = match kind {
                "loss" => lose_store(&args.store, &args.store).await,
                _ => {
                    let cmd = args.restart_cmd.as_deref().unwrap_or("true");
                    match Command::new("sh")
                        .args(["-c", cmd])
                        .stdout(std::process::Stdio::null())
                        .status()
                        .await
                    {
                        Ok(s) if s.success() => Ok(()),
                        other => Err(anyhow::anyhow!("the restart command failed: {other:?}")),
                    }
                }
            };
            if let Err(e) = lost {
                eprintln!("leasehold-torture: {kind}: {e:#}");
            }
            let _ = witness.bump_epoch(if kind == "loss" {
                check::STORE_LOST
            } else {
                check::STORE_RESTARTED
            });
            continue;
        }
        if kind == "kill" {
            // Dead: it writes nothing more (or, for a command that outlives
            // its `leasehold run`, it is no longer the holder to aim at).
            tracker.holders.remove(&key);
        }
        match kind {
            "kill" if is_cli => {
                let _ = witness.fault(&key, &holder.worker, target, holder.token, kind);
                // Everything the command started, taken before the kill
                // (afterwards they are re-parented and harder to find).
                let tree = descendants(target);
                signal(target, libc::SIGKILL);
                let grace = check::Limits::for_ttl(args.ttl).kill_grace + Duration::from_secs(1);
                let left = tokio::task::spawn_blocking(move || {
                    let deadline = std::time::Instant::now() + grace;
                    let mut left: Vec<u32> = tree;
                    while !left.is_empty() && std::time::Instant::now() < deadline {
                        left.retain(|p| alive(*p));
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    left.retain(|p| alive(*p));
                    left
                })
                .await
                .unwrap_or_default();
                if !left.is_empty() {
                    kills += 1;
                    for p in left {
                        let cmd = std::fs::read(format!("/proc/{p}/cmdline"))
                            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                            .unwrap_or_default();
                        // State and parent: a process stuck in the kernel
                        // (D) is not the same finding as one never signalled.
                        let stat = std::fs::read_to_string(format!("/proc/{p}/stat"))
                            .ok()
                            .and_then(|s| s.rfind(')').map(|i| s[i + 2..].to_string()))
                            .unwrap_or_default();
                        let mut stat = stat.split(' ');
                        let (state, ppid) =
                            (stat.next().unwrap_or("?"), stat.next().unwrap_or("?"));
                        let o = format!(
                            "{} token {}: pid {p} (state {state}, parent {ppid}) {:.1} s after the kill: {cmd}",
                            holder.worker,
                            holder.token,
                            grace.as_secs_f64(),
                        );
                        eprintln!("leasehold-torture: {o}");
                        orphans.push((kills, o));
                        signal(p, libc::SIGKILL);
                    }
                }
            }
            "kill" => {
                let _ = witness.fault(&key, &holder.worker, target, holder.token, kind);
                signal(target, libc::SIGKILL)
            }
            "pause" => {
                let _ = witness.fault(&key, &holder.worker, target, holder.token, kind);
                signal(target, libc::SIGSTOP);
                let for_ = args.ttl * 3 / 2;
                pauses.push(tokio::spawn(async move {
                    tokio::time::sleep(for_).await;
                    signal(target, libc::SIGCONT);
                }));
            }
            "partition" | "delay" | "reset" => {
                let Some(proxy) = proxy else { continue };
                let _ = witness.fault(&key, &holder.worker, target, holder.token, kind);
                let ttl = args.ttl;
                match kind {
                    "reset" => proxy.reset(),
                    "partition" => proxy.blackhole(),
                    _ => proxy.delay(ttl / 10),
                }
                let heal_after = if kind == "delay" {
                    ttl * 2
                } else {
                    ttl * 3 / 2
                };
                pauses.push(tokio::spawn(async move {
                    tokio::time::sleep(heal_after).await;
                    proxy.heal();
                }));
            }
            "break" => {
                // Recorded with the token of the lease the store says it
                // ended (0: none), at the time the break was sent.
                let sent = now_ns();
                let ended = match admin.break_lease(&key).await {
                    Ok(Some(h)) => h.fencing_token,
                    Ok(None) => 0,
                    Err(e) => {
                        eprintln!("leasehold-torture: break {key}: {e}");
                        0
                    }
                };
                let returned = format!("{kind} {} {}", check::BREAK_RETURNED, now_ns());
                let _ = witness.fault_at(sent, &key, &holder.worker, target, ended, &returned);
            }
            _ => {}
        }
    }
    for p in pauses {
        let _ = p.await;
    }
    orphans
}

/// The last `leasehold run` process started by each `cli-N` loop.
type CliPids = Arc<Mutex<HashMap<String, u32>>>;

/// The command a forking `leasehold run` holder runs: `begin`, then two
/// background jobs that tick, then `end` (sh's `$0` is this binary).
const FORKING_COMMAND: &str = r#"W="$1" ID="$2" T="$3"
"$0" section --witness "$W" --id "$ID" --ticks 0 --no-end || exit 1
"$0" section --witness "$W" --id "$ID" --ticks "$T" --no-begin --no-end &
"$0" section --witness "$W" --id "$ID" --ticks "$T" --no-begin --no-end &
wait
exec "$0" section --witness "$W" --id "$ID" --ticks 0 --no-begin"#;

/// The store loses every lease and fencing counter: the SQLite file is
/// deleted, the Azure container deleted (the backend creates it again on
/// use), the DynamoDB table deleted and created again, the PostgreSQL
/// table dropped, the Redis server flushed (FLUSHALL), the etcd prefix
/// deleted, the S3 store's objects deleted. A new DynamoDB table is created from `recreate_with`.
async fn lose_store(url: &str, recreate_with: &str) -> anyhow::Result<()> {
    if let Some(rest) = url.strip_prefix("sqlite:") {
        let rest = rest.split('?').next().unwrap_or(rest);
        let path = rest.strip_prefix("//").unwrap_or(rest);
        for suffix in ["", "-wal", "-shm", "-journal"] {
            match std::fs::remove_file(format!("{path}{suffix}")) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        Ok(())
    } else if url.starts_with("azblob://") {
        leasehold_azure::AzureBackend::from_url(url)
            .await?
            .delete_container()
            .await?;
        Ok(())
    } else if url.starts_with("dynamodb://") {
        let b = leasehold_dynamodb::DynamoDbBackend::from_url(url).await?;
        b.client()
            .delete_table()
            .table_name(b.table())
            .send()
            .await
            .context("delete table")?;
        // DeleteTable may return while the table is still being deleted:
        // the loss is done when the table is gone.
        for _ in 0..200 {
            match b
                .client()
                .describe_table()
                .table_name(b.table())
                .send()
                .await
            {
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|e| e.is_resource_not_found_exception()) =>
                {
                    break
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        // Opening it again creates the table (create_table is on by default).
        leasehold_dynamodb::DynamoDbBackend::from_url(recreate_with).await?;
        Ok(())
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        // The table dropped (the backend creates it again on use).
        let builder = leasehold_postgres::PostgresBackendBuilder::from_url(url)?;
        let (client, connection) = builder
            .config()
            .connect(leasehold_postgres::tokio_postgres::NoTls)
            .await?;
        let connection = tokio::spawn(connection);
        client
            .batch_execute(&format!("DROP TABLE IF EXISTS {}", builder.table_name()))
            .await
            .context("drop table")?;
        drop(client);
        let _ = connection.await;
        Ok(())
    } else if url.starts_with("redis://") || url.starts_with("rediss://") {
        // Everything flushed, as an administrator's FLUSHALL (or a restart
        // without persistence) would: the torture runs on a server of its
        // own. The backend starts a new epoch on its next use.
        use leasehold_redis::redis;
        let base = url.split('?').next().unwrap_or(url);
        let client = redis::Client::open(base).context("redis URL")?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("FLUSHALL")
            .query_async::<()>(&mut conn)
            .await
            .context("FLUSHALL")?;
        Ok(())
    } else if url.starts_with("etcd://") || url.starts_with("etcds://") {
        // Every key of the store's prefix deleted (an operator's `etcdctl
        // del --prefix`): the holders' etcd leases live on, their keys and
        // the epoch marker do not. The backend starts a new epoch on use.
        leasehold_etcd::EtcdBackend::from_url(url)
            .await?
            .delete_store()
            .await
            .context("delete the prefix")?;
        Ok(())
    } else if url.starts_with("s3://") {
        // Every object of the store deleted, the epoch marker first (an
        // operator's `aws s3 rm --recursive`). The backend starts a new
        // epoch on its next use.
        leasehold_s3::S3Backend::from_url(url)
            .await?
            .delete_store()
            .await
            .context("delete the store's objects")?;
        Ok(())
    } else {
        anyhow::bail!("no store-loss fault for {}", redact(url))
    }
}

/// The environment variable that sets a test build's confirmation window.
const WINDOW_VAR: &str = "LEASEHOLD_TEST_CONFIRMATION_WINDOW";

/// Whether a holder is a long one under mixed max TTLs: on every key, the
/// library workers of every second round (lib-i works on key i mod keys),
/// and every second `leasehold run` loop.
fn is_long(args: &RunArgs, worker: &str) -> bool {
    let Some((kind, n)) = worker.split_once('-') else {
        return false;
    };
    let Ok(n) = n.parse::<usize>() else {
        return false;
    };
    args.long_max_ttl.is_some()
        && match kind {
            "lib" => (n / args.keys.max(1)) % 2 == 1,
            _ => n % 2 == 1,
        }
}

/// `url` with `max_ttl=` (the store's max TTL if it begins a new epoch)
/// set to `max`.
fn with_max_ttl(url: &str, max: Duration) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut params: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("max_ttl="))
        .map(String::from)
        .collect();
    params.push(format!("max_ttl={}ms", max.as_millis()));
    format!("{base}?{}", params.join("&"))
}

/// Uses the store as the first process after a loss does, so that its new
/// epoch records `url`'s max TTL: one attempt on a key of its own (in
/// quarantine it grants nothing; a grant is released at once).
async fn recreate(url: &str, ttl: Duration) {
    let attempt = async {
        let store = open_store(url).await?;
        let lock = store.lock_with("torture/recreate", leasehold::LockOptions::new().ttl(ttl))?;
        if let Ok(guard) = lock.acquire_timeout(Duration::ZERO).await {
            let _ = guard.release().await;
        }
        anyhow::Ok(())
    };
    if let Err(e) = attempt.await {
        eprintln!("leasehold-torture: re-creating the store: {e:#}");
    }
}

/// Every process whose parent chain leads to `root` (from /proc).
fn descendants(root: u32) -> Vec<u32> {
    let mut parent: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(ppid) = ppid_of(pid) {
                parent.push((pid, ppid));
            }
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

fn ppid_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name in parentheses: state, then ppid.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

/// Whether `pid` is a live process (zombies count as dead).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat.get(i + 2..i + 3))
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    if pid > 1 {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

/// How one holder reaches the store: directly, or through its fault proxy.
#[derive(Clone)]
struct Route {
    url: String,
    env: Vec<(String, String)>,
    proxy: Option<FaultProxy>,
}

/// The environment's Azure connection string, or Azurite's development
/// account on its default port.
fn azure_connection_string() -> String {
    match std::env::var("AZURE_STORAGE_CONNECTION_STRING") {
        Ok(cs)
            if !cs.trim().eq_ignore_ascii_case("UseDevelopmentStorage=true") && !cs.is_empty() =>
        {
            cs
        }
        _ => leasehold_azure::dev_connection_string(10000),
    }
}

impl Route {
    fn direct(store: &str) -> Route {
        Route {
            url: store.to_string(),
            env: Vec::new(),
            proxy: None,
        }
    }

    /// The store's URL and environment with `upstream` replaced by the proxy.
    fn through(store: &str, upstream: SocketAddr, proxy: FaultProxy) -> anyhow::Result<Route> {
        let (from, to) = (upstream.to_string(), proxy.addr.to_string());
        let mut route = Route {
            url: store.replace(&from, &to),
            env: Vec::new(),
            proxy: Some(proxy),
        };
        if store.starts_with("azblob://") {
            route.env.push((
                "AZURE_STORAGE_CONNECTION_STRING".into(),
                azure_connection_string().replace(&from, &to),
            ));
        }
        Ok(route)
    }
}

/// The loopback address a network store is reached at.
fn upstream(store: &str) -> anyhow::Result<SocketAddr> {
    let authority = if store.starts_with("azblob://") {
        let cs = azure_connection_string();
        let endpoint = cs
            .split(';')
            .find_map(|kv| kv.strip_prefix("BlobEndpoint="))
            .context("the connection string has no BlobEndpoint")?
            .to_string();
        authority_of(&endpoint)
    } else if store.starts_with("dynamodb://") || store.starts_with("s3://") {
        let query = store.split_once('?').map(|(_, q)| q).unwrap_or("");
        let endpoint = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("endpoint="))
            .context("the store URL has no endpoint=")?;
        anyhow::ensure!(
            !endpoint.contains('%'),
            "give the endpoint unencoded for the fault proxy"
        );
        authority_of(endpoint)
    } else if store.starts_with("postgres://")
        || store.starts_with("postgresql://")
        || store.starts_with("redis://")
        || store.starts_with("etcd://")
    {
        // (An etcd URL names one endpoint here: the proxy stands for one
        // server.)
        let authority = authority_of(store);
        let host = authority
            .rsplit_once('@')
            .map(|(_, h)| h)
            .unwrap_or(&authority);
        anyhow::ensure!(
            host.contains(':'),
            "give the store URL a port for the fault proxy"
        );
        host.split('?').next().unwrap_or(host).to_string()
    } else {
        anyhow::bail!("{} is not reached over TCP", redact(store))
    };
    let addr: SocketAddr = authority
        .parse()
        .with_context(|| format!("{authority} is not IP:PORT"))?;
    anyhow::ensure!(
        addr.ip().is_loopback(),
        "fault injection targets loopback only, not {addr}"
    );
    Ok(addr)
}

fn authority_of(endpoint: &str) -> String {
    let rest = endpoint
        .split_once("://")
        .map(|(_, r)| r)
        .unwrap_or(endpoint);
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// The URL without its user info and query string (which may carry
/// credentials: a Redis or PostgreSQL password, an Azure SAS).
fn redact(url: &str) -> String {
    leasehold_stores::redact(url)
        .trim_end_matches("?***")
        .to_string()
}
