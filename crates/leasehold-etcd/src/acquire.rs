//! An acquisition: the key as last seen (or read), judged, and granted in
//! one `Txn` that compares the marker and the key's record with the bytes
//! the token was computed from (see the crate docs' protocol).

use std::time::Duration;

use leasehold::{
    backend::{next_token, AcquireOutcome, AcquireRequest, BatchOutcome, Grant},
    Error, Result,
};

use crate::backend::{is_not_found, Snapshot, RACE_RETRIES};
use crate::error::{self, NAME};
use crate::grpc;
use crate::record::{from_json, to_json, EpochMarker, HolderRecord, KeyRecord, WaiterEntry};
use crate::{EtcdBackend, MAX_TTL, MIN_TTL};

/// A free key as last seen: what the grant's `Txn` compares and builds on.
struct Free {
    marker: EpochMarker,
    marker_bytes: Vec<u8>,
    record: KeyRecord,
    /// `None`: no record (compared as "does not exist").
    record_bytes: Option<Vec<u8>>,
}

/// What a look at a key decided for an acquire.
enum Judged {
    /// The answer to give.
    Answer(AcquireOutcome),
    /// The store changed (its marker was just created): read again.
    Again,
    /// Free: try the grant.
    Free(Free),
}

impl EtcdBackend {
    pub(crate) async fn acquire(&self, request: &AcquireRequest) -> Result<AcquireOutcome> {
        const OP: &str = "acquire";
        if request.ttl < MIN_TTL {
            return Err(Error::invalid(
                "ttl",
                format!("{:?} is below etcd's minimum of {MIN_TTL:?}", request.ttl),
            ));
        }
        let hk = self.holder_key(request.key.as_str());
        let rk = self.record_key(request.key.as_str());
        let lease_id = request.lease_id.as_str();
        let queue = self.queue();
        // A lock's waiter asks to be queued (see the crate docs' "Handoff").
        let queue_me = request.queue && self.inner.queues && request.epoch.is_some();
        let wk = self.waiter_key(lease_id);
        // Handed to us by a release, as our watch saw it: ours without a
        // request.
        if let Some(outcome) = self.take_handed(request) {
            return Ok(outcome);
        }
        // The key as last seen: no read when it was seen free; but a
        // waiter whose registration was seen written over or deleted, and
        // not taken above, reads first (it may have been handed the key on
        // a session it must move the key from: the read finds it ours).
        let mut known = self.remembered(request);
        if queue.take_consumed(lease_id) {
            known = None;
        }
        for _ in 0..RACE_RETRIES {
            let free = match known.take() {
                Some(free) => free,
                None => {
                    let snap = self.read(OP, Some(&request.key)).await?;
                    match self.judge(request, snap).await? {
                        Judged::Answer(outcome) => return Ok(outcome),
                        Judged::Again => continue,
                        Judged::Free(free) => free,
                    }
                }
            };
            let epoch = free.marker.epoch;
            let token = next_token(free.record.token, epoch);
            let session = self.session(OP, request.ttl, None).await?;
            let asked = WaiterEntry::of(request, epoch);
            let holder = to_json(&asked.holder(token));
            let record = to_json(&KeyRecord {
                token,
                epoch,
                ..free.record.clone()
            });
            // Granted only if the marker and the record are still the bytes
            // the token was computed from (the same store, nobody granted
            // since) and nobody holds the key; otherwise the failure branch
            // reads the key, at the same revision.
            let compare = vec![
                grpc::value_is(self.marker_key(), free.marker_bytes.clone()),
                match &free.record_bytes {
                    Some(bytes) => grpc::value_is(rk.clone(), bytes.clone()),
                    None => grpc::created_at(rk.clone(), 0),
                },
                grpc::created_at(hk.clone(), 0),
            ];
            let mut success = vec![
                grpc::put(hk.clone(), holder.clone(), session.id),
                grpc::put(rk.clone(), record.clone(), 0),
            ];
            let ran = session.ran(request.ttl, self.inner.clock.now());
            let mut failure = self.snapshot_ops(Some(&request.key));
            if queue.is_mine(lease_id) {
                // Granted: the registration an earlier attempt wrote ends
                // with the grant.
                success.push(grpc::delete(wk.clone()));
            }
            let register = queue_me && queue.write_now(lease_id, request.key.as_str(), session.id);
            if register {
                // Held (or changed): register, or write the registration
                // again (the holder hands over only to one written within
                // `queue::FRESH`), on the session a grant would use. After
                // the reads: their responses come first.
                failure.push(grpc::put(wk.clone(), to_json(&asked), session.id));
            }
            match self.txn_else(OP, compare, success, failure).await? {
                Ok(r) if r.succeeded => {
                    queue.forget(lease_id);
                    self.seen().remember(request.key.as_str(), Some(record));
                    self.held().insert(lease_id.to_string(), holder);
                    self.watch_waiters();
                    return Ok(AcquireOutcome::Acquired(Grant::new(token).ran(ran)));
                }
                Ok(r) => {
                    // Held, granted since, or another store: as the key is.
                    let snap = self.snapshot(Some(&request.key), r.responses)?;
                    match self.judge(request, snap).await? {
                        Judged::Answer(outcome @ AcquireOutcome::Acquired(_)) if register => {
                            // Handed to us just before this attempt, which
                            // wrote the registration again: it ends here
                            // (left, a later release could hand the key
                            // to this id after its holder let it go).
                            self.txn(OP, Vec::new(), vec![grpc::delete(wk.clone())])
                                .await?;
                            return Ok(outcome);
                        }
                        Judged::Answer(outcome) => return Ok(outcome),
                        Judged::Again => {}
                        Judged::Free(free) => known = Some(free),
                    }
                }
                Err(e) if is_not_found(&e) => {
                    // The session's etcd lease is gone: a new one, and again.
                    self.session_gone(&session).await;
                    known = Some(free);
                }
                // Ambiguous: the grant may have landed under our lease id,
                // which a retry recognises.
                Err(e) => return Err(error::status(OP, e)),
            }
        }
        Err(Error::backend(
            NAME,
            OP,
            true,
            "lost the race for the key too many times in a row",
        ))
    }

    /// The grant a release handed to `request`'s registration, as this
    /// backend's watch saw the release write it (the holder value, the
    /// record, the etcd lease: the same `Txn` put the holder key so): the
    /// key is ours, on a session this backend granted, whose grant time
    /// bounds the deadline (as [`judge`](Self::judge) takes our own grant).
    /// `None`: nothing handed, or not takeable so (another epoch, a session
    /// not known, or too much of the TTL run out): the attempt goes on, and
    /// reads the key first.
    fn take_handed(&self, request: &AcquireRequest) -> Option<AcquireOutcome> {
        let lease_id = request.lease_id.as_str();
        let (value, record, lease) = self.queue().take_handed(lease_id)?;
        let holder: HolderRecord = from_json("holder record", &value).ok()?;
        if holder.lease_id != lease_id || Some(holder.epoch) != request.epoch {
            return None;
        }
        let ran = self.ran_on_granted(lease, request.ttl)?;
        self.seen().remember(request.key.as_str(), Some(record));
        Some(self.taken(lease_id, value, holder.token, ran))
    }

    /// The key is ours (`value`, our grant's holder value, `token`, `ran`
    /// of the TTL run out), granted to us by another's `Txn` (a handoff) or
    /// found ours after an ambiguous answer: remembered as held, and its
    /// registration, if any, forgotten.
    fn taken(&self, lease_id: &str, value: Vec<u8>, token: u64, ran: Duration) -> AcquireOutcome {
        self.queue().forget(lease_id);
        self.held().insert(lease_id.to_string(), value);
        self.watch_waiters();
        AcquireOutcome::Acquired(Grant::new(token).ran(ran))
    }

    /// The key as last seen, if free then and in the epoch `request` names
    /// with a TTL the store allows; `None`: look first. A key whose record
    /// was not seen is taken to have none (if it has one, the grant's
    /// comparison fails and answers with it: the same one round trip a
    /// read would have cost).
    fn remembered(&self, request: &AcquireRequest) -> Option<Free> {
        let seen = self.seen();
        let marker_bytes = seen.marker.clone()?;
        let marker = EpochMarker::parse(&marker_bytes).ok()?;
        if request.epoch != Some(marker.epoch)
            || request.ttl > Duration::from_millis(marker.max_ttl_ms).min(MAX_TTL)
        {
            return None;
        }
        let record_bytes = seen.records.get(request.key.as_str()).cloned().flatten();
        let record = match &record_bytes {
            Some(b) => from_json("key record", b).ok()?,
            None => KeyRecord::default(),
        };
        Some(Free {
            marker,
            marker_bytes,
            record,
            record_bytes,
        })
    }

    /// What `snap` (of `request.key`) means for the acquire.
    async fn judge(&self, request: &AcquireRequest, snap: Snapshot) -> Result<Judged> {
        const OP: &str = "acquire";
        let Some((marker, marker_kv)) = &snap.marker else {
            self.create_marker(false).await?;
            return Ok(Judged::Again);
        };
        let max_ttl = Duration::from_millis(marker.max_ttl_ms);
        if request.ttl > max_ttl.min(MAX_TTL) {
            return Err(Error::invalid(
                "ttl",
                format!("{:?} is above the store's max TTL {max_ttl:?}", request.ttl),
            ));
        }
        if request.epoch != Some(marker.epoch) {
            let epoch = self.store_epoch(&snap).await?.expect("marker present");
            return Ok(Judged::Answer(AcquireOutcome::OtherEpoch(epoch)));
        }
        if let Some((holder, kv)) = &snap.holder {
            if holder.lease_id != request.lease_id.as_str() {
                // Without the remaining TTL: a second round trip per
                // poll of every waiter (see the module docs).
                return Ok(Judged::Answer(AcquireOutcome::Held(Some(
                    holder.info(None),
                ))));
            }
            if holder.epoch != marker.epoch {
                // Never answered `Acquired` outside the epoch asked for.
                return Ok(Judged::Answer(AcquireOutcome::Held(Some(
                    holder.info(None),
                ))));
            }
            // Our own grant: handed to us as a waiter, or retried after an
            // ambiguous answer. On a session this backend granted and
            // whose grant time it knows, the key lives until that session
            // ends: it is ours as it is, that much of its TTL run out.
            let ran = match self.ran_on_granted(kv.lease, request.ttl) {
                Some(ran) => Some(ran),
                // Otherwise hang it on a fresh session, as a grant now
                // would be.
                None => {
                    self.hang(OP, &request.key, &kv.value, request.ttl, None)
                        .await?
                }
            };
            return Ok(match ran {
                Some(ran) => Judged::Answer(self.taken(
                    &holder.lease_id,
                    kv.value.clone(),
                    holder.token,
                    ran,
                )),
                None => Judged::Again,
            });
        }
        let (record, record_bytes) = match &snap.record {
            Some((r, kv)) => (r.clone(), Some(kv.value.clone())),
            None => (KeyRecord::default(), None),
        };
        Ok(Judged::Free(Free {
            marker: marker.clone(),
            marker_bytes: marker_kv.value.clone(),
            record,
            record_bytes,
        }))
    }
}

/// The most keys one batch takes: etcd refuses a `Txn` of more than 128
/// operations (`--max-txn-ops`), and a batch's failure branch reads four
/// per key.
const MAX_BATCH: usize = 30;

/// One key of a batch, as far as it is known.
enum Part {
    /// Not known: read it.
    Unknown,
    /// Free as last seen: granted by the batch's `Txn`.
    Free(Free),
    /// Ours already (the same batch asked again after an ambiguous answer).
    Ours(Grant),
}

impl EtcdBackend {
    /// Several keys in one `Txn`, all or none (see the crate docs'
    /// protocol): every free key's record and holder compared as one key's
    /// grant compares them, with the marker once, and every grant written
    /// on one session. A batch whose requests differ in TTL or are queued,
    /// or of more than [`MAX_BATCH`] keys, is not taken so.
    pub(crate) async fn acquire_all(&self, reqs: &[AcquireRequest]) -> Result<BatchOutcome> {
        const OP: &str = "acquire";
        let Some(first) = reqs.first() else {
            return Ok(BatchOutcome::Acquired(Vec::new()));
        };
        let ttl = first.ttl;
        if reqs.len() > MAX_BATCH || reqs.iter().any(|r| r.ttl != ttl || r.queue) {
            return Ok(BatchOutcome::Unsupported);
        }
        if ttl < MIN_TTL {
            return Err(Error::invalid(
                "ttl",
                format!("{ttl:?} is below etcd's minimum of {MIN_TTL:?}"),
            ));
        }
        let mut parts: Vec<Part> = reqs
            .iter()
            .map(|r| self.remembered(r).map_or(Part::Unknown, Part::Free))
            .collect();
        for _ in 0..RACE_RETRIES {
            // The keys not known, read at one revision in one round trip.
            let unknown: Vec<usize> = (0..reqs.len())
                .filter(|&i| matches!(parts[i], Part::Unknown))
                .collect();
            if !unknown.is_empty() {
                let ops = unknown
                    .iter()
                    .flat_map(|&i| self.snapshot_ops(Some(&reqs[i].key)))
                    .collect();
                let resp = self.txn(OP, Vec::new(), ops).await?;
                let judged = self.judge_each(reqs, &unknown, resp.responses).await?;
                match judged {
                    Ok(judged) => {
                        for (i, part) in unknown.into_iter().zip(judged) {
                            parts[i] = part;
                        }
                    }
                    Err(answer) => return Ok(answer),
                }
                if parts.iter().any(|p| matches!(p, Part::Unknown)) {
                    continue;
                }
            }
            let free: Vec<usize> = (0..reqs.len())
                .filter(|&i| matches!(parts[i], Part::Free(_)))
                .collect();
            let Some(&first_free) = free.first() else {
                return Ok(BatchOutcome::Acquired(
                    parts
                        .iter()
                        .filter_map(|p| match p {
                            Part::Ours(g) => Some(g.clone()),
                            _ => None,
                        })
                        .collect(),
                ));
            };
            let Part::Free(lead) = &parts[first_free] else {
                unreachable!("a free part")
            };
            // Every free key judged in the same store (marker): one compare.
            let marker_bytes = lead.marker_bytes.clone();
            let epoch = lead.marker.epoch;
            let stale: Vec<usize> = free
                .iter()
                .copied()
                .filter(|&i| matches!(&parts[i], Part::Free(f) if f.marker_bytes != marker_bytes))
                .collect();
            if !stale.is_empty() {
                for i in stale {
                    parts[i] = Part::Unknown;
                }
                continue;
            }
            let session = self.session(OP, ttl, None).await?;
            let mut compare = vec![grpc::value_is(self.marker_key(), marker_bytes)];
            let (mut success, mut failure, mut written) = (Vec::new(), Vec::new(), Vec::new());
            for &i in &free {
                let Part::Free(f) = &parts[i] else {
                    unreachable!("a free part")
                };
                let req = &reqs[i];
                let (hk, rk) = (
                    self.holder_key(req.key.as_str()),
                    self.record_key(req.key.as_str()),
                );
                let token = next_token(f.record.token, epoch);
                let holder = to_json(&WaiterEntry::of(req, epoch).holder(token));
                let record = to_json(&KeyRecord {
                    token,
                    epoch,
                    ..f.record.clone()
                });
                compare.push(match &f.record_bytes {
                    Some(bytes) => grpc::value_is(rk.clone(), bytes.clone()),
                    None => grpc::created_at(rk.clone(), 0),
                });
                compare.push(grpc::created_at(hk.clone(), 0));
                success.push(grpc::put(hk, holder.clone(), session.id));
                success.push(grpc::put(rk, record.clone(), 0));
                failure.extend(self.snapshot_ops(Some(&req.key)));
                written.push((i, token, holder, record));
            }
            let ran = session.ran(ttl, self.inner.clock.now());
            match self.txn_else(OP, compare, success, failure).await? {
                Ok(r) if r.succeeded => {
                    for (i, token, holder, record) in written {
                        let req = &reqs[i];
                        self.seen().remember(req.key.as_str(), Some(record));
                        self.held()
                            .insert(req.lease_id.as_str().to_string(), holder);
                        parts[i] = Part::Ours(Grant::new(token).ran(ran));
                    }
                    self.watch_waiters();
                    let grants = parts
                        .into_iter()
                        .map(|p| match p {
                            Part::Ours(g) => g,
                            _ => unreachable!("every key granted"),
                        })
                        .collect();
                    return Ok(BatchOutcome::Acquired(grants));
                }
                Ok(r) => {
                    // Held, granted since, or another store: as the keys
                    // are now.
                    match self.judge_each(reqs, &free, r.responses).await? {
                        Ok(judged) => {
                            for (i, part) in free.into_iter().zip(judged) {
                                parts[i] = part;
                            }
                        }
                        Err(answer) => return Ok(answer),
                    }
                }
                Err(e) if is_not_found(&e) => {
                    // The session's etcd lease is gone: a new one, and again.
                    self.session_gone(&session).await;
                }
                // Ambiguous: the grants may have landed under our lease
                // ids, which the caller releases.
                Err(e) => return Err(error::status(OP, e)),
            }
        }
        Err(Error::backend(
            NAME,
            OP,
            true,
            "lost the race for the keys too many times in a row",
        ))
    }

    /// The keys `which` of `reqs` judged from `responses` to their
    /// [`snapshot_ops`](Self::snapshot_ops) (four per key, in that order):
    /// what each is, or the batch's answer (the first held key, another
    /// epoch).
    async fn judge_each(
        &self,
        reqs: &[AcquireRequest],
        which: &[usize],
        responses: Vec<grpc::etcdserverpb::ResponseOp>,
    ) -> Result<std::result::Result<Vec<Part>, BatchOutcome>> {
        let mut responses = responses.into_iter();
        let mut parts = Vec::with_capacity(which.len());
        for &i in which {
            let per_key = self.snapshot_ops(Some(&reqs[i].key)).len();
            let chunk: Vec<_> = responses.by_ref().take(per_key).collect();
            let snap = self.snapshot(Some(&reqs[i].key), chunk)?;
            parts.push(match self.judge(&reqs[i], snap).await? {
                Judged::Free(free) => Part::Free(free),
                Judged::Again => Part::Unknown,
                Judged::Answer(AcquireOutcome::Acquired(grant)) => Part::Ours(grant),
                Judged::Answer(AcquireOutcome::Held(holder)) => {
                    return Ok(Err(BatchOutcome::Held { index: i, holder }))
                }
                Judged::Answer(AcquireOutcome::OtherEpoch(epoch)) => {
                    return Ok(Err(BatchOutcome::OtherEpoch(epoch)))
                }
            });
        }
        Ok(Ok(parts))
    }
}
