//! The raw PostgreSQL loop: leasehold's acquire and release statements.

use anyhow::{anyhow, Context};

use super::key::RAW_KEY;

pub async fn postgres_cycle(
    client: &tokio_postgres::Client,
    acquire: &tokio_postgres::Statement,
    release: &tokio_postgres::Statement,
    epoch: i64,
) -> anyhow::Result<()> {
    let lease_id = uuid::Uuid::new_v4().to_string();
    let (ttl_ms, pid) = (30_000i64, std::process::id() as i64);
    let (label, data) = (Option::<String>::None, Option::<String>::None);
    let rows = client
        .query(
            acquire,
            &[
                &RAW_KEY,
                &lease_id.as_str(),
                &ttl_ms,
                &epoch,
                &"host",
                &pid,
                &label,
                &data,
            ],
        )
        .await
        .context("raw PostgreSQL acquire")?;
    let granted = rows
        .first()
        .and_then(|r| r.get::<_, Option<i64>>("granted"));
    if granted.is_none() {
        return Err(anyhow!("raw PostgreSQL acquire granted nothing"));
    }
    let rows = client
        .query(release, &[&RAW_KEY, &lease_id.as_str()])
        .await
        .context("raw PostgreSQL release")?;
    if !rows.first().is_some_and(|r| r.get::<_, bool>("done")) {
        return Err(anyhow!("raw PostgreSQL release changed nothing"));
    }
    Ok(())
}
