//! The stored row: its schema, and turning it into what the core reports.

use std::time::{Duration, UNIX_EPOCH};

pub(crate) use leasehold::backend::table_epoch::EpochRow;
use leasehold::{HolderInfo, Key, KeyInfo, Owner, RunRecord};
use mysql_async::prelude::FromValue;
use mysql_async::Row;

/// The key of the table's epoch row: not a valid leasehold key (`#` is not a
/// key character), so it never meets a lease.
pub(crate) const EPOCH_KEY: &str = "#epoch";

/// The epoch row's `lease_id` when its epoch is proven (created with
/// [`Creation::NewProven`](leasehold::Creation::NewProven)): settled at
/// once in every process. A new epoch started in the row clears it.
pub(crate) const PROVEN: &str = "#proven";

/// The epoch row's column that holds the store's protocol (see the crate
/// docs): `owner_pid`, which no build reads in the epoch row.
pub(crate) const PROTOCOL_COLUMN: &str = "owner_pid";

/// The server's clock now, in UTC whatever the session's time zone (a
/// `DATETIME(6)`, which MySQL never converts).
pub(crate) const NOW: &str = "UTC_TIMESTAMP(6)";

/// Microseconds since the Unix epoch of a `DATETIME(6)` in UTC, as SQL.
pub(crate) fn unix_us(expr: &str) -> String {
    format!("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {expr})")
}

/// The table, created if missing. See the crate docs for what each column
/// holds (in lease rows and in the epoch row).
pub(crate) fn create_table(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (
            k            VARBINARY(256) NOT NULL PRIMARY KEY,
            fence        BIGINT UNSIGNED NOT NULL,
            epoch        BIGINT UNSIGNED NOT NULL,
            lease_id     VARBINARY(255) NULL,
            expires_at   DATETIME(6) NULL,
            ttl_ms       BIGINT NULL,
            owner_host   TEXT NULL,
            owner_pid    BIGINT NULL,
            owner_label  TEXT NULL,
            data         MEDIUMTEXT NULL,
            acquired_at  DATETIME(6) NULL,
            table_created BIGINT NULL,
            last_success MEDIUMTEXT NULL,
            last_run     MEDIUMTEXT NULL,
            last_run_token BIGINT UNSIGNED NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )
}

/// The table's creation time on the server (whole seconds since the Unix
/// epoch) as SQL: what the epoch row records in `table_created`, so that a
/// table re-created from a dump (a later creation time) is told apart
/// from the one the row was written in. `db` and `name` are the table's
/// schema (NULL: the connection's database) and name, as SQL literals.
pub(crate) fn table_created(db: &str, name: &str) -> String {
    format!(
        "(SELECT UNIX_TIMESTAMP(CREATE_TIME) FROM information_schema.TABLES
          WHERE TABLE_SCHEMA = COALESCE({db}, DATABASE()) AND TABLE_NAME = {name})"
    )
}

/// Reads column `name` of `row`: `None` when it is NULL or missing.
pub(crate) fn col<T: FromValue>(row: &Row, name: &str) -> Option<T> {
    row.get_opt::<Option<T>, _>(name)
        .and_then(|v| v.ok())
        .flatten()
}

/// The key's run records, from a row with `last_success` and `last_run`.
pub(crate) fn key_info(key: Key, row: &Row) -> leasehold::Result<KeyInfo> {
    let run = |c: &str| {
        col::<String>(row, c)
            .map(|t| RunRecord::from_stored(crate::error::NAME, &t))
            .transpose()
    };
    Ok(
        KeyInfo::new(key, col::<u64>(row, "fence").unwrap_or(0), holder(row))
            .with_runs(run("last_success")?, run("last_run")?),
    )
}

/// The columns that describe a holder, as [`holder`] reads them.
pub(crate) fn holder_columns() -> String {
    format!(
        "fence, owner_host, owner_pid, owner_label, data, last_success, last_run,
         {acquired} AS acquired_us,
         TIMESTAMPDIFF(MICROSECOND, {NOW}, expires_at) AS left_us,
         ttl_ms, (lease_id IS NOT NULL AND expires_at > {NOW}) AS live",
        acquired = unix_us("acquired_at"),
    )
}

/// The holder a row (with [`holder_columns`]) describes, if its lease is
/// live by the server's clock.
pub(crate) fn holder(row: &Row) -> Option<HolderInfo> {
    if col::<i64>(row, "live").unwrap_or(0) == 0 {
        return None;
    }
    let owner = Owner {
        host: col::<String>(row, "owner_host").unwrap_or_default(),
        pid: col::<i64>(row, "owner_pid").unwrap_or_default().max(0) as u32,
        label: col::<String>(row, "owner_label"),
    };
    let us = |v: i64| Duration::from_micros(v.max(0) as u64);
    Some(
        HolderInfo::new(owner, col::<u64>(row, "fence").unwrap_or_default())
            .with_data(col::<String>(row, "data"))
            .with_acquired_at(col::<i64>(row, "acquired_us").map(|v| UNIX_EPOCH + us(v)))
            .with_expires_in(col::<i64>(row, "left_us").map(us))
            .with_ttl(col::<i64>(row, "ttl_ms").map(|ms| Duration::from_millis(ms.max(0) as u64))),
    )
}

/// The epoch row's columns, as [`epoch`] reads them; `created` is
/// [`table_created`].
pub(crate) fn epoch_columns(created: &str) -> String {
    format!(
        "epoch AS m_epoch, ttl_ms AS m_ttl_ms,
         (table_created <=> {created}) AS m_same_table,
         TIMESTAMPDIFF(MICROSECOND, acquired_at, {NOW}) AS m_age_us,
         (lease_id <=> '{PROVEN}') AS m_proven,
         {PROTOCOL_COLUMN} AS m_protocol"
    )
}

/// The epoch row in a row with [`epoch_columns`].
pub(crate) fn epoch(row: &Row) -> Option<EpochRow> {
    let epoch = col::<u64>(row, "m_epoch")?;
    Some(EpochRow {
        epoch,
        max_ttl: Duration::from_millis(
            col::<i64>(row, "m_ttl_ms").unwrap_or_default().max(0) as u64
        ),
        same_table: col::<i64>(row, "m_same_table").unwrap_or(0) == 1,
        age: Duration::from_micros(col::<i64>(row, "m_age_us").unwrap_or_default().max(0) as u64),
        proven: col::<i64>(row, "m_proven").unwrap_or(0) == 1,
        protocol: col::<i64>(row, "m_protocol"),
    })
}
