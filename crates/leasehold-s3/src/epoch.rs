//! The store's epoch: the marker object, and the bucket it lives in.

use std::time::{Duration, SystemTime};

use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};
use leasehold::backend::protocol::{check_protocol_json, PROTOCOL};
use leasehold::{
    backend::{epoch_at, StoreEpoch},
    Creation, Error, Result,
};
use serde::{Deserialize, Serialize};

use crate::backend::{Cond, Got, Put, S3Backend, SECOND_PAST};
use crate::error::{code, status, SERVICE};

/// The marker's name under the prefix. `!` never occurs in a key (nor in
/// an escaped one), so no key maps to it and `list` skips it; and it sorts
/// before every key's object, so a deletion in listing order (`aws s3 rm
/// --recursive`, emptying a bucket) takes the marker first.
pub(crate) const MARKER: &str = "!leasehold-epoch";

/// The marker's content.
#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    /// The store's max TTL.
    max_ttl_ms: u64,
    /// Written by a backend built with [`Creation::NewProven`]: the epoch
    /// is settled at once, in every process.
    #[serde(default)]
    proven: bool,
    /// Fresh bytes: a marker written again never has an earlier ETag.
    nonce: String,
    /// The store's protocol (see the crate docs): missing in a marker of
    /// a build from before protocol versions (protocol 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    protocol: Option<serde_json::Value>,
}

fn marker_name(backend: &S3Backend) -> String {
    format!("{}{MARKER}", backend.prefix)
}

/// The marker as it is now: the epoch it names, its max TTL and its age
/// (the response's `Date` less its `Last-Modified`, less a second as both
/// are whole seconds); `None` if there is none (or no bucket).
pub(crate) async fn read(backend: &S3Backend) -> Result<Option<StoreEpoch>> {
    match backend.get("epoch", &marker_name(backend)).await? {
        Got::Found {
            body,
            last_modified,
            date,
            ..
        } => parse(&body, last_modified, date).map(Some),
        Got::Missing { .. } | Got::NoBucket => Ok(None),
    }
}

fn parse(
    body: &[u8],
    last_modified: Option<SystemTime>,
    date: Option<SystemTime>,
) -> Result<StoreEpoch> {
    // The protocol first: a marker of a newer protocol is refused, even
    // one whose other fields changed.
    check_protocol_json(SERVICE.backend, body)?;
    let marker: Marker = serde_json::from_slice(body).map_err(|e| {
        SERVICE.error("epoch", false, format!(
                "the store's epoch marker ({MARKER}) is not leasehold's ({e}); is the prefix used by something else?"
            ))
    })?;
    let Some(last_modified) = last_modified else {
        return Err(SERVICE.error(
            "epoch",
            true,
            "S3 answered the epoch marker's read without Last-Modified",
        ));
    };
    let age = date.map(|d| {
        d.duration_since(last_modified)
            .unwrap_or_default()
            .saturating_sub(Duration::from_secs(1))
    });
    let epoch = StoreEpoch::new(
        epoch_at(last_modified),
        Duration::from_millis(marker.max_ttl_ms),
    )
    .with_age(age);
    Ok(if marker.proven { epoch.proven() } else { epoch })
}

/// Reads the store's epoch; where there is no marker (a new store, or one
/// whose data was lost), creates the bucket if missing and writes one,
/// unless the backend may not ([`Creation::Never`]: no store). With whether
/// this call wrote the marker (created the store).
pub(crate) async fn read_or_start(backend: &S3Backend) -> Result<(StoreEpoch, bool)> {
    let name = marker_name(backend);
    for _ in 0..5 {
        let (missing_at, arrived) = match backend.get("open", &name).await? {
            Got::Found {
                body,
                last_modified,
                date,
                ..
            } => return Ok((parse(&body, last_modified, date)?, false)),
            Got::NoBucket => {
                ensure_bucket(backend).await?;
                continue;
            }
            Got::Missing { date, arrived } => (date, arrived),
        };
        if backend.settings.creation == Creation::Never {
            return Err(Error::no_store(format!(
                "no leasehold store at s3://{}/{} (no epoch marker)",
                backend.bucket, backend.prefix
            )));
        }
        let Some(missing_at) = missing_at else {
            return Err(SERVICE.error("open", false, "S3 answered without a Date header"));
        };
        // Written a second past the answer that said there is none, so
        // that its Last-Modified (the epoch) is in a later second than
        // every earlier marker's here (crate docs, "Epochs never repeat").
        let wait = (arrived + SECOND_PAST).saturating_sub(backend.settings.clock.now());
        tokio::time::sleep(wait).await;
        // "No store existed here before" (`init --new`) is taken at its
        // word only where no object of one is left: objects without a
        // marker are a store being deleted, or restored, whose holders may
        // still run.
        let proven =
            backend.settings.creation == Creation::NewProven && !has_objects(backend).await?;
        let marker = Marker {
            max_ttl_ms: backend.settings.max_ttl.as_millis() as u64,
            proven,
            nonce: crate::record::nonce(),
            protocol: Some(PROTOCOL.into()),
        };
        let body = serde_json::to_vec(&marker).expect("a marker always serialises");
        match backend.put("open", &name, body, Cond::Create).await? {
            Put::Done(etag) => {
                if let Got::Found {
                    etag: found,
                    body,
                    last_modified,
                    date,
                } = backend.get("open", &name).await?
                {
                    let later = last_modified.is_some_and(|lm| epoch_at(lm) > epoch_at(missing_at));
                    if found == etag && !later {
                        // Not in a later second after all (clocks): write
                        // it again.
                        backend.delete_if(&name, &etag).await?;
                        continue;
                    }
                    tracing::info!(bucket = %backend.bucket, prefix = %backend.prefix, "started a new leasehold store (epoch marker written)");
                    // Ours if it is still the object this call wrote.
                    return Ok((parse(&body, last_modified, date)?, found == etag));
                }
            }
            Put::Refused | Put::NoBucket => {}
        }
    }
    Err(SERVICE.error("open", true, "the store's epoch marker kept changing"))
}

/// Whether any object is under the store's prefix.
async fn has_objects(backend: &S3Backend) -> Result<bool> {
    let listed = backend
        .client
        .list_objects_v2()
        .bucket(&backend.bucket)
        .prefix(&backend.prefix)
        .max_keys(1)
        .send()
        .await
        .map_err(|e| SERVICE.map_sdk(&backend.bucket, "open", e))?;
    let found = !listed.contents().is_empty();
    if found {
        tracing::warn!(bucket = %backend.bucket, prefix = %backend.prefix, "no epoch marker, but objects of a store are here: the new epoch is quarantined, not settled at once");
    }
    Ok(found)
}

/// Makes sure the bucket exists: creates it when missing, if the backend
/// may and the credentials allow.
async fn ensure_bucket(backend: &S3Backend) -> Result<()> {
    let bucket = &backend.bucket;
    let head = backend.client.head_bucket().bucket(bucket).send().await;
    match head {
        Ok(_) => return Ok(()),
        Err(err) if status(&err) == Some(404) => {}
        Err(err) if status(&err) == Some(403) => {
            return Err(SERVICE.error("open", false, format!(
                    "S3 refused to say whether bucket {bucket:?} exists (403): the credentials need s3:ListBucket on it (or it is another account's bucket)"
                )))
        }
        Err(err) => return Err(backend.connect_error(SERVICE.map_sdk(bucket, "open", err))),
    }
    if !backend.settings.creation.creates() {
        return Err(Error::no_store(format!("bucket {bucket:?} does not exist")));
    }
    if !backend.settings.create {
        return Err(SERVICE.error(
            "open",
            false,
            format!("bucket {bucket:?} does not exist and create_bucket is off"),
        ));
    }
    let mut create = backend.client.create_bucket().bucket(bucket);
    if backend.settings.region != "us-east-1" {
        // Every region but us-east-1 wants to be named.
        create = create.create_bucket_configuration(
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::from(
                    backend.settings.region.as_str(),
                ))
                .build(),
        );
    }
    match create.send().await {
        Ok(_) => {
            tracing::info!(%bucket, region = %backend.settings.region, "created the S3 bucket");
            Ok(())
        }
        // Someone else (or we, a moment ago) created it: use it.
        Err(err) if code(&err) == Some("BucketAlreadyOwnedByYou") => Ok(()),
        Err(err) if status(&err) == Some(403) => Err(SERVICE.error("open", false, format!(
                "bucket {bucket:?} does not exist, and the credentials may not create it (s3:CreateBucket): create it, or allow that"
            ))),
        Err(err) => Err(SERVICE.map_sdk(bucket, "create bucket", err)),
    }
}
