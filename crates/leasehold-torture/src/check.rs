//! The checker: reads the witness log and finds every violation.
//!
//! A *section* is what one holder did under one grant: from a holder's
//! `begin`, every record of the same (key, token, worker) until its next
//! `begin`. Its *held interval* runs from its first to its last ordinary
//! write (`begin`, `tick`, `end`); writes a holder makes on purpose after its
//! guard said lost (`late`, a buggy user) are not part of it. Its *store
//! epoch* is the one it began in.
//!
//! Violations, each of which a test in `seeded.rs` shows being found:
//!
//! * **overlap**: the held intervals of two sections of a key intersect,
//!   whatever their store epochs. Every pair is compared, not only
//!   neighbours. One excuse only: a `break` that ended the *earlier* holder's
//!   own lease (the break record names the token it ended, in the same store
//!   epoch) before the later one began, and only for writes until that holder
//!   could have learned of it ([`Limits::break_notice`]: its next renewal
//!   plus grace, counted from when the break had landed: its answer, or the
//!   later holder's first write if that came first; on a loaded store a
//!   break can take many seconds to land). Its mirror is the same excuse:
//!   a section that *began* after its own lease was broken, within that
//!   notice (granted, broken, then begun: a writer between its grant and
//!   its first write while others took the key), holds no lease and is
//!   not ordered either (see token order). Such overlaps are counted apart
//!   and must be fenced.
//! * **fenced overlap**: two sections' *accepted* writes (late ones
//!   included) interleave: the fenced resource saw two holders at once. The
//!   witness rejects older tokens across store epochs too, so this fires on
//!   a token granted twice, or on tokens that did not grow across a loss.
//! * **token order**: sections of a key in the order they began do not
//!   have strictly increasing tokens, across store epochs too (each
//!   section's token above every earlier one's; a section that began in the
//!   transition epoch while a store loss was under way, see
//!   [`LOSS_BEGINS`], is not checked itself, as the old store and the fresh
//!   one may both grant then, but later ones are checked against it).
//! * **work after lost**: an ordinary write after the holder's own guard
//!   said the lease was lost (a holder that checks its guard must not).
//! * **fencing error**: the witness accepted or rejected a write against its
//!   own rule, recomputed here from the log (accept iff the token is not
//!   below the greatest accepted for the key so far).
//! * **orphan write**: a `leasehold run` command (or anything it started)
//!   wrote more than [`Limits::kill_grace`] after its `leasehold run` was
//!   SIGKILLed.
//! * **deadlock** and **orphan hold** (multi-key holders): see
//!   [`crate::liveness`].
//!
//! Reader-writer locks: a section written by a reader (its records are
//! marked shared) may overlap other readers' sections. Two sections
//! *conflict* unless both are readers, and the overlap and fenced-overlap
//! rules apply to conflicting pairs only (the witness's fence, see
//! [`Fence`], keeps a reader's and a writer's accepted writes apart by
//! itself, so an overlap of a reader and a writer shows as an overlap and
//! refused writes, not as a fenced overlap). Token
//! order for readers (who share the last writer's token) is: a writer's
//! token above every token of a section that began before it, readers'
//! included; a reader's token not below that of any writer that began
//! before it (readers that began before it may have a greater one: a writer
//! that gave up waiting for readers raised the key's counter without
//! writing).
//!
//! It also measures, for every handover from a holder that did not end
//! normally (and whose lease was not broken), the margin by which the old holder's last write preceded the new
//! holder's first, and the time from each fault to the next holder's first
//! write.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use crate::liveness::Liveness;
use crate::witness::{Fence, Kind, Record};

/// The detail of the epoch record the coordinator writes just before it
/// makes the store lose its state: grants in that (transition) epoch may come
/// from the old store or the fresh one, so their tokens are not ordered.
pub const LOSS_BEGINS: &str = "store loss begins";
/// The detail of the epoch record written once the store's data is deleted.
pub const STORE_LOST: &str = "store lost";
/// The detail of the epoch record written once the store's data is deleted
/// and re-created while its holders were cut off from it (the
/// loss-partition fault).
pub const STORE_LOST_CUT_OFF: &str = "store lost, its holders cut off";
/// The detail of the epoch record written once the store restarted empty.
pub const STORE_RESTARTED: &str = "store restarted";
/// The detail of the record written once the store's primary failed over:
/// the witness's epoch stays (tokens must keep growing across it).
pub const FAILED_OVER: &str = "store failed over";

/// Time bounds the checker allows holders.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long after a break of its lease a holder may still write: its next
    /// renewal (at most a renewal interval away, plus the request's time)
    /// plus the grace it takes to stop.
    pub break_notice: Duration,
    /// How long after its `leasehold run` was SIGKILLed a command's process
    /// tree may still write (issue 10: it must be dead within 1 s).
    pub kill_grace: Duration,
    /// The run's lease TTL (for the liveness checks, see
    /// [`crate::liveness`]).
    pub ttl: Duration,
}

impl Limits {
    /// The bounds for a run with lease TTL `ttl`: renewal every TTL/3, the
    /// `leasehold run --grace` of TTL/4 the harness passes, and 500 ms for
    /// the renewal request and scheduling.
    pub fn for_ttl(ttl: Duration) -> Limits {
        Limits {
            break_notice: ttl / 3 + ttl / 4 + Duration::from_millis(500),
            kill_grace: Duration::from_secs(1),
            ttl,
        }
    }
}

/// A fault record's kind: the first word of its detail (`break`, `kill`,
/// ...). A break's record goes on with [`BREAK_RETURNED`] and the time its
/// answer came back: a break can take long to land on a loaded store, and it
/// takes effect somewhere between the record's time (sent) and that.
pub fn fault_kind(r: &Record) -> &str {
    r.detail.split(' ').next().unwrap_or("")
}

/// A break's times: sent, and answered (it landed in between).
type SentAnswered = (u64, u64);

/// The word before a break's answer time in its fault record's detail.
pub const BREAK_RETURNED: &str = "returned";

fn break_returned(r: &Record) -> Option<u64> {
    let mut words = r.detail.split(' ').skip(1);
    match (words.next(), words.next()) {
        (Some(BREAK_RETURNED), Some(t)) => t.parse().ok(),
        _ => None,
    }
}

#[derive(Debug, Default, Clone)]
struct Section {
    epoch: u64,
    key: String,
    token: u64,
    worker: String,
    /// A reader's section (of a reader-writer lock).
    shared: bool,
    /// First and last ordinary write (the held interval).
    begin: Option<u64>,
    stop: u64,
    /// First and last accepted write of any kind.
    first_accepted: Option<u64>,
    last_accepted: u64,
    ended: bool,
    lost_at: Option<u64>,
    writes_after_lost: usize,
    /// Last write of any kind (for orphan detection).
    last_write: u64,
}

/// The late writes of holders that kept writing after their guard said lost.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LateWrites {
    pub total: usize,
    /// Rejected by fencing (a newer holder had written).
    pub rejected: usize,
    /// Accepted: nobody newer had written to the key yet.
    pub accepted: usize,
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Findings {
    pub operations: usize,
    pub acquisitions: usize,
    /// Of `acquisitions`, those of readers.
    pub read_acquisitions: usize,
    /// Pairs of readers' sections whose held intervals overlapped (readers
    /// sharing the key: shows sharing happened).
    pub shared_reads: usize,
    pub faults: BTreeMap<String, usize>,
    /// Of `faults`, those aimed at a `leasehold run` holder.
    pub faults_on_run: BTreeMap<String, usize>,
    pub fenced_overlaps: Vec<String>,
    pub overlaps: Vec<String>,
    pub overlaps_after_break: usize,
    pub token_order: Vec<String>,
    pub work_after_lost: Vec<String>,
    pub fencing_errors: Vec<String>,
    pub orphan_writes: Vec<String>,
    pub late: LateWrites,
    pub stale_writes_rejected: usize,
    /// Sections granted while a store loss was under way (a transition
    /// epoch): their tokens are not ordered, their overlaps are checked.
    pub granted_during_loss: usize,
    /// Of the overlaps and fenced overlaps, those between sections of
    /// different store epochs (caused by a store losing its state).
    pub across_store_loss: usize,
    /// Margins of handovers from holders that did not end normally.
    pub lost_handover_margins: Vec<Duration>,
    /// Time from each fault to the next holder's first write, by fault kind.
    pub recovery: BTreeMap<String, Vec<Duration>>,
    /// Faults after which nobody held the key again before the run ended.
    pub unrecovered: BTreeMap<String, usize>,
    /// How long each break took to answer (it landed somewhere within).
    pub break_latencies: Vec<Duration>,
    /// Multi-key holders' deadlocks and orphan holds.
    pub liveness: Liveness,
}

impl Findings {
    pub fn violations(&self) -> usize {
        self.fenced_overlaps.len()
            + self.overlaps.len()
            + self.token_order.len()
            + self.work_after_lost.len()
            + self.fencing_errors.len()
            + self.orphan_writes.len()
            + self.liveness.deadlocks.len()
            + self.liveness.orphan_holds.len()
    }

    /// Every violation, by kind, in report order.
    pub fn by_kind(&self) -> [(&'static str, &Vec<String>); 8] {
        [
            ("overlap", &self.overlaps),
            ("fenced overlap", &self.fenced_overlaps),
            ("token order", &self.token_order),
            ("work after lost", &self.work_after_lost),
            ("fencing error", &self.fencing_errors),
            ("orphan write", &self.orphan_writes),
            ("deadlock", &self.liveness.deadlocks),
            ("orphan hold", &self.liveness.orphan_holds),
        ]
    }
}

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

pub fn check(records: &[Record], limits: Limits) -> Findings {
    let mut f = Findings::default();
    let mut sections: Vec<Section> = Vec::new();
    let mut current: HashMap<(String, u64, String), usize> = HashMap::new();
    let mut faults = Vec::new();
    // The witness's own rule, recomputed: greatest accepted token per key,
    // in log order (the witness appends under the key's lock).
    let mut fence: HashMap<String, Fence> = HashMap::new();
    let mut transitions: HashSet<u64> = HashSet::new();
    f.liveness = crate::liveness::check(records, limits.ttl);
    for r in records {
        match r.kind {
            // Attempts and snapshots: no writes (see crate::liveness).
            Kind::Wait | Kind::GaveUp | Kind::Held => continue,
            // A store loss is one fault for the whole store, counted by its
            // epoch record; its fault records (one per holder) only anchor
            // recovery.
            Kind::Fault if matches!(fault_kind(r), "loss" | "restart" | "loss-partition") => {
                faults.push(r);
                continue;
            }
            Kind::Epoch => {
                match r.detail.as_str() {
                    LOSS_BEGINS => {
                        transitions.insert(r.epoch);
                    }
                    STORE_LOST => *f.faults.entry("loss".into()).or_default() += 1,
                    STORE_RESTARTED => *f.faults.entry("restart".into()).or_default() += 1,
                    FAILED_OVER => *f.faults.entry("failover".into()).or_default() += 1,
                    STORE_LOST_CUT_OFF => {
                        *f.faults.entry("loss-partition".into()).or_default() += 1
                    }
                    _ => {}
                }
                continue;
            }
            Kind::Fault => {
                *f.faults.entry(fault_kind(r).into()).or_default() += 1;
                if r.worker.starts_with("cli-") {
                    *f.faults_on_run.entry(fault_kind(r).into()).or_default() += 1;
                }
                faults.push(r);
                continue;
            }
            _ => {}
        }
        if r.kind != Kind::Lost {
            let fence = fence.entry(r.key.clone()).or_default();
            if fence.admits(r.token, r.shared) != r.accepted {
                f.fencing_errors.push(format!(
                    "{} epoch {}: the witness {} a {} of token {} ({}) at {} ns; the greatest accepted were {} (writes) and {} (reads)",
                    r.key,
                    r.epoch,
                    if r.accepted { "accepted" } else { "rejected" },
                    if r.shared { "read" } else { "write" },
                    r.token,
                    r.worker,
                    r.t_ns,
                    fence.write,
                    fence.read
                ));
            }
            if r.accepted {
                fence.raise(r.token, r.shared);
            }
        }
        let id = (r.key.clone(), r.token, r.worker.clone());
        let index = match current.get(&id) {
            Some(i) if r.kind != Kind::Begin => *i,
            _ => {
                sections.push(Section {
                    epoch: r.epoch,
                    key: r.key.clone(),
                    token: r.token,
                    worker: r.worker.clone(),
                    shared: r.shared,
                    ..Section::default()
                });
                current.insert(id, sections.len() - 1);
                sections.len() - 1
            }
        };
        let s = &mut sections[index];
        if r.kind == Kind::Lost {
            s.lost_at.get_or_insert(r.t_ns);
            continue;
        }
        s.last_write = s.last_write.max(r.t_ns);
        if r.accepted {
            s.first_accepted.get_or_insert(r.t_ns);
            s.last_accepted = s.last_accepted.max(r.t_ns);
        }
        if r.kind == Kind::Late {
            f.late.total += 1;
            if r.accepted {
                f.late.accepted += 1;
            } else {
                f.late.rejected += 1;
            }
            continue;
        }
        f.operations += 1;
        if !r.accepted {
            f.stale_writes_rejected += 1;
        }
        if s.lost_at.is_some() {
            s.writes_after_lost += 1;
        }
        s.begin.get_or_insert(r.t_ns);
        s.stop = s.stop.max(r.t_ns);
        if r.kind == Kind::End {
            s.ended = true;
        }
    }

    orphans(&mut f, &sections, &faults, limits);

    let mut by_key: BTreeMap<String, Vec<Section>> = BTreeMap::new();
    for s in sections {
        if s.writes_after_lost > 0 {
            f.work_after_lost.push(format!(
                "{} token {} ({}) wrote {} time(s) after its guard said lost",
                s.key, s.token, s.worker, s.writes_after_lost
            ));
        }
        by_key.entry(s.key.clone()).or_default().push(s);
    }
    // Breaks, by (key, epoch, token of the lease they ended): when each was
    // sent and when its answer came back (it took effect in between).
    let mut breaks: HashMap<(&str, u64, u64), Vec<SentAnswered>> = HashMap::new();
    for r in faults
        .iter()
        .filter(|r| fault_kind(r) == "break" && r.token > 0)
    {
        let returned = break_returned(r).unwrap_or(r.t_ns).max(r.t_ns);
        f.break_latencies
            .push(Duration::from_nanos(returned - r.t_ns));
        breaks
            .entry((r.key.as_str(), r.epoch, r.token))
            .or_default()
            .push((r.t_ns, returned));
    }

    let mut starts: HashMap<String, Vec<(u64, String)>> = HashMap::new();
    for (key, all) in by_key {
        fenced_overlaps(&mut f, &key, &all);
        // Sections that never wrote (a lease lost before its first write)
        // held nothing.
        let mut secs: Vec<Section> = all.into_iter().filter(|s| s.begin.is_some()).collect();
        f.acquisitions += secs.len();
        f.read_acquisitions += secs.iter().filter(|s| s.shared).count();
        for (j, b) in secs.iter().enumerate().filter(|(_, b)| b.shared) {
            f.shared_reads += secs[..j]
                .iter()
                .filter(|a| a.shared && a.stop > b.begin.unwrap_or(0))
                .count();
        }
        secs.sort_by_key(|s| s.begin);
        f.granted_during_loss += secs
            .iter()
            .filter(|s| transitions.contains(&s.epoch))
            .count();
        // Whether a break of `s`'s lease, (sent, answered), matches `hit`.
        let broken = |s: &Section, hit: &dyn Fn(u64, u64) -> bool| {
            breaks
                .get(&(key.as_str(), s.epoch, s.token))
                .into_iter()
                .flatten()
                .any(|&(sent, returned)| hit(sent, returned))
        };
        // A section that began after its own lease was broken, before it
        // could have learned of it (a writer that passed its wait for
        // readers just after the break): no holder's, so not ordered.
        // (Readers hold reader slots, never the key's lease: a reader's
        // token may equal the broken one's.)
        let broken_before = |b: &Section| {
            let start = b.begin.unwrap_or(0);
            !b.shared
                && broken(b, &|sent, returned| {
                    sent <= start && start <= returned + ns(limits.break_notice)
                })
        };
        token_order(&mut f, &key, &secs, &transitions, broken_before);
        for (j, b) in secs.iter().enumerate() {
            let start = b.begin.unwrap_or(0);
            // Every earlier section still holding when `b` began, of those
            // that exclude it (readers share).
            let earlier = || secs[..j].iter().filter(|a| conflict(a, b));
            let mut predecessor: Option<&Section> = None;
            for a in earlier() {
                if a.stop <= start {
                    if predecessor.is_none_or(|p| a.stop >= p.stop) {
                        predecessor = Some(a);
                    }
                    continue;
                }
                // Sent before `b` began; `a` may write until it could have
                // learned of it: the break took effect by the time its
                // answer came back, and by the time `b` began (if `b` was
                // granted because of it), whichever is first.
                // Or `b`'s own lease was broken before it began, and it
                // began before it could have learned of it (the key was
                // taken by `a` after the break): no holder's section, as
                // for the token order, and the resource refuses it.
                let excused = broken(a, &|sent, returned| {
                    sent <= start && a.stop <= returned.min(start) + ns(limits.break_notice)
                }) || broken_before(b);
                if excused {
                    f.overlaps_after_break += 1;
                } else {
                    f.across_store_loss += usize::from(a.epoch != b.epoch);
                    f.overlaps.push(format!(
                        "{key}: token {} ({}{}, epoch {}) held until {} ns, after token {} ({}{}, epoch {}) began at {} ns",
                        a.token, a.worker, reader(a), a.epoch, a.stop, b.token, b.worker, reader(b), b.epoch, start
                    ));
                }
            }
            if let Some(p) = predecessor {
                // A broken holder's successor starts at once by design: its
                // gap is no safety margin.
                let broken = breaks.contains_key(&(key.as_str(), p.epoch, p.token));
                if !p.ended && !broken && earlier().all(|a| a.stop <= start) {
                    f.lost_handover_margins
                        .push(Duration::from_nanos(start - p.stop));
                }
            }
            starts
                .entry(key.clone())
                .or_default()
                .push((start, b.worker.clone()));
        }
    }
    // Recovery: from each fault to the next section on its key by another
    // holder, whatever the epoch (times are all on the boot clock).
    for fault in &faults {
        let next = starts
            .get(&fault.key)
            .into_iter()
            .flatten()
            .filter(|(t, w)| *w != fault.worker && *t > fault.t_ns)
            .map(|(t, _)| *t)
            .min();
        match next {
            Some(t) => f
                .recovery
                .entry(fault_kind(fault).into())
                .or_default()
                .push(Duration::from_nanos(t - fault.t_ns)),
            None => *f.unrecovered.entry(fault_kind(fault).into()).or_default() += 1,
        }
    }
    f
}

/// Whether two sections exclude each other: unless both are readers.
fn conflict(a: &Section, b: &Section) -> bool {
    !(a.shared && b.shared)
}

/// Tokens must grow in the order sections began, across store epochs too:
/// a writer's (every holder's but a reader's) token above the greatest of
/// any section that began before it, a reader's not below the greatest of
/// a writer's that began before it (not checked for a section that began
/// while a store loss was under way, nor for one whose own lease was broken
/// before it began, while it could not know: `broken_before`).
fn token_order(
    f: &mut Findings,
    key: &str,
    secs: &[Section],
    transitions: &HashSet<u64>,
    broken_before: impl Fn(&Section) -> bool,
) {
    let mut greatest: Option<&Section> = None;
    let mut greatest_writer: Option<&Section> = None;
    for b in secs.iter().filter(|b| !broken_before(b)) {
        // A writer: strictly above any; a reader: not below a writer.
        let above = if b.shared { greatest_writer } else { greatest };
        if let Some(a) = above.filter(|_| !transitions.contains(&b.epoch)) {
            if b.token < a.token || (b.token == a.token && !b.shared) {
                f.token_order.push(format!(
                    "{key}: token {} ({}{}, epoch {}) began after token {} ({}{}, epoch {})",
                    b.token,
                    b.worker,
                    reader(b),
                    b.epoch,
                    a.token,
                    a.worker,
                    reader(a),
                    a.epoch
                ));
            }
        }
        if greatest.is_none_or(|a| b.token > a.token) {
            greatest = Some(b);
        }
        if !b.shared && greatest_writer.is_none_or(|a| b.token > a.token) {
            greatest_writer = Some(b);
        }
    }
}

/// How a violation's message names a reader's section.
fn reader(s: &Section) -> &'static str {
    if s.shared {
        ", a reader"
    } else {
        ""
    }
}

/// Any two sections whose accepted writes interleave.
fn fenced_overlaps(f: &mut Findings, key: &str, secs: &[Section]) {
    let mut accepted: Vec<&Section> = secs.iter().filter(|s| s.first_accepted.is_some()).collect();
    accepted.sort_by_key(|s| s.first_accepted);
    for (j, b) in accepted.iter().enumerate() {
        let start = b.first_accepted.unwrap_or(0);
        for a in accepted[..j].iter().filter(|a| conflict(a, b)) {
            if a.last_accepted > start {
                f.across_store_loss += usize::from(a.epoch != b.epoch);
                f.fenced_overlaps.push(format!(
                    "{key}: the resource accepted writes of token {} ({}, epoch {}) until {} ns and of token {} ({}, epoch {}) from {start} ns",
                    a.token, a.worker, a.epoch, a.last_accepted, b.token, b.worker, b.epoch
                ));
            }
        }
    }
}

/// Writes of a `leasehold run` command later than `kill_grace` after its
/// `leasehold run` was killed (the kill record names the section's token).
/// Only sections begun by the kill's time: a reader's token is the last
/// writer's, so the same worker's next `run --shared` can hold the same
/// token, and its new section, begun after the kill, is not the killed
/// run's command (it was taken for one: 3 "orphan writes" in a test run).
fn orphans(f: &mut Findings, sections: &[Section], faults: &[&Record], limits: Limits) {
    for k in faults
        .iter()
        .filter(|r| fault_kind(r) == "kill" && r.token > 0)
    {
        let deadline = k.t_ns + ns(limits.kill_grace);
        for s in sections.iter().filter(|s| {
            s.key == k.key
                && s.token == k.token
                && s.worker == k.worker
                && s.epoch == k.epoch
                && s.begin.is_none_or(|b| b <= k.t_ns)
        }) {
            if s.worker.starts_with("cli-") && s.last_write > deadline {
                f.orphan_writes.push(format!(
                    "{} token {} ({}): its command wrote at {} ns, {:.0} ms after its leasehold run was killed",
                    s.key,
                    s.token,
                    s.worker,
                    s.last_write,
                    (s.last_write - k.t_ns) as f64 / 1e6
                ));
            }
        }
    }
}

/// The q-th quantile (0..=1) of `values`, nearest rank.
pub fn quantile(values: &[Duration], q: f64) -> Option<Duration> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}
