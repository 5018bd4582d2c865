//! What leasehold's AWS stores share, written once: loading the SDK
//! configuration ([`AwsOptions`]), counting requests ([`RequestCounter`]),
//! reading the service's clock from responses ([`ServiceDate`]), checking
//! region and endpoint names, and turning SDK errors into
//! [`leasehold::Error`]s ([`map_sdk`]). The DynamoDB store
//! (`leasehold-dynamodb`) and the S3 store (`leasehold-s3`) build on it;
//! nothing here is specific to either service.
//!
//! The interceptors implement the SDKs' common `Intercept` trait (from
//! `aws-smithy-runtime-api`, which every AWS SDK crate re-exports), so one
//! type serves every service's client.

#![warn(missing_docs)]

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_config::{BehaviorVersion, SdkConfig};
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use aws_smithy_types::date_time::{DateTime, Format};
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use aws_smithy_types::timeout::TimeoutConfig;
use aws_types::region::Region;
use leasehold::backend::shared_builder::require;
use leasehold::{
    backend::{
        params::{QueryParams, QuerySpec},
        AcquireOutcome, AcquireRequest, SharedClock, StoreEpoch, SystemClock,
    },
    Creation, Error, Result,
};

/// A wall clock: the time of day, as [`SystemTime::now`] gives it.
pub type WallClock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// How long a waiter watches an unchanged lease beyond the holder's TTL
/// (and a 0.1 % clock-rate allowance) before taking it over, unless the
/// builder's `takeover_margin` says otherwise.
pub const DEFAULT_TAKEOVER_MARGIN: Duration = Duration::from_millis(200);

/// A message-only error, the source of the [`Error::Backend`]s built here.
#[derive(Debug)]
pub struct Message(pub String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Message {}

/// Adds where a store tried to connect to an error from opening it:
/// `place` (such as `table "locks"`), the region and the endpoint (or, with
/// none, a hint that the region's own endpoint was used).
pub fn connect_error(err: Error, place: &str, region: &str, endpoint: Option<&str>) -> Error {
    match err {
        Error::Backend {
            backend,
            operation,
            retryable,
            source,
        } => Error::backend(
            backend,
            operation,
            retryable,
            Message(match endpoint {
                Some(endpoint) => format!("{source} ({place}, region {region}, endpoint {endpoint})"),
                None => format!(
                    "{source} ({place}, region {region}, the region's AWS endpoint; is the region name right?)"
                ),
            }),
        ),
        other => other,
    }
}

/// A store's epoch as last read, and when (on the backend's monotonic
/// clock): asked for later, its age has grown by the time since.
#[derive(Debug)]
pub struct EpochCell {
    clock: SharedClock,
    read: Mutex<(StoreEpoch, Duration)>,
}

impl EpochCell {
    /// An epoch 0 with `max_ttl`, read at the clock's origin: what a
    /// backend holds before its first read.
    pub fn new(clock: SharedClock, max_ttl: Duration) -> Self {
        EpochCell {
            clock,
            read: Mutex::new((StoreEpoch::new(0, max_ttl), Duration::ZERO)),
        }
    }

    /// The epoch, its age (where known) as of now.
    pub fn get(&self) -> StoreEpoch {
        let (epoch, read_at) = self.read.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let since = self.clock.now().saturating_sub(read_at);
        let age = epoch.age.map(|a| a.saturating_add(since));
        epoch.with_age(age)
    }

    /// Keeps `epoch`, read just now.
    pub fn set(&self, epoch: StoreEpoch) {
        *self.read.lock().unwrap_or_else(|e| e.into_inner()) = (epoch, self.clock.now());
    }

    /// Whether `request` may be tried in the epoch as it stands: `Ok(epoch)`
    /// when it names the current epoch and its TTL is within the epoch's
    /// max TTL; `Err(outcome)` with the answer to give it otherwise
    /// ([`AcquireOutcome::OtherEpoch`] with the current epoch, or an
    /// [`Error::InvalidInput`](leasehold::Error::InvalidInput) for a TTL
    /// above the max TTL). `store` names the store in messages ("table").
    pub fn admit(
        &self,
        request: &AcquireRequest,
        store: &str,
    ) -> std::result::Result<u64, Box<Result<AcquireOutcome>>> {
        let current = self.get();
        let Some(epoch) = request.epoch.filter(|e| *e == current.epoch) else {
            return Err(Box::new(Ok(AcquireOutcome::OtherEpoch(current))));
        };
        if request.ttl > current.max_ttl {
            return Err(Box::new(Err(leasehold::Error::invalid(
                "ttl",
                format!(
                    "{:?} is above the {store}'s max TTL of {:?} (no lease may be longer: it bounds the wait after the {store} is lost)",
                    request.ttl, current.max_ttl
                ),
            ))));
        }
        Ok(epoch)
    }
}

/// What every AWS store's builder holds besides its table or bucket:
/// where and how to connect, the clocks takeovers are timed on, the
/// takeover margin, the max TTL a new store records, whether the table or
/// bucket may be created, and what opening may do.
/// [`settings`](Self::settings) turns it into what the backend keeps.
pub struct StoreOptions {
    /// Region, endpoint, profile, credentials and timeouts.
    pub aws: AwsOptions,
    /// The monotonic clock (the system's unless set).
    pub clock: Option<SharedClock>,
    /// The wall clock (the system time unless set).
    pub wall: Option<WallClock>,
    /// See [`DEFAULT_TAKEOVER_MARGIN`].
    pub margin: Duration,
    /// The max TTL a store started by the backend records.
    pub max_ttl: Duration,
    /// Whether to create the table or bucket when it does not exist.
    pub create: bool,
    /// What opening may do.
    pub creation: Creation,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            aws: AwsOptions::default(),
            clock: None,
            wall: None,
            margin: DEFAULT_TAKEOVER_MARGIN,
            max_ttl: leasehold::backend::DEFAULT_STORE_MAX_TTL,
            create: true,
            creation: Creation::IfMissing,
        }
    }
}

impl StoreOptions {
    /// Takes the parameters every AWS store's URL has (`region`,
    /// `endpoint`, `profile`, `max_ttl`, and `create` under the store's
    /// name for it, such as `create_table`) from a parsed query.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed `max_ttl` or `create`.
    pub fn read_query(&mut self, query: &QueryParams, create: &str) -> Result<()> {
        self.aws.read_query(query);
        if let Some(max_ttl) = query.duration("max_ttl")? {
            self.max_ttl = max_ttl;
        }
        if let Some(on) = query.boolean(create)? {
            self.create = on;
        }
        Ok(())
    }

    /// What the backend keeps, for a client that signs for `region` and
    /// counts its requests with `requests`: the clocks (the system's where
    /// unset), whether it may create the table or bucket (only if
    /// `creation` allows it), and an epoch 0 until the first read.
    pub fn settings(self, region: String, requests: RequestCounter) -> StoreSettings {
        let clock: SharedClock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        StoreSettings {
            region,
            endpoint: self.aws.endpoint,
            profile: self.aws.profile,
            epoch: EpochCell::new(clock.clone(), self.max_ttl),
            created: std::sync::OnceLock::new(),
            clock,
            wall: self.wall.unwrap_or_else(|| Arc::new(SystemTime::now)),
            margin: self.margin,
            max_ttl: self.max_ttl,
            create: self.create && self.creation.creates(),
            creation: self.creation,
            requests,
        }
    }
}

/// What an AWS store's backend keeps of its builder's [`StoreOptions`].
pub struct StoreSettings {
    /// The region requests are signed for.
    pub region: String,
    /// Another endpoint than AWS's, if any.
    pub endpoint: Option<String>,
    /// The AWS profile named in the options, if any.
    pub profile: Option<String>,
    /// The monotonic clock takeover observations are timed on.
    pub clock: SharedClock,
    /// The wall clock written into records.
    pub wall: WallClock,
    /// See [`DEFAULT_TAKEOVER_MARGIN`].
    pub margin: Duration,
    /// The max TTL a store created (or marked) by this backend records.
    pub max_ttl: Duration,
    /// Whether the table or bucket may be created.
    pub create: bool,
    /// What opening (and any later look at the epoch) may do.
    pub creation: Creation,
    /// The store's epoch as last read, and when (on `clock`).
    pub epoch: EpochCell,
    /// Whether the first reading of the epoch (while building) created the
    /// store: see [`Backend::created_at_open`](leasehold::backend::Backend::created_at_open).
    pub created: std::sync::OnceLock<bool>,
    /// The requests sent.
    pub requests: RequestCounter,
}

impl StoreSettings {
    /// Whether the first reading of the epoch (while building) created the
    /// store, once it was read: the backend's
    /// [`Backend::created_at_open`](leasehold::backend::Backend::created_at_open).
    pub fn created_at_open(&self) -> Option<bool> {
        self.created.get().copied()
    }

    /// Adds where the backend tried to connect to an error from opening
    /// `place` (such as `table "locks"`); see [`connect_error`].
    pub fn connect_error(&self, err: Error, place: &str) -> Error {
        let err = connect_error(err, place, &self.region, self.endpoint.as_deref());
        match (err, &self.profile) {
            // A profile that names nothing gives only the chain's own
            // words ("could not get AWS credentials ..."): name it.
            (
                Error::Backend {
                    backend,
                    operation,
                    retryable,
                    source,
                },
                Some(profile),
            ) if source.to_string().contains("credentials") => Error::backend(
                backend,
                operation,
                retryable,
                Message(format!(
                    "{source}; the store URL names the profile {profile:?}: is it in ~/.aws/config or ~/.aws/credentials (or the files AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE name)?"
                )),
            ),
            (err, _) => err,
        }
    }
}

/// The settings every AWS store's builder takes: where to connect, as whom,
/// and how long one attempt may take. [`load`](Self::load) turns them into
/// an [`SdkConfig`], and the stores' client configurations start from it.
#[derive(Clone)]
pub struct AwsOptions {
    /// The region (otherwise the standard chain's).
    pub region: Option<String>,
    /// Another endpoint than AWS's (an emulator).
    pub endpoint: Option<String>,
    /// The AWS profile to read.
    pub profile: Option<String>,
    /// Credentials instead of the standard chain.
    pub credentials: Option<SharedCredentialsProvider>,
    /// A configuration to start from instead of loading the standard one.
    pub sdk_config: Option<SdkConfig>,
    /// Time limit of one HTTP attempt; the operation, with the SDK's
    /// retries, gets three times that.
    pub attempt_timeout: Duration,
}

impl Default for AwsOptions {
    fn default() -> Self {
        AwsOptions {
            region: None,
            endpoint: None,
            profile: None,
            credentials: None,
            sdk_config: None,
            attempt_timeout: Duration::from_secs(5),
        }
    }
}

// No credentials, ever.
impl fmt::Debug for AwsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsOptions")
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("profile", &self.profile)
            .field("attempt_timeout", &self.attempt_timeout)
            .finish_non_exhaustive()
    }
}

impl AwsOptions {
    /// Sets the credentials provider.
    pub fn set_credentials(&mut self, provider: impl ProvideCredentials + 'static) {
        self.credentials = Some(SharedCredentialsProvider::new(provider));
    }

    /// The region, endpoint and profile, for tests.
    #[doc(hidden)]
    pub fn names(&self) -> (Option<&str>, Option<&str>, Option<&str>) {
        (
            self.region.as_deref(),
            self.endpoint.as_deref(),
            self.profile.as_deref(),
        )
    }

    /// Takes the parameters every AWS store's URL has (`region`,
    /// `endpoint`, `profile`) from a parsed query.
    pub fn read_query(&mut self, query: &QueryParams) {
        for (name, field) in [
            ("region", &mut self.region),
            ("endpoint", &mut self.endpoint),
            ("profile", &mut self.profile),
        ] {
            if let Some(value) = query.string(name) {
                *field = Some(value.to_string());
            }
        }
    }

    /// Checks the region and endpoint names, then loads the SDK
    /// configuration: the one given, or the standard chain's (environment,
    /// profile files, web identity, container and instance metadata) with
    /// the profile, region and credentials set here.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed region or endpoint.
    pub async fn load(&self) -> Result<SdkConfig> {
        if let Some(region) = &self.region {
            validate_region(region)?;
        }
        if let Some(endpoint) = &self.endpoint {
            validate_endpoint(endpoint)?;
        }
        if let Some(config) = &self.sdk_config {
            return Ok(config.clone());
        }
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        // The SDK's hyper client with rustls on *ring* (see the stores'
        // docs), for the service and the credential chain's endpoints alike.
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
        Ok(loader.load().await)
    }

    /// The timeouts of one operation: connect within 3 s (or the attempt
    /// timeout, if shorter), each attempt within the attempt timeout, the
    /// whole operation within three times that.
    pub fn timeout_config(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.attempt_timeout.min(Duration::from_secs(3)))
            .operation_attempt_timeout(self.attempt_timeout)
            .operation_timeout(self.attempt_timeout * 3)
            .build()
    }

    /// The region a client built from `configured` (its region, if any)
    /// and these options signs for, checked.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when there is none, or it is malformed.
    pub fn region_of(&self, configured: Option<&Region>) -> Result<String> {
        let region = self
            .region
            .clone()
            .or_else(|| configured.map(|r| r.to_string()));
        let Some(region) = region else {
            return Err(Error::invalid(
                "region",
                "no AWS region: add region=… to the store URL, or set AWS_REGION or a region in your AWS profile",
            ));
        };
        validate_region(&region)?;
        Ok(region)
    }
}

/// Splits an AWS store's URL `SCHEME://REST?QUERY` (`spec`'s store name
/// is the scheme) and parses its query: `REST` and the parameters.
///
/// # Errors
/// [`Error::InvalidInput`] ("store URL") for another scheme (saying that
/// `name`, such as "a DynamoDB store URL", starts with the scheme, then
/// `form`), or as [`QuerySpec::parse`].
pub fn parse_store_url<'u>(
    url: &'u str,
    spec: &QuerySpec,
    name: &str,
    form: &str,
) -> Result<(&'u str, QueryParams)> {
    let scheme = spec.store();
    let rest = url
        .strip_prefix(scheme)
        .and_then(|rest| rest.strip_prefix("://"))
        .ok_or_else(|| {
            Error::invalid(
                "store URL",
                format!("{name} starts with {scheme}://; {form}"),
            )
        })?;
    spec.parse_url(rest)
}

/// Region names look like `us-east-1`: lowercase letters, digits and
/// hyphens. Anything else would end up in a host name.
///
/// # Errors
/// [`Error::InvalidInput`] naming the region.
pub fn validate_region(region: &str) -> Result<()> {
    let ok = (1..=64).contains(&region.len())
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !region.starts_with('-')
        && !region.ends_with('-');
    require("region", ok, || {
        format!("{region:?} is not an AWS region name (such as us-east-1)")
    })
}

/// An endpoint is an `http://` or `https://` URL with a host and no user
/// info (which is refused without being repeated: it may be a secret).
///
/// # Errors
/// [`Error::InvalidInput`] saying what is wrong.
pub fn validate_endpoint(endpoint: &str) -> Result<()> {
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
#[derive(Debug, Clone, Default)]
pub struct RequestCounter(Arc<AtomicU64>);

impl RequestCounter {
    /// How many requests were sent so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

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

/// Records the `Date` header of every response: the service's clock, in
/// whole seconds (truncated), as of the response.
#[derive(Debug, Clone, Default)]
pub struct ServiceDate(Arc<Mutex<Option<SystemTime>>>);

impl ServiceDate {
    /// The `Date` of the last response, forgetting it.
    pub fn take(&self) -> Option<SystemTime> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl Intercept for ServiceDate {
    fn name(&self) -> &'static str {
        "leasehold::ServiceDate"
    }

    fn read_before_deserialization(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> std::result::Result<(), BoxError> {
        let date = context.response().headers().get("date").and_then(http_date);
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = date;
        Ok(())
    }
}

/// An HTTP date (`Date`, `Last-Modified`) as a time.
pub fn http_date(text: &str) -> Option<SystemTime> {
    DateTime::from_str(text, Format::HttpDate)
        .ok()
        .and_then(|d| SystemTime::try_from(d).ok())
}

/// How one AWS service's errors read: the store's name, the service's,
/// and which of its error codes mean what.
#[derive(Debug)]
pub struct Service {
    /// The store's name in errors ("dynamodb", "s3").
    pub backend: &'static str,
    /// The service's name in messages ("DynamoDB", "S3").
    pub name: &'static str,
    /// Error codes after which a later retry may succeed.
    pub retryable_codes: &'static [&'static str],
    /// Error codes that mean the credentials are missing, wrong or not
    /// allowed: said plainly, since the SDK's own text can be terse.
    pub auth_codes: &'static [&'static str],
    /// The error code that means the store's table or bucket is missing.
    pub not_found_code: &'static str,
    /// How messages name the table or bucket (such as `table "locks"`).
    pub place: fn(&str) -> String,
}

impl Service {
    /// A failure of `operation` the store itself finds (no SDK error),
    /// with `text` saying what.
    pub fn error(
        &self,
        operation: &'static str,
        retryable: bool,
        text: impl Into<String>,
    ) -> Error {
        Error::backend(self.backend, operation, retryable, Message(text.into()))
    }

    /// Maps an SDK failure of `operation` on the table or bucket `name`
    /// into a [`leasehold::Error`] ([`map_sdk`]).
    pub fn map_sdk<E: ServiceError>(
        &self,
        name: &str,
        operation: &'static str,
        err: SdkError<E, HttpResponse>,
    ) -> Error {
        map_sdk(self, &(self.place)(name), operation, err)
    }
}

/// What an SDK operation's error is ([`map_sdk`] reads its code and
/// message); every SDK operation's error type is one.
pub trait ServiceError: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static {}

impl<E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static> ServiceError for E {}

/// Maps an SDK failure of `operation` on `what` (the table or bucket, as
/// the messages should name it) into a [`leasehold::Error`].
///
/// The text comes from the SDK's error chain, which names the failure (and
/// the service's code and message) but never the credentials.
pub fn map_sdk<E: ServiceError>(
    service: &Service,
    what: &str,
    operation: &'static str,
    err: SdkError<E, HttpResponse>,
) -> Error {
    let chain = match &err {
        SdkError::ServiceError(se) => {
            let code = se.err().code().unwrap_or("unknown error");
            match se.err().message() {
                Some(m) => format!("{code}: {m}"),
                None => code.to_string(),
            }
        }
        other => leasehold::backend::error_chain(other),
    };
    let (retryable, text) = match &err {
        SdkError::ConstructionFailure(_) => (
            false,
            format!(
                "could not build the request (is a region or are credentials missing?): {chain}"
            ),
        ),
        SdkError::TimeoutError(_) => (
            true,
            format!("no answer in time; the request may or may not have been applied: {chain}"),
        ),
        SdkError::DispatchFailure(d) => {
            // Identity resolution failures surface here too, and are not
            // transient in the way a refused connection may be.
            let no_credentials = chain.contains("credentials") || chain.contains("identity");
            if chain.contains("no identity resolver") {
                (
                    false,
                    "no AWS credentials: none are configured (the standard chain looks at the environment, profile files, web identity, container and instance metadata)".to_string(),
                )
            } else if no_credentials {
                (
                    false,
                    format!("could not get AWS credentials from the standard chain (environment, profile, web identity, instance metadata): {chain}"),
                )
            } else {
                (
                    d.is_io() || d.is_timeout() || d.is_other() || d.is_user(),
                    format!("could not reach {}: {chain}", service.name),
                )
            }
        }
        SdkError::ResponseError(_) => (true, format!("unreadable response: {chain}")),
        SdkError::ServiceError(se) => {
            let code = se.err().code().unwrap_or("");
            let status = se.raw().status().as_u16();
            if service.auth_codes.contains(&code) || status == 403 {
                (
                    false,
                    format!(
                        "{} refused the credentials or the permission: {chain}",
                        service.name
                    ),
                )
            } else if code == service.not_found_code {
                (false, format!("{what} does not exist: {chain}"))
            } else {
                (
                    service.retryable_codes.contains(&code) || status >= 500,
                    chain,
                )
            }
        }
        _ => (true, chain),
    };
    Error::backend(service.backend, operation, retryable, Message(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_region("us-east-1").is_ok());
        assert!(validate_region("US_EAST").is_err());
        assert!(validate_region("evil.example.com/").is_err());
        assert!(validate_endpoint("http://127.0.0.1:8000").is_ok());
        assert!(validate_endpoint("ftp://x").is_err());
        assert!(validate_endpoint("http:///x").is_err());
        let err = validate_endpoint("http://AKID:hunter2@host").unwrap_err();
        assert!(!err.to_string().contains("hunter2"));
    }

    #[test]
    fn http_dates() {
        let t = http_date("Wed, 25 Nov 2026 08:00:01 GMT").unwrap();
        assert_eq!(
            t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs(),
            1_795_593_601
        );
        assert_eq!(http_date("yesterday"), None);
    }
}
