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
//! (close-on-exec: the command never gets it). The command's forked
//! child writes `group PGID` before it execs the command (the watchdog
//! again after), and the watchdog `done` when the tree is gone; then the
//! keeper exits. End of file without `done` means the watchdog
//! died; and `leasehold`'s exit (a pidfd on the watchdog's parent, opened
//! by the watchdog before the fork)
//! before `done` means the watchdog did not see it (frozen by SIGSTOP): the
//! watchdog writes `done` before it tells `leasehold` the tree is gone, so
//! a `leasehold` that ends normally has always let the keeper know first.
//! In either case the keeper kills the command's cgroup (`cgroup.kill`, which no
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
use std::io::Write;
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
        let mut fds: [libc::c_int; 2] = [0; 2];
        // SAFETY: a valid two-int array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: both descriptors were just made and are owned here only.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let watchdog = std::process::id() as libc::pid_t;
        // `leasehold`, the watchdog's parent (1 or a subreaper if it is
        // already gone: then the watchdog kills the tree itself), as a
        // pidfd opened here, before the fork, not by the keeper: a keeper
        // scheduled late on a busy machine opened it after `leasehold` had
        // been killed, found no such process, and then waited only for
        // the watchdog's end of the pipe, which a frozen watchdog keeps
        // open (the tree ran on; seen with a delay injected into the
        // keeper's pidfd_open).
        // SAFETY: plain query.
        let parent = unsafe { libc::getppid() };
        let leasehold = (parent > 1).then(|| pidfd(parent)).flatten();
        // SAFETY: plain query. A parent gone between the two calls (and its
        // pid taken by another process) is not watched.
        let leasehold = leasehold.filter(|_| unsafe { libc::getppid() } == parent);
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
                            keep(read, cgroup, watchdog, leasehold);
                            libc::_exit(0)
                        }
                        _ => libc::_exit(0),
                    }
                }
            }
            middle => {
                drop(read);
                drop(leasehold);
                let mut status = 0;
                // SAFETY: our own child; a valid out-pointer.
                unsafe { libc::waitpid(middle, &mut status, 0) };
                Some(Keeper {
                    pipe: File::from(write),
                })
            }
        }
    }

    /// Tells the keeper the command's process group. The command's child
    /// has already said it before exec ([`tell_group`]); this is in case
    /// that write failed.
    pub fn group(&mut self, pgid: libc::pid_t) {
        // One write (writeln! makes two): the line stays whole beside
        // the child's.
        let _ = self.pipe.write_all(format!("group {pgid}\n").as_bytes());
    }

    /// The watchdog's end of the pipe, for [`tell_group`] in the command's
    /// forked child (close-on-exec: the command itself never has it).
    pub fn fd(&self) -> libc::c_int {
        self.pipe.as_raw_fd()
    }

    /// The tree is gone: the keeper exits without doing anything.
    pub fn done(mut self) {
        let _ = writeln!(self.pipe, "done");
    }
}

/// The keeper's life (see the module docs).
/// `leasehold` is its exit, as a descriptor poll can wait on (none on a
/// kernel without pidfd_open, before 5.3: then only the watchdog's end is
/// watched).
fn keep(pipe: OwnedFd, cgroup: Option<&Cgroup>, watchdog: libc::pid_t, leasehold: Option<OwnedFd>) {
    let kept = [
        pipe.as_raw_fd(),
        leasehold.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
    ];
    detach(&kept);
    crate::proctitle::set(&format!("{NAME} {watchdog}"));
    let mut group = None;
    let mut pending = Vec::new();
    let mut chunk = [0u8; 256];
    loop {
        let mut fds = [
            libc::pollfd {
                fd: pipe.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                // poll ignores a negative descriptor.
                fd: leasehold.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: a valid array of two pollfds.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        if fds[0].revents != 0 {
            // What the watchdog wrote comes first: its `done` is written
            // before it tells `leasehold` the tree is gone.
            // SAFETY: reading into a buffer of the given length.
            let n = unsafe { libc::read(pipe.as_raw_fd(), chunk.as_mut_ptr().cast(), chunk.len()) };
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                // The watchdog is gone.
                break;
            }
            pending.extend_from_slice(&chunk[..n as usize]);
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line[..end]).into_owned();
                match line.split_once(' ') {
                    Some(("group", pgid)) => group = pgid.parse::<libc::pid_t>().ok(),
                    _ if line == "done" => return,
                    _ => {}
                }
            }
            continue;
        }
        if fds[1].revents != 0 {
            // `leasehold` is gone and the watchdog has not said the tree
            // is: the watchdog would kill the tree now, unless it is
            // frozen (SIGSTOP), so the keeper does it.
            break;
        }
    }
    // The watchdog, or `leasehold`, is gone without the watchdog saying
    // the tree was.
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

/// A descriptor that becomes readable when process `pid` exits.
fn pidfd(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags, and returns a new
    // descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a descriptor just made, owned here only.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// In the command's forked child, before exec: writes `group PID` (its
/// own process group, just made) to the keeper's pipe `fd`, so that the
/// keeper knows the group before the command can start anything. Told by
/// the watchdog after the fork only, a watchdog frozen (SIGSTOP) in
/// between left the keeper without a group to kill.
///
/// Async-signal-safe: no allocation, only `getpid`, `signal` and `write`.
/// SIGPIPE is ignored around the write (a keeper gone must not kill the
/// command before it starts).
pub fn tell_group(fd: libc::c_int) {
    let mut line = [0u8; 32];
    line[..6].copy_from_slice(b"group ");
    // SAFETY: plain query.
    let mut pid = unsafe { libc::getpid() } as u32;
    let mut digits = [0u8; 10];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (pid % 10) as u8;
        n += 1;
        pid /= 10;
        if pid == 0 {
            break;
        }
    }
    for i in 0..n {
        line[6 + i] = digits[n - 1 - i];
    }
    line[6 + n] = b'\n';
    // SAFETY: async-signal-safe calls; a valid buffer of the given length.
    unsafe {
        let old = libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        libc::write(fd, line.as_ptr().cast(), 7 + n);
        libc::signal(libc::SIGPIPE, old);
    }
}

/// Cuts the keeper loose from everything the watchdog had: every
/// descriptor but those in `keep` closed, stdin, stdout and stderr on /dev/null,
/// the root as its directory (it keeps no file system busy), default
/// signal dispositions, nothing blocked.
fn detach(keep: &[libc::c_int]) {
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
            if fd > 2 && !keep.contains(&fd) {
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
