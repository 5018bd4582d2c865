//! The operations on a lease of ours: renew, release, and record a run
//! under it. Each reads the key's record and writes it back conditional
//! on the version read, only while the record names our lease id (a
//! renewal and a release first try our remembered last write, in one
//! request).

use std::time::SystemTime;

use leasehold::backend::Lease;
use leasehold::{Error, Key, LossReason, Result, RunOutcome, RunRecord};

use crate::backend::{Inner, Written};
use crate::error::NAME;
use crate::record::unix_ms;

/// A definitive loss of the lease on `key`.
fn lost(key: &Key, why: &str) -> Error {
    Error::LeaseLost {
        key: key.as_str().to_string(),
        reason: LossReason::Revoked(why.to_string()),
    }
}

/// How many times an operation reads and writes again after a record
/// changed under it before giving up (retryable).
pub(crate) const ROUNDS: usize = 8;

/// The answer when the record changed under every round (retryable).
pub(crate) fn raced(op: &'static str) -> Error {
    Error::backend(NAME, op, true, "the record kept changing under the request")
}

impl Inner {
    pub(crate) async fn renew(&self, lease: &Lease) -> Result<()> {
        let inner = self;
        // Our last write, if we remember it: one request instead of a read
        // and a write (the version check makes it exactly that write's).
        if let Some((mut record, version)) = inner.writes.get(lease) {
            if let Some(held) = record.lease.as_mut() {
                held.renewed_ms = unix_ms(SystemTime::now());
            }
            match inner
                .write("renew", lease.epoch, &lease.key, &record, version)
                .await?
            {
                Written::Done(v) => {
                    inner.writes.keep(lease, record, v);
                    return Ok(());
                }
                Written::Changed => inner.writes.forget(lease),
                Written::Gone => {
                    inner.writes.forget(lease);
                    return Err(lost(
                        &lease.key,
                        "the key's record is gone (the store's data lost?)",
                    ));
                }
            }
        }
        for _ in 0..ROUNDS {
            let Some(mut read) = inner.read("renew", lease.epoch, &lease.key).await? else {
                return Err(lost(
                    &lease.key,
                    "the key's record is gone (the store's data lost?)",
                ));
            };
            let Some(held) = read
                .record
                .lease
                .as_mut()
                .filter(|l| l.id == lease.lease_id.as_str())
            else {
                return Err(lost(&lease.key, "the key is no longer held by this lease"));
            };
            held.renewed_ms = unix_ms(SystemTime::now());
            match inner
                .write(
                    "renew",
                    lease.epoch,
                    &lease.key,
                    &read.record,
                    read.stat.version,
                )
                .await?
            {
                Written::Done(_) => return Ok(()),
                Written::Changed => continue,
                Written::Gone => {
                    return Err(lost(
                        &lease.key,
                        "the key's record is gone (the store's data lost?)",
                    ))
                }
            }
        }
        Err(raced("renew"))
    }

    pub(crate) async fn release(&self, lease: &Lease) -> Result<()> {
        let inner = self;
        // Our last write, if we remember it: one request instead of a read
        // and a write, as for a renewal (the version check makes the node
        // exactly that write, our lease's). Forgotten first: whatever the
        // answer, a retry reads.
        let remembered = inner.writes.get(lease);
        inner.writes.forget(lease);
        if let Some((mut record, version)) = remembered {
            record.lease = None;
            record.released_by = Some(lease.lease_id.as_str().to_string());
            match inner
                .write("release", lease.epoch, &lease.key, &record, version)
                .await?
            {
                Written::Done(_) => return Ok(()),
                // Someone wrote since: read and decide below.
                Written::Changed => {}
                Written::Gone => {
                    return Err(lost(
                        &lease.key,
                        "the key's record is gone (the store's data lost?)",
                    ))
                }
            }
        }
        for _ in 0..ROUNDS {
            let Some(mut read) = inner.read("release", lease.epoch, &lease.key).await? else {
                return Err(lost(
                    &lease.key,
                    "the key's record is gone (the store's data lost?)",
                ));
            };
            let ours = read
                .record
                .lease
                .as_ref()
                .is_some_and(|l| l.id == lease.lease_id.as_str());
            if !ours {
                if read.record.released_by.as_deref() == Some(lease.lease_id.as_str()) {
                    // Our own earlier attempt went through.
                    return Ok(());
                }
                return Err(lost(&lease.key, "the key is no longer held by this lease"));
            }
            read.record.lease = None;
            read.record.released_by = Some(lease.lease_id.as_str().to_string());
            match inner
                .write(
                    "release",
                    lease.epoch,
                    &lease.key,
                    &read.record,
                    read.stat.version,
                )
                .await?
            {
                Written::Done(_) => return Ok(()),
                Written::Changed => continue,
                Written::Gone => {
                    return Err(lost(
                        &lease.key,
                        "the key's record is gone (the store's data lost?)",
                    ))
                }
            }
        }
        Err(raced("release"))
    }

    pub(crate) async fn record_run(&self, lease: &Lease, run: &RunRecord) -> Result<()> {
        let inner = self;
        for _ in 0..ROUNDS {
            let Some(mut read) = inner.read("record run", lease.epoch, &lease.key).await? else {
                return Err(lost(
                    &lease.key,
                    "the key's record is gone (the store's data lost?)",
                ));
            };
            let ours = read
                .record
                .lease
                .as_ref()
                .is_some_and(|l| l.id == lease.lease_id.as_str());
            if ours {
                read.record.last_run = Some(run.clone());
                if run.outcome == RunOutcome::Succeeded {
                    read.record.last_success = Some(run.clone());
                }
            } else {
                // Not ours: never a success; a failed run is still the last
                // run where it is later than the stored one, and only on a
                // free key (a write changes the version that waiters watch,
                // which must stay a sign of the holder's life alone).
                let later = read
                    .record
                    .last_run
                    .as_ref()
                    .is_none_or(|r| r.fencing_token < run.fencing_token);
                if run.outcome == RunOutcome::Succeeded || read.record.lease.is_some() || !later {
                    return Err(lost(&lease.key, "the key is no longer held by this lease"));
                }
                read.record.last_run = Some(run.clone());
            }
            match inner
                .write(
                    "record run",
                    lease.epoch,
                    &lease.key,
                    &read.record,
                    read.stat.version,
                )
                .await?
            {
                Written::Done(_) if ours => return Ok(()),
                Written::Done(_) => {
                    return Err(lost(&lease.key, "the key is no longer held by this lease"))
                }
                Written::Changed => continue,
                Written::Gone => {
                    return Err(lost(
                        &lease.key,
                        "the key's record is gone (the store's data lost?)",
                    ))
                }
            }
        }
        Err(raced("record run"))
    }
}
