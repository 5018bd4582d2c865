//! Figure 5: `leasehold run` against `flock`.

use std::process::Stdio;
use std::time::Instant;

use anyhow::{anyhow, bail};

use super::harness::Run;
use crate::results::Cli;
use crate::stats::median;
use crate::sys::sibling_binary;

impl Run {
    pub async fn cli(&self) -> anyhow::Result<Cli> {
        let bin = sibling_binary("leasehold").ok_or_else(|| {
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
}
