//! What a run is asked to do: its options and the faults it can inject.

use std::path::PathBuf;
use std::time::Duration;

/// Fault kinds the coordinator can inject.
pub const FAULTS: &[&str] = &[
    "kill",
    "pause",
    "break",
    "loss",
    "restart",
    "failover",
    "partition",
    "delay",
    "reset",
    "loss-partition",
];

/// Faults that need the fault proxy (network stores only).
pub const NETWORK_FAULTS: &[&str] = &["partition", "delay", "reset"];

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The store to torture (sqlite:PATH, or a cloud store URL).
    #[arg(long)]
    pub store: String,
    /// How long to run.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Library worker processes.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Processes looping on `leasehold run`.
    #[arg(long, default_value_t = 2)]
    pub cli_workers: usize,
    /// Keys contended for.
    #[arg(long, default_value_t = 2)]
    pub keys: usize,
    /// Multi-key library worker processes (multi-0, ...): each takes every
    /// key at once (a MultiLock), given in an order of its own (rotated by
    /// its number, reversed for odd ones), works under all of them, and
    /// releases; its waits run out now and then. With any, the coordinator
    /// also snapshots who holds each key, for the deadlock and orphan-hold
    /// checks.
    #[arg(long, default_value_t = 0)]
    pub multi: usize,
    /// Lease TTL.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
    /// Comma-separated fault kinds: kill (SIGKILL a holder, or the `leasehold
    /// run` process of one), pause (SIGSTOP a library holder or the
    /// `leasehold run` process of one for 1.5 TTL), break (break the key's
    /// lease; the store names the lease it ended), loss (the store loses its
    /// data: the SQLite file, the Azure container, the DynamoDB table is
    /// deleted; a new table is created), restart (run --restart-cmd: the
    /// store restarts with its state lost), and for network stores, through
    /// a fault proxy per holder: partition (blackhole for 1.5 TTL), delay
    /// (TTL/10 per chunk for 2 TTL), reset (RST every open connection).
    /// loss-partition: the store loses its data at the moment every holder
    /// is cut off from it (partitioned through its proxy for --cut-for on a
    /// network store; on SQLite, SIGSTOPped until another holder began after
    /// the loss, at most --cut-for), so
    /// that no holder of the lost data learns of the loss by renewing; the
    /// coordinator re-creates the store at once (with mixed max TTLs,
    /// alternately with the short and the long max TTL).
    #[arg(long, default_value = "kill,pause,break", value_delimiter = ',')]
    pub faults: Vec<String>,
    /// Library workers (of --workers, the first N) that take read holds of
    /// the reader-writer lock on their key; the other library workers on a
    /// key that has readers (of either kind) take its write hold, those on
    /// other keys plain locks.
    #[arg(long, default_value_t = 0)]
    pub readers: usize,
    /// `leasehold run` loops (of --cli-workers, the first N) that run with
    /// `--shared` (the others are plain runs: a reader-writer lock's writer).
    #[arg(long, default_value_t = 0)]
    pub shared_runs: usize,
    /// Library workers (of --workers) that keep writing for a random while
    /// after their guard said lost, as a buggy user would.
    #[arg(long, default_value_t = 2)]
    pub misbehaving: usize,
    /// `leasehold run` loops (of --cli-workers) whose command is a shell that
    /// forks two background workers writing to the witness.
    #[arg(long, default_value_t = 1)]
    pub forking: usize,
    /// Whether the pause fault also hits `leasehold run` holders (SIGSTOP of
    /// the `leasehold run` process while its command runs on).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub pause_run: bool,
    /// Inject a deliberate bug (to show the checker catches it): into the
    /// library workers' backend (grant-held: now and then grant a key
    /// someone holds; ...), the holders' environment (old-window), or the
    /// multi-key workers' acquisition (multi-caller-order,
    /// multi-keeps-first). A run with a bug must fail.
    #[arg(long)]
    pub inject_bug: Option<String>,
    /// Shell command that restarts the store with its state lost (for the
    /// restart fault), e.g. "scripts/azurite.sh stop && scripts/azurite.sh start".
    #[arg(long)]
    pub restart_cmd: Option<String>,
    /// Shell command that fails the store's primary over to a replica (for
    /// the failover fault), e.g. "scripts/redis-sentinel.sh crash-failover".
    /// Unlike a restart, nothing of the witness's order is relaxed: grants
    /// before and after the failover must exclude each other and their
    /// tokens must grow.
    #[arg(long)]
    pub failover_cmd: Option<String>,
    /// Mixed max TTLs (issue 28): every second holder (lib-1, lib-3, ...,
    /// cli-1, ...) opens the store with this `max_ttl` in its URL instead of
    /// the store URL's, takes TTLs between half this and this, and holds a
    /// lease for three quarters to one and a half of its TTL. The store is first created
    /// with this max TTL, so that long leases exist when it is lost.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub long_max_ttl: Option<Duration>,
    /// How long the loss-partition fault cuts the holders off: two
    /// confirmation windows is enough for a new store's quarantine to end
    /// while a holder that trusted its lease for longer is still cut off.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub cut_for: Duration,
    /// Mean time between faults.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub fault_every: Duration,
    /// The `leasehold` binary (default: next to this one).
    #[arg(long)]
    pub leasehold: Option<PathBuf>,
    /// Where the witness keeps its files (default: a new temporary directory).
    #[arg(long)]
    pub witness: Option<PathBuf>,
    /// Also write the report (Markdown) to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// Whether a holder is a long one under mixed max TTLs: on every key, the
/// library workers of every second round (lib-i works on key i mod keys),
/// and every second `leasehold run` loop.
pub fn is_long(args: &RunArgs, worker: &str) -> bool {
    let Some((kind, n)) = worker.split_once('-') else {
        return false;
    };
    let Ok(n) = n.parse::<usize>() else {
        return false;
    };
    args.long_max_ttl.is_some()
        && match kind {
            "lib" => (n / args.keys.max(1)) % 2 == 1,
            "multi" => false,
            _ => n % 2 == 1,
        }
}
