//! The one-screen summary that opens docs/benchmarks.md: what is measured,
//! the run's figures store by store, which targets it missed, and how to
//! reproduce it. Made from the same [`Results`] as the sections below it
//! (and with their verdicts), so every run writes it again.

use std::fmt::Write as _;

use crate::report::{
    contention_ok, handoff_target_ms, many_ok, overhead_ok, rw_lock_ok, verdict, wait_cost_ok,
    writer_longest_ms, CLI_TARGET, ETCD_PEER_CYCLES_TARGET,
};
use crate::results::{Results, SQLITE_HOP};

/// One target of one figure, met or not: "figure 2, etcd, same process".
struct Target {
    what: String,
    met: bool,
}

/// Every target the run's figures have, in the page's order (`python`:
/// section 8's, measured apart).
fn targets(r: &Results, python: &[(String, bool)]) -> Vec<Target> {
    let mut t = Vec::new();
    let mut add = |what: String, met: bool| t.push(Target { what, met });
    for o in &r.overhead {
        if let Some(met) = overhead_ok(o) {
            add(
                format!("1 ({}: {:.2}× the raw loop)", o.store, o.ratio),
                met,
            );
        }
    }
    for h in &r.handoff {
        if let Some(l) = h.same_process {
            add(
                format!("2 ({}, same process: p50 {:.2} ms)", h.store, l.p50_ms),
                l.p50_ms < 1.0,
            );
        }
        if let Some(l) = h.other_process {
            add(
                format!("2 ({}, other process: p50 {:.1} ms)", h.store, l.p50_ms),
                l.p50_ms < handoff_target_ms(&h.store),
            );
        }
        if !h.waiting_requests.is_empty() {
            add(
                format!("2 ({}, a waiting process's requests/s)", h.store),
                h.waiting_requests.iter().all(|(_, v)| *v <= 20.0),
            );
        }
    }
    for c in &r.contention {
        add(format!("3 ({})", c.store), contention_ok(c));
    }
    for m in &r.many {
        add(format!("4 ({})", m.store), many_ok(&m.report));
    }
    if let Some(c) = &r.cli {
        add(
            format!("5 ({:.2}× `flock`)", c.ratio),
            c.ratio <= CLI_TARGET,
        );
    }
    for p in r.peers.iter().filter(|p| p.store == "etcd") {
        if let Some(ratio) = p.ratio.or(p.leasehold_cps.map(|l| l / p.peer_cps)) {
            add(
                format!("6 (etcd: {ratio:.2}× the peer's cycles)"),
                ratio >= ETCD_PEER_CYCLES_TARGET,
            );
        }
        if let (Some(ours), Some(theirs)) = (p.leasehold_handoff, p.peer_handoff) {
            add(
                format!(
                    "6 (etcd: handoff p50 {:.2} ms against the peer's {:.2} ms)",
                    ours.p50_ms, theirs.p50_ms
                ),
                ours.p50_ms <= theirs.p50_ms,
            );
        }
    }
    // Issue 55's "PostgreSQL handoff within one commit of the advisory
    // lock's": a grant that carries a fencing token and survives a crash is
    // a commit, which an advisory unlock is not (section 10). One commit is
    // the raw loop's time per transaction in figure 1 (a write and its
    // commit, on the same server in the same run).
    let pg_commit_ms = r
        .overhead
        .iter()
        .find(|o| o.store == "PostgreSQL" && o.raw_cps > 0.0 && o.raw_requests_per_cycle > 0.0)
        .map(|o| 1000.0 / (o.raw_cps * o.raw_requests_per_cycle));
    for p in r.peers.iter().filter(|p| p.store == "PostgreSQL") {
        if let (Some(ours), Some(theirs), Some(commit)) =
            (p.leasehold_handoff, p.peer_handoff, pg_commit_ms)
        {
            add(
                format!(
                    "6 (PostgreSQL: handoff p50 {:.2} ms against the advisory lock's {:.2} ms + one commit, {:.2} ms)",
                    ours.p50_ms, theirs.p50_ms, commit
                ),
                ours.p50_ms <= theirs.p50_ms + commit,
            );
        }
    }
    for (what, met) in python {
        add(what.clone(), *met);
    }
    for f in &r.rw_lock {
        add(format!("9 ({})", f.store), rw_lock_ok(f));
    }
    for w in &r.wait_cost {
        if let Some(met) = wait_cost_ok(r, w) {
            add(
                format!("15 ({}: {:.2} requests/s)", w.store, w.requests_per_s),
                met,
            );
        }
    }
    t
}

/// Section 8's targets (issue 55), from the figures `scripts/python-bench.py`
/// wrote beside the section (docs/python-bench.json; measured apart, so
/// they are named with their date): Python ≥ 0.95× the Rust loop on each
/// store, and ≥ 1× redis-py's `Lock`.
fn python_targets() -> Vec<(String, bool)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/python-bench.json");
    std::fs::read_to_string(path).map_or_else(|_| Vec::new(), |text| python_targets_of(&text))
}

/// [`python_targets`] from the file's text.
fn python_targets_of(text: &str) -> Vec<(String, bool)> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    let when = v["date"].as_str().unwrap_or("undated");
    let mut out = Vec::new();
    for row in v["stores"].as_array().into_iter().flatten() {
        if let (Some(store), Some(ratio)) = (row["store"].as_str(), row["ratio"].as_f64()) {
            out.push((
                format!("8 (Python on {store}: {ratio:.2}× the Rust loop, measured {when})"),
                ratio >= 0.95,
            ));
        }
    }
    for row in v["peers"].as_array().into_iter().flatten() {
        if let (Some("redis-py Lock"), Some(ratio)) = (row["peer"].as_str(), row["ratio"].as_f64())
        {
            out.push((
                format!("8 (Python: {ratio:.2}× redis-py's `Lock`, measured {when})"),
                ratio >= 1.0,
            ));
        }
    }
    out
}

/// The stores of the run, in the order the figures first name them.
fn stores(r: &Results) -> Vec<String> {
    let names = r
        .overhead
        .iter()
        .map(|o| &o.store)
        .chain(r.handoff.iter().map(|h| &h.store))
        .chain(r.contention.iter().map(|c| &c.store))
        .chain(r.many.iter().map(|m| &m.store))
        .chain(r.rw_lock.iter().map(|f| &f.store));
    let mut out: Vec<String> = Vec::new();
    for name in names {
        if name != SQLITE_HOP && !out.contains(name) {
            out.push(name.clone());
        }
    }
    out
}

/// One store's row of the summary table.
fn row(r: &Results, store: &str) -> String {
    let overhead = match r.overhead.iter().find(|o| o.store == store) {
        Some(o) => match r.overhead.iter().find(|h| h.store == SQLITE_HOP) {
            Some(hop) if store == "SQLite" => {
                format!("{:.2}× (in async code {:.2}×)", o.ratio, hop.ratio)
            }
            _ => format!("{:.2}×", o.ratio),
        },
        None => "–".into(),
    };
    let handoff = r.handoff.iter().find(|h| h.store == store).map_or_else(
        || "–".into(),
        |h| {
            let p50 = |l: Option<crate::stats::Latency>| {
                l.map_or("–".into(), |l| format!("{:.2}", l.p50_ms))
            };
            format!("{} / {} ms", p50(h.same_process), p50(h.other_process))
        },
    );
    let contention = r.contention.iter().find(|c| c.store == store).map_or_else(
        || "–".into(),
        |c| format!("{:.0}, {:.0} ms", c.passes_per_s, c.longest_wait_ms),
    );
    let many = r.many.iter().find(|m| m.store == store).map_or_else(
        || "–".into(),
        |m| format!("{}, {}", m.report.leases, verdict(many_ok(&m.report))),
    );
    let rw = r.rw_lock.iter().find(|f| f.store == store).map_or_else(
        || "–".into(),
        |f| format!("{:.0} ms ({:.0} ms)", writer_longest_ms(f), f.bound_ms),
    );
    format!("| {store} | {overhead} | {handoff} | {contention} | {many} | {rw} |")
}

/// The date of a Unix time, `YYYY-MM-DD` (UTC; days to civil date, as in
/// Howard Hinnant's `civil_from_days`).
fn date(unix: u64) -> String {
    let z = (unix / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The summary section, with section 8's targets from
/// docs/python-bench.json.
pub fn markdown(r: &Results) -> String {
    markdown_with(r, &python_targets())
}

/// The summary section, with section 8's targets `python`.
fn markdown_with(r: &Results, python: &[(String, bool)]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Summary\n");
    let when = match r.started_unix {
        0 => String::new(),
        t => format!(" of {}", date(t)),
    };
    let _ = writeln!(
        s,
        "What is measured: leasehold on every store, each figure side by side with what it is \
compared to: an uncontended lock's cycles against a loop of the raw SDK's same requests \
(figure 1), the handoff from a release to a waiter (2), {2} contending tasks (3), many leases \
held and renewed (4), `leasehold run` against `flock` (5), the lock most code takes on each \
store (6) and a writer among readers (9). The figures below are one run of \
`scripts/bench.sh`{when}, {0:.0} s on {1}; sections 7, 8, 10–14 and 17 are measured apart, each \
dated where it stands (section 8's targets are counted below with their date).\n",
        r.seconds,
        r.machine,
        r.contention
            .first()
            .map_or("many".into(), |c| format!("{} × {}", c.procs, c.tasks)),
    );
    let _ = writeln!(
        s,
        "| store | 1. leasehold / raw loop | 2. handoff p50, same / other process | 3. passes/s, longest wait | 4. leases held, on schedule | 9. writer's longest wait (bound) |\n|---|---|---|---|---|---|"
    );
    for store in stores(r) {
        let _ = writeln!(s, "{}", row(r, &store));
    }
    let _ = writeln!(s);
    if let Some(c) = &r.cli {
        let _ = writeln!(
            s,
            "- 5: `leasehold run` {:.2} ms against `flock` {:.2} ms, **{:.2}×**{}.",
            c.leasehold_ms,
            c.flock_ms,
            c.ratio,
            if c.before_servers {
                " (measured before the servers started)"
            } else {
                ""
            }
        );
    }
    if !r.peers.is_empty() {
        let peers: Vec<String> = r
            .peers
            .iter()
            .filter_map(|p| {
                let ratio = p.ratio.or(p.leasehold_cps.map(|l| l / p.peer_cps))?;
                Some(format!("{} {ratio:.2}×", p.store))
            })
            .collect();
        let _ = writeln!(
            s,
            "- 6: leasehold's cycles / the peer's: {}.",
            peers.join(", ")
        );
    }
    let backed: Vec<String> = r
        .wait_cost
        .iter()
        .filter(|w| w.cap_ms == leasehold::DEFAULT_POLL_CAP.as_millis() as u64)
        .filter_map(|w| {
            let before = r.wait_cost_before(w)?;
            Some(format!(
                "{} {:.2} ({:.0}× fewer)",
                w.store,
                w.requests_per_s,
                before.requests_per_s / w.requests_per_s.max(1e-9)
            ))
        })
        .collect();
    if !backed.is_empty() {
        let _ = writeln!(
            s,
            "- 15: requests a second of a long wait, backing off to the default cap: {}.",
            backed.join(", ")
        );
    }
    let all = targets(r, python);
    if !all.is_empty() {
        let missed: Vec<&str> = all
            .iter()
            .filter(|t| !t.met)
            .map(|t| t.what.as_str())
            .collect();
        let _ = write!(
            s,
            "- Targets: **{} of {} met**",
            all.len() - missed.len(),
            all.len()
        );
        if missed.is_empty() {
            let _ = writeln!(s, ".");
        } else {
            let _ = writeln!(
                s,
                "; missed, each explained under its figure: figure {}.",
                missed.join("; ")
            );
        }
    }
    let _ = writeln!(
        s,
        "\nReproduce: `scripts/bench.sh` writes this page (its servers started by the script); the \
other sections' commands are under [Reproduce](#reproduce).\n\n![benchmarks](benchmarks.png)\n"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Cli, Contention, Overhead};

    fn overhead(store: &str, ratio: f64) -> Overhead {
        Overhead {
            store: store.into(),
            leasehold_cps: 1000.0 * ratio,
            raw_cps: 1000.0,
            ratio,
            round_ratios: vec![ratio],
            leasehold_requests_per_cycle: 2.0,
            raw_requests_per_cycle: 2.0,
            minimum: 2,
            peer: None,
        }
    }

    #[test]
    fn the_summary_gives_each_stores_figures_and_the_missed_targets() {
        let r = Results {
            started_unix: 1_795_737_600, // 2026-11-27
            seconds: 1278.0,
            machine: "2 cores".into(),
            overhead: vec![
                overhead("SQLite", 0.63),
                overhead(SQLITE_HOP, 1.01),
                overhead("DynamoDB Local", 0.91),
            ],
            contention: vec![Contention {
                store: "SQLite".into(),
                procs: 8,
                tasks: 8,
                seconds: 15.0,
                passes_per_s: 394.0,
                requests_per_s: 2361.0,
                longest_wait_ms: 277.0,
                cross_process_share: 1.0,
                min_process_passes: 686,
                max_process_passes: 831,
                starved_tasks: 0,
                errors: 0,
            }],
            cli: Some(Cli {
                runs: 40,
                leasehold_ms: 6.31,
                flock_ms: 1.83,
                ratio: 3.4,
                binary_bytes: 0,
                binary_profile: String::new(),
                parts: Vec::new(),
                synced_append_ms: 0.0,
                synced_dir_ms: 0.0,
                before_servers: true,
            }),
            ..Results::default()
        };
        let s = markdown_with(&r, &[]);
        assert!(
            s.contains("`scripts/bench.sh` of 2026-11-27, 1278 s on 2 cores;"),
            "{s}"
        );
        assert!(
            s.contains("| SQLite | 0.63× (in async code 1.01×) | – | 394, 277 ms | – | – |"),
            "{s}"
        );
        assert!(s.contains("| DynamoDB Local | 0.91× |"), "{s}");
        assert!(!s.contains(&format!("| {SQLITE_HOP} |")), "{s}");
        assert!(
            s.contains(
                "`leasehold run` 6.31 ms against `flock` 1.83 ms, **3.40×** (measured before the servers started)."
            ),
            "{s}"
        );
        // The synchronous SQLite loop has no target: 1 (async SQLite),
        // 1 (DynamoDB), 3, 5.
        assert!(s.contains("**2 of 4 met**"), "{s}");
        assert!(
            s.contains("figure 1 (DynamoDB Local: 0.91× the raw loop); 5 (3.40× `flock`)."),
            "{s}"
        );
    }

    #[test]
    fn an_empty_run_has_a_summary_without_figures() {
        let s = markdown_with(&Results::default(), &[]);
        assert!(s.starts_with("## Summary\n"), "{s}");
        assert!(!s.contains("Targets"), "{s}");
        assert!(!s.contains(" of 1970"), "{s}");
    }

    #[test]
    fn section_8s_targets_are_counted_with_their_date() {
        let python = python_targets_of(
            r#"{"date": "2026-11-29",
                "stores": [{"store": "SQLite", "ratio": 1.06}, {"store": "Redis", "ratio": 0.9}],
                "peers": [{"peer": "redis-py Lock", "store": "Redis", "ratio": 0.8},
                          {"peer": "python-dynamodb-lock", "store": "DynamoDB Local", "ratio": 3.2}]}"#,
        );
        // Each store against the Rust loop, and redis-py's Lock (the only
        // peer with a target).
        assert_eq!(python.len(), 3, "{python:?}");
        let s = markdown_with(&Results::default(), &python);
        assert!(s.contains("**1 of 3 met**"), "{s}");
        assert!(
            s.contains(
                "figure 8 (Python on Redis: 0.90× the Rust loop, measured 2026-11-29); \
                 8 (Python: 0.80× redis-py's `Lock`, measured 2026-11-29)."
            ),
            "{s}"
        );
        assert!(python_targets_of("not json").is_empty());
    }

    #[test]
    fn etcds_peer_and_figure_15s_waits_have_targets() {
        let ms = |p50_ms| crate::stats::Latency {
            n: 10,
            p50_ms,
            p99_ms: p50_ms,
            max_ms: p50_ms,
        };
        let wait = |mode: &str, cap_ms, requests_per_s, p50| crate::results::WaitCost {
            store: "DynamoDB Local".into(),
            mode: mode.into(),
            cap_ms,
            waits_s: vec![600.0],
            requests: vec![0],
            requests_per_s,
            handoff: Some(ms(p50)),
        };
        let r = Results {
            peers: vec![crate::results::Peer {
                peer: "etcd-client Lock".into(),
                store: "etcd".into(),
                peer_cps: 100.0,
                leasehold_cps: Some(90.0),
                ratio: Some(0.9),
                round_ratios: vec![0.9],
                peer_requests_per_cycle: Some(2.0),
                peer_handoff: Some(ms(3.0)),
                leasehold_handoff: Some(ms(3.5)),
                note: String::new(),
            }],
            wait_cost: vec![
                wait("polling", 100, 13.0, 50.0),
                wait("backing off", 2000, 0.7, 900.0),
            ],
            ..Results::default()
        };
        let s = markdown_with(&r, &[]);
        // etcd's cycles (0.90× ≥ 0.88×) met, its handoff (3.5 > 3.0 ms)
        // missed; the wait that backed off met (0.7 requests/s, 19× fewer,
        // p50 under the cap); the polling row has no target.
        assert!(s.contains("**2 of 3 met**"), "{s}");
        assert!(
            s.contains("figure 6 (etcd: handoff p50 3.50 ms against the peer's 3.00 ms)."),
            "{s}"
        );
    }

    #[test]
    fn postgres_handoff_has_a_target_of_one_commit_over_the_advisory_locks() {
        let ms = |p50_ms| crate::stats::Latency {
            n: 10,
            p50_ms,
            p99_ms: p50_ms,
            max_ms: p50_ms,
        };
        let results = |ours| Results {
            overhead: vec![crate::results::Overhead {
                store: "PostgreSQL".into(),
                leasehold_cps: 900.0,
                // Two transactions a cycle: 0.25 ms each.
                raw_cps: 2000.0,
                ratio: 0.45,
                round_ratios: vec![0.45],
                leasehold_requests_per_cycle: 2.0,
                raw_requests_per_cycle: 2.0,
                minimum: 2,
                peer: None,
            }],
            peers: vec![crate::results::Peer {
                peer: "session advisory lock".into(),
                store: "PostgreSQL".into(),
                peer_cps: 3000.0,
                leasehold_cps: Some(900.0),
                ratio: None,
                round_ratios: vec![],
                peer_requests_per_cycle: Some(2.0),
                peer_handoff: Some(ms(0.5)),
                leasehold_handoff: Some(ms(ours)),
                note: String::new(),
            }],
            ..Results::default()
        };
        // 0.70 ms ≤ 0.50 + 0.25: met (figure 1's own target, 0.45×, is not).
        let s = markdown_with(&results(0.7), &[]);
        assert!(s.contains("**1 of 2 met**"), "{s}");
        // 0.80 ms > 0.75: missed, and named.
        let s = markdown_with(&results(0.8), &[]);
        assert!(s.contains("**0 of 2 met**"), "{s}");
        assert!(
            s.contains("; 6 (PostgreSQL: handoff p50 0.80 ms against the advisory lock's 0.50 ms + one commit, 0.25 ms)."),
            "{s}"
        );
    }

    #[test]
    fn dates() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(951_782_400), "2000-02-29");
        assert_eq!(date(1_795_737_600), "2026-11-27");
    }
}
