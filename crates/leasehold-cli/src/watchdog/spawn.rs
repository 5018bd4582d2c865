//! Starting the command: in its own process group, in the watchdog's cgroup
//! (straight into it where the kernel can), dying with the watchdog.

use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
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
            let err = match in_child(watchdog, None, keeper, foreground) {
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
