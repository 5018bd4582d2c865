//! The [`Backend`] implementation: the protocol in the crate docs.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::{
    backend::{
        next_token, AcquireOutcome, AcquireRequest, Backend, BatchOutcome, Capabilities, Lease,
        ReleaseWatch, StoreEpoch,
    },
    Error, HolderInfo, Key, KeyInfo, LossReason, Result, RunRecord,
};

use crate::error::{self, NAME};
use crate::grpc::etcdserverpb::kv_client::KvClient;
use crate::grpc::etcdserverpb::lease_client::LeaseClient;
use crate::grpc::etcdserverpb::{
    Compare, LeaseGrantRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest, RequestOp, TxnRequest,
    TxnResponse,
};
use crate::grpc::mvccpb::KeyValue;
use crate::grpc::{self, Connection};
use crate::record::{from_json, key_info, to_json, EpochMarker, Handed, HolderRecord, KeyRecord};
use crate::MIN_TTL;
use leasehold::backend::shared_builder::{shared_capabilities, ServerCommon};

/// How often one call retries a transaction that lost a race before it
/// answers `Held` (or a retryable error).
pub(crate) const RACE_RETRIES: usize = 8;

/// A leasehold backend on an etcd cluster. See the [crate docs](crate) for
/// the protocol. Cheap to clone (one shared gRPC channel).
#[derive(Clone)]
pub struct EtcdBackend {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The store's epoch as read while opening; the listener for releases.
    pub(crate) common: ServerCommon,
    pub(crate) conn: Connection,
    pub(crate) endpoints: Vec<String>,
    pub(crate) prefix: String,
    pub(crate) max_ttl: Duration,
    pub(crate) request_timeout: Duration,
    /// Requests sent through [`EtcdBackend::call`] (every unary request;
    /// not the release watch).
    pub(crate) requests: AtomicU64,
    /// What opening (and reading the epoch) may do to the store.
    pub(crate) creation: leasehold::Creation,
    /// The current session for each TTL in whole seconds: the etcd lease
    /// new grants and renewals of that TTL hang their keys on while it is
    /// fresh enough (see the crate docs' protocol).
    pub(crate) sessions: tokio::sync::Mutex<HashMap<i64, Session>>,
    /// The marker and keys' records as this backend last read or wrote
    /// them: an acquire compares them, byte for byte, in its one `Txn`.
    pub(crate) seen: std::sync::Mutex<Seen>,
    /// The holder values of the grants this backend holds, by lease id: a
    /// release deletes the holder key only while it still has that value.
    pub(crate) held: std::sync::Mutex<HashMap<String, Vec<u8>>>,
    /// Whether lock waiters are queued and handed the key (with wake-ups
    /// on; see the crate docs' "Handoff").
    pub(crate) queues: bool,
    /// This backend's registrations as a waiter, and its view of everyone's.
    pub(crate) queue: Arc<crate::queue::Queue>,
    /// Dropping it stops the watch that keeps the view (started at the
    /// first grant).
    pub(crate) view_stop: std::sync::OnceLock<tokio::sync::oneshot::Sender<()>>,
    /// Sessions granted within the longest TTL, by etcd lease id: a key
    /// handed to this backend hangs on one of them, whose grant time
    /// bounds its deadline.
    pub(crate) granted: std::sync::Mutex<HashMap<i64, Session>>,
    /// What a session's age is timed on: a clock that counts a suspend, as
    /// the server's clock, on which the session's etcd lease ages, does.
    pub(crate) clock: leasehold::backend::SharedClock,
}

/// An etcd lease holder keys of one TTL hang on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Session {
    pub(crate) id: i64,
    pub(crate) secs: i64,
    /// When its `LeaseGrant` was sent, on the backend's clock
    /// ([`Inner::clock`]): it lives at least `secs` from then. It is never
    /// kept alive, so it ends about then (etcd checks expiries every
    /// 500 ms, and extends every lease when it restarts or elects a new
    /// leader: only ever later).
    pub(crate) fresh: Duration,
}

/// Stored bytes last seen (see [`Inner::seen`]).
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub(crate) marker: Option<Vec<u8>>,
    /// `None`: the key had no record.
    pub(crate) records: HashMap<String, Option<Vec<u8>>>,
}

impl Seen {
    pub(crate) fn remember(&mut self, key: &str, record: Option<Vec<u8>>) {
        if self.records.len() >= SEEN_KEYS && !self.records.contains_key(key) {
            self.records.clear();
        }
        self.records.insert(key.to_string(), record);
    }
}

/// At most this many keys' records are remembered (the set starts again
/// empty beyond it: forgetting costs a failed comparison, one round trip).
const SEEN_KEYS: usize = 4096;

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("endpoints", &self.inner.endpoints)
            .field("prefix", &self.inner.prefix)
            .field("max_ttl", &self.inner.max_ttl)
            .finish_non_exhaustive()
    }
}

/// What one read of a key returns: the store's marker, the key's record and
/// holder, each with its etcd metadata, all at one revision.
pub(crate) struct Snapshot {
    pub(crate) marker: Option<(EpochMarker, KeyValue)>,
    pub(crate) fresh: Option<KeyValue>,
    pub(crate) record: Option<(KeyRecord, KeyValue)>,
    pub(crate) holder: Option<(HolderRecord, KeyValue)>,
}

pub(crate) fn lost(key: &Key, why: impl Into<String>) -> Error {
    Error::LeaseLost {
        key: key.as_str().to_string(),
        reason: LossReason::Revoked(why.into()),
    }
}

/// The loss a release or renewal finds when the holder key no longer has
/// our grant's value.
pub(crate) fn not_ours(key: &Key) -> Error {
    lost(
        key,
        "the key has no holder in etcd, or another one (expired, broken, or the store's data lost)",
    )
}

/// Whether etcd answered that an etcd lease no longer exists (expired or
/// revoked): a `LeaseRevoke` of it, or a `Txn` putting a key on it.
pub(crate) fn is_not_found(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::NotFound
}

impl EtcdBackend {
    /// Opens a backend on `inner`: checks that the cluster answers (and
    /// the credentials work), and creates the store if it is new.
    pub(crate) async fn open(inner: Inner) -> Result<Self> {
        let creation = inner.creation;
        let backend = EtcdBackend {
            inner: Arc::new(inner),
        };
        // An endpoint that does not answer (its request timed out) moves
        // the next request on to the next endpoint: each may be tried once.
        let mut tries = backend.inner.endpoints.len();
        let (epoch, created) = loop {
            match backend.epoch_creating(creation).await {
                Err(e) if tries > 1 && e.is_retryable() => tries -= 1,
                other => break other?,
            }
        };
        backend.inner.common.opened(epoch);
        backend.inner.common.created(created);
        Ok(backend)
    }

    /// The connection to the cluster (one shared channel), for tools and
    /// tests.
    pub fn connection(&self) -> Connection {
        self.inner.conn.clone()
    }

    /// Deletes every key of this store's prefix, as an operator's `etcdctl
    /// del --prefix` would: the store's data lost (holders' etcd leases live
    /// on, their keys and the epoch marker do not). For tools and tests
    /// that inject store loss; the next use starts a new epoch.
    ///
    /// # Errors
    /// [`Error::Backend`] when the cluster does not answer.
    pub async fn delete_store(&self) -> Result<()> {
        let request = grpc::etcdserverpb::DeleteRangeRequest {
            key: self.inner.prefix.clone().into_bytes(),
            range_end: grpc::prefix_end(self.inner.prefix.as_bytes()),
            ..Default::default()
        };
        self.call("delete store", |ch| {
            let request = request.clone();
            async move { KvClient::new(ch).delete_range(request).await }
        })
        .await?
        .map_err(|e| error::status("delete store", e))?;
        Ok(())
    }

    /// Requests this backend has sent so far (every read, `Txn`,
    /// `LeaseGrant`, `LeaseKeepAlive`, `LeaseRevoke` and `LeaseTimeToLive`;
    /// not the release watch), for benchmarks: an uncontended acquire +
    /// release of a key this process used last is 2 (see the crate docs'
    /// round trips).
    pub fn requests_sent(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// How many waiters' registrations for `key` this backend's view shows
    /// (see the crate docs' "Handoff"): for tests, which wait for a
    /// registration to reach the holder before releasing.
    #[doc(hidden)]
    pub fn waiters_seen(&self, key: &str) -> usize {
        self.inner.queue.seen_for(key)
    }

    /// The key prefix of this store.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The store's epoch, read now (created if the store is new).
    ///
    /// # Errors
    /// [`Error::Backend`] when the cluster cannot be reached.
    pub async fn epoch(&self) -> Result<StoreEpoch> {
        self.epoch_as(self.inner.creation.after_open()).await
    }

    /// Waits until this backend watches for releases (started on the first
    /// wait otherwise). Returns at once when wake-ups are off.
    pub async fn listening(&self) {
        self.inner.common.listening().await;
    }

    pub(crate) fn marker_key(&self) -> String {
        format!("{}epoch", self.inner.prefix)
    }

    pub(crate) fn fresh_key(&self) -> String {
        format!("{}epoch-fresh", self.inner.prefix)
    }

    pub(crate) fn record_key(&self, key: &str) -> String {
        format!("{}k/{key}", self.inner.prefix)
    }

    pub(crate) fn holder_key(&self, key: &str) -> String {
        format!("{}h/{key}", self.inner.prefix)
    }

    /// A lock waiter's registration, by its lease id (random, never
    /// reused: only that waiter writes or deletes it).
    pub(crate) fn waiter_key(&self, lease_id: &str) -> String {
        format!("{}w/{lease_id}", self.inner.prefix)
    }

    /// Starts the watch on the waiters' registrations, if not yet: from
    /// the backend's first grant on, its releases can hand keys over.
    pub(crate) fn watch_waiters(&self) {
        if !self.inner.queues || self.inner.view_stop.get().is_some() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.inner.view_stop.set(tx).is_ok() {
            rt.spawn(crate::queue::keep_view(
                self.inner.conn.clone(),
                format!("{}w/", self.inner.prefix),
                self.inner.queue.clone(),
                rx,
            ));
        }
    }

    /// The part of `ttl` that has run out for a key of ours found on etcd
    /// lease `id` (a handoff's grant, or ours after an ambiguous answer),
    /// when it can be taken as it is: `id` is a session this backend
    /// granted, still alive by its grant time, and at most a quarter of
    /// `ttl` has run out. `None`: move the key onto a fresh session first.
    pub(crate) fn ran_on_granted(&self, id: i64, ttl: Duration) -> Option<Duration> {
        let now = self.inner.clock.now();
        let granted = self.inner.granted.lock().unwrap_or_else(|e| e.into_inner());
        granted
            .get(&id)
            .filter(|s| s.alive_at(now))
            .map(|s| s.ran(ttl, now))
            .filter(|ran| *ran <= ttl / 4)
    }

    /// Sends one request (`send`, given a channel to the current
    /// endpoint), bounded by the request timeout: on to the next endpoint
    /// when it could not be sent ([`Connection::call`]), and the next
    /// request to the next endpoint when it timed out. A status saying the
    /// auth token expired gets a new token for the next request (the
    /// engine retries: the error is retryable).
    pub(crate) async fn call<T, F, Fut>(
        &self,
        op: &'static str,
        send: F,
    ) -> Result<std::result::Result<T, tonic::Status>>
    where
        F: Fn(grpc::Authed) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        self.inner.requests.fetch_add(1, Ordering::Relaxed);
        let conn = &self.inner.conn;
        let at = conn.current();
        let sent = conn.call(send);
        match tokio::time::timeout(self.inner.request_timeout, sent).await {
            Err(_) => {
                conn.endpoint_failed(at);
                Err(error::timed_out(op, self.inner.request_timeout))
            }
            Ok(Err(s)) if grpc::timed_out(&s) => {
                conn.endpoint_failed(at);
                Err(error::timed_out(op, self.inner.request_timeout))
            }
            Ok(Ok(r)) => Ok(Ok(r.into_inner())),
            Ok(Err(s)) if conn.token_expired(&s) => {
                let _ = tokio::time::timeout(self.inner.request_timeout, conn.authenticate()).await;
                Err(Error::backend(
                    NAME,
                    op,
                    true,
                    "etcd's auth token had expired; authenticated again for the next request",
                ))
            }
            Ok(Err(s)) => Ok(Err(s)),
        }
    }

    pub(crate) async fn txn(
        &self,
        op: &'static str,
        compare: Vec<Compare>,
        success: Vec<RequestOp>,
    ) -> Result<TxnResponse> {
        self.txn_else(op, compare, success, Vec::new())
            .await?
            .map_err(|e| error::status(op, e))
    }

    /// A `Txn` with a failure branch, its status as etcd answered it.
    pub(crate) async fn txn_else(
        &self,
        op: &'static str,
        compare: Vec<Compare>,
        success: Vec<RequestOp>,
        failure: Vec<RequestOp>,
    ) -> Result<std::result::Result<TxnResponse, tonic::Status>> {
        let request = TxnRequest {
            compare,
            success,
            failure,
        };
        self.call(op, |ch| {
            let request = request.clone();
            async move { KvClient::new(ch).txn(request).await }
        })
        .await
    }

    pub(crate) async fn revoke(
        &self,
        op: &'static str,
        id: i64,
    ) -> Result<std::result::Result<(), tonic::Status>> {
        let request = LeaseRevokeRequest { id };
        Ok(self
            .call(op, |ch| async move {
                LeaseClient::new(ch).lease_revoke(request).await
            })
            .await?
            .map(|_| ()))
    }

    /// A new etcd lease of `secs` seconds: its id.
    pub(crate) async fn grant(&self, op: &'static str, secs: i64) -> Result<i64> {
        let request = LeaseGrantRequest { ttl: secs, id: 0 };
        let granted = self
            .call(op, |ch| async move {
                LeaseClient::new(ch).lease_grant(request).await
            })
            .await?
            .map_err(|e| error::status(op, e))?;
        if !granted.error.is_empty() {
            return Err(Error::backend(NAME, op, true, granted.error));
        }
        Ok(granted.id)
    }

    async fn expires_in(&self, lease_id: i64) -> Option<Duration> {
        let request = LeaseTimeToLiveRequest {
            id: lease_id,
            keys: false,
        };
        match self
            .call("inspect", |ch| async move {
                LeaseClient::new(ch).lease_time_to_live(request).await
            })
            .await
        {
            Ok(Ok(t)) if t.ttl >= 0 => Some(Duration::from_secs(t.ttl as u64)),
            _ => None,
        }
    }

    pub(crate) fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.inner.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn queue(&self) -> &crate::queue::Queue {
        &self.inner.queue
    }

    pub(crate) fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
        self.inner.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A release that hands the key to the oldest waiter registered for
    /// it (see the crate docs' "Handoff"), in one `Txn`: while the holder
    /// key still has our grant's `value`, and (nested) while the
    /// registration, the marker and the key's record are the bytes seen,
    /// the key is put as that waiter's grant (the next token, on the
    /// waiter's session), the record with that token, and the registration
    /// deleted; otherwise the holder key is deleted, as a plain release
    /// does. `None`: no waiter to hand to (or its session was gone): a
    /// plain release follows.
    async fn hand_over(&self, lease: &Lease, value: &[u8]) -> Result<Option<Result<()>>> {
        const OP: &str = "release";
        let key = lease.key.as_str();
        // Nobody waiting (the common release): nothing more to look at.
        let Some(waiter) =
            self.queue()
                .pick(key, lease.epoch, lease.lease_id.as_str(), crate::MAX_TTL)
        else {
            return Ok(None);
        };
        let (marker_bytes, record_bytes) = {
            let seen = self.seen();
            match (&seen.marker, seen.records.get(key)) {
                (Some(m), Some(Some(r))) => (m.clone(), r.clone()),
                _ => return Ok(None),
            }
        };
        let (Ok(marker), Ok(record)) = (
            EpochMarker::parse(&marker_bytes),
            from_json::<KeyRecord>("key record", &record_bytes),
        ) else {
            return Ok(None);
        };
        // The record as our grant wrote it, in the marker's epoch: the
        // next token follows ours.
        if record.token != lease.fencing_token
            || record.epoch != lease.epoch
            || marker.epoch != lease.epoch
        {
            return Ok(None);
        }
        // A TTL the store allows (the waiter checked it against the marker
        // it saw).
        if waiter.entry.ttl_ms > marker.max_ttl_ms {
            return Ok(None);
        }
        let hk = self.holder_key(key);
        let rk = self.record_key(key);
        let token = next_token(record.token, lease.epoch);
        let holder = to_json(&waiter.entry.holder(token));
        let new_record = to_json(&KeyRecord {
            token,
            epoch: lease.epoch,
            ..record
        });
        let inner = TxnRequest {
            compare: vec![
                grpc::value_is(waiter.etcd_key.clone(), waiter.value.clone()),
                grpc::lease_is(waiter.etcd_key.clone(), waiter.lease),
                grpc::value_is(self.marker_key(), marker_bytes),
                grpc::value_is(rk.clone(), record_bytes),
            ],
            success: vec![
                grpc::put(hk.clone(), holder.clone(), waiter.lease),
                grpc::put(rk, new_record.clone(), 0),
                // Over the registration, on the same etcd lease: what the
                // waiter's watch shows it, to take the key from (no longer
                // a registration: never handed anything again).
                grpc::put(
                    waiter.etcd_key.clone(),
                    to_json(&Handed {
                        holder: String::from_utf8_lossy(&holder).into_owned(),
                        record: String::from_utf8_lossy(&new_record).into_owned(),
                    }),
                    waiter.lease,
                ),
            ],
            failure: vec![grpc::delete(hk.clone())],
        };
        let sent = self
            .txn_else(
                OP,
                vec![grpc::value_is(hk, value.to_vec())],
                vec![grpc::nested(inner)],
                Vec::new(),
            )
            .await?;
        match sent {
            Ok(r) => {
                self.held().remove(lease.lease_id.as_str());
                if !r.succeeded {
                    return Ok(Some(Err(not_ours(&lease.key))));
                }
                if r.responses.first().is_some_and(grpc::nested_succeeded) {
                    tracing::debug!(key, token, "released: handed to a waiter");
                    self.seen().remember(key, Some(new_record));
                }
                Ok(Some(Ok(())))
            }
            // The waiter's session is gone (nothing was written): a plain
            // release.
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(error::status(OP, e)),
        }
    }

    /// A renewal: our holder key, value for value (our lease id is in it),
    /// moved onto a session fresh enough for `since` (see
    /// [`session`](Self::session): `renew` asks for a whole TTL from its
    /// send, `renew_ran` takes the current session as a grant would, and
    /// says how much of the TTL had run out, so that renewals share
    /// sessions instead of granting one each). It can only extend our own
    /// grant, never another holder's.
    async fn move_on(&self, lease: &Lease, since: Option<Duration>) -> Result<Duration> {
        const OP: &str = "renew";
        let value = self.our_value(OP, lease).await?;
        match self.hang(OP, &lease.key, &value, lease.ttl, since).await? {
            Some(ran) => Ok(ran),
            None => {
                self.held().remove(lease.lease_id.as_str());
                Err(not_ours(&lease.key))
            }
        }
    }

    /// The holder value our grant of `lease` wrote: remembered since the
    /// grant, or (in a backend that did not make the grant) read, and
    /// checked to be ours.
    async fn our_value(&self, op: &'static str, lease: &Lease) -> Result<Vec<u8>> {
        let value = self.held().get(lease.lease_id.as_str()).cloned();
        match value {
            Some(v) => Ok(v),
            None => {
                let snap = self.read(op, Some(&lease.key)).await?;
                Ok(self.ours(lease, &snap)?.1.value.clone())
            }
        }
    }

    /// Our holder record, or the loss it shows.
    pub(crate) fn ours<'a>(
        &self,
        lease: &Lease,
        snap: &'a Snapshot,
    ) -> Result<&'a (HolderRecord, KeyValue)> {
        match &snap.holder {
            None => Err(lost(
                &lease.key,
                "the key has no holder in etcd (released, expired, broken, or the store's data lost)",
            )),
            Some(h) if h.0.lease_id != lease.lease_id.as_str() => {
                Err(lost(&lease.key, "another holder has the key"))
            }
            Some(h) if h.0.epoch != lease.epoch => {
                Err(lost(&lease.key, "the store is in another epoch"))
            }
            Some(h) => Ok(h),
        }
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn epoch_at_open(&self) -> Option<StoreEpoch> {
        self.inner.common.epoch_at_open()
    }

    fn created_at_open(&self) -> Option<bool> {
        self.inner.common.created_at_open()
    }

    fn watch_release(&self, keys: &[Key]) -> Option<ReleaseWatch> {
        self.inner.common.watch_release(keys)
    }

    fn capabilities(&self) -> Capabilities {
        shared_capabilities(MIN_TTL, self.inner.max_ttl).queues_waiters(self.inner.queues)
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<AcquireOutcome> {
        self.acquire(request).await
    }

    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<BatchOutcome> {
        self.acquire_all(requests).await
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        let sent = self.inner.clock.now();
        self.move_on(lease, Some(sent)).await.map(|_| ())
    }

    async fn renew_ran(&self, lease: &Lease) -> Result<Duration> {
        self.move_on(lease, None).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        const OP: &str = "release";
        let hk = self.holder_key(lease.key.as_str());
        let id = lease.lease_id.as_str();
        let registered = self.queue().forget(id);
        if registered || !self.held().contains_key(id) {
            // Not a grant this backend remembers: a waiter's registration
            // whose wait ended without it, a release chasing an ambiguous
            // attempt, or a grant made by another backend. One `Txn`
            // deletes our registration, if any (a late attempt may have
            // written it again), and reads the holder key: if the key is
            // ours (handed to this id meanwhile, or granted), it is
            // released below.
            let resp = self
                .txn(
                    OP,
                    Vec::new(),
                    vec![grpc::delete(self.waiter_key(id)), grpc::get(hk.clone())],
                )
                .await?;
            let holder = resp
                .responses
                .into_iter()
                .nth(1)
                .and_then(|r| grpc::range_kvs(r).into_iter().next());
            let theirs = match holder {
                None => Some("the key has no holder in etcd (released, expired, broken, or the store's data lost)"),
                Some(kv) => match from_json::<HolderRecord>("holder record", &kv.value)? {
                    h if h.lease_id != id => Some("another holder has the key"),
                    h if h.epoch != lease.epoch => Some("the store is in another epoch"),
                    _ => {
                        self.held().insert(id.to_string(), kv.value);
                        None
                    }
                },
            };
            if let Some(why) = theirs {
                // A registration ended without a grant: nothing to release.
                return if registered {
                    Ok(())
                } else {
                    Err(lost(&lease.key, why))
                };
            }
        }
        let value = self.our_value(OP, lease).await?;
        if let Some(released) = self.hand_over(lease, &value).await? {
            return released;
        }
        // Deletes the holder key only while it is our grant's, value for
        // value (our lease id is in it): a retried release after someone
        // else was granted the key changes nothing (unlike deleting the
        // key by name, etcd #22082). The session's etcd lease lives on for
        // this process's other keys.
        let resp = self
            .txn(
                OP,
                vec![grpc::value_is(hk.clone(), value)],
                vec![grpc::delete(hk)],
            )
            .await?;
        self.held().remove(lease.lease_id.as_str());
        if resp.succeeded {
            Ok(())
        } else {
            Err(not_ours(&lease.key))
        }
    }

    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        let snap = self.read("inspect", Some(key)).await?;
        let holder = match &snap.holder {
            Some((h, kv)) => Some(h.info(self.expires_in(kv.lease).await)),
            None => None,
        };
        key_info(key.clone(), snap.record.as_ref().map(|r| &r.0), holder)
    }

    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        const OP: &str = "break";
        let hk = self.holder_key(key.as_str());
        for _ in 0..RACE_RETRIES {
            let snap = self.read(OP, Some(key)).await?;
            let Some((holder, kv)) = &snap.holder else {
                return Ok(None);
            };
            // Deletes that holder key (the version read), never its etcd
            // lease: the lease may be a session other keys of the holder's
            // process hang on.
            let r = self
                .txn(
                    OP,
                    vec![grpc::modified_at(hk.clone(), kv.mod_revision)],
                    vec![grpc::delete(hk.clone())],
                )
                .await?;
            if r.succeeded {
                return Ok(Some(holder.info(None)));
            }
        }
        Err(Error::backend(NAME, OP, true, "the key kept changing"))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        const OP: &str = "list";
        let resp = self
            .txn(
                OP,
                Vec::new(),
                vec![
                    grpc::get_prefix(self.record_key(prefix)),
                    grpc::get_prefix(self.holder_key(prefix)),
                ],
            )
            .await?;
        let mut parts = resp.responses.into_iter().map(grpc::range_kvs);
        let records = parts.next().unwrap_or_default();
        let holders = parts.next().unwrap_or_default();
        let rk = self.record_key("");
        let hk = self.holder_key("");
        let mut keys: BTreeMap<String, (Option<KeyRecord>, Option<HolderInfo>)> = BTreeMap::new();
        for kv in &records {
            let name = String::from_utf8_lossy(&kv.key[rk.len()..]).into_owned();
            keys.entry(name).or_default().0 = Some(from_json("key record", &kv.value)?);
        }
        for kv in &holders {
            let name = String::from_utf8_lossy(&kv.key[hk.len()..]).into_owned();
            let h: HolderRecord = from_json("holder record", &kv.value)?;
            keys.entry(name).or_default().1 = Some(h.info(None));
        }
        let mut out = Vec::with_capacity(keys.len());
        for (name, (record, holder)) in keys {
            // Keys not valid for leasehold (written by hand) are skipped.
            let Ok(key) = Key::new(&name) else { continue };
            out.push(key_info(key, record.as_ref(), holder)?);
        }
        Ok(out)
    }

    async fn record_run(&self, lease: &Lease, run: &RunRecord) -> Result<()> {
        self.write_run(lease, run).await
    }
}
