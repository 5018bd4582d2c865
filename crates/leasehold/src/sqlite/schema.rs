//! The store file's tables: made, checked, and brought up to date.

use super::*;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS leasehold_leases (
    key            TEXT PRIMARY KEY NOT NULL,
    fence          INTEGER NOT NULL,
    lease_id       TEXT,
    boot_id        TEXT,
    expires_at_ns  INTEGER,
    ttl_ms         INTEGER,
    owner_host     TEXT,
    owner_pid      INTEGER,
    owner_label    TEXT,
    data           TEXT,
    acquired_at_ms INTEGER,
    last_success   TEXT,
    last_run       TEXT,
    last_run_token INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leasehold_store (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    epoch         INTEGER NOT NULL,
    max_ttl_ms    INTEGER NOT NULL,
    file_dev      INTEGER NOT NULL,
    file_ino      INTEGER NOT NULL,
    boot_id       TEXT NOT NULL,
    settled_at_ns INTEGER NOT NULL,
    protocol      INTEGER
);
";

/// Whether the file has the table `name` (`leasehold_leases`: looking
/// needs no more).
pub(super) fn has_table(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1)",
        [name],
        |r| r.get(0),
    )
}

/// Makes the tables a file lacks, in one write transaction: a look never
/// finds one table without the other. (Run as a plain batch, each
/// `CREATE TABLE` committed on its own, and a look between the two failed
/// with "no such table".)
pub(super) fn create_tables(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(SCHEMA)?;
    tx.commit()
}

/// Whether the lease table has any row (a key ever granted).
pub(super) fn has_lease_rows(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row("SELECT EXISTS (SELECT 1 FROM leasehold_leases)", [], |r| {
        r.get(0)
    })
}

/// The file's tables that are not leasehold's (nor SQLite's own), by name.
pub(super) fn foreign_tables(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut st = conn.prepare(
        "SELECT name FROM sqlite_schema
         WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
           AND name NOT IN ('leasehold_leases', 'leasehold_store')
         ORDER BY name",
    )?;
    let names = st.query_map([], |r| r.get(0))?.collect();
    names
}

/// Whether the file has both tables, with the run record columns and the
/// protocol column.
pub(super) fn has_schema(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT (SELECT COUNT(*) FROM sqlite_schema
                 WHERE type = 'table' AND name IN ('leasehold_leases', 'leasehold_store')) = 2
            AND EXISTS (SELECT 1 FROM pragma_table_info('leasehold_leases')
                        WHERE name = 'last_run_token')
            AND EXISTS (SELECT 1 FROM pragma_table_info('leasehold_store')
                        WHERE name = 'protocol')",
        [],
        |r| r.get(0),
    )
}

/// Adds the run-record columns to a table made before they existed.
pub(super) fn add_run_columns(conn: &mut Connection) -> rusqlite::Result<()> {
    add_columns(
        conn,
        "leasehold_leases",
        "last_run_token",
        "ALTER TABLE leasehold_leases ADD COLUMN last_success TEXT;
         ALTER TABLE leasehold_leases ADD COLUMN last_run TEXT;
         ALTER TABLE leasehold_leases ADD COLUMN last_run_token INTEGER;",
    )
}

/// Runs `alter` unless `table` has `column` (its last column added), under
/// the write lock, so two openers cannot both add them.
fn add_columns(
    conn: &mut Connection,
    table: &str,
    column: &str,
    alter: &str,
) -> rusqlite::Result<()> {
    let has = |conn: &Connection| {
        conn.query_row(
            "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
            [table, column],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n > 0)
    };
    if has(conn)? {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if !has(&tx)? {
        tx.execute_batch(alter)?;
    }
    tx.commit()
}

/// The protocol the file's epoch row names, read before anything is
/// written to the file: `None` where there is no row, no store table or no
/// protocol column (a file of a build from before protocol versions:
/// protocol 1).
pub(super) fn stored_protocol(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    let read = conn
        .query_row(
            "SELECT protocol FROM leasehold_store WHERE id = 1",
            [],
            |r| r.get(0),
        )
        .optional();
    match read {
        Err(e) if e.to_string().contains("no such") => Ok(None),
        other => other.map(Option::flatten),
    }
}

/// Adds the protocol column to a store table made before it existed. Old
/// builds name their columns, so they read and write such a table as
/// before; a row they write has no protocol: protocol 1, theirs.
pub(super) fn add_protocol_column(conn: &mut Connection) -> rusqlite::Result<()> {
    add_columns(
        conn,
        "leasehold_store",
        "protocol",
        "ALTER TABLE leasehold_store ADD COLUMN protocol INTEGER;",
    )
}
