//! The SQL of every operation (see the crate docs for the protocol), with
//! the table's name in it. Parameters are `?`, in the order each
//! statement's comment gives.

use crate::record::{self, EPOCH_KEY, NOW, PROTOCOL_COLUMN};

/// The SQL of every operation, with the table's name in it.
pub(crate) struct Statements {
    pub(crate) create_table: String,
    pub(crate) read_epoch: String,
    pub(crate) lock_epoch: String,
    pub(crate) share_epoch: String,
    pub(crate) any_lease: String,
    pub(crate) insert_epoch: String,
    pub(crate) renew_epoch: String,
    pub(crate) void_leases: String,
    pub(crate) wait_epoch_second: String,
    pub(crate) stamp_epoch: String,
    pub(crate) lock_key: String,
    pub(crate) insert_grant: String,
    pub(crate) update_grant: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) why_not: String,
    pub(crate) record_run_ours: String,
    pub(crate) record_run_late: String,
    pub(crate) inspect: String,
    pub(crate) list: String,
    pub(crate) lock_for_break: String,
    pub(crate) break_lease: String,
}

/// `name` (lowercase letters, digits, `_`, optionally `db.name`: checked
/// by the builder) quoted for SQL, and its schema and name as SQL
/// literals for `information_schema` (NULL: the connection's database).
fn quoted(name: &str) -> (String, String, String) {
    match name.split_once('.') {
        Some((db, t)) => (format!("`{db}`.`{t}`"), format!("'{db}'"), format!("'{t}'")),
        None => (format!("`{name}`"), "NULL".into(), format!("'{name}'")),
    }
}

impl Statements {
    pub(crate) fn new(table: &str) -> Self {
        let (t, db, name) = quoted(table);
        let created = record::table_created(&db, &name);
        let epoch_cols = record::epoch_columns(&created);
        let holder_cols = record::holder_columns();
        let protocol = leasehold::backend::protocol::PROTOCOL;
        // Seconds since the epoch origin (2024-01-01T00:00:00Z) on the
        // server's clock.
        let since_origin = "TIMESTAMPDIFF(MICROSECOND, '2024-01-01 00:00:00', UTC_TIMESTAMP(6))";
        debug_assert_eq!(leasehold::backend::EPOCH_ORIGIN_UNIX_SECS, 1_704_067_200);
        // The epoch of a store begun now: the server clock's next second.
        let next_second = format!("GREATEST(1, FLOOR({since_origin} / 1000000) + 1)");
        let ended_at = format!("{} DIV 1000", record::unix_us(NOW));
        Statements {
            create_table: record::create_table(&t),
            read_epoch: format!("SELECT {epoch_cols} FROM {t} WHERE k = '{EPOCH_KEY}'"),
            lock_epoch: format!("SELECT {epoch_cols} FROM {t} WHERE k = '{EPOCH_KEY}' FOR UPDATE"),
            share_epoch: format!(
                "SELECT {epoch_cols} FROM {t} WHERE k = '{EPOCH_KEY}' LOCK IN SHARE MODE"
            ),
            any_lease: format!(
                "SELECT EXISTS (SELECT 1 FROM {t} WHERE k <> '{EPOCH_KEY}') AS any_lease"
            ),
            // ? max TTL ms, ? the epoch row's lease_id (PROVEN or NULL).
            insert_epoch: format!(
                "INSERT IGNORE INTO {t} (k, fence, epoch, ttl_ms, acquired_at, table_created, lease_id, {PROTOCOL_COLUMN})
                 VALUES ('{EPOCH_KEY}', 0, {next_second}, ?, {NOW}, {created}, ?, {protocol})"
            ),
            renew_epoch: format!(
                "UPDATE {t} SET epoch = GREATEST(epoch + 1, {next_second}),
                   acquired_at = {NOW}, table_created = {created}, lease_id = NULL,
                   {PROTOCOL_COLUMN} = {protocol}
                 WHERE k = '{EPOCH_KEY}'"
            ),
            void_leases: format!(
                "UPDATE {t} SET lease_id = NULL, expires_at = NULL
                 WHERE k <> '{EPOCH_KEY}' AND lease_id IS NOT NULL"
            ),
            // Sleeps until the epoch row's second has begun (at most 1.1 s).
            wait_epoch_second: format!(
                "SELECT SLEEP(LEAST(1.1, GREATEST(0,
                   (SELECT epoch FROM {t} WHERE k = '{EPOCH_KEY}') - {since_origin} / 1000000))) AS slept"
            ),
            // The epoch's age counts from here: the last statement before
            // the commit, after every lease was voided (see the crate docs).
            stamp_epoch: format!("UPDATE {t} SET acquired_at = {NOW} WHERE k = '{EPOCH_KEY}'"),
            // ? key.
            lock_key: format!(
                "SELECT fence, epoch, lease_id, (lease_id IS NULL OR expires_at <= {NOW}) AS free,
                   {holder_cols}
                 FROM {t} WHERE k = ? FOR UPDATE"
            ),
            // ? key, fence, epoch, lease id, TTL µs, TTL ms, host, pid,
            // label, data.
            insert_grant: format!(
                "INSERT INTO {t} (k, fence, epoch, lease_id, expires_at, ttl_ms,
                                  owner_host, owner_pid, owner_label, data, acquired_at)
                 VALUES (?, ?, ?, ?, DATE_ADD({NOW}, INTERVAL ? MICROSECOND), ?, ?, ?, ?, ?, {NOW})"
            ),
            // ? fence, epoch, lease id, TTL µs, TTL ms, host, pid, label,
            // data, whether to keep acquired_at (our own lease again), key.
            update_grant: format!(
                "UPDATE {t} SET fence = ?, epoch = ?, lease_id = ?,
                   expires_at = DATE_ADD({NOW}, INTERVAL ? MICROSECOND), ttl_ms = ?,
                   owner_host = ?, owner_pid = ?, owner_label = ?, data = ?,
                   acquired_at = IF(?, acquired_at, {NOW})
                 WHERE k = ?"
            ),
            // ? TTL µs, key, lease id, epoch.
            renew: format!(
                "UPDATE {t} SET expires_at = DATE_ADD({NOW}, INTERVAL ? MICROSECOND)
                 WHERE k = ? AND lease_id = ? AND epoch = ? AND expires_at > {NOW}"
            ),
            // ? key, lease id.
            release: format!(
                "UPDATE {t} SET lease_id = NULL, expires_at = NULL WHERE k = ? AND lease_id = ?"
            ),
            // ? key: why a statement on a lease changed nothing.
            why_not: format!(
                "SELECT (SELECT lease_id FROM {t} WHERE k = ?) AS lease_id,
                   (SELECT epoch FROM {t} WHERE k = '{EPOCH_KEY}') AS store_epoch"
            ),
            // ? the run (JSON) twice, whether it succeeded, its token, key,
            // lease id. Under our lease: last run, and last success if it
            // succeeded; the end stamped with the server's clock.
            record_run_ours: format!(
                "UPDATE {t} SET
                   last_success = IF(?, JSON_SET(?, '$.ended_at_unix_ms', {ended_at}), last_success),
                   last_run = JSON_SET(?, '$.ended_at_unix_ms', {ended_at}), last_run_token = ?
                 WHERE k = ? AND lease_id = ?"
            ),
            // ? the run (JSON), its token, key, its token again. Not under
            // our lease: a failure, only over an earlier run.
            record_run_late: format!(
                "UPDATE {t} SET last_run = JSON_SET(?, '$.ended_at_unix_ms', {ended_at}), last_run_token = ?
                 WHERE k = ? AND (last_run_token IS NULL OR last_run_token < ?)"
            ),
            // ? key.
            inspect: format!("SELECT {holder_cols} FROM {t} WHERE k = ?"),
            // ? the prefix's length in bytes, the prefix.
            list: format!(
                "SELECT k, {holder_cols} FROM {t}
                 WHERE k <> '{EPOCH_KEY}' AND LEFT(k, ?) = ? ORDER BY k"
            ),
            // ? key.
            lock_for_break: format!(
                "SELECT lease_id, {holder_cols} FROM {t} WHERE k = ? FOR UPDATE"
            ),
            // ? key.
            break_lease: format!("UPDATE {t} SET lease_id = NULL, expires_at = NULL WHERE k = ?"),
        }
    }
}
