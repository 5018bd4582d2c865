//! Figure 5: `leasehold run` against `flock`, and what a run is made of.
//!
//! Besides the two commands, each round times a ladder of commands that
//! each do a part more of what `leasehold run` does (an exec of `true`;
//! `leasehold --version`: loading the binary; `leasehold status`: the
//! runtime, opening SQLite and one read), and the durable floor measured
//! directly (a synced append to a file and a synced directory, as the
//! acquisition's commit makes), so the page can say, part by part, where
//! the time goes.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::process::Stdio;
use std::time::Instant;

use anyhow::{anyhow, bail};

use super::harness::Run;
use crate::results::{Cli, CliPart, CLI_PARTS};
use crate::stats::median;
use crate::sys::sibling_binary;

impl Run {
    pub async fn cli(&self) -> anyhow::Result<Cli> {
        let built = sibling_binary("leasehold").ok_or_else(|| {
            anyhow!("no leasehold binary beside leasehold-bench (build -p leasehold-cli)")
        })?;
        let binary_bytes = std::fs::metadata(&built).map(|m| m.len()).unwrap_or(0);
        let binary_profile = built
            .parent()
            .and_then(|d| d.file_name())
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default();
        // A copy written now, as an install writes it: the same bytes start
        // slower from a file that has sat in the page cache for hours, which
        // the machine's reclaim trims (docs/benchmarks.md, section 11), and
        // a build that cargo found up to date can be such a file.
        let bin = self.dir.join("leasehold");
        std::fs::copy(&built, &bin)?;
        let db = self.dir.join("cli.db");
        let lockfile = self.dir.join("cli.lock");
        let synced = self.dir.join("cli.synced");
        let dir = self.dir.clone();
        let store = format!("sqlite:{}", db.display());
        let time = |mut cmd: std::process::Command| -> anyhow::Result<f64> {
            let t = Instant::now();
            let status = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status()?;
            if !status.success() {
                bail!("{cmd:?} failed: {status}");
            }
            Ok(t.elapsed().as_secs_f64() * 1000.0)
        };
        let leasehold = move |args: &[&str]| {
            let mut c = std::process::Command::new(&bin);
            c.args(args);
            c
        };
        let commands: [Box<dyn Fn() -> std::process::Command + Send>; 5] = [
            Box::new(move || {
                let mut c = std::process::Command::new("flock");
                c.arg(&lockfile).arg("true");
                c
            }),
            Box::new(|| std::process::Command::new("true")),
            Box::new({
                let leasehold = leasehold.clone();
                move || leasehold(&["--version"])
            }),
            Box::new({
                let (leasehold, store) = (leasehold.clone(), store.clone());
                move || leasehold(&["--store", &store, "status", "bench-cli"])
            }),
            Box::new(move || leasehold(&["--store", &store, "run", "bench-cli", "--", "true"])),
        ];
        let runs = self.plan.cli_runs;
        tokio::task::spawn_blocking(move || {
            time(commands[4]())?; // creates the database
            for c in &commands {
                time(c())?;
            }
            // The figure itself, as issue 55 timed it: `flock` and `run` in
            // pairs, nothing else between them.
            let (mut flock_pairs, mut run_pairs) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                flock_pairs.push(time(commands[0]())?);
                run_pairs.push(time(commands[4]())?);
            }
            // Then the ladder, in rounds of its own.
            let mut times: Vec<Vec<f64>> = vec![Vec::new(); commands.len()];
            let (mut append, mut dir_sync) = (Vec::new(), Vec::new());
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&synced)?;
            for i in 0..runs {
                // Each round in another order, so no command always follows
                // the same one.
                for j in 0..commands.len() {
                    let k = (i + j) % commands.len();
                    times[k].push(time(commands[k]())?);
                }
                // The acquisition's durable part, on its own: a page
                // appended and synced (SQLite's WAL commit at
                // synchronous=FULL), and the directory synced (SQLite does
                // so at a connection's first write to a new WAL).
                let t = Instant::now();
                file.write_all(&[0u8; 4096])?;
                file.sync_data()?;
                append.push(t.elapsed().as_secs_f64() * 1000.0);
                let t = Instant::now();
                std::fs::File::open(&dir)?.sync_all()?;
                dir_sync.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            drop(file);
            let _ = std::fs::remove_file(&synced);
            let m = |v: &[f64]| median(v).unwrap_or(0.0);
            let (fm, lm) = (m(&flock_pairs), m(&run_pairs));
            let parts = CLI_PARTS
                .iter()
                .zip(&times[1..])
                .map(|((name, _), t)| CliPart {
                    name: name.to_string(),
                    ms: m(t),
                })
                .collect();
            Ok(Cli {
                runs,
                leasehold_ms: lm,
                flock_ms: fm,
                ratio: lm / fm,
                binary_bytes,
                binary_profile,
                parts,
                synced_append_ms: m(&append),
                synced_dir_ms: m(&dir_sync),
                before_servers: false,
            })
        })
        .await?
    }
}
