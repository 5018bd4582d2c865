//! The in-memory backend: one process only, for tests and examples.
//!
//! # Protocol
//! A map from key to record, behind one mutex. A record keeps the last
//! fencing token issued for the key (records are never removed, so the
//! counter never goes back) and the current lease, if any: lease id, owner,
//! data, and an expiry on the backend's [`Clock`](crate::backend::Clock) (the system
//! monotonic clock unless another is injected). A lease is live while the
//! clock is before its expiry. Every operation is one critical section of
//! the mutex, so the contract of [`Backend`] holds trivially.
//!
//! Run records (see [run records](crate::backend#run-records)) are kept in
//! the key's record, stamped by the writer's wall clock.
//!
//! # Epoch
//! A new memory store starts an epoch (the wall clock's second, see
//! [store epochs](crate::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data))
//! that needs no quarantine: nobody can hold a lease in a store that did
//! not exist. [`MemoryBackend::lose_data`] simulates the loss of the data
//! (for tests): every record goes, a later epoch starts, and its age is
//! unknown, so the quarantine applies in full.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::backend::{
    epoch_at, next_token, AcquireOutcome, AcquireRequest, Backend, BatchOutcome, Capabilities,
    Grant, HolderInfo, KeyInfo, Lease, LeaseId, Owner, StoreEpoch, DEFAULT_STORE_MAX_TTL,
};
use crate::clock::{SharedClock, SystemClock};
use crate::error::{Error, LossReason, Result};
use crate::key::Key;
use crate::runs::RunRecord;

/// Shortest TTL of the in-process stores (memory, SQLite).
pub const LOCAL_MIN_TTL: Duration = Duration::from_millis(100);
/// Longest max TTL the in-process stores (memory, SQLite) can be set to.
pub const LOCAL_MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// An in-memory [`Backend`].
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    records: Arc<Mutex<Data>>,
    clock: SharedClock,
}

#[derive(Debug)]
struct Data {
    records: BTreeMap<Key, Record>,
    epoch: StoreEpoch,
}

#[derive(Debug, Default)]
struct Record {
    fence: u64,
    lease: Option<Held>,
    last_success: Option<RunRecord>,
    last_run: Option<RunRecord>,
}

#[derive(Debug)]
struct Held {
    lease_id: LeaseId,
    expires_at: Duration,
    ttl: Duration,
    owner: Owner,
    data: Option<String>,
    acquired_at: SystemTime,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store whose expiries are measured on `clock`.
    pub fn with_clock(clock: SharedClock) -> Self {
        Self::with_clock_and_max_ttl(clock, DEFAULT_STORE_MAX_TTL)
    }

    /// An empty store on `clock` whose max TTL (longest lease) is
    /// `max_ttl` (capped at [`LOCAL_MAX_TTL`]).
    pub fn with_clock_and_max_ttl(clock: SharedClock, max_ttl: Duration) -> Self {
        let max_ttl = max_ttl.clamp(LOCAL_MIN_TTL, LOCAL_MAX_TTL);
        MemoryBackend {
            records: Arc::new(Mutex::new(Data {
                records: BTreeMap::new(),
                // A store that did not exist had no holders: no quarantine.
                epoch: StoreEpoch::new(epoch_at(SystemTime::now()), max_ttl)
                    .with_age(Some(Duration::MAX)),
            })),
            clock,
        }
    }

    /// Simulates the loss of the store's data (for tests): every record is
    /// gone and a later epoch starts, of unknown age. Holders of the old
    /// data are told lost at their next renewal; grants wait out the
    /// quarantine.
    pub fn lose_data(&self) {
        let mut data = self.records.lock().unwrap_or_else(|e| e.into_inner());
        data.records.clear();
        let next = epoch_at(SystemTime::now()).max(data.epoch.epoch + 1);
        data.epoch = StoreEpoch::new(next, data.epoch.max_ttl);
    }

    /// The store's current epoch.
    pub fn epoch(&self) -> StoreEpoch {
        let data = self.records.lock().unwrap_or_else(|e| e.into_inner());
        data.epoch.clone()
    }

    fn with_records<T>(
        &self,
        f: impl FnOnce(&mut BTreeMap<Key, Record>, Duration, &StoreEpoch) -> T,
    ) -> T {
        let now = self.clock.now();
        let mut data = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let data = &mut *data;
        f(&mut data.records, now, &data.epoch)
    }
}

impl Record {
    /// The current lease if it is live at `now`.
    fn live(&self, now: Duration) -> Option<&Held> {
        self.lease.as_ref().filter(|h| h.expires_at > now)
    }

    fn holder(&self, now: Duration) -> Option<HolderInfo> {
        self.live(now).map(|h| {
            HolderInfo::new(h.owner.clone(), self.fence)
                .with_data(h.data.clone())
                .with_acquired_at(Some(h.acquired_at))
                .with_expires_in(Some(h.expires_at - now))
                .with_ttl(Some(h.ttl))
        })
    }

    fn info(&self, key: &Key, now: Duration) -> KeyInfo {
        KeyInfo::new(key.clone(), self.fence, self.holder(now))
            .with_runs(self.last_success.clone(), self.last_run.clone())
    }

    /// Why `lease` is not ours in this record, or `None` if it is.
    fn not_ours(&self, lease: &Lease, now: Duration) -> Option<String> {
        match &self.lease {
            None => Some("the lease was released or broken".into()),
            Some(h) if h.lease_id != lease.lease_id => {
                Some("the key is held by another lease".into())
            }
            Some(h) if h.expires_at <= now => Some("the lease expired".into()),
            Some(_) => None,
        }
    }
}

/// Refuses a TTL above the store's max TTL.
pub(crate) fn check_ttl(ttl: Duration, epoch: &StoreEpoch) -> Result<()> {
    if ttl > epoch.max_ttl {
        return Err(Error::invalid(
            "ttl",
            format!(
                "{ttl:?} is above the store's max TTL of {:?} (no lease may be longer: it bounds the wait after the store's data is lost)",
                epoch.max_ttl
            ),
        ));
    }
    Ok(())
}

fn other_epoch(lease: &Lease, epoch: &StoreEpoch) -> String {
    format!(
        "the store's data was lost: the lease was granted in store epoch {}, the store is now in epoch {}",
        lease.epoch, epoch.epoch
    )
}

/// The record of `lease`'s key, for renewing or releasing it: lost if the
/// lease is of another store epoch or the key has no record.
fn lease_record<'a>(
    records: &'a mut BTreeMap<Key, Record>,
    lease: &Lease,
    epoch: &StoreEpoch,
) -> Result<&'a mut Record> {
    if lease.epoch != epoch.epoch {
        return Err(lost(lease, other_epoch(lease, epoch)));
    }
    records
        .get_mut(&lease.key)
        .ok_or_else(|| lost(lease, "the key has no record".into()))
}

/// One grant or answer of [`MemoryBackend::try_acquire`], under the lock.
fn acquire_in(
    records: &mut BTreeMap<Key, Record>,
    req: &AcquireRequest,
    now: Duration,
    epoch: &StoreEpoch,
) -> Result<AcquireOutcome> {
    if req.epoch != Some(epoch.epoch) {
        return Ok(AcquireOutcome::OtherEpoch(epoch.clone()));
    }
    check_ttl(req.ttl, epoch)?;
    let record = records.entry(req.key.clone()).or_default();
    if let Some(h) = record.live(now) {
        if h.lease_id != req.lease_id {
            return Ok(AcquireOutcome::Held(record.holder(now)));
        }
        // Our own lease, asked for again: extend it, same token.
        let fence = record.fence;
        if let Some(h) = record.lease.as_mut() {
            h.expires_at = now + req.ttl;
        }
        return Ok(AcquireOutcome::Acquired(Grant::new(fence)));
    }
    record.fence = next_token(record.fence, epoch.epoch);
    record.lease = Some(Held {
        lease_id: req.lease_id.clone(),
        expires_at: now + req.ttl,
        ttl: req.ttl,
        owner: req.owner.clone(),
        data: req.data.clone(),
        acquired_at: SystemTime::now(),
    });
    Ok(AcquireOutcome::Acquired(Grant::new(record.fence)))
}

fn lost(lease: &Lease, why: String) -> Error {
    Error::LeaseLost {
        key: lease.key.to_string(),
        reason: LossReason::Revoked(why),
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(LOCAL_MIN_TTL, self.epoch().max_ttl)
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        self.with_records(|records, now, epoch| acquire_in(records, req, now, epoch))
    }

    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<BatchOutcome> {
        self.with_records(|records, now, epoch| {
            // Every key checked before any is granted: all or none.
            for (index, req) in requests.iter().enumerate() {
                if req.epoch != Some(epoch.epoch) {
                    return Ok(BatchOutcome::OtherEpoch(epoch.clone()));
                }
                check_ttl(req.ttl, epoch)?;
                if let Some(record) = records.get(&req.key) {
                    if record.live(now).is_some_and(|h| h.lease_id != req.lease_id) {
                        let holder = record.holder(now);
                        return Ok(BatchOutcome::Held { index, holder });
                    }
                }
            }
            let mut grants = Vec::with_capacity(requests.len());
            for req in requests {
                match acquire_in(records, req, now, epoch)? {
                    AcquireOutcome::Acquired(grant) => grants.push(grant),
                    // Checked above, under the same lock.
                    other => unreachable!("a checked key answered {other:?}"),
                }
            }
            Ok(BatchOutcome::Acquired(grants))
        })
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        self.with_records(|records, now, epoch| {
            let record = lease_record(records, lease, epoch)?;
            if let Some(why) = record.not_ours(lease, now) {
                return Err(lost(lease, why));
            }
            if let Some(h) = record.lease.as_mut() {
                h.expires_at = now + lease.ttl;
            }
            Ok(())
        })
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        self.with_records(|records, _now, epoch| {
            let record = lease_record(records, lease, epoch)?;
            match &record.lease {
                // Ours, live or expired but not taken: end it.
                Some(h) if h.lease_id == lease.lease_id => {
                    record.lease = None;
                    Ok(())
                }
                Some(_) => Err(lost(lease, "the key is held by another lease".into())),
                None => Err(lost(lease, "the lease was released or broken".into())),
            }
        })
    }

    async fn record_run(&self, lease: &Lease, run: &RunRecord) -> Result<()> {
        self.with_records(|records, _now, epoch| {
            let record = records.get_mut(&lease.key);
            let ours = lease.epoch == epoch.epoch
                && record
                    .as_ref()
                    .and_then(|r| r.lease.as_ref())
                    .is_some_and(|h| h.lease_id == lease.lease_id);
            let Some(record) = record else {
                return Err(lost(lease, "the key has no record".into()));
            };
            if ours {
                if run.succeeded() {
                    record.last_success = Some(run.clone());
                }
                record.last_run = Some(run.clone());
                return Ok(());
            }
            let later = record
                .last_run
                .as_ref()
                .is_none_or(|r| r.fencing_token < run.fencing_token);
            if !run.succeeded() && later && lease.epoch == epoch.epoch {
                record.last_run = Some(run.clone());
            }
            Err(lost(
                lease,
                if lease.epoch != epoch.epoch {
                    other_epoch(lease, epoch)
                } else if record.lease.is_some() {
                    "the key is held by another lease".into()
                } else {
                    "the lease was released or broken".into()
                },
            ))
        })
    }

    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        Ok(self.with_records(|records, now, _| match records.get(key) {
            Some(r) => r.info(key, now),
            None => KeyInfo::new(key.clone(), 0, None),
        }))
    }

    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        Ok(self.with_records(|records, now, _| {
            let record = records.get_mut(key)?;
            let holder = record.holder(now);
            record.lease = None;
            holder
        }))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        Ok(self.with_records(|records, now, _| {
            records
                .iter()
                .filter(|(k, _)| k.as_str().starts_with(prefix))
                .map(|(k, r)| r.info(k, now))
                .collect()
        }))
    }
}
