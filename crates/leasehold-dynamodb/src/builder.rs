//! Building a [`DynamoDbBackend`]: from code or from a store URL.

use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_dynamodb::config::{ProvideCredentials, Region};
use leasehold::backend::shared_builder::{check_max_ttl, require};
use leasehold::backend::SharedClock;
use leasehold::{Creation, Result};
use leasehold_aws::{RequestCounter, ServiceDate, StoreOptions, WallClock};

use crate::{DynamoDbBackend, TakeoverMode};

/// Builds a [`DynamoDbBackend`].
///
/// ```no_run
/// # async fn f() -> leasehold::Result<()> {
/// use leasehold_dynamodb::DynamoDbBackend;
/// let backend = DynamoDbBackend::builder("locks")
///     .region("eu-west-1")
///     .build()
///     .await?;
/// let store = leasehold::Store::new(backend);
/// # Ok(()) }
/// ```
#[must_use]
pub struct DynamoDbBackendBuilder {
    pub(crate) table: String,
    pub(crate) takeover: TakeoverMode,
    /// Where and how to connect, clocks, max TTL, creating the table.
    pub(crate) options: StoreOptions,
}

// No credentials, ever.
impl std::fmt::Debug for DynamoDbBackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoDbBackendBuilder")
            .field("table", &self.table)
            .field("aws", &self.options.aws)
            .field("takeover", &self.takeover)
            .field("create_table", &self.options.create)
            .finish_non_exhaustive()
    }
}

impl DynamoDbBackend {
    /// A builder for a backend on `table`.
    pub fn builder(table: impl Into<String>) -> DynamoDbBackendBuilder {
        DynamoDbBackendBuilder::new(table)
    }
}

impl DynamoDbBackendBuilder {
    pub(crate) fn new(table: impl Into<String>) -> Self {
        DynamoDbBackendBuilder {
            table: table.into(),
            takeover: TakeoverMode::Observe,
            options: StoreOptions::default(),
        }
    }

    /// The AWS region (otherwise the standard chain's: `AWS_REGION`,
    /// the profile, instance metadata).
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.options.aws.region = Some(region.into());
        self
    }

    /// Another endpoint than AWS's, such as DynamoDB Local (`http://127.0.0.1:8000`).
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

    /// The monotonic clock takeover observations are timed on (the system
    /// clock unless set; tests inject a [`leasehold::backend::ManualClock`] or a
    /// skewed clock).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.options.clock = Some(clock);
        self
    }

    /// The wall clock written into items (`acquired_ms`, `expires_ms`) and,
    /// in [`TakeoverMode::TrustClocks`], compared with them. The system time
    /// unless set; tests inject skewed ones.
    pub fn wall_clock(mut self, wall: WallClock) -> Self {
        self.options.wall = Some(wall);
        self
    }

    /// How a waiter decides that a holder is gone; see [`TakeoverMode`].
    pub fn takeover(mut self, mode: TakeoverMode) -> Self {
        self.takeover = mode;
        self
    }

    /// Extra time a waiter watches an unchanged lease beyond the holder's
    /// TTL (and a 0.1 % clock-rate allowance) before taking it over.
    /// Default 200 ms.
    pub fn takeover_margin(mut self, margin: Duration) -> Self {
        self.options.margin = margin;
        self
    }

    /// The max TTL a table created by this backend records (default 60 s,
    /// [`leasehold::backend::DEFAULT_STORE_MAX_TTL`]; 1 s to 24 h): no lease may be
    /// longer, and after the table is deleted and re-created under a live
    /// holder, grants wait one confirmation window whatever this says (the
    /// quarantine, see the crate docs).
    /// An existing table keeps the max TTL it recorded.
    ///
    /// (There is no item expiry: an item deleted by DynamoDB TTL would take
    /// its fencing counter with it, and deciding when that is safe would
    /// trust a holder's clock.)
    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.options.max_ttl = max_ttl;
        self
    }

    /// Whether to create the table when it does not exist (default: yes).
    pub fn create_table(mut self, create: bool) -> Self {
        self.options.create = create;
        self
    }

    /// What opening may do to the table (default
    /// [`Creation::IfMissing`](leasehold::Creation::IfMissing)): with
    /// `Never`, nothing is created or written (a missing table is
    /// [`Error::NoStore`](leasehold::Error::NoStore), a missing epoch marker
    /// item is not written); with `NewProven`, a table this backend
    /// creates gets a marker item that says its epoch is proven (settled at
    /// once, see [`Creation::NewProven`](leasehold::Creation::NewProven)).
    pub fn creation(mut self, creation: Creation) -> Self {
        self.options.creation = creation;
        self
    }

    /// Loads the configuration, checks (or creates) the table and returns
    /// the backend.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](leasehold::Error::InvalidInput) for a bad
    /// table name, region or endpoint, or a table whose key schema is not
    /// leasehold's; [`Error::Backend`](leasehold::Error::Backend) when
    /// DynamoDB cannot be reached, refuses the credentials, or the table is
    /// missing and may not be created. No error repeats a credential.
    ///
    /// # Cancel safety
    /// Dropping the future may leave a table being created, which a later
    /// build waits for.
    pub async fn build(self) -> Result<DynamoDbBackend> {
        validate_table(&self.table)?;
        let aws = &self.options.aws;
        let sdk = aws.load().await?;
        check_max_ttl(self.options.max_ttl, crate::MIN_TTL, crate::MAX_TTL)?;
        let requests = RequestCounter::default();
        let dates = ServiceDate::default();
        let mut config = aws_sdk_dynamodb::config::Builder::from(&sdk)
            .timeout_config(aws.timeout_config())
            .interceptor(requests.clone())
            .interceptor(dates.clone());
        if let Some(region) = &aws.region {
            config = config.region(Region::new(region.clone()));
        }
        if let Some(endpoint) = &aws.endpoint {
            config = config.endpoint_url(endpoint.clone());
        }
        if let Some(creds) = &aws.credentials {
            config = config.credentials_provider(creds.clone());
        }
        let config = config.build();
        let region = aws.region_of(config.region())?;
        let mut backend = DynamoDbBackend {
            client: aws_sdk_dynamodb::Client::from_conf(config),
            table: self.table,
            takeover: self.takeover,
            settings: self.options.settings(region, requests),
            dates,
            observations: Default::default(),
            fences: Default::default(),
        };
        backend.refresh_epoch().await?;
        // A table created again later is not the operator's new store.
        backend.settings.creation = backend.settings.creation.after_open();
        Ok(backend)
    }
}

/// DynamoDB's rule: 3 to 255 of `A-Z a-z 0-9 _ - .`.
fn validate_table(table: &str) -> Result<()> {
    let ok = (3..=255).contains(&table.len())
        && table
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    require("table name", ok, || {
        format!("{table:?} is not a DynamoDB table name (3-255 characters from A-Z a-z 0-9 _ - .)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_testkit::builders::assert_names;

    #[test]
    fn names() {
        assert_names(validate_table, &["locks"], &["lo", "bad name"]);
    }
}
