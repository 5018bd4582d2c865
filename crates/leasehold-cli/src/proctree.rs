//! Finding and signalling every process a command started: its process
//! group, every descendant of the watchdog (which is a child subreaper, so
//! orphans of the command's tree stay its descendants), and, where the
//! machine lets us create one, a cgroup v2 of its own.
//!
//! Why by hand: the only facts needed from `/proc` are each process's parent
//! (one field of `/proc/PID/stat`) and the cgroup mount point (one line of
//! `/proc/self/mountinfo`); a `/proc` crate would bring a large API for those
//! two reads.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Sends `sig` to process `pid`; false if there was no such process.
pub fn signal(pid: libc::pid_t, sig: libc::c_int) -> bool {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Sends `sig` to every member of process group `pgid`; false if the group
/// has no member left.
pub fn signal_group(pgid: libc::pid_t, sig: libc::c_int) -> bool {
    pgid > 1 && signal(-pgid, sig)
}

/// A pidfd for `pid` (Linux 5.3+): readable once the process has exited.
/// `None` where the kernel lacks pidfd_open.
pub fn pidfd(pid: libc::pid_t) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open has no memory-safety preconditions; it returns a
    // new descriptor that nothing else owns, or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int;
    // SAFETY: `fd` is a valid descriptor owned by no one else.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Whether process `pid` exists and has not exited: a zombie (exited, not
/// yet reaped: a killed watchdog waits for init to reap it, which can take
/// a while) is not running.
fn running(pid: libc::pid_t) -> bool {
    if !signal(pid, 0) {
        return false;
    }
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // "pid (comm) STATE ...": the state follows the last ')'.
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .is_none_or(|state| state != "Z")
}

/// The parent of each live process, from `/proc/*/stat`.
fn parents() -> HashMap<libc::pid_t, libc::pid_t> {
    let mut map = HashMap::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return map;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses,
        // so the fields are counted from the last ')'.
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if let Some(ppid) = rest
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<libc::pid_t>().ok())
        {
            map.insert(pid, ppid);
        }
    }
    map
}

/// Every live descendant of `root` (not `root` itself).
pub fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    let parents = parents();
    let mut children: HashMap<libc::pid_t, Vec<libc::pid_t>> = HashMap::new();
    for (&pid, &ppid) in &parents {
        children.entry(ppid).or_default().push(pid);
    }
    let mut found = Vec::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        if let Some(kids) = children.get(&p) {
            for &k in kids {
                found.push(k);
                stack.push(k);
            }
        }
    }
    found.sort_unstable();
    found
}

/// A cgroup v2 made for one command: every process the command starts stays
/// in it (a process cannot leave a cgroup without write access to another
/// one), and `cgroup.kill` kills them all at once.
#[derive(Debug, Clone)]
pub struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    /// Creates `leasehold-NAME` under this process's own cgroup, if the
    /// machine has a writable cgroup v2 hierarchy with `cgroup.kill`
    /// (Linux 5.14+). `None` otherwise: the caller does without.
    pub fn create(name: &str) -> Option<Cgroup> {
        let mount = cgroup2_mount()?;
        let own = fs::read_to_string("/proc/self/cgroup").ok()?;
        let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
        let parent = mount.join(path.trim_start_matches('/'));
        remove_stale(&parent);
        let dir = parent.join(format!("leasehold-{name}"));
        fs::create_dir(&dir).ok()?;
        let cgroup = Cgroup { dir };
        if !cgroup.dir.join("cgroup.kill").exists() {
            cgroup.remove();
            return None;
        }
        Some(cgroup)
    }

    /// Reopens a cgroup by its directory (as reported by the watchdog).
    pub fn at(dir: impl Into<PathBuf>) -> Cgroup {
        Cgroup { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `cgroup.procs`, opened for the child to write "0" into before exec
    /// (which moves the writer into the cgroup).
    pub fn procs_file(&self) -> std::io::Result<fs::File> {
        fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.procs"))
    }

    /// The processes in the cgroup.
    pub fn members(&self) -> Vec<libc::pid_t> {
        fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// SIGKILL to every process in the cgroup, atomically with respect to
    /// forks.
    pub fn kill(&self) -> bool {
        fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.kill"))
            .and_then(|mut f| f.write_all(b"1"))
            .is_ok()
    }

    /// Removes the cgroup (only possible once it is empty).
    pub fn remove(&self) {
        let _ = fs::remove_dir(&self.dir);
    }

    /// Kills every process in the cgroup, again until none is left or
    /// `wait` has passed (a process forked as the kill went out, one still
    /// exiting), then removes the cgroup. False if processes were left.
    pub fn kill_and_remove(&self, wait: std::time::Duration) -> bool {
        let started = std::time::Instant::now();
        self.kill();
        while !self.members().is_empty() && started.elapsed() < wait {
            std::thread::sleep(std::time::Duration::from_millis(10));
            self.kill();
        }
        self.remove();
        self.members().is_empty()
    }
}

/// Removes what watchdogs killed before they could clean up left behind
/// (`leasehold-PID` with PID, the watchdog, no longer running): an empty
/// cgroup is removed; one that still has processes holds a command's tree
/// that outlived its watchdog, its `leasehold` and its keeper (all three
/// killed), which runs without a lease and must not run beside the command
/// about to start: it is killed first, and said so.
fn remove_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("leasehold-"))
            .and_then(|p| p.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if running(pid) || fs::remove_dir(entry.path()).is_ok() {
            continue;
        }
        let orphan = Cgroup::at(entry.path());
        let members = orphan.members();
        if members.is_empty() {
            continue;
        }
        orphan.kill_and_remove(STALE_KILL_WAIT);
        crate::output::say!(
            "killed {} process(es) left running by a `leasehold` run whose watchdog was killed ({}; pids {})",
            members.len(),
            entry.path().display(),
            members
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
}

/// How long a stale cgroup's killed processes are waited for.
const STALE_KILL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup` on unified
/// systems, `/sys/fs/cgroup/unified` on hybrid ones).
fn cgroup2_mount() -> Option<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        // "id parent major:minor root mountpoint options ... - fstype src opts"
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        left.split_whitespace().nth(4).map(PathBuf::from)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_grandchildren_and_not_itself() {
        use std::io::BufRead;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30 & echo forked; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let me = std::process::id() as libc::pid_t;
        let pid = child.id() as libc::pid_t;
        // Both sleeps exist once sh says it forked them.
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let found = descendants(pid);
        assert_eq!(found.len(), 2, "{found:?}");
        let mine = descendants(me);
        assert!(mine.contains(&pid) && found.iter().all(|p| mine.contains(p)));
        assert!(!mine.contains(&me));
        signal(pid, libc::SIGKILL);
        for p in found {
            signal(p, libc::SIGKILL);
        }
        child.wait().unwrap();
    }
}
