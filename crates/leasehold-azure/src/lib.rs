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
//! * **Setup, lazily.** A request answered 404 `ContainerNotFound` creates the
//!   container (an existing one is fine); 404 `BlobNotFound` creates the lock
//!   blob with `If-None-Match: *`, so an existing blob (and its counter) is
//!   never overwritten. The request is then sent again.
//! * **Acquire** = *Lease Blob* `acquire` with the request's lease id as the
//!   proposed id and the TTL as duration (15-60 s, as Azure allows; whole
//!   seconds, rounded up). 409 means someone else holds it: the answer is
//!   *held*, with the holder read from the metadata (one *Get Blob
//!   Properties*). Asking again with the same id succeeds, so a retry after
//!   an ambiguous failure is safe.
//! * **Fencing.** Once the lease is ours, one conditional *Set Blob Metadata*
//!   (`x-ms-lease-id` = ours, `If-Match` = the ETag the record was read
//!   with) writes fence + 1, the owner (host, pid, label), the user data, the
//!   acquisition time, the TTL and a one-way tag of the lease id, all in one
//!   request; the grant is returned only after it succeeded. The record is
//!   read with *Get Blob Properties* unless this process already knows the
//!   record for the ETag the acquire answered with (lease operations do not
//!   change a blob's ETag), so a warm uncontended acquire + release is three
//!   requests. If the record already carries our lease id's tag, the
//!   acquisition was a retry of one that was recorded: its token is returned
//!   and nothing is written. 412 `ConditionNotMet` (the record changed, e.g.
//!   our own earlier write whose answer was lost) re-reads and retries; a
//!   lost lease (412 lease errors) starts the attempt over.
//! * **Renew** = *Lease Blob* `renew`. 404 (blob or container gone), 409
//!   (another lease id, no lease, lease broken) and 412 are a definitive loss
//!   ([`LossReason::Revoked`](leasehold::LossReason::Revoked)); 408, 429,
//!   5xx, timeouts and connection errors are retryable failures.
//! * **Release** = *Lease Blob* `release`; the blob stays, since it carries
//!   the counter. 404/409/412 mean the lease was not ours.
//! * **Break** = read the record, then *Lease Blob* `break` with period 0 if
//!   the blob is leased; returns the holder the record named.
//! * **Inspect / list** = *Get Blob Properties* / *List Blobs* (with
//!   metadata) under the prefix: the lease state says whether the key is
//!   held, the metadata by whom and the last token. Azure does not say when a
//!   lease runs out, so `expires_in` is unknown. Just after a new holder's
//!   acquire and before its metadata write, the record still names the
//!   previous holder.
//!
//! Fencing tokens never go back: only a holder of the lease writes the
//! record, always conditionally on the ETag it read, and lock blobs are
//! never deleted. Deleting a lock blob (or its container) by hand resets its
//! counter: don't.
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
    BlobClientAcquireLeaseOptions, BlobClientAcquireLeaseResultHeaders,
    BlobClientBreakLeaseOptions, BlobClientGetPropertiesOptions,
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
    records: Mutex<HashMap<String, (String, Record)>>,
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
        let (container, prefix) = builder::parse_url(url)?;
        AzureBackendBuilder::new()
            .container(container)
            .prefix(prefix)
            .with_env()
            .build()
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
                if e.is(StatusCode::NotFound) {
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

    fn cached(&self, blob: &str, etag: &str) -> Option<Record> {
        let records = self.inner.records.lock().unwrap_or_else(|e| e.into_inner());
        records
            .get(blob)
            .filter(|(e, _)| e == etag)
            .map(|(_, r)| r.clone())
    }

    fn remember(&self, blob: &str, etag: Option<String>, record: &Record) {
        let mut records = self.inner.records.lock().unwrap_or_else(|e| e.into_inner());
        match etag {
            Some(etag) => {
                if records.len() >= RECORD_CACHE_LIMIT {
                    records.clear();
                }
                records.insert(blob.to_string(), (etag, record.clone()));
            }
            None => {
                records.remove(blob);
            }
        }
    }

    /// Reads a lock blob's properties: (ETag, record, leased?). `None` if the
    /// blob (or container) does not exist. With `lease_id`, 412 says the
    /// lease is not ours.
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
                let leased = matches!(resp.lease_state(), Ok(Some(LeaseState::Leased)));
                Ok(Some((
                    etag.unwrap_or_default(),
                    Record::from_metadata(&meta),
                    leased,
                )))
            }
            Err(e) => {
                let e = self.err(e);
                if e.is(StatusCode::NotFound) {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Creates the lock blob (and, if needed, the container), never
    /// overwriting an existing blob.
    async fn create_blob(
        &self,
        blob: &BlobClient,
        container_missing: bool,
    ) -> std::result::Result<(), RequestError> {
        if container_missing {
            if let Err(e) = self.inner.container.create(None).await {
                let e = self.err(e);
                if !e.is(StatusCode::Conflict) {
                    return Err(e);
                }
            }
            tracing::debug!(container = %self.inner.container_name, "created container");
        }
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

    /// Writes the acquisition's record under the lease just taken. `Ok(None)`:
    /// the lease was lost meanwhile; start over.
    async fn record_acquisition(
        &self,
        req: &AcquireRequest,
        name: &str,
        blob: &BlobClient,
        acquire_etag: Option<String>,
    ) -> std::result::Result<Option<u64>, RequestError> {
        let tag = names::lease_tag(&req.lease_id);
        let lease_id = req.lease_id.as_str();
        let mut known = acquire_etag.and_then(|e| self.cached(name, &e).map(|r| (e, r)));
        for _ in 0..4 {
            let (etag, current) = match known.take() {
                Some(k) => k,
                None => match self.read(blob, Some(lease_id)).await {
                    Ok(Some((etag, record, _))) => (etag, record),
                    Ok(None) => return Ok(None),
                    Err(e) if e.is(StatusCode::PreconditionFailed) => return Ok(None),
                    Err(e) => return Err(e),
                },
            };
            if current.lease.as_deref() == Some(tag.as_str()) {
                // A retry of an acquisition already recorded.
                self.remember(name, Some(etag), &current);
                return Ok(Some(current.fence));
            }
            let next = Record {
                fence: current.fence + 1,
                lease: Some(tag.clone()),
                owner: Some(req.owner.clone()),
                data: req.data.clone(),
                acquired_at_ms: Some(names::now_ms()),
                ttl_ms: Some(req.ttl.as_millis() as u64),
            };
            let options = BlobClientSetMetadataOptions {
                lease_id: Some(lease_id.to_string()),
                if_match: Some(Etag::from(etag.as_str())),
                ..Default::default()
            };
            match blob.set_metadata(&next.to_metadata(), Some(options)).await {
                Ok(resp) => {
                    let etag = resp
                        .headers()
                        .get_optional_str(&azure_core::http::headers::ETAG)
                        .map(str::to_string);
                    self.remember(name, etag, &next);
                    return Ok(Some(next.fence));
                }
                Err(e) => {
                    let e = self.err(e);
                    self.remember(name, None, &next);
                    if e.code_is("ConditionNotMet") {
                        continue; // re-read: maybe our own earlier write
                    }
                    if e.is(StatusCode::PreconditionFailed) || e.is(StatusCode::NotFound) {
                        return Ok(None); // the lease is gone
                    }
                    return Err(e);
                }
            }
        }
        Err(RequestError::new(
            azure_core::Error::with_message(
                azure_core::error::ErrorKind::Other,
                "the lock blob's metadata kept changing under our lease",
            ),
            &[],
        ))
    }

    async fn release_quietly(&self, blob: &BlobClient, lease_id: &str) {
        if let Err(e) = blob.release_lease(lease_id.to_string(), None).await {
            tracing::debug!(error = %self.err(e), "releasing an unrecorded lease failed");
        }
    }
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
        let (name, blob) = self.blob(&req.key);
        let duration = lease_seconds(req.ttl);
        for _ in 0..4 {
            let options = BlobClientAcquireLeaseOptions {
                proposed_lease_id: Some(req.lease_id.as_str().to_string()),
                ..Default::default()
            };
            let etag = match blob.acquire_lease(duration, Some(options)).await {
                Ok(resp) => resp.etag().ok().flatten().map(|e| e.to_string()),
                Err(e) => {
                    let e = self.err(e);
                    if e.is(StatusCode::Conflict) {
                        let holder = match self.read(&blob, None).await {
                            Ok(Some((_, record, true))) => Some(record.holder()),
                            _ => None,
                        };
                        return Ok(AcquireOutcome::Held(holder));
                    }
                    if e.is(StatusCode::NotFound) {
                        let container_missing = e.code_is("ContainerNotFound");
                        self.create_blob(&blob, container_missing)
                            .await
                            .map_err(|e| e.into_error(OP))?;
                        continue;
                    }
                    return Err(e.into_error(OP));
                }
            };
            match self.record_acquisition(req, &name, &blob, etag).await {
                Ok(Some(fence)) => return Ok(AcquireOutcome::Acquired(Grant::new(fence))),
                Ok(None) => continue,
                Err(e) => {
                    // No grant without a record: give the lease back now
                    // unless a retry may still record it.
                    let err = e.into_error(OP);
                    if !err.is_retryable() {
                        self.release_quietly(&blob, req.lease_id.as_str()).await;
                    }
                    return Err(err);
                }
            }
        }
        Err(leasehold::Error::backend(
            NAME,
            OP,
            true,
            "the lock blob kept disappearing or losing its lease during acquisition",
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
        let (_, blob) = self.blob(&lease.key);
        blob.release_lease(lease.lease_id.as_str().to_string(), None)
            .await
            .map(|_| ())
            .map_err(|e| self.err(e).into_lease_error("release", &lease.key))
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
        let holder = match self.read(&blob, None).await {
            Ok(Some((_, record, true))) => record.holder(),
            Ok(_) => return Ok(None),
            Err(e) => return Err(e.into_error(OP)),
        };
        let options = BlobClientBreakLeaseOptions {
            break_period: Some(0),
            ..Default::default()
        };
        match blob.break_lease(Some(options)).await {
            Ok(_) => Ok(Some(holder)),
            Err(e) => {
                let e = self.err(e);
                // The lease ended (or the blob went) between read and break.
                if e.is(StatusCode::Conflict) || e.is(StatusCode::NotFound) {
                    Ok(None)
                } else {
                    Err(e.into_error(OP))
                }
            }
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        const OP: &str = "list";
        let options = BlobContainerClientListBlobsOptions {
            prefix: Some(names::list_prefix(&self.inner.prefix, prefix)),
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
                .is_some_and(|s| *s == LeaseState::Leased);
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
