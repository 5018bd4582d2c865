//! The raw Azure loop: azure_storage_blob on a client built as
//! leasehold-azure builds its own: write the record, lease, release.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use azure_core::http::Etag;
use azure_storage_blob::models::{BlobClientAcquireLeaseOptions, BlobClientSetMetadataOptions};
use azure_storage_blob::BlobClient;
use leasehold_stores::CountTries as CountRequests;

use super::key::unix_ms;

/// A backend built as leasehold-azure builds its own for Azurite (API
/// version, retry policy, reqwest transport and timeouts, shared-key
/// signing), counting requests: the raw loop sends on its container client.
/// Building it sends nothing.
pub fn backend(
    container: &str,
    requests: Arc<AtomicU64>,
) -> anyhow::Result<leasehold_azure::AzureBackend> {
    Ok(leasehold_azure::AzureBackend::builder()
        .endpoint(leasehold_azure::DEV_ENDPOINT)
        .account(leasehold_azure::DEV_ACCOUNT)
        .access_key(leasehold_azure::DEV_KEY)
        .container(container)
        .per_try_policy(Arc::new(CountRequests(requests)))
        .build()?)
}

pub async fn azure_cycle(
    blob: &BlobClient,
    etag: &mut String,
    fence: &mut u64,
) -> anyhow::Result<()> {
    let lease_id = uuid::Uuid::new_v4().to_string();
    let mut meta = HashMap::new();
    *fence += 1;
    meta.insert("leaseholdfence".to_string(), fence.to_string());
    meta.insert("leaseholdlease".to_string(), lease_id[..16].to_string());
    meta.insert("leaseholdhost".to_string(), "host".to_string());
    meta.insert("leaseholdpid".to_string(), std::process::id().to_string());
    meta.insert("leaseholdacquiredms".to_string(), unix_ms().to_string());
    meta.insert("leaseholdttlms".to_string(), "30000".to_string());
    let options = BlobClientSetMetadataOptions {
        if_match: Some(Etag::from(etag.as_str())),
        ..Default::default()
    };
    let resp = blob.set_metadata(&meta, Some(options)).await?;
    *etag = resp
        .headers()
        .get_optional_str(&azure_core::http::headers::ETAG)
        .unwrap_or_default()
        .to_string();
    let options = BlobClientAcquireLeaseOptions {
        proposed_lease_id: Some(lease_id.clone()),
        if_match: Some(Etag::from(etag.as_str())),
        ..Default::default()
    };
    blob.acquire_lease(30, Some(options)).await?;
    blob.release_lease(lease_id, None).await?;
    Ok(())
}
