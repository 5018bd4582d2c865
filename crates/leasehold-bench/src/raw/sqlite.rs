//! The raw SQLite loop: rusqlite on its own connection, leasehold's
//! pragmas and statements.

use anyhow::anyhow;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::key::{unix_ms, RAW_KEY};
use crate::sys::mono_ns;

pub fn sqlite_cycle(conn: &mut Connection) -> anyhow::Result<()> {
    let lease_id = sqlite_acquire(conn)?;
    sqlite_release(conn, &lease_id)
}

/// The acquisition, committed with `synchronous=FULL` as leasehold does.
pub fn sqlite_acquire(conn: &mut Connection) -> anyhow::Result<String> {
    conn.pragma_update(None, "synchronous", "FULL")?;
    let acquired = sqlite_acquire_tx(conn);
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    acquired
}

fn sqlite_acquire_tx(conn: &mut Connection) -> anyhow::Result<String> {
    let lease_id = uuid::Uuid::new_v4().to_string();
    let now = mono_ns() as i64;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let row: Option<(i64, Option<String>, Option<i64>)> = tx
        .query_row(
            "SELECT fence, lease_id, expires_at_ns FROM leasehold_leases WHERE key = ?1",
            [RAW_KEY],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let fence = match row {
        Some((_, Some(_), Some(exp))) if exp > now => return Err(anyhow!("raw key held")),
        Some((f, _, _)) => f + 1,
        None => 1,
    };
    tx.execute(
        leasehold::sqlite::GRANT,
        params![
            RAW_KEY,
            fence,
            lease_id,
            "boot",
            now + 30_000_000_000,
            30_000,
            "host",
            std::process::id() as i64,
            Option::<String>::None,
            Option::<String>::None,
            unix_ms() as i64,
        ],
    )?;
    tx.commit()?;
    Ok(lease_id)
}

pub fn sqlite_release(conn: &Connection, lease_id: &str) -> anyhow::Result<()> {
    conn.execute(
        "UPDATE leasehold_leases SET lease_id = NULL, boot_id = NULL, expires_at_ns = NULL
         WHERE key = ?1 AND lease_id = ?2",
        params![RAW_KEY, lease_id],
    )?;
    Ok(())
}
