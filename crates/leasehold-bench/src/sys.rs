//! Clocks and process figures read from the kernel: the monotonic clock that
//! every process on the machine shares (so timestamps taken in different
//! processes compare), CPU time and resident memory.

use std::path::PathBuf;
use std::time::Duration;

/// `CLOCK_MONOTONIC` in nanoseconds: the same clock in every process of the
/// machine (Python's `time.monotonic_ns()` reads it too).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps until the monotonic clock reads `at_ns` (at once if it has).
pub async fn sleep_until_ns(at_ns: u64) {
    let now = mono_ns();
    if at_ns > now {
        tokio::time::sleep(Duration::from_nanos(at_ns - now)).await;
    }
}

/// User + system CPU time of this process, in nanoseconds.
pub fn cpu_ns() -> u64 {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Resident set size of this process, in bytes.
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    pages * page
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
pub fn port_answers(port: u16) -> bool {
    addr_answers(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
}

/// Whether something accepts TCP connections at `http://HOST:PORT`'s
/// address.
pub fn url_answers(url: &str) -> bool {
    use std::net::ToSocketAddrs;
    let authority = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split(['/', '?'])
        .next()
        .unwrap_or("");
    authority
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .is_some_and(addr_answers)
}

fn addr_answers(addr: std::net::SocketAddr) -> bool {
    std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
}

/// Where the `leasehold` CLI binary is: beside this one.
pub fn sibling_binary(name: &str) -> Option<PathBuf> {
    let p = std::env::current_exe().ok()?.parent()?.join(name);
    p.exists().then_some(p)
}
