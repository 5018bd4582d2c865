//! The figures of docs/benchmarks.md, each measured side by side with its
//! comparison in the same run.

mod cleanup;
pub mod cli;
mod contention;
mod handoff;
mod harness;
mod many;
mod multi;
mod overhead;
mod peer;
mod rwlock;
mod wait_cost;

use std::path::Path;
use std::time::Instant;

use crate::results::{Cli, Many, Plan, Results, SQLITE_HOP};
use crate::stores::{self, Spec};
use crate::sys::{port_answers, url_answers};
use harness::Run;
pub use harness::RunArgs;

/// Figure 5 from the results.json of a run that measured it before the
/// servers started (`--cli-from`).
fn cli_before_servers(path: &Path) -> anyhow::Result<Cli> {
    use anyhow::Context;
    let mut cli = Results::read(path)?
        .cli
        .with_context(|| format!("{} has no figure 5", path.display()))?;
    cli.before_servers = true;
    Ok(cli)
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
        let azurite = stores::azurite_port();
        candidates.push((
            Spec::Azblob(format!("bench{tag}")),
            (!port_answers(azurite)).then(|| {
                format!(
                    "Azurite: nothing listens on 127.0.0.1:{azurite}; its figures are left out."
                )
            }),
        ));
        let dynamodb = stores::dynamodb_endpoint();
        candidates.push((
            Spec::Dynamodb(format!("leasehold_bench_{tag}")),
            (!url_answers(&dynamodb)).then(|| {
                format!("DynamoDB Local: nothing answers at {dynamodb}; its figures are left out.")
            }),
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
    for (spec, name, url, env) in [
        (
            Spec::Postgres(format!("leasehold_bench_{tag}")),
            "PostgreSQL",
            stores::postgres_url(),
            stores::POSTGRES_URL_ENV,
        ),
        (
            Spec::Mysql(format!("leasehold_bench_{tag}")),
            "MySQL",
            stores::mysql_url(),
            stores::MYSQL_URL_ENV,
        ),
        (
            Spec::Redis(format!("leasehold-bench-{tag}:")),
            "Redis",
            stores::redis_url(),
            stores::REDIS_URL_ENV,
        ),
        (
            Spec::Etcd(format!("leasehold-bench-{tag}/")),
            "etcd",
            stores::etcd_url(),
            stores::ETCD_URL_ENV,
        ),
        (
            Spec::Zookeeper(format!("/leasehold-bench-{tag}")),
            "ZooKeeper",
            stores::zookeeper_url(),
            stores::ZOOKEEPER_URL_ENV,
        ),
    ] {
        candidates.push((
            spec,
            url.is_none()
                .then(|| format!("{name}: no {env} given; its figures are left out.")),
        ));
    }

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
            | Spec::Mysql(_)
            | Spec::Redis(_)
            | Spec::Etcd(_)
            | Spec::S3(_)
            | Spec::Zookeeper(_) => {
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
        let overhead = run.overhead(spec, false).await;
        res.overhead
            .extend(noted(&mut res.notes, figure(1, spec), overhead));
        if matches!(spec, Spec::Sqlite(_)) {
            let overhead = run.overhead(spec, true).await;
            res.overhead.extend(noted(
                &mut res.notes,
                format!("figure 1, {SQLITE_HOP}"),
                overhead,
            ));
        }
    }
    // The memory store, unless --stores leaves it out.
    let memory = Some(Spec::Memory).filter(|m| store_wanted(m.kind()));
    for spec in memory.iter().chain(&specs).filter(|_| want(2)) {
        eprintln!("[2] handoff: {}", spec.label());
        let handoff = run.handoff(spec).await;
        res.handoff
            .extend(noted(&mut res.notes, figure(2, spec), handoff));
    }
    for spec in specs.iter().filter(|_| want(3)) {
        eprintln!("[3] contention: {}", spec.label());
        let contention = run.contention(spec).await;
        res.contention
            .extend(noted(&mut res.notes, figure(3, spec), contention));
    }
    for spec in memory.iter().chain(&specs).filter(|_| want(4)) {
        // The emulators hold 1,000 (they are slow by nature); moto 200: one
        // Python process, it serves about 130 requests a second here (figure
        // 1), less than 1,000 leases' renewals ask (two requests each: 400 a
        // second); the embedded stores and real servers 10,000.
        let (n, ttl) = match spec {
            Spec::Memory
            | Spec::Sqlite(_)
            | Spec::Postgres(_)
            | Spec::Mysql(_)
            | Spec::Redis(_)
            | Spec::Etcd(_)
            | Spec::Zookeeper(_) => (plan.many_local, plan.many_ttl_ms),
            Spec::S3(_) => (plan.many_moto, plan.many_emulator_ttl_ms),
            Spec::Azblob(_) | Spec::Dynamodb(_) => (plan.many_emulator, plan.many_emulator_ttl_ms),
        };
        // The servers refuse TTLs under a second, etcd under two (a
        // --tiny run asks 600 ms).
        let ttl = match spec {
            Spec::Postgres(_) | Spec::Mysql(_) | Spec::Redis(_) | Spec::Zookeeper(_) => {
                ttl.max(1_000)
            }
            Spec::Etcd(_) => ttl.max(leasehold_etcd::MIN_TTL.as_millis() as u64),
            _ => ttl,
        };
        if n == 0 {
            continue;
        }
        eprintln!("[4] holding {n} leases: {}", spec.label());
        let many = run.many(spec, n, ttl).await.map(|report| Many {
            store: spec.label().into(),
            report,
        });
        res.many
            .extend(noted(&mut res.notes, figure(4, spec), many));
    }
    if !want(5) {
    } else if let Some(path) = &args.cli_from {
        eprintln!("[5] CLI vs flock: as measured before the servers started");
        res.cli = noted(&mut res.notes, "figure 5".into(), cli_before_servers(path));
    } else {
        eprintln!("[5] CLI vs flock");
        let cli = run.cli().await;
        res.cli = noted(&mut res.notes, "figure 5".into(), cli);
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
            let peer = run.peer(spec, args.venv.as_deref(), &res).await;
            res.peers
                .extend(noted(&mut res.notes, figure(6, spec), peer));
        }
    }
    // A --tiny run only checks that the figure runs: on SQLite alone (the
    // other stores would add seconds each to the test command).
    let tiny_store = |spec: &&Spec| !args.tiny || matches!(spec, Spec::Sqlite(_));
    for spec in specs.iter().filter(|_| want(9)).filter(tiny_store) {
        eprintln!(
            "[9] reader-writer lock, a writer among readers: {}",
            spec.label()
        );
        let rw = run.rw_lock(spec).await;
        res.rw_lock
            .extend(noted(&mut res.notes, figure(9, spec), rw));
    }
    for spec in specs.iter().filter(|_| want(16)).filter(tiny_store) {
        eprintln!("[16] several keys at once: {}", spec.label());
        let multi = run.multi_key(spec).await;
        res.multi_key.extend(
            noted(&mut res.notes, figure(16, spec), multi)
                .into_iter()
                .flatten(),
        );
    }
    if want(15) {
        // Every store at once: the figure is minutes of waiting.
        let stores: Vec<Spec> = specs.iter().filter(tiny_store).cloned().collect();
        eprintln!(
            "[15] what a long wait costs: {} s, every store at once",
            plan.wait_cost_ms / 1000
        );
        for (what, row) in run.wait_cost(&stores).await {
            res.wait_cost.extend(noted(&mut res.notes, what, row));
        }
    }
    cleanup::cleanup(&specs).await;
    let _ = std::fs::remove_dir_all(&dir);
    res.seconds = started.elapsed().as_secs_f64();

    write(&mut res, &args.out)?;
    let png = args.out.join("benchmarks.png");
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
    let page = out.join("benchmarks.md");
    let mut markdown = crate::report::markdown(res);
    if let Ok(old) = std::fs::read_to_string(&page) {
        markdown = keep_hand_written(&old, &markdown);
    }
    std::fs::write(page, markdown)?;
    Ok(())
}

/// Marks where a page's hand-written sections begin (measurements the
/// script does not make, such as section 10's). Everything from it to the
/// "Reproduce" section is kept when the page is written again.
const HAND_WRITTEN: &str =
    "<!-- Hand-written sections: kept when scripts/bench.sh writes this page again. -->";

/// `new` (a page just generated) with the hand-written sections of `old`
/// (the page it replaces) put back in front of its "Reproduce" section.
fn keep_hand_written(old: &str, new: &str) -> String {
    const REPRODUCE: &str = "## Reproduce";
    let Some(start) = old.find(HAND_WRITTEN) else {
        return new.to_string();
    };
    let kept = &old[start..];
    let kept = kept.find(REPRODUCE).map_or(kept, |end| &kept[..end]);
    match new.find(REPRODUCE) {
        Some(at) => format!("{}{kept}{}", &new[..at], &new[at..]),
        None => format!("{new}\n{kept}"),
    }
}

/// `result`'s value; or none, and a note that `what` failed.
/// How a note names figure `n`'s measurement of `spec`: "figure 2, sqlite".
fn figure(n: u8, spec: &Spec) -> String {
    format!("figure {n}, {}", spec.label())
}

fn noted<T>(notes: &mut Vec<String>, what: String, result: anyhow::Result<T>) -> Option<T> {
    result
        .map_err(|e| notes.push(format!("{what}: failed: {e:#}")))
        .ok()
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

#[cfg(test)]
mod tests {
    use super::{keep_hand_written, HAND_WRITTEN};

    #[test]
    fn hand_written_sections_survive_a_new_page() {
        let old = format!(
            "# B\n\n## 1. Old\n\nold numbers\n\n{HAND_WRITTEN}\n\n## 10. By hand\n\nkept\n\n## Reproduce\n\nold steps\n"
        );
        let new = "# B\n\n## 1. New\n\nnew numbers\n\n## Reproduce\n\nnew steps\n";
        let page = keep_hand_written(&old, new);
        assert_eq!(
            page,
            format!(
                "# B\n\n## 1. New\n\nnew numbers\n\n{HAND_WRITTEN}\n\n## 10. By hand\n\nkept\n\n## Reproduce\n\nnew steps\n"
            )
        );
        // A page without the mark keeps nothing of the old one.
        assert_eq!(keep_hand_written("# B\n\n## 10. By hand\n", new), new);
    }

    /// `write` itself keeps them, as `scripts/bench.sh` calls it.
    #[test]
    fn writing_the_page_again_keeps_its_hand_written_sections() {
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("benchmarks.md");
        let by_hand = "## 10. By hand\n\nmeasured once\n\n";
        std::fs::write(
            &page,
            format!("# Old\n\n{HAND_WRITTEN}\n\n{by_hand}## Reproduce\n"),
        )
        .unwrap();
        super::write(&mut crate::results::Results::default(), dir.path()).unwrap();
        let written = std::fs::read_to_string(&page).unwrap();
        let kept = written
            .find(by_hand)
            .expect("the hand-written section kept");
        assert!(kept < written.find("## Reproduce").unwrap(), "{written}");
        assert!(!written.contains("# Old"), "{written}");
    }
}
