//! Removing what a run made in the stores.

use crate::stores::{self, Spec};

/// Deletes each store's container, table, keys or objects.
pub async fn cleanup(specs: &[Spec]) {
    for spec in specs {
        let result: anyhow::Result<()> = async {
            match spec {
                Spec::Azblob(_) => {
                    let o = stores::open(spec, false).await?;
                    drop(o);
                    let b = leasehold_azure::AzureBackend::builder()
                        .container(match spec {
                            Spec::Azblob(c) => c.clone(),
                            _ => unreachable!(),
                        })
                        .connection_string(stores::azurite_connection_string())
                        .build()?;
                    b.delete_container().await?;
                }
                Spec::Dynamodb(table) => {
                    let o = stores::open(spec, false).await?;
                    if let Some(d) = &o.dynamo {
                        d.client().delete_table().table_name(table).send().await?;
                    }
                }
                Spec::Postgres(table) => {
                    let url = stores::postgres_url().unwrap_or_default();
                    let config = leasehold_postgres::PostgresBackendBuilder::from_url(&url)?
                        .config()
                        .clone();
                    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                    let connection = tokio::spawn(connection);
                    client
                        .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
                        .await?;
                    drop(client);
                    let _ = connection.await;
                }
                Spec::Mysql(table) => {
                    use leasehold_mysql::mysql_async::prelude::Queryable;
                    let url = stores::mysql_url().unwrap_or_default();
                    let opts = leasehold_mysql::MysqlBackendBuilder::from_url(&url)?
                        .opts()
                        .clone();
                    let mut conn = leasehold_mysql::mysql_async::Conn::new(opts).await?;
                    conn.query_drop(format!("DROP TABLE IF EXISTS {table}"))
                        .await?;
                    conn.disconnect().await?;
                }
                Spec::Redis(prefix) => {
                    use leasehold_redis::redis;
                    let url = stores::redis_url().unwrap_or_default();
                    let base = url.split('?').next().unwrap_or(&url).to_string();
                    let mut conn = redis::Client::open(base)?
                        .get_multiplexed_async_connection()
                        .await?;
                    // Every key of the bench's store (its prefix is its own).
                    redis::Script::new(
                        "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end",
                    )
                    .arg(format!("{prefix}*"))
                    .invoke_async::<()>(&mut conn)
                    .await?;
                }
                Spec::Zookeeper(_) => {
                    // The bench's chroot, with everything under it.
                    let o = stores::open(spec, false).await?;
                    if let Some(z) = &o.zookeeper {
                        z.delete_store().await?;
                    }
                }
                Spec::Etcd(_) | Spec::S3(_) => {
                    // Every key or object of the bench's store (its
                    // prefix is its own); etcd's holder keys' etcd
                    // leases run out, S3's bucket stays.
                    let o = stores::open(spec, false).await?;
                    if let Some(e) = &o.etcd {
                        e.delete_store().await?;
                    }
                    if let Some(b) = &o.s3 {
                        b.delete_store().await?;
                    }
                }
                _ => {}
            }
            Ok(())
        }
        .await;
        if let Err(e) = result {
            eprintln!("cleanup of {}: {e:#}", spec.label());
        }
    }
}
