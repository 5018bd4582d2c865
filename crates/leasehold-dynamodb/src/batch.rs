//! Several keys in one `TransactWriteItems`: every key granted, or none.
//!
//! A transaction answers no values, so a grant's token must be known before
//! it is sent: each key's write requires the item's `fence` to be the last
//! one this backend saw for it (from its own grants, or from any item a
//! refused write answered) and sets it one higher. A key seen nowhere yet is
//! written as a new item (`attribute_not_exists`, with the epoch's first
//! token and the marker's `ConditionCheck`, as one key's first grant is).
//! Every write's condition is otherwise [`grant`](DynamoDbBackend::grant)'s:
//! the same epoch, and free, or still at a version watched for the
//! holder's whole TTL, or (trusting clocks) past its expiry plus the skew;
//! a key already held by the request's own lease id (a retry) is extended
//! on `lease_id = ours` and answers its stored token again. So each grant
//! is one key's grant, made atomically with the others.
//!
//! When the transaction is cancelled, each refused write answers its item
//! as it was (`ReturnValuesOnConditionCheckFailure = ALL_OLD`). A held key
//! ends the batch as [`BatchOutcome::Held`] (after noting its version, as a
//! refused single grant does); a stale fence, a missing or unexpected
//! item, or a conflict with another transaction is sent again with what
//! was learnt, a few rounds at most. A process that takes the same keys
//! again pays one request per acquisition (one per key one by one); a key's
//! first batch in a process pays one more.

use std::collections::HashMap;
use std::sync::Mutex;

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{CancellationReason, TransactWriteItem};
use leasehold::backend::{AcquireOutcome, AcquireRequest, BatchOutcome, Grant};
use leasehold::Result;

use crate::backend::check_ttl;
use crate::epoch::{get_u64, EPOCH};
use crate::error::SERVICE;
use crate::record::Stored;
use crate::DynamoDbBackend;

/// At most this many items in one transaction (DynamoDB's limit is 100;
/// one is kept for the epoch marker's check).
const MAX_BATCH: usize = 99;

/// Rounds of one batch: each after a cancellation that taught something.
const ROUNDS: usize = 4;

/// The last fence this backend saw per key, for a batch's conditions. A
/// stale one only costs a cancelled round (the write's condition fails and
/// answers the item); bounded by forgetting everything when full.
#[derive(Debug, Default)]
pub(crate) struct Fences {
    last: Mutex<HashMap<String, u64>>,
}

/// Keys whose fences are remembered, at most.
const MAX_FENCES: usize = 4096;

impl Fences {
    pub(crate) fn note(&self, key: &str, fence: u64) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.len() >= MAX_FENCES && !last.contains_key(key) {
            last.clear();
        }
        last.insert(key.to_string(), fence);
    }

    fn get(&self, key: &str) -> Option<u64> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.get(key).copied()
    }

    fn forget(&self, key: &str) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.remove(key);
    }
}

/// What a round's write of one key assumes.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    /// No item: create it.
    New,
    /// An item whose fence is `last`, free or at version `observed`.
    Item { last: u64, observed: Option<String> },
    /// Our own lease holds it already (a retry), with this token.
    Ours { fence: u64 },
}

impl DynamoDbBackend {
    pub(crate) async fn acquire_all(&self, reqs: &[AcquireRequest]) -> Result<BatchOutcome> {
        if reqs.len() > MAX_BATCH {
            return Ok(BatchOutcome::Unsupported);
        }
        let mut epoch = None;
        for req in reqs {
            check_ttl(req.ttl)?;
            match self.settings.epoch.admit(req, "table") {
                Ok(e) => epoch = Some(e),
                Err(answer) => {
                    return match *answer {
                        Ok(AcquireOutcome::OtherEpoch(found)) => {
                            Ok(BatchOutcome::OtherEpoch(found))
                        }
                        Ok(_) => Ok(BatchOutcome::Unsupported),
                        Err(e) => Err(e),
                    }
                }
            }
        }
        let Some(epoch) = epoch else {
            return Ok(BatchOutcome::Unsupported);
        };
        let now = self.settings.clock.now();
        let mut expect: Vec<Expect> = reqs
            .iter()
            .map(|r| match self.fences.get(r.key.as_str()) {
                Some(last) => Expect::Item {
                    last,
                    observed: self.observations.ripe(r.key.as_str(), now),
                },
                None => Expect::New,
            })
            .collect();
        for _ in 0..ROUNDS {
            let mut tx = self.client.transact_write_items();
            let mut tokens = Vec::with_capacity(reqs.len());
            for (req, ex) in reqs.iter().zip(&expect) {
                let (update, token) = match ex {
                    Expect::New => self.create_update(req, epoch)?,
                    Expect::Item { last, observed } => {
                        let (e, update, condition) =
                            self.grant_parts(req, observed.as_deref(), epoch, Some(*last));
                        (
                            self.tx_update(req.key.as_str(), e, update, condition)?,
                            last + 1,
                        )
                    }
                    Expect::Ours { fence } => {
                        let (e, update, condition) = self.refresh_parts(&req.lease_id, req.ttl);
                        (
                            self.tx_update(req.key.as_str(), e, update, condition)?,
                            *fence,
                        )
                    }
                };
                tx = tx.transact_items(TransactWriteItem::builder().update(update).build());
                tokens.push(token);
            }
            let creates = expect.contains(&Expect::New);
            if creates {
                let check = self.marker_check(epoch)?;
                tx = tx.transact_items(TransactWriteItem::builder().condition_check(check).build());
            }
            let reasons = match tx.send().await {
                Ok(_) => {
                    for (req, token) in reqs.iter().zip(&tokens) {
                        self.observations.forget(req.key.as_str());
                        self.fences.note(req.key.as_str(), *token);
                    }
                    let grants = tokens.into_iter().map(Grant::new).collect();
                    return Ok(BatchOutcome::Acquired(grants));
                }
                Err(err) => match err.as_service_error() {
                    Some(TransactWriteItemsError::TransactionCanceledException(c)) => {
                        c.cancellation_reasons().to_vec()
                    }
                    Some(TransactWriteItemsError::ResourceNotFoundException(_)) => {
                        return Ok(BatchOutcome::OtherEpoch(self.refresh_epoch().await?));
                    }
                    _ => return Err(SERVICE.map_sdk(&self.table, "acquire", err)),
                },
            };
            if creates && refused(reasons.get(reqs.len())) {
                // The marker names another epoch: the table was re-created.
                return Ok(BatchOutcome::OtherEpoch(self.refresh_epoch().await?));
            }
            let now = self.settings.clock.now();
            let mut held = None;
            for (i, (req, reason)) in reqs.iter().zip(&reasons).enumerate() {
                let key = req.key.as_str();
                match reason.code() {
                    None | Some("None") | Some("TransactionConflict") => continue,
                    Some("ConditionalCheckFailed") => {}
                    // Cancelled, so nothing was written; the keys one by
                    // one report whatever this is (throttling, a limit).
                    Some(_) => return Ok(BatchOutcome::Unsupported),
                }
                let Some(item) = reason.item() else {
                    self.fences.forget(key);
                    expect[i] = Expect::New;
                    continue;
                };
                if get_u64(item, EPOCH).is_some_and(|e| e != epoch) {
                    return Ok(BatchOutcome::OtherEpoch(self.refresh_epoch().await?));
                }
                let old = Stored::decode(item)?;
                self.fences.note(key, old.fence);
                let Some(lease) = &old.lease else {
                    expect[i] = Expect::Item {
                        last: old.fence,
                        observed: None,
                    };
                    continue;
                };
                if lease.lease_id == req.lease_id {
                    expect[i] = Expect::Ours { fence: old.fence };
                    continue;
                }
                let ripe = old.rvn.as_deref().filter(|rvn| {
                    self.observations
                        .saw(key, rvn, self.observation_wait(lease.ttl), now)
                });
                match ripe {
                    // Watched for the holder's whole TTL (the condition
                    // failed on the fence, or it became ripe only now): take
                    // over, conditional on that version.
                    Some(rvn) => {
                        expect[i] = Expect::Item {
                            last: old.fence,
                            observed: Some(rvn.to_string()),
                        }
                    }
                    None => {
                        if held.is_none() {
                            held = Some((i, old.holder((self.settings.wall)())));
                        }
                    }
                }
            }
            if let Some((index, holder)) = held {
                return Ok(BatchOutcome::Held { index, holder });
            }
        }
        // Still racing after a few rounds: the keys one by one.
        Ok(BatchOutcome::Unsupported)
    }
}

/// Whether a cancellation reason is a failed condition.
fn refused(reason: Option<&CancellationReason>) -> bool {
    reason.and_then(|r| r.code()) == Some("ConditionalCheckFailed")
}
