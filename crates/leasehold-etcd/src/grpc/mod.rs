//! etcd's v3 gRPC API, and the connection this crate keeps to a cluster.
//!
//! The message and client types are generated from etcd's `.proto` files
//! in `vendor/etcd/proto/` by prost and tonic, **once, and committed**
//! (`vendor/etcd/generated/`), so that building this crate runs no protobuf compiler
//! (see the crate docs, "Build"). `tests/generated_code.rs` generates them
//! again and fails when the committed files differ.
//!
//! Only clients are generated (no servers); of them this crate uses `KV`
//! (`Range`, `Txn`), `Lease` (`LeaseGrant`, `LeaseKeepAlive`,
//! `LeaseRevoke`, `LeaseTimeToLive`), `Watch` and `Auth`
//! (`Authenticate`); the benchmarks also use `Lock` (etcd's v3lock
//! service, their peer).
//!
//! [`Connection`] keeps one gRPC channel per endpoint of the cluster and
//! sends every request to one of them, moving on to the next when one
//! cannot be reached, with etcd's auth token (when the URL names a user)
//! sent as the `token` metadata of every request; the free functions build
//! the requests the protocol sends.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod authpb {
    //! etcd's `authpb` package (generated).
    include!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/vendor/etcd/generated/authpb.rs"
    ));
}
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod mvccpb {
    //! etcd's `mvccpb` package: keys, values, events (generated).
    include!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/vendor/etcd/generated/mvccpb.rs"
    ));
}
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod etcdserverpb {
    //! etcd's `etcdserverpb` package: the KV, Lease, Watch, Auth, Cluster and
    //! Maintenance services (generated).
    include!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/vendor/etcd/generated/etcdserverpb.rs"
    ));
}
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod v3lockpb {
    //! etcd's `v3lockpb` package: the Lock service (generated).
    include!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/vendor/etcd/generated/v3lockpb.rs"
    ));
}

use etcdserverpb::auth_client::AuthClient;
use etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use etcdserverpb::kv_client::KvClient;
use etcdserverpb::lease_client::LeaseClient;
use etcdserverpb::request_op::Request as Op;
use etcdserverpb::response_op::Response as OpResponse;
use etcdserverpb::watch_client::WatchClient;
use etcdserverpb::{
    AuthenticateRequest, Compare, DeleteRangeRequest, LeaseKeepAliveRequest, PutRequest,
    RangeRequest, RequestOp, ResponseOp, TxnRequest,
};
use mvccpb::KeyValue;
use v3lockpb::lock_client::LockClient;

/// A channel that sends the auth token with every request.
pub type Authed = InterceptedService<Channel, AuthToken>;

/// Adds etcd's auth token (if any) to every request as its `token`
/// metadata, as etcd's own clients do.
#[derive(Clone, Default)]
pub struct AuthToken(Arc<RwLock<Option<MetadataValue<Ascii>>>>);

impl tonic::service::Interceptor for AuthToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let token = self.0.read().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = token.as_ref() {
            request.metadata_mut().insert("token", t.clone());
        }
        Ok(request)
    }
}

/// How [`Connection::connect`] failed.
#[derive(Debug)]
pub enum ConnectError {
    /// An endpoint that is no valid URI, or a TLS setting the transport
    /// refused.
    Transport(tonic::transport::Error),
    /// `Authenticate` failed (wrong credentials, auth not enabled, or the
    /// cluster did not answer).
    Auth(Status),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Transport(e) => write!(f, "{e}"),
            ConnectError::Auth(s) => write!(f, "authentication failed: {}", s.message()),
        }
    }
}

impl std::error::Error for ConnectError {}

/// The connection to an etcd cluster: a gRPC channel per endpoint (each
/// connected on first use, reconnected by tonic), of which one, the
/// current, gets the requests; with the auth token. Cheap to clone: clones
/// share the channels, the choice of endpoint and the token.
///
/// Failover: a request that could not be sent because the current
/// endpoint refused the connection (or its address does not resolve) is
/// sent at once to the next endpoint, round the list once; a request that
/// timed out moves the current endpoint on for the next request (it may
/// have been applied, so it is not sent again here: the engine's retry
/// decides). One balanced channel over every endpoint, as tonic offers it,
/// kept sending to a refused endpoint: with one of two endpoints down, most
/// operations failed.
#[derive(Clone)]
pub struct Connection {
    channels: Arc<[Channel]>,
    current: Arc<AtomicUsize>,
    token: AuthToken,
    user: Option<Arc<(String, String)>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("user", &self.user.as_ref().map(|u| &u.0))
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// A channel to `urls` (`http://HOST:PORT` or, with this crate's
    /// feature `tls`, `https://HOST:PORT`), each request bounded by
    /// `timeout`, HTTP/2 keep-alive pings every 10 s (an answer within 5 s).
    /// With `user`, authenticates once now (one round trip) and sends the
    /// token from then on; without, contacts nothing yet.
    ///
    /// # Errors
    /// [`ConnectError`] for an invalid endpoint or refused credentials.
    pub async fn connect(
        urls: &[String],
        timeout: Duration,
        user: Option<(String, String)>,
    ) -> Result<Self, ConnectError> {
        let mut endpoints = Vec::with_capacity(urls.len());
        for url in urls {
            let endpoint = Endpoint::from_shared(url.clone())
                .map_err(ConnectError::Transport)?
                .connect_timeout(timeout)
                .timeout(timeout)
                .http2_keep_alive_interval(Duration::from_secs(10))
                .keep_alive_timeout(Duration::from_secs(5))
                .keep_alive_while_idle(true);
            #[cfg(feature = "tls")]
            let endpoint = if url.starts_with("https://") {
                endpoint
                    .tls_config(tonic::transport::ClientTlsConfig::new().with_native_roots())
                    .map_err(ConnectError::Transport)?
            } else {
                endpoint
            };
            endpoints.push(endpoint);
        }
        let channels: Arc<[Channel]> = endpoints.iter().map(Endpoint::connect_lazy).collect();
        let connection = Connection {
            channels,
            current: Arc::new(AtomicUsize::new(0)),
            token: AuthToken::default(),
            user: user.map(Arc::new),
        };
        if connection.user.is_some() {
            connection
                .authenticate()
                .await
                .map_err(ConnectError::Auth)?;
        }
        Ok(connection)
    }

    /// Asks for a new auth token (one round trip) and sends it from now on:
    /// at connect, and again when the cluster answers that a token is no
    /// longer valid (etcd's simple tokens expire after 5 idle minutes).
    /// Does nothing without a user.
    ///
    /// # Errors
    /// The `Authenticate` call's status.
    pub async fn authenticate(&self) -> Result<(), Status> {
        let Some(user) = &self.user else {
            return Ok(());
        };
        let request = AuthenticateRequest {
            name: user.0.clone(),
            password: user.1.clone(),
        };
        // Without the token interceptor: etcd refuses every request that
        // carries an invalid token, `Authenticate` included.
        let response = self
            .each_endpoint(
                |at| self.channels[at].clone(),
                |channel| {
                    let request = request.clone();
                    async move { AuthClient::new(channel).authenticate(request).await }
                },
            )
            .await?
            .into_inner();
        let token = MetadataValue::try_from(response.token)
            .map_err(|_| Status::internal("etcd sent an auth token that is no header value"))?;
        *self.token.0.write().unwrap_or_else(|e| e.into_inner()) = Some(token);
        Ok(())
    }

    /// Whether `status` says the auth token expired or is unknown (after
    /// which [`Connection::authenticate`] and one retry are in order).
    pub fn token_expired(&self, status: &Status) -> bool {
        self.user.is_some()
            && status.code() == tonic::Code::Unauthenticated
            && status.message().contains("invalid auth token")
    }

    /// The endpoint requests go to now (an index into the URL's list).
    pub fn current(&self) -> usize {
        self.current.load(Ordering::Relaxed) % self.channels.len()
    }

    /// Moves on from endpoint `failed` to the next one, unless another
    /// request already did.
    pub fn endpoint_failed(&self, failed: usize) {
        let next = (failed + 1) % self.channels.len();
        let _ = self
            .current
            .compare_exchange(failed, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Sends one request (`send`, given a channel to the current endpoint
    /// that adds the auth token) to the current endpoint, and to the next
    /// ones while the request could not be sent (see
    /// [failover](Connection)).
    ///
    /// # Errors
    /// The last endpoint's status.
    pub async fn call<T, F, Fut>(&self, send: F) -> Result<T, Status>
    where
        F: Fn(Authed) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        self.each_endpoint(|at| self.authed_at(at), send).await
    }

    async fn each_endpoint<C, T, F, Fut>(
        &self,
        channel: impl Fn(usize) -> C,
        send: F,
    ) -> Result<T, Status>
    where
        F: Fn(C) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let mut tries = self.channels.len();
        loop {
            let at = self.current();
            match send(channel(at)).await {
                Err(s) if tries > 1 && never_sent(&s) => {
                    tracing::debug!(endpoint = at, error = %s.message(), "etcd endpoint unreachable; trying the next");
                    self.endpoint_failed(at);
                    tries -= 1;
                }
                other => return other,
            }
        }
    }

    fn authed_at(&self, at: usize) -> Authed {
        InterceptedService::new(self.channels[at].clone(), self.token.clone())
    }

    fn authed(&self) -> Authed {
        self.authed_at(self.current())
    }

    /// The `KV` service.
    pub fn kv(&self) -> KvClient<Authed> {
        KvClient::new(self.authed())
    }

    /// The `Lease` service.
    pub fn lease(&self) -> LeaseClient<Authed> {
        LeaseClient::new(self.authed())
    }

    /// The `Watch` service.
    pub fn watch(&self) -> WatchClient<Authed> {
        WatchClient::new(self.authed())
    }

    /// The `Lock` service (etcd's v3lock).
    pub fn lock(&self) -> LockClient<Authed> {
        LockClient::new(self.authed())
    }

    /// One `LeaseKeepAlive` of lease `id`: its TTL from now in seconds, or
    /// `None` when the lease no longer exists (expired or revoked). The
    /// stream is opened, sent one request, read one answer and closed.
    ///
    /// # Errors
    /// The call's status.
    pub async fn keep_alive_once(&self, id: i64) -> Result<Option<i64>, Status> {
        self.call(|channel| keep_alive_on(channel, id))
            .await
            .map(tonic::Response::into_inner)
    }
}

/// [`Connection::keep_alive_once`] on one endpoint's channel.
///
/// # Errors
/// The call's status.
pub async fn keep_alive_on(
    channel: Authed,
    id: i64,
) -> Result<tonic::Response<Option<i64>>, Status> {
    let request = tokio_stream::once(LeaseKeepAliveRequest { id });
    let mut answers = LeaseClient::new(channel)
        .lease_keep_alive(request)
        .await?
        .into_inner();
    match answers.message().await? {
        Some(a) if a.ttl > 0 => Ok(tonic::Response::new(Some(a.ttl))),
        Some(_) => Ok(tonic::Response::new(None)),
        None => Err(Status::unavailable(
            "etcd closed the keep-alive stream without an answer",
        )),
    }
}

/// Whether `status` is the transport's own request timeout (the
/// endpoint's `timeout`, which may fire just before the caller's).
pub fn timed_out(status: &Status) -> bool {
    status.code() == tonic::Code::DeadlineExceeded
        || (status.code() == tonic::Code::Cancelled && status.message().contains("Timeout expired"))
}

/// Whether `status` says the request never left: the endpoint refused the
/// connection or could not be resolved (tonic's transport errors while
/// connecting), so sending it elsewhere cannot apply it twice.
fn never_sent(status: &Status) -> bool {
    if status.code() != tonic::Code::Unavailable {
        return false;
    }
    let m = status.message();
    m.contains("tcp connect error")
        || m.contains("dns error")
        || m.contains("error trying to connect")
}

/// The end of the range of keys starting with `prefix` (etcd's
/// `range_end`: the prefix with its last byte below 0xff incremented; all
/// keys when the prefix is all 0xff or empty).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A `Range` of one key.
pub fn get(key: impl Into<Vec<u8>>) -> RequestOp {
    op(Op::RequestRange(RangeRequest {
        key: key.into(),
        ..Default::default()
    }))
}

/// A `Range` of every key starting with `prefix`.
pub fn get_prefix(prefix: impl Into<Vec<u8>>) -> RequestOp {
    range_prefix(prefix.into(), false)
}

/// A `Range` that only counts the keys starting with `prefix`.
pub fn count_prefix(prefix: impl Into<Vec<u8>>) -> RequestOp {
    range_prefix(prefix.into(), true)
}

/// A `Range` of every key starting with `key`, or of their count.
fn range_prefix(key: Vec<u8>, count_only: bool) -> RequestOp {
    op(Op::RequestRange(RangeRequest {
        range_end: prefix_end(&key),
        key,
        count_only,
        ..Default::default()
    }))
}

/// A `Put` of `value` at `key`, attached to etcd lease `lease` (0: none).
pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, lease: i64) -> RequestOp {
    op(Op::RequestPut(PutRequest {
        key: key.into(),
        value: value.into(),
        lease,
        ..Default::default()
    }))
}

/// A `DeleteRange` of one key.
pub fn delete(key: impl Into<Vec<u8>>) -> RequestOp {
    op(Op::RequestDeleteRange(DeleteRangeRequest {
        key: key.into(),
        ..Default::default()
    }))
}

/// A `DeleteRange` of every key starting with `prefix`.
pub fn delete_prefix(prefix: impl Into<Vec<u8>>) -> RequestOp {
    let key = prefix.into();
    op(Op::RequestDeleteRange(DeleteRangeRequest {
        range_end: prefix_end(&key),
        key,
        ..Default::default()
    }))
}

/// The comparison `target(key) == value`.
fn equal(key: Vec<u8>, target: CompareTarget, value: TargetUnion) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: target as i32,
        key,
        target_union: Some(value),
        ..Default::default()
    }
}

fn op(request: Op) -> RequestOp {
    RequestOp {
        request: Some(request),
    }
}

/// The comparison `create_revision(key) == revision` (0: the key does not
/// exist).
pub fn created_at(key: impl Into<Vec<u8>>, revision: i64) -> Compare {
    equal(
        key.into(),
        CompareTarget::Create,
        TargetUnion::CreateRevision(revision),
    )
}

/// The comparison `mod_revision(key) == revision` (0: the key does not
/// exist).
pub fn modified_at(key: impl Into<Vec<u8>>, revision: i64) -> Compare {
    equal(
        key.into(),
        CompareTarget::Mod,
        TargetUnion::ModRevision(revision),
    )
}

/// The comparison `value(key) == value` (false when the key does not
/// exist: etcd fails a value comparison on a missing key).
pub fn value_is(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Compare {
    equal(
        key.into(),
        CompareTarget::Value,
        TargetUnion::Value(value.into()),
    )
}

/// The comparison `lease(key) == lease` (the etcd lease the key is
/// attached to; 0: none).
pub fn lease_is(key: impl Into<Vec<u8>>, lease: i64) -> Compare {
    equal(key.into(), CompareTarget::Lease, TargetUnion::Lease(lease))
}

/// A `Txn` nested in another's branch (etcd 3.3 and later).
pub fn nested(txn: TxnRequest) -> RequestOp {
    op(Op::RequestTxn(txn))
}

/// Whether the `Txn` nested as `response` succeeded (false for any other
/// response).
pub fn nested_succeeded(response: &ResponseOp) -> bool {
    matches!(
        &response.response,
        Some(OpResponse::ResponseTxn(t)) if t.succeeded
    )
}

/// The count of a `Range` response (0 for any other).
pub fn range_count(response: &ResponseOp) -> i64 {
    match &response.response {
        Some(OpResponse::ResponseRange(r)) => r.count,
        _ => 0,
    }
}

/// The keys and values a `Range` in a `Txn` answered (none for other
/// operations).
pub fn range_kvs(response: ResponseOp) -> Vec<KeyValue> {
    match response.response {
        Some(OpResponse::ResponseRange(r)) => r.kvs,
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_is_the_first_key_past_the_prefix() {
        assert_eq!(prefix_end(b"leasehold/h/"), b"leasehold/h0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }
}
