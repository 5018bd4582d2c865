//! What one run measured, figure by figure: results.json, which the page
//! and the chart are made from.

use serde::Serialize;

use crate::stats::Latency;
use crate::worker::ManyReport;

/// Loads and durations of one run.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Plan {
    pub tiny: bool,
    pub overhead_rounds: usize,
    pub overhead_phase_ms: u64,
    pub overhead_max_cycles: u64,
    pub handoff_local_ms: u64,
    pub handoff_remote_ms: u64,
    pub waiting_tasks: Vec<usize>,
    pub waiting_ms: u64,
    pub contention_procs: usize,
    pub contention_tasks: usize,
    pub contention_ms: u64,
    pub contention_emulator_ms: u64,
    pub many_local: usize,
    pub many_emulator: usize,
    /// Figure 4 on moto (S3), which serves fewer requests than the others.
    #[serde(default)]
    pub many_moto: usize,
    pub many_ttl_ms: u64,
    pub many_emulator_ttl_ms: u64,
    pub many_hold_ms: u64,
    pub cli_runs: usize,
    pub peer_cycles_ms: u64,
    pub peer_handoff_ms: u64,
    /// Time given to child processes to start before a figure begins (ms).
    pub start_ms: u64,
    /// Figure 9: rounds, each a window on the reader-writer lock and one
    /// on the semaphore.
    #[serde(default)]
    pub rw_rounds: u32,
    /// Figure 9: each window's length (ms).
    #[serde(default)]
    pub rw_window_ms: u64,
    /// Figure 15: the longest wait (ms); the others end from half of it.
    #[serde(default)]
    pub wait_cost_ms: u64,
    /// Figure 15: waiters per store and way of waiting.
    #[serde(default)]
    pub wait_cost_waiters: usize,
}

impl Plan {
    pub fn new(tiny: bool) -> Plan {
        if tiny {
            Plan {
                tiny,
                overhead_rounds: 1,
                overhead_phase_ms: 200,
                overhead_max_cycles: 200,
                handoff_local_ms: 600,
                handoff_remote_ms: 1_200,
                waiting_tasks: vec![1, 8],
                waiting_ms: 500,
                contention_procs: 2,
                contention_tasks: 2,
                contention_ms: 800,
                contention_emulator_ms: 800,
                many_local: 200,
                many_emulator: 0,
                many_moto: 0,
                many_ttl_ms: 600,
                many_emulator_ttl_ms: 15_000,
                many_hold_ms: 700,
                cli_runs: 3,
                peer_cycles_ms: 0,
                peer_handoff_ms: 0,
                start_ms: 800,
                rw_rounds: 1,
                rw_window_ms: 600,
                wait_cost_ms: 3_000,
                wait_cost_waiters: 1,
            }
        } else {
            Plan {
                tiny,
                // Short rounds, many: the disk's latency here drifts over
                // seconds, and both loops should see the same machine.
                overhead_rounds: 32,
                overhead_phase_ms: 250,
                overhead_max_cycles: 50_000,
                handoff_local_ms: 5_000,
                handoff_remote_ms: 20_000,
                waiting_tasks: vec![1, 8, 64],
                waiting_ms: 5_000,
                contention_procs: 8,
                contention_tasks: 8,
                contention_ms: 15_000,
                contention_emulator_ms: 10_000,
                many_local: 10_000,
                many_emulator: 1_000,
                many_moto: 200,
                many_ttl_ms: 15_000,
                many_emulator_ttl_ms: 15_000,
                many_hold_ms: 20_000,
                // Figure 5's rounds: about 12 ms each.
                cli_runs: 200,
                peer_cycles_ms: 10_000,
                peer_handoff_ms: 45_000,
                start_ms: 2_000,
                rw_rounds: 3,
                rw_window_ms: 5_000,
                // Ten minutes, the waiters released from five on (issue
                // 55's figure): added to the run's time, all stores at once.
                wait_cost_ms: 600_000,
                wait_cost_waiters: 5,
            }
        }
    }
}

/// Figure 1's second SQLite row: the raw loop hops through `spawn_blocking`.
pub const SQLITE_HOP: &str = "SQLite (raw loop in async code)";

/// Figure 1, one store.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Overhead {
    pub store: String,
    pub leasehold_cps: f64,
    pub raw_cps: f64,
    /// Median over rounds of leasehold / raw.
    pub ratio: f64,
    pub round_ratios: Vec<f64>,
    pub leasehold_requests_per_cycle: f64,
    pub raw_requests_per_cycle: f64,
    pub minimum: u32,
    /// Figure 6's peer in the same rounds, where it runs in this process
    /// (etcd's).
    #[serde(default)]
    pub peer: Option<PeerRounds>,
}

/// A peer's uncontended cycles, run in figure 1's rounds beside leasehold.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct PeerRounds {
    pub peer_cps: f64,
    /// Median over rounds of leasehold / peer.
    pub ratio: f64,
    pub round_ratios: Vec<f64>,
}

/// Figure 2, one store.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Handoff {
    pub store: String,
    pub same_process: Option<Latency>,
    pub other_process: Option<Latency>,
    /// (tasks in the waiting process, its requests per second).
    pub waiting_requests: Vec<(usize, f64)>,
}

/// Figure 3, one store.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Contention {
    pub store: String,
    pub procs: usize,
    pub tasks: usize,
    pub seconds: f64,
    pub passes_per_s: f64,
    pub requests_per_s: f64,
    pub longest_wait_ms: f64,
    /// Share of passes that went to another process.
    pub cross_process_share: f64,
    /// Passes of the least and most served process.
    pub min_process_passes: usize,
    pub max_process_passes: usize,
    /// Tasks that never got the lock.
    pub starved_tasks: usize,
    pub errors: u64,
}

/// Figure 4, one store.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Many {
    pub store: String,
    #[serde(flatten)]
    pub report: ManyReport,
}

/// Figure 5.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Cli {
    pub runs: usize,
    pub leasehold_ms: f64,
    pub flock_ms: f64,
    pub ratio: f64,
    /// Size of the `leasehold` binary measured, and its build profile.
    #[serde(default)]
    pub binary_bytes: u64,
    #[serde(default)]
    pub binary_profile: String,
    /// The ladder of figure 5 ([`CLI_PARTS`]): each command's
    /// median wall time.
    #[serde(default)]
    pub parts: Vec<CliPart>,
    /// A 4 KiB append to a file and `fdatasync`, median.
    #[serde(default)]
    pub synced_append_ms: f64,
    /// An `fsync` of the directory, median.
    #[serde(default)]
    pub synced_dir_ms: f64,
    /// Measured before `scripts/bench.sh` started the servers (a quiet
    /// machine), by a run of its own.
    #[serde(default)]
    pub before_servers: bool,
}

/// Figure 5's ladder (`figures::cli`), in the order the page lists it:
/// (the command, what it adds to the one before).
pub const CLI_PARTS: [(&str, &str); 4] = [
    (
        "`true`",
        "a fork/exec of a small binary by the harness: the floor of any command",
    ),
    (
        "`leasehold --version`",
        "loading the leasehold binary (the dynamic loader, its relocations, page faults) and parsing the command line",
    ),
    (
        "`leasehold --store sqlite:FILE status k`",
        "a tokio runtime, opening SQLite (WAL, the store's epoch read) and one read",
    ),
    (
        "`leasehold --store sqlite:FILE run k -- true`",
        "the acquisition and release transactions, the spare watchdog and the command's fork/exec",
    ),
];

/// One rung of figure 5's ladder.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct CliPart {
    pub name: String,
    pub ms: f64,
}

/// Figure 6, one peer.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Peer {
    pub peer: String,
    pub store: String,
    pub peer_cps: f64,
    pub leasehold_cps: Option<f64>,
    /// The median of the rounds' leasehold / peer ratios, where the two
    /// ran in the same rounds (figure 1's); else the ratio of the rates.
    #[serde(default)]
    pub ratio: Option<f64>,
    /// The rounds' ratios: their middle half.
    #[serde(default)]
    pub round_ratios: Vec<f64>,
    pub peer_requests_per_cycle: Option<f64>,
    pub peer_handoff: Option<Latency>,
    pub leasehold_handoff: Option<Latency>,
    pub note: String,
}

/// Figure 9, one store: readers and a writer in other processes on one
/// reader-writer lock, and the same readers on a semaphore.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RwLockFigure {
    pub store: String,
    /// Reader processes; the lock admits as many readers, the semaphore has
    /// as many permits.
    pub readers: u32,
    pub ttl_ms: u64,
    pub rounds: u32,
    /// Each window's length (ms): `rounds` of each kind.
    pub window_ms: u64,
    /// A read hold's range (ms) and a reader's pause after it.
    pub read_ms: (u64, u64),
    pub think_ms: u64,
    /// The writer's hold and its pause range after each (ms).
    pub write_ms: u64,
    pub pause_ms: (u64, u64),
    /// The writer's waits, from the call to the grant (ms).
    pub writer_wait: Option<Latency>,
    /// The longest wait the end of a window cut short (ms), if any.
    pub writer_cut_short_ms: f64,
    /// The longest read hold seen, from the grant to the release call (ms).
    pub longest_read_ms: f64,
    /// 2 × (longest read + TTL/3), ms.
    pub bound_ms: f64,
    /// Readers' waits on the lock, from the call to the grant (ms).
    pub reader_wait: Option<Latency>,
    /// Read holds per second, all readers, on the lock (with the writer)
    /// and on the semaphore (without).
    pub rw_reads_per_s: f64,
    pub sem_reads_per_s: f64,
    /// rw / semaphore.
    pub ratio: f64,
    /// Requests per second, all processes, in each kind of window.
    pub rw_requests_per_s: f64,
    pub sem_requests_per_s: f64,
    /// Write holds whose span (grant to release call) met a read hold's.
    pub overlaps: usize,
    /// The most read holds whose spans met at one moment, on the lock and
    /// on the semaphore.
    pub max_concurrent_reads: usize,
    pub max_concurrent_permits: usize,
    pub errors: u64,
}

/// Figure 15, one store and one way of waiting.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct WaitCost {
    pub store: String,
    /// How the waiters waited.
    pub mode: String,
    /// Their poll cap (ms).
    pub cap_ms: u64,
    /// Each waiter's wait, from its call to the holder's release (s), and
    /// the requests it sent meanwhile.
    pub waits_s: Vec<f64>,
    pub requests: Vec<u64>,
    /// All waiters' requests over all their waiting time.
    pub requests_per_s: f64,
    /// From each release call to the waiter's grant.
    pub handoff: Option<Latency>,
}

impl Results {
    /// Figure 15's row of the same store that waited with a lower cap (the
    /// "before" of `w`), if there is one.
    pub fn wait_cost_before(&self, w: &WaitCost) -> Option<&WaitCost> {
        self.wait_cost
            .iter()
            .find(|b| b.store == w.store && b.cap_ms < w.cap_ms)
    }
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize, serde::Deserialize, Default)]
pub struct Results {
    pub plan: Option<Plan>,
    pub started_unix: u64,
    pub seconds: f64,
    pub machine: String,
    pub overhead: Vec<Overhead>,
    pub handoff: Vec<Handoff>,
    pub contention: Vec<Contention>,
    pub many: Vec<Many>,
    pub cli: Option<Cli>,
    pub peers: Vec<Peer>,
    /// Figure 9, one row per store.
    #[serde(default)]
    pub rw_lock: Vec<RwLockFigure>,
    /// Figure 15, one row per store and way of waiting.
    #[serde(default)]
    pub wait_cost: Vec<WaitCost>,
    /// Figure 16, one row per store and number of keys.
    #[serde(default)]
    pub multi_key: Vec<MultiKey>,
    /// What was skipped or failed, and why.
    pub notes: Vec<String>,
}

impl Results {
    /// The results.json at `path`, as a run wrote it.
    pub fn read(path: &std::path::Path) -> anyhow::Result<Results> {
        use anyhow::Context;
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }
}

/// Figure 16: a multi-key lock against its keys' single locks taken one
/// after the other.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct MultiKey {
    pub store: String,
    pub keys: usize,
    pub multi_cps: f64,
    pub singles_cps: f64,
    /// Median of the rounds' ratios, multi-key / singles.
    pub ratio: f64,
    pub multi_requests_per_cycle: f64,
    pub singles_requests_per_cycle: f64,
}
