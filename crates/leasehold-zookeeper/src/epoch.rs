//! The store's epoch: its marker node, created with the epoch's record
//! folder in one transaction, and the server's clock, read by writing a
//! node and reading back its modification time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::backend::{epoch_at, protocol::PROTOCOL, StoreEpoch, EPOCH_ORIGIN_UNIX_SECS};
use leasehold::{Creation, Error, Result};
use zookeeper_client as zk;

use crate::backend::Inner;
use crate::error::{corrupt, zk as zk_error};
use crate::record::Marker;

/// The epoch as this backend last read it.
#[derive(Debug, Clone)]
pub(crate) struct EpochState {
    /// The epoch, with its age as of `read_at`.
    pub(crate) epoch: StoreEpoch,
    /// When it was read, on the backend's clock.
    pub(crate) read_at: Duration,
    /// Whether the server's clock has been seen past the epoch's second
    /// (no grant before: see the crate docs, "Store epoch").
    pub(crate) settled: bool,
}

/// A time on the server's clock, from a node's `ctime` or `mtime` (ms).
pub(crate) fn server_time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

/// Whether `now` (the server's clock) is past the second of `epoch`.
pub(crate) fn past_second(epoch: u64, now: SystemTime) -> bool {
    epoch_at(now) > epoch
}

/// How long from `now` (the server's clock) until the second after
/// `epoch`'s begins.
pub(crate) fn until_past(epoch: u64, now: SystemTime) -> Duration {
    let next = UNIX_EPOCH + Duration::from_secs(EPOCH_ORIGIN_UNIX_SECS + epoch + 1);
    next.duration_since(now).unwrap_or_default()
}

impl Inner {
    /// The server's clock now: the `mtime` of a write to the clock node
    /// (created, with the store's root, if missing).
    pub(crate) async fn server_now(&self, op: &'static str) -> Result<SystemTime> {
        let path = self.paths.clock();
        for _ in 0..3 {
            let p = path.clone();
            match self
                .conn
                .run(op, |c| async move { c.set_data(&p, b"", None).await })
                .await?
            {
                Ok(stat) => return Ok(server_time(stat.mtime)),
                Err(zk::Error::NoNode) => self.make_root(op).await?,
                Err(e) => return Err(zk_error(op, e)),
            }
        }
        Err(zk_error(op, zk::Error::NoNode))
    }

    /// Creates the store's root and its clock node, where missing.
    async fn make_root(&self, op: &'static str) -> Result<()> {
        let acls = self.conn.acls();
        let root = self.paths.root().to_string();
        let clock = self.paths.clock();
        let options = zk::CreateMode::Persistent.with_acls(acls);
        let made = self
            .conn
            .run(op, |c| async move {
                c.mkdir(&root, &options).await?;
                match c.create(&clock, b"", &options).await {
                    Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                    Err(e) => Err(e),
                }
            })
            .await?;
        made.map_err(|e| zk_error(op, e))
    }

    /// Reads the marker: `None` when there is none (no store, or its data
    /// lost). Checks the protocol before anything else.
    pub(crate) async fn read_marker(&self, op: &'static str) -> Result<Option<(Marker, zk::Stat)>> {
        let path = self.paths.marker();
        match self
            .conn
            .run(op, |c| async move { c.get_data(&path).await })
            .await?
        {
            Ok((bytes, stat)) => Ok(Some((Marker::decode(op, &bytes)?, stat))),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(zk_error(op, e)),
        }
    }

    /// Reads the store's epoch, beginning one where there is none (unless
    /// opened with [`Creation::Never`]), and keeps it.
    ///
    /// # Errors
    /// [`Error::NoStore`] with `Creation::Never` and no marker; a newer
    /// protocol; a failed request.
    pub(crate) async fn refresh_epoch(&self, op: &'static str) -> Result<EpochState> {
        let creation = self.creation();
        for _ in 0..10 {
            if let Some((marker, stat)) = self.read_marker(op).await? {
                let state = self.describe(op, &marker, &stat, creation).await?;
                self.keep(state.clone());
                return Ok(state);
            }
            if !creation.creates() {
                return Err(Error::no_store(format!(
                    "no epoch marker at {} on the ZooKeeper ensemble",
                    self.paths.marker()
                )));
            }
            if let Some(state) = self.begin_epoch(op, creation).await? {
                self.keep(state.clone());
                return Ok(state);
            }
        }
        Err(Error::backend(
            crate::error::NAME,
            op,
            true,
            "the epoch marker kept changing while being read",
        ))
    }

    /// The epoch a marker describes, its age by the server's clock (a write
    /// of the clock node: none with `Creation::Never`, which writes
    /// nothing).
    async fn describe(
        &self,
        op: &'static str,
        marker: &Marker,
        stat: &zk::Stat,
        creation: Creation,
    ) -> Result<EpochState> {
        if marker.epoch == 0 {
            return Err(corrupt(op, "epoch marker", "epoch 0"));
        }
        let max_ttl = Duration::from_millis(marker.max_ttl_ms);
        self.max_ttl.set(max_ttl);
        let mut epoch = StoreEpoch::new(marker.epoch, max_ttl);
        let mut settled = false;
        if marker.proven {
            epoch = epoch.proven();
        }
        if creation.creates() {
            let now = self.server_now(op).await?;
            settled = past_second(marker.epoch, now);
            if !marker.proven {
                let created = server_time(stat.ctime);
                epoch = epoch.with_age(Some(now.duration_since(created).unwrap_or_default()));
            }
        }
        Ok(EpochState {
            epoch,
            read_at: self.clock.now(),
            settled,
        })
    }

    /// Begins an epoch where the marker was seen missing: the epoch is the
    /// server's clock (a write after the marker was seen missing) in whole
    /// seconds; the marker and the epoch's record folder are created in
    /// one transaction. `None` when another process created a marker
    /// first, or the folder of that second exists (read or try again).
    async fn begin_epoch(
        &self,
        op: &'static str,
        creation: Creation,
    ) -> Result<Option<EpochState>> {
        let now = self.server_now(op).await?;
        let epoch = epoch_at(now);
        let proven = creation == Creation::NewProven;
        let marker = Marker {
            epoch,
            max_ttl_ms: self.options.max_ttl.as_millis() as u64,
            protocol: Some(PROTOCOL),
            proven,
        };
        let acls = self.conn.acls();
        let (marker_path, records) = (self.paths.marker(), self.paths.records(epoch));
        let bytes = marker.encode();
        let answer = self
            .conn
            .run(op, |c| async move {
                let options = zk::CreateMode::Persistent.with_acls(acls);
                let mut w = c.new_multi_writer();
                w.add_create(&marker_path, &bytes, &options)?;
                w.add_create(&records, b"", &options)?;
                w.commit().await.map_err(|e| match e {
                    zk::MultiWriteError::OperationFailed { index, source } => {
                        if index == 1 && source == zk::Error::NodeExists {
                            // Checked by the caller: a folder of this
                            // second, left by an epoch whose marker went.
                            zk::Error::RuntimeInconsistent
                        } else {
                            source
                        }
                    }
                    zk::MultiWriteError::RequestFailed { source } => source,
                })
            })
            .await?;
        match answer {
            Ok(_) => {}
            Err(zk::Error::NodeExists) => return Ok(None),
            Err(zk::Error::RuntimeInconsistent) => {
                // Only an epoch that granted nothing can share its second
                // (see the crate docs): wait for the next second.
                tokio::time::sleep(until_past(epoch, now) + Duration::from_millis(5)).await;
                return Ok(None);
            }
            Err(e) => return Err(zk_error(op, e)),
        }
        self.common.created(true);
        let mut state = StoreEpoch::new(epoch, self.options.max_ttl);
        state = if proven {
            state.proven()
        } else {
            state.with_age(Some(Duration::ZERO))
        };
        self.max_ttl.set(self.options.max_ttl);
        tracing::info!(root = self.paths.root(), epoch, "began a new store epoch");
        Ok(Some(EpochState {
            epoch: state,
            read_at: self.clock.now(),
            settled: false,
        }))
    }

    /// Waits until the server's clock is past the epoch's second, so that
    /// a store deleted and created again cannot repeat this epoch's tokens
    /// (at most a second, and only for an epoch begun within the last one:
    /// any other is settled when read).
    pub(crate) async fn settle(&self, op: &'static str, epoch: u64) -> Result<()> {
        for _ in 0..5 {
            if self.is_settled(epoch) {
                return Ok(());
            }
            let now = self.server_now(op).await?;
            if past_second(epoch, now) {
                self.mark_settled(epoch);
                return Ok(());
            }
            tokio::time::sleep(until_past(epoch, now) + Duration::from_millis(2)).await;
        }
        Err(Error::backend(
            crate::error::NAME,
            op,
            true,
            "the server's clock did not pass the store epoch's second",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_is_past_only_from_its_next_second() {
        let origin = UNIX_EPOCH + Duration::from_secs(EPOCH_ORIGIN_UNIX_SECS);
        let at = |ms: u64| origin + Duration::from_millis(ms);
        assert!(!past_second(100, at(100_000)));
        assert!(!past_second(100, at(100_999)));
        assert!(past_second(100, at(101_000)));
        assert_eq!(until_past(100, at(100_300)), Duration::from_millis(700));
        assert_eq!(until_past(100, at(101_300)), Duration::ZERO);
        assert_eq!(server_time(-5), UNIX_EPOCH);
    }
}
