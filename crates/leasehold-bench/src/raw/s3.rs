//! The raw S3 loop: leasehold-s3's warm path on leasehold's own client.

use std::time::SystemTime;

use anyhow::{anyhow, Context};
use aws_sdk_s3::primitives::ByteStream;
use serde_json::json;

use super::key::{unix_ms, RAW_KEY};

/// The raw S3 loop: its object, as it last wrote it, and the store's
/// epoch marker.
pub struct S3Raw {
    /// leasehold's client.
    client: aws_sdk_s3::Client,
    bucket: String,
    /// The raw key's object, in the store's prefix.
    object: String,
    /// The epoch marker's object.
    marker: String,
    /// The object's ETag after our last write.
    etag: String,
    /// The store's epoch and the record's last fencing token.
    epoch: u64,
    fence: u64,
    /// This process, as leasehold's records name a holder.
    owner: serde_json::Value,
}

impl S3Raw {
    /// The loop on an object of `backend`'s store (created here), on
    /// leasehold's own client.
    pub async fn new(backend: &leasehold_s3::S3Backend) -> anyhow::Result<S3Raw> {
        let mut raw = S3Raw {
            client: backend.client().clone(),
            bucket: backend.bucket().to_string(),
            object: backend.object_name(&leasehold::Key::new(RAW_KEY)?),
            // leasehold-s3's epoch marker, `!leasehold-epoch` under the
            // prefix (its crate docs, "Objects").
            marker: format!("{}!leasehold-epoch", backend.prefix()),
            etag: String::new(),
            epoch: backend.epoch().epoch,
            fence: 0,
            owner: serde_json::to_value(leasehold::Owner::current())?,
        };
        // The object's first write: a free record.
        let free = json!({ "v": 1, "nonce": s3_nonce(), "epoch": raw.epoch, "fence": 0 });
        raw.etag = raw.put(&free, None).await?;
        Ok(raw)
    }

    /// leasehold's S3 requests for a free key this process wrote last (see
    /// `crates/leasehold-s3`: the crate docs' "Requests" and `backend.rs`),
    /// with records of leasehold's layout: the grant, `PutObject` of the
    /// record with the next token and our lease `If-Match` the ETag of our
    /// last write, then `GetObject` of the epoch marker, whose
    /// `Last-Modified` must still be the grant's epoch; the release,
    /// `PutObject` of the record freed (`released_by`) `If-Match` the
    /// grant's ETag. Every record has a fresh nonce, as leasehold's have.
    pub async fn cycle(&mut self) -> anyhow::Result<()> {
        let lease_id = uuid::Uuid::new_v4().to_string();
        let fence = leasehold::backend::next_token(self.fence, self.epoch);
        let now = unix_ms();
        let held = json!({
            "v": 1,
            "nonce": s3_nonce(),
            "epoch": self.epoch,
            "fence": fence,
            "lease": {
                "id": lease_id,
                "owner": self.owner,
                "ttl_ms": 30_000,
                "acquired_ms": now,
                "expires_ms": now + 30_000,
            },
        });
        self.etag = self
            .put(&held, Some(&self.etag))
            .await
            .context("raw S3 grant")?;
        self.fence = fence;
        let marker = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&self.marker)
            .send()
            .await
            .context("raw S3 marker read")?;
        let written = marker
            .last_modified()
            .and_then(|t| SystemTime::try_from(*t).ok())
            .map(leasehold::backend::epoch_at);
        let body = marker.body.collect().await?.into_bytes();
        serde_json::from_slice::<serde_json::Value>(&body).context("raw S3 marker")?;
        if written != Some(self.epoch) {
            return Err(anyhow!("raw S3: the store's epoch changed"));
        }
        let free = json!({
            "v": 1,
            "nonce": s3_nonce(),
            "epoch": self.epoch,
            "fence": fence,
            "released_by": lease_id,
        });
        self.etag = self
            .put(&free, Some(&self.etag))
            .await
            .context("raw S3 release")?;
        Ok(())
    }

    /// One `PutObject` of `record`, as leasehold-s3 sends it: `If-Match`
    /// the ETag given, or `If-None-Match: *` without one. Returns the new
    /// ETag.
    async fn put(&self, record: &serde_json::Value, etag: Option<&str>) -> anyhow::Result<String> {
        let put = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(&self.object)
            .content_type("application/json")
            .body(ByteStream::from(serde_json::to_vec(record)?));
        let put = match etag {
            Some(etag) => put.if_match(etag),
            None => put.if_none_match("*"),
        };
        let out = put.send().await?;
        out.e_tag()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("no ETag in the answer"))
    }
}

/// Fresh random bytes for a record, as leasehold-s3 makes them.
fn s3_nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
