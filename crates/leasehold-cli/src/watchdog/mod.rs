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
//! and the report pipe, the other way. The spare makes the command's cgroup,
//! starts the [keeper] and forks the command's process into the cgroup (a
//! [`Stub`], which waits to exec it) at once, while `leasehold` takes the
//! lock; then it waits for lines
//! `env NAME VALUE` (variables for the command, such as its fencing token)
//! and `start DEADLINE_NS GRACE_NS`, sent once the lease is held; end of file
//! before `start` (the lock was not obtained) ends it quietly, the stub
//! ended and collected, the keeper told `done` and the cgroup removed. The
//! `env` lines are passed on to the stub, and `start` has it exec the
//! command. Forking
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
//! Every time above is on `CLOCK_BOOTTIME` ([`now`](protocol::now)), which counts the time
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
//! Tested: `alarm::tests::the_alarm_fires_at_its_time_on_the_boot_clock` (the
//! alarm is on the boot clock) and `watch::tests::wait_ends_at_the_deadline_on_the_boot_clock`
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
//! # When `leasehold` and the watchdog both die
//! Before the command, the watchdog starts a [keeper](keeper), a detached
//! process that kills the command's cgroup (or process group) if the
//! watchdog dies without saying the tree is gone; and every watchdog, as it
//! makes its cgroup, kills the trees left in cgroups of dead watchdogs
//! beside it ([`Cgroup::create`]), for when the keeper was killed too.
//!
//! # What can escape
//! * If the watchdog itself is killed with SIGKILL, the command (its direct
//!   child) dies with it (`PR_SET_PDEATHSIG`), and `leasehold` and the
//!   keeper kill the process group and the cgroup; descendants that left
//!   both (possible only without a cgroup) survive.
//! * If the keeper is killed with the other two, the tree runs on until
//!   the next `run` or `elect` beside it sweeps it (never, without a
//!   cgroup).
//! * If both `leasehold` and the watchdog are frozen (SIGSTOP to
//!   `leasehold`'s whole process group, or the whole machine frozen or
//!   suspended), nobody acts until they resume; on resume the watchdog acts
//!   at once on a deadline that passed meanwhile (see above). A frozen
//!   machine freezes the command too, and the fencing token is what
//!   protects the resource then.
//! * A process stuck in uninterruptible sleep ignores SIGKILL until the
//!   kernel lets it go; the watchdog then reports it as left, and `leasehold`
//!   says so.

mod alarm;
mod keeper;
mod orders;
mod protocol;
mod signals;
mod spawn;
mod watch;

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::ExitCode;
use std::time::Duration;

use crate::exit::EXIT_USAGE;
use crate::fd::{is_pipe, pipe, set_cloexec};
use crate::output::say;
use crate::proctree::Cgroup;
use keeper::Keeper;
use orders::Orders;
pub use protocol::{command_line, Stop, ARG};
use signals::catch_stop_signals;
use spawn::Stub;
use watch::{serve, Made};

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
        return ExitCode::from(EXIT_USAGE);
    };
    // SAFETY: `leasehold` passed us these two pipe ends (checked to be
    // pipes); nothing else in this process owns them. Close-on-exec keeps
    // them from the command.
    let (control, report) =
        unsafe { (File::from_raw_fd(control_fd), File::from_raw_fd(report_fd)) };
    for fd in [control_fd, report_fd] {
        set_cloexec(fd);
    }
    let orders = Orders::new(control);
    let grace = Duration::from_nanos(grace);
    let cgroup = Cgroup::create(&std::process::id().to_string());
    // Before this process is a subreaper (which would adopt it), and
    // before the command exists.
    let keeper = Keeper::start(cgroup.as_ref());
    serve(
        orders,
        report,
        grace,
        Duration::from_nanos(deadline),
        command,
        Made {
            cgroup,
            keeper,
            stub: None,
        },
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
    let (control_rx, control_tx) = pipe().ok()?;
    let (report_rx, report_tx) = pipe().ok()?;
    // SAFETY: the caller guarantees one thread, so the child is a full
    // copy of a consistent process and may do anything the parent could.
    match unsafe { libc::fork() } {
        -1 => None,
        0 => {
            drop((control_tx, report_rx));
            spare(control_rx, report_tx, command.to_vec());
            // Nothing buffered (its pipes and stderr are written directly)
            // and nothing else to run: `_exit` rather than `exit`, whose C
            // library handlers and library destructors `leasehold` waits
            // for at the end of every run (see `exit_now` in main.rs).
            // SAFETY: ends this single-threaded child at once.
            unsafe { libc::_exit(0) }
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
    // The keeper too, for the same reason: its double fork took a few
    // tenths of a millisecond between the lock's grant and the command's
    // start. Told `done` before the cgroup goes if the command does not run.
    let keeper = Keeper::start(cgroup.as_ref());
    // And the command's process, waiting to exec (see `Stub`).
    let mut stub = cgroup.as_ref().and_then(|c| {
        Stub::fork(
            c.dir(),
            &command,
            std::process::id() as libc::pid_t,
            keeper.as_ref().map(Keeper::fd),
        )
    });
    let unused = |cgroup: Option<Cgroup>, keeper: Option<Keeper>, stub: Option<Stub>| {
        if let Some(s) = stub {
            s.discard();
        }
        if let Some(k) = keeper {
            k.done();
        }
        if let Some(c) = cgroup {
            c.remove();
        }
    };
    let mut orders = Orders::new(File::from(control));
    let (deadline, grace) = loop {
        // End of file: `leasehold` ends without running the command.
        let Some(line) = orders.next_line() else {
            return unused(cgroup, keeper, stub);
        };
        let mut words = line.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("env"), Some(name), Some(value)) => {
                // One thread: nothing reads the environment concurrently.
                std::env::set_var(name, value);
                if let Some(s) = &mut stub {
                    s.env(name, value);
                }
            }
            (Some("start"), Some(deadline), Some(grace)) => {
                match (deadline.parse(), grace.parse()) {
                    (Ok(d), Ok(g)) => break (Duration::from_nanos(d), Duration::from_nanos(g)),
                    _ => return unused(cgroup, keeper, stub),
                }
            }
            _ => {}
        }
    };
    serve(
        orders,
        File::from(report),
        grace,
        deadline,
        command,
        Made {
            cgroup,
            keeper,
            stub,
        },
    );
}
