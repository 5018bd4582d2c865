//! Checking the table, and creating it when it is missing.

use std::time::Duration;

use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TableDescription, TableStatus,
};
use leasehold::{backend::StoreEpoch, Error, Result};

use crate::error::{BACKEND, SERVICE};
use crate::record::KEY;
use crate::DynamoDbBackend;

/// How long to wait for a new table to become ACTIVE.
const ACTIVE_TIMEOUT: Duration = Duration::from_secs(300);

impl DynamoDbBackend {
    /// Reads the table's epoch (re-creating a deleted table if the backend
    /// may create tables).
    pub(crate) async fn refresh_epoch(&self) -> Result<StoreEpoch> {
        let (epoch, created) = ensure(self, self.settings.create).await?;
        self.settings.epoch.set(epoch.clone());
        // The first reading is the one while building.
        let _ = self.settings.created.set(created);
        Ok(epoch)
    }
}

/// Makes sure the table exists with our key schema, creating it if allowed,
/// and returns its epoch (see the crate docs), with whether this call wrote
/// its epoch marker (created the store). An existing table is never
/// altered; a global table is refused.
pub(crate) async fn ensure(backend: &DynamoDbBackend, create: bool) -> Result<(StoreEpoch, bool)> {
    exists(backend, create).await?;
    let _ = backend.dates.take();
    let table = describe(backend).await?.ok_or_else(|| {
        SERVICE.error(
            "open",
            true,
            format!("table {:?} vanished while being opened", backend.table),
        )
    })?;
    let date = backend.dates.take();
    check_not_global(&backend.table, &table)?;
    let epoch = crate::epoch::of_table(&table, date, backend.settings.max_ttl)?;
    if let Some(left) = crate::epoch::first_second_left(&table, date) {
        tokio::time::sleep(left).await;
    }
    let (max_ttl, proven, created) =
        crate::epoch::marker(backend, epoch.epoch, backend.settings.max_ttl).await?;
    let epoch = leasehold::backend::StoreEpoch::new(epoch.epoch, max_ttl).with_age(epoch.age);
    Ok((if proven { epoch.proven() } else { epoch }, created))
}

/// Global tables (replicas in several regions) resolve concurrent writes in
/// different regions by "last writer wins": two regions can each grant the
/// same lease, and a fencing counter can go back. Refused.
fn check_not_global(name: &str, table: &TableDescription) -> Result<()> {
    if table.replicas().is_empty() && table.global_table_version().is_none() {
        return Ok(());
    }
    Err(Error::invalid(
        "table",
        format!(
            "table {name:?} is a global table (replicated across regions); leasehold refuses it: conditional writes are not serialised across regions (last writer wins), so two regions could grant the same lease and a fencing counter could go back. Use a table in one region."
        ),
    ))
}

async fn exists(backend: &DynamoDbBackend, create: bool) -> Result<()> {
    match describe(backend).await? {
        Some(table) => {
            check_schema(&backend.table, &table)?;
            if table.table_status() == Some(&TableStatus::Creating) {
                wait_active(backend).await?;
            }
            Ok(())
        }
        None if create => create_table(backend).await,
        None if backend.settings.creation == leasehold::Creation::Never => {
            Err(Error::no_store(format!(
                "table {:?} does not exist in {}",
                backend.table, backend.settings.region
            )))
        }
        None => Err(SERVICE.error(
            "open",
            false,
            format!(
                "table {:?} does not exist in {} and create_table is off",
                backend.table, backend.settings.region
            ),
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
        Err(e) => Err(backend.connect_error(SERVICE.map_sdk(&backend.table, "open", e))),
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
            tracing::info!(table = %backend.table, region = %backend.settings.region, "created the DynamoDB table");
            wait_active(backend).await?;
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
                None => Err(SERVICE.error(
                    "create table",
                    true,
                    format!("table {:?} vanished while being created", backend.table),
                )),
            }
        }
        Err(e) => Err(SERVICE.map_sdk(&backend.table, "create table", e)),
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
            return Err(SERVICE.error(
                "create table",
                true,
                format!(
                    "table {:?} did not become ACTIVE within {ACTIVE_TIMEOUT:?}",
                    backend.table
                ),
            ));
        }
        // DynamoDB has no table-status notification to await: poll,
        // backing off to 2 s.
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::ReplicaDescription;

    use super::*;

    /// DynamoDB Local has no global tables: the refusal is checked on
    /// descriptions as DynamoDB returns them.
    #[test]
    fn global_tables_are_refused() {
        let single = TableDescription::builder().table_name("t").build();
        check_not_global("t", &single).unwrap();
        let global = TableDescription::builder()
            .table_name("t")
            .replicas(
                ReplicaDescription::builder()
                    .region_name("eu-west-1")
                    .build(),
            )
            .build();
        let err = check_not_global("t", &global).unwrap_err();
        assert!(err.to_string().contains("global table"), "{err}");
        let legacy = TableDescription::builder()
            .table_name("t")
            .global_table_version("2017.11.29")
            .build();
        assert!(check_not_global("t", &legacy).is_err());
    }
}
