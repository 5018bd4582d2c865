//! The [`Backend`] implementation and the lock blob as this process last
//! saw it (see the crate docs for the protocol; the acquisition's steps
//! are in `acquire.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use azure_core::http::{Etag, RequestContent, StatusCode};
use azure_storage_blob::models::{
    BlobClientBreakLeaseOptions, BlobClientGetPropertiesOptions,
    BlobClientGetPropertiesResultHeaders, BlobContainerClientListBlobsOptions,
    BlockBlobClientUploadOptions, LeaseState, ListBlobsIncludeItem,
};
use azure_storage_blob::{BlobClient, BlobContainerClient};
use futures::TryStreamExt;
use leasehold::{
    backend::{AcquireOutcome, AcquireRequest, Backend, Capabilities, Lease},
    HolderInfo, Key, KeyInfo, Result,
};

use crate::builder::{self, AzureBackendBuilder};
use crate::error::{RequestError, Secrets, NAME};
use crate::record::Record;
use leasehold::backend::names;
use leasehold::backend::shared_builder::shared_capabilities;

use crate::{epoch, record, MAX_TTL, MIN_TTL};

/// A lock blob as last seen by this process.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    pub(crate) etag: String,
    pub(crate) record: Record,
    /// Whether it was leased (by anyone) then.
    pub(crate) leased: bool,
    /// The epoch of the container this blob (with this ETag) is known to be
    /// in: the one the marker named when read after the blob was, kept
    /// along this process's own writes on it (see the protocol). Never
    /// taken from the record: a copy of the container (a restored backup)
    /// carries records of the old epoch into a new container.
    pub(crate) container: Option<u64>,
}

impl Snapshot {
    fn new(etag: String, record: Record, leased: bool) -> Self {
        Snapshot {
            etag,
            record,
            leased,
            container: None,
        }
    }
}

/// What reading a lock blob found.
pub(crate) enum LockBlob {
    Found(Box<Snapshot>),
    NoBlob,
    NoContainer,
}

/// How many records a backend remembers by ETag (see the protocol).
const RECORD_CACHE_LIMIT: usize = 4096;

/// The Azure Blob Storage [`Backend`]. See the [crate docs](crate) for the
/// protocol. Cheap to clone; clones share one HTTP client.
#[derive(Clone)]
pub struct AzureBackend {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) container: BlobContainerClient,
    pub(crate) container_name: String,
    pub(crate) prefix: String,
    pub(crate) secrets: Secrets,
    /// Records this process wrote or read, by blob name: (ETag, record).
    pub(crate) records: Mutex<HashMap<String, Snapshot>>,
    /// The max TTL this backend records in a marker it writes.
    pub(crate) max_ttl: std::time::Duration,
    /// The container's epoch as last learnt.
    pub(crate) epoch: Mutex<Option<epoch::Known>>,
    /// What using the backend may do to the container.
    pub(crate) creation: leasehold::Creation,
    /// Whether [`open_store`](AzureBackend::open_store) created the store
    /// (its first call: see `Backend::created_at_open`).
    pub(crate) created: std::sync::OnceLock<bool>,
}

impl std::fmt::Debug for AzureBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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

    /// The builder [`from_url`](Self::from_url) builds: the container,
    /// prefix and store max TTL from `url`, credentials from the
    /// environment; for adding pipeline policies before building.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](leasehold::Error::InvalidInput) for a
    /// malformed URL.
    pub fn builder_from_url(url: &str) -> Result<AzureBackendBuilder> {
        let parsed = builder::parse_url(url)?;
        let mut builder = AzureBackendBuilder::new()
            .container(parsed.container)
            .prefix(parsed.prefix);
        if let Some(max_ttl) = parsed.max_ttl {
            builder = builder.max_ttl(max_ttl);
        }
        Ok(builder.with_env())
    }

    pub(crate) fn new(
        container: BlobContainerClient,
        container_name: String,
        prefix: String,
        secrets: Secrets,
        max_ttl: std::time::Duration,
        creation: leasehold::Creation,
    ) -> Self {
        AzureBackend {
            inner: Arc::new(Inner {
                container,
                container_name,
                prefix,
                secrets,
                records: Mutex::new(HashMap::new()),
                max_ttl,
                epoch: Mutex::new(None),
                creation,
                created: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The container's store epoch as this backend last learnt it (reading
    /// the marker on first use and whenever a request finds that the
    /// container or its marker changed), with its age as of now; `None`
    /// before the first acquisition.
    pub fn epoch(&self) -> Option<leasehold::backend::StoreEpoch> {
        self.known_epoch()
    }

    /// Looks for the container and its epoch marker now, creating them as
    /// the backend's [`creation`](crate::AzureBackendBuilder::creation)
    /// allows (building sends nothing), and returns the container's epoch
    /// (also what [`epoch`](Self::epoch) says from now on).
    ///
    /// # Errors
    /// [`Error::NoStore`](leasehold::Error::NoStore) with
    /// [`Creation::Never`](leasehold::Creation::Never) when the container
    /// does not exist; backend failures.
    ///
    /// # Cancel safety
    /// Cancel safe: a container or marker created meanwhile is found by
    /// the next call.
    pub async fn open_store(&self) -> Result<leasehold::backend::StoreEpoch> {
        let (epoch, created) = self.learn_epoch_creating(self.inner.creation).await?;
        let _ = self.inner.created.set(created);
        Ok(epoch)
    }

    /// The SDK's client for the container, for anything leasehold does not
    /// do. Writing to lock blobs or the epoch marker with it breaks the
    /// protocol.
    pub fn container_client(&self) -> &BlobContainerClient {
        &self.inner.container
    }

    /// The container's name.
    pub fn container(&self) -> &str {
        &self.inner.container_name
    }

    /// Deletes the container with every lock blob and its epoch marker: every
    /// holder is told lost at its next renewal, and the container's next
    /// use starts a new store epoch (tokens above all earlier ones, after a
    /// quarantine of one max TTL). For tests and teardown.
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

    pub(crate) fn blob(&self, key: &Key) -> (String, BlobClient) {
        let name = names::object_name(&self.inner.prefix, key);
        let client = self.inner.container.blob_client(&name);
        (name, client)
    }

    pub(crate) fn err(&self, e: azure_core::Error) -> RequestError {
        RequestError::new(e, &self.inner.secrets)
    }

    pub(crate) fn cached(&self, blob: &str) -> Option<Snapshot> {
        let records = self.inner.records.lock().unwrap_or_else(|e| e.into_inner());
        records.get(blob).cloned()
    }

    pub(crate) fn remember(&self, blob: &str, snapshot: Option<Snapshot>) {
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

    pub(crate) fn forget_lease(&self, blob: &str) {
        let mut records = self.inner.records.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = records.get_mut(blob) {
            s.leased = false;
        }
    }

    /// Reads a lock blob's properties (with `lease_id`, 412 says the lease
    /// is not ours): `Err(missing)` if Azure says the blob or its whole
    /// container does not exist (by its error code). A bare 404 without an
    /// Azure error code is an error, never "no blob".
    async fn properties(
        &self,
        blob: &BlobClient,
        lease_id: Option<&str>,
    ) -> std::result::Result<std::result::Result<Properties, Missing>, RequestError> {
        let options = BlobClientGetPropertiesOptions {
            lease_id: lease_id.map(str::to_string),
            ..Default::default()
        };
        match blob.get_properties(Some(options)).await {
            Ok(resp) => Ok(Ok(Properties {
                etag: resp
                    .etag()
                    .ok()
                    .flatten()
                    .map(|e| e.to_string())
                    .unwrap_or_default(),
                record: Record::from_metadata(&resp.metadata().unwrap_or_default()),
                state: resp.lease_state().ok().flatten(),
            })),
            Err(e) => {
                let e = self.err(e);
                if e.code_is("ContainerNotFound") {
                    Ok(Err(Missing::Container))
                } else if e.is_not_found() {
                    Ok(Err(Missing::Blob))
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Reads a lock blob's properties: (ETag, record, held?). `None` if Azure
    /// says the blob (or container) does not exist. With `lease_id`, 412
    /// says the lease is not ours.
    ///
    /// Held means leased or *breaking*: a breaking lease is its holder's
    /// until the break period ends (nobody else can take it, and the record
    /// cannot be written).
    pub(crate) async fn read(
        &self,
        blob: &BlobClient,
        lease_id: Option<&str>,
    ) -> std::result::Result<Option<(String, Record, bool)>, RequestError> {
        Ok(self.properties(blob, lease_id).await?.ok().map(|p| {
            let leased = p.state.as_ref().is_some_and(held);
            (p.etag, p.record, leased)
        }))
    }

    /// Reads a lock blob for an acquisition: what it holds, or whether the
    /// blob or its whole container is missing (by Azure's error code).
    pub(crate) async fn read_lock(
        &self,
        blob: &BlobClient,
    ) -> std::result::Result<LockBlob, RequestError> {
        Ok(match self.properties(blob, None).await? {
            Ok(p) => {
                let leased = p.state.as_ref().is_some_and(held);
                LockBlob::Found(Box::new(Snapshot::new(p.etag, p.record, leased)))
            }
            Err(Missing::Container) => LockBlob::NoContainer,
            Err(Missing::Blob) => LockBlob::NoBlob,
        })
    }

    /// The lease state of a lock blob and the lease tag its record names;
    /// `None` if the blob does not exist.
    pub(crate) async fn lease_state(
        &self,
        blob: &BlobClient,
    ) -> std::result::Result<Option<(Option<LeaseState>, Option<String>)>, RequestError> {
        Ok(self
            .properties(blob, None)
            .await?
            .ok()
            .map(|p| (p.state, p.record.lease)))
    }

    /// Creates a lock blob with an empty record (no epoch, fence 0), never
    /// overwriting an existing one. `Some` with its snapshot when this call
    /// created it, `None` when someone else had; `ContainerNotFound` is an
    /// error the caller looks at.
    pub(crate) async fn create_blob(
        &self,
        blob: &BlobClient,
    ) -> std::result::Result<Option<Snapshot>, RequestError> {
        let record = Record::default();
        let options = BlockBlobClientUploadOptions {
            if_none_match: Some(Etag::from("*")),
            metadata: Some(record.to_metadata()),
            ..Default::default()
        };
        match blob
            .upload(RequestContent::from(Vec::<u8>::new()), Some(options))
            .await
        {
            Ok(resp) => Ok(resp
                .etag
                .map(|etag| Snapshot::new(etag.to_string(), record, false))),
            Err(e) => {
                let e = self.err(e);
                // Someone else created it first (409 BlobAlreadyExists, or
                // 412 for If-None-Match); a leased blob answers 412 too.
                if e.is(StatusCode::Conflict) || e.is(StatusCode::PreconditionFailed) {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// The store is not in the epoch asked for: learn the current one
    /// (creating the container and marker if they are gone) and say so.
    pub(crate) async fn other_epoch(&self, blob: &str) -> Result<AcquireOutcome> {
        self.remember(blob, None);
        Ok(AcquireOutcome::OtherEpoch(self.learn_epoch().await?))
    }
}

/// Whether a blob in lease state `state` is held by someone: leased, or
/// leased and breaking (until the break period ends).
/// A lock blob's properties as read.
struct Properties {
    etag: String,
    record: Record,
    state: Option<LeaseState>,
}

/// What is missing where a lock blob was looked for.
enum Missing {
    Container,
    Blob,
}

pub(crate) fn held(state: &LeaseState) -> bool {
    matches!(state, LeaseState::Leased | LeaseState::Breaking)
}

pub(crate) fn lease_seconds(ttl: std::time::Duration) -> i32 {
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
        let max_ttl = self
            .known_epoch()
            .map_or(self.inner.max_ttl, |e| e.max_ttl)
            .clamp(MIN_TTL, MAX_TTL);
        // An acquisition writes the record (with the next token), then
        // takes the lease: a read in between shows the token, unleased.
        shared_capabilities(MIN_TTL, max_ttl).token_visible_before_holder(true)
    }

    /// The epoch [`open_store`](AzureBackend::open_store) learnt, if it
    /// was called (building sends nothing).
    fn epoch_at_open(&self) -> Option<leasehold::backend::StoreEpoch> {
        self.known_epoch()
    }

    /// Whether [`open_store`](AzureBackend::open_store) created the store
    /// (its conditional write of the epoch marker was the one that stood);
    /// `None` if it was not called.
    fn created_at_open(&self) -> Option<bool> {
        self.inner.created.get().copied()
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        self.acquire(req).await
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
            let tag = record::lease_tag(&lease.lease_id);
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
            Ok(Some((_, record, leased))) => record.info(key.clone(), leased),
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
            infos.push(record.info(key, leased)?);
        }
        infos.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(infos)
    }

    async fn record_run(&self, lease: &Lease, run: &leasehold::RunRecord) -> Result<()> {
        self.write_run(lease, run).await
    }
}
