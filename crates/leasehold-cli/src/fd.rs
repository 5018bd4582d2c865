//! The file descriptors `leasehold` and the watchdog talk through: pipes
//! and their flags.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// A pipe whose ends are close-on-exec and numbered 10 or above.
pub fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [RawFd; 2] = [0; 2];
    // SAFETY: `fds` is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let high = |fd: RawFd| -> std::io::Result<OwnedFd> {
        // SAFETY: `fd` is ours; the duplicate is too, and the original is
        // closed exactly once here.
        unsafe {
            let dup = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10);
            libc::close(fd);
            if dup < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(OwnedFd::from_raw_fd(dup))
        }
    };
    Ok((high(fds[0])?, high(fds[1])?))
}

/// Makes reads and writes on `fd` return at once instead of blocking.
pub fn set_nonblocking(fd: RawFd) {
    add_flag(fd, libc::F_GETFL, libc::F_SETFL, libc::O_NONBLOCK);
}

/// Closes `fd` on exec.
pub fn set_cloexec(fd: RawFd) {
    add_flag(fd, libc::F_GETFD, libc::F_SETFD, libc::FD_CLOEXEC);
}

/// Adds `flag` to the flags `get` reads and `set` writes.
fn add_flag(fd: RawFd, get: libc::c_int, set: libc::c_int, flag: libc::c_int) {
    // SAFETY: fcntl on an fd we own.
    unsafe {
        let flags = libc::fcntl(fd, get);
        libc::fcntl(fd, set, flags | flag);
    }
}

/// Whether `fd` is an open pipe.
pub fn is_pipe(fd: RawFd) -> bool {
    // SAFETY: fstat writes into a zeroed stat we own.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFIFO
    }
}
