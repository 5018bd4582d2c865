//! Sessions: the etcd leases holder keys hang on, one a TTL in whole
//! seconds, never kept alive (see the crate docs' protocol).

use std::time::Duration;

use leasehold::{Error, Key, Result};

use crate::backend::{is_not_found, Session};
use crate::error::{self, NAME};
use crate::grpc;
use crate::{EtcdBackend, MIN_TTL};

/// etcd leases have whole-second TTLs: round up (a longer lease on the
/// server is the safe direction: the holder's own deadline comes first).
pub(crate) fn lease_secs(ttl: Duration) -> i64 {
    let s = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    s.max(MIN_TTL.as_secs()) as i64
}

impl Session {
    /// The part of `ttl` that has run out for a key put on this session at
    /// `now` (on the backend's clock): its lease lives its whole seconds
    /// from `fresh`, which may be less than `ttl` from `now`.
    pub(crate) fn ran(&self, ttl: Duration, now: Duration) -> Duration {
        (self.age(now) + ttl).saturating_sub(Duration::from_secs(self.secs as u64))
    }

    /// How long ago its `LeaseGrant` was sent, at `now`.
    pub(crate) fn age(&self, now: Duration) -> Duration {
        now.saturating_sub(self.fresh)
    }

    /// Whether its etcd lease still lives at `now`.
    pub(crate) fn alive_at(&self, now: Duration) -> bool {
        self.age(now) < Duration::from_secs(self.secs as u64)
    }
}

impl EtcdBackend {
    /// The session to hang a key of `ttl` on: an etcd lease of `ttl`
    /// rounded up to whole seconds, never kept alive (it lives exactly its
    /// seconds from its grant), granted anew when the current one is too
    /// old. For a grant (`since` `None`), too old is when a key put on it
    /// now would live less than 95 % of `ttl` (the grant then reports the
    /// part that ran, [`Grant::ran`], at most 5 %); for a renewal sent at
    /// `since`, when it would not live a whole `ttl` from `since`.
    pub(crate) async fn session(
        &self,
        op: &'static str,
        ttl: Duration,
        since: Option<Duration>,
    ) -> Result<Session> {
        let secs = lease_secs(ttl);
        let slack = Duration::from_secs(secs as u64).saturating_sub(ttl);
        let mut sessions = self.inner.sessions.lock().await;
        if let Some(s) = sessions.get(&secs) {
            let fresh_enough = match since {
                None => s.age(self.inner.clock.now()) <= slack + ttl / 20,
                Some(sent) => s.fresh + slack >= sent,
            };
            if fresh_enough {
                return Ok(*s);
            }
        }
        let sent = self.inner.clock.now();
        let id = self.grant(op, secs).await?;
        let session = Session {
            id,
            secs,
            fresh: sent,
        };
        sessions.insert(secs, session);
        let mut granted = self.inner.granted.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.inner.clock.now();
        granted.retain(|_, s| s.alive_at(now));
        granted.insert(id, session);
        Ok(session)
    }

    /// The session's etcd lease no longer exists (the cluster is another,
    /// or it was revoked): the next grant starts a new one.
    pub(crate) async fn session_gone(&self, session: &Session) {
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
    pub(crate) async fn hang(
        &self,
        op: &'static str,
        key: &Key,
        value: &[u8],
        ttl: Duration,
        since: Option<Duration>,
    ) -> Result<Option<Duration>> {
        let hk = self.holder_key(key.as_str());
        for _ in 0..2 {
            let session = self.session(op, ttl, since).await?;
            let ran = session.ran(ttl, self.inner.clock.now());
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
}
