//! Command-line syntax.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use leasehold::{Error, LockOptions};
use leasehold_stores::Access;

use crate::describe::exact;

/// Limits, environment variables and exit codes, after every help.
const AFTER_HELP: &str = "\
Limits:
  KEY       1-256 characters from A-Z a-z 0-9 . _ : / - with no leading,
            trailing or doubled '/'; a segment starting with ':slot:' or
            ':read:' is reserved for semaphore slots (KEY/:slot:N) and
            readers (KEY/:read:N). With --limit or --shared, KEY is
            at most 246 characters.
  --ttl     sqlite: 100ms to 24h; azblob: 15s to 60s (whole seconds);
            dynamodb, postgres, redis: 1s to 24h; s3: 4s to 24h; etcd: 2s
            to 24h (whole seconds on the server, rounded up); and never
            above the
            store's max TTL (60s unless its URL says ?max_ttl=DURATION,
            e.g. sqlite:PATH?max_ttl=5m)
  --grace   at most half the TTL and at most 30s (half the confirmation
            window); default 5s, or a quarter of the TTL when that is
            shorter
  --limit   1 to 1000
  --once-per  a duration above zero (30m, 12h); not with --limit
  --shared  not with --limit or --once-per
  --owner   at most 128 bytes;  --data: at most 1024 bytes

Environment:
  LEASEHOLD_STORE     the store URL, as --store (its value is never shown)
  NO_COLOR            set and non-empty: no colour in -v output (colour is
                      used only when stderr is a terminal)
  RUST_LOG            log filter when -v is not given (tracing syntax)
  XDG_STATE_HOME      where the default SQLite file lives
  AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_KEY,
  AZURE_STORAGE_SAS_TOKEN             azblob:// credentials
  AWS_REGION, AWS_PROFILE, AWS_ACCESS_KEY_ID, ... (the AWS credential chain)
                                      dynamodb:// and s3:// credentials
  PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE, PGSSLROOTCERT
                                      postgres:// parts the URL omits
  Given to CMD: LEASEHOLD_KEY, LEASEHOLD_FENCING_TOKEN (one KEY),
  LEASEHOLD_KEYS (the keys in byte order, separated by spaces),
  LEASEHOLD_FENCING_TOKENS ({\"KEY\": token, ...} as JSON), and with --limit
  LEASEHOLD_SLOT (0..N-1).

Exit codes:
  N     run: the command ran and exited with N (128+S if killed by signal S)
  0     run --once-per: skipped (the command succeeded within the period)
  0     other commands: success
  1     the store failed (unreachable, permissions, corrupt, ...)
  2     usage or configuration error (bad key, TTL, store URL, ...;
        init --new on a store that exists)
  3     status, list, leader, break: there is no store at the URL
        (`leasehold init` creates one)
  75    run: the lock was not obtained (held elsewhere, or --wait ran out)
  76    run: the lease was lost while the command ran (it was stopped)
  126   run: the command could not be started (127: it was not found)
  128+S leasehold was ended by signal S (SIGINT 130, SIGTERM 143, SIGHUP
        129) before the command ran (opening the store, waiting)
A command may exit with 1, 2, 75 or 76 itself: `run --json` tells them
apart (see its help). Output to a closed pipe ends leasehold as SIGPIPE
would (141 in a shell).";

/// Run commands under a distributed lock kept in a lease store.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, after_help = AFTER_HELP)]
pub struct Cli {
    /// Where leases live: sqlite:PATH, sqlite:///ABS/PATH,
    /// azblob://CONTAINER[/PREFIX], dynamodb://TABLE?region=R&endpoint=URL,
    /// postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?table=NAME&sslmode=MODE],
    /// mysql://USER[:PASSWORD]@HOST[:PORT]/DB[?table=NAME] (MySQL, MariaDB),
    /// redis://[USER:PASSWORD@]HOST[:PORT][/DB][?prefix=P] (rediss:// for TLS),
    /// etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][?prefix=P] (etcds:// for TLS),
    /// s3://BUCKET[/PREFIX]?region=R&endpoint=URL,
    /// zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/CHROOT] (ZooKeeper).
    /// Default: the SQLite file under the user's state directory
    /// (~/.local/state/leasehold/leases.db, directory created 0700).
    /// status, list, leader and break never create a store, and the first
    /// three never change one: a store that does not exist exits 3 (the
    /// default SQLite file not existing yet reads as an empty store);
    /// `init` creates one.
    // The value may carry credentials (a query string): never shown in help.
    #[arg(
        long,
        env = "LEASEHOLD_STORE",
        hide_env_values = true,
        global = true,
        value_name = "URL"
    )]
    pub store: Option<String>,

    /// How long opening the store may take (connecting, creating or
    /// checking its tables), retrying failures that may pass, before
    /// leasehold gives up with exit 1 and the last cause. Not part of
    /// `run --wait`, which is the wait for the lock alone.
    #[arg(
        long,
        global = true,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = parse_positive,
        allow_hyphen_values = true
    )]
    pub connect_timeout: Duration,

    /// Show what happens (-v: acquire, renew, loss, release; -vv: more).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

// Each subcommand's arguments are built only when the command line names
// it (or help, completions and man pages need them all): clap builds the
// whole tree otherwise, at every start.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Run a command while holding the lock on KEY (or on every KEY).
    ///
    /// Starts CMD only if the lock is obtained (by default without waiting),
    /// renews the lease while CMD runs, and releases it when CMD ends. CMD
    /// gets LEASEHOLD_KEY and LEASEHOLD_FENCING_TOKEN in its environment.
    /// With several KEYs (`run a b -- CMD`) every one is held, all or none:
    /// the keys are taken in byte order whatever order they are given in
    /// (two runs naming the same keys never deadlock), a wait that runs out
    /// releases those already taken, and the loss of any one stops CMD; CMD
    /// then gets LEASEHOLD_KEYS and LEASEHOLD_FENCING_TOKENS (one token per
    /// key) instead. Several KEYs: not with --limit or --once-per.
    /// CMD runs in a process group (and, where possible, a cgroup) of its
    /// own under a watchdog process. SIGINT, SIGTERM and SIGHUP are forwarded
    /// to CMD's whole process tree. If the lease is lost, or its deadline
    /// passes while leasehold is frozen, the watchdog sends the tree SIGTERM,
    /// then SIGKILL after --grace, before the lease can pass to anyone else.
    /// If leasehold is killed, the tree is killed at once. Processes CMD
    /// leaves behind are stopped before the lease is released.
    #[command(after_help = AFTER_HELP)]
    Run(RunArgs),

    /// Run a command only while this instance is the leader of KEY.
    ///
    /// Campaigns until elected, runs CMD (with LEASEHOLD_KEY and
    /// LEASEHOLD_FENCING_TOKEN, the leadership term), stops it as `run` does
    /// if leadership is lost, and campaigns again after CMD exits or
    /// leadership is lost, until interrupted (SIGINT/SIGTERM, which are
    /// forwarded to a running CMD). Exits with CMD's code when interrupted
    /// while CMD runs, 128+N when interrupted by signal N while campaigning.
    #[command(after_help = AFTER_HELP)]
    Elect(ElectArgs),

    /// Show who leads KEY (the election `elect` runs).
    ///
    /// With --follow, show the leader now and then a line at every change,
    /// until interrupted: asked of the store every --every, and at once
    /// when the leader resigns or is broken on stores that tell of
    /// releases (sqlite, postgres, redis, etcd). A leader that lasted
    /// longer than --every is always shown; terms that began and ended
    /// between two asks are counted ("N terms missed").
    Leader {
        /// The election key.
        key: String,
        /// Print JSON instead of text (null when nobody leads). With
        /// --follow, one object per line: {"leader": a holder or null,
        /// "last_term", "missed_terms"}.
        #[arg(long)]
        json: bool,
        /// Keep showing the leader: a line at every change, until
        /// interrupted (exit 128+S).
        #[arg(long)]
        follow: bool,
        /// With --follow, how often to ask the store.
        #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_positive, requires = "follow")]
        every: Duration,
    },

    /// Show who holds KEY (for a semaphore's KEY, also its slots).
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

    /// Create the store and say what was made and when it grants.
    ///
    /// Makes the store's file and tables, table, container or epoch marker
    /// under the prefix, as `run` would on first use. A new store grants
    /// nothing for one confirmation window (60s): nothing of an earlier
    /// store at this place is known, and a holder of its lost data may
    /// still run. With --new, you state that no store ever existed here,
    /// so no such holder can be live: the new store's epoch is settled at
    /// once, for every process. On a store that exists, init says so and
    /// changes nothing; --new is then refused (exit 2).
    Init {
        /// State that no earlier store existed at this place: the new
        /// store grants at once (no quarantine). Refused if a store exists.
        #[arg(long)]
        new: bool,
    },

    /// End the lease on KEY, whoever holds it (the holder notices at its next
    /// renewal, or a frozen one at its safety deadline, and stops its
    /// command then; until that, only fencing tokens keep its writes out;
    /// the fencing counter is kept).
    Break {
        /// The lock key.
        key: String,
    },

    /// Print the completion script for SHELL on stdout.
    ///
    /// For example `leasehold completions bash >
    /// ~/.local/share/bash-completion/completions/leasehold`, or `leasehold
    /// completions zsh > ~/.zfunc/_leasehold`. Needs no store.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

impl Cli {
    /// What `completions` prints: it needs no store.
    pub fn generated(&self) -> Option<Vec<u8>> {
        use clap::CommandFactory;
        let Command::Completions { shell } = &self.command else {
            return None;
        };
        let mut out = Vec::new();
        clap_complete::generate(*shell, &mut Cli::command(), "leasehold", &mut out);
        Some(out)
    }
}

/// The argument that prints a man page instead of the normal CLI (hidden
/// from completions and help: scripts/man.sh uses it).
pub const MAN_ARG: &str = "__man";

/// `leasehold __man [COMMAND]`: leasehold(1), or leasehold-COMMAND(1), in
/// roff; `None` for a command that does not exist.
pub fn man_page(command: Option<&str>) -> Option<Vec<u8>> {
    use clap::CommandFactory;
    let top = Cli::command();
    let cmd = match command {
        None => top,
        Some(name) => {
            let sub = top.find_subcommand(name)?.clone();
            sub.name(format!("leasehold-{name}"))
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut out).ok()?;
    Some(out)
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub lease: LeaseArgs,

    /// How long to wait for the lock: a duration (e.g. 90s, 5m) or
    /// "forever". Default: do not wait.
    #[arg(long, value_parser = parse_wait, value_name = "DURATION|forever", allow_hyphen_values = true)]
    pub wait: Option<leasehold::Wait>,

    /// Hold one of N permits (a semaphore on KEY) instead of the lock: at
    /// most N commands run at once, N from 1 to 1000. CMD also gets
    /// LEASEHOLD_SLOT (0..N-1); the fencing token is per slot. --limit 1
    /// is the lock itself (slot 0).
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = parse_limit)]
    pub limit: Option<u32>,

    /// With --limit, hold P of the N permits at once (a job that needs 3
    /// of 10 slots), all or none: never some while waiting for the rest,
    /// so takers of several permits never deadlock. CMD gets LEASEHOLD_SLOTS
    /// (the slots, separated by spaces) and LEASEHOLD_FENCING_TOKENS (one
    /// token per slot key) instead of LEASEHOLD_SLOT and
    /// LEASEHOLD_FENCING_TOKEN. Default 1.
    #[arg(long, value_name = "P", requires = "limit", allow_hyphen_values = true, value_parser = parse_limit)]
    pub permits: Option<u32>,

    /// Hold KEY as one of its readers (a reader-writer lock on KEY):
    /// --shared runs of KEY run at the same time (up to 16), and a plain
    /// run of KEY, its writer, excludes them all. Once a plain run waits,
    /// --shared runs that start after it wait behind it; those already
    /// running finish first. With several KEYs, a reader of each. Not with
    /// --limit or --once-per.
    #[arg(long, conflicts_with_all = ["limit", "once_per"])]
    pub shared: bool,

    /// Run CMD at most once per DURATION (e.g. 12h), across every machine
    /// sharing the store: after obtaining the lock, if a run of KEY
    /// succeeded (CMD exited 0 under the lock) and ended less than DURATION
    /// ago, release it and exit 0 without running CMD, saying on stderr
    /// when and where it last succeeded. Otherwise run CMD; when it exits 0
    /// the success is recorded with the release. A run that failed, was
    /// interrupted or killed, or lost its lease records no success (it is
    /// recorded as the last run), so the next attempt runs CMD. Pick
    /// DURATION shorter than the schedule's interval (cron daily: e.g. 12h)
    /// and longer than the spread of the machines' start times plus the
    /// run time, and give --wait longer than the run time (without it, a
    /// machine that finds the lock held exits 75). Not with --limit.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = parse_period,
        conflicts_with = "limit",
        allow_hyphen_values = true
    )]
    pub once_per: Option<Duration>,

    /// When done, write one JSON object on a line of its own to stderr,
    /// the last line leasehold writes, saying whose exit code this is:
    /// {"result": R, "exit_code": the code leasehold exits with,
    /// "command_exit_code": CMD's code or null, "key" (several: separated
    /// by spaces), "fencing_token" (one key), "fencing_tokens" ({"KEY":
    /// token, ...}) and "slot" (null when not held), "error": a message or null,
    /// "last_success": with --once-per, the run that made this one skip,
    /// else null}, R one of
    /// "completed" (CMD ran and exited; its code is passed on),
    /// "skipped" (--once-per: CMD succeeded within the period; 0),
    /// "not_obtained" (75), "lost" (76), "not_started" (126/127),
    /// "interrupted" (128+S while waiting), "error" (1 or 2).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ElectArgs {
    #[command(flatten)]
    pub lease: LeaseArgs,
}

// What `run` and `elect` share: the key, the lease and the command (a
// plain comment: a doc comment here would become the about text of the
// subcommands, whose arguments are deferred).
#[derive(Debug, Args)]
pub struct LeaseArgs {
    /// The lock key: 1-256 characters from A-Z a-z 0-9 . _ : / - (no
    /// leading, trailing or doubled '/'). `run` takes several: every one
    /// is held, all or none (see `run --help`).
    #[arg(required = true, value_name = "KEY")]
    pub keys: Vec<String>,

    /// The key, or the keys in byte order separated by spaces (set by
    /// [`Cli::parse_args`]; `keys` is then in byte order, each once).
    #[arg(skip)]
    pub key: String,

    /// Lease time to live: how long the lock outlives a dead holder.
    #[arg(long, default_value = "30s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub ttl: Duration,

    /// While waiting, the longest pause between two asks of the store. A
    /// wait asks every 50-100ms for its first 2s and whenever the key
    /// changes hands, then backs off while the same holder keeps it, to a
    /// pause of half the cap to the cap (default 2s: about 0.7 requests a
    /// second, which is what a long wait costs on DynamoDB, Azure Blob and
    /// S3, billed by request). A holder's lease that ends sooner is asked
    /// after when it ends; a release wakes the wait at once where the
    /// store tells of releases (sqlite, postgres, redis, etcd).
    #[arg(long, value_name = "DURATION", value_parser = parse_poll_cap)]
    pub poll_cap: Option<Duration>,

    /// A label stored with the lease to say who holds it (at most 128
    /// bytes).
    #[arg(long, value_name = "LABEL")]
    pub owner: Option<String>,

    /// Text stored with the lease, shown by `status` and `list` (at most
    /// 1024 bytes).
    #[arg(long, value_name = "TEXT")]
    pub data: Option<String>,

    /// Time between SIGTERM and SIGKILL when the lease is lost: at most
    /// half the TTL and at most 30s. Default: 5s, or a quarter of the TTL when that is
    /// shorter.
    #[arg(long = "grace", value_name = "GRACE", value_parser = parse_duration, allow_hyphen_values = true)]
    pub grace_arg: Option<Duration>,

    /// The grace period in effect: `--grace`, else the default for the TTL
    /// (set by [`Cli::parse_args`]).
    #[arg(skip)]
    pub grace: Duration,

    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// The most keys one `run` holds.
pub const MAX_RUN_KEYS: usize = 256;

/// The default grace: 5 s, or a quarter of the TTL when that is shorter,
/// so that it always fits (the limit is half the TTL).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

impl LeaseArgs {
    /// Sets [`grace`](Self::grace): the one given, else the default for
    /// the TTL.
    fn resolve(&mut self) {
        self.keys.sort();
        self.keys.dedup();
        self.key = self.keys.join(" ");
        self.grace = self
            .grace_arg
            .unwrap_or_else(|| DEFAULT_GRACE.min(self.ttl / 4));
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (expected e.g. 30s, 500ms, 5m)"))
}

/// A duration above zero (`--connect-timeout`).
fn parse_positive(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("it must be longer than zero (expected e.g. 10s, 1m)".into());
    }
    Ok(d)
}

/// A `--poll-cap`: no shorter than the polls of a young wait.
fn parse_poll_cap(s: &str) -> Result<Duration, String> {
    let cap = parse_duration(s)?;
    if cap < leasehold::DEFAULT_POLL_MAX {
        return Err(format!(
            "it must be at least {}ms, the longest pause between the first polls of a wait (expected e.g. 2s, 10s)",
            leasehold::DEFAULT_POLL_MAX.as_millis()
        ));
    }
    Ok(cap)
}

/// A `--once-per` period: a duration above zero.
fn parse_period(s: &str) -> Result<Duration, String> {
    let period = parse_duration(s)?;
    if period.is_zero() {
        return Err("the period must be longer than zero (expected e.g. 1h, 12h, 30m)".into());
    }
    Ok(period)
}

/// `--limit N`: a whole number of permits (its range, 1 to 1000, is
/// checked with the other limits). Not clap's own `u32` parser, whose
/// message for `-1` named the type's range, 0..=4294967295.
fn parse_limit(s: &str) -> Result<u32, String> {
    s.trim().parse::<u32>().map_err(|_| {
        format!("{s:?} is not a number of permits: expected a whole number from 1 to 1000")
    })
}

fn parse_wait(s: &str) -> Result<leasehold::Wait, String> {
    if s == "forever" {
        return Ok(leasehold::Wait::Forever);
    }
    parse_duration(s).map(leasehold::Wait::Timeout)
}

impl Cli {
    /// The command line, or clap's error for it (see
    /// [`usage_error`](crate::usage_error) for how that is shown).
    pub fn parse_args() -> Result<Self, clap::Error> {
        Cli::try_parse().map(Cli::resolved)
    }

    /// Fills in the defaults that depend on other arguments.
    fn resolved(mut self) -> Self {
        match &mut self.command {
            Command::Run(args) => args.lease.resolve(),
            Command::Elect(args) => args.lease.resolve(),
            _ => {}
        }
        self
    }
}

/// Checks everything about `command` that needs no store (key, TTL against
/// the range every store accepts, grace, limit, owner and data sizes), so
/// that a usage error is reported as one (exit 2) even when the store is
/// unreachable; and says how the command uses the store.
///
/// # Errors
/// [`leasehold::Error::InvalidInput`] naming what is wrong.
pub async fn validate(command: &Command) -> anyhow::Result<Access> {
    // The in-memory store accepts the widest TTL range of all stores and
    // contacts nothing; the real store checks its own range before its
    // first request.
    // Its store max TTL is the widest too, so that a store opened with a
    // larger max TTL (`?max_ttl=`) is not refused here.
    let scratch = leasehold::Store::new(leasehold::memory::MemoryBackend::with_clock_and_max_ttl(
        std::sync::Arc::new(leasehold::backend::SystemClock),
        leasehold::memory::LOCAL_MAX_TTL,
    ));
    // The window the real store will have (in this repository's test
    // builds only, a test's; see `leasehold_stores::apply_test_window`).
    let scratch = leasehold_stores::apply_test_window(scratch);
    let widest = leasehold::memory::LOCAL_MIN_TTL..=leasehold::memory::LOCAL_MAX_TTL;
    if let Command::Run(RunArgs { lease, .. }) | Command::Elect(ElectArgs { lease }) = command {
        if !widest.contains(&lease.ttl) {
            return Err(leasehold::Error::invalid(
                "ttl",
                format!(
                    "--ttl {} is outside the range of every store (sqlite: 100ms to 24h; azblob: 15s to 60s; dynamodb, postgres, redis: 1s to 24h; s3: 4s to 24h; etcd: 2s to 24h)",
                    exact(lease.ttl)
                ),
            )
            .into());
        }
    }
    match command {
        Command::Run(args) => {
            let opts = lock_options(&args.lease, scratch.confirmation_window())?;
            let several = args.lease.keys.len() > 1;
            // CMD's environment holds every key and token: within what
            // exec takes for one variable (128 KiB) at 256-character keys.
            if args.lease.keys.len() > MAX_RUN_KEYS {
                return Err(Error::invalid(
                    "keys",
                    format!(
                        "{} keys; run takes at most {MAX_RUN_KEYS}",
                        args.lease.keys.len()
                    ),
                )
                .into());
            }
            for (flag, given) in [
                ("--limit", args.limit.is_some()),
                ("--once-per", args.once_per.is_some()),
            ] {
                if several && given {
                    return Err(Error::invalid(
                        "keys",
                        format!(
                            "{flag} takes one KEY; {} were given ({})",
                            args.lease.keys.len(),
                            args.lease.key
                        ),
                    )
                    .into());
                }
            }
            if let (Some(p), Some(n)) = (args.permits, args.limit) {
                if p == 0 || p > n {
                    return Err(Error::invalid(
                        "permits",
                        format!("--permits {p} is not in 1..={n} (--limit {n})"),
                    )
                    .into());
                }
            }
            for key in &args.lease.keys {
                match args.limit {
                    None if args.shared => drop(scratch.rw_lock_with(
                        key,
                        leasehold::DEFAULT_MAX_READERS,
                        opts.clone(),
                    )?),
                    None => drop(scratch.lock_with(key, opts.clone())?),
                    Some(n) => drop(scratch.semaphore_with(key, n, opts.clone())?),
                }
            }
            Ok(Access::Lease)
        }
        Command::Elect(args) if args.lease.keys.len() > 1 => Err(Error::invalid(
            "keys",
            format!(
                "elect takes one KEY; {} were given ({})",
                args.lease.keys.len(),
                args.lease.key
            ),
        )
        .into()),
        Command::Elect(args) => {
            let opts = lock_options(&args.lease, scratch.confirmation_window())?;
            drop(scratch.election_with(&args.lease.key, opts)?);
            Ok(Access::Lease)
        }
        Command::Leader { key, .. } | Command::Status { key, .. } | Command::Break { key } => {
            leasehold::Key::new(key.as_str())?;
            Ok(Access::Look)
        }
        Command::List { prefix, .. } => {
            scratch.list(prefix).await?;
            Ok(Access::Look)
        }
        Command::Completions { .. } => {
            unreachable!("answered before any store is opened")
        }
        Command::Init { new } => Ok(Access::Create { proven: *new }),
    }
}

/// Lock options for `run` on a store whose confirmation window is
/// `window` ([`Store::confirmation_window`](leasehold::Store::confirmation_window)): the safety margin includes the
/// grace period, so that a child that ignores SIGTERM is killed before the
/// lease could pass to anyone else. With a TTL longer than the window, the
/// window takes its place: a store that lost its data grants again one
/// window after the loss, whatever the TTL.
pub fn lock_options(args: &LeaseArgs, window: Duration) -> anyhow::Result<LockOptions> {
    let grace = args.grace;
    let trusted = args.ttl.min(window);
    if grace > trusted / 2 {
        return Err(Error::invalid(
            "grace",
            format!(
                "--grace {} is too long for --ttl {}: the command must be stopped before the lease can pass to someone else, so the grace may be at most half the TTL (and at most half the confirmation window, {})",
                exact(grace),
                exact(args.ttl),
                exact(window)
            ),
        )
        .into());
    }
    let margin = trusted / 10 + grace;
    // Three renewals fit between a renewal and the safety deadline, so one
    // slow or failed renewal does not stop the command.
    let mut opts = LockOptions::new()
        .ttl(args.ttl)
        .safety_margin(margin)
        .renew_interval((trusted - margin) / 3);
    if let Some(cap) = args.poll_cap {
        opts = opts.poll_cap(cap);
    }
    if let Some(label) = &args.owner {
        opts = opts.owner_label(label.clone());
    }
    if let Some(data) = &args.data {
        opts = opts.data(data.clone());
    }
    Ok(opts)
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
    fn help_states_the_limits_the_library_enforces() {
        for limit in [
            format!("1 to {}", leasehold::MAX_SEMAPHORE_LIMIT),
            format!("at most {} bytes", leasehold::MAX_LABEL_LEN),
            format!("at most {} bytes", leasehold::MAX_DATA_LEN),
            format!("at most {} characters", leasehold::MAX_SEMAPHORE_KEY_LEN),
            format!("at most {} characters", leasehold::MAX_RW_LOCK_KEY_LEN),
            format!("1-{} characters", leasehold::MAX_KEY_LEN),
        ] {
            assert!(AFTER_HELP.contains(&limit), "{limit}");
        }
    }

    #[test]
    fn the_default_grace_fits_the_ttl() {
        let grace = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).unwrap().resolved();
            let Command::Run(run) = cli.command else {
                panic!()
            };
            run.lease.grace
        };
        let run = ["leasehold", "run", "k"];
        assert_eq!(
            grace(&[&run[..], &["--ttl", "3s", "--", "true"]].concat()),
            Duration::from_millis(750)
        );
        assert_eq!(grace(&[&run[..], &["--", "true"]].concat()), DEFAULT_GRACE);
        assert_eq!(
            grace(&[&run[..], &["--grace", "1s", "--", "true"]].concat()),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn poll_cap_is_read_for_run_and_elect_and_no_shorter_than_the_first_polls() {
        for cmd in ["run", "elect"] {
            let parse = |extra: &[&str]| {
                let args = [&["leasehold", cmd, "k"][..], extra, &["--", "true"]].concat();
                Cli::try_parse_from(args)
            };
            let lease = match parse(&["--poll-cap", "5s"]).unwrap().command {
                Command::Run(run) => run.lease,
                Command::Elect(elect) => elect.lease,
                _ => panic!(),
            };
            assert_eq!(lease.poll_cap, Some(Duration::from_secs(5)));
            assert!(lock_options(&lease, Duration::from_secs(60)).is_ok());
            let err = parse(&["--poll-cap", "50ms"]).unwrap_err().to_string();
            assert!(err.contains("at least 100ms"), "{err}");
            assert!(parse(&["--poll-cap", "100ms"]).is_ok());
        }
    }

    #[test]
    fn rejects_bad_durations() {
        assert!(
            Cli::try_parse_from(["leasehold", "run", "k", "--wait", "soon", "--", "true"]).is_err()
        );
    }

    #[test]
    fn once_per_takes_a_period_above_zero_and_not_with_limit() {
        let parse = |extra: &[&str]| {
            let args = [&["leasehold", "run", "k"][..], extra, &["--", "true"]].concat();
            Cli::try_parse_from(args)
        };
        let Command::Run(run) = parse(&["--once-per", "12h"]).unwrap().command else {
            panic!()
        };
        assert_eq!(run.once_per, Some(Duration::from_secs(12 * 3600)));
        for bad in [
            &["--once-per", "0"][..],
            &["--once-per", "0s"],
            &["--once-per", "-1h"],
            &["--once-per", "daily"],
            &["--once-per", "1h", "--limit", "2"],
            &["--once-per="],
        ] {
            let err = parse(bad).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad:?}: {err}");
        }
        assert!(
            Cli::try_parse_from(["leasehold", "elect", "k", "--once-per", "1h", "--", "true"])
                .is_err()
        );
    }

    fn args(ttl: u64, grace_ms: u64) -> LeaseArgs {
        LeaseArgs {
            keys: vec!["k".into()],
            key: "k".into(),
            ttl: Duration::from_secs(ttl),
            poll_cap: None,
            owner: None,
            data: None,
            grace_arg: None,
            grace: Duration::from_millis(grace_ms),
            command: vec!["true".into()],
        }
    }

    const W: Duration = leasehold::CONFIRMATION_WINDOW;

    #[test]
    fn grace_longer_than_half_the_ttl_is_rejected() {
        let err = lock_options(&args(1, 600), W).unwrap_err();
        assert!(err.to_string().contains("at most half the TTL"), "{err}");
        lock_options(&args(30, 5000), W).unwrap();
    }

    /// A TTL longer than the confirmation window: the grace is bounded by
    /// half the window, and the command's deadline (the guard's safety
    /// deadline + the grace, when SIGKILL comes) is a tenth of the window
    /// before a re-created store could grant the key (issue #28).
    #[tokio::test]
    async fn a_ttl_longer_than_the_window_is_cut_to_the_window() {
        let err = lock_options(&args(1200, 31_000), W).unwrap_err();
        assert!(err.to_string().contains("confirmation window"), "{err}");
        let clock = std::sync::Arc::new(leasehold::backend::SystemClock);
        let store = leasehold::Store::builder(std::sync::Arc::new(
            leasehold::memory::MemoryBackend::with_clock_and_max_ttl(
                clock.clone(),
                leasehold::memory::LOCAL_MAX_TTL,
            ),
        ))
        .clock(clock)
        .confirmation_window(W)
        .build();
        let grace = Duration::from_secs(5);
        let opts = lock_options(&args(1200, grace.as_millis() as u64), W).unwrap();
        let guard = store
            .lock_with("k", opts)
            .unwrap()
            .try_acquire()
            .await
            .unwrap();
        // SIGKILL comes at the safety deadline + the grace: W/10 before a
        // re-created store grants, not 18 minutes after.
        assert!(
            guard.valid_for() + grace <= W - W / 10,
            "the command may run {:?} + {grace:?} after its last renewal",
            guard.valid_for()
        );
        guard.release().await.unwrap();
    }
}
