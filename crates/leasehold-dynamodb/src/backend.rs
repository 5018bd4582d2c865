//! [`DynamoDbBackend`]: the protocol of the crate docs, request by request.

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    ConditionCheck, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use aws_sdk_dynamodb::Client;
use leasehold::{
    backend::{
        AcquireOutcome, AcquireRequest, Backend, Capabilities, Grant, Lease, SharedClock,
        StoreEpoch,
    },
    Error, HolderInfo, Key, KeyInfo, LossReason, Result, RunRecord,
};

use crate::builder::DynamoDbBackendBuilder;
use crate::epoch::{EPOCH, MARKER_KEY};
use crate::error::{map_sdk, Message, BACKEND};
use crate::record::{self, n, s, unix_ms, Expr, Item, Stored};
use crate::{TakeoverMode, WallClock, MAX_TTL, MIN_TTL};
use leasehold::backend::Observations;

/// A [`Backend`] on a DynamoDB table. See the [crate docs](crate) for the
/// protocol, the table schema and the IAM permissions.
///
/// Cheap to share behind an `Arc` (a [`leasehold::Store`] does that); one
/// backend keeps the takeover observations of every lock that uses it.
pub struct DynamoDbBackend {
    pub(crate) client: Client,
    pub(crate) table: String,
    pub(crate) region: String,
    pub(crate) endpoint: Option<String>,
    pub(crate) clock: SharedClock,
    pub(crate) wall: WallClock,
    pub(crate) takeover: TakeoverMode,
    pub(crate) margin: Duration,
    /// The max TTL a table created (or marked) by this backend records.
    pub(crate) max_ttl: Duration,
    pub(crate) create_table: bool,
    /// What opening (and any later look at the epoch) may do to the table.
    pub(crate) creation: leasehold::Creation,
    /// The table's epoch as last read, and when (on `clock`).
    pub(crate) epoch: Mutex<(StoreEpoch, Duration)>,
    pub(crate) dates: leasehold_aws::ServiceDate,
    pub(crate) observations: Observations,
    pub(crate) requests: leasehold_aws::RequestCounter,
}

impl fmt::Debug for DynamoDbBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoDbBackend")
            .field("table", &self.table)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("takeover", &self.takeover)
            .finish_non_exhaustive()
    }
}

/// The outcome of one conditional write.
enum Write {
    /// Applied; the attributes asked for with `ReturnValues`.
    Done(Item),
    /// The condition failed; the item as it was (absent if there is none).
    Refused(Option<Item>),
    /// The table does not exist (deleted).
    NoTable,
}

impl DynamoDbBackend {
    /// A builder for a backend on `table`.
    pub fn builder(table: impl Into<String>) -> DynamoDbBackendBuilder {
        DynamoDbBackendBuilder::new(table)
    }

    /// Opens `dynamodb://TABLE?region=…&endpoint=…&profile=…&max_clock_skew=…&create_table=…`
    /// (see the [crate docs](crate#store-url)): loads the AWS configuration,
    /// then checks the table or creates it.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL, table name, region or
    /// endpoint (naming what is wrong, never repeating a possible secret);
    /// [`Error::Backend`] when DynamoDB cannot be reached or refuses the
    /// credentials.
    ///
    /// # Cancel safety
    /// As [`DynamoDbBackendBuilder::build`].
    pub async fn from_url(url: &str) -> Result<DynamoDbBackend> {
        Self::builder_from_url(url)?.build().await
    }

    /// The builder [`from_url`](Self::from_url) builds, for setting more
    /// before building (such as [`creation`](DynamoDbBackendBuilder::creation)).
    ///
    /// # Errors
    /// As [`from_url`](Self::from_url), for the URL's form.
    pub fn builder_from_url(url: &str) -> Result<DynamoDbBackendBuilder> {
        crate::url::parse(url)
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// How many HTTP requests this backend has sent (every attempt,
    /// the SDK's retries included), for metrics and tests.
    pub fn requests_sent(&self) -> u64 {
        self.requests.get()
    }

    /// The SDK client, for anything leasehold does not do.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Adds where we tried to connect to an error from opening the table.
    pub(crate) fn connect_error(&self, err: Error) -> Error {
        match err {
            Error::Backend {
                backend,
                operation,
                retryable,
                source,
            } => Error::backend(
                backend,
                operation,
                retryable,
                Message(match &self.endpoint {
                    Some(endpoint) => format!(
                        "{source} (table {:?}, region {}, endpoint {endpoint})",
                        self.table, self.region
                    ),
                    None => format!(
                        "{source} (table {:?}, region {}, the region's AWS endpoint; is the region name right?)",
                        self.table, self.region
                    ),
                }),
            ),
            other => other,
        }
    }

    /// How long a holder's version must stay unchanged before a takeover.
    fn observation_wait(&self, holder_ttl: Option<Duration>) -> Duration {
        let ttl = holder_ttl.unwrap_or(MAX_TTL);
        ttl + ttl / 1000 + self.margin
    }

    /// The table's store epoch (see the crate docs), as last read when the
    /// backend was built or found the table re-created; its age is as of
    /// now.
    pub fn epoch(&self) -> StoreEpoch {
        let (epoch, read_at) = self.epoch.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let since = self.clock.now().saturating_sub(read_at);
        let age = epoch.age.map(|a| a.saturating_add(since));
        epoch.with_age(age)
    }

    fn current_epoch(&self) -> StoreEpoch {
        self.epoch()
    }

    /// Reads the table's epoch (re-creating a deleted table if the backend
    /// may create tables).
    pub(crate) async fn refresh_epoch(&self) -> Result<StoreEpoch> {
        let epoch = crate::table::ensure(self, self.create_table).await?;
        *self.epoch.lock().unwrap_or_else(|e| e.into_inner()) = (epoch.clone(), self.clock.now());
        Ok(epoch)
    }

    async fn update(
        &self,
        operation: &'static str,
        key: &str,
        e: Expr,
        update: String,
        condition: String,
        returns: ReturnValue,
    ) -> Result<Write> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(record::KEY, s(key))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(e.names())
            .set_expression_attribute_values(e.values())
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
                _ => Err(map_sdk(&self.table, operation, err)),
            },
        }
    }

    /// The SET and REMOVE parts that write `req`'s lease, its owner and its
    /// epoch (everything but the fence).
    fn lease_update(
        &self,
        e: &mut Expr,
        req: &AcquireRequest,
        epoch: u64,
    ) -> (Vec<String>, Vec<String>) {
        let now = (self.wall)();
        let mut set = vec![
            format!("{} = {}", e.n(EPOCH), e.v("epoch", n(epoch))),
            format!("{} = {}", e.n(record::RVN), e.v("rvn", s(new_rvn()))),
            format!(
                "{} = {}",
                e.n(record::LEASE_ID),
                e.v("lid", s(req.lease_id.as_str()))
            ),
            format!(
                "{} = {}",
                e.n(record::OWNER_HOST),
                e.v("host", s(&req.owner.host))
            ),
            format!(
                "{} = {}",
                e.n(record::OWNER_PID),
                e.v("pid", n(req.owner.pid))
            ),
            format!(
                "{} = {}",
                e.n(record::TTL_MS),
                e.v("ttl", n(req.ttl.as_millis()))
            ),
            format!(
                "{} = {}",
                e.n(record::ACQUIRED_MS),
                e.v("now", n(unix_ms(now)))
            ),
            format!(
                "{} = {}",
                e.n(record::EXPIRES_MS),
                e.v("exp", n(unix_ms(now + req.ttl)))
            ),
        ];
        let mut remove = vec![e.n(record::RELEASED_BY)];
        for (attr, value) in [
            (record::OWNER_LABEL, &req.owner.label),
            (record::DATA, &req.data),
        ] {
            match value {
                Some(v) => set.push(format!("{} = {}", e.n(attr), e.v(attr, s(v)))),
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
        let mut e = Expr::default();
        let (mut set, remove) = self.lease_update(&mut e, req, epoch);
        let fence = e.n(record::FENCE);
        set.push(format!("{fence} = {fence} + {}", e.v("one", n(1))));
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
            let cutoff = unix_ms((self.wall)()).saturating_sub(max_skew.as_millis() as u64);
            free.push_str(&format!(
                " OR {} < {}",
                e.n(record::EXPIRES_MS),
                e.v("cutoff", n(cutoff))
            ));
        }
        let condition = format!(
            "attribute_exists({fence}) AND (attribute_not_exists({epoch_attr}) OR {epoch_attr} = :epoch) AND ({free})"
        );
        self.update(
            "acquire",
            req.key.as_str(),
            e,
            update_expression(&set, &remove),
            condition,
            ReturnValue::AllNew,
        )
        .await
    }

    /// Creates the item of a key the table has none for, with the first
    /// token of `epoch` and `req`'s lease, in one transaction with a check
    /// that the table's epoch marker still says `epoch` (so that a table
    /// re-created meanwhile cannot get an item of the old epoch).
    async fn create_item(&self, req: &AcquireRequest, epoch: u64) -> Result<Created> {
        let mut e = Expr::default();
        let (mut set, remove) = self.lease_update(&mut e, req, epoch);
        let first = leasehold::backend::next_token(0, epoch);
        set.push(format!(
            "{} = {}",
            e.n(record::FENCE),
            e.v("first", n(first))
        ));
        let key_attr = e.n(record::KEY);
        let update = Update::builder()
            .table_name(&self.table)
            .key(record::KEY, s(req.key.as_str()))
            .update_expression(update_expression(&set, &remove))
            .condition_expression(format!("attribute_not_exists({key_attr})"))
            .set_expression_attribute_names(e.names())
            .set_expression_attribute_values(e.values())
            .build()
            .map_err(|err| Error::backend(BACKEND, "acquire", false, err))?;
        let check = ConditionCheck::builder()
            .table_name(&self.table)
            .key(record::KEY, s(MARKER_KEY))
            .condition_expression("#epoch = :epoch")
            .expression_attribute_names("#epoch", EPOCH)
            .expression_attribute_values(":epoch", n(epoch))
            .build()
            .map_err(|err| Error::backend(BACKEND, "acquire", false, err))?;
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
                _ => Err(map_sdk(&self.table, "acquire", err)),
            },
        }
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

    /// New version and expiry for the lease `lease_id`, if it holds `key`.
    async fn refresh(
        &self,
        operation: &'static str,
        key: &Key,
        lease_id: &leasehold::backend::LeaseId,
        ttl: Duration,
        returns: ReturnValue,
    ) -> Result<Write> {
        let mut e = Expr::default();
        let now = (self.wall)();
        let set = vec![
            format!("{} = {}", e.n(record::RVN), e.v("rvn", s(new_rvn()))),
            format!(
                "{} = {}",
                e.n(record::TTL_MS),
                e.v("ttl", n(ttl.as_millis()))
            ),
            format!(
                "{} = {}",
                e.n(record::EXPIRES_MS),
                e.v("exp", n(unix_ms(now + ttl)))
            ),
        ];
        let remove = Vec::new();
        let condition = format!(
            "{} = {}",
            e.n(record::LEASE_ID),
            e.v("lid", s(lease_id.as_str()))
        );
        self.update(
            operation,
            key.as_str(),
            e,
            update_expression(&set, &remove),
            condition,
            returns,
        )
        .await
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

/// `SET a, b REMOVE c, d`.
fn update_expression(set: &[String], remove: &[String]) -> String {
    let mut update = format!("SET {}", set.join(", "));
    if !remove.is_empty() {
        update.push_str(&format!(" REMOVE {}", remove.join(", ")));
    }
    update
}

fn new_rvn() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

fn check_ttl(ttl: Duration) -> Result<()> {
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

/// Why a lease is not ours, from the item as it was when the condition
/// failed.
fn not_ours(old: Option<&Item>) -> Result<String> {
    let Some(old) = old else {
        return Ok("the key has no record".into());
    };
    let stored = Stored::decode(old)?;
    Ok(match stored.lease {
        None => "the lease was released or broken".into(),
        Some(_) => format!(
            "the key is held by another lease (fencing token {})",
            stored.fence
        ),
    })
}

fn lost(lease: &Lease, why: String) -> Error {
    Error::LeaseLost {
        key: lease.key.to_string(),
        reason: LossReason::Revoked(why),
    }
}

#[async_trait]
impl Backend for DynamoDbBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(MIN_TTL, self.current_epoch().max_ttl.min(MAX_TTL))
            .shared_across_processes(true)
            .shared_across_machines(true)
            .takeover_needs_observation(self.takeover == TakeoverMode::Observe)
    }

    /// The epoch read while building (its age as of now): the store's
    /// first attempt names it, and a proven epoch is cleared at once.
    fn epoch_at_open(&self) -> Option<StoreEpoch> {
        Some(self.epoch())
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        check_ttl(req.ttl)?;
        let current = self.current_epoch();
        let Some(epoch) = req.epoch.filter(|e| *e == current.epoch) else {
            return Ok(AcquireOutcome::OtherEpoch(current));
        };
        if req.ttl > current.max_ttl {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "{:?} is above the table's max TTL of {:?} (no lease may be longer: it bounds the wait after the table is lost)",
                    req.ttl, current.max_ttl
                ),
            ));
        }
        let key = req.key.as_str();
        let mut holder = None;
        // One request in the usual cases; more only after races (each
        // further round follows a change seen on the item), and for the
        // first grant of a key (the item is created in a transaction).
        for _ in 0..4 {
            let observed = self.observations.ripe(key, self.clock.now());
            let old = match self.grant(req, observed.as_deref(), epoch).await? {
                Write::Done(item) => {
                    self.observations.forget(key);
                    let fence = Stored::decode(&item)?.fence;
                    return Ok(AcquireOutcome::Acquired(Grant::new(fence)));
                }
                Write::Refused(Some(old)) => {
                    if crate::epoch::get_u64(&old, EPOCH).is_some_and(|e| e != epoch) {
                        // An item of another epoch: the table was re-created.
                        return Ok(AcquireOutcome::OtherEpoch(self.refresh_epoch().await?));
                    }
                    Stored::decode(&old)?
                }
                Write::Refused(None) => match self.create_item(req, epoch).await? {
                    Created::Item(fence) => {
                        self.observations.forget(key);
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
                        return Ok(AcquireOutcome::Acquired(Grant::new(fence)));
                    }
                    None => continue,
                }
            }
            holder = old.holder((self.wall)());
            let Some(rvn) = old.rvn.as_deref() else {
                return Ok(AcquireOutcome::Held(holder));
            };
            let now = self.clock.now();
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
            format!("{} = {}", e.n(record::RVN), e.v("rvn", s(new_rvn()))),
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
        let text = run.to_stored();
        let mut e = Expr::default();
        let lid = e.v("lid", s(lease.lease_id.as_str()));
        let stored = e.v("run", s(&text));
        let token = e.v("token", n(run.fencing_token));
        let mut set = vec![
            format!("{} = {}", e.n(record::RVN), e.v("rvn", s(new_rvn()))),
            format!("{} = {stored}", e.n(record::LAST_RUN)),
            format!("{} = {token}", e.n(record::LAST_RUN_TOKEN)),
        ];
        if run.succeeded() {
            set.push(format!("{} = {stored}", e.n(record::LAST_SUCCESS)));
        }
        let condition = format!("{} = {lid}", e.n(record::LEASE_ID));
        let old = match self
            .update(
                "record_run",
                lease.key.as_str(),
                e,
                update_expression(&set, &[]),
                condition,
                ReturnValue::None,
            )
            .await?
        {
            Write::Done(_) => return Ok(()),
            Write::Refused(old) => old,
            Write::NoTable => return Err(lost(lease, "the table was deleted".into())),
        };
        if !run.succeeded() && old.is_some() {
            // Not ours any more: still the last run, unless a later run's
            // record is there. The version (rvn) stays: this is no sign of
            // life of the current holder, whose takeover it must not delay.
            let mut e = Expr::default();
            let stored = e.v("run", s(&text));
            let token = e.v("token", n(run.fencing_token));
            let last = e.n(record::LAST_RUN_TOKEN);
            let set = vec![
                format!("{} = {stored}", e.n(record::LAST_RUN)),
                format!("{last} = {token}"),
            ];
            let condition = format!(
                "attribute_exists({}) AND (attribute_not_exists({last}) OR {last} < {token})",
                e.n(record::FENCE)
            );
            self.update(
                "record_run",
                lease.key.as_str(),
                e,
                update_expression(&set, &[]),
                condition,
                ReturnValue::None,
            )
            .await?;
        }
        Err(lost(lease, not_ours(old.as_ref())?))
    }

    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(record::KEY, s(key.as_str()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| map_sdk(&self.table, "inspect", e))?;
        match out.item {
            Some(item) => Ok(Stored::decode(&item)?.info(key.clone(), (self.wall)())),
            None => Ok(KeyInfo::new(key.clone(), 0, None)),
        }
    }

    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        let mut e = Expr::default();
        let set = vec![format!(
            "{} = {}",
            e.n(record::RVN),
            e.v("rvn", s(new_rvn()))
        )];
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
            Write::Done(old) => Ok(Stored::decode(&old)?.holder((self.wall)())),
            Write::Refused(_) => Ok(None),
            Write::NoTable => Err(Error::backend(
                BACKEND,
                "break",
                false,
                Message(format!("table {:?} does not exist", self.table)),
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
            let out = scan
                .send()
                .await
                .map_err(|e| map_sdk(&self.table, "list", e))?;
            for it in out.items() {
                let Some(key) = it.get(record::KEY).and_then(|k| k.as_s().ok()) else {
                    continue;
                };
                // Items whose key is not a leasehold key are not ours.
                let Ok(key) = Key::new(key.as_str()) else {
                    continue;
                };
                infos.push(Stored::decode(it)?.info(key, (self.wall)()));
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
