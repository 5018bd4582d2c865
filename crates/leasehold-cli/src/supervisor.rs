//! Running a command while a lease is held: `leasehold`'s side of the
//! watchdog (see [`crate::watchdog`] for the protocol and why it is safe).
//!
//! `leasehold` starts the watchdog, which starts the command; `leasehold`
//! then relays the lease's safety deadline after every renewal, forwards the
//! signals it receives, and says `stop` when the lease is lost. It returns
//! only once the watchdog reports the command's whole tree gone, so the
//! caller releases the lease after the command's work has stopped. If the
//! watchdog itself dies or stops answering past the deadline, `leasehold`
//! kills the command's process group and cgroup itself.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::sync::Mutex;

use anyhow::Context;
use leasehold::{
    backend::{Clock, SystemClock},
    LeaseGuard, LossReason, MultiGuard,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::cli::LeaseArgs;
use crate::fd::{pipe, set_nonblocking};
use crate::output::say;
use crate::proctree::{self, Cgroup};
use crate::watchdog::{self, Stop};

/// How a command run under a lease ended.
#[derive(Debug)]
pub struct Outcome {
    /// Its exit code, or 128 + the signal that killed it.
    pub code: u8,
    /// Whether the lease was lost while it ran (and it was stopped).
    pub lost: bool,
    /// The signal leasehold received and forwarded, if any.
    pub interrupted: Option<libc::c_int>,
    /// False if the command could not be started (`code` is then 127 when
    /// it was not found, 126 otherwise, as shells, env and timeout say).
    pub started: bool,
    /// Why it could not be started, if it could not.
    pub spawn_error: Option<String>,
    /// The watchdog, which reported the tree gone and is exiting: reaped
    /// with [`Exiting::reap`] after the lease is released, so that its
    /// cleanup and exit are not between the command's end and the release.
    pub watchdog: Exiting,
}

/// A watchdog that reported the command's tree gone, not yet reaped.
#[derive(Debug)]
pub struct Exiting(Option<Dog>);

impl Exiting {
    /// Waits for the watchdog to exit.
    pub async fn reap(self) {
        if let Some(mut dog) = self.0 {
            if let Err(e) = dog.wait().await {
                tracing::debug!(error = %e, "could not reap the watchdog");
            }
        }
    }
}

/// What a command runs under: one lease, or several held together
/// ([`MultiGuard`], `run KEY KEY...`), whose earliest safety deadline and
/// first loss stop the command.
pub trait Watched {
    /// The safety deadline, as it moves (see [`LeaseGuard::deadline_watch`]).
    fn deadline_watch(&self) -> tokio::sync::watch::Receiver<std::time::Duration>;
    /// Completes when a lease is lost: its key and why.
    fn lost(&self) -> impl std::future::Future<Output = (String, LossReason)>;
    /// Whether a lease is lost.
    fn is_lost(&self) -> bool;
}

impl Watched for LeaseGuard {
    fn deadline_watch(&self) -> tokio::sync::watch::Receiver<std::time::Duration> {
        LeaseGuard::deadline_watch(self)
    }
    async fn lost(&self) -> (String, LossReason) {
        (self.key().to_string(), LeaseGuard::lost(self).await)
    }
    fn is_lost(&self) -> bool {
        LeaseGuard::is_lost(self)
    }
}

impl Watched for MultiGuard {
    fn deadline_watch(&self) -> tokio::sync::watch::Receiver<std::time::Duration> {
        MultiGuard::deadline_watch(self)
    }
    async fn lost(&self) -> (String, LossReason) {
        let (key, reason) = MultiGuard::lost(self).await;
        (key.to_string(), reason)
    }
    fn is_lost(&self) -> bool {
        MultiGuard::is_lost(self)
    }
}

/// Runs the command while `guard` holds the lease, under a watchdog that
/// stops its whole process tree (SIGTERM, then SIGKILL after the grace)
/// when the lease is lost or its safety deadline passes, even if this
/// process is frozen or killed. Forwards SIGINT, SIGTERM and SIGHUP to the
/// tree. Returns once the command and everything it started are gone.
///
/// # Errors
/// If the watchdog cannot be started (pipes, exec of this binary).
pub async fn supervise(
    guard: &impl Watched,
    lease: &LeaseArgs,
    env: &[(&str, String)],
    signals: &mut Signals,
) -> anyhow::Result<Outcome> {
    let mut deadlines = guard.deadline_watch();
    let mut deadline = *deadlines.borrow_and_update();
    let (mut control, report_rx, mut dog) = match start_spare(lease, env, deadline) {
        Some(spare) => (spare.control, spare.report, Dog::Forked(spare.pid)),
        None => start_watchdog(lease, env, deadline)?,
    };
    set_nonblocking(control.as_raw_fd());

    let report = tokio::net::unix::pipe::Receiver::from_owned_fd(report_rx)
        .context("reading the watchdog's reports")?;
    let mut lines = BufReader::new(report).lines();

    let mut state = State::default();
    let mut lost = false;
    let mut interrupted = None;
    let mut deadlines_open = true;
    let mut backup_done = false;
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => {
                    if state.take(&line) == Some(Stop::Deadline) && !lost {
                        lost = true;
                    }
                    // Its last word; only its own cleanup and exit follow.
                    if state.done {
                        break;
                    }
                }
                _ => break,
            },
            sig = signals.next() => {
                interrupted = Some(sig);
                order(&mut control, &format!("signal {sig}"));
            }
            changed = deadlines.changed(), if deadlines_open => {
                if changed.is_err() {
                    deadlines_open = false;
                    continue;
                }
                deadline = *deadlines.borrow_and_update();
                order(&mut control, &format!("deadline {}", deadline.as_nanos()));
            }
            (key, reason) = guard.lost(), if !lost => {
                lost = true;
                say!("lease on {key} lost ({reason}); stopping the command");
                order(&mut control, "stop");
            }
            // Only if the watchdog is not doing its job (frozen): the
            // deadline and the grace have passed and the tree is not
            // reported gone. On the boot clock, like the deadline, so that
            // a suspend does not put it off.
            _ = SystemClock.sleep_until(deadline + lease.grace), if !backup_done && !state.done => {
                backup_done = true;
                tracing::warn!("the watchdog did not stop the command by the deadline; killing its process group");
                state.kill_backup();
            }
        }
    }
    if !state.done {
        let status = dog.wait().await?;
        if state.left.is_none() && state.spawn_failed.is_none() {
            // The watchdog died before it could report the tree gone.
            state.kill_backup();
            say!("the watchdog process ended unexpectedly ({status}); killed the command's process group");
        }
    }
    let watchdog = Exiting(state.done.then_some(dog));
    if let Some(left) = &state.left {
        say!("could not kill these processes of the command (stuck in the kernel?): {left}");
    }
    if let Some((code, message)) = state.spawn_failed {
        say!("{message}");
        return Ok(Outcome {
            code,
            lost: false,
            interrupted: None,
            started: false,
            spawn_error: Some(message),
            watchdog,
        });
    }
    Ok(Outcome {
        code: state.exited.unwrap_or(128 + libc::SIGKILL as u8),
        lost: lost || guard.is_lost(),
        interrupted,
        started: true,
        spawn_error: None,
        watchdog,
    })
}

/// The watchdog process: a spare forked at start-up, or one started
/// with exec.
#[derive(Debug)]
enum Dog {
    Forked(libc::pid_t),
    Execd(tokio::process::Child),
}

impl Dog {
    /// Waits for the watchdog to exit (it has closed its report pipe) and
    /// says how it ended.
    async fn wait(&mut self) -> anyhow::Result<String> {
        match self {
            Dog::Execd(child) => Ok(child
                .wait()
                .await
                .context("waiting for the watchdog")?
                .to_string()),
            Dog::Forked(pid) => {
                let status = wait_child(*pid).await.context("waiting for the watchdog")?;
                Ok(std::process::ExitStatus::from_raw(status).to_string())
            }
        }
    }
}

/// The spare watchdog forked at start-up, if any (see [`prepare`]).
static SPARE: Mutex<Option<watchdog::Spare>> = Mutex::new(None);

/// Forks a spare watchdog for `lease`'s command, while this process has
/// one thread: call before the async runtime starts. `supervise` uses it
/// instead of executing this binary again; [`discard_spare`] ends it if it
/// was not used.
pub fn prepare(lease: &LeaseArgs) {
    let spare = watchdog::fork_spare(&lease.command);
    *SPARE.lock().unwrap_or_else(|e| e.into_inner()) = spare;
}

/// Ends an unused spare watchdog (the command did not run) and waits for it,
/// so that nothing of this run outlives it.
pub fn discard_spare() {
    let spare = SPARE.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(spare) = spare {
        end(spare);
    }
}

/// Ends a spare watchdog that has not started (end of file before
/// `start`: it exits) and reaps it.
fn end(spare: watchdog::Spare) {
    drop(spare.control);
    let _ = wait_pid(spare.pid);
}

/// Hands the lease to the spare watchdog, if there is one and it takes
/// it: the command's environment, then `start`.
fn start_spare(
    lease: &LeaseArgs,
    env: &[(&str, String)],
    deadline: std::time::Duration,
) -> Option<watchdog::Spare> {
    let vars: Vec<_> = env.iter().collect();
    if vars
        .iter()
        .any(|(name, value)| name.contains([' ', '\n', '=']) || value.contains('\n'))
    {
        // Not expressible as orders: exec a watchdog instead.
        discard_spare();
        return None;
    }
    let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner()).take()?;
    let mut orders = String::new();
    for (name, value) in vars {
        orders.push_str(&format!("env {name} {value}\n"));
    }
    orders.push_str(&format!(
        "start {} {}\n",
        deadline.as_nanos(),
        lease.grace.as_nanos()
    ));
    // The pipe is empty and holds far more than this: the write is whole.
    match spare.control.write_all(orders.as_bytes()) {
        Ok(()) => Some(spare),
        Err(e) => {
            tracing::debug!(error = %e, "the spare watchdog is gone; starting another");
            end(spare);
            None
        }
    }
}

/// Starts a watchdog by executing this binary again.
fn start_watchdog(
    lease: &LeaseArgs,
    env: &[(&str, String)],
    deadline: std::time::Duration,
) -> anyhow::Result<(std::fs::File, OwnedFd, Dog)> {
    let (control_rx, control_tx) = pipe().context("creating the watchdog's pipes")?;
    let (report_rx, report_tx) = pipe().context("creating the watchdog's pipes")?;
    let mut cmd = tokio::process::Command::new("/proc/self/exe");
    if let Some(arg0) = std::env::args_os().next() {
        cmd.arg0(arg0);
    }
    let (ctl_fd, rep_fd) = (control_rx.as_raw_fd(), report_tx.as_raw_fd());
    cmd.args(watchdog::command_line(
        [ctl_fd, rep_fd],
        lease.grace,
        deadline,
        &lease.command,
    ))
    .kill_on_drop(false);
    for (k, v) in env {
        cmd.env(k, v);
    }
    // The watchdog's two pipe ends keep their numbers (the lowest free fds
    // from 10 up, so no fd this process inherited for the command is
    // touched) and lose close-on-exec in the child only.
    // SAFETY: runs in the forked child before exec; fcntl is
    // async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            for fd in [ctl_fd, rep_fd] {
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let dog = cmd.spawn().context("starting the watchdog process")?;
    drop((control_rx, report_tx));
    Ok((std::fs::File::from(control_tx), report_rx, Dog::Execd(dog)))
}

/// Waits for the child `pid` to exit; its raw status. Through its pidfd,
/// which turns readable when it exits, so that no thread waits; where the
/// kernel has no pidfds, waitpid on the blocking pool.
async fn wait_child(pid: libc::pid_t) -> std::io::Result<libc::c_int> {
    use tokio::io::{unix::AsyncFd, Interest};
    if let Some(fd) = proctree::pidfd(pid) {
        // SAFETY: the AsyncFd owns the OwnedFd, which stays open, the same
        // descriptor, until both are dropped together.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        // Readable: the child has exited, and waitpid returns at once.
        let _ready = fd.readable().await?;
        return wait_pid(pid);
    }
    tokio::task::spawn_blocking(move || wait_pid(pid))
        .await
        .map_err(std::io::Error::other)?
}

/// waitpid for one child, retried on EINTR; its raw status.
fn wait_pid(pid: libc::pid_t) -> std::io::Result<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status into an int we own.
        if unsafe { libc::waitpid(pid, &mut status, 0) } == pid {
            return Ok(status);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// What the watchdog reported.
#[derive(Debug, Default)]
struct State {
    pgid: Option<libc::pid_t>,
    cgroup: Option<Cgroup>,
    exited: Option<u8>,
    spawn_failed: Option<(u8, String)>,
    left: Option<String>,
    done: bool,
}

impl State {
    /// Takes one report line; returns why the watchdog started stopping
    /// the command, if that is what it said.
    fn take(&mut self, line: &str) -> Option<Stop> {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "started" => {
                let mut parts = rest.split_whitespace();
                self.pgid = parts.next().and_then(|p| p.parse().ok());
                self.cgroup = parts.next().filter(|c| *c != "-").map(Cgroup::at);
            }
            "spawn-failed" => {
                let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
                self.spawn_failed = Some((code.parse().unwrap_or(126), message.to_string()));
            }
            "stopping" => return Stop::from_word(rest),
            "exited" => self.exited = rest.parse().ok(),
            "left" => self.left = Some(rest.to_string()),
            "done" => self.done = true,
            _ => tracing::debug!(line, "unknown watchdog report"),
        }
        None
    }

    /// SIGKILL to the command's process group and cgroup, from here.
    fn kill_backup(&self) {
        if let Some(c) = &self.cgroup {
            c.kill();
        }
        if let Some(pgid) = self.pgid {
            proctree::signal_group(pgid, libc::SIGKILL);
        }
    }
}

/// Sends one order to the watchdog. A full pipe means the watchdog is not
/// reading (frozen): dropping a deadline then only makes it act earlier,
/// which is safe.
fn order(control: &mut std::fs::File, line: &str) {
    if let Err(e) = control.write_all(format!("{line}\n").as_bytes()) {
        tracing::debug!(error = %e, line, "could not send to the watchdog");
    }
}

/// SIGINT, SIGTERM and SIGHUP, caught so they can be forwarded to the
/// command's tree.
pub struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    pub fn new() -> anyhow::Result<Self> {
        Ok(Signals {
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            hup: signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
        })
    }

    /// The next signal received.
    pub async fn next(&mut self) -> libc::c_int {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}
