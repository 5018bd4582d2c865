//! The faults, injected on a schedule while the holders run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::Store;
use rand::seq::IndexedRandom;
use rand::Rng;
use tokio::process::Command;

use super::args::{is_long, RunArgs};
use super::procs::{alive, descendants, signal};
use super::route::Route;
use super::store::{lose_store, recreate, with_max_ttl};
use super::tracker::Tracker;
use crate::check;
use crate::witness::{now_ns, Kind, Witness};

/// The last `leasehold run` process started by each `cli-N` loop.
pub type CliPids = Arc<Mutex<HashMap<String, u32>>>;

/// Injects faults until `until_ns`; returns how many `leasehold run`
/// commands (any process of the command's tree) outlived their killed
/// leasehold by more than the checker's kill grace plus a second.
pub async fn inject_faults(
    args: &RunArgs,
    witness: &Witness,
    admin: &Store,
    cli_pids: &CliPids,
    until_ns: u64,
    routes: &HashMap<String, Route>,
) -> Vec<(usize, String)> {
    let mut tracker = Tracker::default();
    // (which kill, description) of every process found alive.
    let mut orphans = Vec::new();
    let mut kills = 0usize;
    let mut pauses = Vec::new();
    // Which max TTL the loss-partition fault re-creates the store with next
    // (mixed max TTLs): the first epoch was the long one.
    let mut recreate_long = false;
    // A loss-partition fault is due but no long holder has just begun: the
    // coordinator looks every 100 ms until one does. With mixed max TTLs the
    // first one is due from the start, so that it comes with the first long
    // grant: a fault due at a random time found a long holder just begun in
    // fewer than half of the 20 s CI runs (a long holder holds 7.5 to 30 s,
    // so few begin in a run), and a run without a loss tests none.
    let mut loss_due =
        args.long_max_ttl.is_some() && args.faults.iter().any(|f| f == "loss-partition");
    // Let the holders get going first.
    tokio::time::sleep(args.ttl).await;
    while now_ns() + args.ttl.as_nanos() as u64 * 2 < until_ns && !args.faults.is_empty() {
        let pause = match loss_due {
            true => Duration::from_millis(100),
            false => args.fault_every.mul_f64(rand::rng().random_range(0.5..1.5)),
        };
        // Not past the run's end (a --fault-every longer than the run
        // would lengthen it, for a fault after the end). A pause may end
        // within the last two TTLs, as a fault due then still comes: with
        // Azure's 15 s TTL, that is where a 50 s run's faults fall.
        let pause = pause.min(Duration::from_nanos(until_ns.saturating_sub(now_ns())));
        tokio::time::sleep(pause).await;
        if now_ns() >= until_ns {
            break;
        }
        tracker.update(witness);
        let Some((key, holder)) = tracker
            .holders
            .iter()
            .map(|(k, h)| (k.clone(), h.clone()))
            .collect::<Vec<_>>()
            .choose(&mut rand::rng())
            .cloned()
        else {
            continue;
        };
        let is_cli = holder.worker.starts_with("cli-");
        let kinds: Vec<&String> = args
            .faults
            .iter()
            .filter(|f| !(is_cli && !args.pause_run && *f == "pause"))
            .collect();
        // A loss that is due stays due: no other fault is drawn meanwhile.
        let kind = match loss_due {
            true => "loss-partition",
            false => match kinds.choose(&mut rand::rng()) {
                Some(k) => k.as_str(),
                None => continue,
            },
        };
        if kind == "loss-partition" {
            // With mixed max TTLs, only while a long holder holds, and
            // began its section less than a second ago (so that more than
            // a window of it is left): a loss with only short leases tests
            // nothing new.
            let recent = now_ns().saturating_sub(1_000_000_000);
            loss_due = args.long_max_ttl.is_some()
                && !tracker
                    .holders
                    .values()
                    .any(|h| is_long(args, &h.worker) && h.since >= recent);
            if loss_due {
                // Looked at again soon.
                continue;
            }
            let recreate_with = match args.long_max_ttl {
                Some(long) if recreate_long => with_max_ttl(&args.store, long),
                _ => args.store.clone(),
            };
            recreate_long = !recreate_long;
            let for_ = args.cut_for;
            let cut_at = now_ns();
            let mut stopped = Vec::new();
            for (k, h) in &tracker.holders {
                let pid = match h.worker.starts_with("cli-") {
                    true => cli_pids
                        .lock()
                        .unwrap()
                        .get(&h.worker)
                        .copied()
                        .unwrap_or(0),
                    false => h.pid,
                };
                let _ = witness.fault(now_ns(), k, &h.worker, pid, h.token, kind);
                match routes.get(&h.worker).and_then(|r| r.proxy.clone()) {
                    Some(proxy) => {
                        proxy.blackhole();
                        pauses.push(tokio::spawn(async move {
                            tokio::time::sleep(for_).await;
                            proxy.heal();
                        }));
                    }
                    None => {
                        signal(pid, libc::SIGSTOP);
                        stopped.push((pid, h.worker.clone()));
                    }
                }
            }
            if !stopped.is_empty() {
                // Woken as soon as another holder began on the store after
                // the loss (its quarantine over), or after for_: a holder
                // still trusting its lease of the lost data then writes
                // beside the new store's holder. (A partitioned holder
                // needs no such help: it writes on while cut off.)
                let (w, from) = (witness.clone(), tracker.offset);
                pauses.push(tokio::spawn(async move {
                    let mut offset = from;
                    while now_ns() < cut_at + for_.as_nanos() as u64 {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        let Ok((records, next)) = w.read_from(offset) else {
                            continue;
                        };
                        offset = next;
                        if records.iter().any(|r| {
                            r.kind == Kind::Begin
                                && r.t_ns > cut_at
                                && !stopped.iter().any(|(_, s)| *s == r.worker)
                        }) {
                            // Let its section get going.
                            tokio::time::sleep(Duration::from_millis(30)).await;
                            break;
                        }
                    }
                    for (pid, _) in stopped {
                        signal(pid, libc::SIGCONT);
                    }
                }));
            }
            let _ = witness.bump_epoch(check::LOSS_BEGINS);
            if let Err(e) = lose_store(&args.store, &recreate_with).await {
                eprintln!("leasehold-torture: {kind}: {e:#}");
            }
            recreate(&recreate_with, args.ttl).await;
            let _ = witness.bump_epoch(check::STORE_LOST_CUT_OFF);
            continue;
        }
        if kind == "failover" {
            // The store's primary fails over (Redis Sentinel, a cluster
            // shard). No witness epoch is bumped and no holder is marked:
            // a failover must keep the promise whole (holders whose grants
            // the replica lacks stop before anyone else begins; tokens keep
            // growing), so the checker holds it to exclusion and token order
            // across it. (Run to its end: the next fault waits for it.)
            let cmd = args.failover_cmd.as_deref().unwrap_or("true");
            match Command::new("sh")
                .args(["-c", cmd])
                .stdout(std::process::Stdio::null())
                .status()
                .await
            {
                Ok(s) if s.success() => {
                    let _ = witness.note(check::FAILED_OVER);
                }
                other => eprintln!("leasehold-torture: failover: the command failed: {other:?}"),
            }
            continue;
        }
        if kind == "restart" || kind == "loss" {
            // Every key loses its holder; tokens start again (new epoch).
            for (k, h) in &tracker.holders {
                let _ = witness.fault(now_ns(), k, &h.worker, h.pid, h.token, kind);
            }
            // Tokens start again with the store's state: a new epoch for the
            // witness (a real resource would pair tokens with a store
            // generation the same way). Two of them: a transition epoch
            // begun before the store is lost (grants in it may come from
            // the old store or the fresh one; the checker does not order
            // their tokens), and the fresh store's, once the loss is done.
            let _ = witness.bump_epoch(check::LOSS_BEGINS);
            let lost = match kind {
                "loss" => lose_store(&args.store, &args.store).await,
                _ => {
                    let cmd = args.restart_cmd.as_deref().unwrap_or("true");
                    match Command::new("sh")
                        .args(["-c", cmd])
                        .stdout(std::process::Stdio::null())
                        .status()
                        .await
                    {
                        Ok(s) if s.success() => Ok(()),
                        other => Err(anyhow::anyhow!("the restart command failed: {other:?}")),
                    }
                }
            };
            if let Err(e) = lost {
                eprintln!("leasehold-torture: {kind}: {e:#}");
            }
            let _ = witness.bump_epoch(if kind == "loss" {
                check::STORE_LOST
            } else {
                check::STORE_RESTARTED
            });
            continue;
        }
        // The process to signal: the `leasehold run` of a command, or the
        // library worker itself.
        let target = match is_cli {
            true => match cli_pids.lock().unwrap().get(&holder.worker) {
                Some(pid) => *pid,
                None => continue,
            },
            false => holder.pid,
        };
        let proxy = routes.get(&holder.worker).and_then(|r| r.proxy.clone());
        if kind == "kill" {
            // Dead: it writes nothing more (or, for a command that outlives
            // its `leasehold run`, it is no longer the holder to aim at).
            tracker.holders.remove(&key);
        }
        match kind {
            "kill" if is_cli => {
                let _ = witness.fault(now_ns(), &key, &holder.worker, target, holder.token, kind);
                // Everything the command started, taken before the kill
                // (afterwards they are re-parented and harder to find).
                let tree = descendants(target);
                signal(target, libc::SIGKILL);
                let grace = check::Limits::for_ttl(args.ttl).kill_grace + Duration::from_secs(1);
                let left = tokio::task::spawn_blocking(move || {
                    let deadline = std::time::Instant::now() + grace;
                    let mut left: Vec<u32> = tree;
                    while !left.is_empty() && std::time::Instant::now() < deadline {
                        left.retain(|p| alive(*p));
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    left.retain(|p| alive(*p));
                    left
                })
                .await
                .unwrap_or_default();
                if !left.is_empty() {
                    kills += 1;
                    for p in left {
                        let cmd = std::fs::read(format!("/proc/{p}/cmdline"))
                            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                            .unwrap_or_default();
                        // State and parent: a process stuck in the kernel
                        // (D) is not the same finding as one never signalled.
                        let stat = std::fs::read_to_string(format!("/proc/{p}/stat"))
                            .ok()
                            .and_then(|s| s.rfind(')').map(|i| s[i + 2..].to_string()))
                            .unwrap_or_default();
                        let mut stat = stat.split(' ');
                        let (state, ppid) =
                            (stat.next().unwrap_or("?"), stat.next().unwrap_or("?"));
                        let o = format!(
                            "{} token {}: pid {p} (state {state}, parent {ppid}) {:.1} s after the kill: {cmd}",
                            holder.worker,
                            holder.token,
                            grace.as_secs_f64(),
                        );
                        eprintln!("leasehold-torture: {o}");
                        orphans.push((kills, o));
                        signal(p, libc::SIGKILL);
                    }
                }
            }
            "kill" => {
                let _ = witness.fault(now_ns(), &key, &holder.worker, target, holder.token, kind);
                signal(target, libc::SIGKILL)
            }
            "pause" => {
                let _ = witness.fault(now_ns(), &key, &holder.worker, target, holder.token, kind);
                signal(target, libc::SIGSTOP);
                let for_ = args.ttl * 3 / 2;
                pauses.push(tokio::spawn(async move {
                    tokio::time::sleep(for_).await;
                    signal(target, libc::SIGCONT);
                }));
            }
            "partition" | "delay" | "reset" => {
                let Some(proxy) = proxy else { continue };
                let _ = witness.fault(now_ns(), &key, &holder.worker, target, holder.token, kind);
                let ttl = args.ttl;
                match kind {
                    "reset" => proxy.reset(),
                    "partition" => proxy.blackhole(),
                    _ => proxy.delay(ttl / 10),
                }
                let heal_after = if kind == "delay" {
                    ttl * 2
                } else {
                    ttl * 3 / 2
                };
                pauses.push(tokio::spawn(async move {
                    tokio::time::sleep(heal_after).await;
                    proxy.heal();
                }));
            }
            "break" => {
                // Recorded with the token of the lease the store says it
                // ended (0: none), at the time the break was sent.
                let sent = now_ns();
                let ended = match admin.break_lease(&key).await {
                    Ok(Some(h)) => h.fencing_token,
                    Ok(None) => 0,
                    Err(e) => {
                        eprintln!("leasehold-torture: break {key}: {e}");
                        0
                    }
                };
                let returned = format!("{kind} {} {}", check::BREAK_RETURNED, now_ns());
                let _ = witness.fault(sent, &key, &holder.worker, target, ended, &returned);
            }
            _ => {}
        }
    }
    for p in pauses {
        let _ = p.await;
    }
    orphans
}
