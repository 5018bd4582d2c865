//! The raw MySQL loop: leasehold's acquire transaction and release
//! statement, sent as leasehold sends them.

use anyhow::{anyhow, Context};
use leasehold_mysql::mysql_async::prelude::Queryable;
use leasehold_mysql::mysql_async::{Conn, Row, TxOpts, Value};

use super::key::RAW_KEY;

/// The statements, owned (from [`leasehold_mysql::RawSql`]).
pub struct MysqlSql {
    pub share_epoch: String,
    pub lock_key: String,
    pub insert_grant: String,
    pub update_grant: String,
    pub release: String,
}

/// One cycle: grant (a transaction: begin, the epoch row shared, the key's
/// row locked, the grant, commit) and release; six statements.
pub async fn mysql_cycle(conn: &mut Conn, sql: &MysqlSql, epoch: u64) -> anyhow::Result<()> {
    let lease_id = uuid::Uuid::new_v4().to_string();
    let (ttl_ms, pid) = (30_000u64, std::process::id());
    let mut tx = conn.start_transaction(TxOpts::default()).await?;
    let meta: Option<Row> = tx.exec_first(sql.share_epoch.as_str(), ()).await?;
    meta.ok_or_else(|| anyhow!("raw MySQL acquire: no epoch row"))?;
    let row: Option<Row> = tx.exec_first(sql.lock_key.as_str(), (RAW_KEY,)).await?;
    let owner = [
        Value::from(ttl_ms * 1000),
        Value::from(ttl_ms),
        Value::from("host"),
        Value::from(pid),
        Value::NULL,
        Value::NULL,
    ];
    match row {
        None => {
            let mut params = vec![
                Value::from(RAW_KEY),
                Value::from(leasehold::backend::next_token(0, epoch)),
                Value::from(epoch),
                Value::from(lease_id.as_str()),
            ];
            params.extend(owner);
            tx.exec_drop(sql.insert_grant.as_str(), params).await?;
        }
        Some(row) => {
            let fence: u64 = row.get("fence").ok_or_else(|| anyhow!("no fence"))?;
            let mut params = vec![
                Value::from(leasehold::backend::next_token(fence, epoch)),
                Value::from(epoch),
                Value::from(lease_id.as_str()),
            ];
            params.extend(owner);
            params.extend([Value::from(false), Value::from(RAW_KEY)]);
            tx.exec_drop(sql.update_grant.as_str(), params).await?;
        }
    }
    tx.commit().await.context("raw MySQL acquire")?;
    conn.exec_drop(sql.release.as_str(), (RAW_KEY, lease_id.as_str()))
        .await
        .context("raw MySQL release")?;
    if conn.affected_rows() != 1 {
        return Err(anyhow!("raw MySQL release changed nothing"));
    }
    Ok(())
}
