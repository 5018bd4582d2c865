//! Starting the command: in its own process group, in the watchdog's cgroup
//! (straight into it where the kernel can), dying with the watchdog.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;

use super::signals::with_sigttou_blocked;

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
pub fn spawn_into_cgroup(
    dir: &std::path::Path,
    command: &[OsString],
    watchdog: libc::pid_t,
    keeper: Option<libc::c_int>,
    foreground: bool,
) -> std::io::Result<Option<libc::pid_t>> {
    // Everything the child needs, made before the fork: it must not
    // allocate.
    let argv = Argv::new(command)?;
    let Some(fork) = fork_into(dir)? else {
        return Ok(None);
    };
    match fork {
        Forked::Child { report } => {
            // SAFETY: in the child; see `fork_into`.
            unsafe {
                let err = match in_child(watchdog, None, keeper, foreground) {
                    Ok(()) => exec(&argv),
                    Err(e) => e,
                };
                fail(report, err)
            }
        }
        Forked::Parent { pid, report } => exec_result(pid, report).map(Some),
    }
}

/// The command's argument vector as exec takes it.
struct Argv {
    _args: Vec<std::ffi::CString>,
    ptrs: Vec<*const libc::c_char>,
}

impl Argv {
    fn new(command: &[OsString]) -> std::io::Result<Argv> {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let to_c = |a: &OsString| {
            CString::new(a.as_bytes()).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "a NUL byte in the command",
                )
            })
        };
        let args: Vec<CString> = command.iter().map(to_c).collect::<std::io::Result<_>>()?;
        let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        Ok(Argv { _args: args, ptrs })
    }
}

/// Either side of [`fork_into`].
enum Forked {
    /// In the child, with the write end of the exec report pipe.
    Child { report: libc::c_int },
    /// In the parent, with the child and the read end of that pipe.
    Parent { pid: libc::pid_t, report: File },
}

/// Forks (clone3, `CLONE_INTO_CGROUP`) a child that starts in the cgroup
/// at `dir`, with a close-on-exec pipe on which the child reports an exec
/// failure (see [`fail`] and [`exec_result`]). `Ok(None)` when the kernel
/// cannot. The caller must have one thread; the child calls only
/// async-signal-safe functions unless the caller knows more.
fn fork_into(dir: &std::path::Path) -> std::io::Result<Option<Forked>> {
    let Ok(cgroup) = std::fs::File::open(dir) else {
        return Ok(None);
    };
    let mut pipe: [libc::c_int; 2] = [0; 2];
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
    // shared memory (a fork). The caller is single-threaded.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid == 0 {
        // SAFETY: the parent's end, in the child.
        unsafe { libc::close(read_end) };
        return Ok(Some(Forked::Child { report: write_end }));
    }
    // SAFETY: closing our copy of the child's end.
    unsafe { libc::close(write_end) };
    // SAFETY: the read end is ours; File closes it.
    let report = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(read_end) };
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
    Ok(Some(Forked::Parent {
        pid: pid as libc::pid_t,
        report,
    }))
}

/// In the child: an empty signal mask, SIGPIPE at its default, and exec
/// with a PATH search; the error if exec returns.
///
/// # Safety
/// Async-signal-safe calls only; `argv` was made before the fork.
unsafe fn exec(argv: &Argv) -> std::io::Error {
    // SAFETY: async-signal-safe calls with valid arguments.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::execvp(argv.ptrs[0], argv.ptrs.as_ptr());
    }
    std::io::Error::last_os_error()
}

/// In the child: reports `err` on the exec report pipe and exits 127.
///
/// # Safety
/// Async-signal-safe calls only.
unsafe fn fail(report: libc::c_int, err: std::io::Error) -> ! {
    let code = err.raw_os_error().unwrap_or(libc::EIO);
    // SAFETY: a valid buffer of four bytes; async-signal-safe calls.
    unsafe {
        libc::write(report, (&code as *const libc::c_int).cast(), 4);
        libc::_exit(127)
    }
}

/// In the parent: waits until the child `pid` has exec'd (the pipe closed
/// on exec) and returns it, or collects it and returns why it could not.
fn exec_result(pid: libc::pid_t, mut report: File) -> std::io::Result<libc::pid_t> {
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
        return Ok(pid);
    }
    // It could not start: collect it, report why.
    let mut status = 0;
    // SAFETY: our own child; a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    Err(std::io::Error::from_raw_os_error(i32::from_ne_bytes(code)))
}

/// The command's process, forked by a spare watchdog into the cgroup while
/// `leasehold` takes the lock, waiting to exec the command. Forking a copy
/// of this binary's process took a tenth of a millisecond or more between
/// the lock's grant and the command's start; the stub does it before the
/// grant. It is in its own process group, told to the keeper, and dies with
/// the watchdog (as [`in_child`] makes the command's process); it does
/// nothing until [`go`](Stub::go), and exits at end of file on its orders
/// without running anything.
#[derive(Debug)]
pub struct Stub {
    pid: libc::pid_t,
    /// Lines `env NAME VALUE` and then `go 0|1` (1: take the terminal).
    orders: File,
    report: File,
}

impl Stub {
    /// Forks the stub for `command` into the cgroup at `dir`. `None` where
    /// the kernel cannot fork straight into a cgroup, or anything failed
    /// (the watchdog then spawns the command when it is due, as without a
    /// stub). Call while this process has one thread.
    pub fn fork(
        dir: &std::path::Path,
        command: &[OsString],
        watchdog: libc::pid_t,
        keeper: Option<libc::c_int>,
    ) -> Option<Stub> {
        let argv = Argv::new(command).ok()?;
        let (orders_rx, orders_tx) = crate::fd::pipe().ok()?;
        match fork_into(dir).ok()?? {
            Forked::Child { report } => {
                drop(orders_tx);
                // A fork of a single-threaded process: it may allocate.
                let err = match in_child(watchdog, None, keeper, false) {
                    Ok(()) => match Stub::wait_for_go(orders_rx) {
                        // SAFETY: plain calls on our own terminal.
                        Some(foreground) => unsafe {
                            if foreground {
                                with_sigttou_blocked(|| libc::tcsetpgrp(0, libc::getpid()));
                            }
                            exec(&argv)
                        },
                        // SAFETY: exits the stub, which ran nothing.
                        None => unsafe { libc::_exit(0) },
                    },
                    Err(e) => e,
                };
                // SAFETY: in the child.
                unsafe { fail(report, err) }
            }
            Forked::Parent { pid, report } => {
                drop(orders_rx);
                Some(Stub {
                    pid,
                    orders: File::from(orders_tx),
                    report,
                })
            }
        }
    }

    /// In the stub: applies `env` lines until `go`, and says whether to
    /// take the terminal; `None` at end of file (nothing to run).
    fn wait_for_go(orders: std::os::fd::OwnedFd) -> Option<bool> {
        use std::io::BufRead;
        for line in std::io::BufReader::new(File::from(orders)).lines() {
            let line = line.ok()?;
            let mut words = line.splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                // One thread: nothing reads the environment concurrently.
                (Some("env"), Some(name), Some(value)) => std::env::set_var(name, value),
                (Some("go"), Some(foreground), None) => return Some(foreground == "1"),
                _ => {}
            }
        }
        None
    }

    /// Passes a variable of the command's environment on to the stub.
    pub fn env(&mut self, name: &str, value: &str) {
        let _ = self
            .orders
            .write_all(format!("env {name} {value}\n").as_bytes());
    }

    /// Execs the command in the stub: its pid once it runs, or why it could
    /// not start. `Ok(None)` if the stub is gone (then it is collected, and
    /// the caller spawns the command itself).
    pub fn go(mut self, foreground: bool) -> std::io::Result<Option<libc::pid_t>> {
        let go = format!("go {}\n", u8::from(foreground));
        if self.orders.write_all(go.as_bytes()).is_err() {
            self.discard();
            return Ok(None);
        }
        exec_result(self.pid, self.report).map(Some)
    }

    /// Ends the stub without running anything, and collects it.
    pub fn discard(self) {
        drop(self.orders);
        // SAFETY: our own child; SIGKILL in case it does not read its
        // orders (it ran nothing, so nothing is lost).
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut status = 0;
            libc::waitpid(self.pid, &mut status, 0);
        }
    }
}

/// In the forked command, before exec: a process group of its own (made the
/// terminal's foreground group if `leasehold` had the terminal), the
/// watchdog's cgroup, its group told to the keeper (whose pipe is
/// `keeper`), and death with the watchdog.
pub fn in_child(
    watchdog: libc::pid_t,
    procs: Option<libc::c_int>,
    keeper: Option<libc::c_int>,
    foreground: bool,
) -> std::io::Result<()> {
    // SAFETY: async-signal-safe syscalls with valid arguments.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(fd) = keeper {
            super::keeper::tell_group(fd);
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
