//! The keeper: a small process that outlives `leasehold` and the watchdog
//! for one purpose, to kill the command's tree if both of them die.
//!
//! # Why
//! `leasehold` kills the tree when the watchdog dies, and the watchdog
//! kills it when `leasehold` dies; if both die together (`pkill -9
//! leasehold`, `killall -9 leasehold`, SIGKILL to `leasehold`'s process
//! group, the OOM killer taking one after the other), nobody was left to
//! do it: the command's direct child died of its parent-death signal, but
//! whatever it had started ran on without a lease, and once the lease ran
//! out another holder was let in beside it.
//!
//! # How
//! The watchdog starts the keeper before the command, by a double fork
//! (so that the keeper is neither its child, which would keep the
//! watchdog from ever finding itself childless, nor adopted by it as a
//! subreaper), in a session and process group of its own (a signal to
//! `leasehold`'s group does not reach it), with every descriptor but one
//! closed (it must not hold the report pipe, whose end of file tells
//! `leasehold` the watchdog is gone, nor the caller's stdout) and a name
//! without "leasehold" in it (`lh-keeper`, in `comm`; `lh-keeper
//! WATCHDOG_PID` on its command line), so that what is aimed at leasehold by name does not take it too.
//! It holds the read end of a pipe whose only write end the watchdog holds
//! (close-on-exec: the command never gets it). The watchdog writes
//! `group PGID` once the command runs, and `done` when the tree is gone;
//! then the keeper exits. End of file without `done` means the watchdog
//! died: the keeper kills the command's cgroup (`cgroup.kill`, which no
//! process of the tree can leave), or, without a cgroup, its process
//! group; waits up to [`KILL_WAIT`] for the cgroup to empty, removes it,
//! and exits.
//!
//! # What it does not cover
//! The keeper can be killed too (by its pid, or `pkill lh-keeper`); if it
//! dies with the other two, the tree is left to the next `leasehold run`
//! or `elect` on the machine in the same cgroup, whose watchdog kills every
//! `leasehold-PID` cgroup whose watchdog is dead before its own command
//! starts (see [`Cgroup::create`](crate::proctree::Cgroup::create)).
//! Without a cgroup, processes that left the command's process group are
//! not found (they were the watchdog's descendants, as a subreaper, and
//! the watchdog is gone).

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::proctree::{self, Cgroup};

/// How long the keeper waits for a killed cgroup to empty before it gives
/// up removing it.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// The keeper's name, in `ps` and `/proc/PID/comm`.
pub const NAME: &str = "lh-keeper";

/// The watchdog's end of the keeper's pipe.
#[derive(Debug)]
pub struct Keeper {
    pipe: File,
}

impl Keeper {
    /// Starts the keeper for a command about to run in `cgroup` (if any).
    /// Call while this process has one thread and before it is a child
    /// subreaper. `None` if the pipe or a fork failed (the run goes on
    /// without: as before the keeper existed).
    pub fn start(cgroup: Option<&Cgroup>) -> Option<Keeper> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: a valid two-int array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: both descriptors were just made and are owned here only.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let watchdog = std::process::id() as libc::pid_t;
        // SAFETY: this process has one thread (the caller's promise), so
        // the children are consistent copies and may run any code.
        match unsafe { libc::fork() } {
            -1 => None,
            0 => {
                // The middle process: a new session, then the keeper, then
                // gone, so the keeper is adopted by init (or the nearest
                // subreaper above the watchdog).
                drop(write);
                // SAFETY: plain calls in a single-threaded child.
                unsafe {
                    libc::setsid();
                    match libc::fork() {
                        0 => {
                            keep(read, cgroup, watchdog);
                            libc::_exit(0)
                        }
                        _ => libc::_exit(0),
                    }
                }
            }
            middle => {
                drop(read);
                let mut status = 0;
                // SAFETY: our own child; a valid out-pointer.
                unsafe { libc::waitpid(middle, &mut status, 0) };
                Some(Keeper {
                    pipe: File::from(write),
                })
            }
        }
    }

    /// Tells the keeper the command's process group.
    pub fn group(&mut self, pgid: libc::pid_t) {
        let _ = writeln!(self.pipe, "group {pgid}");
    }

    /// The tree is gone: the keeper exits without doing anything.
    pub fn done(mut self) {
        let _ = writeln!(self.pipe, "done");
    }
}

/// The keeper's life (see the module docs).
fn keep(pipe: OwnedFd, cgroup: Option<&Cgroup>, watchdog: libc::pid_t) {
    detach(pipe.as_raw_fd());
    crate::proctitle::set(&format!("{NAME} {watchdog}"));
    let mut group = None;
    for line in BufReader::new(File::from(pipe)).lines() {
        let Ok(line) = line else { break };
        match line.split_once(' ') {
            Some(("group", pgid)) => group = pgid.parse::<libc::pid_t>().ok(),
            _ if line == "done" => return,
            _ => {}
        }
    }
    // The watchdog is gone without saying the tree was.
    match cgroup {
        Some(c) => {
            c.kill_and_remove(KILL_WAIT);
        }
        None => {
            if let Some(pgid) = group {
                proctree::signal_group(pgid, libc::SIGKILL);
            }
        }
    }
}

/// Cuts the keeper loose from everything the watchdog had: every
/// descriptor but `keep` closed, stdin, stdout and stderr on /dev/null,
/// the root as its directory (it keeps no file system busy), default
/// signal dispositions, nothing blocked.
fn detach(keep: libc::c_int) {
    let open: Vec<libc::c_int> = std::fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    // SAFETY: plain calls on descriptors and signal dispositions of this
    // single-threaded process; closing a descriptor nothing else uses.
    unsafe {
        for fd in open {
            if fd > 2 && fd != keep {
                libc::close(fd);
            }
        }
        libc::chdir(c"/".as_ptr());
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
        for sig in super::signals::CAUGHT {
            libc::signal(sig, libc::SIG_DFL);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}
