//! Run records on Azure (see
//! [run records](leasehold::backend#run-records)): the lock blob's metadata
//! carries the key's last success and last run, written under the lease.
//!
//! *Record a run* reads the blob's properties with our lease id (Azure
//! answers 412 unless our lease is the blob's active lease), then writes the
//! whole record back with `x-ms-lease-id` = ours and `If-Match` = the ETag
//! read, changing only the run records. Nobody can write the record while
//! the lease is ours, and a new holder writes its record before taking the
//! lease, so a write that lands is before any later grant. The end time is
//! the `Date` of that read: the service's clock (whole seconds, so up to a
//! second early), not the writer's. A run whose lease is no longer ours is
//! not written at all (the blob is another's, or free and about to be): the
//! answer is [`LeaseLost`](leasehold::Error::LeaseLost).

use std::time::SystemTime;

use azure_core::http::headers::{HeaderName, Headers};
use azure_core::http::{Etag, StatusCode};
use azure_storage_blob::models::{
    BlobClientGetPropertiesOptions, BlobClientGetPropertiesResultHeaders,
    BlobClientSetMetadataOptions,
};
use leasehold::{backend::Lease, Result, RunRecord};

use crate::record::Record;
use crate::AzureBackend;

const OP: &str = "record_run";

impl AzureBackend {
    pub(crate) async fn write_run(&self, lease: &Lease, run: &RunRecord) -> Result<()> {
        let (name, blob) = self.blob(&lease.key);
        let lost = |e: crate::error::RequestError| e.into_lease_error(OP, &lease.key);
        // Twice at most: a 412 ConditionNotMet with our lease still ours can
        // only be our own earlier write whose answer was lost.
        for _ in 0..2 {
            let options = BlobClientGetPropertiesOptions {
                lease_id: Some(lease.lease_id.as_str().to_string()),
                ..Default::default()
            };
            let resp = blob
                .get_properties(Some(options))
                .await
                .map_err(|e| lost(self.err(e)))?;
            let etag = resp.etag().ok().flatten().map(|e| e.to_string());
            let mut record = Record::from_metadata(&resp.metadata().unwrap_or_default());
            let mut run = run.clone();
            if let Some(date) = response_date(resp.headers()) {
                run = run.with_ended_at(date);
            }
            let stored = run.to_stored();
            if run.succeeded() {
                record.last_success = Some(stored.clone());
            }
            record.last_run = Some(stored);
            let options = BlobClientSetMetadataOptions {
                lease_id: Some(lease.lease_id.as_str().to_string()),
                if_match: etag.map(Etag::from),
                ..Default::default()
            };
            let written = blob
                .set_metadata(&record.to_metadata(), Some(options))
                .await;
            // The blob changed: this process's next acquisition reads it
            // afresh (one request, once per run; simpler than carrying the
            // cached snapshot's other knowledge along).
            self.remember(&name, None);
            match written {
                Ok(_) => return Ok(()),
                Err(e) => {
                    let e = self.err(e);
                    if e.code_is("ConditionNotMet") {
                        continue;
                    }
                    if e.is(StatusCode::PreconditionFailed) || e.is_not_found() {
                        return Err(lost(e));
                    }
                    return Err(e.into_error(OP));
                }
            }
        }
        Err(leasehold::Error::backend(
            crate::error::NAME,
            OP,
            true,
            "the lock blob's record kept changing under our lease",
        ))
    }
}

/// The `Date` of a response: the service's clock, in whole seconds.
fn response_date(headers: &Headers) -> Option<SystemTime> {
    let date = headers.get_optional_str(&HeaderName::from_static("date"))?;
    azure_core::time::parse_rfc7231(date)
        .ok()
        .map(SystemTime::from)
}
