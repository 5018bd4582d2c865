//! Same-machine wake-ups: a waiter in another process learns of a release
//! at once instead of at its next poll.
//!
//! Beside the database `DB` lies a directory `DB-wake` of small empty files,
//! one per bucket of keys (a key's bucket is a hash of it, so a release wakes
//! only waiters on keys of its bucket, not every waiter on the database). A
//! release or break opens the key's bucket file for writing and closes it;
//! a waiter watches the directory with inotify for files closed after
//! writing and wakes when one of its keys' buckets is. The directory is made
//! by the first waiter: while it does not exist no one watches, and a
//! release costs one failed `open`. Files are never deleted (at most
//! [`BUCKETS`] of them).
//!
//! A hint only, as [`Backend::watch_release`](crate::Backend::watch_release)
//! allows: a waiter that misses one (a full inotify queue, a directory it
//! cannot write, another machine sharing the file over a network file
//! system) finds the key free at its next poll.

use std::path::{Path, PathBuf};

use crate::backend::ReleaseWatch;
use crate::key::Key;

/// How many bucket files the directory holds at most.
const BUCKETS: u32 = 256;

/// The wake-up directory of one database.
#[derive(Debug)]
pub(super) struct Wake {
    dir: PathBuf,
}

impl Wake {
    /// The directory for the database at `db`: beside the file it names,
    /// symbolic links resolved, so that processes reaching one file by
    /// different paths meet in one directory.
    pub(super) fn new(db: &Path) -> Wake {
        let real = std::fs::canonicalize(db).unwrap_or_else(|_| db.to_path_buf());
        let mut dir = real.into_os_string();
        dir.push("-wake");
        Wake { dir: dir.into() }
    }

    /// Tells waiters on `key` that it may have become free. Best effort:
    /// errors are ignored (the waiters poll).
    pub(super) fn notify(&self, key: &Key) {
        // Opening for writing and closing is the event (IN_CLOSE_WRITE); the
        // file stays empty. Fails at once when the directory does not exist.
        let path = self.dir.join(bucket(key));
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path);
    }

    /// A future that completes when one of `keys`' buckets is notified,
    /// registered before this returns; `None` when the watch cannot be set
    /// up (no inotify, a read-only directory).
    pub(super) fn watch(&self, keys: &[Key]) -> Option<ReleaseWatch> {
        watch(&self.dir, keys)
    }
}

#[cfg(target_os = "linux")]
fn watch(dir: &Path, keys: &[Key]) -> Option<ReleaseWatch> {
    use inotify::{Inotify, WatchMask};
    use std::ffi::OsString;

    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            tracing::debug!(dir = %dir.display(), error = %e, "no same-machine wake-ups");
            return None;
        }
    }
    let inotify = Inotify::init().ok()?;
    inotify.watches().add(dir, WatchMask::CLOSE_WRITE).ok()?;
    let mut stream = inotify.into_event_stream(vec![0u8; 4096]).ok()?;
    let names: Vec<OsString> = keys.iter().map(|k| OsString::from(bucket(k))).collect();
    Some(Box::pin(async move {
        loop {
            let next = std::future::poll_fn(|cx| {
                futures_core::Stream::poll_next(std::pin::Pin::new(&mut stream), cx)
            })
            .await;
            match next {
                Some(Ok(event)) => {
                    if event.name.is_some_and(|n| names.contains(&n)) {
                        return;
                    }
                }
                // The queue overflowed or the watch broke: wake (a spurious
                // wake-up costs one attempt; a missed one a poll interval).
                Some(Err(_)) | None => return,
            }
        }
    }))
}

#[cfg(not(target_os = "linux"))]
fn watch(_dir: &Path, _keys: &[Key]) -> Option<ReleaseWatch> {
    None
}

/// The bucket file's name for `key`: FNV-1a of the key, written by hand
/// because it must be the same in every process and every build (std's
/// hasher promises neither).
fn bucket(key: &Key) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in key.as_str().bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{:02x}", h % BUCKETS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_stable_and_spread() {
        let a = Key::new("jobs/a").unwrap();
        let b = Key::new("jobs/b").unwrap();
        assert_eq!(bucket(&a), bucket(&a));
        assert_ne!(bucket(&a), bucket(&b));
        assert_eq!(bucket(&a).len(), 2);
    }
}
