//! The watchdog: a small process between `leasehold` and the command that
//! stops the command's whole process tree when the lease's safety deadline
//! passes, whether or not `leasehold` itself is still running or scheduled.
//!
//! # Why a separate process
//! `leasehold` keeps the lease and knows when it would be lost, but it can be
//! frozen (SIGSTOP, a debugger, a starved container) or killed (`kill -9`,
//! the OOM killer). If the process that enforces the deadline is the one
//! that may be frozen, a frozen `leasehold` lets its command outlive its
//! lease. The watchdog enforces the deadline on its own: it never touches the
//! async runtime or the store, it only waits on a pipe and a clock.
//!
//! # Protocol
//! `leasehold run` and `elect` fork a *spare* watchdog as they start, while
//! the process still has one thread (before the async runtime), with two
//! pipes: the control pipe, which `leasehold` writes and the watchdog reads,
//! and the report pipe, the other way. The spare makes the command's cgroup
//! at once (while `leasehold` takes the lock), then waits for lines
//! `env NAME VALUE` (variables for the command, such as its fencing token)
//! and `start DEADLINE_NS GRACE_NS`, sent once the lease is held; end of file
//! before `start` (the lock was not obtained) ends it quietly, the cgroup
//! removed. Forking
//! without exec saves loading this binary a second time, a large part of a
//! short `leasehold run`. Where there is no spare (fork failed, or an
//! `elect`'s later terms), `leasehold` starts `/proc/self/exe __watchdog
//! CONTROL_FD REPORT_FD GRACE_NS DEADLINE_NS -- CMD…` with the same pipes
//! instead. Every other fd `leasehold` inherited reaches the command as
//! before.
//! * the control pipe carries lines `deadline NS` (the guard's new safety deadline after
//!   each renewal, on `CLOCK_BOOTTIME`, which all processes on the machine
//!   share), `signal N` (forward signal N to the command's tree) and `stop`
//!   (the lease was lost: stop the command now). End of file means
//!   `leasehold` is gone.
//! * the report pipe carries `started PID CGROUP|-`, `spawn-failed CODE MESSAGE`,
//!   `stopping REASON`, `exited CODE` and finally `done` or
//!   `left PID PID…` (processes that survived SIGKILL).
//!
//! # The rule, and why it is safe
//! The command runs in a process group of its own (and, where the machine has
//! a writable cgroup v2, in a cgroup of its own). The watchdog is a child
//! subreaper (`PR_SET_CHILD_SUBREAPER`), so every process the command starts
//! stays a descendant of the watchdog even when its parent exits; "the
//! command's tree" is the process group, the cgroup and every descendant of
//! the watchdog, which together catch `setsid` and double forks.
//!
//! With `D` the last deadline received (the send time of the lease's last
//! confirmed renewal + T − safety margin, where T is the TTL capped at the
//! [confirmation window](leasehold::CONFIRMATION_WINDOW) and the margin is
//! T/10 + grace), the watchdog sends SIGTERM to the tree at `D` and SIGKILL
//! at `D + grace`, unless a later deadline arrived first; on `stop` it does
//! the same at once (SIGKILL after the grace); on end of file on the control
//! pipe (`leasehold` died) it sends SIGKILL at once. `D + grace` is T/10
//! before the earliest moment the store could grant the lease to anyone
//! else: the TTL's end if the store keeps its data, one window after the
//! loss if it loses it and is re-created (the quarantine). The watchdog's
//! timer does not depend on `leasehold` being scheduled. When the command exits by itself, the rest
//! of its tree is stopped the same way (SIGTERM, SIGKILL after the grace, and
//! no later than `D + grace`) before the watchdog reports `done`, and
//! `leasehold` releases the lease only after that report (it reaps the
//! watchdog, which removes the cgroup and exits, after the release).
//!
//! # Timers, and a suspended machine
//! Every time above is on `CLOCK_BOOTTIME` ([`now`]), which counts the time
//! the machine spends suspended, and so does every wait of the watchdog: it
//! waits in `ppoll` on the control pipe, the command's pidfd and an *alarm*,
//! a timerfd on `CLOCK_BOOTTIME` set (`TFD_TIMER_ABSTIME`) to the next time
//! due (`D`, or the SIGKILL time once stopping). `ppoll`'s own timeout
//! counts on `CLOCK_MONOTONIC`, which stands still during a suspend: on its
//! own it would end late by the whole suspend, and the command would run
//! that long past its deadline after resume. With the alarm, the watchdog
//! wakes on resume if the deadline passed while the machine slept, and
//! stops the tree then, as for any deadline. The timeout stays: as the
//! TICK while a tree is being stopped (orphans' exits give no event), and
//! as a fallback where there is no timerfd. `leasehold`'s own waits on the
//! deadline (its renewal task, and its backup SIGKILL of the group if the
//! watchdog fails) are on the same clock (see
//! [`Clock::sleep_until`](leasehold::backend::Clock::sleep_until)).
//!
//! The command resumes together with the watchdog, so it may run for a
//! moment after resume before the signals reach it; its lease had run out
//! while everything slept, and the fencing token is what protects the
//! resource then (as for a frozen machine, below).
//!
//! Tested: `tests::the_alarm_fires_at_its_time_on_the_boot_clock` (the
//! alarm is on the boot clock) and `tests::wait_ends_at_the_deadline_on_the_boot_clock`
//! (`wait` ends at the deadline when `ppoll`'s timeout would run an hour
//! longer, the gap a suspend opens). A test cannot suspend the machine;
//! the check by hand, on a machine that can sleep:
//! ```text
//! leasehold --store sqlite:/tmp/l.db run --ttl 20s k -- sleep 600
//! sudo rtcwake -m freeze -s 60    # or -m mem; or close the laptop's lid
//! ```
//! On resume (60 s later, past the 20 s lease) `leasehold` says the
//! deadline passed and stops the command at once; before this alarm it did
//! so only after the deadline's remainder counted again on the monotonic
//! clock. `kill -STOP -PGID` of `leasehold`'s whole process group for
//! longer than the TTL, then `kill -CONT -PGID`, is the stand-in without a
//! machine that sleeps: it shows the behaviour on resume (the tree stopped
//! at once, `leasehold` exits 76) but not the clock difference, since
//! `CLOCK_MONOTONIC` keeps counting while processes are stopped.
//!
//! # What can escape
//! * If the watchdog itself is killed with SIGKILL, the command (its direct
//!   child) dies with it (`PR_SET_PDEATHSIG`) and `leasehold` kills the
//!   process group and the cgroup; descendants that left both (possible only
//!   without a cgroup) survive.
//! * If both `leasehold` and the watchdog are frozen (SIGSTOP to
//!   `leasehold`'s whole process group, or the whole machine frozen or
//!   suspended), nobody acts until they resume; on resume the watchdog acts
//!   at once on a deadline that passed meanwhile (see above). A frozen
//!   machine freezes the command too, and the fencing token is what
//!   protects the resource then.
//! * A process stuck in uninterruptible sleep ignores SIGKILL until the
//!   kernel lets it go; the watchdog then reports it as left, and `leasehold`
//!   says so.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::ExitCode;
use std::time::Duration;

use crate::output::say;
use crate::proctree::{self, Cgroup};

/// The argument that selects the watchdog instead of the normal CLI.
pub const ARG: &str = "__watchdog";

/// How long to wait for SIGKILLed processes to disappear before saying
/// which are left.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// How often the tree is re-examined while processes other than the command
/// itself remain (their exits give no event we can wait on).
const TICK: Duration = Duration::from_millis(10);

/// The clock every deadline is on: shared by all processes on the machine.
pub fn now() -> Duration {
    use leasehold::backend::Clock;
    leasehold::backend::SystemClock.now()
}

/// Entry point of `leasehold __watchdog CONTROL_FD REPORT_FD GRACE_NS
/// DEADLINE_NS -- CMD...`.
pub fn main(args: Vec<OsString>) -> ExitCode {
    let parsed = (|| {
        let mut it = args.into_iter();
        let mut number = || it.next()?.to_str()?.parse::<u64>().ok();
        let fds = [number()?, number()?];
        let (grace, deadline) = (number()?, number()?);
        (it.next()? == "--").then_some(())?;
        let command: Vec<OsString> = it.collect();
        let fds = fds.map(|fd| libc::c_int::try_from(fd).ok().filter(|&fd| is_pipe(fd)));
        Some((fds[0]?, fds[1]?, grace, deadline))
            .filter(|_| !command.is_empty())
            .map(|p| (p, command))
    })();
    let Some(((control_fd, report_fd, grace, deadline), command)) = parsed else {
        say!("{ARG} is internal to `leasehold run`");
        return ExitCode::from(crate::EXIT_USAGE);
    };
    // SAFETY: `leasehold` passed us these two pipe ends (checked to be
    // pipes); nothing else in this process owns them. Close-on-exec keeps
    // them from the command.
    let (control, report) =
        unsafe { (File::from_raw_fd(control_fd), File::from_raw_fd(report_fd)) };
    for fd in [control_fd, report_fd] {
        set_cloexec(fd);
    }
    let orders = Orders {
        pipe: control,
        buf: Vec::new(),
    };
    let grace = Duration::from_nanos(grace);
    let cgroup = Cgroup::create(&std::process::id().to_string());
    serve(
        orders,
        report,
        grace,
        Duration::from_nanos(deadline),
        command,
        cgroup,
    );
    ExitCode::SUCCESS
}

/// A watchdog forked when `leasehold` started, waiting for `start` (see
/// the protocol in the module docs).
#[derive(Debug)]
pub struct Spare {
    pub pid: libc::pid_t,
    /// `leasehold`'s end of the control pipe.
    pub control: File,
    /// `leasehold`'s end of the report pipe.
    pub report: OwnedFd,
}

/// Forks a spare watchdog for `command`. Must be called while this
/// process has one thread (before the async runtime starts), since the
/// child goes on without exec. `None` if the pipes or the fork fail.
pub fn fork_spare(command: &[OsString]) -> Option<Spare> {
    let (control_rx, control_tx) = crate::supervisor::pipe().ok()?;
    let (report_rx, report_tx) = crate::supervisor::pipe().ok()?;
    // SAFETY: the caller guarantees one thread, so the child is a full
    // copy of a consistent process and may do anything the parent could.
    match unsafe { libc::fork() } {
        -1 => None,
        0 => {
            drop((control_tx, report_rx));
            spare(control_rx, report_tx, command.to_vec());
            std::process::exit(0);
        }
        pid => Some(Spare {
            pid,
            control: File::from(control_tx),
            report: report_rx,
        }),
    }
}

/// The spare's life: the command's environment, then `start`, then the
/// same watch as an exec'd watchdog's.
fn spare(control: OwnedFd, report: OwnedFd, command: Vec<OsString>) {
    // Before anything else: a terminal's Ctrl-C while `leasehold` waits
    // for the lock reaches this process too.
    catch_stop_signals();
    // The command's cgroup, made now, while `leasehold` opens the store and
    // takes the lock, rather than after `start`, when the command waits for
    // it. Removed if the command does not run; if this process is killed
    // first, the next watchdog removes it (see `Cgroup::create`).
    let cgroup = Cgroup::create(&std::process::id().to_string());
    let unused = |cgroup: Option<Cgroup>| {
        if let Some(c) = cgroup {
            c.remove();
        }
    };
    let mut orders = Orders {
        pipe: File::from(control),
        buf: Vec::new(),
    };
    let (deadline, grace) = loop {
        // End of file: `leasehold` ends without running the command.
        let Some(line) = orders.next_line() else {
            return unused(cgroup);
        };
        let mut words = line.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("env"), Some(name), Some(value)) => {
                // One thread: nothing reads the environment concurrently.
                std::env::set_var(name, value);
            }
            (Some("start"), Some(deadline), Some(grace)) => {
                match (deadline.parse(), grace.parse()) {
                    (Ok(d), Ok(g)) => break (Duration::from_nanos(d), Duration::from_nanos(g)),
                    _ => return unused(cgroup),
                }
            }
            _ => {}
        }
    };
    serve(orders, File::from(report), grace, deadline, command, cgroup);
}

/// The control pipe, read a line at a time.
struct Orders {
    pipe: File,
    /// Bytes read and not yet taken as lines.
    buf: Vec<u8>,
}

impl Orders {
    /// The next whole line, blocking; `None` at end of file or on error.
    fn next_line(&mut self) -> Option<String> {
        loop {
            if let Some(line) = self.buffered_line() {
                return Some(line);
            }
            if !self.fill() {
                return None;
            }
        }
    }

    /// A whole line already read, if any.
    fn buffered_line(&mut self) -> Option<String> {
        let end = self.buf.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=end).collect();
        Some(String::from_utf8_lossy(&line[..end]).into_owned())
    }

    /// Reads what the pipe has; false at end of file or on error.
    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 512];
        loop {
            match self.pipe.read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
    }
}

/// Starts the command (in `cgroup`, if there is one) and watches over it
/// until its tree is gone.
fn serve(
    orders: Orders,
    report: File,
    grace: Duration,
    deadline: Duration,
    command: Vec<OsString>,
    cgroup: Option<Cgroup>,
) {
    let mut dog = Watchdog {
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
    };
    dog.run(command);
}

/// Why the watchdog stops the command's tree; reported as `stopping WORD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// No renewal arrived before the safety deadline.
    Deadline,
    /// `leasehold` said the lease was lost.
    Lost,
    /// The command exited and left processes behind.
    Leftovers,
    /// `leasehold` is gone (its end of the control pipe closed).
    Orphaned,
}

impl Stop {
    pub fn word(self) -> &'static str {
        match self {
            Stop::Deadline => "deadline",
            Stop::Lost => "lost",
            Stop::Leftovers => "leftovers",
            Stop::Orphaned => "orphaned",
        }
    }

    pub fn from_word(w: &str) -> Option<Stop> {
        [Stop::Deadline, Stop::Lost, Stop::Leftovers, Stop::Orphaned]
            .into_iter()
            .find(|s| s.word() == w)
    }
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
}

impl Watchdog {
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
        let direct = match &self.cgroup {
            Some(c) => spawn_into_cgroup(c.dir(), &command, me, foreground),
            None => Ok(None),
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
                    cmd.pre_exec(move || in_child(me, procs_fd, foreground));
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
                return false;
            }
        };
        drop(procs);
        self.pid = pid;
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
                (Some("signal"), Some(sig)) => self.signal_tree(&[sig as libc::c_int]),
                (Some("stop"), _) => self.stop(Stop::Lost),
                _ => {}
            }
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
    }

    /// Writes a report line; `leasehold` may be gone, which is fine.
    fn say(&mut self, line: &str) {
        let _ = self.report.write_all(format!("{line}\n").as_bytes());
    }
}

/// A timerfd on `CLOCK_BOOTTIME`, the clock of every deadline here, set to
/// an absolute time: readable from that time on, however long the machine
/// was suspended before it (ppoll's own timeout counts on
/// `CLOCK_MONOTONIC`, which does not count a suspend). Made with rustix's
/// safe wrappers.
struct Alarm {
    fd: OwnedFd,
}

impl Alarm {
    /// `None` if the kernel gives no timerfd on `CLOCK_BOOTTIME` (Linux
    /// before 3.15).
    fn new() -> Option<Alarm> {
        use rustix::time::{timerfd_create, TimerfdClockId, TimerfdFlags};
        let flags = TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK;
        timerfd_create(TimerfdClockId::Boottime, flags)
            .ok()
            .map(|fd| Alarm { fd })
    }

    /// Readable from `at` on the boot clock ([`now`]) on, at once if that
    /// has passed; not readable before (setting it clears an expiry not yet
    /// read).
    fn set(&self, at: Duration) {
        use rustix::time::{timerfd_settime, Itimerspec, TimerfdTimerFlags, Timespec};
        // A zero time would disarm it; the boot clock is never at zero.
        let at = at.max(Duration::from_nanos(1));
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: at.as_secs().min(i64::MAX as u64) as _,
                tv_nsec: at.subsec_nanos() as _,
            },
        };
        // Cannot fail with our own fd and a valid time; if it did, ppoll's
        // timeout would still end the wait (late by a suspend, as before).
        let _ = timerfd_settime(&self.fd, TimerfdTimerFlags::ABSTIME, &spec);
    }
}

/// clone3's flag: the child starts in the cgroup `cgroup` names (the
/// libc crate's constant is an `i32` that overflows).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` of clone3(2), up to `cgroup` (version 2, 88 bytes).
/// Written out here: the libc crate declares it for musl targets only.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Forks the command straight into the cgroup at `dir` (clone3 with
/// `CLONE_INTO_CGROUP`) and execs it, as `Command::spawn` with
/// [`in_child`] would (own process group, terminal, death signal, an empty
/// signal mask, SIGPIPE at its default, PATH search). `Ok(None)` when the
/// kernel cannot (older than 5.7, or clone3 refused): the caller spawns the
/// usual way. An exec failure comes back as the error, like `spawn`'s.
fn spawn_into_cgroup(
    dir: &std::path::Path,
    command: &[OsString],
    watchdog: libc::pid_t,
    foreground: bool,
) -> std::io::Result<Option<libc::pid_t>> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    // Everything the child needs, made before the fork: it must not
    // allocate.
    let to_c = |a: &OsString| {
        CString::new(a.as_bytes()).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a NUL byte in the command",
            )
        })
    };
    let args: Vec<CString> = command.iter().map(to_c).collect::<std::io::Result<_>>()?;
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let Ok(cgroup) = std::fs::File::open(dir) else {
        return Ok(None);
    };
    let mut pipe = [0 as libc::c_int; 2];
    // SAFETY: a valid two-int array.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let (read_end, write_end) = (pipe[0], pipe[1]);
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: clone3 with a valid, fully initialised argument struct and no
    // shared memory (a fork). The watchdog is single-threaded, and the
    // child calls only async-signal-safe functions before exec or _exit.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid == 0 {
        // SAFETY: in the child; see above.
        unsafe {
            libc::close(read_end);
            let err = match in_child(watchdog, None, foreground) {
                Ok(()) => {
                    let mut none: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut none);
                    libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                    libc::execvp(argv[0], argv.as_ptr());
                    std::io::Error::last_os_error()
                }
                Err(e) => e,
            };
            let code = err.raw_os_error().unwrap_or(libc::EIO);
            libc::write(write_end, (&code as *const libc::c_int).cast(), 4);
            libc::_exit(127);
        }
    }
    // SAFETY: closing our copy of the child's end.
    unsafe { libc::close(write_end) };
    // SAFETY: the read end is ours; File closes it.
    let mut report = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(read_end) };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            // No clone3, no CLONE_INTO_CGROUP, or not allowed here.
            Some(
                libc::ENOSYS
                | libc::EINVAL
                | libc::E2BIG
                | libc::EPERM
                | libc::EACCES
                | libc::EOPNOTSUPP,
            ) => Ok(None),
            _ => Err(e),
        };
    }
    let pid = pid as libc::pid_t;
    let mut code = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match report.read(&mut code[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    if got == 0 {
        // The pipe closed on exec: the command runs.
        return Ok(Some(pid));
    }
    // It could not start: collect it, report why.
    let mut status = 0;
    // SAFETY: our own child; a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    Err(std::io::Error::from_raw_os_error(i32::from_ne_bytes(code)))
}

/// In the forked command, before exec: a process group of its own (made the
/// terminal's foreground group if `leasehold` had the terminal), the
/// watchdog's cgroup, and death with the watchdog.
fn in_child(
    watchdog: libc::pid_t,
    procs: Option<libc::c_int>,
    foreground: bool,
) -> std::io::Result<()> {
    // SAFETY: async-signal-safe syscalls with valid arguments.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(fd) = procs {
            // Writing "0" moves the writer; if it fails the watchdog notices
            // and does without the cgroup.
            libc::write(fd, b"0".as_ptr().cast(), 1);
        }
        if foreground {
            with_sigttou_blocked(|| libc::tcsetpgrp(0, libc::getpid()));
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() != watchdog {
            libc::_exit(128 + libc::SIGKILL);
        }
    }
    Ok(())
}

/// Runs `f` with SIGTTOU blocked (async-signal-safe).
unsafe fn with_sigttou_blocked(f: impl FnOnce() -> libc::c_int) {
    let mut set: libc::sigset_t = std::mem::zeroed();
    let mut old: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::sigaddset(&mut set, libc::SIGTTOU);
    libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
    f();
    libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
}

extern "C" fn ignore(_: libc::c_int) {}

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT do not end the watchdog: `leasehold`
/// decides what reaches the command (a terminal's Ctrl-C reaches both). A
/// handler rather than SIG_IGN, because handlers are reset by exec and the
/// command must get default dispositions.
///
/// SIGCHLD gets the same handler and is blocked except while the watchdog
/// waits in `ppoll`, so a child that stops (Ctrl-Z) or exits always wakes
/// it, whenever the signal comes.
fn catch_stop_signals() {
    // SAFETY: a valid, fully initialised signal set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    for sig in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGCHLD,
    ] {
        // SAFETY: installs a handler that does nothing; sa is fully set.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = ignore as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

fn set_cloexec(fd: libc::c_int) {
    // SAFETY: fcntl on an fd we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
    }
}

/// The command line that starts the watchdog, for `leasehold`.
pub fn command_line(
    fds: [libc::c_int; 2],
    grace: Duration,
    deadline: Duration,
    command: &[OsString],
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        ARG.into(),
        fds[0].to_string().into(),
        fds[1].to_string().into(),
        grace.as_nanos().to_string().into(),
        deadline.as_nanos().to_string().into(),
        "--".into(),
    ];
    args.extend(command.iter().cloned());
    args
}

/// Whether `fd` is an open pipe.
fn is_pipe(fd: libc::c_int) -> bool {
    // SAFETY: fstat writes into a zeroed stat we own.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFIFO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(fd: libc::c_int, timeout_ms: libc::c_int) -> bool {
        let mut fds = [libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: a valid array of one pollfd.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, timeout_ms) == 1 }
    }

    /// The alarm is on the boot clock ([`now`]): set to now + 100 ms it is
    /// not readable before that time and is by it; set again, it forgets
    /// the expiry.
    #[test]
    fn the_alarm_fires_at_its_time_on_the_boot_clock() {
        let alarm = Alarm::new().expect("a timerfd on CLOCK_BOOTTIME");
        let fd = alarm.fd.as_raw_fd();
        let at = now() + Duration::from_millis(100);
        alarm.set(at);
        assert!(readable(fd, 5000), "the alarm did not fire within 5 s");
        assert!(now() >= at, "fired before its time on the boot clock");
        alarm.set(now() + Duration::from_secs(3600));
        assert!(!readable(fd, 0), "setting it again keeps an old expiry");
        alarm.set(now());
        assert!(readable(fd, 5000), "a time already passed does not fire");
    }

    /// `wait` ends at the deadline on the boot clock even when ppoll's own
    /// timeout, on `CLOCK_MONOTONIC`, would run far longer. It is handed a
    /// `now` an hour old: the gap a suspend opens between the boot clock
    /// and the monotonic one. Without the alarm it would wait the hour.
    #[test]
    fn wait_ends_at_the_deadline_on_the_boot_clock() {
        let (control_rx, control_tx) = crate::supervisor::pipe().unwrap();
        // Stands for the command's pidfd: open, never readable.
        let (command_rx, command_tx) = crate::supervisor::pipe().unwrap();
        let deadline = now() + Duration::from_millis(200);
        let stale = now().saturating_sub(Duration::from_secs(3600));
        assert!(
            deadline - stale > Duration::from_secs(60),
            "booted a minute ago?"
        );
        let mut dog = Watchdog {
            orders: Orders {
                pipe: File::from(control_rx),
                buf: Vec::new(),
            },
            report: std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/null")
                .unwrap(),
            grace: Duration::from_secs(1),
            deadline,
            pid: 0,
            pidfd: command_rx.as_raw_fd(),
            cgroup: None,
            terminal: None,
            status: None,
            stopping: None,
            kill_at: None,
            killed_at: None,
            parent_gone: false,
            childless: false,
            alarm: Alarm::new(),
        };
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
