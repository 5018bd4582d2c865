//! An acquisition: a conditional write of the lease on the key's item
//! (free, ripe for takeover after an unchanged observation, or past its
//! expiry when clocks are trusted), or, for a key the table has no item
//! for, the item's creation in one transaction with a check of the table's
//! epoch marker.

use std::time::Duration;

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    ConditionCheck, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use leasehold::{
    backend::{AcquireOutcome, AcquireRequest, Grant},
    Error, Result,
};

use crate::backend::check_ttl;
use crate::epoch::{EPOCH, MARKER_KEY};
use crate::error::{BACKEND, SERVICE};
use crate::record::{self, n, s, unix_ms, Expr, Stored};
use crate::write::{new_rvn, update_expression, Write};
use crate::{DynamoDbBackend, TakeoverMode, MAX_TTL};

impl DynamoDbBackend {
    pub(crate) async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        check_ttl(req.ttl)?;
        let epoch = match self.settings.epoch.admit(req, "table") {
            Ok(epoch) => epoch,
            Err(answer) => return *answer,
        };
        let key = req.key.as_str();
        let mut holder = None;
        // One request in the usual cases; more only after races (each
        // further round follows a change seen on the item), and for the
        // first grant of a key (the item is created in a transaction).
        for _ in 0..4 {
            let observed = self.observations.ripe(key, self.settings.clock.now());
            let old = match self.grant(req, observed.as_deref(), epoch).await? {
                Write::Done(item) => {
                    self.observations.forget(key);
                    let fence = Stored::decode(&item)?.fence;
                    self.fences.note(key, fence);
                    return Ok(AcquireOutcome::Acquired(Grant::new(fence)));
                }
                Write::Refused(Some(old)) => {
                    if crate::epoch::get_u64(&old, EPOCH).is_some_and(|e| e != epoch) {
                        // An item of another epoch: the table was re-created.
                        return Ok(AcquireOutcome::OtherEpoch(self.refresh_epoch().await?));
                    }
                    let old = Stored::decode(&old)?;
                    self.fences.note(key, old.fence);
                    old
                }
                Write::Refused(None) => match self.create_item(req, epoch).await? {
                    Created::Item(fence) => {
                        self.observations.forget(key);
                        self.fences.note(key, fence);
                        return Ok(AcquireOutcome::Acquired(Grant::new(fence)));
                    }
                    Created::Raced => continue,
                    Created::OtherEpoch => {
                        return Ok(AcquireOutcome::OtherEpoch(self.refresh_epoch().await?))
                    }
                },
                Write::NoTable => {
                    return Ok(AcquireOutcome::OtherEpoch(self.refresh_epoch().await?))
                }
            };
            let Some(lease) = &old.lease else { continue };
            if lease.lease_id == req.lease_id {
                // Ours already: an earlier attempt with this id went through.
                match self.extend(req).await? {
                    Some(fence) => {
                        self.observations.forget(key);
                        self.fences.note(key, fence);
                        return Ok(AcquireOutcome::Acquired(Grant::new(fence)));
                    }
                    None => continue,
                }
            }
            holder = old.holder((self.settings.wall)());
            let Some(rvn) = old.rvn.as_deref() else {
                return Ok(AcquireOutcome::Held(holder));
            };
            let now = self.settings.clock.now();
            let ripe = self
                .observations
                .saw(key, rvn, self.observation_wait(lease.ttl), now);
            if !ripe || observed.as_deref() == Some(rvn) {
                return Ok(AcquireOutcome::Held(holder));
            }
            // Ripe only now: take over at once, conditional on that version.
        }
        Ok(AcquireOutcome::Held(holder))
    }

    /// How long a holder's version must stay unchanged before a takeover.
    pub(crate) fn observation_wait(&self, holder_ttl: Option<Duration>) -> Duration {
        let ttl = holder_ttl.unwrap_or(MAX_TTL);
        ttl + ttl / 1000 + self.settings.margin
    }

    /// The SET and REMOVE parts that write `req`'s lease, its owner and its
    /// epoch (everything but the fence).
    fn lease_update(
        &self,
        e: &mut Expr,
        req: &AcquireRequest,
        epoch: u64,
    ) -> (Vec<String>, Vec<String>) {
        let now = (self.settings.wall)();
        let mut set = vec![
            e.equals(EPOCH, "epoch", n(epoch)),
            e.equals(record::RVN, "rvn", s(new_rvn())),
            e.equals(record::LEASE_ID, "lid", s(req.lease_id.as_str())),
            e.equals(record::OWNER_HOST, "host", s(&req.owner.host)),
            e.equals(record::OWNER_PID, "pid", n(req.owner.pid)),
            e.equals(record::TTL_MS, "ttl", n(req.ttl.as_millis())),
            e.equals(record::ACQUIRED_MS, "now", n(unix_ms(now))),
            e.equals(record::EXPIRES_MS, "exp", n(unix_ms(now + req.ttl))),
        ];
        let mut remove = vec![e.n(record::RELEASED_BY)];
        for (attr, value) in [
            (record::OWNER_LABEL, &req.owner.label),
            (record::DATA, &req.data),
        ] {
            match value {
                Some(v) => set.push(e.equals(attr, attr, s(v))),
                None => remove.push(e.n(attr)),
            }
        }
        (set, remove)
    }

    /// The write that grants `req` a new lease with the next token on an
    /// existing item of this epoch (or of a table from before epochs), if
    /// the key is free, or still at version `observed` (a ripe takeover),
    /// or (trusting clocks) past its stored expiry plus the skew.
    async fn grant(
        &self,
        req: &AcquireRequest,
        observed: Option<&str>,
        epoch: u64,
    ) -> Result<Write> {
        let (e, update, condition) = self.grant_parts(req, observed, epoch, None);
        self.update(
            "acquire",
            req.key.as_str(),
            e,
            update,
            condition,
            ReturnValue::AllNew,
        )
        .await
    }

    /// The update and condition of [`grant`](Self::grant). With `last`
    /// (a batch, which gets no values back), the write also requires the
    /// item's fence to be `last`, so that the token it grants is `last + 1`.
    pub(crate) fn grant_parts(
        &self,
        req: &AcquireRequest,
        observed: Option<&str>,
        epoch: u64,
        last: Option<u64>,
    ) -> (Expr, String, String) {
        let mut e = Expr::default();
        let (mut set, remove) = self.lease_update(&mut e, req, epoch);
        let fence = e.n(record::FENCE);
        let mut condition = format!("attribute_exists({fence})");
        match last {
            None => set.push(format!("{fence} = {fence} + {}", e.v("one", n(1)))),
            Some(last) => {
                set.push(format!("{fence} = {}", e.v("next", n(last + 1))));
                condition.push_str(&format!(" AND {fence} = {}", e.v("last", n(last))));
            }
        }
        let epoch_attr = e.n(EPOCH);
        let mut free = format!("attribute_not_exists({})", e.n(record::LEASE_ID));
        if let Some(rvn) = observed {
            free.push_str(&format!(
                " OR {} = {}",
                e.n(record::RVN),
                e.v("seen", s(rvn))
            ));
        }
        if let TakeoverMode::TrustClocks { max_skew } = self.takeover {
            let cutoff =
                unix_ms((self.settings.wall)()).saturating_sub(max_skew.as_millis() as u64);
            free.push_str(&format!(
                " OR {} < {}",
                e.n(record::EXPIRES_MS),
                e.v("cutoff", n(cutoff))
            ));
        }
        condition.push_str(&format!(
            " AND (attribute_not_exists({epoch_attr}) OR {epoch_attr} = :epoch) AND ({free})"
        ));
        (e, update_expression(&set, &remove), condition)
    }

    /// Creates the item of a key the table has none for, with the first
    /// token of `epoch` and `req`'s lease, in one transaction with a check
    /// that the table's epoch marker still says `epoch` (so that a table
    /// re-created meanwhile cannot get an item of the old epoch).
    async fn create_item(&self, req: &AcquireRequest, epoch: u64) -> Result<Created> {
        let (update, first) = self.create_update(req, epoch)?;
        let check = self.marker_check(epoch)?;
        let result = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().condition_check(check).build())
            .transact_items(TransactWriteItem::builder().update(update).build())
            .send()
            .await;
        match result {
            Ok(_) => Ok(Created::Item(first)),
            Err(err) => match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(c)) => {
                    let failed = |i: usize| {
                        c.cancellation_reasons()
                            .get(i)
                            .and_then(|r| r.code())
                            .is_some_and(|code| code == "ConditionalCheckFailed")
                    };
                    if failed(0) {
                        Ok(Created::OtherEpoch)
                    } else {
                        // The item was created meanwhile, or a conflict
                        // with another transaction: try again.
                        Ok(Created::Raced)
                    }
                }
                Some(TransactWriteItemsError::ResourceNotFoundException(_)) => {
                    Ok(Created::OtherEpoch)
                }
                _ => Err(SERVICE.map_sdk(&self.table, "acquire", err)),
            },
        }
    }

    /// The transaction's write that creates `req`'s key's item with the
    /// first token of `epoch` and `req`'s lease, if the item does not exist;
    /// and that token.
    pub(crate) fn create_update(&self, req: &AcquireRequest, epoch: u64) -> Result<(Update, u64)> {
        let mut e = Expr::default();
        let (mut set, remove) = self.lease_update(&mut e, req, epoch);
        let first = leasehold::backend::next_token(0, epoch);
        set.push(e.equals(record::FENCE, "first", n(first)));
        let condition = format!("attribute_not_exists({})", e.n(record::KEY));
        let update = update_expression(&set, &remove);
        Ok((
            self.tx_update(req.key.as_str(), e, update, condition)?,
            first,
        ))
    }

    /// One conditional write of `key`'s item in a transaction; a failed
    /// condition answers the item as it was.
    pub(crate) fn tx_update(
        &self,
        key: &str,
        e: Expr,
        update: String,
        condition: String,
    ) -> Result<Update> {
        let (names, values) = e.into_parts();
        Update::builder()
            .table_name(&self.table)
            .key(record::KEY, s(key))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|err| Error::backend(BACKEND, "acquire", false, err))
    }

    /// The transaction's check that the table's epoch marker still names
    /// `epoch` (so that a table re-created meanwhile cannot get an item of
    /// the old epoch).
    pub(crate) fn marker_check(&self, epoch: u64) -> Result<ConditionCheck> {
        ConditionCheck::builder()
            .table_name(&self.table)
            .key(record::KEY, s(MARKER_KEY))
            .condition_expression("#epoch = :epoch")
            .expression_attribute_names("#epoch", EPOCH)
            .expression_attribute_values(":epoch", n(epoch))
            .build()
            .map_err(|err| Error::backend(BACKEND, "acquire", false, err))
    }

    /// Extends a lease that `req`'s lease id already holds; `None` if it
    /// does not (any more).
    async fn extend(&self, req: &AcquireRequest) -> Result<Option<u64>> {
        match self
            .refresh(
                "acquire",
                &req.key,
                &req.lease_id,
                req.ttl,
                ReturnValue::AllNew,
            )
            .await?
        {
            Write::Done(item) => Ok(Some(Stored::decode(&item)?.fence)),
            Write::Refused(_) | Write::NoTable => Ok(None),
        }
    }
}

/// The outcome of [`DynamoDbBackend::create_item`].
enum Created {
    /// Created, with this token.
    Item(u64),
    /// The table's epoch is not the one asked for (or the table is gone).
    OtherEpoch,
    /// Someone else wrote the item first.
    Raced,
}
