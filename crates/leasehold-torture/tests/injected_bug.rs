//! A deliberately broken backend must be caught by a short torture run, and
//! the same run without the bug must pass: real worker processes on a real
//! SQLite file, the real witness and checker.

use std::process::Command;

fn torture(dir: &std::path::Path, bug: Option<&str>) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold-torture"));
    cmd.arg("run")
        .arg("--store")
        .arg(format!("sqlite:{}", dir.join("t.db").display()))
        .arg("--witness")
        .arg(dir.join("witness"))
        .args(["--duration", "6s", "--ttl", "1s", "--workers", "4"])
        .args(["--cli-workers", "0", "--keys", "1", "--faults", ""]);
    if let Some(bug) = bug {
        cmd.args(["--inject-bug", bug]);
    }
    let out = cmd.output().expect("run leasehold-torture");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("torture-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_backend_that_grants_held_keys_fails_a_short_run() {
    let dir = scratch("bug");
    let (passed, report) = torture(&dir, Some("grant-held"));
    assert!(!passed, "the run passed with a bug injected:\n{report}");
    assert!(report.contains("**bug injected on purpose**"), "{report}");
    let overlaps = report
        .split("overlap: ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.trim().parse::<usize>().ok())
        .unwrap_or(0);
    assert!(overlaps > 0, "no overlap flagged:\n{report}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_same_run_without_the_bug_passes() {
    let dir = scratch("clean");
    let (passed, report) = torture(&dir, None);
    assert!(passed, "{report}");
    assert!(report.contains("violations** | **0**"), "{report}");
    std::fs::remove_dir_all(dir).unwrap();
}
