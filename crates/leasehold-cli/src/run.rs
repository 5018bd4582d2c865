//! `leasehold run`: a command run under a lock.

use std::io::{IsTerminal, Write};
use std::process::{ExitCode, ExitStatus};

use anyhow::Context;
use leasehold::{Error, HolderInfo, LeaseGuard, Lock, LockOptions, Store, Wait};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::cli::RunArgs;
use crate::inspect::{held_for, short};
use crate::{EXIT_LOST, EXIT_NOT_OBTAINED};

pub async fn run(store: &Store, args: RunArgs) -> anyhow::Result<ExitCode> {
    // Key and TTL first, so their errors come before any about --grace.
    store.lock_with(&args.key, LockOptions::new().ttl(args.ttl))?;
    let lock = store.lock_with(&args.key, lock_options(&args)?)?;
    let mut signals = Signals::new()?;

    let acquired = tokio::select! {
        r = acquire(&lock, args.wait) => r,
        sig = signals.next() => {
            eprintln!("leasehold: interrupted while waiting for {}", args.key);
            return Ok(ExitCode::from(128 + sig as u8));
        }
    };
    let guard = match acquired {
        Ok(guard) => guard,
        Err(Error::Held { holder, .. }) => {
            eprintln!(
                "leasehold: {} is held by {}; not running the command",
                args.key,
                describe_holder(holder.as_deref())
            );
            return Ok(ExitCode::from(EXIT_NOT_OBTAINED));
        }
        Err(Error::TimedOut { waited, .. }) => {
            let holder = lock.inspect().await.ok().and_then(|i| i.holder);
            eprintln!(
                "leasehold: gave up waiting for {} after {} (held by {}); not running the command",
                args.key,
                short(waited),
                describe_holder(holder.as_ref())
            );
            return Ok(ExitCode::from(EXIT_NOT_OBTAINED));
        }
        Err(e) => return Err(e.into()),
    };
    tracing::info!(key = %args.key, token = guard.fencing_token(), "running the command");
    supervise(guard, &args, &mut signals).await
}

/// Lock options for `run`: the safety margin includes the grace period, so
/// that a child that ignores SIGTERM is killed before the lease could pass to
/// anyone else.
fn lock_options(args: &RunArgs) -> anyhow::Result<LockOptions> {
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
    let mut opts = LockOptions::new()
        .ttl(args.ttl)
        .safety_margin(args.ttl / 10 + args.grace);
    if let Some(label) = &args.owner {
        opts = opts.owner_label(label.clone());
    }
    if let Some(data) = &args.data {
        opts = opts.data(data.clone());
    }
    Ok(opts)
}

/// Acquires, showing who holds the key while waiting: a live line on a
/// terminal, otherwise one line when the wait starts.
async fn acquire(lock: &Lock, wait: Option<Wait>) -> leasehold::Result<LeaseGuard> {
    let Some(wait) = wait else {
        return lock.try_acquire().await;
    };
    let terminal = std::io::stderr().is_terminal();
    let mut shown = false;
    let result = lock
        .acquire_with(wait, |holder| {
            if shown && !terminal {
                return;
            }
            let line = format!(
                "leasehold: waiting for {}: held by {}",
                lock.key(),
                describe_holder(holder)
            );
            let mut err = std::io::stderr().lock();
            let _ = if terminal {
                write!(err, "\r\x1b[2K{line}")
            } else {
                writeln!(err, "{line}")
            };
            let _ = err.flush();
            shown = true;
        })
        .await;
    if terminal && shown {
        eprint!("\r\x1b[2K");
    }
    result
}

fn describe_holder(holder: Option<&HolderInfo>) -> String {
    match holder {
        None => "another holder".into(),
        Some(h) => match held_for(h) {
            Some(d) => format!("{} for {}", h.owner, short(d)),
            None => h.owner.to_string(),
        },
    }
}

/// Runs the child while holding `guard` and maps the outcome to an exit code.
async fn supervise(
    guard: LeaseGuard,
    args: &RunArgs,
    signals: &mut Signals,
) -> anyhow::Result<ExitCode> {
    let mut child = match spawn(args, guard.fencing_token()) {
        Ok(child) => child,
        Err(e) => {
            let _ = guard.release().await;
            eprintln!("leasehold: cannot run {:?}: {e}", args.command[0]);
            // As shells, env and timeout do: 127 not found, 126 not runnable.
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Ok(ExitCode::from(code));
        }
    };
    let pid = child.id().context("the child has no pid")? as libc::pid_t;
    let mut lost = false;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.context("waiting for the command")?,
            sig = signals.next() => send(pid, sig),
            reason = guard.lost(), if !lost => {
                lost = true;
                eprintln!("leasehold: lease on {} lost ({reason}); stopping the command", args.key);
                send(pid, libc::SIGTERM);
                kill_at = Some(tokio::time::Instant::now() + args.grace);
            }
            _ = sleep_until(kill_at), if kill_at.is_some() => {
                tracing::warn!(pid, "the command outlived the grace period; killing it");
                send(pid, libc::SIGKILL);
                kill_at = None;
            }
        }
    };
    let released = guard.release().await;
    if lost || matches!(released, Err(Error::LeaseLost { .. })) {
        if !lost {
            eprintln!(
                "leasehold: lease on {} was lost while the command ran",
                args.key
            );
        }
        return Ok(ExitCode::from(EXIT_LOST));
    }
    if let Err(e) = released {
        eprintln!(
            "leasehold: could not release {} ({e}); it ends when its TTL runs out",
            args.key
        );
    }
    Ok(ExitCode::from(exit_code(status)))
}

fn spawn(args: &RunArgs, token: u64) -> std::io::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("LEASEHOLD_KEY", &args.key)
        .env("LEASEHOLD_FENCING_TOKEN", token.to_string());
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || die_with_parent(parent));
    }
    cmd.spawn()
}

/// In the forked child: ask the kernel for SIGKILL when leasehold dies, and
/// exit at once if it already has (the race between fork and prctl).
fn die_with_parent(parent: u32) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    // SAFETY: plain syscalls with valid arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() as u32 != parent {
            libc::_exit(128 + libc::SIGKILL);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
    Ok(())
}

fn send(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions. The child is not
    // reaped until `wait` returns, so the pid cannot have been reused.
    unsafe {
        libc::kill(pid, sig);
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The child's exit code, or 128 + the signal that killed it.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => (128 + sig) as u8,
        (None, None) => 1,
    }
}

/// SIGINT, SIGTERM and SIGHUP, caught so they can be forwarded to the child.
struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Self> {
        Ok(Signals {
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            hup: signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
        })
    }

    /// The next signal received.
    async fn next(&mut self) -> libc::c_int {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn args(ttl: u64, grace_ms: u64) -> RunArgs {
        RunArgs {
            key: "k".into(),
            ttl: Duration::from_secs(ttl),
            wait: None,
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
