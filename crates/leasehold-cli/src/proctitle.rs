//! The command line this process shows in `ps` and `/proc/PID/cmdline`:
//! secrets blanked out of it, or all of it replaced.
//!
//! Linux reads a process's command line from its own memory, the argument
//! area the kernel laid out at exec (`arg_start`..`arg_end`, fields 48 and
//! 49 of `/proc/self/stat`), so writing into that area changes what every
//! other user of the machine can read. The area keeps its length: a secret
//! is overwritten byte for byte, a new title is padded with NULs. Written
//! by hand: the `proctitle` crate changes only the thread name (`comm`) on
//! Linux, which `ps` shows in place of the command line only when asked to.
//!
//! Rust's `std::env::args` reads the same memory on each call: what is
//! needed from it is taken first (`main`'s `ARGS`).

use std::ops::Range;

/// The argument area's addresses, from `/proc/self/stat`; `None` if they
/// cannot be read (not Linux, or no `/proc`).
fn arg_area() -> Option<Range<usize>> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // "pid (comm) state ...": comm may hold spaces and parentheses, so the
    // fields are counted from the last ')'; field 3 (state) is index 0.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(48 - 3);
    let start: usize = fields.next()?.parse().ok()?;
    let end: usize = fields.next()?.parse().ok()?;
    (start != 0 && end > start && end - start < 1 << 24).then_some(start..end)
}

/// Runs `f` on the argument area's bytes. Only while this process has one
/// thread, or none reads the arguments meanwhile.
fn with_area(f: impl FnOnce(&mut [u8])) -> bool {
    let Some(area) = arg_area() else {
        return false;
    };
    // SAFETY: the kernel says this range is this process's argument area:
    // mapped, writable (the initial stack), and referenced by nothing in
    // Rust but the raw `argv` pointers std reads on `args()`, which the
    // callers do not call concurrently.
    let bytes = unsafe { std::slice::from_raw_parts_mut(area.start as *mut u8, area.len()) };
    f(bytes);
    true
}

/// Overwrites every occurrence of each of `secrets` (3 bytes or longer) in
/// the command line with `*`s of the same length. False if the command
/// line could not be reached.
pub fn blank_out(secrets: &[String]) -> bool {
    with_area(|bytes| {
        for secret in secrets.iter().map(String::as_bytes) {
            if secret.len() < 3 || secret.contains(&0) {
                continue;
            }
            let mut i = 0;
            while i + secret.len() <= bytes.len() {
                if &bytes[i..i + secret.len()] == secret {
                    bytes[i..i + secret.len()].fill(b'*');
                    i += secret.len();
                } else {
                    i += 1;
                }
            }
        }
    })
}

/// Replaces the whole command line with `title` (cut to fit) and the
/// thread name with its first 15 bytes.
pub fn set(title: &str) {
    with_area(|bytes| {
        bytes.fill(0);
        let n = title.len().min(bytes.len().saturating_sub(1));
        bytes[..n].copy_from_slice(&title.as_bytes()[..n]);
    });
    let mut name = [0u8; 16];
    let n = title.len().min(15);
    name[..n].copy_from_slice(&title.as_bytes()[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The area found is this process's command line: its first argument
    /// is the test binary's path, as the kernel reports it.
    #[test]
    fn the_area_is_the_command_line() {
        let cmdline = std::fs::read("/proc/self/cmdline").unwrap();
        let mut seen = Vec::new();
        assert!(with_area(|bytes| seen = bytes.to_vec()));
        assert_eq!(seen.len(), cmdline.len());
        assert_eq!(seen, cmdline);
    }
}
