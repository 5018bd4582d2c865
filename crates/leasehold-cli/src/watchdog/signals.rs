//! The watchdog's signal dispositions and masks.

/// Runs `f` with SIGTTOU blocked (async-signal-safe).
///
/// # Safety
/// As `f`'s: the caller may be a forked child, where only async-signal-safe
/// calls are allowed.
pub unsafe fn with_sigttou_blocked(f: impl FnOnce() -> libc::c_int) {
    // SAFETY: sigset_t is plain data (zeroed is a valid value, then
    // initialized by sigemptyset); the mask calls only read and write the
    // two sets owned here, and are async-signal-safe.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

extern "C" fn ignore(_: libc::c_int) {}

/// The signals [`catch_stop_signals`] catches (the keeper puts them back
/// to their defaults).
pub const CAUGHT: [libc::c_int; 5] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGCHLD,
];

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT do not end the watchdog: `leasehold`
/// decides what reaches the command (a terminal's Ctrl-C reaches both). A
/// handler rather than SIG_IGN, because handlers are reset by exec and the
/// command must get default dispositions.
///
/// SIGCHLD gets the same handler and is blocked except while the watchdog
/// waits in `ppoll`, so a child that stops (Ctrl-Z) or exits always wakes
/// it, whenever the signal comes.
pub fn catch_stop_signals() {
    // SAFETY: a valid, fully initialised signal set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    for sig in CAUGHT {
        // SAFETY: installs a handler that does nothing; sa is fully set.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = ignore as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}
