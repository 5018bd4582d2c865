//! The watchdog's side of its protocol that `leasehold` shares: how it is
//! started, why it stops a tree, and the clock of every deadline.

use std::ffi::OsString;
use std::time::Duration;

/// The argument that selects the watchdog instead of the normal CLI.
pub const ARG: &str = "__watchdog";

/// The clock every deadline is on: shared by all processes on the machine.
pub fn now() -> Duration {
    use leasehold::backend::Clock;
    leasehold::backend::SystemClock.now()
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
    /// `leasehold` was asked to stop (SIGINT or SIGTERM, forwarded): the
    /// tree gets the grace to end, then SIGKILL.
    Interrupted,
}

impl Stop {
    pub fn word(self) -> &'static str {
        match self {
            Stop::Deadline => "deadline",
            Stop::Lost => "lost",
            Stop::Leftovers => "leftovers",
            Stop::Orphaned => "orphaned",
            Stop::Interrupted => "interrupted",
        }
    }

    pub fn from_word(w: &str) -> Option<Stop> {
        [
            Stop::Deadline,
            Stop::Lost,
            Stop::Leftovers,
            Stop::Orphaned,
            Stop::Interrupted,
        ]
        .into_iter()
        .find(|s| s.word() == w)
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
