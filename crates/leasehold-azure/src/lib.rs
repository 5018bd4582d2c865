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
//! key's record (fencing counter, the store epoch it was written in, owner,
//! data). Azure's blob lease is the lock: the service alone decides who
//! holds it and for how long, so no clock of ours is trusted for
//! exclusion. One more blob, the container's *epoch marker*, says which
//! store epoch the container is (see
//! [Store epoch and quarantine](#store-epoch-and-quarantine)).
//!
//! * **Setup, lazily.** The container and its marker are created by the
//!   first acquisition that finds them missing (below). A lock blob answered
//!   404 `BlobNotFound` is created with an empty record and `If-None-Match:
//!   *`, so an existing blob (and its counter) is never overwritten.
//! * **Acquire** (in the epoch the request names) writes the record first,
//!   then takes the lease on exactly that record:
//!   1. Know the blob's ETag, record and lease state: from this process's
//!      memory if it saw the blob free (or leased by this very lease id)
//!      last, else one *Get Blob Properties*. Leased by someone else: the
//!      answer is *held*, with the holder from the record, for one request.
//!   2. Unless this process knows that blob state (that ETag) to be in the
//!      container of the request's epoch, read the marker (one request) and
//!      go on only if it names that epoch; see below why a read *after* the
//!      blob's is the proof.
//!   3. *Set Blob Metadata* with `If-Match` = that ETag and no lease id:
//!      fence = `next_token(fence, epoch)` (one more, or the epoch's first
//!      token if the record is of an earlier epoch), the epoch, the owner
//!      (host, pid, label), the user data, the acquisition time, the TTL and
//!      a one-way tag of the lease id, in one request. Azure refuses it
//!      (412) if the blob is leased meanwhile or the record changed.
//!   4. *Lease Blob* `acquire` with the request's lease id as the proposed id,
//!      the TTL as duration (15-60 s, whole seconds rounded up) and
//!      `If-Match` = the ETag the write returned: the lease is granted only
//!      on our record, and while it lasts nobody can change the record.
//!      So whenever the blob is leased, its record names the holder.
//!
//!   Any 409/412/404 `BlobNotFound` on the way re-reads and starts over; a
//!   404 `ContainerNotFound`, a record of a later epoch or a marker naming
//!   another epoch answers "another epoch" (after learning the current one)
//!   and grants nothing. A record that already carries our lease id's tag
//!   is a retry of ours (say, our write went through but its answer was
//!   lost): step 3 is skipped and its token returned; asking Azure again
//!   with the same lease id succeeds, so retries after ambiguous failures
//!   are safe.
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
//! * **Record a run** ([run records](leasehold::backend#run-records)) =
//!   *Get Blob Properties* with our lease id (412 unless our lease is the
//!   blob's active lease: released, broken, expired or taken is a loss),
//!   then *Set Blob Metadata* with our lease id and `If-Match` = the ETag
//!   read: the same record with `leaseholdlastrun` (and, for a success,
//!   `leaseholdlastsuccess`) replaced. The end time is the read's `Date`:
//!   the service's clock, in whole seconds. A run whose lease is no longer
//!   ours is not written. Every acquisition's record write carries the run
//!   records over, so they survive releases, expiries and breaks.
//! * **Inspect / list** = *Get Blob Properties* / *List Blobs* (with
//!   metadata) under the prefix: the lease state says whether the key is
//!   held, the metadata by whom and the last token. Azure does not say when a
//!   lease runs out, so `expires_in` is unknown. The marker is no key and
//!   is never listed.
//!
//! Fencing tokens never go back: every record write is conditional on the
//! ETag of the record it increments (a grant's token may skip numbers when
//! a written record loses the race for the lease), lock blobs are never
//! deleted, and a new container starts every key above every token of an
//! earlier one (next section).
//!
//! # Requests
//! Lease operations do not change a blob's ETag, so a process that saw a
//! key's blob last (its own release) needs no read. Per uncontended
//! acquire + release, measured in `tests/azure.rs` (`request_counts`):
//!
//! | case | before store epochs | now |
//! |------|--------------------:|----:|
//! | warm: this process released the key last | 3 (write, acquire, release) | 3 |
//! | cold: a new process (each `leasehold run`), key used before | 4 (read, write, acquire, release) | 5 (read, marker, write, acquire, release) |
//! | after another process held the key | 5 (write refused on the stale ETag, read, write, acquire, release) | 6 (refused write, read, marker, write, acquire, release) |
//! | a key's first grant (process knows the epoch) | 6 (read, create, read, write, acquire, release) | 6 (read, create, marker, write, acquire, release) |
//! | attempt on a held key | 1 | 1 (3 in a new process: read, marker, read) |
//!
//! Renewal stays one request. The marker is read when the epoch is news (a
//! new process, or a container that changed; plus *Get Container
//! Properties* while the marker is younger than the max TTL) and before a
//! write on a blob state this process read rather than wrote itself (a
//! key's first grant, a handoff from another process).
//! Creating a container costs the failed request, *Create Container*, a
//! marker read (404), a 1 s wait, the marker's upload and its read.
//!
//! # Store epoch and quarantine
//! The container is the store: deleting it (or the account) loses every
//! lease and counter at once. The rules of
//! [store epochs](leasehold::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)
//! hold on Azure as follows.
//!
//! * **The marker.** An empty block blob `~leasehold-epoch` at the root of
//!   the container (whatever the prefix; `~` never occurs in a key's blob
//!   name except in `~2E`, so no key maps to it), with metadata
//!   `leaseholdmaxttlms`: the store max TTL
//!   ([`max_ttl`](AzureBackendBuilder::max_ttl), `?max_ttl=` in the URL;
//!   15-60 s, 60 s by default), recorded by whoever writes the marker; a
//!   later backend with another setting uses the recorded one. The
//!   **epoch** is the marker's `Last-Modified`, on the service's clock, in
//!   whole seconds since 2024-01-01. leasehold never writes the marker
//!   again, so anything that rewrites it (a backup copied back, a hand
//!   edit) makes a new, later epoch.
//! * **Epochs never repeat or go back.** The marker is written only after
//!   Azure answered that there is none (404 `BlobNotFound`, after creating
//!   the container if that was missing), and only after waiting a second
//!   past that answer; with `If-None-Match: *`, so one writer wins. If the
//!   written marker's `Last-Modified` is not in a later second than that
//!   answer's `Date`, it is deleted (by its ETag) and written again. Any
//!   earlier marker at this place, in this container or in a deleted one of
//!   the same name, was last modified before it (or its container) was
//!   deleted, which was before the 404: so every new epoch is above every
//!   earlier one, even when a container is deleted and re-created within
//!   a second (as Azurite allows).
//! * **Records carry their epoch.** Every grant writes `leaseholdepoch`
//!   with the fence, and the fence is `next_token(fence, epoch)`: in a new
//!   container every key starts above `epoch << 22`, above every token of
//!   the lost one.
//! * **A grant lands only in its epoch's container.** Step 2 of *Acquire*:
//!   the marker is read *after* the blob, and the write is conditional on
//!   the ETag read *before* it. A blob exists only while its container does,
//!   and a blob in a new container never has an ETag an earlier blob had
//!   (ETags are new for every write and every blob, on Azure and Azurite),
//!   so if the write lands, the container did not change between the blob
//!   read and the write, and the marker read in between named the epoch.
//!   This process's own later writes on the blob (If-Match the ETag its
//!   previous write returned) inherit that proof; that is what makes the
//!   warm path free of marker reads. This also covers a container deleted
//!   and re-created between this process's read of the marker and its
//!   creation of a *new* lock blob: the new blob has no epoch and no proof,
//!   so the marker is read after creating it, and names the new epoch. A record's own epoch is never
//!   taken as proof: a copy of a container (a restored backup) carries
//!   records of the old epoch into a new container (test
//!   `a_restored_copy_of_the_container_is_a_new_epoch`).
//! * **Holders of a lost container are told at their next renewal.** A
//!   lease belongs to one blob, the blob to one container: a deleted
//!   container answers 404, a re-created blob 409 (no such lease), both a
//!   definitive loss. A marker replaced in a container that was *not*
//!   deleted (a new epoch in the same container) loses nothing: the leases
//!   in it are still Azure's and still exclusive, and the next grant of
//!   each key takes the new epoch's tokens.
//! * **Quarantine.** A process grants nothing in an epoch new to it until
//!   the max TTL (+0.1 %) has passed since it first saw it, less the
//!   epoch's *age*: the larger of the marker's and the container's age
//!   (`Date` minus `Last-Modified` of *Get Blob Properties* / *Get
//!   Container Properties*, less one second because both are whole
//!   seconds; the container is read only when the marker is younger than
//!   the max TTL). Why that is safe: a holder in a deleted container
//!   renewed last before the deletion, so its guard stops its command at
//!   most one TTL (at most the max TTL) after the deletion; the current
//!   container was created after the deletion, at or before its
//!   `Last-Modified`, and the marker is in it, so the container is at least
//!   as old as either age says. A container older than the max TTL (every
//!   container after its first minute) costs no wait at all, for any new
//!   process; a container re-created without leasehold (by hand, without
//!   a marker) gets its marker from the first acquisition and is aged by
//!   its own `Last-Modified`.
//!
//!   *When can the quarantine be skipped?* Only by that age: not because
//!   "this process created the container and never saw an older epoch".
//!   Process A holds a lease in container `locks`; an operator deletes
//!   `locks`; process B, which never saw it, finds no container and
//!   creates `locks` again: B created it and saw no older epoch, yet A's
//!   command runs until A's next renewal. Nothing B can read records that
//!   an older `locks` existed (a deleted container leaves nothing in the
//!   data plane; container soft delete is optional and listing deleted
//!   containers needs account-wide rights), and Azure's refusal to reuse a
//!   deleted container's name for 30 s is shorter than a 60 s lease (and
//!   Azurite does not do it). So a new container waits its max TTL once,
//!   for whoever uses it first; the status line of `leasehold run` shows
//!   it, and `?max_ttl=15s` shortens it for tests.
//!
//! What this trusts: that the service's `Date` and `Last-Modified` clocks
//! agree to within a second; that ETags never repeat on a blob name; that
//! every user of a container uses the max TTL recorded in its marker (a
//! re-created container recording a *shorter* one than the lost container
//! had would shorten the quarantine below the lost leases; leasehold
//! processes that saw the longer one keep waiting the longer one).
//!
//! Not covered, and left to the operator: a single lock blob deleted by
//! hand (its counter starts again at its epoch's base: tokens of that key
//! repeat, and a waiter may be granted before the holder's next renewal);
//! blobs restored *in place* to earlier versions (point-in-time restore,
//! blob versions, soft-deleted blobs undeleted): their counters go back
//! while the marker, unchanged, keeps the epoch; and a deleted container
//! restored (container soft delete) after a new one of that name was used:
//! processes that saw the newer epoch refuse the older one ("went back"),
//! new processes accept it and may repeat its tokens.
//!
//! # Blob names
//! The blob of key `K` is `PREFIX/` + `K` with every `.` that ends a
//! `/`-separated segment written `~2E` (Azure mishandles names and segments
//! ending in `.`), or just that without a prefix. Keys never contain `~`, so
//! the mapping reverses by replacing `~2E` with `.`: `import-A` →
//! `import-A`, `jobs/v2./x` → `jobs/v2~2E/x`.
//!
//! # Metadata
//! Lock blobs: `leaseholdfence`, `leaseholdepoch`, `leaseholdlease`,
//! `leaseholdhost`, `leaseholdpid`, `leaseholdlabel`, `leaseholddata`,
//! `leaseholdacquiredms`, `leaseholdttlms`, `leaseholdlastsuccess`,
//! `leaseholdlastrun` (run records as JSON). The marker:
//! `leaseholdmaxttlms`. Text values are percent-encoded UTF-8 (header
//! values must be ASCII).
//!
//! # Store URL
//! `azblob://CONTAINER[/PREFIX][?max_ttl=DURATION]`: `max_ttl` (15s to 60s,
//! e.g. `15s`) is the store max TTL a marker written by this backend
//! records (see above). Credentials never go in the URL.
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
mod epoch;
mod names;
mod runs;

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

/// A lock blob as last seen by this process.
#[derive(Debug, Clone)]
struct Snapshot {
    etag: String,
    record: Record,
    /// Whether it was leased (by anyone) then.
    leased: bool,
    /// The epoch of the container this blob (with this ETag) is known to be
    /// in: the one the marker named when read after the blob was, kept
    /// along this process's own writes on it (see the protocol). Never
    /// taken from the record: a copy of the container (a restored backup)
    /// carries records of the old epoch into a new container.
    container: Option<u64>,
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
enum LockBlob {
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
    inner: Arc<Inner>,
}

struct Inner {
    container: BlobContainerClient,
    container_name: String,
    prefix: String,
    secrets: Secrets,
    /// Records this process wrote or read, by blob name: (ETag, record).
    records: Mutex<HashMap<String, Snapshot>>,
    /// The max TTL this backend records in a marker it writes.
    max_ttl: std::time::Duration,
    /// The container's epoch as last learnt.
    epoch: Mutex<Option<epoch::Known>>,
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
            }),
        }
    }

    /// The container's store epoch as this backend last learnt it (reading
    /// the marker on first use and whenever a request finds that the
    /// container or its marker changed), with its age as of now; `None`
    /// before the first acquisition.
    pub fn epoch(&self) -> Option<leasehold::StoreEpoch> {
        self.known_epoch()
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

    /// Reads a lock blob for an acquisition: what it holds, or whether the
    /// blob or its whole container is missing (by Azure's error code).
    async fn read_lock(&self, blob: &BlobClient) -> std::result::Result<LockBlob, RequestError> {
        match blob.get_properties(None).await {
            Ok(resp) => {
                let etag = resp.etag().ok().flatten().map(|e| e.to_string());
                let meta = resp.metadata().unwrap_or_default();
                let leased = resp.lease_state().ok().flatten().is_some_and(|s| held(&s));
                Ok(LockBlob::Found(Box::new(Snapshot::new(
                    etag.unwrap_or_default(),
                    Record::from_metadata(&meta),
                    leased,
                ))))
            }
            Err(e) => {
                let e = self.err(e);
                if e.code_is("ContainerNotFound") {
                    Ok(LockBlob::NoContainer)
                } else if e.is_not_found() {
                    Ok(LockBlob::NoBlob)
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

    /// Creates a lock blob with an empty record (no epoch, fence 0), never
    /// overwriting an existing one. `Some` with its snapshot when this call
    /// created it, `None` when someone else had; `ContainerNotFound` is an
    /// error the caller looks at.
    async fn create_blob(
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
    async fn other_epoch(&self, blob: &str) -> Result<AcquireOutcome> {
        self.remember(blob, None);
        Ok(AcquireOutcome::OtherEpoch(self.learn_epoch().await?))
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
        let max_ttl = self
            .known_epoch()
            .map_or(self.inner.max_ttl, |e| e.max_ttl)
            .clamp(MIN_TTL, MAX_TTL);
        Capabilities::new(MIN_TTL, max_ttl)
            .shared_across_processes(true)
            .shared_across_machines(true)
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        const OP: &str = "acquire";
        let (name, blob) = self.blob(&req.key);
        let current = match self.known_epoch() {
            Some(epoch) => epoch,
            None => {
                // First use: read the lock blob, then the marker, so that
                // the blob is known to be in the marker's container and the
                // grant that follows needs no further check.
                let snap = match self.read_lock(&blob).await {
                    Ok(LockBlob::Found(s)) => Some(*s),
                    Ok(_) => None,
                    Err(e) => return Err(e.into_error(OP)),
                };
                let epoch = self.learn_epoch().await?;
                if let Some(mut s) = snap {
                    s.container = Some(epoch.epoch);
                    self.remember(&name, Some(s));
                }
                epoch
            }
        };
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
            let mut snap = match known.take() {
                Some(s) if !s.leased || s.record.lease.as_deref() == Some(tag.as_str()) => s,
                _ => match self.read_lock(&blob).await {
                    Ok(LockBlob::Found(s)) => *s,
                    Ok(LockBlob::NoBlob) => match self.create_blob(&blob).await {
                        Ok(Some(s)) => s,
                        Ok(None) => continue,
                        Err(e) if e.code_is("ContainerNotFound") => {
                            return self.other_epoch(&name).await
                        }
                        Err(e) => return Err(e.into_error(OP)),
                    },
                    // The container is gone: a new one is a new epoch.
                    Ok(LockBlob::NoContainer) => return self.other_epoch(&name).await,
                    Err(e) => return Err(e.into_error(OP)),
                },
            };
            // A record of a later epoch: the store moved on since we looked.
            if snap.record.epoch.is_some_and(|e| e > epoch) {
                return self.other_epoch(&name).await;
            }
            let ours = snap.record.lease.as_deref() == Some(tag.as_str());
            if snap.leased && !ours {
                let holder = snap.record.holder();
                self.remember(&name, Some(snap));
                return Ok(AcquireOutcome::Held(Some(holder)));
            }
            if snap.container != Some(epoch) {
                // Is this blob in the container of our epoch? The marker
                // read *after* the blob says so: the write below is
                // conditional on the ETag read before it, so it lands only
                // if the blob (and with it the container) is still the
                // one that was there when the marker was read.
                match self.marker_epoch().await {
                    Ok(Some(e)) if e == epoch => snap.container = Some(epoch),
                    Ok(_) => return self.other_epoch(&name).await,
                    Err(e) => return Err(e.into_error(OP)),
                }
            }
            let (etag, record) = if ours {
                // A retry of an acquisition already recorded: take (or
                // keep) the lease on that record.
                (snap.etag, snap.record)
            } else {
                let next = Record {
                    fence: leasehold::next_token(snap.record.fence, epoch),
                    epoch: Some(epoch),
                    lease: Some(tag.clone()),
                    owner: Some(req.owner.clone()),
                    data: req.data.clone(),
                    acquired_at_ms: Some(names::now_ms()),
                    ttl_ms: Some(req.ttl.as_millis() as u64),
                    last_success: snap.record.last_success.clone(),
                    last_run: snap.record.last_run.clone(),
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
                            container: Some(epoch),
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
