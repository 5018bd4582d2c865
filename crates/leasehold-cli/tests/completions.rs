//! Shell completions and man pages, generated from the clap definition
//! (issue 29): they name every command and option `--help` shows, and the
//! script that writes the man pages works.

use std::process::Command;

fn leasehold(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The commands `--help` lists (clap's own `help` left out).
fn commands() -> Vec<String> {
    let help = leasehold(&["--help"]);
    let list: Vec<String> = help
        .split("Commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| !l.is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .filter(|c| c != "help")
        .collect();
    assert!(list.contains(&"run".to_string()) && list.contains(&"completions".to_string()));
    list
}

#[test]
fn completions_name_every_command_and_option_and_nothing_hidden() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = leasehold(&["completions", shell]);
        for c in commands() {
            assert!(script.contains(&c), "{shell}: no {c}");
        }
        for option in [
            "--store",
            "--connect-timeout",
            "--wait",
            "--once-per",
            "--limit",
        ] {
            let bare = option.trim_start_matches('-');
            assert!(script.contains(bare), "{shell}: no {option}");
        }
        assert!(
            !script.contains("__man") && !script.contains("__watchdog"),
            "{shell}"
        );
    }
    // The bash script is valid bash.
    let script = leasehold(&["completions", "bash"]);
    let check = Command::new("bash")
        .args(["-n", "-c", &script])
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
}

#[test]
fn the_man_script_writes_a_page_for_leasehold_and_each_command() {
    let dir = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/man.sh");
    let out = Command::new(script)
        .arg(dir.path())
        .env("LEASEHOLD_BIN", env!("CARGO_BIN_EXE_leasehold"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let page = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    let top = page("leasehold.1");
    assert!(
        top.starts_with(".ie") && top.contains(".TH leasehold 1"),
        "{top}"
    );
    for c in commands() {
        let own = page(&format!("leasehold-{c}.1"));
        assert!(own.contains(&format!(".TH leasehold-{c} 1")), "{c}: {own}");
        assert!(top.contains(&c), "leasehold.1 does not list {c}");
    }
    // Options are in roff, each dash escaped.
    assert!(page("leasehold-run.1").contains("\\-\\-wait"));
}
