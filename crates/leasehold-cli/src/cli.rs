//! Command-line syntax.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

const EXIT_CODES: &str = "\
Exit codes:
  N     run: the command ran and exited with N (128+S if killed by signal S)
  0     other commands: success
  1     the store failed (unreachable, permissions, corrupt, ...)
  2     usage or configuration error (bad key, TTL, store URL, ...)
  75    run: the lock was not obtained (held elsewhere, or --wait ran out)
  76    run: the lease was lost while the command ran (it was stopped)
  126   run: the command could not be started (127: it was not found)";

/// Run commands under a distributed lock kept in a lease store.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// Where leases live: sqlite:PATH, sqlite:///ABS/PATH, memory:,
    /// azblob://CONTAINER[/PREFIX], dynamodb://TABLE?region=R&endpoint=URL.
    /// Default: the SQLite file under the user's state directory
    /// (~/.local/state/leasehold/leases.db).
    // The value may carry credentials (a query string): never shown in help.
    #[arg(
        long,
        env = "LEASEHOLD_STORE",
        hide_env_values = true,
        global = true,
        value_name = "URL"
    )]
    pub store: Option<String>,

    /// Show what happens (-v: acquire, renew, loss, release; -vv: more).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding the lock on KEY.
    ///
    /// Starts CMD only if the lock is obtained (by default without waiting),
    /// renews the lease while CMD runs, and releases it when CMD ends. CMD
    /// gets LEASEHOLD_KEY and LEASEHOLD_FENCING_TOKEN in its environment.
    /// CMD runs in a process group (and, where possible, a cgroup) of its
    /// own under a watchdog process. SIGINT, SIGTERM and SIGHUP are forwarded
    /// to CMD's whole process tree. If the lease is lost, or its deadline
    /// passes while leasehold is frozen, the watchdog sends the tree SIGTERM,
    /// then SIGKILL after --grace, before the lease can pass to anyone else.
    /// If leasehold is killed, the tree is killed at once. Processes CMD
    /// leaves behind are stopped before the lease is released.
    #[command(after_help = EXIT_CODES)]
    Run(RunArgs),

    /// Run a command only while this instance is the leader of KEY.
    ///
    /// Campaigns until elected, runs CMD (with LEASEHOLD_KEY and
    /// LEASEHOLD_FENCING_TOKEN, the leadership term), stops it as `run` does
    /// if leadership is lost, and campaigns again after CMD exits or
    /// leadership is lost, until interrupted (SIGINT/SIGTERM, which are
    /// forwarded to a running CMD). Exits with CMD's code when interrupted
    /// while CMD runs, 128+N when interrupted by signal N while campaigning.
    #[command(after_help = EXIT_CODES)]
    Elect(ElectArgs),

    /// Show who leads KEY (the election `elect` runs).
    Leader {
        /// The election key.
        key: String,
        /// Print JSON instead of text (null when nobody leads).
        #[arg(long)]
        json: bool,
    },

    /// Show who holds KEY.
    Status {
        /// The lock key.
        key: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },

    /// List the keys in the store.
    List {
        /// Only keys starting with this prefix.
        #[arg(long, default_value = "")]
        prefix: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },

    /// End the lease on KEY, whoever holds it (the holder notices at its next
    /// renewal; the fencing counter is kept).
    Break {
        /// The lock key.
        key: String,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub lease: LeaseArgs,

    /// How long to wait for the lock: a duration (e.g. 90s, 5m) or
    /// "forever". Default: do not wait.
    #[arg(long, value_parser = parse_wait, value_name = "DURATION|forever")]
    pub wait: Option<leasehold::Wait>,

    /// Hold one of N permits (a semaphore on KEY) instead of the lock: at
    /// most N commands run at once. CMD also gets LEASEHOLD_SLOT (0..N-1);
    /// the fencing token is per slot.
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ElectArgs {
    #[command(flatten)]
    pub lease: LeaseArgs,
}

/// What `run` and `elect` share: the key, the lease and the command.
#[derive(Debug, Args)]
pub struct LeaseArgs {
    /// The lock key: 1-256 characters from A-Z a-z 0-9 . _ : / - (no
    /// leading, trailing or doubled '/').
    pub key: String,

    /// Lease time to live: how long the lock outlives a dead holder.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub ttl: Duration,

    /// A label stored with the lease to say who holds it.
    #[arg(long, value_name = "LABEL")]
    pub owner: Option<String>,

    /// Text stored with the lease, shown by `status` and `list`.
    #[arg(long, value_name = "TEXT")]
    pub data: Option<String>,

    /// Time between SIGTERM and SIGKILL when the lease is lost.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub grace: Duration,

    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (expected e.g. 30s, 500ms, 5m)"))
}

fn parse_wait(s: &str) -> Result<leasehold::Wait, String> {
    if s == "forever" {
        return Ok(leasehold::Wait::Forever);
    }
    parse_duration(s).map(leasehold::Wait::Timeout)
}

impl Cli {
    pub fn parse_args() -> Self {
        Cli::parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_a_run() {
        let cli = Cli::try_parse_from([
            "leasehold",
            "run",
            "k",
            "--ttl",
            "20s",
            "--wait",
            "forever",
            "--",
            "echo",
            "hi",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!()
        };
        assert_eq!(run.lease.ttl, Duration::from_secs(20));
        assert_eq!(run.wait, Some(leasehold::Wait::Forever));
        assert_eq!(
            run.lease.command,
            vec![OsString::from("echo"), OsString::from("hi")]
        );
    }

    #[test]
    fn rejects_bad_durations() {
        assert!(
            Cli::try_parse_from(["leasehold", "run", "k", "--wait", "soon", "--", "true"]).is_err()
        );
    }
}
