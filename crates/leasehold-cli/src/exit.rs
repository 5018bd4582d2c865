//! How `leasehold` ends: the documented exit codes, and the message and
//! code for a failure.

/// Exit code when the lock was not obtained (held elsewhere, wait ran out).
pub const EXIT_NOT_OBTAINED: u8 = 75;
/// Exit code when the lease was lost while the command ran.
pub const EXIT_LOST: u8 = 76;
/// Exit code for usage and configuration errors (clap uses 2 as well).
pub const EXIT_USAGE: u8 = 2;
/// Exit code for store failures.
pub const EXIT_BACKEND: u8 = 1;
/// Exit code when there is no store at the URL (looking never creates one).
pub const EXIT_NO_STORE: u8 = 3;

/// Ended by a signal (SIGINT, SIGTERM, SIGHUP) before the command ran:
/// exit 128 + the signal's number.
#[derive(Debug)]
pub struct Interrupted(pub libc::c_int);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted (signal {}) while opening the store", self.0)
    }
}

impl std::error::Error for Interrupted {}

/// The error and its causes, each said once: a cause whose text its parent
/// already contains (as `Error::Backend` repeats its source) is skipped, so
/// messages never read "X: X".
pub fn error_chain(err: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
}

/// Maps a failure to the documented exit code.
pub fn exit_code_for(err: &anyhow::Error) -> u8 {
    if let Some(Interrupted(sig)) = err.downcast_ref::<Interrupted>() {
        return 128u8.saturating_add(*sig as u8);
    }
    match err.downcast_ref::<leasehold::Error>() {
        Some(leasehold::Error::InvalidInput { .. } | leasehold::Error::NotSupported(_)) => {
            EXIT_USAGE
        }
        Some(
            leasehold::Error::Held { .. }
            | leasehold::Error::TimedOut { .. }
            | leasehold::Error::Quarantined { .. },
        ) => EXIT_NOT_OBTAINED,
        Some(leasehold::Error::LeaseLost { .. }) => EXIT_LOST,
        Some(leasehold::Error::NoStore { .. }) => EXIT_NO_STORE,
        // A store in a protocol this build does not speak: as a store
        // failure (nothing was taken; the message says what to do).
        Some(leasehold::Error::UnsupportedProtocol { .. }) => EXIT_BACKEND,
        _ => EXIT_BACKEND,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_protocol_exits_1_naming_both_protocols() {
        let refused =
            leasehold::backend::protocol::check_protocol("postgres", Some("2")).unwrap_err();
        let err = anyhow::Error::from(refused).context("cannot open store postgres://h");
        assert_eq!(exit_code_for(&err), EXIT_BACKEND);
        let text = error_chain(&err);
        assert!(
            text.contains("protocol 2")
                && text.contains("speaks protocol 1")
                && text.contains("upgrade this process"),
            "{text}"
        );
    }

    #[test]
    fn causes_already_in_the_message_are_not_repeated() {
        let inner = leasehold::Error::backend("sqlite", "open", false, "cannot open /x: denied");
        let err = anyhow::Error::from(inner).context("cannot open store sqlite:/x");
        assert_eq!(
            error_chain(&err),
            "cannot open store sqlite:/x: sqlite backend failed during open: cannot open /x: denied"
        );
    }
}
