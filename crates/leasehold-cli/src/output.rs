//! Writing to the terminal: results on stdout that fail cleanly (a closed
//! pipe ends the process as SIGPIPE would, a full disk is an error, neither
//! panics), messages on stderr that never panic, text from the store made
//! safe to print, and colour only where it belongs.

use std::fmt::{self, Display};
use std::io::{IsTerminal, Write};

/// Writes a message line to stderr, ignoring failures (there is nowhere
/// left to report them; `eprintln!` would panic instead).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::say_line(format_args!($($arg)*))
    };
}
pub(crate) use say;

pub fn say_line(args: fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "leasehold: {args}");
    let _ = err.flush();
}

/// Writing the result to stdout failed: the reader went away (a closed
/// pipe) or the output cannot be written (a full disk).
#[derive(Debug)]
pub struct OutputError(pub std::io::Error);

impl Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot write the output: {}", self.0)
    }
}

impl std::error::Error for OutputError {}

impl OutputError {
    /// Whether the reader closed the pipe (`leasehold list | head -1`).
    pub fn is_broken_pipe(&self) -> bool {
        self.0.kind() == std::io::ErrorKind::BrokenPipe
    }
}

/// Writes `text` to stdout and flushes it.
///
/// # Errors
/// [`OutputError`] if stdout cannot be written.
pub fn print(text: &str) -> Result<(), OutputError> {
    print_bytes(text.as_bytes())
}

/// As [`print`], for bytes.
///
/// # Errors
/// [`OutputError`] if stdout cannot be written.
pub fn print_bytes(bytes: &[u8]) -> Result<(), OutputError> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(OutputError)
}

/// Ends the process the way a Unix tool whose reader went away ends: killed
/// by SIGPIPE (Rust ignores SIGPIPE, so the write failed with EPIPE instead;
/// restore the default action and raise it). Nothing is printed.
pub fn die_of_sigpipe() -> ! {
    // SAFETY: plain signal calls with valid arguments; nothing else runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // Not reached unless SIGPIPE is blocked: exit with the code a shell
    // would report for it.
    std::process::exit(128 + libc::SIGPIPE)
}

/// `text` with every control character (escape sequences, carriage
/// returns, newlines, C1 controls) shown escaped, as `\u{1b}`, so that a
/// holder's owner label or data cannot move the cursor, retitle the
/// terminal or fake output lines. For human output only; JSON escapes them
/// itself.
pub fn clean(text: impl Display) -> String {
    let text = text.to_string();
    if !text.chars().any(char::is_control) {
        return text;
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Whether to colour what goes to stderr: only to a terminal, and never
/// when `NO_COLOR` is set to anything non-empty (<https://no-color.org>).
pub fn colour_stderr() -> bool {
    colour_allowed(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

fn colour_allowed(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(clean("vm-7"), "vm-7");
        assert_eq!(clean("a\x1b]0;pwned\x07b"), "a\\u{1b}]0;pwned\\u{7}b");
        assert_eq!(clean("x\r\ny\u{9b}"), "x\\r\\ny\\u{9b}");
        assert_eq!(clean("ümlaut ok"), "ümlaut ok");
    }

    #[test]
    fn colour_only_to_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(colour_allowed(true, None));
        assert!(colour_allowed(true, Some(OsStr::new(""))));
        assert!(!colour_allowed(true, Some(OsStr::new("1"))));
        assert!(!colour_allowed(false, None));
    }
}
