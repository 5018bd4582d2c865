//! The [`Backend`] implementation: the protocol in the crate docs.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::{
    backend::{
        next_token, AcquireOutcome, AcquireRequest, Backend, Capabilities, Grant, Lease,
        ReleaseWatch, StoreEpoch,
    },
    Error, HolderInfo, Key, KeyInfo, LossReason, Result, RunOutcome, RunRecord,
};

use crate::builder::EtcdBackendBuilder;
use crate::error::{self, NAME};
use crate::grpc::etcdserverpb::kv_client::KvClient;
use crate::grpc::etcdserverpb::lease_client::LeaseClient;
use crate::grpc::etcdserverpb::{
    Compare, LeaseGrantRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest, RequestOp, ResponseOp,
    TxnRequest, TxnResponse,
};
use crate::grpc::mvccpb::KeyValue;
use crate::grpc::{self, Connection};
use crate::listen::Deletions;
use crate::record::{from_json, key_info, now_ms, to_json, EpochMarker, HolderRecord, KeyRecord};
use crate::{MAX_TTL, MIN_TTL};
use leasehold::backend::Listener;

/// How often one call retries a transaction that lost a race before it
/// answers `Held` (or a retryable error).
const RACE_RETRIES: usize = 8;

/// A leasehold backend on an etcd cluster. See the [crate docs](crate) for
/// the protocol. Cheap to clone (one shared gRPC channel).
#[derive(Clone)]
pub struct EtcdBackend {
    inner: Arc<Inner>,
}

struct Inner {
    /// The store's epoch as read while opening.
    opened: std::sync::OnceLock<leasehold::backend::EpochRead>,
    conn: Connection,
    endpoints: Vec<String>,
    prefix: String,
    max_ttl: Duration,
    request_timeout: Duration,
    listener: Option<Listener>,
    /// Requests sent through [`EtcdBackend::call`] (every unary request;
    /// not the release watch).
    requests: AtomicU64,
    /// What opening (and reading the epoch) may do to the store.
    creation: leasehold::Creation,
    /// The current session for each TTL in whole seconds: the etcd lease
    /// new grants and renewals of that TTL hang their keys on while it is
    /// fresh enough (see the crate docs' protocol).
    sessions: tokio::sync::Mutex<HashMap<i64, Session>>,
    /// The marker and keys' records as this backend last read or wrote
    /// them: an acquire compares them, byte for byte, in its one `Txn`.
    seen: std::sync::Mutex<Seen>,
    /// The holder values of the grants this backend holds, by lease id: a
    /// release deletes the holder key only while it still has that value.
    held: std::sync::Mutex<HashMap<String, Vec<u8>>>,
}

/// An etcd lease holder keys of one TTL hang on.
#[derive(Debug, Clone, Copy)]
struct Session {
    id: i64,
    secs: i64,
    /// When its `LeaseGrant` was sent: it lives at least `secs` from then.
    /// It is never kept alive, so it ends about then (etcd checks expiries
    /// every 500 ms, and extends every lease when it restarts or elects a
    /// new leader: only ever later).
    fresh: tokio::time::Instant,
}

/// Stored bytes last seen (see [`Inner::seen`]).
#[derive(Debug, Default)]
struct Seen {
    marker: Option<Vec<u8>>,
    /// `None`: the key had no record.
    records: HashMap<String, Option<Vec<u8>>>,
}

impl Seen {
    fn remember(&mut self, key: &str, record: Option<Vec<u8>>) {
        if self.records.len() >= SEEN_KEYS && !self.records.contains_key(key) {
            self.records.clear();
        }
        self.records.insert(key.to_string(), record);
    }
}

/// At most this many keys' records are remembered (the set starts again
/// empty beyond it: forgetting costs a failed comparison, one round trip).
const SEEN_KEYS: usize = 4096;

/// A free key as last seen: what the grant's `Txn` compares and builds on.
struct Free {
    marker: EpochMarker,
    marker_bytes: Vec<u8>,
    record: KeyRecord,
    /// `None`: no record (compared as "does not exist").
    record_bytes: Option<Vec<u8>>,
}

/// What a look at a key decided for an acquire.
enum Judged {
    /// The answer to give.
    Answer(AcquireOutcome),
    /// The store changed (its marker was just created): read again.
    Again,
    /// Free: try the grant.
    Free(Free),
}

impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("endpoints", &self.inner.endpoints)
            .field("prefix", &self.inner.prefix)
            .field("max_ttl", &self.inner.max_ttl)
            .finish_non_exhaustive()
    }
}

/// What one read of a key returns: the store's marker, the key's record and
/// holder, each with its etcd metadata, all at one revision.
struct Snapshot {
    marker: Option<(EpochMarker, KeyValue)>,
    fresh: Option<KeyValue>,
    record: Option<(KeyRecord, KeyValue)>,
    holder: Option<(HolderRecord, KeyValue)>,
}

fn lost(key: &Key, why: impl Into<String>) -> Error {
    Error::LeaseLost {
        key: key.as_str().to_string(),
        reason: LossReason::Revoked(why.into()),
    }
}

/// The loss a release or renewal finds when the holder key no longer has
/// our grant's value.
fn not_ours(key: &Key) -> Error {
    lost(
        key,
        "the key has no holder in etcd, or another one (expired, broken, or the store's data lost)",
    )
}

/// Whether etcd answered that an etcd lease no longer exists (expired or
/// revoked): a `LeaseRevoke` of it, or a `Txn` putting a key on it.
fn is_not_found(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::NotFound
}

/// How long an epoch's timer key lives: long enough to tell every
/// quarantine's end, the confirmation window's as well as a max TTL's.
fn timer_span(max_ttl: Duration) -> Duration {
    max_ttl.max(leasehold::CONFIRMATION_WINDOW)
}

/// etcd leases have whole-second TTLs: round up (a longer lease on the
/// server is the safe direction: the holder's own deadline comes first).
fn lease_secs(ttl: Duration) -> i64 {
    let s = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    s.max(MIN_TTL.as_secs()) as i64
}

/// The part of `ttl` that has run out for a key put on `session` now: its
/// lease lives its whole seconds from `fresh`, which may be less than
/// `ttl` from now.
fn ran(session: &Session, ttl: Duration) -> Duration {
    (session.fresh.elapsed() + ttl).saturating_sub(Duration::from_secs(session.secs as u64))
}

impl EtcdBackend {
    /// A builder for the cluster at `endpoints`.
    pub fn builder<S: Into<String>>(endpoints: impl IntoIterator<Item = S>) -> EtcdBackendBuilder {
        EtcdBackendBuilder::new(endpoints)
    }

    /// Opens the store a URL names (see the crate docs).
    ///
    /// # Errors
    /// As [`EtcdBackendBuilder::from_url`] and [`EtcdBackendBuilder::build`].
    pub async fn from_url(url: &str) -> Result<Self> {
        EtcdBackendBuilder::from_url(url)?.build().await
    }

    pub(crate) async fn connect(b: EtcdBackendBuilder) -> Result<Self> {
        let scheme = if b.tls { "https" } else { "http" };
        let urls: Vec<String> = b
            .endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect();
        let conn = tokio::time::timeout(
            b.request_timeout,
            Connection::connect(&urls, b.request_timeout, b.user.clone()),
        )
        .await
        .map_err(|_| error::timed_out("connect", b.request_timeout))?
        .map_err(error::connect)?;
        let listener = b
            .wake_ups
            .then(|| Listener::new(Deletions::new(conn.clone(), format!("{}h/", b.prefix))));
        let backend = EtcdBackend {
            inner: Arc::new(Inner {
                conn,
                endpoints: b.endpoints,
                prefix: b.prefix,
                max_ttl: b.max_ttl,
                request_timeout: b.request_timeout,
                listener,
                requests: AtomicU64::new(0),
                opened: Default::default(),
                creation: b.creation,
                sessions: Default::default(),
                seen: Default::default(),
                held: Default::default(),
            }),
        };
        // Checks that the cluster answers (and the credentials work), and
        // creates the store if it is new.
        // An endpoint that does not answer (its request timed out) moves
        // the next request on to the next endpoint: each may be tried once.
        let mut tries = backend.inner.endpoints.len();
        let epoch = loop {
            match backend.epoch_as(b.creation).await {
                Err(e) if tries > 1 && e.is_retryable() => tries -= 1,
                other => break other?,
            }
        };
        let _ = backend
            .inner
            .opened
            .set(leasehold::backend::EpochRead::now(epoch));
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

    /// The store's epoch, read now, created as `creation` allows (the
    /// backend's own while opening).
    async fn epoch_as(&self, creation: leasehold::Creation) -> Result<StoreEpoch> {
        loop {
            let snap = self.read("epoch", None).await?;
            if let Some(e) = self.store_epoch(&snap).await? {
                return Ok(e);
            }
            if creation == leasehold::Creation::Never {
                return self.look_without_marker().await;
            }
            self.create_marker(creation == leasehold::Creation::NewProven)
                .await?;
        }
    }

    /// Whether any key lives under the prefix (one counting request).
    async fn has_keys(&self, op: &'static str) -> Result<bool> {
        let resp = self
            .txn(
                op,
                Vec::new(),
                vec![grpc::count_prefix(self.inner.prefix.clone())],
            )
            .await?;
        Ok(resp.responses.first().map_or(0, grpc::range_count) > 0)
    }

    /// A look at a prefix without a marker, which writes nothing: no
    /// store if there is no key at all, else (the marker deleted by hand)
    /// an epoch of no age.
    async fn look_without_marker(&self) -> Result<StoreEpoch> {
        if !self.has_keys("epoch").await? {
            return Err(Error::no_store(format!(
                "no keys under the prefix {:?}",
                self.inner.prefix
            )));
        }
        Ok(StoreEpoch::new(
            leasehold::backend::epoch_at(std::time::SystemTime::now()),
            self.inner.max_ttl,
        ))
    }

    /// Waits until this backend watches for releases (started on the first
    /// wait otherwise). Returns at once when wake-ups are off.
    pub async fn listening(&self) {
        if let Some(l) = &self.inner.listener {
            l.listening().await;
        }
    }

    fn marker_key(&self) -> String {
        format!("{}epoch", self.inner.prefix)
    }

    fn fresh_key(&self) -> String {
        format!("{}epoch-fresh", self.inner.prefix)
    }

    fn record_key(&self, key: &str) -> String {
        format!("{}k/{key}", self.inner.prefix)
    }

    fn holder_key(&self, key: &str) -> String {
        format!("{}h/{key}", self.inner.prefix)
    }

    /// Sends one request (`send`, given a channel to the current
    /// endpoint), bounded by the request timeout: on to the next endpoint
    /// when it could not be sent ([`Connection::call`]), and the next
    /// request to the next endpoint when it timed out. A status saying the
    /// auth token expired gets a new token for the next request (the
    /// engine retries: the error is retryable).
    async fn call<T, F, Fut>(
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

    async fn txn(
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
    async fn txn_else(
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

    /// The reads of a [`Snapshot`]: the marker, the epoch timer, and (with
    /// `key`) its record and holder.
    fn snapshot_ops(&self, key: Option<&Key>) -> Vec<RequestOp> {
        let mut ops = vec![grpc::get(self.marker_key()), grpc::get(self.fresh_key())];
        if let Some(key) = key {
            ops.push(grpc::get(self.record_key(key.as_str())));
            ops.push(grpc::get(self.holder_key(key.as_str())));
        }
        ops
    }

    /// The marker, the epoch timer, and (with `key`) its record and holder,
    /// at one revision: one round trip.
    async fn read(&self, op: &'static str, key: Option<&Key>) -> Result<Snapshot> {
        let resp = self.txn(op, Vec::new(), self.snapshot_ops(key)).await?;
        self.snapshot(key, resp.responses)
    }

    /// The [`Snapshot`] the responses to [`snapshot_ops`](Self::snapshot_ops)
    /// show, remembered as the store's latest (see [`Inner::seen`]).
    fn snapshot(&self, key: Option<&Key>, responses: Vec<ResponseOp>) -> Result<Snapshot> {
        let mut kvs = responses
            .into_iter()
            .map(|r| grpc::range_kvs(r).into_iter().next());
        let marker = kvs.next().flatten();
        let fresh = kvs.next().flatten();
        let record = kvs.next().flatten();
        let holder = kvs.next().flatten();
        {
            let mut seen = self.seen();
            seen.marker = marker.as_ref().map(|kv| kv.value.clone());
            if let Some(key) = key {
                seen.remember(key.as_str(), record.as_ref().map(|kv| kv.value.clone()));
            }
        }
        Ok(Snapshot {
            marker: marker
                .map(|kv| Ok::<_, Error>((from_json("epoch marker", &kv.value)?, kv)))
                .transpose()?,
            fresh,
            record: record
                .map(|kv| Ok::<_, Error>((from_json("key record", &kv.value)?, kv)))
                .transpose()?,
            holder: holder
                .map(|kv| Ok::<_, Error>((from_json("holder record", &kv.value)?, kv)))
                .transpose()?,
        })
    }

    /// The store's epoch as `snap` shows it (`None`: no marker yet). Its
    /// age: at least the timer's span (the longer of the max TTL and the
    /// confirmation window) once the epoch's timer key (attached to an etcd
    /// lease of that span, granted with the marker) is gone; while it
    /// lives, the lease's elapsed time by the server's clock.
    async fn store_epoch(&self, snap: &Snapshot) -> Result<Option<StoreEpoch>> {
        let Some((marker, _)) = &snap.marker else {
            return Ok(None);
        };
        let max_ttl = Duration::from_millis(marker.max_ttl_ms);
        let age = match &snap.fresh {
            // The timer lease had the span and one second more.
            None => Some(timer_span(max_ttl) + Duration::from_secs(1)),
            Some(kv) => {
                let request = LeaseTimeToLiveRequest {
                    id: kv.lease,
                    keys: false,
                };
                match self
                    .call("epoch", |ch| async move {
                        LeaseClient::new(ch).lease_time_to_live(request).await
                    })
                    .await?
                {
                    Ok(t) if t.ttl > 0 => {
                        let elapsed = (t.granted_ttl - t.ttl - 1).max(0) as u64;
                        Some(Duration::from_secs(elapsed))
                    }
                    // The timer lease ran out between the two reads.
                    Ok(_) => Some(max_ttl),
                    Err(e) => return Err(error::status("epoch", e)),
                }
            }
        };
        let epoch = StoreEpoch::new(marker.epoch, max_ttl).with_age(age);
        Ok(Some(if marker.proven { epoch.proven() } else { epoch }))
    }

    /// Creates the store: the epoch marker (if still missing) and its timer.
    async fn create_marker(&self, stated: bool) -> Result<()> {
        // Proven only on the creator's statement while opening, for a
        // prefix with no keys at all (nothing of an earlier store is there).
        let proven = stated && !self.has_keys("create store").await?;
        let marker = EpochMarker {
            epoch: leasehold::backend::epoch_at(std::time::SystemTime::now()),
            max_ttl_ms: self.inner.max_ttl.as_millis() as u64,
            proven,
        };
        let timer = self
            .grant(
                "create store",
                lease_secs(timer_span(self.inner.max_ttl)) + 1,
            )
            .await?;
        let resp = self
            .txn(
                "create store",
                vec![grpc::created_at(self.marker_key(), 0)],
                vec![
                    grpc::put(self.marker_key(), to_json(&marker), 0),
                    grpc::put(self.fresh_key(), "", timer),
                ],
            )
            .await?;
        if !resp.succeeded {
            let _ = self.revoke("create store", timer).await;
        } else {
            tracing::info!(prefix = %self.inner.prefix, epoch = marker.epoch, "created the etcd store");
        }
        Ok(())
    }

    async fn revoke(
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
    async fn grant(&self, op: &'static str, secs: i64) -> Result<i64> {
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

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.inner.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
        self.inner.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session to hang a key of `ttl` on: an etcd lease of `ttl`
    /// rounded up to whole seconds, never kept alive (it lives exactly its
    /// seconds from its grant), granted anew when the current one is too
    /// old. For a grant (`since` `None`), too old is when a key put on it
    /// now would live less than 95 % of `ttl` (the grant then reports the
    /// part that ran, [`Grant::ran`], at most 5 %); for a renewal sent at
    /// `since`, when it would not live a whole `ttl` from `since`.
    async fn session(
        &self,
        op: &'static str,
        ttl: Duration,
        since: Option<tokio::time::Instant>,
    ) -> Result<Session> {
        let secs = lease_secs(ttl);
        let slack = Duration::from_secs(secs as u64).saturating_sub(ttl);
        let mut sessions = self.inner.sessions.lock().await;
        if let Some(s) = sessions.get(&secs) {
            let fresh_enough = match since {
                None => s.fresh.elapsed() <= slack + ttl / 20,
                Some(sent) => s.fresh + slack >= sent,
            };
            if fresh_enough {
                return Ok(*s);
            }
        }
        let sent = tokio::time::Instant::now();
        let id = self.grant(op, secs).await?;
        let session = Session {
            id,
            secs,
            fresh: sent,
        };
        sessions.insert(secs, session);
        Ok(session)
    }

    /// The session's etcd lease no longer exists (the cluster is another,
    /// or it was revoked): the next grant starts a new one.
    async fn session_gone(&self, session: &Session) {
        let mut sessions = self.inner.sessions.lock().await;
        if sessions
            .get(&session.secs)
            .is_some_and(|s| s.id == session.id)
        {
            sessions.remove(&session.secs);
        }
    }

    /// Hangs our holder key (`value`, as our grant wrote it) on a session
    /// fresh enough for `since` (see [`session`](Self::session)): `Ok(None)`
    /// when the key no longer has that value (released, expired, broken,
    /// or another holder's), else the part of `ttl` that had run out by
    /// the send. One `Txn` (and a `LeaseGrant` when the session is too old).
    async fn hang(
        &self,
        op: &'static str,
        key: &Key,
        value: &[u8],
        ttl: Duration,
        since: Option<tokio::time::Instant>,
    ) -> Result<Option<Duration>> {
        let hk = self.holder_key(key.as_str());
        for _ in 0..2 {
            let session = self.session(op, ttl, since).await?;
            let ran = ran(&session, ttl);
            match self
                .txn_else(
                    op,
                    vec![grpc::value_is(hk.clone(), value.to_vec())],
                    vec![grpc::put(hk.clone(), value.to_vec(), session.id)],
                    Vec::new(),
                )
                .await?
            {
                Ok(r) => return Ok(r.succeeded.then_some(ran)),
                Err(e) if is_not_found(&e) => self.session_gone(&session).await,
                Err(e) => return Err(error::status(op, e)),
            }
        }
        Err(Error::backend(
            NAME,
            op,
            true,
            "the etcd lease granted for the key was gone at once",
        ))
    }

    /// The key as last seen, if free then and in the epoch `request` names
    /// with a TTL the store allows; `None`: look first. A key whose record
    /// was not seen is taken to have none (if it has one, the grant's
    /// comparison fails and answers with it: the same one round trip a
    /// read would have cost).
    fn remembered(&self, request: &AcquireRequest) -> Option<Free> {
        let seen = self.seen();
        let marker_bytes = seen.marker.clone()?;
        let marker: EpochMarker = from_json("epoch marker", &marker_bytes).ok()?;
        if request.epoch != Some(marker.epoch)
            || request.ttl > Duration::from_millis(marker.max_ttl_ms).min(MAX_TTL)
        {
            return None;
        }
        let record_bytes = seen.records.get(request.key.as_str()).cloned().flatten();
        let record = match &record_bytes {
            Some(b) => from_json("key record", b).ok()?,
            None => KeyRecord::default(),
        };
        Some(Free {
            marker,
            marker_bytes,
            record,
            record_bytes,
        })
    }

    /// What `snap` (of `request.key`) means for the acquire.
    async fn judge(&self, request: &AcquireRequest, snap: Snapshot) -> Result<Judged> {
        const OP: &str = "acquire";
        let Some((marker, marker_kv)) = &snap.marker else {
            self.create_marker(false).await?;
            return Ok(Judged::Again);
        };
        let max_ttl = Duration::from_millis(marker.max_ttl_ms);
        if request.ttl > max_ttl.min(MAX_TTL) {
            return Err(Error::invalid(
                "ttl",
                format!("{:?} is above the store's max TTL {max_ttl:?}", request.ttl),
            ));
        }
        if request.epoch != Some(marker.epoch) {
            let epoch = self.store_epoch(&snap).await?.expect("marker present");
            return Ok(Judged::Answer(AcquireOutcome::OtherEpoch(epoch)));
        }
        if let Some((holder, kv)) = &snap.holder {
            if holder.lease_id != request.lease_id.as_str() {
                // Without the remaining TTL: a second round trip per
                // poll of every waiter (see the module docs).
                return Ok(Judged::Answer(AcquireOutcome::Held(Some(
                    holder.info(None),
                ))));
            }
            // Our own grant, retried after an ambiguous answer: hang it on
            // a fresh session, as a grant now would be.
            if let Some(ran) = self
                .hang(OP, &request.key, &kv.value, request.ttl, None)
                .await?
            {
                self.held()
                    .insert(holder.lease_id.clone(), kv.value.clone());
                return Ok(Judged::Answer(AcquireOutcome::Acquired(
                    Grant::new(holder.token).ran(ran),
                )));
            }
            return Ok(Judged::Again);
        }
        let (record, record_bytes) = match &snap.record {
            Some((r, kv)) => (r.clone(), Some(kv.value.clone())),
            None => (KeyRecord::default(), None),
        };
        Ok(Judged::Free(Free {
            marker: marker.clone(),
            marker_bytes: marker_kv.value.clone(),
            record,
            record_bytes,
        }))
    }

    /// A renewal: our holder key, value for value (our lease id is in it),
    /// moved onto a session fresh enough for `since` (see
    /// [`session`](Self::session): `renew` asks for a whole TTL from its
    /// send, `renew_ran` takes the current session as a grant would, and
    /// says how much of the TTL had run out, so that renewals share
    /// sessions instead of granting one each). It can only extend our own
    /// grant, never another holder's.
    async fn move_on(
        &self,
        lease: &Lease,
        since: Option<tokio::time::Instant>,
    ) -> Result<Duration> {
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
    fn ours<'a>(&self, lease: &Lease, snap: &'a Snapshot) -> Result<&'a (HolderRecord, KeyValue)> {
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

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(MIN_TTL, self.inner.max_ttl)
            .shared_across_processes(true)
            .shared_across_machines(true)
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<AcquireOutcome> {
        const OP: &str = "acquire";
        if request.ttl < MIN_TTL {
            return Err(Error::invalid(
                "ttl",
                format!("{:?} is below etcd's minimum of {MIN_TTL:?}", request.ttl),
            ));
        }
        let hk = self.holder_key(request.key.as_str());
        let rk = self.record_key(request.key.as_str());
        // The key as last seen: no read when it was seen free.
        let mut known = self.remembered(request);
        for _ in 0..RACE_RETRIES {
            let free = match known.take() {
                Some(free) => free,
                None => {
                    let snap = self.read(OP, Some(&request.key)).await?;
                    match self.judge(request, snap).await? {
                        Judged::Answer(outcome) => return Ok(outcome),
                        Judged::Again => continue,
                        Judged::Free(free) => free,
                    }
                }
            };
            let epoch = free.marker.epoch;
            let token = next_token(free.record.token, epoch);
            let session = self.session(OP, request.ttl, None).await?;
            let holder = to_json(&HolderRecord {
                lease_id: request.lease_id.as_str().to_string(),
                token,
                epoch,
                ttl_ms: request.ttl.as_millis() as u64,
                host: request.owner.host.clone(),
                pid: request.owner.pid,
                label: request.owner.label.clone(),
                data: request.data.clone(),
                acquired_at_ms: now_ms(),
            });
            let record = to_json(&KeyRecord {
                token,
                epoch,
                ..free.record.clone()
            });
            // Granted only if the marker and the record are still the bytes
            // the token was computed from (the same store, nobody granted
            // since) and nobody holds the key; otherwise the failure branch
            // reads the key, at the same revision.
            let compare = vec![
                grpc::value_is(self.marker_key(), free.marker_bytes.clone()),
                match &free.record_bytes {
                    Some(bytes) => grpc::value_is(rk.clone(), bytes.clone()),
                    None => grpc::created_at(rk.clone(), 0),
                },
                grpc::created_at(hk.clone(), 0),
            ];
            let success = vec![
                grpc::put(hk.clone(), holder.clone(), session.id),
                grpc::put(rk.clone(), record.clone(), 0),
            ];
            let ran = ran(&session, request.ttl);
            let failure = self.snapshot_ops(Some(&request.key));
            match self.txn_else(OP, compare, success, failure).await? {
                Ok(r) if r.succeeded => {
                    self.seen().remember(request.key.as_str(), Some(record));
                    self.held()
                        .insert(request.lease_id.as_str().to_string(), holder);
                    return Ok(AcquireOutcome::Acquired(Grant::new(token).ran(ran)));
                }
                Ok(r) => {
                    // Held, granted since, or another store: as the key is.
                    let snap = self.snapshot(Some(&request.key), r.responses)?;
                    match self.judge(request, snap).await? {
                        Judged::Answer(outcome) => return Ok(outcome),
                        Judged::Again => {}
                        Judged::Free(free) => known = Some(free),
                    }
                }
                Err(e) if is_not_found(&e) => {
                    // The session's etcd lease is gone: a new one, and again.
                    self.session_gone(&session).await;
                    known = Some(free);
                }
                // Ambiguous: the grant may have landed under our lease id,
                // which a retry recognises.
                Err(e) => return Err(error::status(OP, e)),
            }
        }
        Err(Error::backend(
            NAME,
            OP,
            true,
            "lost the race for the key too many times in a row",
        ))
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        let sent = tokio::time::Instant::now();
        self.move_on(lease, Some(sent)).await.map(|_| ())
    }

    async fn renew_ran(&self, lease: &Lease) -> Result<Duration> {
        self.move_on(lease, None).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        const OP: &str = "release";
        let hk = self.holder_key(lease.key.as_str());
        let value = self.our_value(OP, lease).await?;
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
        const OP: &str = "record run";
        let rk = self.record_key(lease.key.as_str());
        let hk = self.holder_key(lease.key.as_str());
        for _ in 0..RACE_RETRIES {
            let snap = self.read(OP, Some(&lease.key)).await?;
            let (record, record_rev) = match &snap.record {
                Some((r, kv)) => (Some(r.clone()), kv.mod_revision),
                None => (None, 0),
            };
            match self.ours(lease, &snap) {
                Ok((_, holder_kv)) => {
                    let mut r = record.unwrap_or_default();
                    let stored = run.to_stored();
                    if run.outcome == RunOutcome::Succeeded {
                        r.last_success = Some(stored.clone());
                    }
                    r.last_run = Some(stored);
                    r.last_run_token = run.fencing_token;
                    // Written only while our holder key is the very
                    // version we read (same lease, not broken, not expired).
                    let written = to_json(&r);
                    let resp = self
                        .txn(
                            OP,
                            vec![
                                grpc::modified_at(hk.clone(), holder_kv.mod_revision),
                                grpc::modified_at(rk.clone(), record_rev),
                            ],
                            vec![grpc::put(rk.clone(), written.clone(), 0)],
                        )
                        .await?;
                    if resp.succeeded {
                        self.seen().remember(lease.key.as_str(), Some(written));
                        return Ok(());
                    }
                }
                Err(lost_err) => {
                    // Not our lease any more: never a success; a failed
                    // run is still kept as the last run when it is the
                    // latest the record has seen.
                    let Some(mut r) = record else {
                        return Err(lost_err);
                    };
                    if run.outcome == RunOutcome::Succeeded || r.last_run_token >= run.fencing_token
                    {
                        return Err(lost_err);
                    }
                    r.last_run = Some(run.to_stored());
                    r.last_run_token = run.fencing_token;
                    let resp = self
                        .txn(
                            OP,
                            vec![grpc::modified_at(rk.clone(), record_rev)],
                            vec![grpc::put(rk.clone(), to_json(&r), 0)],
                        )
                        .await?;
                    if resp.succeeded {
                        self.seen().remember(lease.key.as_str(), Some(to_json(&r)));
                        return Err(lost_err);
                    }
                }
            }
        }
        Err(Error::backend(NAME, OP, true, "the key kept changing"))
    }

    fn epoch_at_open(&self) -> Option<StoreEpoch> {
        self.inner
            .opened
            .get()
            .map(leasehold::backend::EpochRead::as_of_now)
    }

    fn watch_release(&self, keys: &[Key]) -> Option<ReleaseWatch> {
        self.inner.listener.as_ref()?.watch(keys)
    }
}
