//! Liveness of multi-key holders: deadlocks and orphan holds, found from
//! the multi-key workers' attempts ([`Kind::Wait`], ended by their
//! `begin` or [`Kind::GaveUp`]) and the coordinator's snapshots of who
//! holds each key with a live lease ([`Kind::Held`]).
//!
//! * **deadlock**: at a snapshot, workers in the middle of attempts each
//!   hold (a live lease on) a key that the next of them waits for, in a
//!   cycle; and the same cycle, with the same leases and the same attempts,
//!   is there again in a snapshot sent at least [`PERSISTS`] after the
//!   first was answered. Keys taken in one global order cannot make a
//!   cycle: a holder only waits for keys above every key it holds. (Not
//!   more than transiently: a worker giving up releases its keys side by
//!   side, and a snapshot is one request per key, not one instant.)
//! * **orphan hold**: a worker's lease (key, token) seen live before one
//!   of its attempts began, and again more than a TTL and a second after:
//!   its worker had moved on, and something still renewed the lease. A
//!   lease let go, or whose release failed, is renewed by nobody and is
//!   gone within its TTL.
//!
//! A worker is in an attempt from its first `wait` until its `begin`, its
//! `gave-up`, or the end of the wait it asked for (whichever is first: a
//! worker past its wait is releasing what it took).
//!
//! Faults make holders look stuck without any bug: a paused holder keeps
//! its keys until they expire, a cut-off one's release hangs, a killed
//! one's lease stays until it runs out. So both rules are judged only
//! over stretches of the run with no fault nor store event from
//! [`quiet_before`] before the first snapshot to the end of the last: the
//! runs with the bugs injected have no faults; the others are judged at
//! their quiet start and end. The report says how much of the run was
//! judged.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use crate::witness::{Kind, Record};

/// How long a cycle must last to be a deadlock.
pub const PERSISTS: Duration = Duration::from_secs(1);

/// How long before a snapshot a fault still excuses what it shows: five
/// TTLs (a paused or cut-off holder, a lease left to expire) and 5 s.
pub fn quiet_before(ttl: Duration) -> Duration {
    ttl * 5 + Duration::from_secs(5)
}

/// What the liveness checks found.
#[derive(Debug, Default)]
pub struct Liveness {
    /// Multi-key attempts, those that held every key, and those that
    /// ended without the keys.
    pub attempts: usize,
    pub held: usize,
    pub gave_up: usize,
    /// Snapshots taken, and those judged (away from faults).
    pub snapshots: usize,
    pub judged: usize,
    pub deadlocks: Vec<String>,
    pub orphan_holds: Vec<String>,
}

#[derive(Debug, Clone)]
struct Attempt {
    start: u64,
    /// Its `begin` or `gave-up`, if any.
    end: Option<u64>,
    /// The end of the wait it asked for.
    deadline: u64,
    keys: BTreeSet<String>,
}

impl Attempt {
    /// Whether the worker was in this attempt from `from` to `to`.
    fn spans(&self, from: u64, to: u64) -> bool {
        self.start <= from && to < self.end.unwrap_or(u64::MAX).min(self.deadline)
    }
}

#[derive(Debug, Default)]
struct Snapshot {
    sent: u64,
    answered: u64,
    /// key -> (holder, token)
    holds: BTreeMap<String, (String, u64)>,
}

pub fn check(records: &[Record], ttl: Duration) -> Liveness {
    let mut l = Liveness::default();
    let mut attempts: HashMap<String, Vec<Attempt>> = HashMap::new();
    // Whether the worker's last record was a `wait` (its attempt is still
    // being written down, one key at a time).
    let mut collecting: HashSet<String> = HashSet::new();
    let mut snapshots: BTreeMap<u64, Snapshot> = BTreeMap::new();
    let mut disturbances: Vec<u64> = Vec::new();
    for r in records {
        match r.kind {
            Kind::Fault | Kind::Epoch => disturbances.push(r.t_ns),
            Kind::Held => {
                let mut words = r.detail.split(' ').map(str::parse::<u64>);
                let (Some(Ok(n)), Some(Ok(sent))) = (words.next(), words.next()) else {
                    continue;
                };
                let s = snapshots.entry(n).or_default();
                s.sent = sent;
                s.answered = s.answered.max(r.t_ns);
                s.holds.insert(r.key.clone(), (r.worker.clone(), r.token));
            }
            Kind::Wait => {
                let list = attempts.entry(r.worker.clone()).or_default();
                let open = collecting.contains(&r.worker)
                    && list.last().is_some_and(|a| !a.keys.contains(&r.key));
                if !open {
                    if let Some(last) = list.last_mut() {
                        last.end.get_or_insert(r.t_ns);
                    }
                    let wait_ms: u64 = r.detail.parse().unwrap_or(0);
                    list.push(Attempt {
                        start: r.t_ns,
                        end: None,
                        deadline: r.t_ns + wait_ms * 1_000_000,
                        keys: BTreeSet::new(),
                    });
                    l.attempts += 1;
                }
                if let Some(a) = list.last_mut() {
                    a.keys.insert(r.key.clone());
                }
                collecting.insert(r.worker.clone());
            }
            Kind::GaveUp | Kind::Begin => {
                collecting.remove(&r.worker);
                if let Some(a) = attempts
                    .get_mut(&r.worker)
                    .and_then(|list| list.last_mut())
                    .filter(|a| a.end.is_none())
                {
                    a.end = Some(r.t_ns);
                    l.gave_up += usize::from(r.kind == Kind::GaveUp);
                    l.held += usize::from(r.kind == Kind::Begin);
                }
            }
            _ => {
                collecting.remove(&r.worker);
            }
        }
    }
    l.snapshots = snapshots.len();
    disturbances.sort_unstable();
    let margin = quiet_before(ttl).as_nanos() as u64;
    let quiet = |from: u64, to: u64| {
        let lo = from.saturating_sub(margin);
        let i = disturbances.partition_point(|&t| t < lo);
        disturbances.get(i).is_none_or(|&t| t > to)
    };
    let snaps: Vec<&Snapshot> = snapshots.values().collect();
    l.judged = snaps.iter().filter(|s| quiet(s.sent, s.answered)).count();
    deadlocks(&mut l, &snaps, &attempts, &quiet);
    orphans(&mut l, &snaps, &attempts, ttl, &quiet);
    l
}

/// A node of the wait-for graph: a worker and the start of its attempt.
type Node = (String, u64);
/// An edge's lease: the waiter, the key it waits for, its holder's token.
type Edge = (Node, String, u64);

fn deadlocks(
    l: &mut Liveness,
    snaps: &[&Snapshot],
    attempts: &HashMap<String, Vec<Attempt>>,
    quiet: &impl Fn(u64, u64) -> bool,
) {
    // Each cycle (its edges, sorted) and the snapshot it was first seen in.
    let mut seen: HashMap<Vec<Edge>, &Snapshot> = HashMap::new();
    let mut told: HashSet<Vec<Node>> = HashSet::new();
    for s in snaps {
        // Who is in an attempt across the whole snapshot, and which.
        let waiting: BTreeMap<&String, &Attempt> = attempts
            .iter()
            .filter_map(|(w, list)| Some((w, list.iter().find(|a| a.spans(s.sent, s.answered))?)))
            .collect();
        // Edges: waiter -> holder of a key it waits for (and does not hold).
        let mut out: BTreeMap<&String, Vec<(&String, &String, u64)>> = BTreeMap::new();
        for (w, a) in &waiting {
            for k in &a.keys {
                if let Some((holder, token)) = s.holds.get(k) {
                    if holder != *w && waiting.contains_key(holder) {
                        out.entry(*w).or_default().push((holder, k, *token));
                    }
                }
            }
        }
        for cycle in cycles(&out) {
            let mut edges: Vec<Edge> = cycle
                .iter()
                .map(|(w, k, t)| (((*w).clone(), waiting[w].start), (*k).clone(), *t))
                .collect();
            edges.sort();
            match seen.get(&edges) {
                Some(first) if s.sent >= first.answered + PERSISTS.as_nanos() as u64 => {
                    if !quiet(first.sent, s.answered) {
                        continue;
                    }
                    let nodes: Vec<Node> = edges.iter().map(|e| e.0.clone()).collect();
                    if told.insert(nodes) {
                        let what: Vec<String> = edges
                            .iter()
                            .map(|((w, _), k, t)| format!("{w} waited for {k} (token {t})"))
                            .collect();
                        l.deadlocks.push(format!(
                            "{}, each held by another of them, from {} ns to {} ns at least",
                            what.join(", "),
                            first.sent,
                            s.answered
                        ));
                    }
                }
                Some(_) => {}
                None => {
                    seen.insert(edges, s);
                }
            }
        }
    }
}

/// Every simple cycle of `out` (each as its edges: the waiter, the key,
/// the holder's token), each once: found from its least node, by a
/// depth-first search through greater nodes only. The graphs are small
/// (one node a multi-key worker).
fn cycles<'a>(
    out: &BTreeMap<&'a String, Vec<(&'a String, &'a String, u64)>>,
) -> Vec<Vec<(&'a String, &'a String, u64)>> {
    type Step<'a> = (&'a String, &'a String, u64);
    fn walk<'a>(
        out: &BTreeMap<&'a String, Vec<Step<'a>>>,
        start: &'a String,
        node: &'a String,
        path: &mut Vec<Step<'a>>,
        found: &mut Vec<Vec<Step<'a>>>,
    ) {
        for &(next, key, token) in out.get(node).into_iter().flatten() {
            path.push((node, key, token));
            if next == start {
                found.push(path.clone());
            } else if next > start && !path.iter().any(|(n, _, _)| *n == next) {
                walk(out, start, next, path, found);
            }
            path.pop();
        }
    }
    let mut found = Vec::new();
    for start in out.keys() {
        walk(out, start, start, &mut Vec::new(), &mut found);
    }
    found
}

fn orphans(
    l: &mut Liveness,
    snaps: &[&Snapshot],
    attempts: &HashMap<String, Vec<Attempt>>,
    ttl: Duration,
    quiet: &impl Fn(u64, u64) -> bool,
) {
    let after = (ttl + Duration::from_secs(1)).as_nanos() as u64;
    // Each lease: the snapshots it was seen live in (sent, answered).
    let mut seen: BTreeMap<(String, String, u64), Vec<(u64, u64)>> = BTreeMap::new();
    for s in snaps {
        for (k, (w, t)) in &s.holds {
            seen.entry((w.clone(), k.clone(), *t))
                .or_default()
                .push((s.sent, s.answered));
        }
    }
    for ((w, k, t), times) in seen {
        let Some(list) = attempts.get(&w) else {
            continue;
        };
        let (first, last) = (times[0], times[times.len() - 1]);
        let outlived = list
            .iter()
            .find(|a| first.1 < a.start && last.0 > a.start + after);
        if let Some(a) = outlived {
            if quiet(first.0, last.1) {
                l.orphan_holds.push(format!(
                    "{k} token {t} ({w}): its lease was live at {} ns, before {w}'s attempt of {} ns, and still at {} ns",
                    first.1, a.start, last.0
                ));
            }
        }
    }
}
