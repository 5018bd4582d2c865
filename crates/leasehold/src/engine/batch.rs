//! Several keys in one request ([`Backend::try_acquire_all`]), for a
//! [`MultiLock`](crate::MultiLock)'s first attempt on plain locks and
//! reader-writer locks' writers (a writer's grant then passes its gate, as
//! one key's does, and one held back by readers lets every key go).
//!
//! What a batch keeps of one key's attempt (see the [engine](super) docs):
//! the request names the epoch this store has cleared (none cleared yet:
//! no batch, the keys one by one learn it); each grant's safety deadline
//! counts from the batch's send (less what the store says had already run
//! of a lease it reused), and a grant past it is let go; a batch in flight
//! when its caller is dropped finishes in a task of its own and releases
//! what it was granted; a failure that may hide a grant releases every
//! lease id at once and again at doubling gaps, as an ambiguous single
//! attempt's does when its wait ends. Only keys no task of this process
//! holds or waits for go into a batch (their local queues are free), so
//! the guards made from it keep those queues as a single grant's do.
//!
//! Anything but a grant of every key (held, another epoch, a backend that
//! cannot, a failure) sends the caller back to the keys one by one, which
//! is what it would have done without batches.

use super::*;
use crate::backend::BatchOutcome;

/// What a batch got.
pub(crate) enum Batch {
    /// Every key, one guard per engine, in their order.
    Granted(Vec<LeaseGuard>),
    /// Nothing held: take the keys one by one.
    OneByOne,
}

impl Engine {
    /// Whether the engine's grants may be made by a batch: one slot, its
    /// name, and a plain lock or a reader-writer lock's writer (whose gate,
    /// the read of the reader slots, is passed after the batch's grant as
    /// after one key's).
    pub(crate) fn batchable(&self) -> bool {
        let kind = match &self.gate {
            None => matches!(self.kind, Kind::Lock),
            Some(Gate::Writer { .. }) => true,
            Some(Gate::Reader { .. }) => false,
        };
        kind && *self.slots == [self.name.clone()]
    }
}

/// One request for every engine's key, all granted or none (see the
/// module docs). `engines` are of one store, their keys distinct and in
/// byte order; unless every one is [`batchable`](Engine::batchable),
/// nothing is sent.
pub(crate) async fn take_all(engines: &[&Engine]) -> Result<Batch> {
    let Some(first) = engines.first() else {
        return Ok(Batch::OneByOne);
    };
    if engines.len() < 2 || !engines.iter().all(|e| e.batchable()) {
        return Ok(Batch::OneByOne);
    }
    let store = first.store();
    store.check_open()?;
    let Some(epoch) = store.epochs().cleared() else {
        return Ok(Batch::OneByOne);
    };
    // Each key's local queue, free: no task of ours holds or waits for it.
    let mut queues = Vec::with_capacity(engines.len());
    for engine in engines {
        match engine.queue.gate.clone().try_lock_owned() {
            Ok(queue) => queues.push(queue),
            Err(_) => return Ok(Batch::OneByOne),
        }
    }
    let mut pending: Vec<PendingLease> = engines
        .iter()
        .map(|e| {
            let mut p = e.fresh_lease(&e.name);
            p.lease.epoch = epoch;
            p
        })
        .collect();
    let requests: Vec<AcquireRequest> = engines
        .iter()
        .zip(&pending)
        .map(|(e, p)| AcquireRequest {
            key: e.name.clone(),
            lease_id: p.lease.lease_id.clone(),
            ttl: e.opts.ttl,
            owner: e.owner.clone(),
            data: e.opts.data.clone(),
            epoch: Some(epoch),
            queue: false,
        })
        .collect();
    let backend = store.backend().clone();
    let leases: Vec<Lease> = pending.iter().map(|p| p.lease.clone()).collect();
    let labels: Vec<Labels> = engines.iter().map(|e| e.labels()).collect();
    let sent = store.clock().now();
    let outcome = Detachable::new(|orphaned| async move {
        let outcome = backend.try_acquire_all(&requests).await;
        let answer = match &outcome {
            Ok(BatchOutcome::Acquired(_)) => Some("acquired"),
            Ok(BatchOutcome::Held { .. }) => Some("held"),
            Ok(BatchOutcome::OtherEpoch(_)) => Some("other_epoch"),
            Ok(_) => None,
            Err(_) => Some("error"),
        };
        if let Some(answer) = answer {
            labels.iter().for_each(|l| l.attempt(answer));
        }
        if orphaned.get() {
            match &outcome {
                Ok(BatchOutcome::Acquired(_)) => {
                    for lease in &leases {
                        let _ = backend.release(lease).await;
                    }
                }
                Err(e) if e.is_retryable() => {
                    for lease in leases {
                        let _ = backend.release(&lease).await;
                        chase_late_landing(backend.clone(), lease);
                    }
                }
                _ => {}
            }
        }
        outcome
    })
    .await;
    let grants = match outcome {
        Ok(BatchOutcome::Acquired(grants)) if grants.len() == engines.len() => grants,
        Ok(BatchOutcome::Acquired(grants)) => {
            // Not the contract: let whatever it was go, and go one by one.
            tracing::warn!(
                asked = engines.len(),
                granted = grants.len(),
                "a batch acquisition answered with the wrong number of grants"
            );
            pending.iter_mut().for_each(PendingLease::arm);
            return Ok(Batch::OneByOne);
        }
        Ok(_) => return Ok(Batch::OneByOne),
        Err(e) if e.is_retryable() => {
            // Maybe granted without our hearing: released (and chased) as
            // the pending leases drop.
            tracing::debug!(error = %e, "a batch acquisition failed; taking the keys one by one");
            pending.iter_mut().for_each(PendingLease::arm);
            return Ok(Batch::OneByOne);
        }
        Err(e) => return Err(e),
    };
    let anchors: Vec<Duration> = grants.iter().map(|g| sent.saturating_sub(g.ran)).collect();
    if engines.iter().zip(&anchors).any(|(e, a)| e.too_late(*a)) {
        // Granted past a safety deadline: let every key go (released as
        // the pending leases drop) and take them one by one.
        pending.iter_mut().for_each(PendingLease::arm);
        return Ok(Batch::OneByOne);
    }
    let guards: Vec<LeaseGuard> = engines
        .iter()
        .zip(pending.iter_mut())
        .zip(grants.iter().zip(anchors))
        .zip(queues)
        .map(|(((e, p), (g, anchor)), queue)| {
            e.make_guard(0, p, g.fencing_token, anchor, e.queue.clone(), Some(queue))
        })
        .collect();
    // A writer's grant passes its gate (no reader holds a slot, read after
    // the grant) as one key's does; one held back lets every key go.
    let mut passed = Vec::with_capacity(guards.len());
    let mut back = Vec::new();
    let mut failure = None;
    let mut blocked = false;
    for (engine, guard) in engines.iter().zip(guards) {
        if blocked || failure.is_some() {
            back.push(guard);
            continue;
        }
        match engine.pass_gate(Granted { slot: 0, guard }).await {
            Ok(Gated::Pass(g)) => passed.push(g.guard),
            Ok(Gated::Blocked { kept, .. }) => {
                back.extend(kept.map(|k| k.guard));
                blocked = true;
            }
            // The gate released the grant.
            Err(e) => failure = Some(e),
        }
    }
    if !blocked && failure.is_none() {
        return Ok(Batch::Granted(passed));
    }
    passed.extend(back);
    crate::multi::release_all(passed).await;
    match failure {
        Some(e) => Err(e),
        None => Ok(Batch::OneByOne),
    }
}
