//! [`ZkBackend`]: the [`Backend`] operations over the record nodes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use leasehold::backend::shared_builder::{RecordedMaxTtl, ServerCommon, ServerOptions};
use leasehold::backend::{
    AcquireOutcome, AcquireRequest, Backend, Capabilities, HolderInfo, KeyInfo, Lease,
    Observations, ReleaseWatch, SharedClock, StoreEpoch,
};
use leasehold::{Creation, Error, Key, Result, RunRecord};

use crate::lease::{raced, ROUNDS};
use zookeeper_client as zk;

use crate::client::Connection;
use crate::epoch::EpochState;
use crate::error::{zk as zk_error, NAME};
use crate::names::{key_of, Paths};
use crate::record::{unix_ms, Record};
use crate::MIN_TTL;

/// A ZooKeeper ensemble as a lease store. See the crate docs for the
/// protocol; build it with [`ZkBackend::builder`] or
/// [`ZkBackend::from_url`].
#[derive(Debug)]
pub struct ZkBackend {
    pub(crate) inner: Arc<Inner>,
}

/// What the backend keeps (shared with its release listener).
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) conn: Arc<Connection>,
    pub(crate) paths: Paths,
    pub(crate) options: ServerOptions,
    pub(crate) clock: SharedClock,
    /// Added to a holder's TTL before a waiter may take over.
    pub(crate) margin: Duration,
    pub(crate) max_ttl: RecordedMaxTtl,
    pub(crate) observations: Observations,
    pub(crate) epoch: Mutex<Option<EpochState>>,
    pub(crate) common: ServerCommon,
    /// Our last write of each record we hold.
    pub(crate) writes: crate::writes::LastWrites,
}

/// A record as read: its contents and the node's version.
pub(crate) struct Read {
    pub(crate) record: Record,
    pub(crate) stat: zk::Stat,
}

impl Read {
    /// The version a waiter watches: the node's modification zxid and
    /// version (both change with every write).
    pub(crate) fn rvn(&self) -> String {
        format!("{}:{}", self.stat.mzxid, self.stat.version)
    }
}

/// What a conditional write of a record met.
pub(crate) enum Written {
    /// Written; the node's new version.
    Done(i32),
    /// The record changed since it was read.
    Changed,
    /// The record (or its epoch's folder) is gone.
    Gone,
}

impl Inner {
    pub(crate) fn creation(&self) -> Creation {
        self.options.creation
    }

    /// Keeps an epoch just read.
    pub(crate) fn keep(&self, state: EpochState) {
        *self.epoch.lock().unwrap_or_else(|e| e.into_inner()) = Some(state);
    }

    pub(crate) fn is_settled(&self, epoch: u64) -> bool {
        self.epoch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|s| s.epoch.epoch == epoch && s.settled)
    }

    pub(crate) fn mark_settled(&self, epoch: u64) {
        if let Some(s) = self
            .epoch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .filter(|s| s.epoch.epoch == epoch)
        {
            s.settled = true;
        }
    }

    /// The epoch as last read (its age as of now), reading it first if it
    /// never was.
    pub(crate) async fn current_epoch(&self, op: &'static str) -> Result<StoreEpoch> {
        let kept = self.epoch.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let state = match kept {
            Some(s) => s,
            None => self.refresh_epoch(op).await?,
        };
        let since = self.clock.now().saturating_sub(state.read_at);
        let age = state.epoch.age.map(|a| a.saturating_add(since));
        Ok(state.epoch.clone().with_age(age))
    }

    /// Reads `key`'s record in `epoch`: `None` when it has none.
    pub(crate) async fn read(
        &self,
        op: &'static str,
        epoch: u64,
        key: &Key,
    ) -> Result<Option<Read>> {
        let path = self.paths.record(epoch, key);
        match self
            .conn
            .run(op, |c| async move { c.get_data(&path).await })
            .await?
        {
            Ok((bytes, stat)) => Ok(Some(Read {
                record: Record::decode(op, &bytes)?,
                stat,
            })),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(zk_error(op, e)),
        }
    }

    /// Writes `record` over `key`'s record in `epoch` if it is still at
    /// `version`.
    pub(crate) async fn write(
        &self,
        op: &'static str,
        epoch: u64,
        key: &Key,
        record: &Record,
        version: i32,
    ) -> Result<Written> {
        let path = self.paths.record(epoch, key);
        let bytes = record.encode();
        match self
            .conn
            .run(op, |c| async move {
                c.set_data(&path, &bytes, Some(version)).await
            })
            .await?
        {
            Ok(stat) => Ok(Written::Done(stat.version)),
            Err(zk::Error::BadVersion) => Ok(Written::Changed),
            Err(zk::Error::NoNode) => Ok(Written::Gone),
            Err(e) => Err(zk_error(op, e)),
        }
    }

    /// The epoch to read a key in: the marker's, read now (reads follow
    /// the store as it is, and write nothing); `None` when there is no
    /// store.
    async fn epoch_for_reading(&self, op: &'static str) -> Result<Option<u64>> {
        Ok(self.read_marker(op).await?.map(|(marker, _)| marker.epoch))
    }
}

pub(crate) fn check_ttl(ttl: Duration, max_ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL || ttl > max_ttl {
        return Err(Error::invalid(
            "ttl",
            format!(
                "{ttl:?} is outside {MIN_TTL:?}..={max_ttl:?} (the store's max TTL bounds the wait after its data is lost)"
            ),
        ));
    }
    Ok(())
}

impl ZkBackend {
    /// The store's epoch, read from its marker now (with its age on the
    /// server's clock), beginning one if there is none (unless built with
    /// `Creation::Never`).
    ///
    /// # Errors
    /// As any request; [`Error::NoStore`] with `Creation::Never` and no
    /// store.
    ///
    /// # Cancel safety
    /// Cancel safe: a store begun before the cancel stays, as any other
    /// process would find it.
    pub async fn epoch(&self) -> Result<StoreEpoch> {
        self.inner.refresh_epoch("epoch").await.map(|s| s.epoch)
    }

    /// Returns once waiters hear of other processes' releases (at once
    /// when wake-ups are off).
    ///
    /// # Cancel safety
    /// Cancel safe: the listening goes on.
    pub async fn listening(&self) {
        self.inner.common.listening().await
    }

    /// The store's root node (the URL's chroot, or
    /// [`DEFAULT_ROOT`](crate::DEFAULT_ROOT)).
    pub fn root(&self) -> &str {
        self.inner.paths.root()
    }

    /// Requests this backend sent to the ensemble (reads, conditional
    /// writes and transactions; not the session's own pings or the
    /// release watch), for benchmarks: an uncontended acquire + release
    /// of a key is 3 (see the crate docs' protocol).
    #[doc(hidden)]
    pub fn requests_sent(&self) -> u64 {
        self.inner.conn.requests_sent()
    }

    /// The path of `key`'s record in `epoch`, for the benchmarks' raw
    /// loop, which sends leasehold's requests itself.
    #[doc(hidden)]
    pub fn record_path(&self, epoch: u64, key: &Key) -> String {
        self.inner.paths.record(epoch, key)
    }

    /// Deletes the store: its root node and everything under it, in one
    /// transaction (an operator's `deleteall`, at once). Every lease and
    /// fencing counter of the store is lost; the next use begins a new
    /// epoch. For tests and the torture harness's store-loss fault.
    ///
    /// # Errors
    /// As any request (a node created under the root meanwhile fails the
    /// transaction: try again).
    pub async fn delete_store(&self) -> Result<()> {
        const OP: &str = "delete the store";
        let client = self.inner.conn.client(OP).await?;
        let mut nodes = vec![self.root().to_string()];
        let mut i = 0;
        while i < nodes.len() {
            let parent = nodes[i].clone();
            match client.list_children(&parent).await {
                Ok(children) => nodes.extend(children.into_iter().map(|c| format!("{parent}/{c}"))),
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(crate::error::zk(OP, e)),
            }
            i += 1;
        }
        let mut writer = client.new_multi_writer();
        for node in nodes.iter().rev() {
            writer
                .add_delete(node, None)
                .map_err(|e| crate::error::zk(OP, e))?;
        }
        match writer.commit().await {
            Ok(_) => Ok(()),
            // Nothing there: nothing to delete.
            Err(zk::MultiWriteError::OperationFailed {
                source: zk::Error::NoNode,
                ..
            }) if nodes.len() == 1 => Ok(()),
            Err(e) => Err(Error::backend(NAME, OP, true, e.to_string())),
        }
    }
}

#[async_trait]
impl Backend for ZkBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        self.inner
            .max_ttl
            .capabilities(MIN_TTL)
            .takeover_needs_observation(true)
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<AcquireOutcome> {
        self.inner.acquire(request).await
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        self.inner.renew(lease).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        self.inner.release(lease).await
    }

    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        let inner = &self.inner;
        let Some(epoch) = inner.epoch_for_reading("inspect").await? else {
            return Ok(KeyInfo::new(key.clone(), 0, None));
        };
        Ok(match inner.read("inspect", epoch, key).await? {
            Some(read) => read.record.info(key.clone()),
            None => KeyInfo::new(key.clone(), 0, None),
        })
    }

    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        let inner = &self.inner;
        let Some(epoch) = inner.epoch_for_reading("break").await? else {
            return Ok(None);
        };
        for _ in 0..ROUNDS {
            let Some(mut read) = inner.read("break", epoch, key).await? else {
                return Ok(None);
            };
            let Some(holder) = read.record.holder() else {
                return Ok(None);
            };
            read.record.lease = None;
            read.record.released_by = None;
            match inner
                .write("break", epoch, key, &read.record, read.stat.version)
                .await?
            {
                Written::Done(_) => return Ok(Some(holder)),
                Written::Changed => continue,
                Written::Gone => return Ok(None),
            }
        }
        Err(raced("break"))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        let inner = &self.inner;
        let Some(epoch) = inner.epoch_for_reading("list").await? else {
            return Ok(Vec::new());
        };
        let folder = inner.paths.records(epoch);
        let f = folder.clone();
        let names = match inner
            .conn
            .run("list", |c| async move { c.list_children(&f).await })
            .await?
        {
            Ok(names) => names,
            Err(zk::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(zk_error("list", e)),
        };
        let mut keys: Vec<Key> = names
            .iter()
            .filter_map(|n| key_of(n))
            .filter(|k| k.as_str().starts_with(prefix))
            .collect();
        keys.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        let mut out = Vec::with_capacity(keys.len());
        // Read in batches of one multi-read each.
        for chunk in keys.chunks(64) {
            let paths: Vec<String> = chunk.iter().map(|k| inner.paths.record(epoch, k)).collect();
            let results = inner
                .conn
                .run("list", |c| async move {
                    let mut reader = c.new_multi_reader();
                    for p in &paths {
                        reader.add_get_data(p)?;
                    }
                    reader.commit().await
                })
                .await?
                .map_err(|e| zk_error("list", e))?;
            for (key, result) in chunk.iter().zip(results) {
                if let zk::MultiReadResult::Data { data, .. } = result {
                    out.push(Record::decode("list", &data)?.info(key.clone()));
                }
            }
        }
        Ok(out)
    }

    async fn record_run(&self, lease: &Lease, run: &RunRecord) -> Result<()> {
        self.inner.record_run(lease, run).await
    }

    fn watch_release(&self, keys: &[Key]) -> Option<ReleaseWatch> {
        self.inner.common.watch_release(keys)
    }

    fn epoch_at_open(&self) -> Option<StoreEpoch> {
        self.inner.common.epoch_at_open()
    }

    fn created_at_open(&self) -> Option<bool> {
        self.inner.common.created_at_open()
    }
}

/// The write a `Record` gets from an acquisition: `req`'s lease with the
/// key's next token (or the same, for a retry by the same lease id).
pub(crate) fn with_lease(mut record: Record, req: &AcquireRequest, fence: u64) -> Record {
    let now = unix_ms(SystemTime::now());
    record.fence = fence;
    record.released_by = None;
    record.lease = Some(crate::record::Held {
        id: req.lease_id.as_str().to_string(),
        owner: req.owner.clone(),
        data: req.data.clone(),
        ttl_ms: req.ttl.as_millis() as u64,
        acquired_ms: now,
        renewed_ms: now,
    });
    record
}
