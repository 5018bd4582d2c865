//! The stored row: its schema, and turning it into what the core reports.

use std::time::{Duration, UNIX_EPOCH};

use leasehold::backend::protocol::PROTOCOL;
pub(crate) use leasehold::backend::table_epoch::EpochRow;

use leasehold::{HolderInfo, Key, KeyInfo, Owner, RunRecord};
use tokio_postgres::Row;

/// The key of the table's epoch row: not a valid leasehold key (`#` is not a
/// key character), so it never meets a lease.
pub(crate) const EPOCH_KEY: &str = "#epoch";

/// The epoch row's `lease_id` when its epoch is proven (created with
/// [`Creation::NewProven`](leasehold::Creation::NewProven)): settled at
/// once in every process. A new epoch started in the row clears it.
pub(crate) const PROVEN: &str = "#proven";

/// The table, created if missing. See the crate docs for what each column
/// holds (in lease rows and in the epoch row).
pub(crate) fn create_table(table: &str, unlogged: bool) -> String {
    let unlogged = if unlogged { "UNLOGGED " } else { "" };
    format!(
        "CREATE {unlogged}TABLE IF NOT EXISTS {table} (
            key         text PRIMARY KEY,
            fence       bigint NOT NULL,
            epoch       bigint NOT NULL,
            lease_id    text,
            expires_at  timestamptz,
            ttl_ms      bigint,
            owner_host  text,
            owner_pid   bigint,
            owner_label text,
            data        text,
            acquired_at timestamptz,
            table_oid   oid,
            last_success text,
            last_run    text,
            last_run_token bigint
        )"
    )
}

/// The key's run records, from a row with `last_success` and `last_run`.
pub(crate) fn key_info(key: Key, row: &Row) -> leasehold::Result<KeyInfo> {
    let run = |col: &str| {
        row.get::<_, Option<String>>(col)
            .map(|t| RunRecord::from_stored(crate::error::NAME, &t))
            .transpose()
    };
    Ok(
        KeyInfo::new(key, row.get::<_, i64>("fence") as u64, holder(row))
            .with_runs(run("last_success")?, run("last_run")?),
    )
}

/// The columns that describe a holder, as `holder` reads them.
pub(crate) const HOLDER_COLUMNS: &str = "fence, owner_host, owner_pid, owner_label, data,
    last_success, last_run,
    extract(epoch FROM acquired_at)::float8 AS acquired_s,
    extract(epoch FROM expires_at - clock_timestamp())::float8 AS left_s,
    ttl_ms, (lease_id IS NOT NULL AND expires_at > clock_timestamp()) AS live";

/// The holder a row (with [`HOLDER_COLUMNS`]) describes, if its lease is
/// live by the server's clock.
pub(crate) fn holder(row: &Row) -> Option<HolderInfo> {
    if !row.get::<_, Option<bool>>("live").unwrap_or(false) {
        return None;
    }
    let owner = Owner {
        host: row
            .get::<_, Option<String>>("owner_host")
            .unwrap_or_default(),
        pid: row.get::<_, Option<i64>>("owner_pid").unwrap_or_default() as u32,
        label: row.get("owner_label"),
    };
    let fence = row.get::<_, Option<i64>>("fence").unwrap_or_default() as u64;
    let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
    Some(
        HolderInfo::new(owner, fence)
            .with_data(row.get("data"))
            .with_acquired_at(
                row.get::<_, Option<f64>>("acquired_s")
                    .map(|s| UNIX_EPOCH + secs(s)),
            )
            .with_expires_in(row.get::<_, Option<f64>>("left_s").map(secs))
            .with_ttl(
                row.get::<_, Option<i64>>("ttl_ms")
                    .map(|ms| Duration::from_millis(ms.max(0) as u64)),
            ),
    )
}

/// The identity of the table an epoch row was written in, as SQL: the
/// table's OID (`table_oid`) and its cluster's system identifier (the
/// epoch row's `data`; `initdb` draws a new one for every cluster, which a
/// dump or a restore into another cluster does not carry over, and which
/// a physical standby shares). A restore into a new cluster can give the
/// table the same OID (a fresh cluster numbers its first tables alike):
/// the system identifier tells them apart.
pub(crate) fn same_table(table: &str, row: &str) -> String {
    format!(
        "({row}table_oid = '{table}'::regclass::oid
          AND {row}data IS NOT DISTINCT FROM {THIS_CLUSTER})"
    )
}

/// The system identifier of the cluster a statement runs on, as text (the
/// epoch row keeps it in `data`).
pub(crate) const THIS_CLUSTER: &str = "(SELECT system_identifier::text FROM pg_control_system())";

/// The epoch row's column that holds the store's protocol (see the crate
/// docs): `owner_pid`, which no build reads in the epoch row (the epoch row
/// keeps its other facts in the lease columns too: `data`, `lease_id`).
/// NULL (a row of a build from before protocol versions): protocol 1.
pub(crate) const PROTOCOL_COLUMN: &str = "owner_pid";

/// The epoch row's columns, as [`epoch`] reads them.
pub(crate) fn epoch_columns(table: &str) -> String {
    format!(
        "epoch AS m_epoch, ttl_ms AS m_ttl_ms,
         {} AS m_same_table,
         extract(epoch FROM clock_timestamp() - acquired_at)::float8 AS m_age_s,
         (lease_id IS NOT DISTINCT FROM '{PROVEN}') AS m_proven,
         {PROTOCOL_COLUMN} AS m_protocol,
         coalesce({PROTOCOL_COLUMN}, 1) BETWEEN 1 AND {PROTOCOL} AS m_protocol_known",
        same_table(table, "")
    )
}

/// The epoch row in a row with [`epoch_columns`], or `None` if the row (a
/// left join) has none.
pub(crate) fn epoch(row: &Row) -> Option<EpochRow> {
    let epoch = row.get::<_, Option<i64>>("m_epoch")?;
    Some(EpochRow {
        epoch: epoch.max(0) as u64,
        max_ttl: Duration::from_millis(
            row.get::<_, Option<i64>>("m_ttl_ms")
                .unwrap_or_default()
                .max(0) as u64,
        ),
        same_table: row.get::<_, Option<bool>>("m_same_table").unwrap_or(false),
        age: Duration::from_secs_f64(
            row.get::<_, Option<f64>>("m_age_s")
                .unwrap_or_default()
                .max(0.0),
        ),
        proven: row.get::<_, Option<bool>>("m_proven").unwrap_or(false),
        protocol: row.get::<_, Option<i64>>("m_protocol"),
    })
}
