//! One round of attempts: every slot tried once, in random order, and what
//! the round found when it got nothing ([`Missed`]); one attempt on one
//! slot, bounded by its deadline and cancel safe (see the [engine](super)
//! docs, "Attempts" and "Store epochs").

use super::*;

/// Per slot, during one wait: the lease id an ambiguous failure may have
/// been granted to, and when the first request with that id was sent.
pub(super) struct SlotState {
    pub(super) pending: PendingLease,
    pub(super) anchor: Option<Duration>,
    /// The store answered "held" to this id: its next attempts in a wait
    /// ask to be queued (the first one, usually granted, does not: see
    /// [`Capabilities::queues_waiters`](crate::backend::Capabilities::queues_waiters)).
    pub(super) held: bool,
}

/// What one round of attempts found, when it got nothing.
#[derive(Default)]
pub(super) struct Missed {
    /// Some slot was answered "held".
    pub(super) held: bool,
    pub(super) holders: Vec<HolderInfo>,
    /// `holders` are readers of a reader-writer lock that kept a writer
    /// out (not an exclusive holder).
    pub(super) readers: bool,
    /// A slot a guard of this store holds (not asked of the store).
    pub(super) local: Option<usize>,
    /// The last retryable failure of the round.
    pub(super) failure: Option<Error>,
    /// The store is in quarantine.
    pub(super) quarantine: Option<(u64, Duration)>,
    /// The store's epoch changed under every attempt.
    pub(super) other_epoch: bool,
    /// A grant came too late and was let go: try again at once.
    pub(super) late: bool,
    /// The [`Gate`] held back a grant: wait for the keys it watches.
    pub(super) gated: bool,
}

// A round's result is moved once, at the end of the round: boxing the
// grant would cost an allocation per acquisition to save a few hundred
// bytes of stack.
#[allow(clippy::large_enum_variant)]
pub(super) enum Round {
    Granted(Granted),
    Missed(Missed),
}

impl Engine {
    /// One round of attempts, not queued: the local queue is taken if it is
    /// free so local waiters line up behind us; if another task of ours has
    /// it, the store is asked anyway: it decides.
    pub(super) async fn round_now(&self) -> Result<Round> {
        let mut queue = self.queue.gate.clone().try_lock_owned().ok();
        let mut slots = self.fresh_slots();
        match self.round(&mut slots, &mut queue, false).await? {
            Round::Granted(g) => match self.pass_gate(g).await? {
                Gated::Pass(g) => Ok(Round::Granted(g)),
                Gated::Blocked { kept, missed } => {
                    if let Some(kept) = kept {
                        // One attempt only: a writer does not wait for
                        // readers here.
                        let _ = kept.guard.release().await;
                    }
                    Ok(Round::Missed(missed))
                }
            },
            missed => Ok(missed),
        }
    }

    /// Tries every slot once, in random order, skipping slots a guard of
    /// this process holds. `queue` is the queue's gate if this caller has it:
    /// a lock's grant keeps it in its guard. `waiting`: the round is part of
    /// a wait, so a lock's attempts ask to be queued where the backend
    /// queues waiters ([`Capabilities::queues_waiters`](crate::backend::Capabilities::queues_waiters)).
    pub(super) async fn round(
        &self,
        slots: &mut [Option<SlotState>],
        queue: &mut Option<OwnedMutexGuard<()>>,
        waiting: bool,
    ) -> Result<Round> {
        self.store.check_open()?;
        let queue_me = waiting
            && matches!(self.kind, Kind::Lock)
            && self.store.backend().capabilities().queues_waiters;
        use rand::seq::SliceRandom;
        let mut order: Vec<usize> = (0..self.slots.len()).collect();
        order.shuffle(&mut rand::rng());
        let mut missed = Missed::default();
        for i in order {
            let key = &self.slots[i];
            let local = self.store.local_key(key);
            // The gate the guard will keep: a lock's is its queue's; a
            // semaphore slot's is its own, and a taken one means a guard of
            // ours holds that slot (held; the store is not asked).
            let own_queue = Arc::ptr_eq(&local, &self.queue);
            let gate = if own_queue {
                None
            } else {
                match local.gate.clone().try_lock_owned() {
                    Ok(gate) => Some(gate),
                    Err(_) => {
                        missed.held = true;
                        missed.local.get_or_insert(i);
                        continue;
                    }
                }
            };
            let state = slots[i].get_or_insert_with(|| self.slot_state(key));
            let sent = self.store.clock().now();
            let anchor = *state.anchor.get_or_insert(sent);
            // Queued only once the key was found held: an uncontended
            // acquisition sends nothing more than before.
            let queue_me = queue_me && state.held;
            let outcome = self.attempt(key, &mut state.pending.lease, queue_me).await;
            if outcome.is_ok() {
                self.queue.note_answer();
            }
            match outcome {
                Ok(AcquireOutcome::Acquired(grant)) => {
                    // The TTL counts from the first send, or from earlier
                    // where the store says it was already running.
                    let anchor = anchor.saturating_sub(grant.ran);
                    if self.too_late(anchor) {
                        // Granted so late (a slow answer, or ambiguous
                        // retries) that it is past its safety deadline: let
                        // it go, and start afresh with a new id.
                        state.pending.arm();
                        slots[i] = None;
                        missed.late = true;
                        missed.failure = Some(self.late_grant());
                        continue;
                    }
                    let gate = if own_queue { queue.take() } else { gate };
                    let guard = self.make_guard(
                        i as u32,
                        &mut state.pending,
                        grant.fencing_token,
                        anchor,
                        local,
                        gate,
                    );
                    return Ok(Round::Granted(Granted {
                        slot: i as u32,
                        guard,
                    }));
                }
                Ok(AcquireOutcome::Held(holder)) => {
                    if !local.guarded_here() {
                        // No guard of this store holds it: someone else.
                        self.queue.note_held_elsewhere();
                    }
                    // Not disarmed: an earlier attempt with this id whose
                    // answer never came may still land (it would be
                    // answered `Acquired` here, the same id, if it had).
                    // Queued: the registration is ended if the wait ends
                    // without this id's grant.
                    state.pending.queued |= queue_me;
                    state.held = true;
                    state.anchor = None;
                    missed.held = true;
                    missed.holders.extend(holder);
                }
                Ok(AcquireOutcome::OtherEpoch(_)) => {
                    state.anchor = None;
                    state.pending.disarm();
                    missed.other_epoch = true;
                    missed.failure = Some(self.epoch_kept_changing());
                }
                Err(Error::Quarantined {
                    key: _,
                    epoch,
                    remaining,
                }) => {
                    // The whole store is in quarantine: no other slot can do
                    // better.
                    state.anchor = None;
                    state.pending.disarm();
                    missed.quarantine = Some((epoch, remaining));
                    return Ok(Round::Missed(missed));
                }
                Err(err) if err.is_retryable() => {
                    // Maybe granted without our hearing: keep the id.
                    state.pending.arm();
                    missed.failure = Some(err);
                }
                Err(err) => return Err(err),
            }
        }
        Ok(Round::Missed(missed))
    }

    pub(super) fn fresh_slots(&self) -> Vec<Option<SlotState>> {
        self.slots.iter().map(|_| None).collect()
    }

    pub(super) fn slot_state(&self, key: &Key) -> SlotState {
        SlotState {
            pending: self.fresh_lease(key),
            anchor: None,
            held: false,
        }
    }

    /// One attempt on `key` in the store epoch this store has cleared,
    /// learning the store's epoch first if need be (see
    /// [`Error::Quarantined`]). Sets `lease.epoch` to the epoch asked for.
    /// Never answers `Acquired` in an epoch that is still in quarantine.
    pub(super) async fn attempt(
        &self,
        key: &Key,
        lease: &mut Lease,
        queue: bool,
    ) -> Result<AcquireOutcome> {
        let gate = self.store.epochs();
        let mut outcome = Ok(AcquireOutcome::OtherEpoch(crate::backend::StoreEpoch::new(
            0,
            Duration::ZERO,
        )));
        // Usually one request; one more when the epoch is news (the first
        // attempt of a process whose backend did not read the epoch while
        // opening, or after the store was re-created).
        for _ in 0..3 {
            let epoch = gate.cleared();
            lease.epoch = epoch.unwrap_or(0);
            // With nothing cleared yet (None) this only learns the epoch.
            outcome = self.send_attempt(key, lease, epoch, queue).await;
            let Ok(AcquireOutcome::OtherEpoch(reported)) = &outcome else {
                return outcome;
            };
            let window = self.store.confirmation_window();
            match gate.saw(self.store.backend().name(), reported, window)? {
                Clearance::Cleared(_) => continue,
                Clearance::Quarantined { epoch, remaining } => {
                    return Err(Error::Quarantined {
                        key: key.to_string(),
                        epoch,
                        remaining,
                    })
                }
            }
        }
        outcome
    }

    /// One backend attempt. It runs in the caller's task; if the caller is
    /// dropped while it is in flight, it finishes in a task of its own and,
    /// when the store granted it (or may have), releases the lease, so
    /// that dropping the caller cannot strand a lease.
    pub(super) async fn send_attempt(
        &self,
        key: &Key,
        lease: &Lease,
        epoch: Option<u64>,
        queue: bool,
    ) -> Result<AcquireOutcome> {
        let backend = self.store.backend().clone();
        let request = AcquireRequest {
            key: key.clone(),
            lease_id: lease.lease_id.clone(),
            ttl: self.opts.ttl,
            owner: self.owner.clone(),
            data: self.opts.data.clone(),
            epoch,
            queue,
        };
        let lease = lease.clone();
        let labels = self.labels();
        Detachable::new(|orphaned| async move {
            let outcome = backend.try_acquire(&request).await;
            labels.attempt(match &outcome {
                Ok(AcquireOutcome::Acquired(_)) => "acquired",
                Ok(AcquireOutcome::Held(_)) => "held",
                Ok(AcquireOutcome::OtherEpoch(_)) => "other_epoch",
                Err(_) => "error",
            });
            if orphaned.get() {
                match &outcome {
                    // A registration made after its wait ended: ended too.
                    Ok(AcquireOutcome::Held(_)) if queue => {
                        let _ = backend.release(&lease).await;
                    }
                    Ok(AcquireOutcome::Held(_) | AcquireOutcome::OtherEpoch(_)) => {}
                    Err(e) if !e.is_retryable() => {}
                    Ok(AcquireOutcome::Acquired(_)) => {
                        let _ = backend.release(&lease).await;
                    }
                    Err(_unknown) => {
                        let _ = backend.release(&lease).await;
                        chase_late_landing(backend, lease);
                    }
                }
            }
            outcome
        })
        .await
    }
}
