//! One ZooKeeper session per backend, opened on first use and opened
//! again when it is gone (expired or closed): the store keeps nothing on
//! sessions (no ephemeral nodes), so a new session loses nothing. Every
//! request is bounded by the backend's request timeout.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leasehold::Result;
use tokio::sync::Mutex;
use zookeeper_client as zk;

use crate::error::{timed_out, zk as zk_error};

/// The ZooKeeper session's timeout: how long the server keeps a session
/// whose client went quiet. Nothing of the store's safety depends on it.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection settings and the current session.
pub(crate) struct Connection {
    /// `HOST:PORT,HOST:PORT` (no chroot: paths are absolute).
    hosts: String,
    /// Digest credentials, `USER:PASSWORD`.
    auth: Option<String>,
    request_timeout: Duration,
    client: Mutex<Option<zk::Client>>,
    /// Requests sent through [`Connection::run`] (for benchmarks).
    sent: AtomicU64,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("hosts", &self.hosts)
            .field("auth", &self.auth.as_ref().map(|_| "<digest>"))
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl Connection {
    pub(crate) fn new(hosts: &[String], auth: Option<String>, request_timeout: Duration) -> Self {
        Connection {
            hosts: hosts.join(","),
            auth,
            request_timeout,
            client: Mutex::new(None),
            sent: AtomicU64::new(0),
        }
    }

    /// Requests sent through [`Connection::run`] so far.
    pub(crate) fn requests_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Whether nodes this backend creates carry the creator-only ACL
    /// (digest credentials given) rather than the open one.
    pub(crate) fn acls(&self) -> zk::Acls<'static> {
        if self.auth.is_some() {
            zk::Acls::creator_all()
        } else {
            zk::Acls::anyone_all()
        }
    }

    /// The current session's client, connecting first if there is none or
    /// it has ended.
    pub(crate) async fn client(&self, op: &'static str) -> Result<zk::Client> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.state().is_terminated() {
                return Ok(c.clone());
            }
        }
        let mut connector = zk::Client::connector()
            .with_session_timeout(SESSION_TIMEOUT)
            .with_connection_timeout(self.request_timeout.min(SESSION_TIMEOUT / 3));
        if let Some(auth) = &self.auth {
            connector = connector.with_auth("digest", auth.as_bytes());
        }
        let client = match tokio::time::timeout(
            self.request_timeout,
            connector.connect(&self.hosts),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(zk_error(op, e)),
            Err(_) => return Err(timed_out(op, self.request_timeout)),
        };
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Runs one request on the current session, within the request
    /// timeout. The request's own ZooKeeper error is returned as is (the
    /// caller tells a failed condition from a failure); a time-out or a
    /// failure to connect is a retryable backend error.
    pub(crate) async fn run<T, F, Fut>(
        &self,
        op: &'static str,
        request: F,
    ) -> Result<std::result::Result<T, zk::Error>>
    where
        F: FnOnce(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        let client = self.client(op).await?;
        let session = client.session_id();
        self.sent.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.request_timeout, request(client)).await {
            Ok(Err(e @ (zk::Error::ConnectionLoss | zk::Error::Custom(_)))) => {
                self.discard(session).await;
                Ok(Err(e))
            }
            Ok(answer) => Ok(answer),
            Err(_) => {
                self.discard(session).await;
                Err(timed_out(op, self.request_timeout))
            }
        }
    }

    /// Drops the session `session` (if it is still the current one) after a
    /// request lost its connection or timed out, so that the next request
    /// opens a new one. The client would reconnect the old session by
    /// itself, but a server that lost its data (a new ensemble) refuses a
    /// client that has seen a later transaction than its own, forever; a
    /// new session starts from nothing. The store keeps nothing on
    /// sessions, so nothing is lost.
    async fn discard(&self, session: zk::SessionId) {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_some_and(|c| c.session_id() == session) {
            *slot = None;
        }
    }
}
