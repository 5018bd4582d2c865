//! Building a [`DynamoDbBackend`]: from code or from a store URL.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{
    ConfigBag, Intercept, ProvideCredentials, Region, RuntimeComponents, SharedCredentialsProvider,
};
use aws_sdk_dynamodb::error::BoxError;
use leasehold::{Error, Result, SharedClock, SystemClock};

use crate::{DynamoDbBackend, TakeoverMode, WallClock};

const DEFAULT_MARGIN: Duration = Duration::from_millis(200);

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
    pub(crate) region: Option<String>,
    pub(crate) endpoint: Option<String>,
    pub(crate) profile: Option<String>,
    pub(crate) credentials: Option<SharedCredentialsProvider>,
    pub(crate) sdk_config: Option<SdkConfig>,
    pub(crate) clock: Option<SharedClock>,
    pub(crate) wall: Option<WallClock>,
    pub(crate) takeover: TakeoverMode,
    pub(crate) margin: Duration,
    pub(crate) max_ttl: Duration,
    pub(crate) create_table: bool,
    pub(crate) creation: leasehold::Creation,
    pub(crate) attempt_timeout: Duration,
}

impl fmt::Debug for DynamoDbBackendBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No credentials, ever.
        f.debug_struct("DynamoDbBackendBuilder")
            .field("table", &self.table)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("profile", &self.profile)
            .field("takeover", &self.takeover)
            .field("create_table", &self.create_table)
            .finish_non_exhaustive()
    }
}

impl DynamoDbBackendBuilder {
    pub(crate) fn new(table: impl Into<String>) -> Self {
        DynamoDbBackendBuilder {
            table: table.into(),
            region: None,
            endpoint: None,
            profile: None,
            credentials: None,
            sdk_config: None,
            clock: None,
            wall: None,
            takeover: TakeoverMode::Observe,
            margin: DEFAULT_MARGIN,
            max_ttl: leasehold::DEFAULT_STORE_MAX_TTL,
            create_table: true,
            creation: leasehold::Creation::IfMissing,
            attempt_timeout: Duration::from_secs(5),
        }
    }

    /// The AWS region (otherwise the standard chain's: `AWS_REGION`, the
    /// profile, instance metadata).
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Another endpoint than AWS's, such as DynamoDB Local
    /// (`http://127.0.0.1:8000`).
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The AWS profile to read from the shared config and credentials files.
    pub fn profile(mut self, profile: impl Into<String>) -> Self {
        self.profile = Some(profile.into());
        self
    }

    /// Credentials to use instead of the standard chain (static test
    /// credentials for an emulator, or a provider of your own).
    pub fn credentials_provider(mut self, provider: impl ProvideCredentials + 'static) -> Self {
        self.credentials = Some(SharedCredentialsProvider::new(provider));
        self
    }

    /// Start from this SDK configuration instead of loading the standard
    /// one; region, endpoint and credentials set on this builder still
    /// override it.
    pub fn sdk_config(mut self, config: SdkConfig) -> Self {
        self.sdk_config = Some(config);
        self
    }

    /// The monotonic clock takeover observations are timed on (the system
    /// clock unless set; tests inject a [`leasehold::ManualClock`] or a
    /// skewed clock).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The wall clock written into items (`acquired_ms`, `expires_ms`) and,
    /// in [`TakeoverMode::TrustClocks`], compared with them. The system time
    /// unless set; tests inject skewed ones.
    pub fn wall_clock(mut self, wall: WallClock) -> Self {
        self.wall = Some(wall);
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
        self.margin = margin;
        self
    }

    /// The max TTL a table created by this backend records (default 60 s,
    /// [`leasehold::DEFAULT_STORE_MAX_TTL`]; 1 s to 24 h): no lease may be
    /// longer, and after the table is deleted and re-created under a live
    /// holder, grants wait one confirmation window whatever this says (the
    /// quarantine, see the crate docs).
    /// An existing table keeps the max TTL it recorded.
    ///
    /// (There is no item expiry: an item deleted by DynamoDB TTL would take
    /// its fencing counter with it, and deciding when that is safe would
    /// trust a holder's clock.)
    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.max_ttl = max_ttl;
        self
    }

    /// Whether to create the table when it does not exist (default: yes).
    pub fn create_table(mut self, create: bool) -> Self {
        self.create_table = create;
        self
    }

    /// What opening may do to the table (default
    /// [`Creation::IfMissing`](leasehold::Creation::IfMissing)): with
    /// `Never`, nothing is created or written (a missing table is
    /// [`Error::NoStore`](leasehold::Error::NoStore), a missing epoch marker
    /// item is not written); with `NewProven`, a table this backend
    /// creates gets a marker item that says its epoch is proven (settled at
    /// once, see [`Creation::NewProven`](leasehold::Creation::NewProven)).
    pub fn creation(mut self, creation: leasehold::Creation) -> Self {
        self.creation = creation;
        self
    }

    /// Time limit of one HTTP attempt (default 5 s); the whole operation,
    /// with the SDK's retries, is limited to three times that.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// Loads the configuration, checks (or creates) the table and returns
    /// the backend.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad table name, region or endpoint, or
    /// a table whose key schema is not leasehold's; [`Error::Backend`] when
    /// DynamoDB cannot be reached, refuses the credentials, or the table is
    /// missing and may not be created. No error repeats a credential.
    ///
    /// # Cancel safety
    /// Dropping the future may leave a table being created, which a later
    /// build waits for.
    pub async fn build(self) -> Result<DynamoDbBackend> {
        validate_table(&self.table)?;
        if let Some(region) = &self.region {
            validate_region(region)?;
        }
        if let Some(endpoint) = &self.endpoint {
            validate_endpoint(endpoint)?;
        }
        let sdk = match self.sdk_config.clone() {
            Some(c) => c,
            None => {
                let mut loader = aws_config::defaults(BehaviorVersion::latest());
                // The SDK's hyper client with rustls on *ring* (see the
                // crate docs' features), for DynamoDB and the credential
                // chain's endpoints alike.
                #[cfg(feature = "https")]
                {
                    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
                    loader = loader.http_client(
                        aws_smithy_http_client::Builder::new()
                            .tls_provider(Provider::Rustls(CryptoMode::Ring))
                            .build_https(),
                    );
                }
                if let Some(profile) = &self.profile {
                    loader = loader.profile_name(profile);
                }
                if let Some(region) = &self.region {
                    loader = loader.region(Region::new(region.clone()));
                }
                if let Some(creds) = &self.credentials {
                    loader = loader.credentials_provider(creds.clone());
                }
                loader.load().await
            }
        };
        if !(crate::MIN_TTL..=crate::MAX_TTL).contains(&self.max_ttl) {
            return Err(Error::invalid(
                "max ttl",
                format!(
                    "{:?} is outside {:?}..={:?}",
                    self.max_ttl,
                    crate::MIN_TTL,
                    crate::MAX_TTL
                ),
            ));
        }
        let requests = Arc::new(AtomicU64::new(0));
        let dates = crate::epoch::ServiceDate::default();
        let mut config = aws_sdk_dynamodb::config::Builder::from(&sdk)
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(self.attempt_timeout.min(Duration::from_secs(3)))
                    .operation_attempt_timeout(self.attempt_timeout)
                    .operation_timeout(self.attempt_timeout * 3)
                    .build(),
            )
            .interceptor(RequestCounter(requests.clone()))
            .interceptor(dates.clone());
        if let Some(region) = &self.region {
            config = config.region(Region::new(region.clone()));
        }
        if let Some(endpoint) = &self.endpoint {
            config = config.endpoint_url(endpoint.clone());
        }
        if let Some(creds) = &self.credentials {
            config = config.credentials_provider(creds.clone());
        }
        let config = config.build();
        let Some(region) = config.region().map(|r| r.to_string()) else {
            return Err(Error::invalid(
                "region",
                "no AWS region: add region=… to the store URL, or set AWS_REGION or a region in your AWS profile",
            ));
        };
        validate_region(&region)?;
        let mut backend = DynamoDbBackend {
            client: aws_sdk_dynamodb::Client::from_conf(config),
            table: self.table,
            region,
            endpoint: self.endpoint,
            clock: self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
            wall: self.wall.unwrap_or_else(|| Arc::new(SystemTime::now)),
            takeover: self.takeover,
            margin: self.margin,
            max_ttl: self.max_ttl,
            create_table: self.create_table && self.creation.creates(),
            creation: self.creation,
            epoch: std::sync::Mutex::new((
                leasehold::StoreEpoch::new(0, self.max_ttl),
                Duration::ZERO,
            )),
            dates,
            observations: Default::default(),
            requests,
        };
        backend.refresh_epoch().await?;
        // A table created again later is not the operator's new store.
        backend.creation = backend.creation.after_open();
        Ok(backend)
    }
}

/// DynamoDB's rule: 3 to 255 of `A-Z a-z 0-9 _ - .`.
fn validate_table(table: &str) -> Result<()> {
    let ok = (3..=255).contains(&table.len())
        && table
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "table name",
            format!(
                "{table:?} is not a DynamoDB table name (3-255 characters from A-Z a-z 0-9 _ - .)"
            ),
        ))
    }
}

/// Region names look like `us-east-1`: lowercase letters, digits and
/// hyphens. Anything else would end up in a host name.
fn validate_region(region: &str) -> Result<()> {
    let ok = (1..=64).contains(&region.len())
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !region.starts_with('-')
        && !region.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "region",
            format!("{region:?} is not an AWS region name (such as us-east-1)"),
        ))
    }
}

fn validate_endpoint(endpoint: &str) -> Result<()> {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"));
    let Some(rest) = rest else {
        return Err(Error::invalid(
            "endpoint",
            "the endpoint must be an http:// or https:// URL, such as http://127.0.0.1:8000",
        ));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        // Not echoed: the user info may be a secret.
        return Err(Error::invalid(
            "endpoint",
            "the endpoint must not carry user info; credentials come from the AWS credential chain",
        ));
    }
    if authority.is_empty() {
        return Err(Error::invalid(
            "endpoint",
            format!("{endpoint:?} has no host"),
        ));
    }
    Ok(())
}

/// Counts HTTP requests sent (every attempt, retries included).
#[derive(Debug)]
struct RequestCounter(Arc<AtomicU64>);

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "leasehold::RequestCounter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> std::result::Result<(), BoxError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_table("locks").is_ok());
        assert!(validate_table("lo").is_err());
        assert!(validate_table("bad name").is_err());
        assert!(validate_region("us-east-1").is_ok());
        assert!(validate_region("US_EAST").is_err());
        assert!(validate_region("evil.example.com/").is_err());
        assert!(validate_endpoint("http://127.0.0.1:8000").is_ok());
        assert!(validate_endpoint("ftp://x").is_err());
        let err = validate_endpoint("http://AKID:hunter2@host").unwrap_err();
        assert!(!err.to_string().contains("hunter2"));
    }
}
