//! The store's epoch: its marker (created with the store), and the timer
//! key whose etcd lease tells the epoch's age (see the crate docs).

use std::time::Duration;

use leasehold::{backend::StoreEpoch, Error, Result};

use crate::backend::Snapshot;
use crate::error;
use crate::grpc;
use crate::grpc::etcdserverpb::lease_client::LeaseClient;
use crate::grpc::etcdserverpb::LeaseTimeToLiveRequest;
use crate::record::{to_json, EpochMarker};
use crate::session::lease_secs;
use crate::EtcdBackend;

/// How long an epoch's timer key lives: long enough to tell every
/// quarantine's end, the confirmation window's as well as a max TTL's.
fn timer_span(max_ttl: Duration) -> Duration {
    max_ttl.max(leasehold::CONFIRMATION_WINDOW)
}

impl EtcdBackend {
    /// The store's epoch, read now, created as `creation` allows (the
    /// backend's own while opening).
    pub(crate) async fn epoch_as(&self, creation: leasehold::Creation) -> Result<StoreEpoch> {
        Ok(self.epoch_creating(creation).await?.0)
    }

    /// [`epoch_as`](Self::epoch_as), with whether this call created the
    /// store (its conditional put of the marker was the one that won).
    pub(crate) async fn epoch_creating(
        &self,
        creation: leasehold::Creation,
    ) -> Result<(StoreEpoch, bool)> {
        let mut created = false;
        loop {
            let snap = self.read("epoch", None).await?;
            if let Some(e) = self.store_epoch(&snap).await? {
                return Ok((e, created));
            }
            if creation == leasehold::Creation::Never {
                return Err(self.no_store().await?);
            }
            created |= self
                .create_marker(creation == leasehold::Creation::NewProven)
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

    /// What a look at a prefix without a marker answers (it writes
    /// nothing): no store, the error it is. Keys under the prefix do not make one: they may be another
    /// store's, whose prefix begins with this one (`jobs` and `jobs/`), or
    /// those of a store whose marker was deleted by hand, which the next
    /// acquirer starts a new epoch in.
    async fn no_store(&self) -> Result<Error> {
        let others = if self.has_keys("epoch").await? {
            " (there are keys under it: another store's, whose prefix begins the same way, or those of a store whose marker was deleted)"
        } else {
            ""
        };
        Ok(Error::no_store(format!(
            "no leasehold store epoch marker under the prefix {:?}{others}",
            self.inner.prefix
        )))
    }

    /// The store's epoch as `snap` shows it (`None`: no marker yet). Its
    /// age: at least the timer's span (the longer of the max TTL and the
    /// confirmation window) once the epoch's timer key (attached to an etcd
    /// lease of that span, granted with the marker) is gone; while it
    /// lives, the lease's elapsed time by the server's clock.
    pub(crate) async fn store_epoch(&self, snap: &Snapshot) -> Result<Option<StoreEpoch>> {
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
    /// Whether this call created it (`false`: another process's marker was
    /// there first).
    pub(crate) async fn create_marker(&self, stated: bool) -> Result<bool> {
        // Proven only on the creator's statement while opening, for a
        // prefix with no keys at all (nothing of an earlier store is there).
        let proven = stated && !self.has_keys("create store").await?;
        // Every caller has just read the prefix without a marker: the new
        // epoch is a second after now, waited for, so that a store deleted
        // and created again within one second gets a later epoch (and
        // greater tokens) than the one it replaced.
        let now = std::time::SystemTime::now();
        let (epoch, wait) = leasehold::backend::epoch_after(now, now);
        tokio::time::sleep(wait).await;
        let marker = EpochMarker::new(epoch, self.inner.max_ttl.as_millis() as u64, proven);
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
        Ok(resp.succeeded)
    }
}
