//! Checking the table, and creating it when it is missing.

use std::time::Duration;

use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TableDescription, TableStatus, TimeToLiveSpecification,
};
use leasehold::{Error, Result};

use crate::error::{map_sdk, Message, BACKEND};
use crate::item::{GC_AT, KEY};
use crate::DynamoDbBackend;

/// How long to wait for a new table to become ACTIVE.
const ACTIVE_TIMEOUT: Duration = Duration::from_secs(300);

/// Makes sure the table exists with our key schema, creating it if allowed.
/// An existing table is never altered.
pub(crate) async fn ensure(backend: &DynamoDbBackend, create: bool) -> Result<()> {
    match describe(backend).await? {
        Some(table) => {
            check_schema(&backend.table, &table)?;
            if table.table_status() == Some(&TableStatus::Creating) {
                wait_active(backend).await?;
            }
            Ok(())
        }
        None if create => create_table(backend).await,
        None => Err(Error::backend(
            BACKEND,
            "open",
            false,
            Message(format!(
                "table {:?} does not exist in {} and create_table is off",
                backend.table, backend.region
            )),
        )),
    }
}

async fn describe(backend: &DynamoDbBackend) -> Result<Option<TableDescription>> {
    match backend
        .client
        .describe_table()
        .table_name(&backend.table)
        .send()
        .await
    {
        Ok(out) => Ok(out.table),
        Err(e)
            if matches!(
                e.as_service_error(),
                Some(DescribeTableError::ResourceNotFoundException(_))
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(backend.connect_error(map_sdk(&backend.table, "open", e))),
    }
}

fn check_schema(name: &str, table: &TableDescription) -> Result<()> {
    let keys = table.key_schema();
    let key_ok =
        keys.len() == 1 && keys[0].attribute_name() == KEY && keys[0].key_type() == &KeyType::Hash;
    let type_ok = table
        .attribute_definitions()
        .iter()
        .any(|d| d.attribute_name() == KEY && d.attribute_type() == &ScalarAttributeType::S);
    if key_ok && type_ok {
        return Ok(());
    }
    let found: Vec<String> = keys
        .iter()
        .map(|k| format!("{} ({})", k.attribute_name(), k.key_type().as_str()))
        .collect();
    Err(Error::invalid(
        "table",
        format!(
            "table {name:?} exists with key schema [{}]; leasehold needs a table whose only key is the string partition key {KEY:?}. Use another table name (leasehold creates it).",
            found.join(", ")
        ),
    ))
}

async fn create_table(backend: &DynamoDbBackend) -> Result<()> {
    let build_err =
        |e: aws_sdk_dynamodb::error::BuildError| Error::backend(BACKEND, "create table", false, e);
    let result = backend
        .client
        .create_table()
        .table_name(&backend.table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(KEY)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(build_err)?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(KEY)
                .key_type(KeyType::Hash)
                .build()
                .map_err(build_err)?,
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await;
    match result {
        Ok(_) => {
            tracing::info!(table = %backend.table, region = %backend.region, "created the DynamoDB table");
            wait_active(backend).await?;
            backend
                .client
                .update_time_to_live()
                .table_name(&backend.table)
                .time_to_live_specification(
                    TimeToLiveSpecification::builder()
                        .enabled(true)
                        .attribute_name(GC_AT)
                        .build()
                        .map_err(build_err)?,
                )
                .send()
                .await
                .map_err(|e| map_sdk(&backend.table, "enable TTL", e))?;
            Ok(())
        }
        // Someone else created it at the same moment: use theirs.
        Err(e)
            if matches!(
                e.as_service_error(),
                Some(CreateTableError::ResourceInUseException(_))
            ) =>
        {
            wait_active(backend).await?;
            match describe(backend).await? {
                Some(table) => check_schema(&backend.table, &table),
                None => Err(Error::backend(
                    BACKEND,
                    "create table",
                    true,
                    Message(format!(
                        "table {:?} vanished while being created",
                        backend.table
                    )),
                )),
            }
        }
        Err(e) => Err(map_sdk(&backend.table, "create table", e)),
    }
}

async fn wait_active(backend: &DynamoDbBackend) -> Result<()> {
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(100);
    loop {
        if let Some(table) = describe(backend).await? {
            if table.table_status() == Some(&TableStatus::Active) {
                return Ok(());
            }
        }
        if started.elapsed() > ACTIVE_TIMEOUT {
            return Err(Error::backend(
                BACKEND,
                "create table",
                true,
                Message(format!(
                    "table {:?} did not become ACTIVE within {ACTIVE_TIMEOUT:?}",
                    backend.table
                )),
            ));
        }
        // DynamoDB has no table-status notification to await: poll,
        // backing off to 2 s.
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}
