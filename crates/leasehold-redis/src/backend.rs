//! The [`Backend`] implementation: one Lua script per operation (see the
//! crate docs for the protocol).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use leasehold::backend::{
    AcquireOutcome, AcquireRequest, Backend, BatchOutcome, Capabilities, Grant, Lease, ReleaseWatch,
};
use leasehold::{backend::StoreEpoch, Error, HolderInfo, Key, KeyInfo, LossReason, Result};
use redis::aio::ConnectionManagerConfig;
use redis::{Script, ScriptInvocation, Value};

use crate::error::{self, bad_reply, NAME};
use crate::record::{self, array, num, text, Names};
use crate::scripts::Scripts;
use crate::topology::{Conn, SharedConnector};
use crate::MIN_TTL;
use leasehold::backend::shared_builder::RecordedMaxTtl;
use leasehold::backend::shared_builder::ServerCommon;

/// The Redis [`Backend`]. See the [crate docs](crate) for the protocol.
/// Cheap to clone (the connection is shared).
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

/// What a backend is made of (the builder sets it up).
pub(crate) struct Inner {
    /// The store's epoch as read while opening; the listener for releases.
    pub(crate) common: ServerCommon,
    /// Makes connections: to the server, the primary Sentinel names now,
    /// or the cluster.
    pub(crate) connector: SharedConnector,
    pub(crate) manager_config: ConnectionManagerConfig,
    /// The connection, and how many times it was replaced.
    pub(crate) conn: Mutex<(u64, Conn)>,
    /// The connection's generation, for the subscription: a new connection
    /// (a silent server, or, under Sentinel, a new primary) ends it, and
    /// the listener subscribes again, where the connector says.
    pub(crate) generation: tokio::sync::watch::Sender<u64>,
    pub(crate) names: Names,
    pub(crate) scripts: Scripts,
    /// The max TTL a store (or epoch) started by this backend records.
    pub(crate) max_ttl: Duration,
    /// The store's recorded max TTL, in ms (for `capabilities`).
    pub(crate) store_max_ttl: RecordedMaxTtl,
    pub(crate) request_timeout: Duration,
    /// `host:port/db` (or the sentinels, or the cluster's nodes), for
    /// Debug (never the user or password).
    pub(crate) target: String,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("target", &self.inner.target)
            .field("prefix", &self.inner.names.prefix)
            .finish_non_exhaustive()
    }
}

/// An optional string as the scripts take it: `''` for none, else `+`
/// and the value.
fn optional(s: &Option<String>) -> String {
    match s {
        Some(s) => format!("+{s}"),
        None => String::new(),
    }
}

impl RedisBackend {
    /// Opens a backend on `inner`: refuses a server that may evict the
    /// store's keys, and reads (or starts) the store's epoch.
    pub(crate) async fn open(inner: Inner, creation: leasehold::Creation) -> Result<Self> {
        let backend = RedisBackend {
            inner: Arc::new(inner),
        };
        backend.refuse_eviction().await?;
        let (epoch, created) = backend.check_epoch(creation).await?;
        backend.inner.common.opened(epoch);
        backend.inner.common.created(created);
        Ok(backend)
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.names.prefix
    }

    /// The store's epoch, read now (started if the store has none, or its
    /// marker was written by another server process).
    ///
    /// # Errors
    /// [`Error::Backend`] when the server cannot be reached.
    pub async fn epoch(&self) -> Result<StoreEpoch> {
        Ok(self.check_epoch(leasehold::Creation::IfMissing).await?.0)
    }

    /// The store's epoch, as `creation` allows: started if missing, with
    /// `NewProven` proven, with `Never` only read ([`Error::NoStore`] when
    /// the prefix has no store); with whether this call created the store
    /// (the script wrote the first marker under a prefix without keys).
    async fn check_epoch(&self, creation: leasehold::Creation) -> Result<(StoreEpoch, bool)> {
        const OP: &str = "epoch";
        let mode = match creation {
            leasehold::Creation::Never => "look",
            leasehold::Creation::NewProven => "proven",
            _ => "",
        };
        let mut inv = self.inner.scripts.epoch.prepare_invoke();
        inv.key(&self.inner.names.marker)
            .key(&self.inner.names.index)
            .arg(self.inner.max_ttl.as_millis() as u64)
            .arg(mode);
        let reply = self.call(OP, Retry::Once, &inv).await?;
        let fields = array(OP, &reply)?;
        if fields.is_empty() {
            return Err(Error::no_store(format!(
                "no epoch marker and no keys under the prefix {:?}",
                self.inner.names.prefix
            )));
        }
        let epoch = record::store_epoch(OP, fields)?;
        self.note_max_ttl(&epoch);
        let created = fields.get(3).and_then(num) == Some(1);
        Ok((epoch, created))
    }

    /// Waits until this backend is subscribed to releases (started on the
    /// first wait otherwise). Returns at once when wake-ups are off.
    ///
    /// # Cancel safety
    /// Cancel safe: the subscription goes on.
    pub async fn listening(&self) {
        self.inner.common.listening().await;
    }

    /// A server that evicts keys without a TTL when memory runs out could
    /// drop a key's record (its fencing counter) or the epoch marker while
    /// leases are held: refused. When `CONFIG` is not allowed (managed
    /// services, ACLs), the setting cannot be read: the crate docs say what
    /// to check by hand.
    async fn refuse_eviction(&self) -> Result<()> {
        let mut conn = self.conn().1;
        let answer = tokio::time::timeout(
            self.inner.request_timeout,
            redis::cmd("CONFIG")
                .arg("GET")
                .arg("maxmemory-policy")
                .query_async::<Vec<String>>(&mut conn),
        )
        .await;
        match answer {
            Ok(Ok(pair)) => match pair.get(1) {
                Some(policy) if policy.starts_with("allkeys") => Err(Error::backend(
                    NAME,
                    "open",
                    false,
                    format!(
                        "the server's maxmemory-policy is {policy}: it may evict a lease record or the store's epoch marker under memory pressure, and then repeat fencing tokens or grant a held key; use noeviction or a volatile-* policy (the store's keys have no TTL), or a server of its own"
                    ),
                )),
                _ => Ok(()),
            },
            // CONFIG not allowed for this user (NOPERM), or renamed or
            // disabled (an unknown command): the policy cannot be read.
            Ok(Err(e)) if matches!(e.code(), Some("NOPERM" | "ERR")) => {
                tracing::debug!(error = %e, "cannot read maxmemory-policy; make sure it is noeviction or volatile-*");
                Ok(())
            }
            // A missing or wrong password, a server that is loading, ...
            Ok(Err(e)) => Err(error::client("open", e)),
            Err(_) => Err(error::timed_out("open", self.inner.request_timeout)),
        }
    }

    fn conn(&self) -> (u64, Conn) {
        let guard = self.inner.conn.lock().unwrap_or_else(|e| e.into_inner());
        (guard.0, guard.1.clone())
    }

    /// Replaces a connection that stopped answering (it may sit behind a
    /// partition; redis-rs reconnects only on errors, not on silence), or,
    /// under Sentinel, one to a server that is no longer the primary: the
    /// new one goes to the primary the sentinels name now.
    async fn replace_conn(&self, generation: u64) {
        if self.conn().0 != generation {
            return; // someone replaced it already
        }
        // Three request timeouts: a new cluster connection first connects
        // to every seed node at once (one may be the frozen primary that
        // made this connection time out: a connection timeout), then asks
        // one that answered for the slots; the sentinels are asked in turn.
        let made = tokio::time::timeout(
            self.inner.request_timeout * 3,
            self.inner.connector.connect(
                &self.inner.manager_config,
                self.inner.request_timeout,
                true,
            ),
        )
        .await;
        match made {
            Ok(Ok(conn)) => {
                let mut guard = self.inner.conn.lock().unwrap_or_else(|e| e.into_inner());
                if guard.0 == generation {
                    *guard = (generation + 1, conn);
                    self.inner.generation.send_replace(generation + 1);
                }
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "cannot make a new connection"),
            Err(_) => tracing::debug!("no new connection within the request timeout"),
        }
    }

    /// Runs one script (one round trip: EVALSHA, or EVAL when the server
    /// does not have the script cached yet). A script whose repetition
    /// changes nothing more (`Retry::Once`: acquire with the same lease id,
    /// renew, record a run, read) is sent once more when the connection
    /// turned out to be dead (killed by the server, a proxy restarted):
    /// the connection manager has reconnected by then, and the caller sees
    /// no error for a connection that was merely stale. Release and break
    /// are not repeated: a repeated release would find its own work done
    /// and report the lease lost. Under Sentinel, an answer that says the
    /// server is not (or no longer) the primary, or a dead connection,
    /// makes a new connection to the primary the sentinels name first;
    /// any script is sent again after `READONLY` (a replica refused it
    /// before it wrote anything).
    async fn call(
        &self,
        op: &'static str,
        retry: Retry,
        inv: &ScriptInvocation<'_>,
    ) -> Result<Value> {
        let mut sends_left = match retry {
            Retry::Once => 2,
            Retry::Never => 1,
        };
        let mut resent_after_refusal = false;
        loop {
            sends_left -= 1;
            let (generation, mut conn) = self.conn();
            match tokio::time::timeout(
                self.inner.request_timeout,
                inv.invoke_async::<Value>(&mut conn),
            )
            .await
            {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => {
                    let follow = self.inner.connector.follows_primary(&e);
                    if follow {
                        self.replace_conn(generation).await;
                    }
                    // Refused before the script wrote anything: by a
                    // replica, or by a primary short of replicas
                    // (`min-replicas-to-write`), which may have been
                    // demoted since. Sent once more, to the primary the
                    // sentinels name now, whatever `retry` says.
                    let refused = matches!(e.code(), Some("READONLY" | "NOREPLICAS"));
                    if follow && refused && !resent_after_refusal {
                        resent_after_refusal = true;
                        sends_left += 1;
                        tracing::debug!(error = %e, op, "not the primary; asking the sentinels");
                    } else if sends_left > 0 && (e.is_io_error() || e.is_connection_dropped()) {
                        tracing::debug!(error = %e, op, "connection lost; sending once more");
                    } else {
                        return Err(error::client(op, e));
                    }
                }
                Err(_) => {
                    self.replace_conn(generation).await;
                    return Err(error::timed_out(op, self.inner.request_timeout));
                }
            }
        }
    }

    /// Sends an acquire script, asked again while the store's epoch has
    /// not begun on the server's clock (reply 5, see `acquire.lua`: at
    /// most a second, after the epoch was started; a few times), and
    /// answers its reply's items.
    async fn acquire_call(
        &self,
        op: &'static str,
        inv: &ScriptInvocation<'_>,
    ) -> Result<Vec<Value>> {
        let mut reply = self.call(op, Retry::Once, inv).await?;
        for _ in 0..EPOCH_START_TRIES {
            let items = array(op, &reply)?;
            if items.first().and_then(num) != Some(5) {
                break;
            }
            let ms = items.get(1).and_then(num).unwrap_or(0).clamp(1, 1_000) as u64;
            tokio::time::sleep(Duration::from_millis(ms + 1)).await;
            reply = self.call(op, Retry::Once, inv).await?;
        }
        Ok(array(op, &reply)?.to_vec())
    }

    /// The error an acquire script's reply 4 (a TTL above the store's max
    /// TTL; `ttl` the longest asked for) or 5 (the epoch has not begun)
    /// means, or a bad reply (see `acquire.lua`).
    fn acquire_refusal(&self, op: &'static str, items: &[Value], ttl: Duration) -> Error {
        match items.first().and_then(num) {
            Some(4) => {
                let max = items.get(1).and_then(num).unwrap_or_default().max(0) as u64;
                let max = Duration::from_millis(max);
                self.inner.store_max_ttl.set(max);
                ttl_error(ttl, max)
            }
            Some(5) => Error::backend(
                NAME,
                op,
                true,
                "the store's epoch has not begun on the server's clock yet".to_string(),
            ),
            _ => bad_reply(op, format!("{items:?}")),
        }
    }

    fn note_max_ttl(&self, epoch: &StoreEpoch) {
        self.inner.store_max_ttl.set(epoch.max_ttl);
    }

    fn channel(&self) -> &str {
        if self.inner.common.listener().is_some() {
            &self.inner.names.channel
        } else {
            ""
        }
    }

    /// Invokes `script` with the marker and `key`'s record as its keys.
    fn on_key<'a>(&'a self, script: &'a Script, key: &Key) -> ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        inv.key(&self.inner.names.marker)
            .key(self.inner.names.record(key.as_str()));
        inv
    }
}

/// How many times an acquire waits for the store's epoch to begin (each
/// wait at most a second: one is enough unless the server's clock stands
/// still).
const EPOCH_START_TRIES: usize = 3;

/// Whether a script may be sent again after a dead connection.
#[derive(Debug, Clone, Copy)]
enum Retry {
    Once,
    Never,
}

fn lost(key: &Key, why: impl Into<String>) -> Error {
    Error::LeaseLost {
        key: key.to_string(),
        reason: LossReason::Revoked(why.into()),
    }
}

/// Why a renewal, release or run record changed nothing.
fn why_not_ours(op: &'static str, key: &Key, reply: &Value) -> Error {
    let why = match text(reply).as_deref() {
        Some("epoch") => "the store's epoch changed (its data was lost, or the server restarted or failed over: the lease is void)",
        Some("free") => "the lease was released or broken, or the key has no record",
        Some("other") => "the key is held by another lease",
        Some("expired") => "the lease expired",
        _ => return bad_reply(op, format!("{reply:?}")),
    };
    lost(key, why)
}

#[async_trait]
impl Backend for RedisBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.store_max_ttl.capabilities(MIN_TTL)
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

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        const OP: &str = "acquire";
        if req.ttl < MIN_TTL {
            return Err(ttl_error(req.ttl, self.capabilities().max_ttl));
        }
        let mut inv = self.inner.scripts.acquire.prepare_invoke();
        inv.key(&self.inner.names.marker)
            .key(self.inner.names.record(req.key.as_str()))
            .key(&self.inner.names.index)
            .arg(req.key.as_str())
            .arg(req.lease_id.as_str())
            .arg(req.ttl.as_millis() as u64)
            .arg(req.epoch.unwrap_or(0))
            .arg(self.inner.max_ttl.as_millis() as u64)
            .arg(&req.owner.host)
            .arg(req.owner.pid)
            .arg(optional(&req.owner.label))
            .arg(optional(&req.data));
        let items = self.acquire_call(OP, &inv).await?;
        match items.first().and_then(num) {
            Some(1) => match items.get(1).and_then(num) {
                Some(token) if token > 0 => Ok(AcquireOutcome::Acquired(Grant::new(token as u64))),
                _ => Err(bad_reply(OP, format!("{items:?}"))),
            },
            Some(2) => Ok(AcquireOutcome::Held(items.get(1).and_then(record::holder))),
            Some(3) => {
                let epoch = record::store_epoch(OP, &items[1..])?;
                self.note_max_ttl(&epoch);
                Ok(AcquireOutcome::OtherEpoch(epoch))
            }
            _ => Err(self.acquire_refusal(OP, &items, req.ttl)),
        }
    }

    async fn try_acquire_all(&self, reqs: &[AcquireRequest]) -> Result<BatchOutcome> {
        const OP: &str = "acquire";
        let Some(first) = reqs.first() else {
            return Ok(BatchOutcome::Acquired(Vec::new()));
        };
        if let Some(short) = reqs.iter().find(|r| r.ttl < MIN_TTL) {
            return Err(ttl_error(short.ttl, self.capabilities().max_ttl));
        }
        // Every key of a store is in one slot (see the crate docs), so one
        // script may touch them all, on a cluster too.
        let mut inv = self.inner.scripts.acquire_all.prepare_invoke();
        inv.key(&self.inner.names.marker)
            .key(&self.inner.names.index);
        for req in reqs {
            inv.key(self.inner.names.record(req.key.as_str()));
        }
        inv.arg(first.epoch.unwrap_or(0))
            .arg(self.inner.max_ttl.as_millis() as u64);
        for req in reqs {
            inv.arg(req.key.as_str())
                .arg(req.lease_id.as_str())
                .arg(req.ttl.as_millis() as u64)
                .arg(&req.owner.host)
                .arg(req.owner.pid)
                .arg(optional(&req.owner.label))
                .arg(optional(&req.data));
        }
        let items = self.acquire_call(OP, &inv).await?;
        match items.first().and_then(num) {
            Some(1) => {
                let tokens = match items.get(1) {
                    Some(v) => array(OP, v)?,
                    None => return Err(bad_reply(OP, format!("{items:?}"))),
                };
                let grants: Option<Vec<Grant>> = tokens
                    .iter()
                    .map(|t| num(t).filter(|t| *t > 0).map(|t| Grant::new(t as u64)))
                    .collect();
                match grants {
                    Some(grants) if grants.len() == reqs.len() => {
                        Ok(BatchOutcome::Acquired(grants))
                    }
                    _ => Err(bad_reply(OP, format!("{items:?}"))),
                }
            }
            Some(2) => match items.get(2).and_then(num) {
                Some(index) if (0..reqs.len() as i64).contains(&index) => Ok(BatchOutcome::Held {
                    index: index as usize,
                    holder: items.get(1).and_then(record::holder),
                }),
                _ => Err(bad_reply(OP, format!("{items:?}"))),
            },
            Some(3) => {
                let epoch = record::store_epoch(OP, &items[1..])?;
                self.note_max_ttl(&epoch);
                Ok(BatchOutcome::OtherEpoch(epoch))
            }
            _ => {
                let longest = reqs.iter().map(|r| r.ttl).max().unwrap_or_default();
                Err(self.acquire_refusal(OP, &items, longest))
            }
        }
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        const OP: &str = "renew";
        let mut inv = self.on_key(&self.inner.scripts.renew, &lease.key);
        inv.arg(lease.lease_id.as_str())
            .arg(lease.epoch)
            .arg(lease.ttl.as_millis() as u64);
        let reply = self.call(OP, Retry::Once, &inv).await?;
        if text(&reply).as_deref() == Some("ok") {
            return Ok(());
        }
        Err(why_not_ours(OP, &lease.key, &reply))
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        const OP: &str = "release";
        let mut inv = self.on_key(&self.inner.scripts.release, &lease.key);
        inv.arg(lease.lease_id.as_str())
            .arg(lease.epoch)
            .arg(self.channel())
            .arg(lease.key.as_str());
        let reply = self.call(OP, Retry::Never, &inv).await?;
        if text(&reply).as_deref() == Some("ok") {
            return Ok(());
        }
        Err(why_not_ours(OP, &lease.key, &reply))
    }

    async fn record_run(&self, lease: &Lease, run: &leasehold::RunRecord) -> Result<()> {
        const OP: &str = "record_run";
        let mut inv = self.on_key(&self.inner.scripts.record_run, &lease.key);
        inv.arg(lease.lease_id.as_str())
            .arg(lease.epoch)
            .arg(run.to_stored())
            .arg(lease.fencing_token)
            .arg(if run.succeeded() { "1" } else { "0" });
        let reply = self.call(OP, Retry::Once, &inv).await?;
        if text(&reply).as_deref() == Some("ok") {
            return Ok(());
        }
        Err(why_not_ours(OP, &lease.key, &reply))
    }

    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        const OP: &str = "inspect";
        let inv = self.on_key(&self.inner.scripts.inspect, key);
        let reply = self.call(OP, Retry::Once, &inv).await?;
        match array(OP, &reply)?.first() {
            Some(entry) => record::key_info(OP, key.clone(), entry),
            None => Ok(KeyInfo::new(key.clone(), 0, None)),
        }
    }

    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        const OP: &str = "break";
        let mut inv = self.on_key(&self.inner.scripts.break_lease, key);
        inv.arg(self.channel()).arg(key.as_str());
        let reply = self.call(OP, Retry::Never, &inv).await?;
        let items = array(OP, &reply)?;
        Ok(match items.first().and_then(num) {
            Some(1) => items.get(1).and_then(record::holder),
            _ => None,
        })
    }

    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        const OP: &str = "list";
        let names = &self.inner.names;
        let (min, max) = if prefix.is_empty() {
            ("-".to_string(), "+".to_string())
        } else {
            // Key names are ASCII: every name starting with `prefix` sorts
            // below `prefix` followed by byte 0xff.
            (format!("[{prefix}"), format!("({prefix}\u{7f}"))
        };
        let mut inv = self.inner.scripts.inspect.prepare_invoke();
        inv.key(&names.marker)
            .key(&names.index)
            .arg(names.records())
            .arg(min)
            .arg(max)
            .arg(prefix);
        let reply = self.call(OP, Retry::Once, &inv).await?;
        array(OP, &reply)?
            .iter()
            .map(|entry| {
                let name = array(OP, entry)?
                    .first()
                    .and_then(text)
                    .ok_or_else(|| bad_reply(OP, format!("{entry:?}")))?;
                record::key_info(OP, Key::new(name)?, entry)
            })
            .collect()
    }
}

fn ttl_error(ttl: Duration, max: Duration) -> Error {
    Error::invalid(
        "ttl",
        format!(
            "{ttl:?} is outside {MIN_TTL:?}..={max:?} (the store's max TTL bounds the wait after the store's data is lost)"
        ),
    )
}
