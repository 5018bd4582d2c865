//! An acquisition, step by step as the crate docs' protocol describes it:
//! learn the container's epoch (first use), check the TTL and the epoch
//! asked for, then, until the blob stops changing under us: know the lock
//! blob (remembered, read or created) and that it is in our epoch's
//! container; write our record on its ETag; take the lease on the ETag our
//! write produced.

use azure_core::http::{Etag, StatusCode};
use azure_storage_blob::models::{BlobClientAcquireLeaseOptions, BlobClientSetMetadataOptions};
use azure_storage_blob::BlobClient;
use leasehold::{
    backend::{AcquireOutcome, AcquireRequest, Grant, StoreEpoch},
    Result,
};

use crate::backend::{lease_seconds, LockBlob, Snapshot};
use crate::error::NAME;
use crate::record::{self, Record};
use crate::AzureBackend;

const OP: &str = "acquire";

/// How many times the lock blob may change under one acquisition before it
/// gives up (retryably).
const ATTEMPTS: usize = 8;

/// What a step decided.
enum Step<T> {
    /// Go on with this.
    Next(T),
    /// The blob changed under us: start again from reading it.
    Again,
    /// The acquisition is answered.
    Done(AcquireOutcome),
}

/// The blob and what the request asks, for the steps.
struct Attempt<'a> {
    req: &'a AcquireRequest,
    name: &'a str,
    blob: &'a BlobClient,
    epoch: u64,
    /// Our lease id's tag, as the record stores it.
    tag: String,
}

impl AzureBackend {
    pub(crate) async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        let (name, blob) = self.blob(&req.key);
        let current = self.epoch_for_acquire(&name, &blob).await?;
        // Checked before the epoch: a TTL the container refuses is refused
        // at once, not after a quarantine.
        if req.ttl > current.max_ttl {
            return Err(leasehold::Error::invalid(
                "ttl",
                format!(
                    "{:?} is above the container's store max TTL of {:?} (no lease may be longer: it bounds the wait after the container is lost)",
                    req.ttl, current.max_ttl
                ),
            ));
        }
        let Some(epoch) = req.epoch.filter(|e| *e == current.epoch) else {
            return Ok(AcquireOutcome::OtherEpoch(current));
        };
        let at = Attempt {
            req,
            name: &name,
            blob: &blob,
            epoch,
            tag: record::lease_tag(&req.lease_id),
        };
        let mut known = self.cached(&name);
        for _ in 0..ATTEMPTS {
            let snap = match self.lock_blob(&at, known.take()).await? {
                Step::Next(s) => s,
                Step::Again => continue,
                Step::Done(outcome) => return Ok(outcome),
            };
            let (etag, record) = match self.write_record(&at, snap).await? {
                Step::Next(written) => written,
                Step::Again => continue,
                Step::Done(outcome) => return Ok(outcome),
            };
            match self.take_lease(&at, etag, record).await? {
                Step::Next(grant) => return Ok(AcquireOutcome::Acquired(grant)),
                Step::Again => continue,
                Step::Done(outcome) => return Ok(outcome),
            }
        }
        Err(leasehold::Error::backend(
            NAME,
            OP,
            true,
            "the lock blob kept changing during acquisition",
        ))
    }

    /// The container's epoch: as last learnt, or on first use read after
    /// the lock blob, so that the blob is known to be in the marker's
    /// container and the grant that follows needs no further check.
    async fn epoch_for_acquire(&self, name: &str, blob: &BlobClient) -> Result<StoreEpoch> {
        if let Some(epoch) = self.known_epoch() {
            return Ok(epoch);
        }
        let snap = match self.read_lock(blob).await {
            Ok(LockBlob::Found(s)) => Some(*s),
            Ok(_) => None,
            Err(e) => return Err(e.into_error(OP)),
        };
        let epoch = self.learn_epoch().await?;
        if let Some(mut s) = snap {
            s.container = Some(epoch.epoch);
            self.remember(name, Some(s));
        }
        Ok(epoch)
    }

    /// The lock blob as it is now, free or ours, and known to be in the
    /// container of our epoch; or the answer (held, another epoch).
    async fn lock_blob(&self, at: &Attempt<'_>, known: Option<Snapshot>) -> Result<Step<Snapshot>> {
        // What the blob holds: from this process's memory when it was free
        // (or ours) at last sight, else read (one request, which is the
        // whole cost of finding it held).
        let mut snap = match known {
            Some(s) if !s.leased || s.record.lease.as_deref() == Some(at.tag.as_str()) => s,
            _ => match self.read_lock(at.blob).await {
                Ok(LockBlob::Found(s)) => *s,
                Ok(LockBlob::NoBlob) => match self.create_blob(at.blob).await {
                    Ok(Some(s)) => s,
                    Ok(None) => return Ok(Step::Again),
                    Err(e) if e.code_is("ContainerNotFound") => {
                        return self.other_epoch(at.name).await.map(Step::Done)
                    }
                    Err(e) => return Err(e.into_error(OP)),
                },
                // The container is gone: a new one is a new epoch.
                Ok(LockBlob::NoContainer) => {
                    return self.other_epoch(at.name).await.map(Step::Done)
                }
                Err(e) => return Err(e.into_error(OP)),
            },
        };
        // A record of a later epoch: the store moved on since we looked.
        if snap.record.epoch.is_some_and(|e| e > at.epoch) {
            return self.other_epoch(at.name).await.map(Step::Done);
        }
        let ours = snap.record.lease.as_deref() == Some(at.tag.as_str());
        if snap.leased && !ours {
            let holder = snap.record.holder();
            self.remember(at.name, Some(snap));
            return Ok(Step::Done(AcquireOutcome::Held(Some(holder))));
        }
        if snap.container != Some(at.epoch) {
            // Is this blob in the container of our epoch? The marker read
            // *after* the blob says so: the write that follows is
            // conditional on the ETag read before it, so it lands only if
            // the blob (and with it the container) is still the one that
            // was there when the marker was read.
            match self.marker_epoch().await {
                Ok(Some(e)) if e == at.epoch => snap.container = Some(at.epoch),
                Ok(_) => return self.other_epoch(at.name).await.map(Step::Done),
                Err(e) => return Err(e.into_error(OP)),
            }
        }
        Ok(Step::Next(snap))
    }

    /// Writes our record (the next fencing token, our lease's tag and
    /// holder) on the ETag read, keeping the run records; a retry of an
    /// acquisition already recorded keeps that record. Answers the ETag
    /// the lease is then taken on.
    async fn write_record(
        &self,
        at: &Attempt<'_>,
        snap: Snapshot,
    ) -> Result<Step<(String, Record)>> {
        if snap.record.lease.as_deref() == Some(at.tag.as_str()) {
            return Ok(Step::Next((snap.etag, snap.record)));
        }
        let next = Record {
            fence: leasehold::backend::next_token(snap.record.fence, at.epoch),
            epoch: Some(at.epoch),
            lease: Some(at.tag.clone()),
            owner: Some(at.req.owner.clone()),
            data: at.req.data.clone(),
            acquired_at_ms: Some(record::now_ms()),
            ttl_ms: Some(at.req.ttl.as_millis() as u64),
            last_success: snap.record.last_success.clone(),
            last_run: snap.record.last_run.clone(),
        };
        let options = BlobClientSetMetadataOptions {
            if_match: Some(Etag::from(snap.etag.as_str())),
            ..Default::default()
        };
        match at
            .blob
            .set_metadata(&next.to_metadata(), Some(options))
            .await
        {
            Ok(resp) => {
                let etag = resp
                    .headers()
                    .get_optional_str(&azure_core::http::headers::ETAG)
                    .unwrap_or_default()
                    .to_string();
                Ok(Step::Next((etag, next)))
            }
            Err(e) => {
                let e = self.err(e);
                self.remember(at.name, None);
                // 412: leased meanwhile (LeaseIdMissing) or changed
                // (ConditionNotMet, maybe by our own write whose answer was
                // lost); 404: gone. Read again.
                if e.is(StatusCode::PreconditionFailed) || e.is_not_found() {
                    return Ok(Step::Again);
                }
                Err(e.into_error(OP))
            }
        }
    }

    /// Takes the lease on the ETag of our record: granted with its fencing
    /// token, or the blob changed (someone else's record or lease).
    async fn take_lease(
        &self,
        at: &Attempt<'_>,
        etag: String,
        record: Record,
    ) -> Result<Step<Grant>> {
        let options = BlobClientAcquireLeaseOptions {
            proposed_lease_id: Some(at.req.lease_id.as_str().to_string()),
            if_match: Some(Etag::from(etag.clone())),
            ..Default::default()
        };
        match at
            .blob
            .acquire_lease(lease_seconds(at.req.ttl), Some(options))
            .await
        {
            Ok(_) => {
                let fence = record.fence;
                self.remember(
                    at.name,
                    Some(Snapshot {
                        etag,
                        record,
                        leased: true,
                        container: Some(at.epoch),
                    }),
                );
                Ok(Step::Next(Grant::new(fence)))
            }
            Err(e) => {
                let e = self.err(e);
                self.remember(at.name, None);
                // 409: someone holds it; 412: the record changed since we
                // wrote it; 404: gone. Read again to see which.
                if e.is(StatusCode::Conflict)
                    || e.is(StatusCode::PreconditionFailed)
                    || e.is_not_found()
                {
                    return Ok(Step::Again);
                }
                Err(e.into_error(OP))
            }
        }
    }
}
