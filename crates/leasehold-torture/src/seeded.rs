//! Seeded violations: the checker run on synthetic histories, one per kind
//! of violation, each next to the matching clean history. A checker is only
//! trusted once it has caught every kind it claims to find (and passed the
//! histories that are fine).
//!
//! Histories are written through [`History`], which decides `accepted` by
//! the witness's own rule (so a fencing error appears only where a test
//! forges one).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::check::{check, Findings, Limits};
use crate::witness::{Kind, Record};

/// Short bounds so the times below read as plain numbers (ns).
const LIMITS: Limits = Limits {
    break_notice: Duration::from_nanos(100),
    kill_grace: Duration::from_nanos(50),
    ttl: Duration::from_secs(1),
};

#[derive(Default)]
struct History {
    records: Vec<Record>,
    epoch: u64,
    fence: HashMap<String, crate::witness::Fence>,
    /// Workers that are readers of a reader-writer lock on "k".
    readers: HashSet<String>,
}

impl History {
    fn raw(&mut self, kind: Kind, key: &str, token: u64, worker: &str, t: u64, accepted: bool) {
        self.records.push(Record {
            kind,
            key: key.into(),
            epoch: self.epoch,
            token,
            worker: worker.into(),
            pid: 100,
            ppid: 1,
            t_ns: t,
            accepted,
            shared: !matches!(kind, Kind::Fault | Kind::Epoch) && self.readers.contains(worker),
            detail: String::new(),
        });
    }

    /// A write on key "k" by `worker` holding `token`, fenced as the witness
    /// would (across epochs).
    fn w(&mut self, kind: Kind, token: u64, worker: &str, t: u64) -> &mut Self {
        let shared = self.readers.contains(worker);
        let fence = self.fence.entry("k".into()).or_default();
        let accepted = kind == Kind::Lost || fence.admit(token, shared);
        self.raw(kind, "k", token, worker, t, accepted);
        self
    }

    /// `workers` hold read holds (their records are marked shared).
    fn readers(&mut self, workers: &[&str]) -> &mut Self {
        self.readers.extend(workers.iter().map(|w| w.to_string()));
        self
    }

    fn begin(&mut self, token: u64, worker: &str, t: u64) -> &mut Self {
        self.w(Kind::Begin, token, worker, t)
    }

    fn tick(&mut self, token: u64, worker: &str, t: u64) -> &mut Self {
        self.w(Kind::Tick, token, worker, t)
    }

    fn end(&mut self, token: u64, worker: &str, t: u64) -> &mut Self {
        self.w(Kind::End, token, worker, t)
    }

    fn fault(&mut self, what: &str, worker: &str, token: u64, t: u64) -> &mut Self {
        self.raw(Kind::Fault, "k", token, worker, t, true);
        self.records.last_mut().unwrap().detail = what.into();
        self
    }

    /// The store lost its state, as the coordinator records it: a
    /// transition epoch while the loss is under way, then the fresh store's.
    fn store_lost(&mut self, t: u64) -> &mut Self {
        self.loss_begins(t).loss_done(t)
    }

    fn loss_begins(&mut self, t: u64) -> &mut Self {
        self.fault("loss", "-", 0, t);
        self.epoch += 1;
        self.raw(Kind::Epoch, "-", 0, "coordinator", t, true);
        self.records.last_mut().unwrap().detail = crate::check::LOSS_BEGINS.into();
        self
    }

    fn loss_done(&mut self, t: u64) -> &mut Self {
        self.epoch += 1;
        self.raw(Kind::Epoch, "-", 0, "coordinator", t, true);
        self.records.last_mut().unwrap().detail = crate::check::STORE_LOST.into();
        self
    }

    fn check(&self) -> Findings {
        check(&self.records, LIMITS)
    }
}

fn only(f: &Findings, kind: &str) {
    for (k, list) in f.by_kind() {
        if k == kind {
            assert!(!list.is_empty(), "{kind} not flagged: {f:#?}");
        } else {
            assert!(list.is_empty(), "{k} flagged, expected only {kind}: {f:#?}");
        }
    }
}

fn clean(f: &Findings) {
    assert_eq!(f.violations(), 0, "{f:#?}");
}

// ---- overlap in one epoch ----

#[test]
fn overlap_in_one_epoch_is_flagged() {
    let f = History::default()
        .begin(1, "a", 10)
        .begin(2, "b", 20)
        .tick(1, "a", 30) // rejected by fencing, but a was still working
        .end(2, "b", 40)
        .check();
    only(&f, "overlap");
    assert_eq!(f.overlaps.len(), 1);
    assert_eq!(f.stale_writes_rejected, 1);
}

#[test]
fn a_clean_handover_in_one_epoch_passes() {
    let f = History::default()
        .begin(1, "a", 10)
        .tick(1, "a", 15)
        .fault("kill", "a", 1, 16)
        .begin(2, "b", 30)
        .end(2, "b", 40)
        .check();
    clean(&f);
    assert_eq!(f.acquisitions, 2);
    assert_eq!(f.lost_handover_margins, vec![Duration::from_nanos(15)]);
    assert_eq!(f.recovery["kill"], vec![Duration::from_nanos(14)]);
}

// ---- overlap across a store restart ----

#[test]
fn overlap_across_a_store_restart_is_flagged() {
    let f = History::default()
        .begin(120, "a", 10)
        .tick(120, "a", 20)
        .store_lost(25)
        .begin(200, "b", 30)
        // a never noticed: the fenced resource rejects its write (the fresh
        // store's token is greater), but a worked beside b.
        .tick(120, "a", 40)
        .end(200, "b", 50)
        .check();
    assert_eq!(f.overlaps.len(), 1, "{f:#?}");
    assert_eq!(f.across_store_loss, 1, "{f:#?}");
    assert!(f.fenced_overlaps.is_empty(), "{f:#?}");
    assert!(f.token_order.is_empty() && f.fencing_errors.is_empty());
}

#[test]
fn a_token_below_the_lost_stores_is_flagged() {
    // The fresh store started its tokens again: a token order violation,
    // and the old holder's late write, accepted (its token is the greatest
    // the resource saw), interleaves with the new holder's: fenced overlap.
    let f = History::default()
        .begin(120, "a", 10)
        .end(120, "a", 20)
        .store_lost(25)
        .begin(1, "b", 30)
        .end(1, "b", 40)
        .check();
    only(&f, "token order");
    let f = History::default()
        .begin(120, "a", 10)
        .store_lost(25)
        .begin(1, "b", 30)
        .tick(1, "b", 35)
        .tick(120, "a", 40)
        .end(1, "b", 50)
        .check();
    assert_eq!(f.token_order.len(), 1, "{f:#?}");
    assert_eq!(f.overlaps.len(), 1, "{f:#?}");
}

#[test]
fn a_holder_that_stopped_before_the_store_came_back_passes() {
    let f = History::default()
        .begin(120, "a", 10)
        .tick(120, "a", 20)
        .w(Kind::Lost, 120, "a", 22)
        .store_lost(25)
        .begin(200, "b", 30)
        .end(200, "b", 50)
        .check();
    clean(&f);
    assert_eq!(f.recovery["loss"], vec![Duration::from_nanos(5)]);
}

// ---- store loss while the holders are cut off (mixed max TTLs) ----

impl History {
    /// The loss-partition fault as the coordinator records it: the cut-off
    /// holder's fault record, the transition epoch, then the re-created
    /// store's.
    fn lost_while_cut_off(&mut self, holder: &str, token: u64, t: u64) -> &mut Self {
        self.fault("loss-partition", holder, token, t);
        self.epoch += 1;
        self.raw(Kind::Epoch, "-", 0, "coordinator", t, true);
        self.records.last_mut().unwrap().detail = crate::check::LOSS_BEGINS.into();
        self.epoch += 1;
        self.raw(Kind::Epoch, "-", 0, "coordinator", t, true);
        self.records.last_mut().unwrap().detail = crate::check::STORE_LOST_CUT_OFF.into();
        self
    }
}

#[test]
fn a_cut_off_holder_of_the_lost_data_working_beside_the_new_stores_holder_is_flagged() {
    // "long" held a long lease of the lost store; cut off, it trusted it
    // past the new store's quarantine, while "short" (who re-created the
    // store with a short max TTL) took the key and finished.
    let f = History::default()
        .begin(9_000, "long", 10)
        .tick(9_000, "long", 20)
        .lost_while_cut_off("long", 9_000, 25)
        .begin(12_000, "short", 60)
        .end(12_000, "short", 70)
        .tick(9_000, "long", 80)
        .check();
    assert_eq!(f.overlaps.len(), 1, "{f:#?}");
    assert_eq!(f.across_store_loss, 1, "{f:#?}");
    assert_eq!(f.faults["loss-partition"], 1);
    assert!(!f.faults.contains_key("loss"), "{:?}", f.faults);
}

#[test]
fn a_cut_off_holder_that_stopped_within_the_window_passes() {
    let f = History::default()
        .begin(9_000, "long", 10)
        .tick(9_000, "long", 20)
        .lost_while_cut_off("long", 9_000, 25)
        .tick(9_000, "long", 30)
        .w(Kind::Lost, 9_000, "long", 40)
        .begin(12_000, "short", 60)
        .end(12_000, "short", 70)
        .check();
    clean(&f);
    assert_eq!(f.faults["loss-partition"], 1);
    assert_eq!(f.recovery["loss-partition"], vec![Duration::from_nanos(35)]);
}

// ---- overlap excused by the wrong break ----

#[test]
fn an_overlap_after_a_break_of_someone_else_is_flagged() {
    let f = History::default()
        .begin(1, "a", 10)
        .end(1, "a", 15)
        // The break ended a's lease (token 1), not b's.
        .fault("break", "a", 1, 16)
        .begin(2, "b", 20)
        .begin(3, "c", 30)
        .tick(2, "b", 40)
        .end(3, "c", 50)
        .check();
    only(&f, "overlap");
    assert_eq!(f.overlaps_after_break, 0);
}

#[test]
fn an_overlap_after_a_break_of_the_earlier_holder_passes_while_it_could_not_know() {
    let f = History::default()
        .begin(2, "b", 20)
        .fault("break", "b", 2, 25)
        .begin(3, "c", 30)
        .tick(2, "b", 40) // rejected: fenced
        .w(Kind::Lost, 2, "b", 45)
        .end(3, "c", 50)
        .check();
    clean(&f);
    assert_eq!(f.overlaps_after_break, 1);
    assert_eq!(f.stale_writes_rejected, 1);
    assert!(f.lost_handover_margins.is_empty(), "a break is no margin");
}

#[test]
fn a_broken_holder_that_keeps_working_past_its_next_renewal_is_flagged() {
    let f = History::default()
        .begin(2, "b", 20)
        .fault("break", "b", 2, 25)
        .begin(3, "c", 30)
        .tick(2, "b", 200) // 175 ns after the break; notice is 100 ns
        .end(3, "c", 250)
        .check();
    only(&f, "overlap");
}

#[test]
fn a_break_that_lands_late_excuses_writes_until_notice_after_it_landed() {
    // Sent at 25, answered at 300 (a loaded store): `c` began at 290, once
    // it had landed; `b` stops 80 ns after that, within notice of the
    // landing though long after the sending.
    let f = History::default()
        .begin(2, "b", 20)
        .fault("break returned 300", "b", 2, 25)
        .begin(3, "c", 290)
        .tick(2, "b", 370)
        .end(3, "c", 400)
        .check();
    clean(&f);
    assert_eq!(f.overlaps_after_break, 1);
    assert_eq!(f.faults.get("break"), Some(&1), "counted by kind");
}

#[test]
fn a_late_break_excuses_nothing_past_notice_after_the_later_holder_began() {
    // Answered at 300, but `c` began at 150 (so the break had landed by
    // then): `b` writing at 260 is 110 ns after that, past notice.
    let f = History::default()
        .begin(2, "b", 20)
        .fault("break returned 300", "b", 2, 25)
        .begin(3, "c", 150)
        .tick(2, "b", 260)
        .end(3, "c", 400)
        .check();
    only(&f, "overlap");
}

#[test]
fn a_break_of_the_same_token_in_another_store_epoch_excuses_nothing() {
    let f = History::default()
        .begin(2, "x", 5)
        .end(2, "x", 8)
        .fault("break", "x", 2, 9)
        .store_lost(10)
        .begin(2, "b", 20)
        .begin(3, "c", 30)
        .tick(2, "b", 40)
        .end(3, "c", 50)
        .check();
    assert_eq!(f.overlaps.len(), 1, "{f:#?}");
    // Token 2 again after the loss is a violation of its own now.
    assert_eq!(f.token_order.len(), 1, "{f:#?}");
    assert!(f.fenced_overlaps.is_empty(), "{f:#?}");
}

#[test]
fn tokens_granted_while_the_store_is_being_lost_are_not_ordered_but_overlaps_are_checked() {
    // Token 20 from the fresh store, then token 9 from the old store,
    // granted while the loss is still under way (one transition epoch):
    // not a token-order violation (the resource rejects token 9's writes).
    // Then a fresh-store holder overlapping a holder of the old store is.
    let f = History::default()
        .loss_begins(5)
        .begin(20, "b", 10)
        .end(20, "b", 20)
        .begin(9, "a", 30)
        .end(9, "a", 40)
        .loss_done(45)
        .check();
    clean(&f);
    assert_eq!(f.granted_during_loss, 2);
    assert_eq!(f.faults["loss"], 1, "one store loss, however many holders");
    let f = History::default()
        .loss_begins(5)
        .begin(9, "a", 10)
        .loss_done(15)
        .begin(20, "b", 30)
        .tick(9, "a", 40)
        .end(20, "b", 50)
        .check();
    assert_eq!(f.overlaps.len(), 1, "{f:#?}");
    assert!(f.token_order.is_empty(), "{f:#?}");
}

#[test]
fn tokens_going_backwards_in_the_fresh_stores_epoch_are_flagged() {
    let f = History::default()
        .store_lost(5)
        .begin(3, "a", 10)
        .end(3, "a", 20)
        .begin(1, "b", 30)
        .end(1, "b", 40)
        .check();
    only(&f, "token order");
}

// ---- overlap with a section that is not the last writer ----

#[test]
fn an_overlap_with_a_section_that_is_not_the_last_writer_is_flagged() {
    // b is broken and keeps writing (fenced) until 100; a began after the
    // break and writes until 90; c begins at 50. c's overlap with b is
    // excused, its overlap with a (which wrote last before c, but is not the
    // section that writes last overall) is not.
    let f = History::default()
        .begin(1, "b", 5)
        .fault("break", "b", 1, 8)
        .begin(2, "a", 10)
        .begin(3, "c", 50)
        .tick(2, "a", 90)
        .tick(1, "b", 100)
        .end(3, "c", 120)
        .check();
    only(&f, "overlap");
    assert_eq!(f.overlaps.len(), 1, "{f:#?}");
    assert!(f.overlaps[0].contains("token 2 (a"), "{f:#?}");
    assert_eq!(f.overlaps_after_break, 2, "b with a, b with c");
}

#[test]
fn sections_that_overlap_only_a_broken_holder_pass() {
    let f = History::default()
        .begin(1, "b", 5)
        .fault("break", "b", 1, 8)
        .begin(2, "a", 10)
        .end(2, "a", 45)
        .begin(3, "c", 50)
        .tick(1, "b", 100)
        .end(3, "c", 120)
        .check();
    clean(&f);
    assert_eq!(f.overlaps_after_break, 2);
}

// ---- token going backwards ----

#[test]
fn a_token_going_backwards_is_flagged() {
    let f = History::default()
        .begin(5, "a", 10)
        .end(5, "a", 20)
        .begin(4, "b", 30)
        .end(4, "b", 40)
        .check();
    only(&f, "token order");
    assert_eq!(f.stale_writes_rejected, 2, "the witness refused b");
}

#[test]
fn a_token_granted_twice_is_a_fenced_overlap() {
    let f = History::default()
        .begin(2, "a", 10)
        .begin(2, "b", 15)
        .end(2, "a", 20)
        .end(2, "b", 25)
        .check();
    assert_eq!(f.token_order.len(), 1, "{f:#?}");
    assert_eq!(f.overlaps.len(), 1, "{f:#?}");
    assert_eq!(f.fenced_overlaps.len(), 1, "{f:#?}");
}

#[test]
fn increasing_tokens_pass() {
    let f = History::default()
        .begin(5, "a", 10)
        .end(5, "a", 20)
        .begin(6, "b", 30)
        .end(6, "b", 40)
        .check();
    clean(&f);
}

// ---- reader-writer locks ----

#[test]
fn readers_sharing_the_key_then_a_writer_pass() {
    let f = History::default()
        .readers(&["r1", "r2"])
        .begin(5, "r1", 10)
        .begin(5, "r2", 15)
        .tick(5, "r1", 20)
        .tick(5, "r2", 25)
        .end(5, "r1", 30)
        .end(5, "r2", 35)
        .begin(6, "w", 40)
        .end(6, "w", 50)
        .begin(6, "r1", 60)
        .end(6, "r1", 70)
        .check();
    clean(&f);
    assert_eq!(f.acquisitions, 4);
    assert_eq!(f.read_acquisitions, 3);
    assert_eq!(f.shared_reads, 1, "r1 and r2 shared the key");
}

#[test]
fn a_reader_still_holding_when_a_writer_began_is_flagged() {
    let f = History::default()
        .readers(&["r"])
        .begin(5, "r", 10)
        .begin(6, "w", 20)
        .tick(5, "r", 30)
        .end(6, "w", 40)
        .end(5, "r", 50)
        .check();
    only(&f, "overlap");
    assert!(f.overlaps[0].contains("a reader"), "{f:#?}");
    assert_eq!(f.stale_writes_rejected, 2, "fencing refused the reader");
}

#[test]
fn a_reader_let_in_beside_a_writer_is_flagged() {
    // The reader read the writer's own token: the resource takes its read,
    // and then refuses the writer (a write must be above every read).
    let f = History::default()
        .readers(&["r"])
        .begin(6, "w", 10)
        .begin(6, "r", 20)
        .tick(6, "w", 30)
        .end(6, "r", 40)
        .end(6, "w", 50)
        .check();
    only(&f, "overlap");
    assert_eq!(f.stale_writes_rejected, 2, "the writer, after the read");
}

#[test]
fn a_lost_writers_late_write_after_readers_read_its_token_is_refused() {
    // The writer is lost (paused past its TTL); readers come in with the
    // last token issued, its own; its late write must not land among
    // their reads.
    let f = History::default()
        .readers(&["r"])
        .begin(6, "w", 10)
        .w(Kind::Lost, 6, "w", 20)
        .begin(6, "r", 30)
        .w(Kind::Late, 6, "w", 40)
        .end(6, "r", 50)
        .check();
    clean(&f);
    assert_eq!(f.late.rejected, 1, "{f:#?}");
}

#[test]
fn a_writer_token_not_above_an_earlier_readers_is_flagged() {
    let f = History::default()
        .readers(&["r"])
        .begin(7, "r", 10)
        .end(7, "r", 20)
        .begin(7, "w", 30)
        .end(7, "w", 40)
        .check();
    only(&f, "token order");
}

#[test]
fn a_reader_token_below_an_earlier_writers_is_flagged() {
    let f = History::default()
        .readers(&["r"])
        .begin(6, "w", 10)
        .end(6, "w", 20)
        .begin(5, "r", 30)
        .end(5, "r", 40)
        .check();
    only(&f, "token order");
    assert!(f.token_order[0].contains("a reader"), "{f:#?}");
}

#[test]
fn a_reader_below_an_earlier_reader_passes() {
    // A writer gave up waiting for r2 and raised the counter to 6 without
    // writing; r1 read 6, r2 had read 5: readers may begin out of token
    // order (fencing refuses r2 once r1 wrote, which costs r2, not safety).
    let f = History::default()
        .readers(&["r1", "r2"])
        .begin(6, "r1", 10)
        .begin(5, "r2", 20)
        .end(5, "r2", 30)
        .end(6, "r1", 40)
        .begin(7, "w", 50)
        .end(7, "w", 60)
        .check();
    clean(&f);
    assert_eq!(f.stale_writes_rejected, 0, "no writer wrote after 5");
}

#[test]
fn a_writer_that_begins_just_after_its_lease_was_broken_is_not_ordered() {
    // `w` holds the key with token 5 while it waits for readers; its lease
    // is broken; a reader reads the free key (token 5) and comes and goes;
    // `w`, not yet told (its next renewal), finds no reader and begins:
    // no holder's section, and the resource refuses it.
    let f = History::default()
        .readers(&["r"])
        .fault("break returned 21", "w", 5, 20)
        .begin(5, "r", 25)
        .end(5, "r", 30)
        .begin(5, "w", 35)
        .end(5, "w", 40)
        .check();
    clean(&f);
    assert_eq!(f.stale_writes_rejected, 2, "the writer, after the read");
}

#[test]
fn a_writer_that_begins_long_after_its_lease_was_broken_is_flagged() {
    // The same, but `w` began past the notice it had (its renewal would
    // have told it).
    let f = History::default()
        .readers(&["r"])
        .fault("break returned 21", "w", 5, 20)
        .begin(5, "r", 25)
        .end(5, "r", 30)
        .begin(5, "w", 135)
        .end(5, "w", 140)
        .check();
    only(&f, "token order");
}

#[test]
fn a_writer_that_begins_just_after_its_lease_was_broken_beside_a_later_reader_is_excused() {
    // As above, but the broken key was taken by another (token 6) and
    // the reader, reading it free with that token, still reads when `w`
    // begins (a multi-key writer between its grant and its first write;
    // seen in a MySQL run): `w` began with no lease, before it could know,
    // and the resource refuses it.
    let f = History::default()
        .readers(&["r"])
        .fault("break returned 21", "w", 5, 20)
        .begin(6, "r", 25)
        .begin(5, "w", 35)
        .end(6, "r", 40)
        .end(5, "w", 45)
        .check();
    clean(&f);
    assert_eq!(f.overlaps_after_break, 1);
    assert_eq!(f.stale_writes_rejected, 2, "the writer, after the read");
}

#[test]
fn a_writer_beside_a_later_reader_is_flagged_without_the_break_or_past_its_notice() {
    let unbroken = History::default()
        .readers(&["r"])
        .begin(6, "r", 25)
        .begin(5, "w", 35)
        .end(6, "r", 40)
        .end(5, "w", 45)
        .check();
    assert!(!unbroken.overlaps.is_empty(), "{unbroken:#?}");
    let late = History::default()
        .readers(&["r"])
        .fault("break returned 21", "w", 5, 20)
        .begin(6, "r", 25)
        .begin(5, "w", 135)
        .end(6, "r", 140)
        .end(5, "w", 145)
        .check();
    assert!(!late.overlaps.is_empty(), "{late:#?}");
}

#[test]
fn two_writers_of_a_reader_writer_lock_still_exclude_each_other() {
    let f = History::default()
        .readers(&["r"])
        .begin(5, "r", 5)
        .end(5, "r", 8)
        .begin(6, "w1", 10)
        .begin(7, "w2", 20)
        .end(6, "w1", 30)
        .end(7, "w2", 40)
        .check();
    only(&f, "overlap");
}

// ---- write after lost ----

#[test]
fn a_write_after_the_guard_said_lost_is_flagged() {
    let f = History::default()
        .begin(1, "a", 10)
        .w(Kind::Lost, 1, "a", 20)
        .tick(1, "a", 22)
        .check();
    only(&f, "work after lost");
}

#[test]
fn late_writes_of_a_buggy_user_are_counted_and_fenced() {
    let f = History::default()
        .begin(1, "a", 10)
        .w(Kind::Lost, 1, "a", 20)
        .w(Kind::Late, 1, "a", 21) // nobody newer yet: accepted
        .begin(2, "b", 30)
        .w(Kind::Late, 1, "a", 35) // rejected
        .w(Kind::Late, 1, "a", 45) // rejected
        .end(2, "b", 50)
        .check();
    clean(&f);
    assert_eq!(f.late.total, 3);
    assert_eq!((f.late.accepted, f.late.rejected), (1, 2));
}

#[test]
fn a_late_write_the_resource_accepted_after_a_takeover_is_flagged() {
    // Only possible if fencing failed: forge the witness's answer.
    let mut h = History::default();
    h.begin(1, "a", 10)
        .w(Kind::Lost, 1, "a", 20)
        .begin(2, "b", 30);
    h.raw(Kind::Late, "k", 1, "a", 35, true);
    h.end(2, "b", 50);
    let f = h.check();
    assert_eq!(f.fenced_overlaps.len(), 1, "{f:#?}");
    assert_eq!(f.fencing_errors.len(), 1, "{f:#?}");
    assert!(f.overlaps.is_empty() && f.work_after_lost.is_empty());
}

// ---- orphaned command, and a grandchild writing after the kill ----

#[test]
fn a_command_writing_after_its_leasehold_run_was_killed_is_flagged() {
    let f = History::default()
        .begin(3, "cli-0", 10)
        .fault("kill", "cli-0", 3, 20)
        .tick(3, "cli-0", 100) // 80 ns after the kill; grace is 50
        .check();
    only(&f, "orphan write");
}

#[test]
fn a_grandchild_writing_after_its_leasehold_run_was_killed_is_flagged() {
    let mut h = History::default();
    h.begin(3, "cli-0", 10).fault("kill", "cli-0", 3, 20);
    // A background job of the command's shell: another process.
    h.raw(Kind::Tick, "k", 3, "cli-0", 200, true);
    h.records.last_mut().unwrap().pid = 101;
    let f = h.check();
    only(&f, "orphan write");
}

#[test]
fn a_command_that_dies_with_its_leasehold_run_passes() {
    let f = History::default()
        .begin(3, "cli-0", 10)
        .fault("kill", "cli-0", 3, 20)
        .tick(3, "cli-0", 60) // in flight within the grace
        .begin(4, "lib-0", 200)
        .end(4, "lib-0", 210)
        .check();
    clean(&f);
}

#[test]
fn a_readers_next_section_with_the_same_token_is_no_orphan_but_the_killed_one_is() {
    // A reader's token is the last writer's: the same worker's next
    // `run --shared`, begun after the kill, holds the same token.
    let clean_run = History::default()
        .readers(&["cli-0"])
        .begin(3, "cli-0", 10)
        .fault("kill", "cli-0", 3, 20)
        .begin(3, "cli-0", 300)
        .tick(3, "cli-0", 400)
        .end(3, "cli-0", 500)
        .check();
    assert!(clean_run.orphan_writes.is_empty(), "{clean_run:#?}");
    // The killed reader's own command writing on is still caught.
    let orphan = History::default()
        .readers(&["cli-0"])
        .begin(3, "cli-0", 10)
        .fault("kill", "cli-0", 3, 20)
        .tick(3, "cli-0", 100)
        .begin(3, "cli-0", 300)
        .check();
    assert_eq!(orphan.orphan_writes.len(), 1, "{orphan:#?}");
}

#[test]
fn the_orphan_rule_is_about_leasehold_run_commands_only() {
    // A library worker is the process that was killed: a write of its
    // section after the kill is an overlap question, not an orphan.
    let f = History::default()
        .begin(3, "lib-0", 10)
        .fault("kill", "lib-0", 3, 20)
        .tick(3, "lib-0", 200)
        .check();
    assert!(f.orphan_writes.is_empty(), "{f:#?}");
}

#[test]
fn a_break_sent_before_the_broken_holders_first_write_still_matches_it() {
    // The break names the lease it ended by token: its time may precede
    // that holder's first write (granted, not yet written).
    let f = History::default()
        .fault("break", "b", 5, 10)
        .begin(5, "a", 12)
        .begin(6, "b", 15)
        .tick(5, "a", 18)
        .end(6, "b", 25)
        .check();
    clean(&f);
    assert_eq!(f.overlaps_after_break, 1);
}

// ---- the witness itself ----

#[test]
fn a_witness_that_accepts_an_older_token_is_flagged() {
    let mut h = History::default();
    h.begin(5, "a", 10).end(5, "a", 20);
    h.raw(Kind::Begin, "k", 4, "b", 30, true);
    let f = h.check();
    assert_eq!(f.fencing_errors.len(), 1, "{f:#?}");
}

// ---- measures ----

#[test]
fn recovery_is_counted_once_across_store_epochs() {
    let f = History::default()
        .begin(7, "a", 10)
        .w(Kind::Lost, 7, "a", 15)
        .store_lost(20)
        .begin(20, "b", 50)
        .end(20, "b", 60)
        .check();
    assert_eq!(f.recovery["loss"], vec![Duration::from_nanos(30)]);
    assert!(f.unrecovered.is_empty(), "{f:#?}");
    clean(&f);
}

#[test]
fn a_token_granted_again_after_a_restart_is_a_new_section_and_flagged() {
    let f = History::default()
        .begin(120, "a", 10)
        .store_lost(20)
        // Paused across the loss: its loss is written in epoch 1.
        .w(Kind::Lost, 120, "a", 40)
        .w(Kind::Late, 120, "a", 41)
        .begin(200, "b", 50)
        .end(200, "b", 60)
        // Token 120 granted again, to the same holder: a section of its own
        // (three acquisitions), and a token below b's.
        .begin(120, "a", 70)
        .end(120, "a", 80)
        .check();
    assert_eq!(f.acquisitions, 3);
    only(&f, "token order");
}

// ---- multi-key holders: deadlocks and orphan holds ----

const S: u64 = 1_000_000_000;

impl History {
    /// `worker` starts an attempt on `keys`, waiting up to `wait_ms`.
    fn wait(&mut self, worker: &str, keys: &[&str], wait_ms: u64, t: u64) -> &mut Self {
        for key in keys {
            self.raw(Kind::Wait, key, 0, worker, t, true);
            self.records.last_mut().unwrap().detail = wait_ms.to_string();
        }
        self
    }

    fn gave_up(&mut self, worker: &str, keys: &[&str], t: u64) -> &mut Self {
        for key in keys {
            self.raw(Kind::GaveUp, key, 0, worker, t, true);
        }
        self
    }

    /// Snapshot `n`, sent at `sent` and answered 100 ms later: each key's
    /// holder and token.
    fn snapshot(&mut self, n: u64, sent: u64, holds: &[(&str, &str, u64)]) -> &mut Self {
        for (key, worker, token) in holds {
            self.raw(Kind::Held, key, *token, worker, sent + S / 10, true);
            self.records.last_mut().unwrap().detail = format!("{n} {sent}");
        }
        self
    }
}

/// Two workers given {a, b}, each holding one and waiting for the other,
/// seen so in two snapshots a second apart.
fn two_waiters_in_a_cycle() -> History {
    let mut h = History::default();
    h.wait("m0", &["a", "b"], 10_000, 0)
        .wait("m1", &["b", "a"], 10_000, S / 100)
        .snapshot(0, S, &[("a", "m0", 1), ("b", "m1", 1)])
        .snapshot(1, 2 * S + S / 5, &[("a", "m0", 1), ("b", "m1", 1)]);
    h
}

#[test]
fn waiters_holding_what_each_other_waits_for_for_a_second_are_a_deadlock() {
    let f = two_waiters_in_a_cycle().check();
    only(&f, "deadlock");
    assert_eq!(f.liveness.deadlocks.len(), 1, "{f:#?}");
}

#[test]
fn three_waiters_in_a_cycle_are_a_deadlock() {
    let mut h = History::default();
    h.wait("m0", &["a", "b"], 10_000, 0)
        .wait("m1", &["b", "c"], 10_000, 0)
        .wait("m2", &["c", "a"], 10_000, 0);
    for (n, t) in [(0, S), (1, 2 * S + S / 5)] {
        h.snapshot(n, t, &[("a", "m0", 1), ("b", "m1", 1), ("c", "m2", 1)]);
    }
    only(&h.check(), "deadlock");
}

#[test]
fn a_cycle_seen_for_less_than_a_second_is_no_deadlock() {
    let mut h = History::default();
    h.wait("m0", &["a", "b"], 10_000, 0)
        .wait("m1", &["b", "a"], 10_000, 0)
        .snapshot(0, S, &[("a", "m0", 1), ("b", "m1", 1)])
        .snapshot(1, S + S / 2, &[("a", "m0", 1), ("b", "m1", 1)])
        .snapshot(2, 2 * S + S / 5, &[("a", "m0", 1), ("b", "m1", 2)]);
    clean(&h.check());
}

#[test]
fn a_waiter_behind_one_that_got_every_key_is_no_deadlock() {
    // m1 took b and a, and works; m0 waits for both.
    let mut h = History::default();
    h.wait("m0", &["a", "b"], 10_000, 0)
        .wait("m1", &["a", "b"], 10_000, 0);
    h.raw(Kind::Begin, "a", 1, "m1", S / 2, true);
    h.snapshot(0, S, &[("a", "m1", 1), ("b", "m1", 1)])
        .snapshot(1, 3 * S, &[("a", "m1", 1), ("b", "m1", 1)]);
    clean(&h.check());
}

#[test]
fn waiters_past_their_waits_are_releasing_not_deadlocked() {
    let mut h = History::default();
    h.wait("m0", &["a", "b"], 500, 0)
        .wait("m1", &["b", "a"], 500, 0)
        .snapshot(0, S, &[("a", "m0", 1), ("b", "m1", 1)])
        .snapshot(1, 3 * S, &[("a", "m0", 1), ("b", "m1", 1)]);
    clean(&h.check());
}

#[test]
fn a_cycle_near_a_fault_is_not_judged() {
    let mut h = two_waiters_in_a_cycle();
    h.fault("pause", "m0", 1, S / 2);
    let f = h.check();
    clean(&f);
    assert_eq!(f.liveness.judged, 0, "{f:#?}");
}

#[test]
fn a_lease_renewed_past_its_workers_next_attempt_is_an_orphan_hold() {
    // m0 took a, timed out on b, and kept a: seen 3.4 s after its next
    // attempt began (a TTL is 1 s).
    let mut h = History::default();
    h.wait("m0", &["a", "b"], 1_000, 0)
        .snapshot(0, S / 2, &[("a", "m0", 7)])
        .gave_up("m0", &["a", "b"], S)
        .wait("m0", &["a", "b"], 10_000, S + S / 10)
        .snapshot(1, 3 * S + S / 2, &[("a", "m0", 7)]);
    only(&h.check(), "orphan hold");
}

#[test]
fn a_lease_gone_within_a_ttl_of_the_next_attempt_is_no_orphan_hold() {
    // A release that failed: the lease ran out within its TTL.
    let mut h = History::default();
    h.wait("m0", &["a", "b"], 1_000, 0)
        .snapshot(0, S / 2, &[("a", "m0", 7)])
        .gave_up("m0", &["a", "b"], S)
        .wait("m0", &["a", "b"], 10_000, S + S / 10)
        .snapshot(1, 2 * S, &[("a", "m0", 7)])
        .snapshot(2, 4 * S, &[("a", "m0", 8)]);
    clean(&h.check());
}
