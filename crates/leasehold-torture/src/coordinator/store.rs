//! The store as the coordinator handles it: opened, lost, made again with
//! a max TTL.

use std::time::Duration;

use anyhow::Context;
use leasehold::Store;

use super::route::redact;

/// Opens a store URL the way the `leasehold` CLI does.
pub async fn open_store(url: &str) -> anyhow::Result<Store> {
    leasehold_stores::open(Some(url))
        .await
        .with_context(|| format!("cannot open store {}", leasehold_stores::redact(url)))
}

/// The store loses every lease and fencing counter: the SQLite file is
/// deleted, the Azure container deleted (the backend creates it again on
/// use), the DynamoDB table deleted and created again, the PostgreSQL
/// or MySQL table dropped, the Redis server flushed (FLUSHALL), the etcd prefix
/// deleted, the S3 store's objects deleted, the ZooKeeper root deleted. A new DynamoDB table is created from `recreate_with`.
pub async fn lose_store(url: &str, recreate_with: &str) -> anyhow::Result<()> {
    if let Some(rest) = url.strip_prefix("sqlite:") {
        let rest = rest.split('?').next().unwrap_or(rest);
        let path = rest.strip_prefix("//").unwrap_or(rest);
        for suffix in ["", "-wal", "-shm", "-journal"] {
            match std::fs::remove_file(format!("{path}{suffix}")) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        Ok(())
    } else if url.starts_with("azblob://") {
        leasehold_azure::AzureBackend::from_url(url)
            .await?
            .delete_container()
            .await?;
        Ok(())
    } else if url.starts_with("dynamodb://") {
        let b = leasehold_dynamodb::DynamoDbBackend::from_url(url).await?;
        b.client()
            .delete_table()
            .table_name(b.table())
            .send()
            .await
            .context("delete table")?;
        // DeleteTable may return while the table is still being deleted:
        // the loss is done when the table is gone.
        for _ in 0..200 {
            match b
                .client()
                .describe_table()
                .table_name(b.table())
                .send()
                .await
            {
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|e| e.is_resource_not_found_exception()) =>
                {
                    break
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        // Opening it again creates the table (create_table is on by default).
        leasehold_dynamodb::DynamoDbBackend::from_url(recreate_with).await?;
        Ok(())
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        // The table dropped (the backend creates it again on use).
        let builder = leasehold_postgres::PostgresBackendBuilder::from_url(url)?;
        let (client, connection) = builder
            .config()
            .connect(leasehold_postgres::tokio_postgres::NoTls)
            .await?;
        let connection = tokio::spawn(connection);
        client
            .batch_execute(&format!("DROP TABLE IF EXISTS {}", builder.table_name()))
            .await
            .context("drop table")?;
        drop(client);
        let _ = connection.await;
        Ok(())
    } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
        // The table dropped (the backend creates it again on use).
        use leasehold_mysql::mysql_async::prelude::Queryable;
        let builder = leasehold_mysql::MysqlBackendBuilder::from_url(url)?;
        let mut conn = leasehold_mysql::mysql_async::Conn::new(builder.opts().clone()).await?;
        conn.query_drop(format!("DROP TABLE IF EXISTS {}", builder.table_name()))
            .await
            .context("drop table")?;
        conn.disconnect().await?;
        Ok(())
    } else if url.starts_with("redis://") || url.starts_with("rediss://") {
        // Everything flushed, as an administrator's FLUSHALL (or a restart
        // without persistence) would: the torture runs on a server of its
        // own. The backend starts a new epoch on its next use.
        use leasehold_redis::redis;
        let base = url.split('?').next().unwrap_or(url);
        let client = redis::Client::open(base).context("redis URL")?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("FLUSHALL")
            .query_async::<()>(&mut conn)
            .await
            .context("FLUSHALL")?;
        Ok(())
    } else if url.starts_with("etcd://") || url.starts_with("etcds://") {
        // Every key of the store's prefix deleted (an operator's `etcdctl
        // del --prefix`): the holders' etcd leases live on, their keys and
        // the epoch marker do not. The backend starts a new epoch on use.
        leasehold_etcd::EtcdBackend::from_url(url)
            .await?
            .delete_store()
            .await
            .context("delete the prefix")?;
        Ok(())
    } else if url.starts_with("zk://") {
        // The store's root node deleted with everything under it (an
        // operator's `deleteall`). The backend starts a new epoch on use.
        leasehold_zookeeper::ZkBackend::from_url(url)
            .await?
            .delete_store()
            .await
            .context("delete the root node")?;
        Ok(())
    } else if url.starts_with("s3://") {
        // Every object of the store deleted, the epoch marker first (an
        // operator's `aws s3 rm --recursive`). The backend starts a new
        // epoch on its next use.
        leasehold_s3::S3Backend::from_url(url)
            .await?
            .delete_store()
            .await
            .context("delete the store's objects")?;
        Ok(())
    } else {
        anyhow::bail!("no store-loss fault for {}", redact(url))
    }
}

/// The `max_ttl=` of `url`, if it has one that parses.
pub fn url_max_ttl(url: &str) -> Option<Duration> {
    let query = url.split_once('?')?.1;
    query
        .split('&')
        .filter_map(|p| p.strip_prefix("max_ttl="))
        .next_back()
        .and_then(|d| humantime::parse_duration(d).ok())
}

/// `url` with `max_ttl=` (the store's max TTL if it begins a new epoch)
/// set to `max`.
pub fn with_max_ttl(url: &str, max: Duration) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut params: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("max_ttl="))
        .map(String::from)
        .collect();
    params.push(format!("max_ttl={}ms", max.as_millis()));
    format!("{base}?{}", params.join("&"))
}

/// Uses the store as the first process after a loss does, so that its new
/// epoch records `url`'s max TTL: one attempt on a key of its own (in
/// quarantine it grants nothing; a grant is released at once).
pub async fn recreate(url: &str, ttl: Duration) {
    let attempt = async {
        let store = open_store(url).await?;
        // Refused or not, the attempt has made the store's new epoch.
        let _ = try_key(&store, "torture/recreate", ttl).await?;
        anyhow::Ok(())
    };
    if let Err(e) = attempt.await {
        eprintln!("leasehold-torture: re-creating the store: {e:#}");
    }
}

/// One attempt on a key of the coordinator's own that waits for nothing,
/// releasing a grant at once. The outer error is the lock's making (a bad
/// key or TTL), the inner one the attempt's answer.
async fn try_key(
    store: &Store,
    key: &str,
    ttl: Duration,
) -> leasehold::Result<leasehold::Result<()>> {
    let lock = store.lock_with(key, leasehold::LockOptions::new().ttl(ttl))?;
    Ok(match lock.acquire_timeout(Duration::ZERO).await {
        Ok(guard) => {
            let _ = guard.release().await;
            Ok(())
        }
        Err(e) => Err(e),
    })
}

/// Waits until `store` grants leases: a new store's epoch grants nothing
/// for the confirmation window (the quarantine), and the processes of a
/// run, opened after it, are let in at once (the store tells them the
/// epoch's age). Tries a key of its own, releasing a grant at once; gives
/// up, saying so, after a few windows or on another failure.
pub async fn settle(store: &Store, ttl: Duration) {
    let deadline = tokio::time::Instant::now() + store.confirmation_window() * 3;
    let attempt = async {
        loop {
            match try_key(store, "torture/settle", ttl).await? {
                Ok(()) => return anyhow::Ok(()),
                Err(leasehold::Error::Quarantined { remaining, .. })
                    if tokio::time::Instant::now() + remaining < deadline =>
                {
                    tokio::time::sleep(remaining + Duration::from_millis(10)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    if let Err(e) = attempt.await {
        eprintln!("leasehold-torture: waiting out the new store's quarantine: {e:#}");
    }
}
