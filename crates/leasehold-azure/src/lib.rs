//! Azure Blob Storage leases as a [`leasehold`] backend.
//!
//! ```no_run
//! # async fn demo() -> leasehold::Result<()> {
//! // AZURE_STORAGE_CONNECTION_STRING=UseDevelopmentStorage=true for Azurite.
//! let backend = leasehold_azure::AzureBackend::from_url("azblob://locks/prod").await?;
//! let store = leasehold::Store::new(backend);
//! let guard = store.lock("ImportEligibility-A")?.try_acquire().await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Protocol
//! Every key is one block blob, its *lock blob*, in the container (see
//! [Blob names](#blob-names)). Its content is empty; its metadata is the
//! key's record (fencing counter, owner, data). Azure's blob lease is the
//! lock: the service alone decides who holds it and for how long, so no
//! clock of ours is trusted for exclusion.
//!
//! * **Setup, lazily.** A lock blob answered 404 is created with
//!   `If-None-Match: *`, so an existing blob (and its counter) is never
//!   overwritten; if the container is missing (404 `ContainerNotFound`) it is
//!   created first (an existing one is fine).
//! * **Acquire** writes the record first, then takes the lease on exactly
//!   that record:
//!   1. Know the blob's ETag, record and lease state: from this process's
//!      memory if it saw the blob free (or leased by this very lease id)
//!      last, else one *Get Blob Properties*. Leased by someone else: the
//!      answer is *held*, with the holder from the record, for one request.
//!   2. *Set Blob Metadata* with `If-Match` = that ETag and no lease id:
//!      fence + 1, the owner (host, pid, label), the user data, the
//!      acquisition time, the TTL and a one-way tag of the lease id, in one
//!      request. Azure refuses it (412) if the blob is leased meanwhile or
//!      the record changed.
//!   3. *Lease Blob* `acquire` with the request's lease id as the proposed id,
//!      the TTL as duration (15-60 s, whole seconds rounded up) and
//!      `If-Match` = the ETag the write returned: the lease is granted only
//!      on our record, and while it lasts nobody can change the record.
//!      So whenever the blob is leased, its record names the holder.
//!
//!   Any 409/412/404 on the way re-reads and starts over. A record that
//!   already carries our lease id's tag is a retry of ours (say, our write
//!   went through but its answer was lost): step 2 is skipped and its token
//!   returned; asking Azure again with the same lease id succeeds, so retries
//!   after ambiguous failures are safe. Lease operations do not change the
//!   ETag, so a warm uncontended acquire + release costs three requests
//!   (write, acquire, release) and an attempt on a held key one.
//! * **Renew** = *Lease Blob* `renew`. 404 (blob or container gone), 409
//!   (another lease id, no lease, lease broken) and 412 are a definitive loss
//!   ([`LossReason::Revoked`](leasehold::LossReason::Revoked)); 408, 429,
//!   5xx, timeouts and connection errors are retryable failures.
//! * **Release** = *Lease Blob* `release`; the blob stays, since it carries
//!   the counter. 404/409/412 mean the lease was not ours, except a 409
//!   when the blob is available or expired and its record still names our
//!   lease: a retried release whose first try landed (nobody broke or took
//!   the lease since), which is success.
//! * **Break** = read the record, then *Lease Blob* `break` with period 0
//!   and `If-Match` = the ETag read, if the blob is leased; returns the
//!   holder the record named. A newer holder writes its record (a new ETag)
//!   before taking the lease, so the break can only end the lease of the
//!   holder it reports; on 412/409 it reads again (and breaks whoever holds
//!   the key then, reporting them).
//! * A lease that is *breaking* (a break period running) counts as held
//!   until it is broken. A 404 counts as "no blob" only with Azure's error
//!   code (`BlobNotFound`, `ContainerNotFound`); a bare 404 (wrong
//!   endpoint, a proxy) is an error.
//! * **Inspect / list** = *Get Blob Properties* / *List Blobs* (with
//!   metadata) under the prefix: the lease state says whether the key is
//!   held, the metadata by whom and the last token. Azure does not say when a
//!   lease runs out, so `expires_in` is unknown.
//!
//! Fencing tokens never go back: every record write is conditional on the
//! ETag of the record it increments (a grant's token may skip numbers when
//! a written record loses the race for the lease), and lock blobs are never
//! deleted. Deleting a lock blob (or its container) by hand resets its
//! counter: don't.
//!
//! **Store epochs are not implemented on Azure yet** (see
//! [store epochs](leasehold::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)):
//! the backend reports one fixed epoch (0) with no quarantine, and tokens
//! are the plain per-key counters. If the container is deleted (or the
//! account restored) while a lease is held, holders are told lost at their
//! next renewal (404), but a waiter may be granted before that, with a
//! token that repeats an earlier one.
//!
//! # Blob names
//! The blob of key `K` is `PREFIX/` + `K` with every `.` that ends a
//! `/`-separated segment written `~2E` (Azure mishandles names and segments
//! ending in `.`), or just that without a prefix. Keys never contain `~`, so
//! the mapping reverses by replacing `~2E` with `.`: `import-A` →
//! `import-A`, `jobs/v2./x` → `jobs/v2~2E/x`.
//!
//! # Metadata
//! Names `leaseholdfence`, `leaseholdlease`, `leaseholdhost`, `leaseholdpid`,
//! `leaseholdlabel`, `leaseholddata`, `leaseholdacquiredms`, `leaseholdttlms`.
//! Text values are percent-encoded UTF-8 (header values must be ASCII).
//!
//! # Credentials
//! [`AzureBackend::from_url`] reads them from the environment, in this order:
//! `AZURE_STORAGE_CONNECTION_STRING` (including `UseDevelopmentStorage=true`
//! and `BlobEndpoint=…`); `AZURE_STORAGE_ACCOUNT` + `AZURE_STORAGE_KEY`;
//! `AZURE_STORAGE_ACCOUNT` + `AZURE_STORAGE_SAS_TOKEN`; `AZURE_STORAGE_ACCOUNT`
//! alone for Entra ID (feature `identity`). Secrets never appear in errors,
//! logs or `Debug` output.
//!
//! # Features
//! * `rustls`: https endpoints (rustls with ring, the platform's roots).
//!   Without it only `http://` endpoints (Azurite) work. It installs ring as
//!   rustls's process-wide default crypto provider unless the application
//!   installed one before the first backend was built.
//! * `identity` (implies `rustls`): Entra ID credentials through
//!   `azure_identity`.
//!
//! The default build has neither, to keep compile times short.

#![warn(missing_docs)]

mod builder;
mod client;
mod credential;
mod names;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use azure_core::http::{Etag, RequestContent, StatusCode};
use azure_storage_blob::models::{
    BlobClientAcquireLeaseOptions, BlobClientBreakLeaseOptions, BlobClientGetPropertiesOptions,
    BlobClientGetPropertiesResultHeaders, BlobClientSetMetadataOptions,
    BlobContainerClientListBlobsOptions, BlockBlobClientUploadOptions, LeaseState,
    ListBlobsIncludeItem,
};
use azure_storage_blob::{BlobClient, BlobContainerClient};
use futures::TryStreamExt;
use leasehold::{
    AcquireOutcome, AcquireRequest, Backend, Capabilities, Grant, HolderInfo, Key, KeyInfo, Lease,
    Result,
};

pub use builder::{AzureBackendBuilder, API_VERSION, DEV_ACCOUNT, DEV_ENDPOINT};
use client::{RequestError, Secrets, NAME};
use names::Record;

/// Shortest lease Azure grants.
pub const MIN_TTL: std::time::Duration = std::time::Duration::from_secs(15);
/// Longest finite lease Azure grants.
pub const MAX_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// Store epochs are not implemented on Azure yet (see the crate docs): the
/// backend reports one fixed epoch, of unbounded age (no quarantine), and
/// tokens keep their plain per-key counters.
const LEGACY_EPOCH: u64 = 0;

fn legacy_epoch() -> leasehold::StoreEpoch {
    leasehold::StoreEpoch::new(LEGACY_EPOCH, MAX_TTL).with_age(Some(std::time::Duration::MAX))
}

/// A lock blob as last seen by this process.
#[derive(Debug, Clone)]
struct Snapshot {
    etag: String,
    record: Record,
    /// Whether it was leased (by anyone) then.
    leased: bool,
}

/// How many records a backend remembers by ETag (see the protocol).
const RECORD_CACHE_LIMIT: usize = 4096;

/// The Azure Blob Storage [`Backend`]. See the [crate docs](crate) for the
/// protocol. Cheap to clone; clones share one HTTP client.
#[derive(Clone)]
pub struct AzureBackend {
    inner: Arc<Inner>,
}

struct Inner {
    container: BlobContainerClient,
    container_name: String,
    prefix: String,
    secrets: Secrets,
    /// Records this process wrote or read, by blob name: (ETag, record).
    records: Mutex<HashMap<String, Snapshot>>,
}

impl fmt::Debug for AzureBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AzureBackend")
            .field("container", &self.inner.container_name)
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

impl AzureBackend {
    /// A builder, for endpoints and credentials set in code.
    pub fn builder() -> AzureBackendBuilder {
        AzureBackendBuilder::new()
    }

    /// The backend for `azblob://CONTAINER[/PREFIX]`, with credentials from
    /// the environment (see [Credentials](crate#credentials)).
    ///
    /// No request is sent: the container and lock blobs are created on first
    /// use.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](leasehold::Error::InvalidInput) for a
    /// malformed URL, connection string or missing credentials;
    /// [`Error::NotSupported`](leasehold::Error::NotSupported) when the
    /// endpoint or credential needs a feature this build lacks.
    ///
    /// # Cancel safety
    /// Cancel safe (it does nothing asynchronous yet).
    pub async fn from_url(url: &str) -> Result<AzureBackend> {
        Self::builder_from_url(url)?.build()
    }

    /// The builder [`from_url`](Self::from_url) builds: the container and
    /// prefix from `url`, credentials from the environment; for adding
    /// pipeline policies before building.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](leasehold::Error::InvalidInput) for a
    /// malformed URL.
    pub fn builder_from_url(url: &str) -> Result<AzureBackendBuilder> {
        let (container, prefix) = builder::parse_url(url)?;
        Ok(AzureBackendBuilder::new()
            .container(container)
            .prefix(prefix)
            .with_env())
    }

    pub(crate) fn new(
        container: BlobContainerClient,
        container_name: String,
        prefix: String,
        secrets: Secrets,
    ) -> Self {
        AzureBackend {
            inner: Arc::new(Inner {
                container,
                container_name,
                prefix,
                secrets,
                records: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The container's name.
    pub fn container(&self) -> &str {
        &self.inner.container_name
    }

    /// Deletes the container with every lock blob in it. This resets every
    /// key's fencing counter, so it is for tests and teardown only, never
    /// while anyone may still hold or want a lock in it.
    ///
    /// # Errors
    /// Backend failures (a missing container is not one).
    pub async fn delete_container(&self) -> Result<()> {
        match self.inner.container.delete(None).await {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = self.err(e);
                if e.is_not_found() {
                    Ok(())
                } else {
                    Err(e.into_error("delete container"))
                }
            }
        }
    }

    fn blob(&self, key: &Key) -> (String, BlobClient) {
        let name = names::blob_name(&self.inner.prefix, key);
        let client = self.inner.container.blob_client(&name);
        (name, client)
    }

    fn err(&self, e: azure_core::Error) -> RequestError {
        RequestError::new(e, &self.inner.secrets)
    }

    fn cached(&self, blob: &str) -> Option<Snapshot> {
        let records = self.inner.records.lock().unwrap_or_else(|e| e.into_inner());
        records.get(blob).cloned()
    }

    fn remember(&self, blob: &str, snapshot: Option<Snapshot>) {
        let mut records = self.inner.records.lock().unwrap_or_else(|e| e.into_inner());
        match snapshot {
            Some(s) => {
                if records.len() >= RECORD_CACHE_LIMIT {
                    records.clear();
                }
                records.insert(blob.to_string(), s);
            }
            None => {
                records.remove(blob);
            }
        }
    }

    fn forget_lease(&self, blob: &str) {
        let mut records = self.inner.records.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = records.get_mut(blob) {
            s.leased = false;
        }
    }

    /// Reads a lock blob's properties: (ETag, record, held?). `None` if Azure
    /// says the blob (or container) does not exist. With `lease_id`, 412
    /// says the lease is not ours.
    ///
    /// Held means leased or *breaking*: a breaking lease is its holder's
    /// until the break period ends (nobody else can take it, and the record
    /// cannot be written). A bare 404 without an Azure error code is an
    /// error, never "no blob".
    async fn read(
        &self,
        blob: &BlobClient,
        lease_id: Option<&str>,
    ) -> std::result::Result<Option<(String, Record, bool)>, RequestError> {
        let options = BlobClientGetPropertiesOptions {
            lease_id: lease_id.map(str::to_string),
            ..Default::default()
        };
        match blob.get_properties(Some(options)).await {
            Ok(resp) => {
                let etag = resp.etag().ok().flatten().map(|e| e.to_string());
                let meta = resp.metadata().unwrap_or_default();
                let leased = resp.lease_state().ok().flatten().is_some_and(|s| held(&s));
                Ok(Some((
                    etag.unwrap_or_default(),
                    Record::from_metadata(&meta),
                    leased,
                )))
            }
            Err(e) => {
                let e = self.err(e);
                if e.is_not_found() {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// The lease state of a lock blob and the lease tag its record names;
    /// `None` if the blob does not exist.
    async fn lease_state(
        &self,
        blob: &BlobClient,
    ) -> std::result::Result<Option<(Option<LeaseState>, Option<String>)>, RequestError> {
        match blob.get_properties(None).await {
            Ok(resp) => {
                let meta = resp.metadata().unwrap_or_default();
                let state = resp.lease_state().ok().flatten();
                Ok(Some((state, Record::from_metadata(&meta).lease)))
            }
            Err(e) => {
                let e = self.err(e);
                if e.is_not_found() {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Creates the lock blob (and, if needed, the container), never
    /// overwriting an existing blob.
    async fn create_blob(&self, blob: &BlobClient) -> std::result::Result<(), RequestError> {
        match self.upload_empty(blob).await {
            Err(e) if e.code_is("ContainerNotFound") => {}
            other => return other,
        }
        if let Err(e) = self.inner.container.create(None).await {
            let e = self.err(e);
            if !e.is(StatusCode::Conflict) {
                return Err(e);
            }
        }
        tracing::debug!(container = %self.inner.container_name, "created container");
        self.upload_empty(blob).await
    }

    async fn upload_empty(&self, blob: &BlobClient) -> std::result::Result<(), RequestError> {
        let options = BlockBlobClientUploadOptions {
            if_none_match: Some(Etag::from("*")),
            metadata: Some(Record::default().to_metadata()),
            ..Default::default()
        };
        match blob
            .upload(RequestContent::from(Vec::<u8>::new()), Some(options))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = self.err(e);
                // Someone else created it first (409 BlobAlreadyExists, or
                // 412 for If-None-Match); a leased blob answers 412 too.
                if e.is(StatusCode::Conflict) || e.is(StatusCode::PreconditionFailed) {
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }
}

/// Whether a blob in lease state `state` is held by someone: leased, or
/// leased and breaking (until the break period ends).
fn held(state: &LeaseState) -> bool {
    matches!(state, LeaseState::Leased | LeaseState::Breaking)
}

fn lease_seconds(ttl: std::time::Duration) -> i32 {
    // Whole seconds, rounded up (a lease at least as long as asked), within
    // Azure's range; the core has already checked the TTL against it.
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    secs.clamp(MIN_TTL.as_secs(), MAX_TTL.as_secs()) as i32
}

#[async_trait]
impl Backend for AzureBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(MIN_TTL, MAX_TTL)
            .shared_across_processes(true)
            .shared_across_machines(true)
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        const OP: &str = "acquire";
        if req.epoch != Some(LEGACY_EPOCH) {
            return Ok(AcquireOutcome::OtherEpoch(legacy_epoch()));
        }
        let (name, blob) = self.blob(&req.key);
        let duration = lease_seconds(req.ttl);
        let tag = names::lease_tag(&req.lease_id);
        let acquire = |etag: String| {
            let options = BlobClientAcquireLeaseOptions {
                proposed_lease_id: Some(req.lease_id.as_str().to_string()),
                if_match: Some(Etag::from(etag)),
                ..Default::default()
            };
            blob.acquire_lease(duration, Some(options))
        };
        let mut known = self.cached(&name);
        for _ in 0..8 {
            // What the blob holds: from this process's memory when it was
            // free (or ours) at last sight, else read (one request, which
            // is the whole cost of finding it held).
            let snap = match known.take() {
                Some(s) if !s.leased || s.record.lease.as_deref() == Some(tag.as_str()) => s,
                _ => match self.read(&blob, None).await {
                    Ok(Some((etag, record, leased))) => Snapshot {
                        etag,
                        record,
                        leased,
                    },
                    Ok(None) => {
                        self.create_blob(&blob)
                            .await
                            .map_err(|e| e.into_error(OP))?;
                        continue;
                    }
                    Err(e) => return Err(e.into_error(OP)),
                },
            };
            let ours = snap.record.lease.as_deref() == Some(tag.as_str());
            if snap.leased && !ours {
                let holder = snap.record.holder();
                self.remember(&name, Some(snap));
                return Ok(AcquireOutcome::Held(Some(holder)));
            }
            let (etag, record) = if ours {
                // A retry of an acquisition already recorded: take (or
                // keep) the lease on that record.
                (snap.etag, snap.record)
            } else {
                let next = Record {
                    fence: snap.record.fence + 1,
                    lease: Some(tag.clone()),
                    owner: Some(req.owner.clone()),
                    data: req.data.clone(),
                    acquired_at_ms: Some(names::now_ms()),
                    ttl_ms: Some(req.ttl.as_millis() as u64),
                };
                let options = BlobClientSetMetadataOptions {
                    if_match: Some(Etag::from(snap.etag.as_str())),
                    ..Default::default()
                };
                match blob.set_metadata(&next.to_metadata(), Some(options)).await {
                    Ok(resp) => {
                        let etag = resp
                            .headers()
                            .get_optional_str(&azure_core::http::headers::ETAG)
                            .unwrap_or_default()
                            .to_string();
                        (etag, next)
                    }
                    Err(e) => {
                        let e = self.err(e);
                        self.remember(&name, None);
                        // 412: leased meanwhile (LeaseIdMissing) or changed
                        // (ConditionNotMet, maybe by our own write whose
                        // answer was lost); 404: gone. Read again.
                        if e.is(StatusCode::PreconditionFailed) || e.is_not_found() {
                            continue;
                        }
                        return Err(e.into_error(OP));
                    }
                }
            };
            match acquire(etag.clone()).await {
                Ok(_) => {
                    let fence = record.fence;
                    self.remember(
                        &name,
                        Some(Snapshot {
                            etag,
                            record,
                            leased: true,
                        }),
                    );
                    return Ok(AcquireOutcome::Acquired(Grant::new(fence)));
                }
                Err(e) => {
                    let e = self.err(e);
                    self.remember(&name, None);
                    // 409: someone holds it; 412: the record changed since
                    // we wrote it; 404: gone. Read again to see which.
                    if e.is(StatusCode::Conflict)
                        || e.is(StatusCode::PreconditionFailed)
                        || e.is_not_found()
                    {
                        continue;
                    }
                    return Err(e.into_error(OP));
                }
            }
        }
        Err(leasehold::Error::backend(
            NAME,
            OP,
            true,
            "the lock blob kept changing during acquisition",
        ))
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        let (_, blob) = self.blob(&lease.key);
        blob.renew_lease(lease.lease_id.as_str().to_string(), None)
            .await
            .map(|_| ())
            .map_err(|e| self.err(e).into_lease_error("renew", &lease.key))
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let (name, blob) = self.blob(&lease.key);
        let e = match blob
            .release_lease(lease.lease_id.as_str().to_string(), None)
            .await
        {
            Ok(_) => {
                self.forget_lease(&name);
                return Ok(());
            }
            Err(e) => self.err(e),
        };
        // A retried release whose first try landed (its answer lost) finds
        // no lease: if the record still names our lease and the blob is
        // free (available or expired; not broken, not leased again), nobody
        // ended or took our lease since, so the release is done.
        if e.is(StatusCode::Conflict) {
            let tag = names::lease_tag(&lease.lease_id);
            let state = self
                .lease_state(&blob)
                .await
                .map_err(|e| e.into_error("release"))?;
            if let Some((Some(LeaseState::Available | LeaseState::Expired), Some(t))) = state {
                if t == tag {
                    self.forget_lease(&name);
                    return Ok(());
                }
            }
        }
        Err(e.into_lease_error("release", &lease.key))
    }

    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        let (_, blob) = self.blob(key);
        match self.read(&blob, None).await {
            Ok(Some((_, record, leased))) => Ok(KeyInfo::new(
                key.clone(),
                record.fence,
                leased.then(|| record.holder()),
            )),
            Ok(None) => Ok(KeyInfo::new(key.clone(), 0, None)),
            Err(e) => Err(e.into_error("inspect")),
        }
    }

    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        const OP: &str = "break";
        let (_, blob) = self.blob(key);
        for _ in 0..8 {
            let (etag, holder) = match self.read(&blob, None).await {
                Ok(Some((etag, record, true))) => (etag, record.holder()),
                Ok(_) => return Ok(None),
                Err(e) => return Err(e.into_error(OP)),
            };
            // Only the lease on the record just read: a new holder writes
            // its record (a new ETag) before taking the lease, so it cannot
            // be broken here in place of the one we report.
            let options = BlobClientBreakLeaseOptions {
                break_period: Some(0),
                if_match: Some(Etag::from(etag)),
                ..Default::default()
            };
            match blob.break_lease(Some(options)).await {
                Ok(_) => return Ok(Some(holder)),
                Err(e) => {
                    let e = self.err(e);
                    if e.is_not_found() {
                        return Ok(None);
                    }
                    // 412: another holder's record since; 409: the lease
                    // ended meanwhile. Read again to see which.
                    if !(e.is(StatusCode::Conflict) || e.is(StatusCode::PreconditionFailed)) {
                        return Err(e.into_error(OP));
                    }
                }
            }
        }
        Err(leasehold::Error::backend(
            NAME,
            OP,
            true,
            "the lock blob kept changing while breaking its lease",
        ))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        const OP: &str = "list";
        // No prefix at all rather than an empty one: Azure signs and checks
        // `prefix=` and refuses the request (403).
        let blob_prefix = names::list_prefix(&self.inner.prefix, prefix);
        let options = BlobContainerClientListBlobsOptions {
            prefix: (!blob_prefix.is_empty()).then_some(blob_prefix),
            include: Some(vec![ListBlobsIncludeItem::Metadata]),
            ..Default::default()
        };
        let mut items = self
            .inner
            .container
            .list_blobs(Some(options))
            .map_err(|e| self.err(e).into_error(OP))?;
        let mut infos = Vec::new();
        loop {
            let item = match items.try_next().await {
                Ok(Some(item)) => item,
                Ok(None) => break,
                Err(e) => {
                    let e = self.err(e);
                    if e.code_is("ContainerNotFound") {
                        break;
                    }
                    return Err(e.into_error(OP));
                }
            };
            let Some(key) = item
                .name
                .as_deref()
                .and_then(|n| names::key_of(&self.inner.prefix, n))
                .filter(|k| k.as_str().starts_with(prefix))
            else {
                continue;
            };
            let meta = item.metadata.and_then(|m| m.values).unwrap_or_default();
            let record = Record::from_metadata(&meta);
            let leased = item
                .properties
                .as_ref()
                .and_then(|p| p.lease_state.as_ref())
                .is_some_and(held);
            infos.push(KeyInfo::new(
                key,
                record.fence,
                leased.then(|| record.holder()),
            ));
        }
        infos.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(infos)
    }
}
