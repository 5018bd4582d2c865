//! The report: what ran, what was injected, what the checker found.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use crate::check::{quantile, Findings};

/// What was run.
pub struct RunMeta {
    pub store: String,
    pub duration: Duration,
    pub ttl: Duration,
    pub library_workers: usize,
    pub cli_workers: usize,
    pub keys: usize,
    pub orphaned_commands: usize,
    /// For each orphaned command: the processes of its tree still alive,
    /// as the coordinator saw them (pid, state, command line).
    pub orphans: Vec<String>,
    pub cli_exits: BTreeMap<i32, usize>,
    /// Library workers that kept writing after their guard said lost.
    pub misbehaving: usize,
    /// Library workers that took read holds of a reader-writer lock.
    pub readers: usize,
    /// `leasehold run --shared` loops.
    pub shared_runs: usize,
    /// `leasehold run` loops whose command forks background workers.
    pub forking: usize,
    /// Whether pauses also hit `leasehold run` processes.
    pub pause_run: bool,
    /// The bug injected on purpose, if any (such a run must fail).
    pub injected_bug: Option<String>,
    /// Mixed max TTLs: the long holders' max TTL, if any.
    pub long_max_ttl: Option<Duration>,
    /// Multi-key library workers.
    pub multi: usize,
}

impl RunMeta {
    /// `name value` lines, kept beside the witness log for `check`.
    pub fn to_lines(&self) -> String {
        let exits: Vec<String> = self
            .cli_exits
            .iter()
            .map(|(c, n)| format!("{c}:{n}"))
            .collect();
        format!(
            "store {}\nduration_ms {}\nttl_ms {}\nlibrary_workers {}\ncli_workers {}\nkeys {}\norphaned_commands {}\ncli_exits {}\nmisbehaving {}\nreaders {}\nshared_runs {}\nforking {}\npause_run {}\ninjected_bug {}\nlong_max_ttl_ms {}\nmulti {}\n{}",
            self.store,
            self.duration.as_millis(),
            self.ttl.as_millis(),
            self.library_workers,
            self.cli_workers,
            self.keys,
            self.orphaned_commands,
            exits.join(","),
            self.misbehaving,
            self.readers,
            self.shared_runs,
            self.forking,
            u8::from(self.pause_run),
            self.injected_bug.as_deref().unwrap_or("-"),
            self.long_max_ttl
                .map_or("-".to_string(), |d| d.as_millis().to_string()),
            self.multi,
            self.orphans
                .iter()
                .map(|o| format!("orphan {}\n", o.replace('\n', " ")))
                .collect::<String>(),
        )
    }

    pub fn from_lines(text: &str) -> anyhow::Result<RunMeta> {
        let get = |name: &str| -> anyhow::Result<&str> {
            text.lines()
                .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
                .ok_or_else(|| anyhow::anyhow!("meta has no {name}"))
        };
        let num = |name: &str| -> anyhow::Result<u64> { Ok(get(name)?.trim().parse()?) };
        let mut cli_exits = BTreeMap::new();
        for pair in get("cli_exits")?
            .split(',')
            .filter(|p| !p.trim().is_empty())
        {
            let (c, n) = pair
                .split_once(':')
                .ok_or_else(|| anyhow::anyhow!("bad cli_exits {pair}"))?;
            cli_exits.insert(c.trim().parse()?, n.trim().parse()?);
        }
        Ok(RunMeta {
            store: get("store")?.to_string(),
            duration: Duration::from_millis(num("duration_ms")?),
            ttl: Duration::from_millis(num("ttl_ms")?),
            library_workers: num("library_workers")? as usize,
            cli_workers: num("cli_workers")? as usize,
            keys: num("keys")? as usize,
            orphaned_commands: num("orphaned_commands")? as usize,
            orphans: text
                .lines()
                .filter_map(|l| l.strip_prefix("orphan "))
                .map(String::from)
                .collect(),
            cli_exits,
            // Absent in runs made before these existed.
            misbehaving: num("misbehaving").unwrap_or(0) as usize,
            readers: num("readers").unwrap_or(0) as usize,
            shared_runs: num("shared_runs").unwrap_or(0) as usize,
            forking: num("forking").unwrap_or(0) as usize,
            pause_run: num("pause_run").unwrap_or(0) == 1,
            injected_bug: get("injected_bug")
                .ok()
                .map(str::trim)
                .filter(|b| *b != "-")
                .map(String::from),
            long_max_ttl: num("long_max_ttl_ms").ok().map(Duration::from_millis),
            multi: num("multi").unwrap_or(0) as usize,
        })
    }
}

/// Whether a run passed: no violation, no orphaned command, no zero
/// margin, and something was tested at all (a run in which no lease was
/// ever granted, say because every grant waited out a quarantine, checks
/// nothing and must not pass; nor one with readers and no read hold, or
/// with multi-key workers and no multi-key hold, unless it had mixed max
/// TTLs: holders of up to four confirmation windows, which readers and
/// takers of every key wait behind, may keep them out of a short run; a
/// 50 s Azure run of it once gave the multi-key workers none).
pub fn passed(meta: &RunMeta, f: &Findings) -> bool {
    failures(meta, f).is_empty()
}

/// Why a run failed (see [`passed`]), in the report's words; empty if it
/// passed.
pub fn failures(meta: &RunMeta, f: &Findings) -> Vec<&'static str> {
    [
        (f.acquisitions == 0, "no acquisition"),
        (
            meta.readers + meta.shared_runs > 0
                && meta.long_max_ttl.is_none()
                && f.read_acquisitions == 0,
            "readers, but no read hold",
        ),
        (
            meta.multi > 0 && meta.long_max_ttl.is_none() && f.liveness.held == 0,
            "multi-key workers, but no multi-key hold",
        ),
        (f.violations() > 0, "violations"),
        (meta.orphaned_commands > 0, "orphaned processes"),
        (
            f.lost_handover_margins.iter().any(|m| m.is_zero()),
            "a zero stop-before-takeover margin",
        ),
    ]
    .into_iter()
    .filter_map(|(failed, why)| failed.then_some(why))
    .collect()
}

fn ms(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{:.1} ms", d.as_secs_f64() * 1000.0),
        None => "n/a".into(),
    }
}

pub fn render(meta: &RunMeta, f: &Findings) -> String {
    let mut s = String::new();
    let failures = failures(meta, f);
    let verdict = match failures.is_empty() {
        true => "PASS".to_string(),
        false => format!("FAIL ({})", failures.join(", ")),
    };
    let _ = writeln!(s, "### `{}`: {verdict}\n", meta.store);
    let _ = writeln!(s, "| measure | value |\n|---|---|");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(s, "| {k} | {v} |");
    };
    row(
        "duration, TTL",
        format!("{:?}, {:?}", meta.duration, meta.ttl),
    );
    row(
        "holders",
        format!(
            "{} library worker processes ({} keep writing after loss), {} `leasehold run` loops ({} forking two background workers; pauses {}), {} keys",
            meta.library_workers,
            meta.misbehaving,
            meta.cli_workers,
            meta.forking,
            if meta.pause_run {
                "hit them too"
            } else {
                "spare them"
            },
            meta.keys
        ),
    );
    if meta.readers + meta.shared_runs > 0 {
        row(
            "reader-writer locks",
            format!(
                "{} library workers and {} `leasehold run --shared` loops took read holds; the other holders on their keys the write hold",
                meta.readers, meta.shared_runs
            ),
        );
    }
    if meta.multi > 0 {
        let l = &f.liveness;
        row(
            "multi-key holders",
            format!(
                "{} library workers took every key at once, each given them in an order of its own: {} attempts, {} held every key, {} ran out of wait; {} of {} snapshots of the keys' holders judged for deadlocks and orphan holds (those away from faults)",
                meta.multi, l.attempts, l.held, l.gave_up, l.judged, l.snapshots
            ),
        );
    }
    if let Some(long) = meta.long_max_ttl {
        row(
            "mixed max TTLs",
            format!(
                "every second holder opened the store with max TTL {long:?} and took TTLs of {:?} to {long:?}; the others the store URL's, TTL {:?}",
                (long / 2).max(meta.ttl),
                meta.ttl
            ),
        );
    }
    for (k, n) in [
        ("operations (writes to the witness)", f.operations),
        ("acquisitions (critical sections)", f.acquisitions),
        ("of which read holds", f.read_acquisitions),
        (
            "pairs of read holds that shared the key (overlapped)",
            f.shared_reads,
        ),
    ] {
        row(k, n.to_string());
    }
    let faults: Vec<String> = f
        .faults
        .iter()
        .map(|(k, n)| match f.faults_on_run.get(k) {
            Some(r) => format!("{k}: {n} ({r} on `leasehold run`)"),
            None => format!("{k}: {n}"),
        })
        .collect();
    row(
        "faults injected",
        if faults.is_empty() {
            "none".into()
        } else {
            faults.join(", ")
        },
    );
    if let Some(bug) = &meta.injected_bug {
        row(
            "**bug injected on purpose**",
            format!("`{bug}` (this run must FAIL)"),
        );
    }
    row(
        "**violations**",
        format!("**{}**", f.violations() + meta.orphaned_commands),
    );
    let kinds: Vec<String> = f
        .by_kind()
        .iter()
        .map(|(k, v)| format!("{k}: {}", v.len()))
        .chain([format!("orphaned process: {}", meta.orphaned_commands)])
        .collect();
    row("violations by kind", kinds.join(", "));
    for (k, n) in [
        (
            "of which between holders of different store epochs (store loss)",
            f.across_store_loss,
        ),
        (
            "overlaps right after a break of the earlier holder's lease (expected; fenced)",
            f.overlaps_after_break,
        ),
        ("stale writes rejected by fencing", f.stale_writes_rejected),
    ] {
        row(k, n.to_string());
    }
    row(
        "writes after loss (buggy users): total, rejected, accepted before anyone newer wrote",
        format!("{}, {}, {}", f.late.total, f.late.rejected, f.late.accepted),
    );
    if f.granted_during_loss > 0 {
        row(
            "grants while a store loss was under way (tokens not ordered; overlaps checked)",
            f.granted_during_loss.to_string(),
        );
    }
    let margins = &f.lost_handover_margins;
    row(
        "stop-before-takeover margin: min, p50 (handovers from lost holders)",
        format!(
            "{}, {} over {} handovers",
            ms(margins.iter().min().copied()),
            ms(quantile(margins, 0.5)),
            margins.len()
        ),
    );
    if !f.break_latencies.is_empty() {
        row(
            "break answered after: p50, max (a holder is excused from when it landed)",
            format!(
                "{}, {}",
                ms(quantile(&f.break_latencies, 0.5)),
                ms(f.break_latencies.iter().max().copied())
            ),
        );
    }
    for (kind, times) in &f.recovery {
        row(
            &format!("recovery after {kind}: p50, p99"),
            format!(
                "{}, {} ({} faulted holders{})",
                ms(quantile(times, 0.5)),
                ms(quantile(times, 0.99)),
                times.len(),
                match f.unrecovered.get(kind) {
                    Some(n) => format!(", {n} not followed by another holder before the end"),
                    None => String::new(),
                }
            ),
        );
    }
    if !meta.cli_exits.is_empty() {
        let exits: Vec<String> = meta
            .cli_exits
            .iter()
            .map(|(c, n)| format!("{c}: {n}"))
            .collect();
        row("`leasehold run` exit codes", exits.join(", "));
    }
    if !meta.orphans.is_empty() {
        let _ = writeln!(
            s,
            "\nProcesses alive after their `leasehold run` was killed:\n"
        );
        for o in &meta.orphans {
            let _ = writeln!(s, "- {o}");
        }
    }
    let all: Vec<&String> = f
        .by_kind()
        .into_iter()
        .flat_map(|(_, v)| v.iter())
        .take(20)
        .collect();
    if !all.is_empty() {
        let _ = writeln!(s, "\nViolations (first 20):\n");
        for v in all {
            let _ = writeln!(s, "- {v}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips() {
        let meta = RunMeta {
            store: "azblob://c".into(),
            duration: Duration::from_secs(300),
            ttl: Duration::from_secs(15),
            library_workers: 4,
            cli_workers: 2,
            keys: 2,
            orphaned_commands: 0,
            orphans: Vec::new(),
            cli_exits: [(0, 975), (76, 2)].into_iter().collect(),
            misbehaving: 2,
            readers: 1,
            shared_runs: 1,
            forking: 1,
            pause_run: true,
            injected_bug: Some("grant-held".into()),
            long_max_ttl: Some(Duration::from_secs(60)),
            multi: 3,
        };
        let back = RunMeta::from_lines(&meta.to_lines()).unwrap();
        assert_eq!(back.to_lines(), meta.to_lines());
    }

    #[test]
    fn a_run_that_granted_nothing_fails() {
        let meta = RunMeta {
            store: "dynamodb://t".into(),
            duration: Duration::from_secs(60),
            ttl: Duration::from_secs(2),
            library_workers: 4,
            cli_workers: 2,
            keys: 2,
            orphaned_commands: 0,
            orphans: Vec::new(),
            cli_exits: Default::default(),
            misbehaving: 0,
            readers: 0,
            shared_runs: 0,
            forking: 0,
            pause_run: false,
            injected_bug: None,
            long_max_ttl: None,
            multi: 0,
        };
        let mut findings = Findings::default();
        assert!(!passed(&meta, &findings), "no acquisition, no pass");
        findings.acquisitions = 1;
        assert!(passed(&meta, &findings));
    }

    #[test]
    fn a_run_with_readers_that_granted_no_read_hold_fails() {
        let mut meta = RunMeta::from_lines(
            "store s\nduration_ms 1\nttl_ms 1\nlibrary_workers 4\ncli_workers 2\nkeys 2\norphaned_commands 0\ncli_exits \n",
        )
        .unwrap();
        meta.readers = 1;
        let mut findings = Findings {
            acquisitions: 3,
            ..Findings::default()
        };
        assert!(!passed(&meta, &findings), "no read hold, no pass");
        // The report says why (CI shows the verdict line, not the table).
        assert!(render(&meta, &findings).starts_with("### `s`: FAIL (readers, but no read hold)"));
        findings.read_acquisitions = 1;
        assert!(passed(&meta, &findings));
        findings.read_acquisitions = 0;
        meta.long_max_ttl = Some(Duration::from_secs(20));
        assert!(passed(&meta, &findings), "long writers may keep them out");
    }

    #[test]
    fn a_run_with_multi_key_workers_that_never_held_every_key_fails() {
        let mut meta = RunMeta::from_lines(
            "store s\nduration_ms 1\nttl_ms 1\nlibrary_workers 4\ncli_workers 2\nkeys 2\norphaned_commands 0\ncli_exits \n",
        )
        .unwrap();
        meta.multi = 2;
        let mut findings = Findings {
            acquisitions: 3,
            ..Findings::default()
        };
        assert!(!passed(&meta, &findings), "no multi-key hold, no pass");
        assert!(render(&meta, &findings)
            .starts_with("### `s`: FAIL (multi-key workers, but no multi-key hold)"));
        findings.liveness.held = 1;
        assert!(passed(&meta, &findings));
        findings.liveness.held = 0;
        meta.long_max_ttl = Some(Duration::from_secs(20));
        assert!(passed(&meta, &findings), "long holders may keep them out");
    }
}
