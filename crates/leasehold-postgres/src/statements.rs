//! The SQL of every operation (see the crate docs for the protocol), with
//! the table's name in it.

use crate::record::{self, EPOCH_KEY, HOLDER_COLUMNS};

/// The first key of the transaction-scoped advisory lock that serialises
/// creating a table (`pg_advisory_xact_lock(int, int)`; the second key is
/// the hash of the table's schema-qualified name): "lh" in ASCII. The
/// two-key form's lock space is apart from the one-key form's.
const CREATION_LOCK_CLASS: i32 = 0x6c68;

/// An SQL expression for the table's schema-qualified name, as `CREATE
/// TABLE` resolves it (an unqualified name goes to the current schema), so
/// that `leases` and `public.leases` take the same creation lock.
fn qualified_name(t: &str) -> String {
    match t.split_once('.') {
        Some((schema, table)) => format!("'{schema}.{table}'"),
        None => format!("current_schema() || '.{t}'"),
    }
}

/// The SQL of every operation, with the table's name in it.
pub(crate) struct Statements {
    pub(crate) create_table: String,
    pub(crate) is_unlogged: String,
    pub(crate) read_epoch: String,
    pub(crate) any_lease: String,
    pub(crate) insert_epoch: String,
    pub(crate) lock_epoch: String,
    pub(crate) renew_epoch: String,
    pub(crate) void_leases: String,
    pub(crate) wait_epoch_second: String,
    pub(crate) stamp_epoch: String,
    pub(crate) acquire: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) inspect: String,
    pub(crate) list: String,
    pub(crate) break_lease: String,
    pub(crate) record_run: String,
}

impl Statements {
    /// With `channel`, releases and breaks NOTIFY it with the key; with
    /// `unlogged`, a table created is UNLOGGED.
    pub(crate) fn new(t: &str, channel: Option<&str>, unlogged: bool) -> Self {
        let notify = match channel {
            Some(ch) => format!(
                ", (SELECT count(*) FROM (SELECT pg_notify('{ch}', key) FROM u) AS n) AS notified"
            ),
            None => String::new(),
        };
        let origin = leasehold::backend::EPOCH_ORIGIN_UNIX_SECS;
        let epoch_cols = record::epoch_columns(t);
        let this_table = format!("'{t}'::regclass::oid");
        let this_cluster = record::THIS_CLUSTER;
        let same_table = record::same_table(t, "");
        let same_table_m = record::same_table(t, "m.");
        let protocol_column = record::PROTOCOL_COLUMN;
        let protocol = leasehold::backend::protocol::PROTOCOL;
        // The epoch of a store begun now: the server clock's next second.
        let next_second = format!(
            "greatest(1, floor(extract(epoch FROM clock_timestamp()))::bigint + 1 - {origin})"
        );
        Statements {
            create_table: format!(
                "SELECT pg_advisory_xact_lock({CREATION_LOCK_CLASS}, hashtext({qualified}));
                 {}",
                record::create_table(t, unlogged),
                qualified = qualified_name(t),
            ),
            is_unlogged: format!(
                "SELECT relpersistence = 'u' AS unlogged FROM pg_class WHERE oid = '{t}'::regclass"
            ),
            read_epoch: format!("SELECT {epoch_cols} FROM {t} WHERE key = '{EPOCH_KEY}'"),
            any_lease: format!("SELECT EXISTS (SELECT 1 FROM {t} WHERE key <> '{EPOCH_KEY}')"),
            // $1 max TTL ms, $2 whether the creator states that no earlier
            // store existed: then a table with no lease rows gets a proven
            // epoch ([`PROVEN`](record::PROVEN) in the row's lease_id).
            insert_epoch: format!(
                "INSERT INTO {t} (key, fence, epoch, ttl_ms, acquired_at, table_oid, data, lease_id, {protocol_column})
                 VALUES ('{EPOCH_KEY}', 0, {next_second}, $1, clock_timestamp(), {this_table},
                         {this_cluster},
                         CASE WHEN $2 AND NOT EXISTS (SELECT 1 FROM {t} WHERE key <> '{EPOCH_KEY}')
                              THEN '{proven}' END, {protocol})
                 ON CONFLICT (key) DO NOTHING RETURNING epoch",
                proven = record::PROVEN,
            ),
            lock_epoch: format!(
                "SELECT {epoch_cols} FROM {t} WHERE key = '{EPOCH_KEY}' FOR UPDATE"
            ),
            renew_epoch: format!(
                "UPDATE {t} SET epoch = greatest(epoch + 1, {next_second}),
                   acquired_at = clock_timestamp(), table_oid = {this_table},
                   data = {this_cluster}, lease_id = NULL, {protocol_column} = {protocol}
                 WHERE key = '{EPOCH_KEY}'"
            ),
            void_leases: format!(
                "UPDATE {t} SET lease_id = NULL, expires_at = NULL
                 WHERE key <> '{EPOCH_KEY}' AND lease_id IS NOT NULL"
            ),
            wait_epoch_second: format!(
                "SELECT pg_sleep(least(1.1, greatest(0,
                   (SELECT epoch FROM {t} WHERE key = '{EPOCH_KEY}') + {origin}
                   - extract(epoch FROM clock_timestamp())::float8)))"
            ),
            // The epoch's age counts from here: the last statement before
            // the commit, after every lease was voided (see the crate docs).
            stamp_epoch: format!(
                "UPDATE {t} SET acquired_at = clock_timestamp() WHERE key = '{EPOCH_KEY}'"
            ),
            // $1 key, $2 lease id, $3 ttl ms, $4 epoch, $5 host, $6 pid,
            // $7 label, $8 data.
            acquire: format!(
                "WITH m AS (
                    SELECT {epoch_cols} FROM {t} WHERE key = '{EPOCH_KEY}' FOR SHARE
                 ), g AS (
                    INSERT INTO {t} AS r (key, fence, epoch, lease_id, expires_at, ttl_ms,
                                          owner_host, owner_pid, owner_label, data, acquired_at)
                    SELECT $1, ($4 << 22) + 1, $4, $2,
                           clock_timestamp() + $3::float8 * interval '1 millisecond', $3,
                           $5, $6, $7, $8, clock_timestamp()
                    FROM m WHERE m.m_epoch = $4 AND m.m_same_table AND $3 <= m.m_ttl_ms
                      AND m.m_protocol_known
                    ON CONFLICT (key) DO UPDATE SET
                        fence = CASE WHEN r.lease_id = excluded.lease_id AND r.epoch = excluded.epoch
                                     THEN r.fence ELSE greatest(r.fence, excluded.epoch << 22) + 1 END,
                        acquired_at = CASE WHEN r.lease_id = excluded.lease_id AND r.epoch = excluded.epoch
                                     THEN r.acquired_at ELSE excluded.acquired_at END,
                        epoch = excluded.epoch, lease_id = excluded.lease_id,
                        expires_at = excluded.expires_at, ttl_ms = excluded.ttl_ms,
                        owner_host = excluded.owner_host, owner_pid = excluded.owner_pid,
                        owner_label = excluded.owner_label, data = excluded.data
                    WHERE r.lease_id IS NULL OR r.expires_at <= clock_timestamp()
                       OR r.lease_id = excluded.lease_id
                    RETURNING r.fence
                 )
                 SELECT (SELECT fence FROM g) AS granted, m.*, h.*
                 FROM (SELECT 1) AS one
                 LEFT JOIN m ON true
                 LEFT JOIN (SELECT {HOLDER_COLUMNS} FROM {t} WHERE key = $1) AS h ON true"
            ),
            // $1 key, $2 lease id, $3 epoch, $4 ttl ms.
            renew: format!(
                "WITH u AS (
                    UPDATE {t} SET expires_at = clock_timestamp() + $4::float8 * interval '1 millisecond'
                    WHERE key = $1 AND lease_id = $2 AND epoch = $3 AND expires_at > clock_timestamp()
                      AND EXISTS (SELECT 1 FROM {t} AS m WHERE m.key = '{EPOCH_KEY}'
                                  AND m.epoch = $3 AND {same_table_m})
                    RETURNING 1
                 )
                 SELECT EXISTS (SELECT 1 FROM u) AS done,
                   (SELECT lease_id FROM {t} WHERE key = $1) AS lease_id,
                   (SELECT epoch = $3 AND {same_table} FROM {t} WHERE key = '{EPOCH_KEY}') AS same_epoch"
            ),
            // $1 key, $2 lease id. Committed asynchronously (see the crate
            // docs: a lost release only holds the key to its expiry); the
            // setting is the statement's transaction's, so it holds through
            // a transaction-mode pooler too.
            release: format!(
                "WITH u AS (
                    UPDATE {t} SET lease_id = NULL, expires_at = NULL
                    WHERE key = $1 AND lease_id = $2
                    RETURNING key
                 )
                 SELECT EXISTS (SELECT 1 FROM u) AS done,
                   (SELECT lease_id FROM {t} WHERE key = $1) AS lease_id,
                   NULL::bool AS same_epoch {notify},
                   set_config('synchronous_commit', 'off', true) AS commit_mode"
            ),
            inspect: format!("SELECT key, {HOLDER_COLUMNS} FROM {t} WHERE key = $1"),
            list: format!(
                "SELECT key, {HOLDER_COLUMNS} FROM {t}
                 WHERE starts_with(key, $1) AND key <> '{EPOCH_KEY}'
                 ORDER BY key COLLATE \"C\""
            ),
            // $1 key, $2 lease id, $3 the run (JSON), $4 its fencing token,
            // $5 whether it succeeded. Under our lease: last run, and last
            // success if it succeeded. Not under it: never the success; a
            // failure only over an earlier run's. The end is stamped with
            // the server's clock.
            record_run: format!(
                "WITH r AS (
                    SELECT jsonb_set($3::jsonb, '{{ended_at_unix_ms}}',
                      to_jsonb(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint))::text AS run
                 ), u AS (
                    UPDATE {t} SET
                      last_success = CASE WHEN lease_id = $2 AND $5 THEN r.run ELSE last_success END,
                      last_run = r.run, last_run_token = $4
                    FROM r
                    WHERE key = $1 AND (lease_id = $2
                      OR (NOT $5 AND (last_run_token IS NULL OR last_run_token < $4)))
                    RETURNING lease_id = $2 AS ours
                 )
                 SELECT coalesce((SELECT ours FROM u), false) AS done,
                   (SELECT lease_id FROM {t} WHERE key = $1) AS lease_id,
                   NULL::bool AS same_epoch"
            ),
            break_lease: format!(
                "WITH u AS (
                    UPDATE {t} AS r SET lease_id = NULL, expires_at = NULL
                    FROM (SELECT key, {HOLDER_COLUMNS} FROM {t} WHERE key = $1 FOR UPDATE) AS old
                    WHERE r.key = old.key AND r.lease_id IS NOT NULL
                    RETURNING old.*
                 )
                 SELECT u.* {notify} FROM u"
            ),
        }
    }
}
