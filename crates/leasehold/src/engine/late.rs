//! Late and ambiguous grants: a lease id that may hold a key without our
//! knowing is released in the background, and chased for a while after
//! (see the [engine](super) docs, "Late grants" and "Ambiguous failures").

use super::*;

/// A lease id that may hold the key without our knowing (after an ambiguous
/// failure, or a grant that came too late). If still armed when dropped, it
/// is released in the background.
#[derive(Debug)]
pub(super) struct PendingLease {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) lease: Lease,
    pub(super) armed: bool,
    /// The store queued this id as a waiter (see
    /// [`Capabilities::queues_waiters`](crate::backend::Capabilities::queues_waiters)):
    /// dropped without its grant, the registration is ended by one release.
    pub(super) queued: bool,
}

impl PendingLease {
    pub(super) fn new(backend: Arc<dyn Backend>, lease: Lease) -> Self {
        PendingLease {
            backend,
            lease,
            // A drop during an attempt is covered by the attempt's own task;
            // only an ambiguous failure or a late grant arms this.
            armed: false,
            queued: false,
        }
    }

    pub(super) fn arm(&mut self) {
        self.armed = true;
    }

    pub(super) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for PendingLease {
    fn drop(&mut self) {
        let queued = std::mem::take(&mut self.queued);
        if std::mem::take(&mut self.armed) {
            let backend = self.backend.clone();
            let lease = self.lease.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                spawn_background(&rt, async move {
                    let _ = backend.release(&lease).await;
                    chase_late_landing(backend, lease);
                });
            }
        } else if queued {
            // A registration as a waiter, and the key if it was handed to
            // this id meanwhile: one release ends both.
            let backend = self.backend.clone();
            let lease = self.lease.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                spawn_background(&rt, async move {
                    let _ = backend.release(&lease).await;
                });
            }
        }
    }
}

/// How long the first attempt of a wait may take, however short the wait
/// (`--wait 1ms`): one try answered within it is the wait's answer. Above
/// the slowest answer a store gives by design: S3's first grant of a key
/// waits a second past S3's answer before it writes (see leasehold-s3).
pub(crate) const FIRST_ANSWER: Duration = Duration::from_secs(2);

/// How long after its caller gave up on it an attempt's request is chased
/// (see [`chase_late_landing`]).
pub(crate) const LATE_LANDING: Duration = Duration::from_secs(60);

/// Releases `lease` again and again, 0.1 s after the first release, then at
/// doubling gaps, for [`LATE_LANDING`]: an attempt whose answer never came
/// (a timeout, a dropped connection) may still reach the store after its
/// caller released the id once (a request held in the network, a statement
/// the server still runs after its client went away), and would then hold
/// the key, for nobody, until its TTL ran out. A release names the lease
/// id, so it ends only that lease: harmless when there is none. Ten
/// requests at most, only after an ambiguous failure. The chase is not
/// waited for by [`finish_background`](crate::finish_background) (a process that exits ends it);
/// a request that lands later than this, or after the process exited,
/// holds the key until its TTL runs out.
pub(super) fn chase_late_landing(backend: Arc<dyn Backend>, lease: Lease) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        let mut since = Duration::ZERO;
        let mut gap = Duration::from_millis(100);
        while since + gap <= LATE_LANDING {
            tokio::time::sleep(gap).await;
            since += gap;
            gap *= 2;
            let _ = backend.release(&lease).await;
        }
    });
}

impl Engine {
    /// A lease on `key` with a new id, not yet asked for.
    pub(super) fn fresh_lease(&self, key: &Key) -> PendingLease {
        PendingLease::new(
            self.store.backend().clone(),
            Lease {
                key: key.clone(),
                lease_id: LeaseId::random(),
                ttl: self.opts.ttl,
                fencing_token: 0,
                epoch: 0,
            },
        )
    }

    /// Whether a lease whose request was sent at `sent` is already past its
    /// safety deadline.
    pub(super) fn too_late(&self, sent: Duration) -> bool {
        self.clock().now() >= sent + self.opts.trusted - self.opts.safety_margin
    }
}
