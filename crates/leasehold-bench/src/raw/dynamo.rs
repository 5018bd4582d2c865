//! The raw DynamoDB loop: leasehold's conditional grant and release.

use anyhow::{anyhow, Context};
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};

use super::key::{unix_ms, RAW_KEY};

/// Puts the raw key's item with its fencing counter at 0 (as leasehold
/// creates a key's item at its first grant), before the first cycle.
pub async fn dynamo_prime(client: &aws_sdk_dynamodb::Client, table: &str) -> anyhow::Result<()> {
    client
        .put_item()
        .table_name(table)
        .item("lease_key", AttributeValue::S(RAW_KEY.to_string()))
        .item("fence", AttributeValue::N("0".into()))
        .send()
        .await
        .context("raw DynamoDB item")?;
    Ok(())
}

/// One cycle on the item [`dynamo_prime`] put. The grant's condition is
/// leasehold's on an existing item: the item has a fencing counter, is of
/// the store's epoch (or from before epochs) and has no lease; it sets the
/// epoch with the lease (any value here: the server's work is the same).
pub async fn dynamo_cycle(client: &aws_sdk_dynamodb::Client, table: &str) -> anyhow::Result<()> {
    let s = |v: &str| AttributeValue::S(v.to_string());
    let n = |v: u64| AttributeValue::N(v.to_string());
    let lease_id = uuid::Uuid::new_v4().to_string();
    let now = unix_ms();
    let req = update(
        client,
        table,
        "SET #ep = :epoch, #f = #f + :one, #r = :rvn, #l = :lid, #h = :host, #p = :pid, #t = :ttl, #a = :now, #e = :exp REMOVE #rb, #ol, #d, #g",
        "attribute_exists(#f) AND (attribute_not_exists(#ep) OR #ep = :epoch) AND (attribute_not_exists(#l))",
        [("#f", "fence"), ("#ep", "epoch")],
    )
        .expression_attribute_values(":epoch", n(1))
        .expression_attribute_values(":one", n(1))
        .expression_attribute_values(":rvn", s(&uuid::Uuid::new_v4().to_string()))
        .expression_attribute_values(":lid", s(&lease_id))
        .expression_attribute_values(":host", s("host"))
        .expression_attribute_values(":pid", n(std::process::id() as u64))
        .expression_attribute_values(":ttl", n(30_000))
        .expression_attribute_values(":now", n(now))
        .expression_attribute_values(":exp", n(now + 30_000))
        .return_values(ReturnValue::AllNew);
    let out = req.send().await.context("raw DynamoDB grant")?;
    let _fence = out
        .attributes()
        .and_then(|a| a.get("fence"))
        .and_then(|v| v.as_n().ok())
        .ok_or_else(|| anyhow!("no fence in the grant"))?;
    let req = update(
        client,
        table,
        "SET #r = :rvn, #rb = :lid REMOVE #l, #h, #p, #t, #a, #e, #ol, #d, #g",
        "#l = :lid",
        [],
    )
    .expression_attribute_values(":rvn", s(&uuid::Uuid::new_v4().to_string()))
    .expression_attribute_values(":lid", s(&lease_id))
    .return_values(ReturnValue::None);
    req.send().await.context("raw DynamoDB release")?;
    Ok(())
}

/// The attribute names (`#` placeholders) both of leasehold's requests use.
const NAMES: [(&str, &str); 11] = [
    ("#r", "rvn"),
    ("#rb", "released_by"),
    ("#l", "lease_id"),
    ("#h", "owner_host"),
    ("#p", "owner_pid"),
    ("#t", "ttl_ms"),
    ("#a", "acquired_ms"),
    ("#e", "expires_ms"),
    ("#ol", "owner_label"),
    ("#d", "data"),
    ("#g", "gc_at"),
];

/// An `UpdateItem` of the raw key, as leasehold's backend sends one: the
/// `update` expression under `condition`, with [`NAMES`] and `more` names,
/// and the old item back when the condition fails.
fn update<const N: usize>(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    update: &str,
    condition: &str,
    more: [(&str, &str); N],
) -> UpdateItemFluentBuilder {
    let mut req = client
        .update_item()
        .table_name(table)
        .key("lease_key", AttributeValue::S(RAW_KEY.to_string()))
        .update_expression(update)
        .condition_expression(condition)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
    for (k, v) in NAMES.into_iter().chain(more) {
        req = req.expression_attribute_names(k, v);
    }
    req
}
