//! `status`, `list`, `break` and `leader`: looking at and clearing leases.
//!
//! Human output goes through [`clean`], so a holder's label or data cannot
//! put control characters on the terminal; JSON escapes them itself. The
//! JSON shapes are documented in `docs/cli.md` and kept stable.

use crate::output::say;
use std::fmt::Write as _;
use std::process::ExitCode;

use leasehold::{HolderInfo, KeyInfo, RunOutcome, SlotInfo, Store};
use serde::Serialize;

use crate::describe::{ago, describe_run, held_for, short};
use crate::exit::EXIT_USAGE;
use crate::output::{clean, print};

/// `status --json`: the key's record, the slots when KEY is a
/// semaphore's key, that is, has no record of its own (empty otherwise),
/// and the reader slots on record (`run --shared`).
#[derive(Serialize)]
struct Status<'a> {
    #[serde(flatten)]
    info: &'a KeyInfo,
    slots: &'a [SlotInfo],
    readers: &'a [SlotInfo],
    /// The key's holder is a writer waiting for readers to finish.
    writer_waiting: bool,
}

pub async fn status(store: &Store, key: &str, json: bool) -> anyhow::Result<ExitCode> {
    let info = store.inspect(key).await?;
    // A semaphore's key has no record of its own: its permits are slot
    // keys. Only a key without a record is looked up as one (listing may
    // cost a scan, on DynamoDB).
    let slots = match store.semaphore(key, 1) {
        Ok(sem) if info.fencing_token == 0 => sem.inspect().await?,
        _ => Vec::new(),
    };
    // Its readers (`run --shared`), if the key can have any: one list.
    // A key that cannot have readers (too long, or a slot key itself) has
    // none.
    let readers = match store.rw_lock_with(key, leasehold::DEFAULT_MAX_READERS, look_options(store))
    {
        Ok(rw) => rw.readers().await?,
        Err(_) => Vec::new(),
    };
    let holding = readers.iter().filter(|r| r.info.holder.is_some()).count();
    if json {
        let status = Status {
            info: &info,
            slots: &slots,
            readers: &readers,
            writer_waiting: info.holder.is_some() && holding > 0,
        };
        print(&(serde_json::to_string_pretty(&status)? + "\n"))?;
    } else {
        print(&describe(&info, &slots, &readers))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn list(store: &Store, prefix: &str, json: bool) -> anyhow::Result<ExitCode> {
    let infos = store.list(prefix).await?;
    if json {
        print(&(serde_json::to_string_pretty(&infos)? + "\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    // One write per line, so that a reader that stops early (head) ends us
    // at once.
    for info in &infos {
        let state = match &info.holder {
            Some(h) => format!("held   by {}", clean(&h.owner)),
            None => "free".to_string(),
        };
        let mut runs = String::new();
        if let Some(s) = &info.last_success {
            let _ = write!(runs, "\tlast success {}", ago(s.ended_at));
        }
        if let Some(r) = info
            .last_run
            .as_ref()
            .filter(|r| Some(*r) != info.last_success.as_ref())
        {
            let _ = write!(
                runs,
                "\tlast run {} {}",
                outcome(r.outcome),
                ago(r.ended_at)
            );
        }
        print(&format!(
            "{}\ttoken {}\t{state}{runs}\n",
            info.key, info.fencing_token
        ))?;
    }
    if infos.is_empty() {
        // Said on stderr: stdout stays empty for a script that counts lines.
        if prefix.is_empty() {
            say!("no keys in the store");
        } else {
            say!("no keys under {prefix:?}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn break_lease(store: &Store, key: &str) -> anyhow::Result<ExitCode> {
    match store.break_lease(key).await? {
        Some(holder) => print(&format!(
            "broke the lease of {} on {key}\n",
            clean(&holder.owner)
        ))?,
        None => {
            // A semaphore's key has no lease of its own: its permits are
            // slot keys, each broken on its own.
            let slots = match store.semaphore(key, 1) {
                Ok(sem) => sem.inspect().await.unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            if let Some(code) = refuse_slots(
                &slots,
                &format!("{key} is a semaphore (`run --limit`): nothing was broken; its permits are its slot keys, broken one at a time with `leasehold break {key}/:slot:N`"),
            ) {
                return Ok(code);
            }
            // Nor do the readers of KEY (`run --shared`): each holds a
            // reader slot of its own.
            let readers = match store.rw_lock_with(
                key,
                leasehold::DEFAULT_MAX_READERS,
                look_options(store),
            ) {
                Ok(rw) => rw.readers().await.unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            if let Some(code) = refuse_slots(
                &readers,
                &format!("{key} is held by readers (`run --shared`): nothing was broken; each holds a reader slot, broken one at a time with `leasehold break {key}/:read:N`"),
            ) {
                return Ok(code);
            }
            print(&format!("{key} was not held\n"))?
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn leader(store: &Store, key: &str, json: bool) -> anyhow::Result<ExitCode> {
    // Only looks: a TTL the store accepts (the default 30 s is above a
    // store max TTL below that, e.g. ?max_ttl=10s).
    let caps = store.backend().capabilities();
    let ttl = leasehold::DEFAULT_TTL.clamp(caps.min_ttl, caps.max_ttl);
    let leader = store
        .election_with(key, leasehold::LockOptions::new().ttl(ttl))?
        .leader()
        .await?;
    if json {
        print(&(serde_json::to_string_pretty(&leader)? + "\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    print(&describe_leader(key, leader.as_ref()))?;
    Ok(ExitCode::SUCCESS)
}

/// `leader --follow`: the leader now, then a line (or a JSON object) at
/// every change, until a signal ends it (exit 128+S). A failed ask is said
/// and asked again at the next interval.
pub async fn follow_leader(
    store: &Store,
    key: &str,
    json: bool,
    every: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    let caps = store.backend().capabilities();
    let ttl = leasehold::DEFAULT_TTL.clamp(caps.min_ttl, caps.max_ttl);
    let election = store.election_with(key, leasehold::LockOptions::new().ttl(ttl))?;
    let mut observer = election.observe(every);
    let mut signals = crate::supervisor::Signals::new()?;
    loop {
        let change = tokio::select! {
            change = observer.next() => change,
            sig = signals.next() => return Ok(ExitCode::from(128 + sig as u8)),
        };
        match change {
            Ok(change) if json => print(&(serde_json::to_string(&change)? + "\n"))?,
            Ok(change) => {
                let missed = match change.missed_terms {
                    0 => String::new(),
                    1 => "(1 term missed)\n".to_string(),
                    n => format!("({n} terms missed)\n"),
                };
                print(&(missed + &describe_leader(key, change.leader.as_ref())))?;
            }
            Err(e) => say!("could not ask who leads {key} ({e}); asking again"),
        }
    }
}

/// "KEY: held by OWNER (term N) for D" and its data, or "KEY: no leader".
fn describe_leader(key: &str, leader: Option<&HolderInfo>) -> String {
    match leader {
        None => format!("{key}: no leader\n"),
        Some(h) => {
            let since = held_for(h)
                .map(|d| format!(" for {}", short(d)))
                .unwrap_or_default();
            let mut out = format!(
                "{key}: held by {} (term {}){since}\n",
                clean(&h.owner),
                h.fencing_token
            );
            if let Some(data) = &h.data {
                let _ = writeln!(out, "data: {}", clean(data));
            }
            out
        }
    }
}

/// A multi-line, human description of a key (and its semaphore slots and
/// readers).
fn describe(info: &KeyInfo, slots: &[SlotInfo], readers: &[SlotInfo]) -> String {
    let mut out = format!("key:           {}\n", info.key);
    let holding: Vec<&SlotInfo> = readers.iter().filter(|r| r.info.holder.is_some()).collect();
    match &info.holder {
        None if !holding.is_empty() => {
            let _ = writeln!(
                out,
                "state:         shared by {}",
                readers_word(holding.len())
            );
        }
        Some(h) if !holding.is_empty() => {
            let _ = writeln!(
                out,
                "state:         held by a writer waiting for {} to finish",
                readers_word(holding.len())
            );
            describe_holder(&mut out, h, "");
        }
        None if !slots.is_empty() => {
            let held = slots.iter().filter(|s| s.info.holder.is_some()).count();
            let _ = writeln!(
                out,
                "state:         semaphore, {held} of the {} slots on record held",
                slots.len()
            );
        }
        None => out += "state:         free\n",
        Some(h) => {
            out += "state:         held\n";
            describe_holder(&mut out, h, "");
        }
    }
    if slots.is_empty() || info.fencing_token > 0 {
        let _ = writeln!(out, "fencing token: {} (last issued)", info.fencing_token);
    }
    if let Some(run) = &info.last_success {
        let _ = writeln!(out, "last success:  {}", describe_run(run));
    }
    if let Some(run) = &info.last_run {
        if Some(run) != info.last_success.as_ref() {
            let exit = run
                .exit_code
                .map(|c| format!(", exit code {c}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "last run:      {}{exit}, ended {}",
                outcome(run.outcome),
                describe_run(run)
            );
        }
    }
    for reader in holding {
        let _ = writeln!(out, "reader {}:", reader.slot);
        if let Some(h) = &reader.info.holder {
            describe_holder(&mut out, h, "  ");
        }
    }
    for slot in slots {
        let _ = writeln!(out, "slot {}:", slot.slot);
        match &slot.info.holder {
            None => out += "  state:         free\n",
            Some(h) => {
                out += "  state:         held\n";
                describe_holder(&mut out, h, "  ");
            }
        }
        let _ = writeln!(
            out,
            "  fencing token: {} (last issued)",
            slot.info.fencing_token
        );
    }
    out
}

fn describe_holder(out: &mut String, h: &HolderInfo, indent: &str) {
    let _ = writeln!(out, "{indent}holder:        {}", clean(&h.owner));
    if let Some(data) = &h.data {
        let _ = writeln!(out, "{indent}data:          {}", clean(data));
    }
    if let Some(held) = held_for(h) {
        let _ = writeln!(out, "{indent}held for:      {}", short(held));
    }
    match h.expires_in {
        // A store without a clock of its own (DynamoDB, S3) shows a holder
        // that stopped renewing as held until someone takes the key over.
        Some(left) if left.is_zero() => {
            let _ = writeln!(
                out,
                "{indent}expires in:    now: its TTL has run out by its record, so its holder has stopped renewing or is late; a waiting run takes the key over once it has seen the record unchanged for a TTL"
            );
        }
        Some(left) => {
            let _ = writeln!(out, "{indent}expires in:    {} unless renewed", short(left));
        }
        None => {}
    }
}

/// Options for a lock type made only to look: a TTL the store accepts.
fn look_options(store: &Store) -> leasehold::LockOptions {
    let caps = store.backend().capabilities();
    leasehold::LockOptions::new().ttl(leasehold::DEFAULT_TTL.clamp(caps.min_ttl, caps.max_ttl))
}

/// "1 reader", "2 readers".
fn readers_word(n: usize) -> String {
    match n {
        1 => "1 reader".to_string(),
        n => format!("{n} readers"),
    }
}

/// A run's outcome in words.
fn outcome(outcome: RunOutcome) -> &'static str {
    match outcome {
        RunOutcome::Succeeded => "succeeded",
        RunOutcome::Failed => "failed",
        RunOutcome::Interrupted => "interrupted",
        RunOutcome::LeaseLost => "lease lost",
        _ => "unknown",
    }
}

/// `break` on a key whose holders are slot keys (a semaphore's permits, a
/// reader-writer lock's readers): says `why` and the held slots, and
/// answers the usage exit code; `None` when no slot is held.
fn refuse_slots(slots: &[leasehold::SlotInfo], why: &str) -> Option<ExitCode> {
    let held = held_slots(slots);
    if held.is_empty() {
        return None;
    }
    say!("{why}: {}", held.join(", "));
    Some(ExitCode::from(EXIT_USAGE))
}

/// The held ones of a semaphore's or a reader-writer lock's slots, as
/// `KEY (held by OWNER)`, for `break`'s refusal.
fn held_slots(slots: &[leasehold::SlotInfo]) -> Vec<String> {
    slots
        .iter()
        .filter_map(|s| {
            let h = s.info.holder.as_ref()?;
            Some(format!("{} (held by {})", s.info.key, clean(&h.owner)))
        })
        .collect()
}
