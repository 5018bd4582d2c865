//! `leasehold run`: a command run under a lock.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use leasehold::{Error, HolderInfo, LeaseGuard, LockOptions, Store};

use crate::cli::{LeaseArgs, RunArgs};
use crate::inspect::{held_for, short};
use crate::supervisor::{supervise, Outcome, Signals};
use crate::{EXIT_LOST, EXIT_NOT_OBTAINED};

pub async fn run(store: &Store, args: RunArgs) -> anyhow::Result<ExitCode> {
    let lease = &args.lease;
    // Key and TTL first, so their errors come before any about --grace.
    let plain = LockOptions::new().ttl(lease.ttl);
    match args.limit {
        None => drop(store.lock_with(&lease.key, plain)?),
        Some(n) => drop(store.semaphore_with(&lease.key, n, plain)?),
    }
    let opts = lock_options(lease)?;
    let mut signals = Signals::new()?;

    let acquiring = async {
        match args.limit {
            None => {
                let lock = store.lock_with(&lease.key, opts)?;
                let guard = match args.wait {
                    None => lock.try_acquire().await,
                    Some(wait) => {
                        let mut status = StatusLine::new(&lease.key);
                        let r = lock
                            .acquire_with(wait, |h| status.show(&describe_holder(h)))
                            .await;
                        status.clear();
                        r
                    }
                };
                guard.map(|g| (g, None))
            }
            Some(n) => {
                let sem = store.semaphore_with(&lease.key, n, opts)?;
                let permit = match args.wait {
                    None => sem.try_acquire().await,
                    Some(wait) => {
                        let mut status = StatusLine::new(&lease.key);
                        let r = sem
                            .acquire_with(wait, |holders| {
                                status.show(&format!(
                                    "all {n} permits held ({})",
                                    describe_holders(holders)
                                ))
                            })
                            .await;
                        status.clear();
                        r
                    }
                };
                permit
                    .map(|p| (p.slot(), p))
                    .map(|(slot, p)| (p.into_guard(), Some(slot)))
            }
        }
    };
    let acquired = tokio::select! {
        r = acquiring => r,
        sig = signals.next() => {
            eprintln!("leasehold: interrupted while waiting for {}", lease.key);
            return Ok(ExitCode::from(128 + sig as u8));
        }
    };
    let (guard, slot) = match acquired {
        Ok(acquired) => acquired,
        Err(Error::Held { holder, .. }) => {
            eprintln!(
                "leasehold: {} is held by {}; not running the command",
                lease.key,
                describe_holder(holder.as_deref())
            );
            return Ok(ExitCode::from(EXIT_NOT_OBTAINED));
        }
        Err(Error::TimedOut { waited, .. }) => {
            let holder = store.inspect(&lease.key).await.ok().and_then(|i| i.holder);
            let by = match (args.limit, holder) {
                (Some(n), _) => format!("all {n} permits held"),
                (None, h) => format!("held by {}", describe_holder(h.as_ref())),
            };
            eprintln!(
                "leasehold: gave up waiting for {} after {} ({by}); not running the command",
                lease.key,
                short(waited)
            );
            return Ok(ExitCode::from(EXIT_NOT_OBTAINED));
        }
        Err(e) => return Err(e.into()),
    };
    tracing::info!(key = %lease.key, token = guard.fencing_token(), ?slot, "running the command");
    let mut env = vec![("LEASEHOLD_FENCING_TOKEN", guard.fencing_token().to_string())];
    if let Some(slot) = slot {
        env.push(("LEASEHOLD_SLOT", slot.to_string()));
    }
    let outcome = supervise(&guard, lease, &env, &mut signals).await?;
    Ok(ExitCode::from(finish(guard, &lease.key, outcome).await))
}

/// Releases the lease after the command ended; the exit code `run` reports:
/// 76 if the lease was lost while the command ran, else the command's.
pub async fn finish(guard: LeaseGuard, key: &str, outcome: Outcome) -> u8 {
    let released = guard.release().await;
    if !outcome.started {
        return outcome.code;
    }
    if outcome.lost || matches!(released, Err(Error::LeaseLost { .. })) {
        if !outcome.lost {
            eprintln!("leasehold: lease on {key} was lost while the command ran");
        }
        return EXIT_LOST;
    }
    if let Err(e) = released {
        eprintln!("leasehold: could not release {key} ({e}); it ends when its TTL runs out");
    }
    outcome.code
}

/// Lock options for `run`: the safety margin includes the grace period, so
/// that a child that ignores SIGTERM is killed before the lease could pass to
/// anyone else.
pub fn lock_options(args: &LeaseArgs) -> anyhow::Result<LockOptions> {
    if args.grace > args.ttl / 2 {
        return Err(Error::invalid(
            "grace",
            format!(
                "--grace {} is too long for --ttl {}: the command must be stopped before the lease can pass to someone else, so the grace may be at most half the TTL",
                short(args.grace),
                short(args.ttl)
            ),
        )
        .into());
    }
    let margin = args.ttl / 10 + args.grace;
    // Three renewals fit between a renewal and the safety deadline, so one
    // slow or failed renewal does not stop the command.
    let mut opts = LockOptions::new()
        .ttl(args.ttl)
        .safety_margin(margin)
        .renew_interval((args.ttl - margin) / 3);
    if let Some(label) = &args.owner {
        opts = opts.owner_label(label.clone());
    }
    if let Some(data) = &args.data {
        opts = opts.data(data.clone());
    }
    Ok(opts)
}

/// Who holds the key, shown while waiting: a live line on a terminal,
/// otherwise one line when the wait starts.
pub struct StatusLine {
    key: String,
    terminal: bool,
    shown: bool,
}

impl StatusLine {
    pub fn new(key: &str) -> Self {
        StatusLine {
            key: key.to_string(),
            terminal: std::io::stderr().is_terminal(),
            shown: false,
        }
    }

    pub fn show(&mut self, holder: &str) {
        if self.shown && !self.terminal {
            return;
        }
        let line = format!("leasehold: waiting for {}: held by {holder}", self.key);
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            write!(err, "\r\x1b[2K{line}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
        self.shown = true;
    }

    pub fn clear(&mut self) {
        if self.terminal && self.shown {
            eprint!("\r\x1b[2K");
        }
        self.shown = false;
    }
}

fn describe_holders(holders: &[HolderInfo]) -> String {
    let names: Vec<String> = holders.iter().map(|h| describe_holder(Some(h))).collect();
    names.join("; ")
}

pub fn describe_holder(holder: Option<&HolderInfo>) -> String {
    match holder {
        None => "another holder".into(),
        Some(h) => match held_for(h) {
            Some(d) => format!("{} for {}", h.owner, short(d)),
            None => h.owner.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn args(ttl: u64, grace_ms: u64) -> LeaseArgs {
        LeaseArgs {
            key: "k".into(),
            ttl: Duration::from_secs(ttl),
            owner: None,
            data: None,
            grace: Duration::from_millis(grace_ms),
            command: vec!["true".into()],
        }
    }

    #[test]
    fn grace_longer_than_half_the_ttl_is_rejected() {
        let err = lock_options(&args(1, 600)).unwrap_err();
        assert!(err.to_string().contains("at most half the TTL"), "{err}");
        lock_options(&args(30, 5000)).unwrap();
    }
}
