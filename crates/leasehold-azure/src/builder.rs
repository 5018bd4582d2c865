//! [`AzureBackendBuilder`]: endpoint, container, prefix and credentials, from
//! code, a connection string, the environment or an `azblob://` URL.

use std::sync::Arc;
use std::time::Duration;

use azure_core::credentials::{Secret, TokenCredential};
use azure_core::http::policies::Policy;
use azure_core::http::{ClientOptions, ExponentialRetryOptions, RetryOptions, Transport, Url};
use azure_storage_blob::{BlobContainerClient, BlobContainerClientOptions};
use leasehold::backend::params::{split_query, QuerySpec};
use leasehold::backend::shared_builder::{check_range, require};
use leasehold::{Creation, Error, Result};

use crate::credential::{Credential, SharedKeyPolicy};
use crate::error::Secrets;
use crate::AzureBackend;

/// Azurite's well-known development account.
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
/// Azurite's well-known development key (public, documented by Microsoft).
pub const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// Azurite's blob endpoint for the development account.
pub const DEV_ENDPOINT: &str = "http://127.0.0.1:10000/devstoreaccount1";

/// A connection string for Azurite's development account on
/// `127.0.0.1:port` (10000 is Azurite's default; tools and tests point it
/// at proxies and dead ports). The one place the development key is
/// written out.
pub fn dev_connection_string(port: u16) -> String {
    format!(
        "DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};BlobEndpoint=http://127.0.0.1:{port}/{DEV_ACCOUNT};"
    )
}

/// Blob service API version sent with every request (Azurite 3.35 knows it;
/// the SDK's own default is newer than Azurite's).
pub const API_VERSION: &str = "2025-11-05";

const CONNECTION_STRING: &str = "Azure connection string";

/// The query parameters of an `azblob://` URL (credentials come from the
/// environment, never from the URL).
const PARAMS: QuerySpec = QuerySpec::new("azblob", &["max_ttl"]);

/// Builds an [`AzureBackend`].
///
/// ```no_run
/// # async fn demo() -> leasehold::Result<()> {
/// let backend = leasehold_azure::AzureBackend::builder()
///     .container("locks")
///     .prefix("prod")
///     .connection_string("UseDevelopmentStorage=true")
///     .build()?;
/// let store = leasehold::Store::new(backend);
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct AzureBackendBuilder {
    container: Option<String>,
    prefix: String,
    endpoint: Option<String>,
    account: Option<String>,
    key: Option<Secret>,
    sas: Option<Secret>,
    connection_string: Option<Secret>,
    token: Option<Arc<dyn TokenCredential>>,
    entra_id: bool,
    api_version: Option<String>,
    policies: Vec<Arc<dyn Policy>>,
    request_timeout: Option<Duration>,
    max_ttl: Option<Duration>,
    creation: leasehold::Creation,
}

impl std::fmt::Debug for AzureBackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureBackendBuilder")
            .field("container", &self.container)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("account", &self.account)
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("sas", &self.sas.as_ref().map(|_| "<redacted>"))
            .field(
                "connection_string",
                &self.connection_string.as_ref().map(|_| "<redacted>"),
            )
            .field("token_credential", &self.token.is_some())
            .field("entra_id", &self.entra_id)
            .field("max_ttl", &self.max_ttl)
            .finish_non_exhaustive()
    }
}

impl AzureBackendBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// What using the backend may do to the container (default
    /// [`Creation::IfMissing`](leasehold::Creation::IfMissing)): with
    /// `Never`, nothing is created or written but what `break_lease` does
    /// (a missing container is [`Error::NoStore`](leasehold::Error::NoStore)
    /// from [`AzureBackend::open_store`]); with `NewProven`, a container
    /// this backend creates gets an epoch marker that says its epoch is
    /// proven (see [`Creation::NewProven`](leasehold::Creation::NewProven)).
    /// Building sends nothing either way: call
    /// [`AzureBackend::open_store`] to look or create at once.
    pub fn creation(mut self, creation: Creation) -> Self {
        self.creation = creation;
        self
    }

    /// The container holding the lock blobs (created if missing).
    pub fn container(mut self, container: impl Into<String>) -> Self {
        self.container = Some(container.into());
        self
    }

    /// A prefix for the lock blobs' names (`PREFIX/escaped-key`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The blob service endpoint, e.g. `https://ACCOUNT.blob.core.windows.net`
    /// (default) or `http://127.0.0.1:10000/devstoreaccount1` for Azurite.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The storage account name.
    pub fn account(mut self, account: impl Into<String>) -> Self {
        self.account = Some(account.into());
        self
    }

    /// Authorise with the account key (shared-key signing).
    pub fn access_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(Secret::new(key.into()));
        self
    }

    /// Authorise with a SAS token (`sv=…&sig=…`, with or without a leading `?`).
    pub fn sas_token(mut self, sas: impl Into<String>) -> Self {
        let sas: String = sas.into();
        self.sas = Some(Secret::new(sas.trim_start_matches('?').to_string()));
        self
    }

    /// Endpoint and credentials from a connection string: the
    /// `AccountName=…;AccountKey=…` forms (with `DefaultEndpointsProtocol`,
    /// `EndpointSuffix` or an explicit `BlobEndpoint`), `SharedAccessSignature`,
    /// and `UseDevelopmentStorage=true` (Azurite on 127.0.0.1:10000).
    pub fn connection_string(mut self, cs: impl Into<String>) -> Self {
        self.connection_string = Some(Secret::new(cs.into()));
        self
    }

    /// Authorise with Entra ID tokens from `credential` (https only).
    pub fn token_credential(mut self, credential: Arc<dyn TokenCredential>) -> Self {
        self.token = Some(credential);
        self
    }

    /// Authorise with the default Entra ID credentials: workload identity
    /// (when configured), managed identity, then developer tools (Azure CLI,
    /// Azure Developer CLI). Needs the `identity` feature.
    pub fn entra_id(mut self) -> Self {
        self.entra_id = true;
        self
    }

    /// Overrides the blob service API version ([`API_VERSION`]).
    pub fn api_version(mut self, version: impl Into<String>) -> Self {
        self.api_version = Some(version.into());
        self
    }

    /// Adds a pipeline policy run on every try of every request (before
    /// signing): for metrics, request counting or extra headers.
    pub fn per_try_policy(mut self, policy: Arc<dyn Policy>) -> Self {
        self.policies.push(policy);
        self
    }

    /// Timeout of one HTTP request (default 10 s; connect timeout 5 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// The store max TTL recorded in the container's epoch marker when this
    /// backend is the one that writes it (a new container, or one without
    /// a marker): no lease in the container may be longer. 15 s to 60 s;
    /// default 60 s, Azure's longest finite lease. A container that already
    /// has a marker keeps the max TTL it records. The quarantine of a new
    /// container is one confirmation window whatever this says (see
    /// [Store epoch](crate#store-epoch-and-quarantine)).
    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.max_ttl = Some(max_ttl);
        self
    }

    /// Fills what is unset from the environment, credentials in this order:
    ///
    /// 1. `AZURE_STORAGE_CONNECTION_STRING`;
    /// 2. `AZURE_STORAGE_ACCOUNT` with `AZURE_STORAGE_KEY` (account key);
    /// 3. `AZURE_STORAGE_ACCOUNT` with `AZURE_STORAGE_SAS_TOKEN`;
    /// 4. `AZURE_STORAGE_ACCOUNT` alone: Entra ID ([`entra_id`](Self::entra_id)).
    ///
    /// `AZURE_STORAGE_BLOB_ENDPOINT` overrides the endpoint in cases 2-4.
    /// Credentials set in code win over the environment.
    pub fn with_env(mut self) -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if self.has_credentials() {
            return self;
        }
        if let Some(cs) = var("AZURE_STORAGE_CONNECTION_STRING") {
            return self.connection_string(cs);
        }
        if self.account.is_none() {
            self.account = var("AZURE_STORAGE_ACCOUNT");
        }
        if self.endpoint.is_none() {
            self.endpoint = var("AZURE_STORAGE_BLOB_ENDPOINT");
        }
        if self.account.is_none() {
            return self;
        }
        if let Some(key) = var("AZURE_STORAGE_KEY") {
            self.access_key(key)
        } else if let Some(sas) = var("AZURE_STORAGE_SAS_TOKEN") {
            self.sas_token(sas)
        } else {
            self.entra_id()
        }
    }

    fn has_credentials(&self) -> bool {
        self.key.is_some()
            || self.sas.is_some()
            || self.connection_string.is_some()
            || self.token.is_some()
            || self.entra_id
    }

    /// Builds the backend. No request is sent: the container and lock blobs
    /// are created on first use.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a missing or malformed container, prefix,
    /// endpoint or connection string, or missing credentials (messages never
    /// include secrets); [`Error::NotSupported`] for an `https` endpoint
    /// without the `rustls` feature or Entra ID without `identity`.
    pub fn build(self) -> Result<AzureBackend> {
        let container = self
            .container
            .clone()
            .ok_or_else(|| Error::invalid("container", "no container name given"))?;
        validate_container(&container)?;
        let prefix = leasehold::backend::names::object_prefix(&self.prefix)?;
        let max_ttl = self.max_ttl.unwrap_or(crate::MAX_TTL);
        check_range("max_ttl", max_ttl, crate::MIN_TTL, crate::MAX_TTL, || {
            format!(
                "{max_ttl:?} is outside Azure's lease range of 15 s to 60 s (the store max TTL bounds every lease)"
            )
        })?;

        let (endpoint, credential) = self.resolve()?;
        let endpoint = endpoint.trim_end_matches('/').to_string();
        let mut url = Url::parse(&endpoint).map_err(|e| {
            Error::invalid(
                "endpoint",
                format!("{endpoint:?} is not a URL ({e}); expected e.g. https://ACCOUNT.blob.core.windows.net"),
            )
        })?;
        if url.query().is_some() || !matches!(url.scheme(), "http" | "https") {
            return Err(Error::invalid(
                "endpoint",
                format!(
                    "{}: expected an http(s) URL without a query",
                    url.origin().ascii_serialization()
                ),
            ));
        }
        if url.scheme() == "https" && !cfg!(feature = "rustls") {
            return Err(Error::NotSupported(
                "https endpoints need leasehold-azure's \"rustls\" feature, which this build lacks"
                    .into(),
            ));
        }
        if matches!(credential, Credential::Token(_)) && url.scheme() != "https" {
            return Err(Error::invalid(
                "endpoint",
                "Entra ID credentials are only sent over https",
            ));
        }
        url.path_segments_mut()
            .map_err(|_| Error::invalid("endpoint", "the endpoint cannot have a path"))?
            .pop_if_empty()
            .push(&container);
        let secrets: Secrets = credential.secrets().into();
        if let Credential::Sas(sas) = &credential {
            url.set_query(Some(sas.secret()));
        }

        let mut per_try = self.policies.clone();
        let token = match &credential {
            Credential::SharedKey { account, key } => {
                per_try.push(Arc::new(SharedKeyPolicy::new(account.clone(), key.clone())));
                None
            }
            Credential::Sas(_) => None,
            Credential::Token(t) => Some(t.clone()),
        };
        let options = BlobContainerClientOptions {
            client_options: ClientOptions {
                per_try_policies: per_try,
                retry: RetryOptions::exponential(ExponentialRetryOptions {
                    initial_delay: azure_core::time::Duration::milliseconds(200),
                    max_retries: 3,
                    max_total_elapsed: azure_core::time::Duration::seconds(10),
                    max_delay: azure_core::time::Duration::seconds(2),
                }),
                transport: Some(Transport::new(Arc::new(http_client(
                    self.request_timeout.unwrap_or(Duration::from_secs(10)),
                )?))),
                ..Default::default()
            },
            version: self.api_version.unwrap_or_else(|| API_VERSION.to_string()),
        };
        let client = BlobContainerClient::new(url, token, Some(options)).map_err(|e| {
            Error::invalid("endpoint", crate::error::redact(&e.to_string(), &secrets))
        })?;
        Ok(AzureBackend::new(
            client,
            container,
            prefix,
            secrets,
            max_ttl,
            self.creation,
        ))
    }

    /// The endpoint and credential, from the connection string or the
    /// individual settings.
    fn resolve(&self) -> Result<(String, Credential)> {
        if let Some(cs) = &self.connection_string {
            let parsed = parse_connection_string(cs.secret())?;
            return Ok((self.endpoint.clone().unwrap_or(parsed.0), parsed.1));
        }
        let endpoint = match (&self.endpoint, &self.account) {
            (Some(e), _) => e.clone(),
            (None, Some(a)) => format!("https://{a}.blob.core.windows.net"),
            (None, None) => {
                return Err(Error::invalid(
                    "Azure credentials",
                    "none found: set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN or an Entra ID identity",
                ))
            }
        };
        let credential = if let Some(key) = &self.key {
            let account = self.account.clone().ok_or_else(|| {
                Error::invalid("Azure credentials", "an account key needs the account name")
            })?;
            check_key(key)?;
            Credential::SharedKey {
                account,
                key: key.clone(),
            }
        } else if let Some(sas) = &self.sas {
            Credential::Sas(sas.clone())
        } else if let Some(token) = &self.token {
            Credential::Token(token.clone())
        } else if self.entra_id {
            Credential::Token(entra_id_credential()?)
        } else {
            return Err(Error::invalid(
                "Azure credentials",
                "no account key, SAS token or Entra ID credential given",
            ));
        };
        Ok((endpoint, credential))
    }
}

#[cfg(feature = "identity")]
fn entra_id_credential() -> Result<Arc<dyn TokenCredential>> {
    // azure_identity builds its own reqwest clients, which need the provider.
    install_crypto_provider();
    crate::credential::default_token_credential()
        .map_err(|e| Error::backend(crate::error::NAME, "open", false, e.to_string()))
}

#[cfg(not(feature = "identity"))]
fn entra_id_credential() -> Result<Arc<dyn TokenCredential>> {
    Err(Error::NotSupported(
        "Entra ID credentials need leasehold-azure's \"identity\" feature, which this build lacks; \
         set AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN or AZURE_STORAGE_CONNECTION_STRING instead"
            .into(),
    ))
}

fn check_key(key: &Secret) -> Result<()> {
    match azure_core::base64::decode(key.secret()) {
        Ok(bytes) if !bytes.is_empty() => Ok(()),
        _ => Err(Error::invalid(
            "Azure credentials",
            "the account key is not valid base64 (it is not shown here)",
        )),
    }
}

#[cfg(feature = "rustls")]
fn http_client(timeout: Duration) -> Result<reqwest::Client> {
    install_crypto_provider();
    client_builder(timeout)
        .build()
        .map_err(|e| Error::backend(crate::error::NAME, "open", false, e))
}

/// reqwest is built without a TLS crypto provider of its own: this installs
/// ring as the process default, unless the application installed one first.
#[cfg(feature = "rustls")]
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(not(feature = "rustls"))]
fn http_client(timeout: Duration) -> Result<reqwest::Client> {
    client_builder(timeout)
        .build()
        .map_err(|e| Error::backend(crate::error::NAME, "open", false, e))
}

fn client_builder(timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5).min(timeout))
        .timeout(timeout)
}

/// Parses a connection string into an endpoint and a credential. Error
/// messages name settings, never values.
pub(crate) fn parse_connection_string(cs: &str) -> Result<(String, Credential)> {
    let bad = |msg: String| Error::invalid(CONNECTION_STRING, msg);
    let mut protocol = None;
    let mut account = None;
    let mut key = None;
    let mut sas = None;
    let mut blob_endpoint = None;
    let mut suffix = None;
    let mut dev = false;
    for part in cs.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, value)) = part.split_once('=') else {
            return Err(bad(
                "every setting must be NAME=VALUE separated by ';' (the string is not shown here)"
                    .into(),
            ));
        };
        let value = value.trim().to_string();
        match name.trim().to_ascii_lowercase().as_str() {
            "usedevelopmentstorage" => dev = value.eq_ignore_ascii_case("true"),
            "developmentstorageproxyuri" => {}
            "defaultendpointsprotocol" => protocol = Some(value),
            "accountname" => account = Some(value),
            "accountkey" => key = Some(value),
            "sharedaccesssignature" => sas = Some(value),
            "blobendpoint" => blob_endpoint = Some(value),
            "endpointsuffix" => suffix = Some(value),
            "queueendpoint" | "tableendpoint" | "fileendpoint" => {}
            other => {
                return Err(bad(format!(
                    "unknown setting {:?}; expected AccountName, AccountKey, BlobEndpoint, DefaultEndpointsProtocol, EndpointSuffix, SharedAccessSignature or UseDevelopmentStorage",
                    other.chars().take(40).collect::<String>()
                )))
            }
        }
    }
    if dev {
        let endpoint = blob_endpoint.unwrap_or_else(|| DEV_ENDPOINT.to_string());
        return Ok((
            endpoint,
            Credential::SharedKey {
                account: account.unwrap_or_else(|| DEV_ACCOUNT.to_string()),
                key: Secret::new(key.unwrap_or_else(|| DEV_KEY.to_string())),
            },
        ));
    }
    let endpoint =
        match (blob_endpoint, &account) {
            (Some(e), _) => e,
            (None, Some(a)) => {
                let protocol = protocol.unwrap_or_else(|| "https".into());
                if !matches!(protocol.as_str(), "http" | "https") {
                    return Err(bad("DefaultEndpointsProtocol must be http or https".into()));
                }
                let suffix = suffix.unwrap_or_else(|| "core.windows.net".into());
                format!("{protocol}://{a}.blob.{suffix}")
            }
            (None, None) => return Err(bad(
                "it names neither AccountName nor BlobEndpoint (nor UseDevelopmentStorage=true)"
                    .into(),
            )),
        };
    let credential = match (key, sas) {
        (Some(key), _) => {
            let account = account.ok_or_else(|| bad("AccountKey needs AccountName".into()))?;
            let key = Secret::new(key);
            check_key(&key)
                .map_err(|_| bad("AccountKey is not valid base64 (it is not shown here)".into()))?;
            Credential::SharedKey { account, key }
        }
        (None, Some(sas)) => Credential::Sas(Secret::new(sas.trim_start_matches('?').to_string())),
        (None, None) => {
            return Err(bad(
                "it has neither AccountKey nor SharedAccessSignature".into()
            ))
        }
    };
    Ok((endpoint, credential))
}

/// Container names: 3-63 characters of lower-case letters, digits and
/// single hyphens, starting and ending with a letter or digit.
fn validate_container(name: &str) -> Result<()> {
    let ok = (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    require("container", ok, || {
        format!("{name:?}: Azure container names are 3-63 characters of a-z, 0-9 and single '-', starting and ending with a letter or digit")
    })
}

/// What an `azblob://CONTAINER[/PREFIX][?max_ttl=DURATION]` URL says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ParsedUrl {
    pub container: String,
    pub prefix: String,
    pub max_ttl: Option<Duration>,
}

/// Splits `azblob://CONTAINER[/PREFIX][?max_ttl=DURATION]`. Error messages
/// name query parameters but never repeat their values (a SAS token pasted
/// there by mistake must not be printed: see `leasehold::backend::params`).
pub(crate) fn parse_url(url: &str) -> Result<ParsedUrl> {
    let bad = || {
        Error::invalid(
            "store URL",
            "expected azblob://CONTAINER, azblob://CONTAINER/PREFIX, optionally with ?max_ttl=DURATION",
        )
    };
    let rest = url.strip_prefix("azblob://").ok_or_else(bad)?;
    let (path, query) = split_query(rest);
    if path.contains(['#', '@']) {
        return Err(bad());
    }
    let (container, prefix) = path.split_once('/').unwrap_or((path, ""));
    if container.is_empty() {
        return Err(bad());
    }
    validate_container(container)?;
    leasehold::backend::names::object_prefix(prefix)?;
    let max_ttl = PARAMS.parse(query)?.duration("max_ttl")?;
    Ok(ParsedUrl {
        container: container.to_string(),
        prefix: prefix.trim_matches('/').to_string(),
        max_ttl,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let parsed = |c: &str, p: &str, max_ttl: Option<u64>| ParsedUrl {
            container: c.into(),
            prefix: p.into(),
            max_ttl: max_ttl.map(Duration::from_secs),
        };
        assert_eq!(
            parse_url("azblob://locks").unwrap(),
            parsed("locks", "", None)
        );
        assert_eq!(
            parse_url("azblob://locks/prod/eu").unwrap(),
            parsed("locks", "prod/eu", None)
        );
        assert_eq!(
            parse_url("azblob://locks/prod?max_ttl=15s").unwrap(),
            parsed("locks", "prod", Some(15))
        );
        assert_eq!(
            parse_url("azblob://locks?max_ttl=1m").unwrap(),
            parsed("locks", "", Some(60))
        );
        for bad in [
            "azblob://",
            "azblob://Locks",
            "s3://x",
            "azblob://ab",
            "azblob://locks/a//b",
            "azblob://locks?max_ttl=soon",
            "azblob://locks?max_ttl=15s&max_ttl=20s",
            "azblob://locks#x",
            "azblob://user@locks",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
        // A SAS token in the query is refused without being repeated.
        let err = parse_url("azblob://locks?sv=2024&sig=S3CRET")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("S3CRET") && err.contains("\"sv\""), "{err}");
        assert!(
            err.contains("the azblob store's only parameter is max_ttl"),
            "{err}"
        );
    }

    #[test]
    fn max_ttl_must_be_a_lease_azure_grants() {
        for secs in [14, 61] {
            let built = AzureBackendBuilder::new()
                .container("locks")
                .connection_string("UseDevelopmentStorage=true")
                .max_ttl(Duration::from_secs(secs))
                .build();
            assert!(matches!(built, Err(Error::InvalidInput { .. })), "{secs}");
        }
    }

    #[test]
    fn connection_strings() {
        let (e, c) = parse_connection_string("UseDevelopmentStorage=true").unwrap();
        assert_eq!(e, DEV_ENDPOINT);
        assert!(matches!(c, Credential::SharedKey { ref account, .. } if account == DEV_ACCOUNT));
        let (e, _) = parse_connection_string(
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.chinacloudapi.cn",
        )
        .unwrap();
        assert_eq!(e, "https://acct.blob.core.chinacloudapi.cn");
        let (e, c) = parse_connection_string(
            "BlobEndpoint=https://x.example/;SharedAccessSignature=sv=1&sig=zz",
        )
        .unwrap();
        assert_eq!(e, "https://x.example/");
        assert!(matches!(c, Credential::Sas(_)));
        for bad in [
            "AccountName=acct",
            "AccountName=acct;AccountKey=not base64!!",
            "garbage",
            "Foo=bar",
        ] {
            let err = parse_connection_string(bad).unwrap_err().to_string();
            assert!(!err.contains("base64!!") && !err.contains("bar"), "{err}");
        }
    }

    #[test]
    fn https_needs_the_rustls_feature() {
        let built = AzureBackendBuilder::new()
            .container("locks")
            .account("acct")
            .access_key("a2V5")
            .build();
        if cfg!(feature = "rustls") {
            built.unwrap();
        } else {
            assert!(matches!(built, Err(Error::NotSupported(_))));
        }
    }

    #[test]
    fn entra_id_needs_https_and_the_identity_feature() {
        let built = AzureBackendBuilder::new()
            .container("locks")
            .account("acct")
            .entra_id()
            .build();
        if cfg!(all(feature = "rustls", feature = "identity")) {
            built.unwrap();
        } else {
            assert!(matches!(built, Err(Error::NotSupported(_))));
        }
        let http = AzureBackendBuilder::new()
            .container("locks")
            .account("acct")
            .endpoint("http://127.0.0.1:10000/acct")
            .entra_id()
            .build();
        assert!(http.is_err());
    }

    #[test]
    fn prefixes() {
        assert_eq!(leasehold::backend::names::object_prefix("").unwrap(), "");
        assert_eq!(
            leasehold::backend::names::object_prefix("a/b.").unwrap(),
            "a/b~2E/"
        );
        assert!(leasehold::backend::names::object_prefix("a b").is_err());
    }
}
