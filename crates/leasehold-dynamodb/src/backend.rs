//! [`DynamoDbBackend`]: the protocol of the crate docs, request by request.
//! The acquire path is in `acquire.rs` (several keys at once in
//! `batch.rs`), run records in `runs.rs`, the
//! table's epoch in `epoch.rs` and `table.rs`.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use leasehold::backend::shared_builder::shared_capabilities;
use leasehold::{
    backend::{
        AcquireOutcome, AcquireRequest, Backend, BatchOutcome, Capabilities, Lease, StoreEpoch,
    },
    Error, HolderInfo, Key, KeyInfo, Result, RunRecord,
};
use leasehold_aws::StoreSettings;

use crate::error::{BACKEND, SERVICE};
use crate::record::{self, n, s, unix_ms, Expr, Stored};
use crate::write::{lost, new_rvn, not_ours, update_expression, Write};
use crate::{TakeoverMode, MAX_TTL, MIN_TTL};
use leasehold::backend::Observations;

/// A [`Backend`] on a DynamoDB table. See the [crate docs](crate) for the
/// protocol, the table schema and the IAM permissions.
///
/// Cheap to share behind an `Arc` (a [`leasehold::Store`] does that); one
/// backend keeps the takeover observations of every lock that uses it.
pub struct DynamoDbBackend {
    pub(crate) client: Client,
    pub(crate) table: String,
    pub(crate) takeover: TakeoverMode,
    /// Region, endpoint, clocks, max TTL, creating the table, what opening
    /// (and any later look at the epoch) may do to it, the table's epoch as
    /// last read, requests sent.
    pub(crate) settings: StoreSettings,
    pub(crate) dates: leasehold_aws::ServiceDate,
    pub(crate) observations: Observations,
    /// The last fence seen per key, for batches' conditions.
    pub(crate) fences: crate::batch::Fences,
}

impl std::fmt::Debug for DynamoDbBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoDbBackend")
            .field("table", &self.table)
            .field("region", &self.settings.region)
            .field("endpoint", &self.settings.endpoint)
            .field("takeover", &self.takeover)
            .finish_non_exhaustive()
    }
}

impl DynamoDbBackend {
    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.settings.region
    }

    /// How many HTTP requests this backend has sent (every attempt,
    /// the SDK's retries included), for metrics and tests.
    pub fn requests_sent(&self) -> u64 {
        self.settings.requests.get()
    }

    /// The SDK client, for anything leasehold does not do.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Adds where we tried to connect to an error from opening the table.
    pub(crate) fn connect_error(&self, err: Error) -> Error {
        self.settings
            .connect_error(err, &format!("table {:?}", self.table))
    }

    /// The table's store epoch (see the crate docs), as last read when the
    /// backend was built or found the table re-created; its age is as of
    /// now.
    pub fn epoch(&self) -> StoreEpoch {
        self.settings.epoch.get()
    }

    /// One conditional `UpdateItem` on `key`'s item.
    pub(crate) async fn update(
        &self,
        operation: &'static str,
        key: &str,
        e: Expr,
        update: String,
        condition: String,
        returns: ReturnValue,
    ) -> Result<Write> {
        let (names, values) = e.into_parts();
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(record::KEY, s(key))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .return_values(returns)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => Ok(Write::Done(out.attributes.unwrap_or_default())),
            Err(err) => match err.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                    Ok(Write::Refused(c.item().cloned()))
                }
                Some(UpdateItemError::ResourceNotFoundException(_)) => Ok(Write::NoTable),
                _ => Err(SERVICE.map_sdk(&self.table, operation, err)),
            },
        }
    }

    /// New version and expiry for the lease `lease_id`, if it holds `key`.
    pub(crate) async fn refresh(
        &self,
        operation: &'static str,
        key: &Key,
        lease_id: &leasehold::backend::LeaseId,
        ttl: Duration,
        returns: ReturnValue,
    ) -> Result<Write> {
        let (e, update, condition) = self.refresh_parts(lease_id, ttl);
        self.update(operation, key.as_str(), e, update, condition, returns)
            .await
    }

    /// The update and condition of [`refresh`](Self::refresh).
    pub(crate) fn refresh_parts(
        &self,
        lease_id: &leasehold::backend::LeaseId,
        ttl: Duration,
    ) -> (Expr, String, String) {
        let mut e = Expr::default();
        let now = (self.settings.wall)();
        let set = vec![
            e.equals(record::RVN, "rvn", s(new_rvn())),
            e.equals(record::TTL_MS, "ttl", n(ttl.as_millis())),
            e.equals(record::EXPIRES_MS, "exp", n(unix_ms(now + ttl))),
        ];
        let condition = e.equals(record::LEASE_ID, "lid", s(lease_id.as_str()));
        (e, update_expression(&set, &[]), condition)
    }
}

pub(crate) fn check_ttl(ttl: Duration) -> Result<()> {
    if (MIN_TTL..=MAX_TTL).contains(&ttl) {
        Ok(())
    } else {
        Err(Error::invalid(
            "ttl",
            format!(
                "{ttl:?} is outside the DynamoDB backend's range of {MIN_TTL:?} to {MAX_TTL:?}"
            ),
        ))
    }
}

#[async_trait]
impl Backend for DynamoDbBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    /// The epoch read while building (its age as of now): the store's
    /// first attempt names it, and a proven epoch is cleared at once.
    fn epoch_at_open(&self) -> Option<StoreEpoch> {
        Some(self.epoch())
    }

    /// Whether building created the store (its conditional write of the
    /// epoch marker was the one that won).
    fn created_at_open(&self) -> Option<bool> {
        self.settings.created_at_open()
    }

    fn capabilities(&self) -> Capabilities {
        shared_capabilities(MIN_TTL, self.epoch().max_ttl.min(MAX_TTL))
            .takeover_needs_observation(self.takeover == TakeoverMode::Observe)
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        self.acquire(req).await
    }

    /// One `TransactWriteItems` (see `batch.rs`).
    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<BatchOutcome> {
        self.acquire_all(requests).await
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        check_ttl(lease.ttl)?;
        match self
            .refresh(
                "renew",
                &lease.key,
                &lease.lease_id,
                lease.ttl,
                ReturnValue::None,
            )
            .await?
        {
            Write::Done(_) => Ok(()),
            Write::Refused(old) => Err(lost(lease, not_ours(old.as_ref())?)),
            Write::NoTable => Err(lost(lease, "the table was deleted".into())),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let mut e = Expr::default();
        let lid = e.v("lid", s(lease.lease_id.as_str()));
        let set = vec![
            e.equals(record::RVN, "rvn", s(new_rvn())),
            format!("{} = {lid}", e.n(record::RELEASED_BY)),
        ];
        let remove: Vec<String> = record::LEASE_ATTRS.iter().map(|a| e.n(a)).collect();
        let condition = format!("{} = {lid}", e.n(record::LEASE_ID));
        match self
            .update(
                "release",
                lease.key.as_str(),
                e,
                update_expression(&set, &remove),
                condition,
                ReturnValue::None,
            )
            .await?
        {
            Write::Done(_) => Ok(()),
            Write::Refused(old) => {
                if let Some(item) = &old {
                    let stored = Stored::decode(item)?;
                    if stored.lease.is_none()
                        && stored.released_by.as_deref() == Some(lease.lease_id.as_str())
                    {
                        // Our own earlier attempt went through.
                        return Ok(());
                    }
                }
                Err(lost(lease, not_ours(old.as_ref())?))
            }
            Write::NoTable => Err(lost(lease, "the table was deleted".into())),
        }
    }

    async fn record_run(&self, lease: &Lease, run: &RunRecord) -> Result<()> {
        self.write_run(lease, run).await
    }

    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(record::KEY, s(key.as_str()))
            .consistent_read(true)
            .send()
            .await;
        let out = match out {
            Ok(out) => out,
            // Deleted: nothing is stored (the next grant re-creates it).
            Err(e) if table_gone(&e) => {
                return Ok(KeyInfo::new(key.clone(), 0, None));
            }
            Err(e) => return Err(SERVICE.map_sdk(&self.table, "inspect", e)),
        };
        match out.item {
            Some(item) => Ok(Stored::decode(&item)?.info(key.clone(), (self.settings.wall)())),
            None => Ok(KeyInfo::new(key.clone(), 0, None)),
        }
    }

    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        let mut e = Expr::default();
        let set = vec![e.equals(record::RVN, "rvn", s(new_rvn()))];
        let mut remove: Vec<String> = record::LEASE_ATTRS.iter().map(|a| e.n(a)).collect();
        remove.push(e.n(record::RELEASED_BY));
        let condition = format!("attribute_exists({})", e.n(record::LEASE_ID));
        match self
            .update(
                "break",
                key.as_str(),
                e,
                update_expression(&set, &remove),
                condition,
                ReturnValue::AllOld,
            )
            .await?
        {
            Write::Done(old) => Ok(Stored::decode(&old)?.holder((self.settings.wall)())),
            Write::Refused(_) => Ok(None),
            Write::NoTable => Err(SERVICE.error(
                "break",
                false,
                format!("table {:?} does not exist", self.table),
            )),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        let mut infos = Vec::new();
        let mut start = None;
        loop {
            let mut scan = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .set_exclusive_start_key(start.take());
            if !prefix.is_empty() {
                scan = scan
                    .filter_expression("begins_with(#k, :prefix)")
                    .expression_attribute_names("#k", record::KEY)
                    .expression_attribute_values(":prefix", s(prefix));
            }
            let out = match scan.send().await {
                Ok(out) => out,
                // Deleted (even between two pages): nothing is stored.
                Err(e) if table_gone(&e) => {
                    return Ok(Vec::new());
                }
                Err(e) => return Err(SERVICE.map_sdk(&self.table, "list", e)),
            };
            for it in out.items() {
                let Some(key) = it.get(record::KEY).and_then(|k| k.as_s().ok()) else {
                    continue;
                };
                // Items whose key is not a leasehold key are not ours.
                let Ok(key) = Key::new(key.as_str()) else {
                    continue;
                };
                infos.push(Stored::decode(it)?.info(key, (self.settings.wall)()));
            }
            match out.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        infos.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(infos)
    }
}

/// Whether a read's failure says the table does not exist (deleted).
fn table_gone<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    e.as_service_error().and_then(|e| e.code()) == Some(SERVICE.not_found_code)
}
