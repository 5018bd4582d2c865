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
//! exclusion. One more blob, the container's *epoch marker* (its metadata
//! `leaseholdprotocol` is the store's
//! [protocol version](leasehold::backend::protocol); missing on a marker of
//! a build from before versions were recorded: protocol 1; a newer one is
//! refused with
//! [`Error::UnsupportedProtocol`](leasehold::Error::UnsupportedProtocol)
//! wherever the marker is read to learn the epoch, before anything is
//! written; any write to the marker changes its `Last-Modified`, so a
//! protocol change is always a new epoch here), says which
//! store epoch the container is (see
//! [Store epoch and quarantine](#store-epoch-and-quarantine)).
//!
//! * **Setup, lazily.** The container and its marker are created by the
//!   first acquisition that finds them missing (below). Many processes may
//!   do so at once: a *Create Container* answered 409
//!   `ContainerAlreadyExists` is someone else's creation and is used; only
//!   one marker upload wins (`If-None-Match: *`) and the others read it, so
//!   every process learns the same epoch (test: leasehold-cli's
//!   `tests/concurrent_open.rs`, ten processes on five new containers). A
//!   container answered 409 `ContainerBeingDeleted` (a name deleted moments
//!   ago) is a retryable failure. A lock blob answered
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
//!
//!   Between steps 3 and 4 a read shows the new token on a blob not yet
//!   leased: the backend says so
//!   ([`token_visible_before_holder`](leasehold::backend::Capabilities)),
//!   and a reader of a reader-writer lock that reads the writer's key as
//!   free takes it once (and gives it back) rather than trust the read: its
//!   step 3 changes the ETag, so the writer's step 4 fails and it starts
//!   over with a greater token (test: `tests/defects.rs`,
//!   `a_reader_between_a_writers_record_and_its_lease_does_not_get_its_token`).
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
//!   one [confirmation window](leasehold::CONFIRMATION_WINDOW) (60 s, +0.1 %)
//!   has passed since it first saw it,
//!   less the epoch's *age*: the larger of the marker's and the container's age
//!   (`Date` minus `Last-Modified` of *Get Blob Properties* / *Get
//!   Container Properties*, less one second because both are whole
//!   seconds; the container is read only when the marker is younger than
//!   the max TTL). Why that is safe: a holder in a deleted container
//!   renewed last before the deletion, so its guard stops its command at
//!   most one window (less its safety margin) after the deletion, whatever
//!   max TTL either container records (every Azure lease is at most 60 s,
//!   but a re-creator used to quarantine for its own max TTL, 15 s with
//!   `?max_ttl=15s`, while a holder of the lost container trusted a 60 s
//!   lease; test `store_loss_quarantine_outlasts_a_longer_holder`,
//!   `tests/conformance.rs`); the current
//!   container was created after the deletion, at or before its
//!   `Last-Modified`, and the marker is in it, so the container is at least
//!   as old as either age says. A container older than a window (every
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
//!   Azurite does not do it). So a new container waits a window once,
//!   for whoever uses it first; the status line of `leasehold run` shows
//!   it.
//!
//! What this trusts: that the service's `Date` and `Last-Modified` clocks
//! agree to within a second; that ETags never repeat on a blob name. (The
//! max TTL recorded in the marker bounds the container's leases only; the
//! quarantine no longer depends on it, so a re-created container recording
//! a shorter one than the lost container had is harmless.)
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
//! **Proven epochs, and looking without writing.** An epoch is settled at
//! once, in every process, when its creator states that no store existed
//! there before (`leasehold init --new`): the marker blob of a container
//! created by a backend built with `Creation::NewProven` carries the
//! metadata `leaseholdproven=1` (only when that very call created the
//! container); it is reported as
//! [`StoreEpoch::proven`](leasehold::backend::StoreEpoch::proven). A backend built
//! with `Creation::Never` (`leasehold list`, `status`, `leader`) writes
//! nothing: a missing container is `Error::NoStore` from
//! `AzureBackend::open_store`, and nothing is written. Test:
//! leasehold-cli's `tests/init_and_look.rs`.
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

mod acquire;
mod backend;
mod builder;
mod credential;
mod epoch;
mod error;
mod record;
mod runs;

pub use backend::AzureBackend;
pub use builder::{
    dev_connection_string, AzureBackendBuilder, API_VERSION, DEV_ACCOUNT, DEV_ENDPOINT, DEV_KEY,
};

/// Shortest lease Azure grants.
pub const MIN_TTL: std::time::Duration = std::time::Duration::from_secs(15);
/// Longest finite lease Azure grants.
pub const MAX_TTL: std::time::Duration = std::time::Duration::from_secs(60);
