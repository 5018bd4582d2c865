//! [`S3Backend`]: the protocol of the crate docs, request by request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use leasehold::backend::names;
use leasehold::backend::shared_builder::{check_range, shared_capabilities};
use leasehold::backend::Observations;
use leasehold::{
    backend::{
        epoch_at, epoch_token_base, next_token, AcquireOutcome, AcquireRequest, Backend,
        Capabilities, Grant, Lease, StoreEpoch,
    },
    Error, HolderInfo, Key, KeyInfo, LossReason, Result, RunRecord,
};
use leasehold_aws::{ServiceDate, StoreSettings};

use crate::error::{code, status, BACKEND, SERVICE};
use crate::record::{nonce, unix_ms, Record, StoredLease};
use crate::{MAX_TTL, MIN_TTL};

/// Beyond this many keys remembered at once, the oldest entries are
/// forgotten (the only cost: that key's next grant reads it first).
const MAX_KNOWN: usize = 10_000;

/// A [`Backend`] on an S3 bucket (or a prefix in one). See the
/// [crate docs](crate) for the protocol, the object layout and the IAM
/// permissions.
///
/// Cheap to share behind an `Arc` (a [`leasehold::Store`] does that); one
/// backend keeps the takeover observations of every lock that uses it.
pub struct S3Backend {
    pub(crate) client: Client,
    pub(crate) bucket: String,
    /// `""` or ending in `/`.
    pub(crate) prefix: String,
    /// Region, endpoint, clocks, max TTL, creating the bucket, what opening
    /// (and any later look at the epoch) may do, the store's epoch as last
    /// read, requests sent.
    pub(crate) settings: StoreSettings,
    /// The last write this process made to each key: its ETag and record
    /// (see "Requests" in the crate docs).
    known: Mutex<HashMap<String, (String, Record)>>,
    observations: Observations,
}

impl std::fmt::Debug for S3Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Backend")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("region", &self.settings.region)
            .field("endpoint", &self.settings.endpoint)
            .finish_non_exhaustive()
    }
}

/// What a read of one object found.
pub(crate) enum Got {
    /// The object, its ETag, its `Last-Modified` and the response's `Date`.
    Found {
        etag: String,
        body: Vec<u8>,
        last_modified: Option<SystemTime>,
        date: Option<SystemTime>,
    },
    /// No such object; the response's `Date`, and when (on our clock) the
    /// answer arrived.
    Missing {
        date: Option<SystemTime>,
        arrived: Duration,
    },
    /// No such bucket.
    NoBucket,
}

/// The condition of a write.
pub(crate) enum Cond<'a> {
    /// `If-None-Match: *`: only if there is no object.
    Create,
    /// `If-Match`: only if the object's ETag is this one.
    Match(&'a str),
}

/// What a conditional write did.
pub(crate) enum Put {
    /// Written; the new ETag.
    Done(String),
    /// The condition failed (or the object is gone, for `If-Match`).
    Refused,
    /// No such bucket.
    NoBucket,
}

fn lost(lease: &Lease, why: impl Into<String>) -> Error {
    Error::LeaseLost {
        key: lease.key.to_string(),
        reason: LossReason::Revoked(why.into()),
    }
}

/// Why a lease is not ours, from the record as it is.
fn not_ours(record: &Record) -> String {
    match &record.lease {
        None => "the lease was released or broken".into(),
        Some(_) => format!(
            "the key is held by another lease (fencing token {})",
            record.fence
        ),
    }
}

fn check_ttl(ttl: Duration) -> Result<()> {
    check_range("ttl", ttl, MIN_TTL, MAX_TTL, || {
        format!("{ttl:?} is outside the S3 backend's range of {MIN_TTL:?} to {MAX_TTL:?}")
    })
}

impl S3Backend {
    pub(crate) fn new(
        client: Client,
        bucket: String,
        prefix: String,
        settings: StoreSettings,
    ) -> S3Backend {
        S3Backend {
            client,
            bucket,
            prefix,
            settings,
            known: Mutex::new(HashMap::new()),
            observations: Observations::default(),
        }
    }

    /// The bucket name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The prefix of the store's objects (`""` or ending in `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.settings.region
    }

    /// How many HTTP requests this backend has sent (every attempt,
    /// the SDK's retries included), for metrics and tests.
    pub fn requests_sent(&self) -> u64 {
        self.settings.requests.get()
    }

    /// The SDK client, for anything leasehold does not do.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The name of `key`'s object.
    pub fn object_name(&self, key: &Key) -> String {
        names::object_name(&self.prefix, key)
    }

    /// Deletes every object of this store (its prefix in the bucket), the
    /// epoch marker first, as `aws s3 rm --recursive` would: the store's
    /// data lost. For tools and tests that inject store loss; the next use
    /// starts a new epoch. Returns how many objects were deleted.
    ///
    /// # Errors
    /// [`Error::Backend`] when S3 cannot be reached or refuses.
    pub async fn delete_store(&self) -> Result<usize> {
        let mut names =
            object_names(&self.client, &self.bucket, &self.prefix, "delete store").await?;
        // The marker first, wherever it sorts: no key is granted in the old
        // epoch while the rest goes.
        let marker = format!("{}{}", self.prefix, crate::epoch::MARKER);
        names.sort_by_key(|n| *n != marker);
        for name in &names {
            self.client
                .delete_object()
                .bucket(&self.bucket)
                .key(name)
                .send()
                .await
                .map_err(|e| SERVICE.map_sdk(&self.bucket, "delete store", e))?;
        }
        self.known.lock().unwrap_or_else(|e| e.into_inner()).clear();
        Ok(names.len())
    }

    /// The store's epoch (see the crate docs), as last read when the
    /// backend was built or found the store changed; its age is as of now.
    pub fn epoch(&self) -> StoreEpoch {
        self.settings.epoch.get()
    }

    /// Reads the store's epoch again (creating the bucket and the marker
    /// if they are missing and the backend may).
    pub(crate) async fn refresh_epoch(&self) -> Result<StoreEpoch> {
        let (epoch, created) = crate::epoch::read_or_start(self).await?;
        self.settings.epoch.set(epoch.clone());
        // The first reading is the one while building.
        let _ = self.settings.created.set(created);
        Ok(epoch)
    }

    /// Adds where we tried to connect to an error from opening the store.
    pub(crate) fn connect_error(&self, err: Error) -> Error {
        self.settings
            .connect_error(err, &format!("bucket {:?}", self.bucket))
    }

    /// Reads object `name`.
    pub(crate) async fn get(&self, operation: &'static str, name: &str) -> Result<Got> {
        let date = ServiceDate::default();
        let result = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(name)
            .customize()
            .interceptor(date.clone())
            .send()
            .await;
        match result {
            Ok(out) => {
                let etag = out.e_tag().unwrap_or_default().to_string();
                let last_modified = out
                    .last_modified()
                    .and_then(|d| SystemTime::try_from(*d).ok());
                let body = out
                    .body
                    .collect()
                    .await
                    .map_err(|e| Error::backend(BACKEND, operation, true, e))?
                    .into_bytes()
                    .to_vec();
                Ok(Got::Found {
                    etag,
                    body,
                    last_modified,
                    date: date.take(),
                })
            }
            Err(err) => {
                let arrived = self.settings.clock.now();
                match err.as_service_error() {
                    Some(GetObjectError::NoSuchKey(_)) => Ok(Got::Missing {
                        date: date.take(),
                        arrived,
                    }),
                    _ if code(&err) == Some("NoSuchBucket") => Ok(Got::NoBucket),
                    _ => Err(SERVICE.map_sdk(&self.bucket, operation, err)),
                }
            }
        }
    }

    /// Writes `body` to object `name` on `cond`.
    pub(crate) async fn put(
        &self,
        operation: &'static str,
        name: &str,
        body: Vec<u8>,
        cond: Cond<'_>,
    ) -> Result<Put> {
        let mut put = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(name)
            .content_type("application/json")
            .body(ByteStream::from(body));
        put = match cond {
            Cond::Create => put.if_none_match("*"),
            Cond::Match(etag) => put.if_match(etag),
        };
        match put.send().await {
            Ok(out) => Ok(Put::Done(out.e_tag().unwrap_or_default().to_string())),
            Err(err) => match (status(&err), code(&err)) {
                // 412: the condition failed. 404 NoSuchKey: If-Match on an
                // object that is gone. 409: a concurrent conditional write
                // on the object won (S3 answers the loser this way).
                (Some(412), _)
                | (_, Some("NoSuchKey"))
                | (Some(409), Some("ConditionalRequestConflict")) => Ok(Put::Refused),
                (_, Some("NoSuchBucket")) => Ok(Put::NoBucket),
                _ => Err(SERVICE.map_sdk(&self.bucket, operation, err)),
            },
        }
    }

    /// Deletes object `name` if its ETag is `etag` (the epoch marker only:
    /// lease records are never deleted). A failed condition is not an
    /// error.
    pub(crate) async fn delete_if(&self, name: &str, etag: &str) -> Result<()> {
        match self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(name)
            .if_match(etag)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(err) if matches!(status(&err), Some(412) | Some(404)) => Ok(()),
            Err(err) => Err(SERVICE.map_sdk(&self.bucket, "open", err)),
        }
    }

    /// The record of `name` and its ETag, if there is one.
    async fn read(&self, operation: &'static str, name: &str) -> Result<Read> {
        Ok(match self.get(operation, name).await? {
            Got::Found { etag, body, .. } => Read::Found(etag, Box::new(Record::decode(&body)?)),
            Got::Missing { date, arrived } => Read::Missing { date, arrived },
            Got::NoBucket => Read::NoBucket,
        })
    }

    async fn write(
        &self,
        operation: &'static str,
        name: &str,
        record: &Record,
        cond: Cond<'_>,
    ) -> Result<Put> {
        self.put(operation, name, record.encode(), cond).await
    }

    /// This process's last write to `key`, if it still remembers it.
    fn known(&self, key: &Key) -> Option<(String, Record)> {
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key.as_str())
            .cloned()
    }

    fn remember(&self, key: &Key, etag: String, record: Record) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= MAX_KNOWN && !known.contains_key(key.as_str()) {
            if let Some(any) = known.keys().next().cloned() {
                known.remove(&any);
            }
        }
        known.insert(key.as_str().to_string(), (etag, record));
    }

    fn forget(&self, key: &Key) {
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key.as_str());
    }

    /// How long a holder's version must stay unchanged before a takeover.
    fn observation_wait(&self, holder_ttl: Duration) -> Duration {
        holder_ttl + holder_ttl / 1000 + self.settings.margin
    }

    /// `base` granted to `req` with `fence`, in `epoch`.
    fn granted(&self, base: &Record, req: &AcquireRequest, fence: u64, epoch: u64) -> Record {
        let now = unix_ms((self.settings.wall)());
        let ttl_ms = req.ttl.as_millis() as u64;
        Record {
            nonce: nonce(),
            epoch,
            fence,
            lease: Some(StoredLease {
                id: req.lease_id.as_str().to_string(),
                owner: req.owner.clone(),
                data: req.data.clone(),
                ttl_ms,
                acquired_ms: now,
                expires_ms: now + ttl_ms,
            }),
            released_by: None,
            ..base.clone()
        }
    }

    /// `record` with its lease's expiry moved to now plus `ttl`.
    fn renewed(&self, record: &Record, ttl: Duration) -> Record {
        let mut next = record.next();
        if let Some(lease) = &mut next.lease {
            lease.ttl_ms = ttl.as_millis() as u64;
            lease.expires_ms = unix_ms((self.settings.wall)()) + lease.ttl_ms;
        }
        next
    }

    /// A grant written on an object state this process did not write
    /// itself stands only if the epoch marker, read after the write, still
    /// names the grant's epoch (crate docs, "A grant lands only in its
    /// epoch"). Otherwise the grant is undone (the key freed, its fence
    /// kept) and the store's epoch read again.
    async fn confirm(
        &self,
        key: &Key,
        name: &str,
        etag: String,
        record: Record,
    ) -> Result<AcquireOutcome> {
        let marker = crate::epoch::read(self).await?;
        if marker.as_ref().map(|m| m.epoch) == Some(record.epoch) {
            let fence = record.fence;
            self.remember(key, etag, record);
            self.observations.forget(key.as_str());
            return Ok(AcquireOutcome::Acquired(Grant::new(fence)));
        }
        let mut undo = record.next();
        undo.lease = None;
        // Best effort: if this fails, the lease runs out as a dead
        // holder's would.
        if let Ok(Put::Done(etag)) = self.write("acquire", name, &undo, Cond::Match(&etag)).await {
            self.remember(key, etag, undo);
        }
        Ok(AcquireOutcome::OtherEpoch(self.refresh_epoch().await?))
    }

    /// Rewrites the record of `lease`'s key with `change` while the lease
    /// holds it; `done` says whether the record as found shows the work
    /// already done (a retry after an ambiguous failure).
    async fn rewrite(
        &self,
        operation: &'static str,
        lease: &Lease,
        done: impl Fn(&Record) -> bool,
        change: impl Fn(&Record) -> Record,
    ) -> Result<()> {
        let name = self.object_name(&lease.key);
        let mut current = self
            .known(&lease.key)
            .filter(|(_, r)| r.held_by(&lease.lease_id).is_some());
        for _ in 0..4 {
            let (etag, record) = match current.take() {
                Some(c) => c,
                None => match self.read(operation, &name).await? {
                    Read::Found(etag, record) => (etag, *record),
                    Read::Missing { .. } => {
                        self.forget(&lease.key);
                        return Err(lost(lease, "the key's object was deleted"));
                    }
                    Read::NoBucket => {
                        self.forget(&lease.key);
                        return Err(lost(lease, format!("bucket {:?} was deleted", self.bucket)));
                    }
                },
            };
            if done(&record) {
                return Ok(());
            }
            if record.held_by(&lease.lease_id).is_none() {
                self.forget(&lease.key);
                return Err(lost(lease, not_ours(&record)));
            }
            let next = change(&record);
            match self
                .write(operation, &name, &next, Cond::Match(&etag))
                .await?
            {
                Put::Done(etag) => {
                    self.remember(&lease.key, etag, next);
                    return Ok(());
                }
                // Changed since: read it and decide on what is there.
                Put::Refused => continue,
                Put::NoBucket => {
                    self.forget(&lease.key);
                    return Err(lost(lease, format!("bucket {:?} was deleted", self.bucket)));
                }
            }
        }
        Err(SERVICE.error(operation, true, "the key's object kept changing"))
    }
}

/// A decoded read.
enum Read {
    Found(String, Box<Record>),
    Missing {
        date: Option<SystemTime>,
        arrived: Duration,
    },
    NoBucket,
}

#[async_trait]
impl Backend for S3Backend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    /// The epoch read while building (its age as of now): the store's
    /// first attempt names it, and a proven epoch is cleared at once.
    fn epoch_at_open(&self) -> Option<StoreEpoch> {
        Some(self.epoch())
    }

    /// Whether building created the store (its conditional write of the
    /// epoch marker was the one that won).
    fn created_at_open(&self) -> Option<bool> {
        self.settings.created_at_open()
    }

    fn capabilities(&self) -> Capabilities {
        shared_capabilities(MIN_TTL, self.epoch().max_ttl.min(MAX_TTL))
            .takeover_needs_observation(true)
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        check_ttl(req.ttl)?;
        let epoch = match self.settings.epoch.admit(req, "store") {
            Ok(epoch) => epoch,
            Err(answer) => return *answer,
        };
        let key = &req.key;
        let name = self.object_name(key);
        // Warm: this process wrote the key last, and left it free (or
        // held by this very request: a retry). One request.
        if let Some((etag, record)) = self.known(key) {
            let ours = record.held_by(&req.lease_id).is_some();
            if ours || record.lease.is_none() {
                let fence = if ours {
                    record.fence
                } else {
                    next_token(record.fence, epoch)
                };
                let next = self.granted(&record, req, fence, epoch);
                match self
                    .write("acquire", &name, &next, Cond::Match(&etag))
                    .await?
                {
                    // Our last write's ETag still matching proves no other
                    // process wrote since, but not the epoch: a copy of the
                    // store restored over it has the same bytes, so the
                    // same ETag (crate docs, "A grant lands only in its
                    // epoch").
                    Put::Done(etag) => return self.confirm(key, &name, etag, next).await,
                    Put::Refused => self.forget(key),
                    Put::NoBucket => {
                        self.forget(key);
                        return Ok(AcquireOutcome::OtherEpoch(self.refresh_epoch().await?));
                    }
                }
            }
        }
        let mut holder = None;
        // Usually one read and one write; more only after races, each
        // further round following a change seen on the object.
        for _ in 0..4 {
            let (etag, next) = match self.read("acquire", &name).await? {
                Read::NoBucket => {
                    return Ok(AcquireOutcome::OtherEpoch(self.refresh_epoch().await?))
                }
                Read::Missing { date, arrived } => {
                    // The key's first object: its tokens start above the
                    // second S3 said "no such key" in, and it is written
                    // only once that second is over (crate docs, "A key's
                    // first object").
                    let Some(date) = date else {
                        return Err(SERVICE.error(
                            "acquire",
                            false,
                            "S3 answered without a Date header",
                        ));
                    };
                    let base = epoch_at(date);
                    let wait = (arrived + SECOND_PAST).saturating_sub(self.settings.clock.now());
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                    let fence = next_token(epoch_token_base(base), epoch);
                    let next = self.granted(&Record::free(epoch, 0), req, fence, epoch);
                    match self.write("acquire", &name, &next, Cond::Create).await? {
                        Put::Done(etag) => return self.confirm(key, &name, etag, next).await,
                        Put::Refused => continue,
                        Put::NoBucket => {
                            return Ok(AcquireOutcome::OtherEpoch(self.refresh_epoch().await?))
                        }
                    }
                }
                Read::Found(etag, record) => {
                    if record.held_by(&req.lease_id).is_some() {
                        // Ours already: an earlier attempt went through.
                        let next = self.renewed(&record, req.ttl);
                        (etag, next)
                    } else {
                        if let Some(lease) = &record.lease {
                            holder = record.holder((self.settings.wall)());
                            let wait = self.observation_wait(Duration::from_millis(lease.ttl_ms));
                            let ripe = self.observations.saw(
                                key.as_str(),
                                &etag,
                                wait,
                                self.settings.clock.now(),
                            );
                            if !ripe {
                                return Ok(AcquireOutcome::Held(holder));
                            }
                            // Unchanged for the holder's whole TTL: take it
                            // over, on condition of that very version.
                        }
                        let fence = next_token(record.fence, epoch);
                        (etag.clone(), self.granted(&record, req, fence, epoch))
                    }
                }
            };
            match self
                .write("acquire", &name, &next, Cond::Match(&etag))
                .await?
            {
                Put::Done(etag) => return self.confirm(key, &name, etag, next).await,
                Put::Refused => continue,
                Put::NoBucket => {
                    return Ok(AcquireOutcome::OtherEpoch(self.refresh_epoch().await?))
                }
            }
        }
        Ok(AcquireOutcome::Held(holder))
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        check_ttl(lease.ttl)?;
        self.rewrite("renew", lease, |_| false, |r| self.renewed(r, lease.ttl))
            .await?;
        // The object is ours, but the store may be going: its objects are
        // deleted one by one, the marker first. Read after the write, a
        // marker that still names the lease's epoch shows that the write
        // came before any deletion began (crate docs, "Holders of lost
        // data").
        match crate::epoch::read(self).await? {
            Some(marker) if marker.epoch == lease.epoch => Ok(()),
            _ => {
                self.forget(&lease.key);
                Err(lost(
                    lease,
                    "the store's epoch marker is gone or names another epoch: the store's data was lost",
                ))
            }
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let id = lease.lease_id.as_str();
        self.rewrite(
            "release",
            lease,
            |r| r.lease.is_none() && r.released_by.as_deref() == Some(id),
            |r| {
                let mut next = r.next();
                next.lease = None;
                next.released_by = Some(id.to_string());
                next
            },
        )
        .await
    }

    async fn record_run(&self, lease: &Lease, run: &RunRecord) -> Result<()> {
        let result = self
            .rewrite(
                "record_run",
                lease,
                |_| false,
                |r| {
                    let mut next = r.next();
                    next.last_run = Some(run.clone());
                    if run.succeeded() {
                        next.last_success = Some(run.clone());
                    }
                    next
                },
            )
            .await;
        if result.is_ok() || run.succeeded() {
            return result;
        }
        // Not ours any more: a run that did not succeed is still the last
        // run if the key is free and has no later run's record. (A record
        // held by someone else is left alone: a write would change its
        // ETag, which a waiter takes for a sign of its holder's life.)
        let name = self.object_name(&lease.key);
        if let Read::Found(etag, record) = self.read("record_run", &name).await? {
            let later = record
                .last_run
                .as_ref()
                .is_some_and(|r| r.fencing_token >= run.fencing_token);
            if record.lease.is_none() && !later {
                let mut next = record.next();
                next.last_run = Some(run.clone());
                if let Put::Done(etag) = self
                    .write("record_run", &name, &next, Cond::Match(&etag))
                    .await?
                {
                    self.remember(&lease.key, etag, next);
                }
            }
        }
        result
    }

    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        match self.read("inspect", &self.object_name(key)).await? {
            Read::Found(_, record) => Ok(record.info(key.clone(), (self.settings.wall)())),
            Read::Missing { .. } => Ok(KeyInfo::new(key.clone(), 0, None)),
            Read::NoBucket => Err(Error::no_store(format!(
                "bucket {:?} does not exist",
                self.bucket
            ))),
        }
    }

    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        let name = self.object_name(key);
        for _ in 0..4 {
            let (etag, record) = match self.read("break", &name).await? {
                Read::Found(etag, record) => (etag, *record),
                Read::Missing { .. } => return Ok(None),
                Read::NoBucket => {
                    return Err(Error::no_store(format!(
                        "bucket {:?} does not exist",
                        self.bucket
                    )))
                }
            };
            if record.lease.is_none() {
                return Ok(None);
            }
            let holder = record.holder((self.settings.wall)());
            let mut next = record.next();
            next.lease = None;
            next.released_by = None;
            match self
                .write("break", &name, &next, Cond::Match(&etag))
                .await?
            {
                Put::Done(etag) => {
                    self.remember(key, etag, next);
                    return Ok(holder);
                }
                Put::Refused => continue,
                Put::NoBucket => return Ok(None),
            }
        }
        Err(SERVICE.error("break", true, "the key's object kept changing"))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        let list_prefix = names::list_prefix(&self.prefix, prefix);
        let keys = object_names(&self.client, &self.bucket, &list_prefix, "list")
            .await?
            .iter()
            .filter_map(|n| names::key_of(&self.prefix, n))
            .filter(|key| key.as_str().starts_with(prefix))
            .collect::<Vec<_>>();
        let mut infos = Vec::with_capacity(keys.len());
        for key in keys {
            if let Read::Found(_, record) = self.read("list", &self.object_name(&key)).await? {
                infos.push(record.info(key, (self.settings.wall)()));
            }
        }
        infos.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(infos)
    }
}

/// The names of every object in `bucket` whose name starts with `prefix`,
/// in listing order, page by page; `op` names the operation in errors.
/// Public for tests and tools that look at a store's objects.
///
/// # Errors
/// [`Error::Backend`] when S3 cannot be reached or refuses.
#[doc(hidden)]
pub async fn object_names(
    client: &Client,
    bucket: &str,
    prefix: &str,
    op: &'static str,
) -> Result<Vec<String>> {
    let mut names = Vec::new();
    let mut token = None;
    loop {
        let out = client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(token.take())
            .send()
            .await
            .map_err(|e| SERVICE.map_sdk(bucket, op, e))?;
        names.extend(
            out.contents()
                .iter()
                .filter_map(|o| o.key().map(String::from)),
        );
        match out.next_continuation_token() {
            Some(t) if out.is_truncated() == Some(true) => token = Some(t.to_string()),
            _ => return Ok(names),
        }
    }
}

/// A second and a little more (0.1 % for clock rates, and 10 ms): how
/// long after an answer dated second `s` the service's clock is surely past
/// `s`.
pub(crate) const SECOND_PAST: Duration = Duration::from_millis(1011);
