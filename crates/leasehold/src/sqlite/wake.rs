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
//! One inotify watch per store, made by its first waiter and read by one
//! task, serves every waiter of the store: a waiter registers with the
//! bucket's [`Notify`] (no system call), so waiting costs nothing per
//! attempt. The task ends with the store.
//!
//! A hint only, as [`Backend::watch_release`](crate::backend::Backend::watch_release)
//! allows: a waiter that misses one (a full inotify queue, a directory it
//! cannot write, another machine sharing the file over a network file
//! system) finds the key free at its next poll.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::backend::ReleaseWatch;
use crate::key::Key;

/// How many bucket files the directory holds at most.
const BUCKETS: u32 = 256;

/// The wake-up directory of one database.
#[derive(Debug)]
pub(super) struct Wake {
    dir: PathBuf,
    /// The store's watch, once a waiter asked for one.
    watcher: Mutex<Option<Watcher>>,
}

/// One inotify watch on the directory and the task that reads it.
#[derive(Debug)]
struct Watcher {
    /// Notified when the bucket's file is written, by index.
    buckets: Arc<[Arc<Notify>]>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Wake {
    fn drop(&mut self) {
        if let Some(w) = self.watcher.get_mut().ok().and_then(Option::take) {
            w.task.abort();
        }
    }
}

impl Wake {
    /// The directory for the database at `db`: beside the file it names,
    /// symbolic links resolved, so that processes reaching one file by
    /// different paths meet in one directory.
    pub(super) fn new(db: &Path) -> Wake {
        let real = std::fs::canonicalize(db).unwrap_or_else(|_| db.to_path_buf());
        let mut dir = real.into_os_string();
        dir.push("-wake");
        Wake {
            dir: dir.into(),
            watcher: Mutex::new(None),
        }
    }

    /// Tells waiters on `key` that it may have become free. Best effort:
    /// errors are ignored (the waiters poll).
    pub(super) fn notify(&self, key: &Key) {
        // Opening for writing and closing is the event (IN_CLOSE_WRITE); the
        // file stays empty. Fails at once when the directory does not exist.
        let path = self.dir.join(bucket_name(bucket(key)));
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path);
    }

    /// A future that completes when one of `keys`' buckets is notified,
    /// registered before this returns; `None` when the watch cannot be set
    /// up (no inotify, a read-only directory, no tokio runtime).
    pub(super) fn watch(&self, keys: &[Key]) -> Option<ReleaseWatch> {
        let buckets = {
            let mut slot = self.watcher.lock().unwrap_or_else(|e| e.into_inner());
            if slot.as_ref().is_none_or(|w| w.task.is_finished()) {
                // None yet, or its task ended (a broken watch, or the runtime
                // it ran on shut down): make one.
                *slot = Some(start(&self.dir)?);
            }
            slot.as_ref().map(|w| w.buckets.clone())?
        };
        let mut waits: Vec<_> = keys
            .iter()
            .map(|k| Box::pin(buckets[bucket(k) as usize].clone().notified_owned()))
            .collect();
        for w in &mut waits {
            // Registered now: a release from here on is not missed.
            w.as_mut().enable();
        }
        Some(Box::pin(std::future::poll_fn(move |cx| {
            for w in &mut waits {
                if w.as_mut().poll(cx).is_ready() {
                    return std::task::Poll::Ready(());
                }
            }
            std::task::Poll::Pending
        })))
    }
}

/// Makes the directory, its inotify watch and the task that reads it.
#[cfg(target_os = "linux")]
fn start(dir: &Path) -> Option<Watcher> {
    use inotify::{Inotify, WatchMask};

    let runtime = tokio::runtime::Handle::try_current().ok()?;
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
    let _entered = runtime.enter();
    let mut stream = inotify.into_event_stream(vec![0u8; 4096]).ok()?;
    let buckets: Arc<[Arc<Notify>]> = (0..BUCKETS).map(|_| Arc::new(Notify::new())).collect();
    let wake = buckets.clone();
    let task = runtime.spawn(async move {
        let every = || wake.iter().for_each(|n| n.notify_waiters());
        loop {
            let next = std::future::poll_fn(|cx| {
                futures_core::Stream::poll_next(std::pin::Pin::new(&mut stream), cx)
            })
            .await;
            match next {
                Some(Ok(event)) => {
                    let b = event
                        .name
                        .and_then(|n| n.to_str().and_then(|n| u32::from_str_radix(n, 16).ok()));
                    match b {
                        Some(b) if b < BUCKETS => wake[b as usize].notify_waiters(),
                        // The queue overflowed (no name): wake everyone (a
                        // spurious wake-up costs one attempt, a missed one
                        // a poll interval).
                        _ => every(),
                    }
                }
                // The watch broke: wake everyone and end; the next waiter
                // makes a new one.
                Some(Err(_)) | None => {
                    every();
                    return;
                }
            }
        }
    });
    Some(Watcher { buckets, task })
}

#[cfg(not(target_os = "linux"))]
fn start(_dir: &Path) -> Option<Watcher> {
    None
}

/// The bucket of `key`: FNV-1a of the key, written by hand because it must
/// be the same in every process and every build (std's hasher promises
/// neither).
fn bucket(key: &Key) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in key.as_str().bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h % BUCKETS
}

/// A bucket's file name: two hex digits.
fn bucket_name(bucket: u32) -> String {
    format!("{bucket:02x}")
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
        assert_eq!(bucket_name(bucket(&a)).len(), 2);
        assert_eq!(u32::from_str_radix(&bucket_name(255), 16), Ok(255));
    }
}
