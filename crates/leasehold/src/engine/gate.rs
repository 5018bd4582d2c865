//! The reader-writer gate: the read of other keys a grant must pass before
//! it is handed out (see the [engine](super) docs, "Gates", and the
//! `rwlock` module for why it is safe).

use super::*;

/// What a grant must also pass before the engine hands it out: the two
/// sides of a [`RwLock`](crate::RwLock) (see the `rwlock` module for why
/// this is safe). Checked right after a grant, inside the wait loop, so
/// waiting, deadlines, wake-ups and cancel safety are the engine's own.
#[derive(Debug)]
pub(crate) enum Gate {
    /// A reader (the engine's slots are the reader slots): granted only if
    /// the writer key, read after the slot was granted, is free. Otherwise
    /// the slot is given back and the wait goes on, watching the writer key.
    Reader {
        /// The writer key.
        writer: Key,
    },
    /// A writer (the engine's slot is the writer key): granted only if no
    /// reader slot (a key starting with `readers`), read after the writer
    /// key was granted, is held. Otherwise the writer keeps the key (so new
    /// readers wait behind it) and the wait goes on, watching `slots`.
    Writer {
        /// The reader slots' common prefix (`KEY/:read:`).
        readers: String,
        /// The reader slots this engine's lock uses, for wake-ups.
        slots: Box<[Key]>,
    },
}

/// What the gate read in the store.
pub(super) enum Check {
    /// Free; the highest fencing token seen on the keys read.
    Free(u64),
    /// Held by these.
    Held(Vec<HolderInfo>),
}

/// What the gate made of a grant.
// Moved once per gate check, as `Round` is.
#[allow(clippy::large_enum_variant)]
pub(super) enum Gated {
    Pass(Granted),
    /// Held back: the grant is kept (a writer waiting for readers) or was
    /// given back (a reader); `missed` says why.
    Blocked {
        kept: Option<Granted>,
        missed: Missed,
    },
}

impl Engine {
    /// The local state rung when what the gate waits for is released by a
    /// guard of this process: the writer key's (a reader), the reader
    /// slots' group (a writer; reader guards ring it).
    pub(super) fn gate_local(&self) -> Option<Arc<LocalKey>> {
        match &self.gate {
            None => None,
            Some(Gate::Reader { writer }) => Some(self.store.local_key(writer)),
            Some(Gate::Writer { .. }) => Some(self.store.local_group(&self.name)),
        }
    }

    /// The keys whose release the gate waits for.
    pub(super) fn gate_watch(&self) -> &[Key] {
        match &self.gate {
            None => &self.slots,
            Some(Gate::Reader { writer }) => std::slice::from_ref(writer),
            Some(Gate::Writer { slots, .. }) => slots,
        }
    }

    /// Checks a grant against the engine's [`Gate`], if it has one. The
    /// store is read after the grant (the order the `rwlock` module's
    /// safety argument rests on). A reader that passes shows the writer
    /// key's token (see [`RwLock`](crate::RwLock#fencing-tokens)).
    pub(super) async fn pass_gate(&self, g: Granted) -> Result<Gated> {
        let Some(gate) = &self.gate else {
            return Ok(Gated::Pass(g));
        };
        let mut missed = Missed {
            gated: true,
            ..Missed::default()
        };
        let mut checked = match gate {
            Gate::Reader { writer } => self.writer_free(writer).await,
            Gate::Writer { readers, .. } => self.readers_free(readers).await,
        };
        if matches!(checked, Ok(Check::Free(_))) && !g.guard.is_lost() {
            // The read saw the other side's marks on the same data as the
            // grant only if the grant is still there after it: the store's
            // data may have been lost in between (the grant on the old
            // data, the read on the emptied store, while the other side's
            // holders, granted on the old data, are not yet told).
            match self.still_held(&g).await {
                Ok(true) => {}
                Ok(false) => {
                    let _ = g.guard.release().await;
                    missed.failure = Some(self.retry_acquire(
                        "the grant was gone once the reader-writer gate had read the other side (the store's data lost?)",
                    ));
                    return Ok(Gated::Blocked { kept: None, missed });
                }
                Err(err) => checked = Err(err),
            }
        }
        let reader = matches!(gate, Gate::Reader { .. });
        match checked {
            Ok(Check::Free(seen)) if !g.guard.is_lost() => {
                if reader {
                    g.guard
                        .show_fencing_token(seen.max(epoch_token_base(g.guard.lease_epoch())));
                }
                Ok(Gated::Pass(g))
            }
            Ok(Check::Free(_)) => {
                // The check outlasted the grant's safety deadline: start
                // afresh, as with a late grant.
                drop(g);
                missed.late = true;
                missed.failure = Some(self.late_grant());
                Ok(Gated::Blocked { kept: None, missed })
            }
            Ok(Check::Held(holders)) => {
                // A reader: a writer holds or waits; its slot is given back,
                // so that the writer's own check finds it free.
                missed.held = true;
                missed.readers = !reader;
                missed.holders = holders;
                Ok(Self::held_back(g, missed, reader).await)
            }
            Err(err) if err.is_retryable() || matches!(err, Error::Quarantined { .. }) => {
                // Not known to be free: not granted.
                missed.failure = Some(err);
                Ok(Self::held_back(g, missed, reader).await)
            }
            Err(err) => {
                let _ = g.guard.release().await;
                Err(err)
            }
        }
    }

    /// Whether `g`'s lease is still its key's, read now: the key's holder
    /// has the lease's token and this engine's owner.
    pub(super) async fn still_held(&self, g: &Granted) -> Result<bool> {
        let info = self.store.backend().inspect(g.guard.key()).await?;
        let token = g.guard.fencing_token();
        Ok(info
            .holder
            .is_some_and(|h| h.fencing_token == token && h.owner == self.owner))
    }

    /// A grant the gate held back: a reader gives its slot back; a writer
    /// keeps its key (so later readers wait behind it) and asks again.
    pub(super) async fn held_back(g: Granted, missed: Missed, reader: bool) -> Gated {
        if reader {
            let _ = g.guard.release().await;
            Gated::Blocked { kept: None, missed }
        } else {
            Gated::Blocked {
                kept: Some(g),
                missed,
            }
        }
    }

    /// Whether the writer key is free, read now; if so, with the highest
    /// token seen on it.
    ///
    /// Where a read can show a writer's token before it shows the writer
    /// ([`token_visible_before_holder`](crate::backend::Capabilities::token_visible_before_holder)),
    /// a key read as free is taken once and given back before it counts as
    /// free, so that a writer whose token the read may have shown starts
    /// over with a greater one (its second request finds the key changed).
    pub(super) async fn writer_free(&self, writer: &Key) -> Result<Check> {
        let info = self.store.backend().inspect(writer).await?;
        let confirm = match &info.holder {
            None => {
                self.store
                    .backend()
                    .capabilities()
                    .token_visible_before_holder
            }
            Some(holder) => self.must_probe(holder),
        };
        match (info.holder, confirm) {
            (None, false) => Ok(Check::Free(info.fencing_token)),
            (Some(holder), false) => Ok(Check::Held(vec![holder])),
            (holder, true) => match self.take_once(writer).await? {
                Some(token) => Ok(Check::Free(info.fencing_token.max(token))),
                None => Ok(Check::Held(holder.into_iter().collect())),
            },
        }
    }

    /// Whether no reader slot (key `readers` + a number, whatever the
    /// number: also slots of readers with a larger limit) is held, read
    /// now.
    pub(super) async fn readers_free(&self, readers: &str) -> Result<Check> {
        let mut holders = Vec::new();
        let listed = self.store.backend().list(readers).await?;
        for SlotInfo { info, .. } in numbered_slots(readers, listed) {
            let Some(holder) = info.holder else {
                continue;
            };
            if !self.must_probe(&holder) || self.take_once(&info.key).await?.is_none() {
                holders.push(holder);
            }
        }
        if holders.is_empty() {
            Ok(Check::Free(0))
        } else {
            Ok(Check::Held(holders))
        }
    }

    /// Whether a key `inspect` or `list` describes with a holder may be
    /// free after all, by the store's own rule for taking a key over, which
    /// a read does not apply everywhere: where takeover needs an
    /// observation (S3, DynamoDB), a read shows a dead holder's record as
    /// held until someone takes it over, and a holder reported with no time
    /// left may be past its expiry. Then the caller makes one attempt on
    /// the key ([`take_once`](Self::take_once), which also counts towards
    /// an observation): if granted, it was free.
    pub(super) fn must_probe(&self, holder: &HolderInfo) -> bool {
        let observe = self
            .store
            .backend()
            .capabilities()
            .takeover_needs_observation;
        observe || holder.expires_in.is_some_and(|d| d.is_zero())
    }

    /// One attempt on `key`; if granted, the key is given back at once:
    /// `Some(its token)`. `None`: held.
    pub(super) async fn take_once(&self, key: &Key) -> Result<Option<u64>> {
        let mut pending = self.fresh_lease(key);
        match self.attempt(key, &mut pending.lease, false).await {
            Ok(AcquireOutcome::Acquired(grant)) => {
                pending.lease.fencing_token = grant.fencing_token;
                if self.store.backend().release(&pending.lease).await.is_err() {
                    pending.arm();
                }
                Ok(Some(grant.fencing_token))
            }
            Ok(AcquireOutcome::Held(_) | AcquireOutcome::OtherEpoch(_)) => Ok(None),
            Err(err) => {
                if err.is_retryable() {
                    // Maybe granted without our hearing: released in the
                    // background when `pending` drops.
                    pending.arm();
                }
                Err(err)
            }
        }
    }
}
