//! The raw Redis loop: leasehold's acquire and release scripts.

use anyhow::{anyhow, Context};

use super::key::RAW_KEY;

/// leasehold's two scripts with the arguments its backend sends (see
/// `crates/leasehold-redis/src/lua/`).
pub async fn redis_cycle(
    conn: &mut leasehold_redis::redis::aio::ConnectionManager,
    acquire: &leasehold_redis::redis::Script,
    release: &leasehold_redis::redis::Script,
    prefix: &str,
    epoch: u64,
) -> anyhow::Result<()> {
    use leasehold_redis::redis::Value;
    let lease_id = uuid::Uuid::new_v4().to_string();
    let (marker, record) = (format!("{prefix}#epoch"), format!("{prefix}k:{RAW_KEY}"));
    let granted: Value = acquire
        .key(&marker)
        .key(&record)
        .key(format!("{prefix}#keys"))
        .arg(RAW_KEY)
        .arg(&lease_id)
        .arg(30_000u64)
        .arg(epoch)
        .arg(30_000u64)
        .arg("host")
        .arg(std::process::id())
        .arg("")
        .arg("")
        .invoke_async(conn)
        .await
        .context("raw Redis acquire")?;
    match &granted {
        Value::Array(items) if items.first() == Some(&Value::Int(1)) => {}
        other => return Err(anyhow!("raw Redis acquire granted nothing: {other:?}")),
    }
    let released: String = release
        .key(&marker)
        .key(&record)
        .arg(&lease_id)
        .arg(epoch)
        .arg(format!("{prefix}#released"))
        .arg(RAW_KEY)
        .invoke_async(conn)
        .await
        .context("raw Redis release")?;
    if released != "ok" {
        return Err(anyhow!("raw Redis release changed nothing: {released}"));
    }
    Ok(())
}
