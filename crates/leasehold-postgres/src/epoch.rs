//! The table's store epoch: creating the table if missing, and starting a
//! new epoch where the epoch row is missing or was written in another
//! table (see the crate docs).

use std::time::Duration;

use deadpool_postgres::Object;
use leasehold::backend::table_epoch::{first_read, no_epoch_row, FirstRead};
use leasehold::{Error, Result};
use tokio::time::{timeout_at, Instant};
use tokio_postgres::types::Type;

use crate::error::{self, NAME};
use crate::record::{self, EpochRow};
use crate::PostgresBackend;

impl PostgresBackend {
    /// Creates the table if missing and reads its epoch, starting a new one
    /// where the epoch row is missing or was written in another table (see
    /// the crate docs); with whether this call created the store (its
    /// insert of the epoch row was the one that won).
    pub(crate) async fn check_epoch(&self, op: &'static str) -> Result<(EpochRow, bool)> {
        let deadline = Instant::now() + self.inner.request_timeout + Duration::from_secs(2);
        let mut client = self.client(op, deadline).await?;
        let result = timeout_at(deadline, self.check_epoch_on(&mut client, op)).await;
        match result {
            Ok(Ok((row, created))) => {
                self.inner.store_max_ttl.set(row.max_ttl);
                Ok((row, created))
            }
            Ok(Err(e)) => Err(e),
            Err(_) => {
                drop(Object::take(client));
                Err(error::timed_out(op, self.inner.request_timeout))
            }
        }
    }

    async fn check_epoch_on(
        &self,
        client: &mut Object,
        op: &'static str,
    ) -> Result<(EpochRow, bool)> {
        let sql = &self.inner.sql;
        let db = |e| error::db(op, e);
        let look = self.inner.creation == leasehold::Creation::Never;
        // Fast path: the epoch row is there and was written in this table.
        match client.query_typed(&sql.read_epoch, &[]).await {
            Ok(rows) => {
                let found = rows.first().and_then(record::epoch);
                match first_read(NAME, found, look)? {
                    FirstRead::Epoch(row) => return Ok((row, false)),
                    // A table another process is creating the store in (its
                    // table is committed before its epoch row), or whose
                    // creation was cut short, unless it holds leases.
                    FirstRead::NoRowWhileLooking => {
                        let leases = client
                            .query_typed(&sql.any_lease, &[])
                            .await
                            .map_err(db)?
                            .first()
                            .is_some_and(|r| r.get::<_, bool>(0));
                        let row = no_epoch_row(&self.inner.table, leases, self.inner.max_ttl)?;
                        return Ok((row, false));
                    }
                    FirstRead::Settle => {}
                }
            }
            Err(e) if error::is_missing_table(&e) && look => {
                return Err(Error::no_store(format!(
                    "table {} does not exist",
                    self.inner.table
                )))
            }
            Err(e) if error::is_missing_table(&e) => {
                // Under the table's creation lock, which the transaction's
                // end releases (see the crate docs, "Creating the table").
                let tx = client.transaction().await.map_err(db)?;
                tx.batch_execute(&sql.create_table).await.map_err(db)?;
                tx.commit().await.map_err(db)?;
            }
            Err(e) => return Err(db(e)),
        }
        let max_ttl_ms = self.inner.max_ttl.as_millis() as i64;
        // Only the table created while opening is the operator's new store:
        // one created again later (dropped under us) is quarantined.
        let proven = op == "open" && self.inner.creation == leasehold::Creation::NewProven;
        let tx = client.transaction().await.map_err(db)?;
        // Locked first: a row another process wrote meanwhile is checked
        // before this one writes anything.
        if let Some(row) = tx
            .query_typed(&sql.lock_epoch, &[])
            .await
            .map_err(db)?
            .first()
            .and_then(record::epoch)
        {
            row.check_protocol(NAME)?;
        }
        let inserted = tx
            .query_typed(
                &sql.insert_epoch,
                &[(&max_ttl_ms, Type::INT8), (&proven, Type::BOOL)],
            )
            .await
            .map_err(db)?;
        let row = locked_epoch(&tx, sql, op).await?;
        if inserted.is_empty() && row.same_table {
            // Someone else settled it first.
            tx.commit().await.map_err(db)?;
            return Ok((row, false));
        }
        if !inserted.is_empty() {
            tracing::info!(table = %self.inner.table, "new store epoch: the table or its epoch row is new");
        } else {
            // The epoch row was written in another table: this one was
            // restored from a dump (or copied). Its counters may be behind
            // tokens already issued: start a new epoch above them.
            tracing::warn!(table = %self.inner.table, old_epoch = row.epoch, "the table was restored or copied: starting a new store epoch");
            tx.query_typed(&sql.renew_epoch, &[]).await.map_err(db)?;
        }
        // Every lease in the table belongs to data that was lost or restored.
        tx.query_typed(&sql.void_leases, &[]).await.map_err(db)?;
        // Commit only once the epoch's second has begun on the server's
        // clock, so that a table created after this one (dropped and
        // re-created) gets a greater epoch.
        tx.query_typed(&sql.wait_epoch_second, &[])
            .await
            .map_err(db)?;
        // The epoch's age counts only from now, when no lease of the lost
        // data can be renewed any more: the void above may have waited on
        // row locks, or taken seconds on a large table, while holders whose
        // rows it had not reached yet still renewed.
        tx.query_typed(&sql.stamp_epoch, &[]).await.map_err(db)?;
        let row = locked_epoch(&tx, sql, op).await?;
        tx.commit().await.map_err(db)?;
        // A new epoch row is a new store; one renewed is the same store's.
        Ok((row, !inserted.is_empty()))
    }
}

/// The epoch row, locked for the rest of `tx`.
async fn locked_epoch(
    tx: &deadpool_postgres::Transaction<'_>,
    sql: &crate::statements::Statements,
    op: &'static str,
) -> Result<EpochRow> {
    tx.query_typed(&sql.lock_epoch, &[])
        .await
        .map_err(|e| error::db(op, e))?
        .first()
        .and_then(record::epoch)
        .ok_or_else(|| Error::backend(NAME, op, true, "the epoch row vanished"))
        .and_then(|row| row.check_protocol(NAME).map(|_| row))
}
