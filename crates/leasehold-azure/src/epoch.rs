//! The container's store epoch: its marker blob, the container created on
//! demand, and the epoch's age on the service's own clock (see
//! [Store epoch and quarantine](crate#store-epoch-and-quarantine)).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use azure_core::http::headers::{HeaderName, Headers};
use azure_core::http::{Etag, RequestContent, StatusCode};
use azure_core::time::OffsetDateTime;
use azure_storage_blob::models::{
    BlobClientDeleteOptions, BlobClientGetPropertiesResultHeaders,
    BlobContainerClientGetPropertiesResultHeaders, BlockBlobClientUploadOptions,
};
use leasehold::{
    backend::{protocol::check_protocol, StoreEpoch, EPOCH_ORIGIN_UNIX_SECS},
    Error,
};

use crate::error::{RequestError, NAME};
use crate::AzureBackend;

/// The marker blob's name, at the container's root whatever the prefix: `~`
/// never occurs in a key's blob name (except in `~2E`), so no key maps to it
/// and listing skips it.
pub(crate) const MARKER: &str = "~leasehold-epoch";
/// The marker's metadata: the store max TTL in milliseconds.
const MAX_TTL_MS: &str = "leaseholdmaxttlms";
/// The marker's metadata on a container created with
/// [`Creation::NewProven`](leasehold::Creation::NewProven): `1`, the epoch
/// is proven (settled at once in every process).
const PROVEN: &str = "leaseholdproven";
/// The marker's metadata: the store's protocol (see the crate docs),
/// written by every build that records versions; missing on a marker of an
/// earlier build (protocol 1).
const PROTOCOL: &str = "leaseholdprotocol";

/// How long to wait, after Azure said there is no marker, before writing
/// one: a whole second on the service's clock, so that the new marker's
/// Last-Modified second is after that of any marker that existed before
/// (plus 0.1 % and a little for clock rates and rounding).
const MARKER_CREATION_DELAY: Duration = Duration::from_millis(1_050);

/// The epoch as last learnt, and when (on this process's monotonic clock).
#[derive(Debug, Clone)]
pub(crate) struct Known {
    epoch: StoreEpoch,
    read_at: Instant,
}

impl Known {
    /// The epoch with its age as of now.
    pub(crate) fn now(&self) -> StoreEpoch {
        let age = self
            .epoch
            .age
            .map(|a| a.saturating_add(self.read_at.elapsed()));
        self.epoch.clone().with_age(age)
    }
}

/// What reading the marker found.
enum MarkerRead {
    Found {
        epoch: u64,
        max_ttl: Duration,
        /// At least this old by the service's clock.
        age: Duration,
        /// The protocol the marker names, as stored.
        protocol: Option<String>,
    },
    /// The container exists without a marker; the answer's `Date`.
    NoMarker(Option<OffsetDateTime>),
    NoContainer,
}

/// The `Date` of a response: the service's clock, in whole seconds.
fn service_date(headers: &Headers) -> Option<OffsetDateTime> {
    headers
        .get_optional_str(&HeaderName::from_static("date"))
        .and_then(|d| azure_core::time::parse_rfc7231(d).ok())
}

/// The epoch of a marker last modified at `modified`: whole seconds since
/// 2024-01-01 on the service's clock, at least 1.
fn epoch_of(modified: OffsetDateTime) -> u64 {
    let secs = modified.unix_timestamp() - EPOCH_ORIGIN_UNIX_SECS as i64;
    secs.max(1) as u64
}

/// How long ago `then` was at `date`, at least: both are whole seconds, so
/// one second less than their difference (never more than the truth).
fn age_between(then: OffsetDateTime, date: Option<OffsetDateTime>) -> Duration {
    let Some(date) = date else {
        return Duration::ZERO;
    };
    let secs = date.unix_timestamp() - then.unix_timestamp() - 1;
    Duration::from_secs(secs.max(0) as u64)
}

fn max_ttl_of(meta: &HashMap<String, String>) -> Option<Duration> {
    meta.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(MAX_TTL_MS))
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .map(Duration::from_millis)
        .filter(|d| (crate::MIN_TTL..=crate::MAX_TTL).contains(d))
}

impl AzureBackend {
    /// The epoch this backend last learnt, with its age as of now.
    pub(crate) fn known_epoch(&self) -> Option<StoreEpoch> {
        let known = self.inner.epoch.lock().unwrap_or_else(|e| e.into_inner());
        known.as_ref().map(Known::now)
    }

    /// Reads the container's epoch, creating the container and its marker
    /// when missing, and remembers it.
    ///
    /// The age is the larger of the marker's and the container's (each
    /// `Date` minus `Last-Modified`, less a second): the container is at
    /// least as old as either, and nothing of an earlier container of this
    /// name can be live once the container has existed for a max TTL. The
    /// container is only asked when the marker alone is too young.
    pub(crate) async fn learn_epoch(&self) -> leasehold::Result<StoreEpoch> {
        self.learn_epoch_as(self.inner.creation.after_open()).await
    }

    /// [`learn_epoch`](Self::learn_epoch) as `creation` allows (the
    /// backend's own while opening, see
    /// [`open_store`](AzureBackend::open_store)).
    pub(crate) async fn learn_epoch_as(
        &self,
        creation: leasehold::Creation,
    ) -> leasehold::Result<StoreEpoch> {
        Ok(self.learn_epoch_creating(creation).await?.0)
    }

    /// [`learn_epoch_as`](Self::learn_epoch_as), with whether this call
    /// created the store (wrote the epoch marker that stands).
    pub(crate) async fn learn_epoch_creating(
        &self,
        creation: leasehold::Creation,
    ) -> leasehold::Result<(StoreEpoch, bool)> {
        const OP: &str = "acquire";
        // Only a container created here may get a proven marker (see
        // `Creation::NewProven`).
        let mut created = false;
        let mut wrote_marker = false;
        for _ in 0..6 {
            match self.read_marker().await.map_err(|e| e.into_error(OP))? {
                MarkerRead::Found {
                    epoch,
                    max_ttl,
                    age,
                    protocol,
                } => {
                    // An unknown protocol: refused before anything is
                    // written (a marker found is never written over).
                    check_protocol(NAME, protocol.as_deref())?;
                    let age = if age >= max_ttl {
                        age
                    } else {
                        age.max(self.container_age().await.map_err(|e| e.into_error(OP))?)
                    };
                    let epoch = StoreEpoch::new(epoch, max_ttl).with_age(Some(age));
                    *self.inner.epoch.lock().unwrap_or_else(|e| e.into_inner()) = Some(Known {
                        epoch: epoch.clone(),
                        read_at: Instant::now(),
                    });
                    return Ok((epoch, wrote_marker));
                }
                MarkerRead::NoContainer if creation == leasehold::Creation::Never => {
                    return Err(Error::no_store(format!(
                        "container {} does not exist",
                        self.inner.container_name
                    )));
                }
                MarkerRead::NoMarker(_) if creation == leasehold::Creation::Never => {
                    // Looking writes nothing. A container with neither a
                    // marker nor a lock blob is no store yet (one being
                    // created: the marker comes a second after the
                    // container; or a container made by hand).
                    if leasehold::backend::Backend::list(self, "")
                        .await?
                        .is_empty()
                    {
                        return Err(Error::no_store(format!(
                            "container {} has no leasehold store epoch marker and no lock blob (another process may be creating the store)",
                            self.inner.container_name
                        )));
                    }
                    // Lock blobs without a marker (deleted by hand): an
                    // epoch of no age (the next acquirer writes one).
                    return Ok((
                        StoreEpoch::new(
                            leasehold::backend::epoch_at(std::time::SystemTime::now()),
                            self.inner.max_ttl,
                        )
                        .with_age(Some(Duration::ZERO)),
                        false,
                    ));
                }
                MarkerRead::NoMarker(date) => {
                    let proven = created && creation == leasehold::Creation::NewProven;
                    wrote_marker = self
                        .create_marker(date, proven)
                        .await
                        .map_err(|e| e.into_error(OP))?;
                }
                MarkerRead::NoContainer => {
                    created = self
                        .create_container()
                        .await
                        .map_err(|e| e.into_error(OP))?;
                }
            }
        }
        Err(Error::backend(
            NAME,
            OP,
            true,
            "the container's epoch marker kept changing (is the container being deleted and re-created?)",
        ))
    }

    /// The epoch the marker names now (one request), `None` when there is
    /// no marker or no container. For checking, after reading a lock blob,
    /// that the blob is in the container of a given epoch.
    pub(crate) async fn marker_epoch(&self) -> std::result::Result<Option<u64>, RequestError> {
        Ok(match self.read_marker().await? {
            MarkerRead::Found { epoch, .. } => Some(epoch),
            _ => None,
        })
    }

    async fn read_marker(&self) -> std::result::Result<MarkerRead, RequestError> {
        let marker = self.inner.container.blob_client(MARKER);
        match marker.get_properties(None).await {
            Ok(resp) => {
                let modified = resp.last_modified().ok().flatten().ok_or_else(|| {
                    RequestError::other("the epoch marker's answer has no Last-Modified")
                })?;
                let meta = resp.metadata().unwrap_or_default();
                let proven = meta
                    .iter()
                    .any(|(k, v)| k.eq_ignore_ascii_case(PROVEN) && v == "1");
                let protocol = meta
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(PROTOCOL))
                    .map(|(_, v)| v.clone());
                Ok(MarkerRead::Found {
                    protocol,
                    epoch: epoch_of(modified),
                    max_ttl: max_ttl_of(&meta).unwrap_or(crate::MAX_TTL),
                    // A proven epoch reports the longest age there is.
                    age: if proven {
                        Duration::MAX
                    } else {
                        age_between(modified, service_date(resp.headers()))
                    },
                })
            }
            Err(e) => {
                let e = self.err(e);
                if e.code_is("ContainerNotFound") {
                    Ok(MarkerRead::NoContainer)
                } else if e.code_is("BlobNotFound") {
                    Ok(MarkerRead::NoMarker(e.date))
                } else {
                    Err(e)
                }
            }
        }
    }

    /// How old the container is at least (`Date` - `Last-Modified` - 1 s);
    /// zero if it is gone, or if the credential may not read container
    /// properties (a SAS for the container's blobs only): then only the
    /// marker's age counts, which is never more than the truth.
    async fn container_age(&self) -> std::result::Result<Duration, RequestError> {
        match self.inner.container.get_properties(None).await {
            Ok(resp) => Ok(resp
                .last_modified()
                .ok()
                .flatten()
                .map(|m| age_between(m, service_date(resp.headers())))
                .unwrap_or_default()),
            Err(e) => {
                let e = self.err(e);
                if e.is_not_found() || e.is(StatusCode::Forbidden) {
                    tracing::debug!(error = %e, "the container's age is unknown; counting the marker's only");
                    Ok(Duration::ZERO)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Writes the marker unless someone else has. `no_marker_at` is the
    /// `Date` of the answer that said there was none: the marker must be
    /// written in a later second than that (so its epoch is above every
    /// earlier marker's), so wait a second first, and take it back if the
    /// service's clock says otherwise. Whether this call's marker stands.
    async fn create_marker(
        &self,
        no_marker_at: Option<OffsetDateTime>,
        proven: bool,
    ) -> std::result::Result<bool, RequestError> {
        tokio::time::sleep(MARKER_CREATION_DELAY).await;
        let mut meta = HashMap::new();
        meta.insert(
            MAX_TTL_MS.to_string(),
            self.inner.max_ttl.as_millis().to_string(),
        );
        if proven {
            meta.insert(PROVEN.to_string(), "1".to_string());
        }
        meta.insert(
            PROTOCOL.to_string(),
            leasehold::backend::protocol::PROTOCOL.to_string(),
        );
        let options = BlockBlobClientUploadOptions {
            if_none_match: Some(Etag::from("*")),
            metadata: Some(meta),
            ..Default::default()
        };
        let marker = self.inner.container.blob_client(MARKER);
        match marker
            .upload(RequestContent::from(Vec::<u8>::new()), Some(options))
            .await
        {
            Ok(resp) => {
                let modified = resp.last_modified;
                let too_early = match (modified, no_marker_at) {
                    (Some(m), Some(d)) => m.unix_timestamp() <= d.unix_timestamp(),
                    // Without both times there is nothing to compare: the
                    // wait above is the guarantee.
                    _ => false,
                };
                if too_early {
                    // Another epoch could share this second: remove the
                    // marker (only ours, by its ETag) and try again.
                    let etag = resp.etag;
                    tracing::warn!(
                        container = %self.inner.container_name,
                        "the new epoch marker's time is not after the second Azure said there was none; writing it again"
                    );
                    let options = BlobClientDeleteOptions {
                        if_match: etag,
                        ..Default::default()
                    };
                    if let Err(e) = marker.delete(Some(options)).await {
                        let e = self.err(e);
                        if !(e.is_not_found() || e.is(StatusCode::PreconditionFailed)) {
                            return Err(e);
                        }
                    }
                    return Ok(false);
                } else {
                    tracing::info!(
                        container = %self.inner.container_name,
                        max_ttl = ?self.inner.max_ttl,
                        "wrote the container's store epoch marker"
                    );
                }
                Ok(true)
            }
            Err(e) => {
                let e = self.err(e);
                // Someone else wrote it first (409, or 412 for
                // If-None-Match), or the container went away: read again.
                if e.is(StatusCode::Conflict)
                    || e.is(StatusCode::PreconditionFailed)
                    || e.is_not_found()
                {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Creates the container (an existing one is fine); whether this call
    /// created it.
    async fn create_container(&self) -> std::result::Result<bool, RequestError> {
        match self.inner.container.create(None).await {
            Ok(_) => {
                tracing::info!(container = %self.inner.container_name, "created container");
                Ok(true)
            }
            Err(e) => {
                let e = self.err(e);
                if e.code_is("ContainerAlreadyExists") {
                    Ok(false)
                } else if e.code_is("ContainerBeingDeleted") {
                    // Azure keeps a deleted container's name for a while
                    // (at least 30 s): a retry later may create it.
                    Err(e.retryable())
                } else {
                    Err(e)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(unix: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(unix).unwrap()
    }

    #[test]
    fn epochs_and_ages_from_service_times() {
        let origin = EPOCH_ORIGIN_UNIX_SECS as i64;
        assert_eq!(epoch_of(at(origin + 1_000)), 1_000);
        assert_eq!(epoch_of(at(0)), 1);
        // Whole seconds on both sides: a second less than the difference.
        assert_eq!(age_between(at(100), Some(at(161))), Duration::from_secs(60));
        assert_eq!(age_between(at(100), Some(at(100))), Duration::ZERO);
        assert_eq!(age_between(at(100), Some(at(50))), Duration::ZERO);
        assert_eq!(age_between(at(100), None), Duration::ZERO);
    }

    #[test]
    fn the_marker_is_no_key() {
        assert_eq!(leasehold::backend::names::key_of("", MARKER), None);
    }

    #[test]
    fn recorded_max_ttls_outside_azure_leases_are_ignored() {
        let meta = |v: &str| HashMap::from([(MAX_TTL_MS.to_string(), v.to_string())]);
        assert_eq!(max_ttl_of(&meta("15000")), Some(Duration::from_secs(15)));
        assert_eq!(max_ttl_of(&meta("3600000")), None);
        assert_eq!(max_ttl_of(&meta("x")), None);
    }
}
