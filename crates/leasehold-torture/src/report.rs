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
    pub cli_exits: BTreeMap<i32, usize>,
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
            "store {}\nduration_ms {}\nttl_ms {}\nlibrary_workers {}\ncli_workers {}\nkeys {}\norphaned_commands {}\ncli_exits {}\n",
            self.store,
            self.duration.as_millis(),
            self.ttl.as_millis(),
            self.library_workers,
            self.cli_workers,
            self.keys,
            self.orphaned_commands,
            exits.join(",")
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
            cli_exits,
        })
    }
}

/// Whether the run shows no violation: no overlap, token regression or work
/// after loss, no orphaned command, and every lost holder stopped before the
/// next one started.
pub fn passed(meta: &RunMeta, f: &Findings) -> bool {
    f.violations() == 0
        && meta.orphaned_commands == 0
        && f.lost_handover_margins.iter().all(|m| !m.is_zero())
}

fn ms(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{:.1} ms", d.as_secs_f64() * 1000.0),
        None => "n/a".into(),
    }
}

pub fn render(meta: &RunMeta, f: &Findings) -> String {
    let mut s = String::new();
    let verdict = if passed(meta, f) { "PASS" } else { "FAIL" };
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
            "{} library worker processes, {} `leasehold run` loops, {} keys",
            meta.library_workers, meta.cli_workers, meta.keys
        ),
    );
    row(
        "operations (writes to the witness)",
        f.operations.to_string(),
    );
    row(
        "acquisitions (critical sections)",
        f.acquisitions.to_string(),
    );
    let faults: Vec<String> = f.faults.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    row(
        "faults injected",
        if faults.is_empty() {
            "none".into()
        } else {
            faults.join(", ")
        },
    );
    row(
        "**violations**",
        format!("**{}**", f.violations() + meta.orphaned_commands),
    );
    row(
        "fenced overlaps, unfenced overlaps, token order, work after lost, orphaned commands",
        format!(
            "{}, {}, {}, {}, {}",
            f.fenced_overlaps.len(),
            f.unfenced_overlaps.len(),
            f.token_order.len(),
            f.work_after_lost.len(),
            meta.orphaned_commands
        ),
    );
    row(
        "overlaps right after a break (expected; fenced)",
        f.overlaps_after_break.to_string(),
    );
    row(
        "stale writes rejected by fencing",
        format!(
            "{} (of which deliberate late writes after loss: {} of {})",
            f.stale_writes_rejected + f.late_writes_rejected,
            f.late_writes_rejected,
            f.late_writes
        ),
    );
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
    for (kind, times) in &f.recovery {
        row(
            &format!("recovery after {kind}: p50, p99"),
            format!(
                "{}, {} ({} faults{})",
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
    let all: Vec<&String> = f
        .fenced_overlaps
        .iter()
        .chain(&f.unfenced_overlaps)
        .chain(&f.token_order)
        .chain(&f.work_after_lost)
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
            cli_exits: [(0, 975), (76, 2)].into_iter().collect(),
        };
        let back = RunMeta::from_lines(&meta.to_lines()).unwrap();
        assert_eq!(back.to_lines(), meta.to_lines());
    }
}
