//! The coordinator: starts the holders, injects faults on a schedule, stops
//! everything when the time is up, and checks the witness log.

mod args;
mod faults;
mod procs;
mod route;
mod store;
mod tracker;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use rand::Rng;
use tokio::process::Command;

use crate::check;
use crate::proxy::FaultProxy;
use crate::report::{self, RunMeta};
use crate::witness::{now_ns, Witness};
use args::{is_long, NETWORK_FAULTS};
pub use args::{RunArgs, FAULTS};
use faults::{inject_faults, CliPids};
use route::{redact, upstream, Route};
pub use store::open_store;
use store::{recreate, settle, url_max_ttl, with_max_ttl};

pub async fn run(mut args: RunArgs) -> anyhow::Result<std::process::ExitCode> {
    // `--faults ""` means none.
    args.faults.retain(|f| !f.trim().is_empty());
    if let Some(bug) = &args.inject_bug {
        let known: Vec<&str> = crate::bug::BUGS
            .iter()
            .chain(crate::multi::BUGS)
            .copied()
            .collect();
        anyhow::ensure!(
            known.contains(&bug.as_str()),
            "unknown bug {bug:?}; known: {}",
            known.join(", ")
        );
        anyhow::ensure!(
            !crate::multi::BUGS.contains(&bug.as_str()) || (args.multi >= 2 && args.keys >= 2),
            "--inject-bug {bug} needs two multi-key workers (--multi 2) and two keys"
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
    anyhow::ensure!(
        !args.faults.iter().any(|f| f == "failover") || args.failover_cmd.is_some(),
        "the failover fault needs --failover-cmd"
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
    // A new store grants nothing for a window (its epoch's quarantine):
    // waited out before the run's clock starts, so that holders work from
    // the start, through the first TTL, which has no faults. Else, with
    // Azure's 15 s, faults began as the first grants did, and a fault on a
    // holder of the readers' key could keep it from every reader to the
    // end (a run with no read hold fails). The mixed variant keeps its
    // start: its first loss comes with the first long grant.
    if args.long_max_ttl.is_none() {
        settle(&admin, args.ttl).await;
    }

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
    anyhow::ensure!(
        !old_window || url_max_ttl(&args.store).is_some(),
        "--inject-bug old-window needs max_ttl= in the store URL (each holder's window is its URL's max TTL)"
    );
    let mut routes = HashMap::new();
    for id in (0..args.workers)
        .map(|i| format!("lib-{i}"))
        .chain((0..args.cli_workers).map(|i| format!("cli-{i}")))
        .chain((0..args.multi).map(|i| format!("multi-{i}")))
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
    // Numbered downwards, so that the keys that have readers (the first
    // ones) sort last: a multi-key writer takes them last, and holds their
    // writer side (which keeps new readers out) only once it has every
    // other key. Taken first, it kept the readers out while it waited for
    // the other keys: a Redis CI run got no read hold in 20 s, twice.
    let n = args.keys.max(1);
    let keys: Vec<String> = (0..n).map(|k| format!("torture/k{}", n - 1 - k)).collect();
    // Which key each holder works on, and the keys that have readers.
    let lib_key = |i: usize| keys[i % keys.len()].clone();
    let cli_key = |i: usize| keys[(args.workers + i) % keys.len()].clone();
    let read_keys: HashSet<String> = (0..args.readers.min(args.workers))
        .map(lib_key)
        .chain((0..args.shared_runs.min(args.cli_workers)).map(cli_key))
        .collect();
    let cli_exits: Arc<Mutex<BTreeMap<i32, usize>>> = Arc::default();
    let cli_pids: CliPids = Arc::default();
    let mut tasks = Vec::new();

    // A library worker process (`worker` or `multi-worker`), restarted
    // whenever it dies before the end.
    let spawn_worker = |subcommand, id, route: Route, flags| {
        let w = WorkerRun {
            me: me.clone(),
            subcommand,
            id,
            witness_dir: witness_dir.clone(),
            ttl: args.ttl,
            until_ns,
            own_window: url_max_ttl(&route.url).filter(|_| old_window),
        };
        worker_loop(w, route, flags)
    };
    for i in 0..args.workers {
        let route = routes[&format!("lib-{i}")].clone();
        let side = match i < args.readers {
            true => "read",
            false if read_keys.contains(&lib_key(i)) => "write",
            false => "lock",
        };
        let mut flags = vec!["--side".to_string(), side.to_string()];
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
        flags.extend(["--key".to_string(), lib_key(i)]);
        tasks.push(spawn_worker("worker", format!("lib-{i}"), route, flags));
    }
    for i in 0..args.multi {
        let id = format!("multi-{i}");
        let route = routes[&id].clone();
        // Every key, in an order of this worker's own: rotated by its
        // number, reversed for odd ones (the library must sort them). On
        // keys that readers share, even workers read and odd ones write:
        // two multi-key writers, each holding the readers' key while it
        // waits for later keys, kept a run's readers out for all of its
        // 20 s under the test command's load.
        // (Odd ones, writers and plain locks only, take their keys in one
        // request first on stores that can.)
        let side = if i % 2 == 0 { "read" } else { "write" };
        let mut order: Vec<String> = keys
            .iter()
            .map(|k| match read_keys.contains(k) {
                true => format!("{k}={side}"),
                false => k.clone(),
            })
            .collect();
        let turn = i % order.len();
        order.rotate_left(turn);
        if i % 2 == 1 {
            order.reverse();
        }
        let mut flags: Vec<String> = order
            .iter()
            .flat_map(|k| ["--key".into(), k.clone()])
            .collect();
        if let Some(bug) = args
            .inject_bug
            .as_ref()
            .filter(|b| crate::multi::BUGS.contains(&b.as_str()))
        {
            flags.extend(["--inject-bug".to_string(), bug.clone()]);
        }
        tasks.push(spawn_worker("multi-worker", id, route, flags));
    }
    if args.multi > 0 {
        let (admin, witness, keys) = (admin.clone(), witness.clone(), keys.clone());
        tasks.push(tokio::spawn(snapshots(admin, witness, keys, until_ns)));
    }
    for i in 0..args.cli_workers {
        let key = cli_key(i);
        let shared = i < args.shared_runs;
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
        let own_window = url_max_ttl(&store).filter(|_| old_window);
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
                if let Some(own) = own_window {
                    child.env(WINDOW_VAR, own.as_secs_f64().to_string());
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
                    .args(shared.then_some("--shared"))
                    .args(["--owner", &id, &key, "--"]);
                let shared = if shared { "--shared" } else { "" };
                if forking {
                    child
                        .args(["sh", "-c", FORKING_COMMAND])
                        .arg(&me)
                        .arg(&witness_dir)
                        .args([&id, &ticks.to_string(), shared]);
                } else {
                    child
                        .arg(&me)
                        .args(["section", "--id", &id, "--ticks", &ticks.to_string()])
                        .args((!shared.is_empty()).then_some(shared))
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
        readers: args.readers.min(args.workers),
        shared_runs: args.shared_runs.min(args.cli_workers),
        forking: args.forking.min(args.cli_workers),
        pause_run: args.pause_run,
        injected_bug: args.inject_bug.clone(),
        long_max_ttl: args.long_max_ttl,
        multi: args.multi,
    };
    std::fs::write(witness_dir.join("meta"), meta.to_lines())?;
    finish(&meta, &findings, args.report.as_deref())
}

/// A library worker process of the run (`worker` or `multi-worker`).
struct WorkerRun {
    me: std::path::PathBuf,
    subcommand: &'static str,
    id: String,
    witness_dir: std::path::PathBuf,
    ttl: Duration,
    until_ns: u64,
    /// The confirmation window to give it (the old-window bug).
    own_window: Option<Duration>,
}

/// Runs the worker `w` through `route` with its own `flags`, again
/// whenever it dies before the end (killed by a fault).
fn worker_loop(w: WorkerRun, route: Route, flags: Vec<String>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while now_ns() < w.until_ns {
            let mut worker = Command::new(&w.me);
            if let Some(own) = w.own_window {
                worker.env(WINDOW_VAR, own.as_secs_f64().to_string());
            }
            let status = worker
                .args([w.subcommand, "--store", &route.url, "--id", &w.id])
                .arg("--witness")
                .arg(&w.witness_dir)
                .args([
                    "--ttl",
                    &format!("{}ms", w.ttl.as_millis()),
                    "--until-ns",
                    &w.until_ns.to_string(),
                ])
                .args(&flags)
                .envs(route.env.clone())
                .kill_on_drop(true)
                .status()
                .await;
            if let Ok(s) = status {
                if !s.success() && s.code().is_some() {
                    eprintln!("{} exited with {s}", w.id);
                }
            }
        }
    })
}

/// Every [`SNAPSHOT_EVERY`] until `until_ns`, who holds each key with a
/// live lease, as the store says (one `inspect` per key), recorded as
/// [`Kind::Held`](crate::witness::Kind::Held) records: the liveness
/// checks' view of the multi-key workers' holds (see
/// [`crate::liveness`]).
async fn snapshots(admin: leasehold::Store, witness: Witness, keys: Vec<String>, until_ns: u64) {
    let mut n = 0u64;
    while now_ns() < until_ns {
        let sent = now_ns();
        let mut held = Vec::new();
        for key in &keys {
            if let Ok(info) = admin.inspect(key).await {
                if let Some(h) = info.holder {
                    if h.expires_in != Some(Duration::ZERO) {
                        let label = h.owner.label.unwrap_or_else(|| "-".into());
                        held.push((key, h.fencing_token, label));
                    }
                }
            }
        }
        let answered = now_ns();
        for (key, token, label) in held {
            let _ = witness.mark_at(
                answered,
                crate::witness::Kind::Held,
                key,
                token,
                &label,
                &format!("{n} {sent}"),
            );
        }
        n += 1;
        tokio::time::sleep(SNAPSHOT_EVERY).await;
    }
}

/// How often the coordinator snapshots the holders of the keys when
/// multi-key workers run.
const SNAPSHOT_EVERY: Duration = Duration::from_millis(200);

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

/// The command a forking `leasehold run` holder runs: `begin`, then two
/// background jobs that tick, then `end` (sh's `$0` is this binary; `$4`
/// is `--shared` under `leasehold run --shared`, else empty).
const FORKING_COMMAND: &str = r#"W="$1" ID="$2" T="$3" S="$4"
"$0" section --witness "$W" --id "$ID" --ticks 0 --no-end $S || exit 1
"$0" section --witness "$W" --id "$ID" --ticks "$T" --no-begin --no-end $S &
"$0" section --witness "$W" --id "$ID" --ticks "$T" --no-begin --no-end $S &
wait
exec "$0" section --witness "$W" --id "$ID" --ticks 0 --no-begin $S"#;

/// The environment variable that sets a test build's confirmation window.
const WINDOW_VAR: &str = "LEASEHOLD_TEST_CONFIRMATION_WINDOW";
