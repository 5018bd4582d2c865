//! The table's store epoch: creating the table if missing, and starting a
//! new epoch where the epoch row is missing or was written in another
//! table (see the crate docs).

use std::time::Duration;

use leasehold::backend::table_epoch::{first_read, no_epoch_row, FirstRead};
use leasehold::Error;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row, TxOpts, Value};

use crate::backend::{Fail, Outcome, RACE_TRIES};
use crate::error::NAME;
use crate::record::{self, col, EpochRow, PROVEN};
use crate::MysqlBackend;

impl MysqlBackend {
    /// Creates the table if missing and reads its epoch, starting a new one
    /// where the epoch row is missing or was written in another table (see
    /// the crate docs); with whether this call created the store (its
    /// insert of the epoch row was the one that won).
    pub(crate) async fn check_epoch(
        &self,
        op: &'static str,
    ) -> leasehold::Result<(EpochRow, bool)> {
        let mut tries = 0;
        loop {
            tries += 1;
            // A new epoch waits up to a second for its second to begin.
            let outcome = self
                .on_conn(op, Duration::from_secs(2), |conn| {
                    self.check_epoch_on(conn, op)
                })
                .await;
            match outcome {
                Ok((row, created)) => {
                    self.inner.store_max_ttl.set(row.max_ttl);
                    return Ok((row, created));
                }
                // Two processes creating the store at once: the loser's
                // transaction was rolled back; the next try finds the row.
                Err(f) if f.lost_race() && tries < RACE_TRIES => continue,
                Err(f) => return Err(f.into_error(op)),
            }
        }
    }

    async fn check_epoch_on(&self, mut conn: Conn, op: &'static str) -> Outcome<(EpochRow, bool)> {
        let sql = &self.inner.sql;
        let look = self.inner.creation == leasehold::Creation::Never;
        // Fast path: the epoch row is there and was written in this table.
        match conn
            .exec_first::<Row, _, _>(sql.read_epoch.as_str(), ())
            .await
        {
            Ok(row) => {
                let found = row.as_ref().and_then(record::epoch);
                match first_read(NAME, found, look)? {
                    FirstRead::Epoch(row) => return Ok((row, false)),
                    // A table another process is creating the store in, or
                    // whose creation was cut short, unless it holds leases.
                    FirstRead::NoRowWhileLooking => {
                        let leases = any_lease(&mut conn, &sql.any_lease).await?;
                        let row = no_epoch_row(&self.inner.table, leases, self.inner.max_ttl)?;
                        return Ok((row, false));
                    }
                    FirstRead::Settle => {}
                }
            }
            Err(e) if crate::error::is_missing_table(&e) && look => {
                return Err(Fail::Other(Error::no_store(format!(
                    "table {} does not exist",
                    self.inner.table
                ))))
            }
            Err(e) if crate::error::is_missing_table(&e) => {
                // Concurrent creators are serialised by the server's
                // metadata lock on the name: the first creates it, the
                // others find it (a note, not an error).
                conn.query_drop(sql.create_table.as_str()).await?;
            }
            Err(e) => return Err(Fail::Db(e)),
        }
        let max_ttl_ms = self.inner.max_ttl.as_millis() as u64;
        let mut tx = conn.start_transaction(TxOpts::default()).await?;
        // Locked first: a row another process wrote meanwhile is checked
        // before this one writes anything.
        let existing = tx
            .exec_first::<Row, _, _>(sql.lock_epoch.as_str(), ())
            .await?
            .as_ref()
            .and_then(record::epoch);
        if let Some(row) = &existing {
            row.check_protocol(NAME)?;
        }
        // Only the table created while opening is the operator's new store
        // (one created again later, dropped under us, is quarantined), and
        // only while it holds no lease rows.
        let proven = op == "open"
            && self.inner.creation == leasehold::Creation::NewProven
            && existing.is_none()
            && !any_lease(&mut tx, &sql.any_lease).await?;
        tx.exec_drop(
            sql.insert_epoch.as_str(),
            vec![
                Value::from(max_ttl_ms),
                Value::from(proven.then_some(PROVEN)),
            ],
        )
        .await?;
        let inserted = tx.affected_rows() == 1;
        let row = locked_epoch(&mut tx, sql.lock_epoch.as_str(), op).await?;
        if !inserted && row.same_table {
            // Someone else settled it first.
            tx.commit().await?;
            return Ok((row, false));
        }
        if inserted {
            tracing::info!(table = %self.inner.table, "new store epoch: the table or its epoch row is new");
        } else {
            // The epoch row was written in another table: this one was
            // restored from a dump (or copied). Its counters may be behind
            // tokens already issued: start a new epoch above them.
            tracing::warn!(table = %self.inner.table, old_epoch = row.epoch, "the table was restored or copied: starting a new store epoch");
            tx.exec_drop(sql.renew_epoch.as_str(), ()).await?;
        }
        // Every lease in the table belongs to data that was lost or restored.
        tx.exec_drop(sql.void_leases.as_str(), ()).await?;
        // Commit only once the epoch's second has begun on the server's
        // clock, so that a table created after this one (dropped and
        // re-created) gets a greater epoch.
        tx.exec_drop(sql.wait_epoch_second.as_str(), ()).await?;
        // The epoch's age counts only from now, when no lease of the lost
        // data can be renewed any more: the void above may have waited on
        // row locks, or taken seconds on a large table, while holders whose
        // rows it had not reached yet still renewed.
        tx.exec_drop(sql.stamp_epoch.as_str(), ()).await?;
        let row = locked_epoch(&mut tx, sql.lock_epoch.as_str(), op).await?;
        tx.commit().await?;
        // A new epoch row is a new store; one renewed is the same store's.
        Ok((row, inserted))
    }
}

/// Whether the table holds any lease row.
async fn any_lease(conn: &mut impl Queryable, sql: &str) -> Outcome<bool> {
    let row = conn.exec_first::<Row, _, _>(sql, ()).await?;
    Ok(row.and_then(|r| col::<i64>(&r, "any_lease")).unwrap_or(0) == 1)
}

/// The epoch row, locked for the rest of the transaction.
async fn locked_epoch(conn: &mut impl Queryable, sql: &str, op: &'static str) -> Outcome<EpochRow> {
    let row = conn
        .exec_first::<Row, _, _>(sql, ())
        .await?
        .as_ref()
        .and_then(record::epoch)
        .ok_or_else(|| Error::backend(NAME, op, true, "the epoch row vanished"))?;
    row.check_protocol(NAME)?;
    Ok(row)
}
