//! The watch over the command's tree: the loop that stops it at the
//! deadline, on `stop`, when `leasehold` is gone, or when the command left
//! processes behind.

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::process::CommandExt;
use std::time::Duration;

use super::alarm::Alarm;
use super::keeper::Keeper;
use super::orders::Orders;
use super::protocol::{now, Stop};
use super::signals::{catch_stop_signals, with_sigttou_blocked};
use super::spawn::{in_child, spawn_into_cgroup, Stub};
use crate::output::say;
use crate::proctree::{self, Cgroup};

/// How long to wait for SIGKILLed processes to disappear before saying
/// which are left.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// How often the tree is re-examined while processes other than the command
/// itself remain (their exits give no event we can wait on).
const TICK: Duration = Duration::from_millis(10);

/// What a watchdog makes before the command: its cgroup, the keeper and
/// the command's process forked ahead (each where it could).
pub struct Made {
    pub cgroup: Option<Cgroup>,
    pub keeper: Option<Keeper>,
    pub stub: Option<Stub>,
}

/// Starts the command (in the cgroup, if there is one) and watches over it
/// until its tree is gone.
pub fn serve(
    orders: Orders,
    report: File,
    grace: Duration,
    deadline: Duration,
    command: Vec<OsString>,
    made: Made,
) {
    let mut watchdog = Watchdog::new(orders, report, grace, deadline, made.cgroup);
    watchdog.keeper = made.keeper;
    watchdog.stub = made.stub;
    watchdog.run(command);
}

struct Watchdog {
    orders: Orders,
    report: File,
    grace: Duration,
    deadline: Duration,
    /// The command; also its process group id.
    pid: libc::pid_t,
    pidfd: libc::c_int,
    cgroup: Option<Cgroup>,
    /// The foreground process group to give the terminal back to.
    terminal: Option<libc::pid_t>,
    /// The command's exit code, once it exited.
    status: Option<u8>,
    /// Why the tree is being stopped, once it is.
    stopping: Option<Stop>,
    kill_at: Option<Duration>,
    killed_at: Option<Duration>,
    parent_gone: bool,
    /// The last reap found no child at all: as a subreaper, the watchdog
    /// then has no living descendant (an orphan of the tree becomes its
    /// child).
    childless: bool,
    /// Wakes `wait` at the next due time on the boot clock; `None` if the
    /// kernel gave no timerfd (then only ppoll's timeout, which does not
    /// count a suspend).
    alarm: Option<Alarm>,
    /// Kills the tree if this process and `leasehold` both die.
    keeper: Option<Keeper>,
    /// The command's process forked ahead, if any (a spare's).
    stub: Option<Stub>,
    /// The tree left by a command that exited while stopping on a signal
    /// was sent SIGTERM.
    leftovers_told: bool,
}

impl Watchdog {
    /// A watchdog for a command not started yet.
    fn new(
        orders: Orders,
        report: File,
        grace: Duration,
        deadline: Duration,
        cgroup: Option<Cgroup>,
    ) -> Self {
        Watchdog {
            orders,
            report,
            grace,
            deadline,
            pid: 0,
            pidfd: -1,
            cgroup,
            terminal: None,
            status: None,
            stopping: None,
            kill_at: None,
            killed_at: None,
            parent_gone: false,
            childless: false,
            alarm: Alarm::new(),
            keeper: None,
            stub: None,
            leftovers_told: false,
        }
    }

    fn run(&mut self, command: Vec<OsString>) {
        // SAFETY: plain prctl; makes orphans of the command's tree ours.
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
        }
        catch_stop_signals();
        if !self.spawn(command) {
            return;
        }
        // Orders that came with `start` (a spare's).
        self.take_orders();
        loop {
            self.reap();
            let now = now();
            if self.stopping.is_none() && now >= self.deadline {
                say!("the lease's safety deadline passed without a renewal; stopping the command");
                self.stop(Stop::Deadline);
            }
            if let Some(at) = self.kill_at {
                if now >= at.min(self.deadline + self.grace) {
                    self.kill_all();
                }
            }
            // The tree is gone when the watchdog has no child left (no
            // descendant, as above) and the cgroup is empty: a cheap test,
            // so the whole process table is read only while a tree with
            // leftovers is being stopped.
            if self.status.is_some() && self.childless && self.cgroup_empty() {
                break;
            }
            if self.status.is_some() && self.stopping.is_none() {
                self.stop(Stop::Leftovers);
            }
            // Stopping on a signal the command answered by exiting: what it
            // left behind gets SIGTERM too (a shell's background job ignores
            // SIGINT), not only the SIGKILL at the end of the grace.
            if self.status.is_some()
                && self.stopping == Some(Stop::Interrupted)
                && !self.leftovers_told
            {
                self.leftovers_told = true;
                self.signal_tree(&[libc::SIGTERM, libc::SIGCONT]);
            }
            if let Some(at) = self.killed_at {
                let left = self.tree();
                if self.status.is_some() && left.is_empty() {
                    break;
                }
                if now >= at + KILL_WAIT {
                    let pids: Vec<String> = left.iter().map(|p| p.to_string()).collect();
                    self.say(&format!("left {}", pids.join(" ")));
                    self.finish();
                    return;
                }
                // Whatever was forked while the last SIGKILLs went out.
                self.kill(&left);
            }
            self.wait(now);
        }
        // The keeper first: `leasehold` may exit as soon as it reads
        // `done`, and the keeper kills the tree when `leasehold` is gone
        // without the watchdog's `done` (the watchdog may be frozen).
        if let Some(keeper) = self.keeper.take() {
            keeper.done();
        }
        self.say("done");
        self.finish();
    }

    /// Starts the command in its own process group (and cgroup).
    fn spawn(&mut self, command: Vec<OsString>) -> bool {
        let me = std::process::id() as libc::pid_t;
        // SAFETY: plain queries of our own terminal state.
        let foreground = unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() };
        // Straight into the cgroup where the kernel can (clone3 with
        // CLONE_INTO_CGROUP, Linux 5.7+): moving a process in afterwards
        // waits for an RCU grace period, ~10 ms, most of a short run.
        let keeper = self.keeper.as_ref().map(Keeper::fd);
        let stub = self.stub.take();
        let direct = match &self.cgroup {
            Some(c) => match stub.map(|s| s.go(foreground)) {
                Some(Ok(None)) | None => {
                    spawn_into_cgroup(c.dir(), &command, me, keeper, foreground)
                }
                Some(started) => started,
            },
            None => {
                if let Some(s) = stub {
                    s.discard();
                }
                Ok(None)
            }
        };
        let procs = match &direct {
            Ok(None) => self.cgroup.as_ref().and_then(|c| c.procs_file().ok()),
            _ => None,
        };
        let procs_fd = procs.as_ref().map(|f| f.as_raw_fd());
        let spawned = match direct {
            Ok(Some(pid)) => Ok(pid),
            Err(e) => Err(e),
            Ok(None) => {
                let mut cmd = std::process::Command::new(&command[0]);
                cmd.args(&command[1..]);
                // SAFETY: the closure runs in the forked child before exec
                // and calls only async-signal-safe functions.
                unsafe {
                    cmd.pre_exec(move || in_child(me, procs_fd, keeper, foreground));
                }
                // std's Child neither waits nor kills on drop: the watchdog
                // reaps with waitpid(-1), which also collects orphans of the
                // tree.
                cmd.spawn().map(|child| child.id() as libc::pid_t)
            }
        };
        let pid = match spawned {
            Ok(pid) => pid,
            Err(e) => {
                let code = if e.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                };
                self.say(&format!(
                    "spawn-failed {code} cannot run {:?}: {e}",
                    command[0]
                ));
                if let Some(c) = &self.cgroup {
                    c.remove();
                }
                if let Some(keeper) = self.keeper.take() {
                    keeper.done();
                }
                return false;
            }
        };
        drop(procs);
        self.pid = pid;
        if let Some(keeper) = &mut self.keeper {
            keeper.group(pid);
        }
        if foreground {
            // SAFETY: plain query.
            self.terminal = Some(unsafe { libc::getpgrp() });
        }
        if let Some(c) = &self.cgroup {
            if !c.members().contains(&self.pid) {
                c.remove();
                self.cgroup = None;
            }
        }
        // -1 if the kernel lacks pidfds (then the loop ticks instead).
        self.pidfd = proctree::pidfd(self.pid).map_or(-1, IntoRawFd::into_raw_fd);
        let cgroup = self
            .cgroup
            .as_ref()
            .map(|c| c.dir().display().to_string())
            .unwrap_or_else(|| "-".into());
        self.say(&format!("started {} {cgroup}", self.pid));
        true
    }

    /// Waits for an order, the command's exit, or the next thing due: at
    /// `due` on the boot clock (the alarm), whatever `CLOCK_MONOTONIC`, on
    /// which ppoll's timeout counts, did meanwhile.
    fn wait(&mut self, now: Duration) {
        let mut due = if self.stopping.is_none() {
            self.deadline
        } else {
            self.deadline + self.grace
        };
        if let Some(at) = self.kill_at {
            due = due.min(at);
        }
        let mut timeout = due.saturating_sub(now);
        // Processes other than the command give no event on exit: while the
        // tree is being stopped, look again every tick.
        if self.stopping.is_some() || self.status.is_some() || self.pidfd < 0 {
            timeout = timeout.min(TICK);
        }
        let mut fds = vec![];
        if !self.parent_gone {
            fds.push(libc::pollfd {
                fd: self.orders.pipe.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        if self.pidfd >= 0 && self.status.is_none() {
            fds.push(libc::pollfd {
                fd: self.pidfd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // The timeout below counts on CLOCK_MONOTONIC, which stands still
        // while the machine is suspended; the alarm, on CLOCK_BOOTTIME,
        // does not, and ends the wait at `due` (on resume, if the machine
        // slept past it). Re-arming clears its last expiry.
        if let Some(alarm) = &self.alarm {
            alarm.set(due);
            fds.push(libc::pollfd {
                fd: alarm.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `fds` is a valid array of pollfd of the given length; the
        // empty mask lets SIGCHLD in only while waiting here.
        let n = unsafe {
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, &none)
        };
        if n > 0 && !self.parent_gone && fds[0].revents != 0 {
            self.read_orders();
        }
    }

    fn read_orders(&mut self) {
        if !self.orders.fill() {
            self.parent_gone = true;
            self.stop(Stop::Orphaned);
            self.kill_all();
            return;
        }
        self.take_orders();
    }

    /// Acts on the orders read so far.
    fn take_orders(&mut self) {
        while let Some(line) = self.orders.buffered_line() {
            let mut words = line.split_whitespace();
            match (
                words.next(),
                words.next().and_then(|w| w.parse::<u64>().ok()),
            ) {
                (Some("deadline"), Some(ns)) => {
                    self.deadline = self.deadline.max(Duration::from_nanos(ns));
                }
                (Some("signal"), Some(sig)) => self.forward(sig as libc::c_int),
                (Some("stop"), _) => self.stop(Stop::Lost),
                _ => {}
            }
        }
    }

    /// Forwards a signal `leasehold` received. SIGINT and SIGTERM ask the
    /// command to stop: a tree that traps or ignores them would keep the
    /// lock for as long as it likes, so it gets the grace to end, then
    /// SIGKILL, as on a lost lease (SIGHUP is only passed on).
    fn forward(&mut self, sig: libc::c_int) {
        self.signal_tree(&[sig]);
        if (sig == libc::SIGINT || sig == libc::SIGTERM) && self.stopping.is_none() {
            self.stopping = Some(Stop::Interrupted);
            self.say(&format!("stopping {}", Stop::Interrupted.word()));
            self.kill_at = Some(now() + self.grace);
        }
    }

    /// Starts stopping the tree: SIGTERM now, SIGKILL after the grace.
    fn stop(&mut self, why: Stop) {
        if self.stopping.is_some() {
            return;
        }
        self.stopping = Some(why);
        self.say(&format!("stopping {}", why.word()));
        // A stopped process acts on SIGTERM only once continued.
        self.signal_tree(&[libc::SIGTERM, libc::SIGCONT]);
        self.kill_at = Some(now() + self.grace);
    }

    fn kill_all(&mut self) {
        let pids = self.tree();
        self.kill(&pids);
    }

    /// SIGKILL to the process group, the cgroup and `pids` (the tree as last
    /// seen).
    fn kill(&mut self, pids: &[libc::pid_t]) {
        if self.killed_at.is_none() {
            self.killed_at = Some(now());
        }
        self.kill_at = None;
        if let Some(c) = &self.cgroup {
            c.kill();
        }
        self.signal(pids, &[libc::SIGKILL]);
    }

    /// Sends `sigs` to the tree as it stands now (one look at /proc).
    fn signal_tree(&self, sigs: &[libc::c_int]) {
        self.signal(&self.tree(), sigs);
    }

    /// Sends `sigs`, in order, to the process group and to `pids`. Processes
    /// forked meanwhile are caught by the main loop, which looks at the tree
    /// again every tick and repeats SIGKILL until nothing is left.
    fn signal(&self, pids: &[libc::pid_t], sigs: &[libc::c_int]) {
        for &sig in sigs {
            proctree::signal_group(self.pid, sig);
            for &pid in pids {
                proctree::signal(pid, sig);
            }
        }
    }

    /// The command's tree as it stands: the cgroup's members and our
    /// descendants.
    fn tree(&self) -> Vec<libc::pid_t> {
        let mut pids = proctree::descendants(std::process::id() as libc::pid_t);
        if let Some(c) = &self.cgroup {
            pids.extend(c.members());
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Whether the command's cgroup, if it has one, has no process left.
    fn cgroup_empty(&self) -> bool {
        self.cgroup.as_ref().is_none_or(|c| c.members().is_empty())
    }

    /// Collects every exited child (the command and orphans of its tree).
    fn reap(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: `status` is a valid out-pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG | libc::WUNTRACED) };
            if pid <= 0 {
                self.childless =
                    pid < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD);
                return;
            }
            if pid == self.pid && libc::WIFSTOPPED(status) {
                self.suspend(libc::WSTOPSIG(status));
                continue;
            }
            if pid == self.pid {
                let code = if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status) as u8
                } else {
                    (128 + libc::WTERMSIG(status)) as u8
                };
                self.status = Some(code);
                self.say(&format!("exited {code}"));
                self.give_back_terminal();
            }
        }
    }

    fn give_back_terminal(&mut self) {
        if let Some(pgrp) = self.terminal.take() {
            // SAFETY: plain calls on our own terminal; SIGTTOU is blocked
            // around tcsetpgrp, as a background process must.
            unsafe { with_sigttou_blocked(|| libc::tcsetpgrp(0, pgrp)) };
        }
    }

    /// Job control: the command, which has the terminal, was stopped from
    /// it (Ctrl-Z, or a read/write from the background). The shell that
    /// started leasehold waits on leasehold's process group, not the
    /// command's, so the stop is passed on: the terminal goes back to
    /// leasehold's group, which stops too. When the shell continues it
    /// (`fg`, `bg`), the command is continued, with the terminal if
    /// leasehold's group has it again. While everything is stopped the lease
    /// is not renewed; if its deadline passed meanwhile the loop stops the
    /// command's tree before anything else.
    fn suspend(&mut self, sig: libc::c_int) {
        let Some(ours) = self.terminal else {
            return;
        };
        if ![libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU].contains(&sig) {
            return;
        }
        // SAFETY: plain calls on our terminal and process groups; SIGTTOU is
        // blocked around tcsetpgrp.
        unsafe {
            with_sigttou_blocked(|| libc::tcsetpgrp(0, ours));
            libc::kill(-ours, libc::SIGTSTP);
            // Continued.
            if now() >= self.deadline {
                return;
            }
            if libc::tcgetpgrp(0) == ours {
                with_sigttou_blocked(|| libc::tcsetpgrp(0, self.pid));
            }
            proctree::signal_group(self.pid, libc::SIGCONT);
        }
    }

    fn finish(&mut self) {
        self.give_back_terminal();
        if let Some(c) = &self.cgroup {
            c.remove();
        }
        if let Some(keeper) = self.keeper.take() {
            keeper.done();
        }
    }

    /// Writes a report line; `leasehold` may be gone, which is fine.
    fn say(&mut self, line: &str) {
        let _ = self.report.write_all(format!("{line}\n").as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `wait` ends at the deadline on the boot clock even when ppoll's own
    /// timeout, on `CLOCK_MONOTONIC`, would run far longer. It is handed a
    /// `now` an hour old: the gap a suspend opens between the boot clock
    /// and the monotonic one. Without the alarm it would wait the hour.
    #[test]
    fn wait_ends_at_the_deadline_on_the_boot_clock() {
        let (control_rx, control_tx) = crate::fd::pipe().unwrap();
        // Stands for the command's pidfd: open, never readable.
        let (command_rx, command_tx) = crate::fd::pipe().unwrap();
        let deadline = now() + Duration::from_millis(200);
        let stale = now().saturating_sub(Duration::from_secs(3600));
        assert!(
            deadline - stale > Duration::from_secs(60),
            "booted a minute ago?"
        );
        let report = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        let orders = Orders::new(File::from(control_rx));
        let mut dog = Watchdog::new(orders, report, Duration::from_secs(1), deadline, None);
        dog.pidfd = command_rx.as_raw_fd();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            dog.wait(stale);
            let _ = done_tx.send(now());
        });
        let woke = done_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("wait did not end at the deadline on the boot clock");
        assert!(woke >= deadline, "woke before the deadline");
        drop((control_tx, command_rx, command_tx));
    }
}
