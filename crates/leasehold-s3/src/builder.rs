//! Building an [`S3Backend`]: from code or from a store URL.

use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_s3::config::{
    ProvideCredentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use leasehold::backend::shared_builder::{check_max_ttl, require};
use leasehold::backend::SharedClock;
use leasehold::{Creation, Result};
use leasehold_aws::{RequestCounter, StoreOptions, WallClock};

use crate::S3Backend;

/// Builds an [`S3Backend`].
///
/// ```no_run
/// # async fn f() -> leasehold::Result<()> {
/// use leasehold_s3::S3Backend;
/// let backend = S3Backend::builder("my-locks")
///     .prefix("jobs")
///     .region("eu-west-1")
///     .build()
///     .await?;
/// let store = leasehold::Store::new(backend);
/// # Ok(()) }
/// ```
#[must_use]
pub struct S3BackendBuilder {
    pub(crate) bucket: String,
    pub(crate) prefix: String,
    /// Where and how to connect, clocks, max TTL, creating the bucket.
    pub(crate) options: StoreOptions,
}

impl std::fmt::Debug for S3BackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3BackendBuilder")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("aws", &self.options.aws)
            .field("create_bucket", &self.options.create)
            .finish_non_exhaustive()
    }
}

impl S3Backend {
    /// A builder for a backend on `bucket`.
    pub fn builder(bucket: impl Into<String>) -> S3BackendBuilder {
        S3BackendBuilder::new(bucket)
    }
}

impl S3BackendBuilder {
    pub(crate) fn new(bucket: impl Into<String>) -> Self {
        S3BackendBuilder {
            bucket: bucket.into(),
            prefix: String::new(),
            options: StoreOptions::default(),
        }
    }

    /// The AWS region (otherwise the standard chain's: `AWS_REGION`,
    /// the profile, instance metadata).
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.options.aws.region = Some(region.into());
        self
    }

    /// Another endpoint than AWS's, such as an emulator (`http://127.0.0.1:45399`, moto) or an S3-compatible service; requests then use path-style addressing (`ENDPOINT/BUCKET/OBJECT`).
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.options.aws.endpoint = Some(endpoint.into());
        self
    }

    /// The AWS profile to read from the shared config and credentials
    /// files.
    pub fn profile(mut self, profile: impl Into<String>) -> Self {
        self.options.aws.profile = Some(profile.into());
        self
    }

    /// Credentials to use instead of the standard chain (static test
    /// credentials for an emulator, or a provider of your own).
    pub fn credentials_provider(mut self, provider: impl ProvideCredentials + 'static) -> Self {
        self.options.aws.set_credentials(provider);
        self
    }

    /// Start from this SDK configuration instead of loading the
    /// standard one; region, endpoint and credentials set on this
    /// builder still override it.
    pub fn sdk_config(mut self, config: SdkConfig) -> Self {
        self.options.aws.sdk_config = Some(config);
        self
    }

    /// Time limit of one HTTP attempt (default 5 s); the whole
    /// operation, with the SDK's retries, is limited to three times
    /// that.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.options.aws.attempt_timeout = timeout;
        self
    }

    /// Keep the store's objects under this prefix (a key-shaped path such
    /// as `jobs/prod`; default: the bucket's root). Each prefix is a store
    /// of its own, with its own epoch.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The monotonic clock takeover observations are timed on (the system
    /// clock unless set; tests inject a [`leasehold::backend::ManualClock`]).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.options.clock = Some(clock);
        self
    }

    /// The wall clock written into records (`acquired_ms`, `expires_ms`,
    /// for display only). The system time unless set.
    pub fn wall_clock(mut self, wall: WallClock) -> Self {
        self.options.wall = Some(wall);
        self
    }

    /// Extra time a waiter watches an unchanged lease beyond the holder's
    /// TTL (and a 0.1 % clock-rate allowance) before taking it over.
    /// Default 200 ms.
    pub fn takeover_margin(mut self, margin: Duration) -> Self {
        self.options.margin = margin;
        self
    }

    /// The max TTL a store started by this backend records (default 60 s,
    /// [`leasehold::backend::DEFAULT_STORE_MAX_TTL`]; 4 s to 24 h): no lease may be
    /// longer. An existing store keeps the max TTL it recorded.
    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.options.max_ttl = max_ttl;
        self
    }

    /// Whether to create the bucket when it does not exist (default: yes).
    pub fn create_bucket(mut self, create: bool) -> Self {
        self.options.create = create;
        self
    }

    /// What opening may do (default
    /// [`Creation::IfMissing`](leasehold::Creation::IfMissing)): with
    /// `Never`, nothing is created or written (a missing bucket or epoch
    /// marker is [`Error::NoStore`](leasehold::Error::NoStore)); with
    /// `NewProven`, a marker this backend writes says its epoch is proven
    /// (settled at once, see
    /// [`Creation::NewProven`](leasehold::Creation::NewProven)).
    pub fn creation(mut self, creation: Creation) -> Self {
        self.options.creation = creation;
        self
    }

    /// Loads the configuration, checks (or creates) the bucket, reads (or
    /// starts) the store's epoch and returns the backend.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](leasehold::Error::InvalidInput) for a bad
    /// bucket name, prefix, region or endpoint;
    /// [`Error::NoStore`](leasehold::Error::NoStore) for a missing bucket or
    /// store with [`Creation::Never`](leasehold::Creation::Never);
    /// [`Error::Backend`](leasehold::Error::Backend)
    /// when S3 cannot be reached, refuses the credentials, or the bucket is
    /// missing and may not be created. No error repeats a credential.
    pub async fn build(self) -> Result<S3Backend> {
        validate_bucket(&self.bucket)?;
        let prefix = leasehold::backend::names::object_prefix(&self.prefix)?;
        check_max_ttl(self.options.max_ttl, crate::MIN_TTL, crate::MAX_TTL)?;
        let aws = &self.options.aws;
        let sdk = aws.load().await?;
        let requests = RequestCounter::default();
        let mut config = aws_sdk_s3::config::Builder::from(&sdk)
            .timeout_config(aws.timeout_config())
            .interceptor(requests.clone())
            // Records are a few hundred bytes: no checksums beyond what
            // S3 requires (and no aws-chunked uploads).
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        if let Some(region) = &aws.region {
            config = config.region(Region::new(region.clone()));
        }
        if let Some(endpoint) = &aws.endpoint {
            config = config.endpoint_url(endpoint.clone()).force_path_style(true);
        }
        if let Some(creds) = &aws.credentials {
            config = config.credentials_provider(creds.clone());
        }
        let config = config.build();
        let region = aws.region_of(config.region())?;
        let mut backend = S3Backend::new(
            aws_sdk_s3::Client::from_conf(config),
            self.bucket,
            prefix,
            self.options.settings(region, requests),
        );
        backend
            .refresh_epoch()
            .await
            .map_err(|e| backend.connect_error(e))?;
        // A store started again later is not the operator's new store.
        backend.settings.creation = backend.settings.creation.after_open();
        Ok(backend)
    }
}

/// S3's rule for new buckets: 3 to 63 of `a-z 0-9 . -`, starting and
/// ending with a letter or digit, no `..`.
fn validate_bucket(bucket: &str) -> Result<()> {
    let ok = (3..=63).contains(&bucket.len())
        && bucket
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-'))
        && bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
        && bucket.ends_with(|c: char| c.is_ascii_alphanumeric())
        && !bucket.contains("..");
    require("bucket", ok, || {
        format!("{bucket:?} is not an S3 bucket name (3-63 characters from a-z 0-9 . -, starting and ending with a letter or digit)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_testkit::builders::assert_names;

    #[test]
    fn bucket_names() {
        let bad = ["ab", "My-Locks", "-locks", "locks-", "a..b", "a_b", "a/b"];
        assert_names(validate_bucket, &["my-locks", "a.b-c1"], &bad);
    }
}
