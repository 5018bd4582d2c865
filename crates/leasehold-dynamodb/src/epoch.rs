//! The table's epoch: its creation time on DynamoDB's clock, the marker item
//! that new items are checked against, and the service's `Date` header used
//! to tell the epoch's age.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::TableDescription;
use leasehold::{
    backend::{epoch_at, StoreEpoch},
    Result,
};

use leasehold::backend::protocol::{check_protocol, PROTOCOL, PROTOCOL_FIELD};

use crate::error::SERVICE;
use crate::record::{self, n, s, Item};
use crate::DynamoDbBackend;

/// The key of the marker item: not a valid leasehold key (no `#` in keys),
/// so it never clashes with one and `list` skips it.
pub(crate) const MARKER_KEY: &str = "#leasehold-epoch";
/// The marker's attributes: the epoch and the store's max TTL.
pub(crate) const EPOCH: &str = "epoch";
pub(crate) const MAX_TTL_MS: &str = "max_ttl_ms";
/// Set (to true) on the marker of a table created with
/// [`Creation::NewProven`](leasehold::Creation::NewProven): its epoch is
/// proven, settled at once in every process.
pub(crate) const PROVEN: &str = "proven";

/// The epoch of a table described at `date` (the service's clock then, if
/// known): its creation time, and its age by the service's own clock.
pub(crate) fn of_table(
    table: &TableDescription,
    date: Option<SystemTime>,
    max_ttl: Duration,
) -> Result<StoreEpoch> {
    let created = table
        .creation_date_time()
        .and_then(|d| SystemTime::try_from(*d).ok())
        .ok_or_else(|| {
            SERVICE.error(
                "open",
                true,
                "DescribeTable did not say when the table was created",
            )
        })?;
    // `Date` has whole seconds, truncated: an age measured with it is at
    // most a second short, never long.
    let age = date.map(|d| d.duration_since(created).unwrap_or_default());
    Ok(StoreEpoch::new(epoch_at(created), max_ttl).with_age(age))
}

/// How long until the table's creation second is over on the service's
/// clock, if a response dated `date` (whole seconds, truncated) does not
/// show it over already: at most a second.
///
/// No lease is granted in a table before then. The epoch is the creation
/// time in whole seconds, so a table deleted and created again within
/// that second would get the same epoch, and repeat its tokens; a table
/// created after a grant made once the second is over has a later epoch.
/// (Only a proven epoch is granted in that soon: any other is quarantined
/// for a confirmation window.) Test: `store_recreated_at_once_issues_greater_tokens`,
/// `tests/backend.rs`.
pub(crate) fn first_second_left(
    table: &TableDescription,
    date: Option<SystemTime>,
) -> Option<Duration> {
    let created = table
        .creation_date_time()
        .and_then(|d| SystemTime::try_from(*d).ok())?;
    let since_unix = created.duration_since(UNIX_EPOCH).ok()?;
    let over = UNIX_EPOCH + Duration::from_secs(since_unix.as_secs() + 1);
    if date.is_some_and(|d| d >= over) {
        return None;
    }
    // The service's clock was at `created` at least when it answered: this
    // long after the answer, it is past the second (a margin for clock
    // rates).
    over.duration_since(created)
        .ok()
        .map(|left| left + Duration::from_millis(10))
}

/// Reads the marker item, writing it (with `epoch` and `max_ttl`, and
/// proven when the backend creates with
/// [`Creation::NewProven`](leasehold::Creation::NewProven)) if the table
/// has none, unless the backend may not write
/// ([`Creation::Never`](leasehold::Creation::Never)); returns the max TTL
/// it records, whether the epoch is proven, and whether this call wrote it
/// (created the store: its conditional put was the one that won).
pub(crate) async fn marker(
    backend: &DynamoDbBackend,
    epoch: u64,
    max_ttl: Duration,
) -> Result<(Duration, bool, bool)> {
    for _ in 0..3 {
        if let Some(item) = read_marker(backend).await? {
            // An unknown protocol: refused before anything is written.
            let protocol = item.get(PROTOCOL_FIELD).map(|v| match v.as_n() {
                Ok(n) => n.as_str(),
                Err(_) => "(not a number)",
            });
            check_protocol(SERVICE.backend, protocol)?;
            let recorded = get_u64(&item, MAX_TTL_MS).map(Duration::from_millis);
            if get_u64(&item, EPOCH) == Some(epoch) {
                let proven = item.get(PROVEN).and_then(|v| v.as_bool().ok()) == Some(&true);
                return Ok((recorded.unwrap_or(max_ttl), proven, false));
            }
            // A marker of another epoch cannot be in this table (it was
            // created with the table): refuse rather than guess.
            return Err(SERVICE.error("open", false, format!(
                    "the table's epoch marker says epoch {:?}, the table's creation time says {epoch}; is the table used by something else?",
                    get_u64(&item, EPOCH)
                )));
        }
        if backend.settings.creation == leasehold::Creation::Never {
            // Looking writes nothing: the table's own epoch, as it is.
            return Ok((max_ttl, false, false));
        }
        let proven = backend.settings.creation == leasehold::Creation::NewProven;
        let mut put = backend
            .client
            .put_item()
            .table_name(&backend.table)
            .item(record::KEY, s(MARKER_KEY))
            .item(EPOCH, n(epoch))
            .item(MAX_TTL_MS, n(max_ttl.as_millis()))
            .item(PROTOCOL_FIELD, n(PROTOCOL));
        if proven {
            put = put.item(PROVEN, aws_sdk_dynamodb::types::AttributeValue::Bool(true));
        }
        let put = put
            .condition_expression("attribute_not_exists(#k)")
            .expression_attribute_names("#k", record::KEY)
            .send()
            .await;
        match put {
            Ok(_) => return Ok((max_ttl, proven, true)),
            Err(e)
                if matches!(
                    e.as_service_error(),
                    Some(PutItemError::ConditionalCheckFailedException(_))
                ) =>
            {
                continue
            }
            Err(e) => return Err(SERVICE.map_sdk(&backend.table, "open", e)),
        }
    }
    Err(SERVICE.error("open", true, "the epoch marker kept changing"))
}

async fn read_marker(backend: &DynamoDbBackend) -> Result<Option<Item>> {
    let out = backend
        .client
        .get_item()
        .table_name(&backend.table)
        .key(record::KEY, s(MARKER_KEY))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| SERVICE.map_sdk(&backend.table, "open", e))?;
    Ok(out.item)
}

pub(crate) fn get_u64(item: &Item, attr: &str) -> Option<u64> {
    item.get(attr)?.as_n().ok()?.parse().ok()
}
