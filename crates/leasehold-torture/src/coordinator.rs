//! The coordinator: starts the holders, injects faults on a schedule, stops
//! everything when the time is up, and checks the witness log.

use std::collections::{BTreeMap, HashMap};
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
    "restart",
    "partition",
    "delay",
    "reset",
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
    /// run` process of one), pause (SIGSTOP a library holder for 1.5 TTL),
    /// break (`leasehold break`), restart (run --restart-cmd: the store
    /// restarts with its state lost), and for network stores, through a
    /// fault proxy per holder: partition (blackhole for 1.5 TTL), delay
    /// (TTL/10 per chunk for 2 TTL), reset (RST every open connection).
    #[arg(long, default_value = "kill,pause,break", value_delimiter = ',')]
    pub faults: Vec<String>,
    /// Shell command that restarts the store with its state lost (for the
    /// restart fault), e.g. "scripts/azurite.sh stop && scripts/azurite.sh start".
    #[arg(long)]
    pub restart_cmd: Option<String>,
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
    leasehold_cli::stores::open(Some(url)).await
}

/// Who holds a key now, as the witness log says.
#[derive(Debug, Clone)]
struct Holder {
    worker: String,
    token: u64,
    pid: u32,
    ppid: u32,
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
                            ppid: r.ppid,
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

pub async fn run(args: RunArgs) -> anyhow::Result<std::process::ExitCode> {
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
        leasehold.exists(),
        "no leasehold binary at {} (build it, or pass --leasehold)",
        leasehold.display()
    );
    let witness_dir = match &args.witness {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("leasehold-torture-{}", std::process::id())),
    };
    std::fs::create_dir_all(&witness_dir)?;
    let witness = Witness::new(&witness_dir);
    open_store(&args.store).await?; // fail early on a bad URL

    let network = NETWORK_FAULTS
        .iter()
        .any(|f| args.faults.iter().any(|g| g == f));
    let upstream = match network {
        true => Some(
            upstream(&args.store)
                .context("network faults need a store reached over TCP on loopback")?,
        ),
        false => None,
    };
    let mut routes = HashMap::new();
    for id in (0..args.workers)
        .map(|i| format!("lib-{i}"))
        .chain((0..args.cli_workers).map(|i| format!("cli-{i}")))
    {
        let route = match upstream {
            Some(up) => Route::through(&args.store, up, FaultProxy::start(up).await?)?,
            None => Route::direct(&args.store),
        };
        routes.insert(id, route);
    }
    let routes = Arc::new(routes);

    let started = now_ns();
    let until_ns = started + args.duration.as_nanos() as u64;
    let keys: Vec<String> = (0..args.keys.max(1))
        .map(|k| format!("torture/k{k}"))
        .collect();
    let cli_exits: Arc<Mutex<BTreeMap<i32, usize>>> = Arc::default();
    let mut tasks = Vec::new();

    for i in 0..args.workers {
        let route = routes[&format!("lib-{i}")].clone();
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
                let status = Command::new(&me)
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
        let (me, witness_dir, store, ttl, leasehold, exits) = (
            me.clone(),
            witness_dir.clone(),
            route.url.clone(),
            args.ttl,
            leasehold.clone(),
            cli_exits.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while now_ns() < until_ns {
                let left = Duration::from_nanos(until_ns.saturating_sub(now_ns()));
                let ticks = rand::rng().random_range(3..12).to_string();
                let status = Command::new(&leasehold)
                    .args([
                        "--store",
                        &store,
                        "run",
                        "--ttl",
                        &format!("{}ms", ttl.as_millis()),
                    ])
                    .args(["--grace", &format!("{}ms", (ttl / 4).as_millis())])
                    .args([
                        "--wait",
                        &format!("{}ms", left.min(ttl * 5).as_millis().max(1)),
                    ])
                    .args(["--owner", &format!("cli-{i}"), &key, "--"])
                    .arg(&me)
                    .args(["section", "--id", &format!("cli-{i}"), "--ticks", &ticks])
                    .arg("--witness")
                    .arg(&witness_dir)
                    .envs(route.env.clone())
                    .stderr(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .status()
                    .await;
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

    let orphans = inject_faults(&args, &witness, &leasehold, until_ns, &routes).await;

    for t in tasks {
        let _ = tokio::time::timeout(args.ttl * 10 + Duration::from_secs(10), t).await;
    }
    let records = witness.read()?;
    let findings = check::check(&records);
    let meta = RunMeta {
        store: redact(&args.store),
        duration: args.duration,
        ttl: args.ttl,
        library_workers: args.workers,
        cli_workers: args.cli_workers,
        keys: keys.len(),
        orphaned_commands: orphans,
        cli_exits: cli_exits.lock().unwrap().clone(),
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
    let findings = check::check(&Witness::new(dir).read()?);
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
/// commands outlived their killed leasehold.
async fn inject_faults(
    args: &RunArgs,
    witness: &Witness,
    leasehold: &PathBuf,
    until_ns: u64,
    routes: &HashMap<String, Route>,
) -> usize {
    let mut tracker = Tracker::default();
    let mut orphans = 0;
    let mut pauses = Vec::new();
    // Let the holders get going first.
    tokio::time::sleep(args.ttl).await;
    while now_ns() + args.ttl.as_nanos() as u64 * 2 < until_ns && !args.faults.is_empty() {
        let pause = args.fault_every.mul_f64(rand::rng().random_range(0.5..1.5));
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
        let proxy = routes.get(&holder.worker).and_then(|r| r.proxy.clone());
        let kinds: Vec<&String> = args
            .faults
            .iter()
            .filter(|f| !(is_cli && *f == "pause"))
            .collect();
        let Some(kind) = kinds.choose(&mut rand::rng()).map(|s| s.as_str()) else {
            continue;
        };
        if kind == "restart" {
            // Every key loses its holder; tokens start again (new epoch).
            for (k, h) in &tracker.holders {
                let _ = witness.fault(k, &h.worker, h.pid, kind);
            }
            let cmd = args.restart_cmd.as_deref().unwrap_or("true");
            let ok = Command::new("sh")
                .args(["-c", cmd])
                .stdout(std::process::Stdio::null())
                .status()
                .await;
            if !ok.is_ok_and(|s| s.success()) {
                eprintln!("leasehold-torture: the restart command failed");
            }
            // Tokens start again with the store's state: a new epoch for the
            // witness (a real resource would pair tokens with a store
            // generation the same way).
            let _ = witness.bump_epoch("store restarted");
            continue;
        }
        let _ = witness.fault(&key, &holder.worker, holder.pid, kind);
        match kind {
            "kill" if is_cli => {
                signal(holder.ppid, libc::SIGKILL);
                let child = holder.pid as i32;
                let gone =
                    tokio::task::spawn_blocking(move || wait_gone(child, Duration::from_secs(2)))
                        .await
                        .unwrap_or(false);
                if !gone {
                    orphans += 1;
                    signal(holder.pid, libc::SIGKILL);
                }
            }
            "kill" => signal(holder.pid, libc::SIGKILL),
            "pause" => {
                signal(holder.pid, libc::SIGSTOP);
                let (pid, for_) = (holder.pid, args.ttl * 3 / 2);
                pauses.push(tokio::spawn(async move {
                    tokio::time::sleep(for_).await;
                    signal(pid, libc::SIGCONT);
                }));
            }
            "partition" | "delay" | "reset" => {
                let Some(proxy) = proxy else { continue };
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
                let _ = Command::new(leasehold)
                    .args(["--store", &args.store, "break", &key])
                    .stdout(std::process::Stdio::null())
                    .status()
                    .await;
            }
            _ => {}
        }
    }
    for p in pauses {
        let _ = p.await;
    }
    orphans
}

fn signal(pid: u32, sig: libc::c_int) {
    if pid > 1 {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

/// Waits until process `pid` has ended (pidfd), up to `timeout`.
fn wait_gone(pid: i32, timeout: Duration) -> bool {
    // SAFETY: plain syscalls; the fd is closed before returning.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        if fd < 0 {
            return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let n = libc::poll(&mut pfd, 1, timeout.as_millis() as i32);
        libc::close(fd);
        n == 1
    }
}

/// How one holder reaches the store: directly, or through its fault proxy.
#[derive(Clone)]
struct Route {
    url: String,
    env: Vec<(String, String)>,
    proxy: Option<FaultProxy>,
}

/// Azurite's well-known development account (public, not a secret).
const AZURITE_DEV: &str = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;";

fn azure_connection_string() -> String {
    match std::env::var("AZURE_STORAGE_CONNECTION_STRING") {
        Ok(cs)
            if !cs.trim().eq_ignore_ascii_case("UseDevelopmentStorage=true") && !cs.is_empty() =>
        {
            cs
        }
        _ => AZURITE_DEV.to_string(),
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
    } else if store.starts_with("dynamodb://") {
        let query = store.split_once('?').map(|(_, q)| q).unwrap_or("");
        let endpoint = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("endpoint="))
            .context("the dynamodb URL has no endpoint=")?;
        anyhow::ensure!(
            !endpoint.contains('%'),
            "give the endpoint unencoded for the fault proxy"
        );
        authority_of(endpoint)
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

/// The URL without a query string (which may carry credentials).
fn redact(url: &str) -> String {
    url.split_once('?')
        .map(|(b, _)| b)
        .unwrap_or(url)
        .to_string()
}
