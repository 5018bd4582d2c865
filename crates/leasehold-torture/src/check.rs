//! The checker: reads the witness log and finds every violation.
//!
//! A *section* is what one holder did under one grant: the records of one
//! (epoch, key, token, worker). Violations:
//!
//! * **fenced overlap**: two sections' *accepted* writes interleave (the
//!   fenced resource saw two holders at once);
//! * **unfenced overlap**: two sections' writes interleave at all, except
//!   after a `break` of the earlier holder, where the overlap is expected
//!   and must be fenced (counted apart);
//! * **token order**: sections of a key, in the order they began, do not have
//!   strictly increasing tokens (or two holders share a token);
//! * **work after lost**: a holder wrote (other than its one deliberate late
//!   write) after its guard said the lease was lost.
//!
//! It also measures, for every handover from a holder that did not end
//! normally (killed, paused, partitioned, restarted store), the margin by
//! which the old holder's last write preceded the new holder's first, and
//! the time from each fault to the next holder's first write.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::witness::{Kind, Record};

#[derive(Debug, Default)]
struct Section {
    epoch: u64,
    key: String,
    token: u64,
    worker: String,
    first: Option<u64>,
    last: u64,
    first_accepted: Option<u64>,
    last_accepted: u64,
    ended: bool,
    lost_at: Option<u64>,
    writes_after_lost: usize,
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Findings {
    pub operations: usize,
    pub acquisitions: usize,
    pub faults: BTreeMap<String, usize>,
    pub fenced_overlaps: Vec<String>,
    pub unfenced_overlaps: Vec<String>,
    pub overlaps_after_break: usize,
    pub token_order: Vec<String>,
    pub work_after_lost: Vec<String>,
    pub late_writes: usize,
    pub late_writes_rejected: usize,
    pub stale_writes_rejected: usize,
    /// Margins of handovers from holders that did not end normally.
    pub lost_handover_margins: Vec<Duration>,
    /// Time from each fault to the next holder's first write, by fault kind.
    pub recovery: BTreeMap<String, Vec<Duration>>,
    /// Faults after which nobody held the key again before the run ended.
    pub unrecovered: BTreeMap<String, usize>,
}

impl Findings {
    pub fn violations(&self) -> usize {
        self.fenced_overlaps.len()
            + self.unfenced_overlaps.len()
            + self.token_order.len()
            + self.work_after_lost.len()
    }
}

/// How long before a holder's first write its grant may have come.
const GRANT_TO_FIRST_WRITE: Duration = Duration::from_secs(1);

pub fn check(records: &[Record]) -> Findings {
    let mut f = Findings::default();
    // A section is one grant: it starts at a holder's `begin`, and every
    // later record of the same holder, key and token belongs to it until
    // the next `begin`. Its epoch is the one it began in: a holder paused
    // across a store restart writes its `lost` in the next epoch, and the
    // fresh store may even grant it the same token number again later.
    let mut sections: Vec<Section> = Vec::new();
    let mut current: HashMap<(String, u64, String), usize> = HashMap::new();
    let mut faults = Vec::new();
    for r in records {
        match r.kind {
            Kind::Fault => {
                *f.faults.entry(r.detail.clone()).or_default() += 1;
                faults.push(r);
                continue;
            }
            Kind::Epoch => continue,
            _ => {}
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
                    ..Section::default()
                });
                current.insert(id, sections.len() - 1);
                sections.len() - 1
            }
        };
        let s = &mut sections[index];
        match r.kind {
            Kind::Lost => {
                s.lost_at.get_or_insert(r.t_ns);
            }
            Kind::Late => {
                f.late_writes += 1;
                if !r.accepted {
                    f.late_writes_rejected += 1;
                }
            }
            _ => {
                f.operations += 1;
                if s.lost_at.is_some() {
                    s.writes_after_lost += 1;
                }
                s.first.get_or_insert(r.t_ns);
                s.last = s.last.max(r.t_ns);
                if r.accepted {
                    s.first_accepted.get_or_insert(r.t_ns);
                    s.last_accepted = s.last_accepted.max(r.t_ns);
                } else {
                    f.stale_writes_rejected += 1;
                }
                if r.kind == Kind::End {
                    s.ended = true;
                }
            }
        }
    }

    // Group by (epoch, key), ordered by first write.
    let mut by_key: BTreeMap<(u64, String), Vec<Section>> = BTreeMap::new();
    for s in sections {
        if s.first.is_none() {
            continue;
        }
        if s.writes_after_lost > 0 {
            f.work_after_lost.push(format!(
                "{} token {} ({}) wrote {} time(s) after its guard said lost",
                s.key, s.token, s.worker, s.writes_after_lost
            ));
        }
        by_key.entry((s.epoch, s.key.clone())).or_default().push(s);
    }
    let broken: Vec<(&str, &str, u64)> = faults
        .iter()
        .filter(|r| r.detail == "break")
        .map(|r| (r.key.as_str(), r.worker.as_str(), r.t_ns))
        .collect();

    let mut starts: HashMap<String, Vec<(u64, String)>> = HashMap::new();
    for ((_epoch, key), mut secs) in by_key {
        f.acquisitions += secs.len();
        secs.sort_by_key(|s| s.first);
        for pair in secs.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            if b.token <= a.token {
                f.token_order.push(format!(
                    "{key}: token {} ({}) began after token {} ({})",
                    b.token, b.worker, a.token, a.worker
                ));
            }
        }
        // Unfenced: all writes; an earlier section still writing when a later
        // one began.
        let mut latest: Option<&Section> = None;
        for s in &secs {
            if let Some(prev) = latest {
                let start = s.first.unwrap_or(0);
                if prev.last > start {
                    // The break of whatever lease was on the key while the
                    // earlier holder wrote, or shortly before its first write
                    // (between its grant and its `begin`): the coordinator
                    // breaks the key, not a holder, and may name a stale one.
                    let after_break = broken.iter().any(|(k, _, t)| {
                        *k == key
                            && *t <= start
                            && *t + GRANT_TO_FIRST_WRITE.as_nanos() as u64
                                >= prev.first.unwrap_or(0)
                    });
                    if after_break {
                        f.overlaps_after_break += 1;
                    } else {
                        f.unfenced_overlaps.push(format!(
                            "{key}: token {} ({}) wrote until {} ns, after token {} ({}) began at {} ns",
                            prev.token, prev.worker, prev.last, s.token, s.worker, start
                        ));
                    }
                } else if !prev.ended {
                    f.lost_handover_margins
                        .push(Duration::from_nanos(start - prev.last));
                }
            }
            if latest.is_none_or(|p| s.last >= p.last) {
                latest = Some(s);
            }
        }
        // Fenced: accepted writes only.
        let mut accepted: Vec<&Section> =
            secs.iter().filter(|s| s.first_accepted.is_some()).collect();
        accepted.sort_by_key(|s| s.first_accepted);
        let mut max_last = 0u64;
        let mut max_owner = String::new();
        for s in accepted {
            let start = s.first_accepted.unwrap_or(0);
            if max_last > start {
                f.fenced_overlaps.push(format!(
                    "{key}: the resource accepted writes of {max_owner} until {max_last} ns and of token {} ({}) from {start} ns",
                    s.token, s.worker
                ));
            }
            if s.last_accepted > max_last {
                max_last = s.last_accepted;
                max_owner = format!("token {} ({})", s.token, s.worker);
            }
        }
        for sec in &secs {
            if let Some(first) = sec.first {
                starts
                    .entry(key.clone())
                    .or_default()
                    .push((first, sec.worker.clone()));
            }
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
                .entry(fault.detail.clone())
                .or_default()
                .push(Duration::from_nanos(t - fault.t_ns)),
            None => *f.unrecovered.entry(fault.detail.clone()).or_default() += 1,
        }
    }
    f
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: Kind, token: u64, worker: &str, t: u64, accepted: bool) -> Record {
        Record {
            kind,
            key: "k".into(),
            epoch: 0,
            token,
            worker: worker.into(),
            pid: 1,
            ppid: 1,
            t_ns: t,
            accepted,
            detail: String::new(),
        }
    }

    fn fault(what: &str, worker: &str, t: u64) -> Record {
        Record {
            detail: what.into(),
            ..rec(Kind::Fault, 0, worker, t, true)
        }
    }

    #[test]
    fn clean_handovers_have_no_violations() {
        let f = check(&[
            rec(Kind::Begin, 1, "a", 10, true),
            rec(Kind::End, 1, "a", 20, true),
            rec(Kind::Begin, 2, "b", 30, true),
            rec(Kind::Tick, 2, "b", 35, true),
            fault("kill", "b", 36),
            rec(Kind::Begin, 3, "c", 100, true),
            rec(Kind::End, 3, "c", 110, true),
        ]);
        assert_eq!(f.violations(), 0, "{f:?}");
        assert_eq!(f.acquisitions, 3);
        assert_eq!(f.lost_handover_margins, vec![Duration::from_nanos(65)]);
        assert_eq!(f.recovery["kill"], vec![Duration::from_nanos(64)]);
    }

    #[test]
    fn overlap_and_token_regressions_are_found() {
        let f = check(&[
            rec(Kind::Begin, 2, "a", 10, true),
            rec(Kind::Begin, 2, "b", 15, true),
            rec(Kind::End, 2, "a", 20, true),
            rec(Kind::End, 2, "b", 25, true),
        ]);
        assert_eq!(f.token_order.len(), 1, "{f:?}");
        assert_eq!(f.unfenced_overlaps.len(), 1, "{f:?}");
        assert_eq!(f.fenced_overlaps.len(), 1, "{f:?}");
    }

    #[test]
    fn work_after_lost_is_found_but_the_late_write_is_not_work() {
        let f = check(&[
            rec(Kind::Begin, 1, "a", 10, true),
            rec(Kind::Lost, 1, "a", 20, true),
            rec(Kind::Late, 1, "a", 21, false),
            rec(Kind::Tick, 1, "a", 22, true),
        ]);
        assert_eq!(f.work_after_lost.len(), 1, "{f:?}");
        assert_eq!((f.late_writes, f.late_writes_rejected), (1, 1));
    }

    #[test]
    fn overlap_after_a_break_is_expected_when_fenced() {
        let f = check(&[
            rec(Kind::Begin, 1, "a", 10, true),
            fault("break", "a", 12),
            rec(Kind::Begin, 2, "b", 15, true),
            rec(Kind::Tick, 1, "a", 18, false),
            rec(Kind::End, 2, "b", 25, true),
        ]);
        assert_eq!(f.violations(), 0, "{f:?}");
        assert_eq!(f.overlaps_after_break, 1);
        assert_eq!(f.stale_writes_rejected, 1);
    }

    #[test]
    fn recovery_is_counted_once_across_store_epochs() {
        let later = |r: Record| Record { epoch: 1, ..r };
        let f = check(&[
            rec(Kind::Begin, 7, "a", 10, true),
            fault("restart", "a", 20),
            later(rec(Kind::Begin, 1, "b", 50, true)),
            later(rec(Kind::End, 1, "b", 60, true)),
        ]);
        assert_eq!(f.recovery["restart"], vec![Duration::from_nanos(30)]);
        assert!(f.unrecovered.is_empty(), "{f:?}");
        assert_eq!(f.violations(), 0, "tokens restart with the epoch: {f:?}");
    }

    #[test]
    fn a_token_granted_again_after_a_restart_is_a_new_section() {
        let later = |r: Record| Record { epoch: 1, ..r };
        let f = check(&[
            rec(Kind::Begin, 120, "a", 10, true),
            fault("restart", "a", 20),
            // Paused across the restart: its loss is written in epoch 1.
            later(rec(Kind::Lost, 120, "a", 40, true)),
            later(rec(Kind::Late, 120, "a", 41, false)),
            later(rec(Kind::Begin, 1, "b", 50, true)),
            later(rec(Kind::End, 1, "b", 60, true)),
            // The fresh store reaches token 120 again, for the same holder.
            later(rec(Kind::Begin, 120, "a", 70, true)),
            later(rec(Kind::End, 120, "a", 80, true)),
        ]);
        assert_eq!(f.violations(), 0, "{f:?}");
        assert_eq!(f.acquisitions, 3);
    }

    #[test]
    fn a_break_between_a_grant_and_its_first_write_is_still_a_break() {
        let f = check(&[
            // The coordinator thought "b" held the key and broke it; the
            // lease it broke was "a"'s, granted just before.
            fault("break", "b", 10),
            rec(Kind::Begin, 5, "a", 12, true),
            rec(Kind::Begin, 6, "b", 15, true),
            rec(Kind::Tick, 5, "a", 18, false),
            rec(Kind::End, 6, "b", 25, true),
        ]);
        assert_eq!(f.violations(), 0, "{f:?}");
        assert_eq!(f.overlaps_after_break, 1);
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<_> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&v, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(quantile(&v, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
