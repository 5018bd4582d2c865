//! The one store opener: every leasehold binary (the `leasehold` command,
//! the torture harness, the benchmarks) maps a store URL to its backend
//! here, and a new store registers here and nowhere else.
//!
//! | URL | store | cargo feature |
//! |---|---|---|
//! | `sqlite:PATH`, `sqlite:///ABS/PATH`, `sqlite:` (the default file) | SQLite, one machine | always |
//! | `memory:` | in-process memory (tests and tools only) | always |
//! | `azblob://CONTAINER[/PREFIX][?max_ttl=D]` | Azure Blob Storage leases | `azblob` |
//! | `dynamodb://TABLE?region=R&endpoint=URL` | DynamoDB | `dynamodb` |
//! | `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?table=NAME&sslmode=MODE]` (or `postgresql://`) | PostgreSQL | `postgres` |
//! | `mysql://USER[:PASSWORD]@HOST[:PORT]/DB[?table=NAME&sslmode=MODE]` (or `mariadb://`) | MySQL, MariaDB | `mysql` |
//! | `redis://[USER:PASSWORD@]HOST[:PORT][/DB][?prefix=P&max_ttl=D]` (`rediss://` for TLS) | Redis | `redis` |
//! | `etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][?prefix=P&max_ttl=D]` (`etcds://` for TLS) | etcd | `etcd` |
//! | `s3://BUCKET[/PREFIX][?region=R&endpoint=URL&max_ttl=D]` | S3 (conditional writes) | `s3` |
//! | `zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/CHROOT][?max_ttl=D]` | ZooKeeper | `zookeeper` |
//!
//! A build without a cloud store's feature still recognises its URLs and
//! says which feature is missing.
//!
//! Store URLs may carry secrets (an Azure SAS in the query, `user:pw@` in
//! the authority, a token parameter): [`redact`] and [`scrub`] are the one
//! place that removes them from anything printed.

use std::sync::Arc;

use leasehold::{backend::Backend, Creation, Error, Store};

mod test_window;

pub use test_window::apply_test_window;

/// The store URLs leasehold opens, for messages.
pub const FORMS: &str =
    "expected sqlite:PATH, sqlite:///ABS/PATH, azblob://CONTAINER[/PREFIX], dynamodb://TABLE, postgres://USER@HOST/DB, mysql://USER@HOST/DB, redis://[:PASSWORD@]HOST[:PORT][/DB] (redis+sentinel://HOST:PORT[,...]/MASTER, redis+cluster://HOST:PORT[,...]), etcd://HOST:PORT, s3://BUCKET[/PREFIX] or zk://HOST:PORT[/CHROOT]";

/// What a command does with the store, which says what opening it may do
/// ([`Access::creation`], passed to every backend the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Takes leases (`run`, `elect`): a missing store is created
    /// ([`Creation::IfMissing`]).
    Lease,
    /// Only looks or breaks (`status`, `list`, `break`, `leader`): nothing
    /// is ever created, and looking writes nothing ([`Creation::Never`]).
    /// A store that does not exist is [`Error::NoStore`], except the
    /// default SQLite file, whose absence means no lease was ever taken in
    /// it (an empty store answers).
    Look,
    /// Creates the store (`init`): as [`Lease`](Self::Lease), or with
    /// `proven` ([`Creation::NewProven`]) marking its new epoch settled at
    /// once, on the caller's statement that no store existed there before.
    Create {
        /// The caller states that no earlier store existed.
        proven: bool,
    },
}

impl Access {
    /// What opening the store may do for this access.
    pub fn creation(self) -> Creation {
        match self {
            Access::Lease | Access::Create { proven: false } => Creation::IfMissing,
            Access::Look => Creation::Never,
            Access::Create { proven: true } => Creation::NewProven,
        }
    }
}

/// Opens `url`, or the default SQLite file when none is given, for any
/// use (a tool's own `memory:` store included).
///
/// # Errors
/// As [`Store::open`], and the cloud backends' URL and credential errors.
/// Messages never carry the URL's secrets; they may not name the URL
/// either: a caller that shows them says which store it opened (with
/// [`redact`]).
pub async fn open(url: Option<&str>) -> leasehold::Result<Store> {
    let url = url.unwrap_or("sqlite:");
    let store = Store::from_backend(open_backend(url).await?.backend);
    Ok(apply_test_window(store))
}

/// A backend opened from its URL, with its request counter.
pub struct Opened {
    /// The backend.
    pub backend: Arc<dyn Backend>,
    /// The same backend as its concrete type, for tools that use its own
    /// API (downcast it: `leasehold_dynamodb::DynamoDbBackend`, ...).
    pub concrete: Arc<dyn std::any::Any + Send + Sync>,
    /// Requests sent to the store so far, for stores that send several per
    /// backend call (HTTP requests to Azure or DynamoDB, SDK retries
    /// included); `None` where one backend call is one request (SQLite, a
    /// transaction; memory).
    pub requests: Option<RequestCounter>,
}

/// Reads a store's request counter.
pub type RequestCounter = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Opens the backend `url` names (any store, a tool's own `memory:`
/// included), counting its requests where it can. For the benchmarks and
/// tools that wrap the backend; [`open`] for everyone else.
///
/// # Errors
/// As [`Store::open`], and the cloud backends' URL and credential errors.
pub async fn open_backend(url: &str) -> leasehold::Result<Opened> {
    open_backend_with(url, Creation::IfMissing).await
}

/// [`open_backend`], with what opening may do to the store: every backend
/// takes the same [`Creation`] (its builder's `creation` option). With
/// [`Creation::Never`] a store that does not exist is [`Error::NoStore`]
/// here, on every store; with [`Creation::NewProven`] (and for Azure, whose
/// builder sends nothing, with any mode but the default) the store is
/// created (or found) while opening.
///
/// # Errors
/// As [`open_backend`]; [`Error::NoStore`] as above.
pub async fn open_backend_with(url: &str, creation: Creation) -> leasehold::Result<Opened> {
    open_backend_in(Linked::every(), url, creation, false).await
}

/// The stores a binary links, for [`open_with_in`]: every store of the
/// build ([`Linked::every`]), or all but the cloud stores
/// ([`Linked::WITHOUT_CLOUD`]: Azure Blob, DynamoDB and S3, whose SDKs are
/// most of a binary with every store).
///
/// A binary that names only [`Linked::WITHOUT_CLOUD`] links none of the
/// cloud stores' code: they are reached only through the function
/// [`Linked::every`] puts here. The `leasehold` command is such a binary;
/// for a cloud store's URL it runs `leasehold-cloud` instead (a short run
/// on the default SQLite store starts a quarter faster without the cloud
/// SDKs' code to load: docs/benchmarks.md, section 11).
#[derive(Clone, Copy)]
pub struct Linked {
    cloud: Option<CloudOpener>,
}

/// Opens a cloud store's URL: `(url, creation, contact)`, where `contact`
/// asks Azure to look for its container while opening whatever the
/// creation mode (the other stores always do).
type CloudOpener = for<'a> fn(
    &'a str,
    Creation,
    bool,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = leasehold::Result<Opened>> + Send + 'a>,
>;

impl Linked {
    /// Every store of the build but the cloud stores ([`CLOUD_SCHEMES`]).
    pub const WITHOUT_CLOUD: Linked = Linked { cloud: None };

    /// Every store of the build.
    pub fn every() -> Linked {
        Linked {
            cloud: Some(|url, creation, contact| Box::pin(open_cloud(url, creation, contact))),
        }
    }

    /// Whether `url` names a store this binary has not linked: a cloud
    /// store's URL, spelled as one (a mistyped one is refused the same by
    /// every binary), in a binary without the cloud stores.
    pub fn lacks(&self, url: &str) -> bool {
        self.cloud.is_none() && cloud_scheme(url).is_some()
    }
}

/// The schemes of the cloud stores, which [`Linked::WITHOUT_CLOUD`] leaves
/// out.
pub const CLOUD_SCHEMES: &[&str] = &["azblob", "dynamodb", "s3"];

/// The cloud store `url` names ([`CLOUD_SCHEMES`]), if its scheme is
/// spelled as a store URL's (with `://`; white space around the URL, as
/// the opener takes it, allowed).
pub fn cloud_scheme(url: &str) -> Option<&'static str> {
    let url = url.trim();
    let scheme = scheme_of(url)?;
    if !url[scheme.len()..].starts_with("://") {
        return None;
    }
    CLOUD_SCHEMES.iter().copied().find(|c| *c == scheme)
}

/// A cloud store's URL opened by a binary that did not link it.
fn not_linked(scheme: &str) -> Error {
    Error::NotSupported(format!(
        "this binary does not link the {scheme}:// store (the `leasehold` command runs `leasehold-cloud` for it)"
    ))
}

async fn open_cloud(url: &str, creation: Creation, contact: bool) -> leasehold::Result<Opened> {
    match split_scheme(url).map(|(scheme, _)| scheme) {
        Some("azblob") => open_azblob(url, creation, contact).await,
        Some("dynamodb") => open_dynamodb(url, creation).await,
        Some("s3") => open_s3(url, creation).await,
        _ => Err(not_a_store_url(url)),
    }
}

/// [`open_backend_with`], among the stores `linked`; `contact` as
/// [`CloudOpener`]'s.
async fn open_backend_in(
    linked: Linked,
    url: &str,
    creation: Creation,
    contact: bool,
) -> leasehold::Result<Opened> {
    // A store's scheme with its `//` mistyped (`postgres:/user:pw@h`,
    // `s3:bucket`): named, and nothing of the rest repeated (it may hold a
    // password).
    if let Some(scheme) = mistyped_scheme(url) {
        return Err(Error::invalid(
            "store URL",
            format!("a {scheme} store URL starts with {scheme}:// (two slashes): {FORMS}"),
        ));
    }
    match split_scheme(url).map(|(scheme, _)| scheme) {
        Some(scheme) if CLOUD_SCHEMES.contains(&scheme) => match linked.cloud {
            Some(open) => open(url, creation, contact).await,
            None => Err(not_linked(scheme)),
        },
        Some("postgres" | "postgresql") => open_postgres(url, creation).await,
        Some("mysql" | "mariadb") => open_mysql(url, creation).await,
        Some(
            "redis" | "rediss" | "redis+sentinel" | "rediss+sentinel" | "redis+cluster"
            | "rediss+cluster",
        ) => open_redis(url, creation).await,
        Some("etcd" | "etcds") => open_etcd(url, creation).await,
        Some("zk") => open_zookeeper(url, creation).await,
        Some(scheme) if scheme != "sqlite" => Err(not_a_store_url(url)),

        _ if leasehold::backend::sqlite_url_path(url).is_none() && url != "memory:" => {
            Err(not_a_store_url(url))
        }
        // sqlite:PATH, sqlite:///ABS/PATH and memory:, which the library
        // opens (or says what is wrong with).
        _ => {
            let backend = Store::open_with(url, creation)?.backend().clone();
            Ok(Opened {
                concrete: Arc::new(backend.clone()),
                backend,
                requests: None,
            })
        }
    }
}

/// Opens `url`, or the default SQLite file when none is given, as the
/// `leasehold` command does: for `access`, refusing stores that no other
/// process can see.
///
/// # Errors
/// As [`Store::open`], and the cloud backends' URL and credential errors;
/// `memory:` and in-memory SQLite URLs, which would give a lock that no
/// other process sees; with [`Access::Look`], [`Error::NoStore`] for a
/// store that does not exist (but the default SQLite file). Messages never
/// carry the URL's secrets, and, as [`open`]'s, may not name the URL.
pub async fn open_with(url: Option<&str>, access: Access) -> leasehold::Result<Store> {
    open_with_in(Linked::every(), url, access).await
}

/// [`open_with`], among the stores `linked`.
///
/// # Errors
/// As [`open_with`]; [`Error::NotSupported`] for a store `linked` leaves
/// out.
pub async fn open_with_in(
    linked: Linked,
    url: Option<&str>,
    access: Access,
) -> leasehold::Result<Store> {
    open_url(linked, effective_url(url), access)
        .await
        .map(apply_test_window)
}

/// The URL [`open_with`] opens for `url`: the default SQLite file's when
/// none is given, and without white space around it (a trailing newline
/// from `LEASEHOLD_STORE=$(cat file)` or a config file would otherwise end
/// up in a SQLite path, or a table or prefix name). For messages about it.
pub fn effective_url(url: Option<&str>) -> &str {
    url.map_or(
        "sqlite:",
        |u| if u.trim().is_empty() { u } else { u.trim() },
    )
}

async fn open_url(linked: Linked, url: &str, access: Access) -> leasehold::Result<Store> {
    if url.trim().is_empty() {
        // Most likely `--store "$UNSET"`: falling back to the local default
        // would give a lock that other machines do not see.
        return Err(Error::invalid(
            "store URL",
            format!("it is empty (--store or LEASEHOLD_STORE set to nothing); unset it for the default SQLite file, or give one: {FORMS}"),
        ));
    }
    if let Some(path) = leasehold::backend::sqlite_url_path(url) {
        let rest = &url["sqlite:".len()..];
        if is_in_memory_sqlite(rest) {
            return Err(private_store(url));
        }
        let path = path?;
        if access == Access::Look && rest.is_empty() && !path.exists() {
            // The default file: no lease was ever taken in it. An empty
            // store answers the same, without creating anything.
            return Store::open("memory:");
        }
        return Store::open_with(url, access.creation());
    }
    if url == "memory:" {
        return Err(private_store(url));
    }
    // Azure's builder sends nothing: the command asks for the container
    // and its epoch now (`contact`), so that opening, with its own bound
    // (the CLI's `--connect-timeout`), is where an endpoint that does not
    // answer is found, as on every other store, not the first attempt,
    // which the SDK's retries stretched to 20 s. (The first attempt then
    // names the epoch at once instead of learning it: no request more in
    // all.)
    let opened = open_backend_in(linked, url, access.creation(), true).await?;
    Ok(Store::from_backend(opened.backend))
}

/// What is wrong with `url`, which names no store: a path without the
/// `sqlite:` in front (the fix suggested), a known scheme in capitals, or
/// a scheme leasehold does not know. Nothing after a scheme is repeated
/// (it may hold a password).
fn not_a_store_url(url: &str) -> Error {
    let known = NETWORK_SCHEMES.iter().chain(&["sqlite"]);
    let message = match scheme_of(url) {
        Some(scheme) => match known.into_iter().find(|k| k.eq_ignore_ascii_case(scheme)) {
            Some(k) => format!("{scheme}: is {k}: in capitals; schemes are lower case: {FORMS}"),
            None => format!("{scheme}: is not a store leasehold knows: {FORMS}"),
        },
        None if !url.contains(['@', '?', '#', ':']) => {
            format!("{url:?} has no scheme; a SQLite file is sqlite:{url}: {FORMS}")
        }
        None => format!("it has no scheme: {FORMS}"),
    };
    Error::invalid("store URL", message)
}

/// `:memory:`, or a `file:` URI naming an in-memory database: SQLite opens
/// those as a database private to the connection.
fn is_in_memory_sqlite(path: &str) -> bool {
    path == ":memory:"
        || path
            .strip_prefix("file:")
            .is_some_and(|uri| uri.starts_with(":memory:") || uri.contains("mode=memory"))
}

fn private_store(url: &str) -> Error {
    Error::invalid(
        "store URL",
        format!(
            "{url} is a store private to this one process: a lock in it excludes nobody else; use sqlite:PATH (one machine) or a cloud store"
        ),
    )
}

#[cfg(feature = "azblob")]
async fn open_azblob(url: &str, creation: Creation, contact: bool) -> leasehold::Result<Opened> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let count = Arc::new(AtomicU64::new(0));
    let backend = leasehold_azure::AzureBackend::builder_from_url(url)?
        .per_try_policy(Arc::new(CountTries(count.clone())))
        .creation(creation)
        .build()?;
    if contact || creation != Creation::IfMissing {
        // The builder sends nothing: look for (or create) the container
        // now, as the other stores do while opening.
        backend.open_store().await?;
    }
    let backend = Arc::new(backend);
    Ok(Opened {
        concrete: backend.clone(),
        backend,
        requests: Some(Arc::new(move || count.load(Ordering::Relaxed))),
    })
}

/// An Azure pipeline policy that counts every request sent, retries
/// included: the opener installs one on every `azblob://` store, and the
/// benchmarks' raw SDK loop counts with it too.
#[cfg(feature = "azblob")]
#[derive(Debug)]
pub struct CountTries(pub Arc<std::sync::atomic::AtomicU64>);

#[cfg(feature = "azblob")]
// azure_core's trait takes `&Context` with its lifetime hidden, and
// async-trait cannot match an impl that names it (`Context<'_>`).
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl azure_core::http::policies::Policy for CountTries {
    async fn send(
        &self,
        ctx: &azure_core::http::Context,
        request: &mut azure_core::http::Request,
        next: &[Arc<dyn azure_core::http::policies::Policy>],
    ) -> azure_core::http::policies::PolicyResult {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        next[0].send(ctx, request, &next[1..]).await
    }
}

#[cfg(not(feature = "azblob"))]
async fn open_azblob(_url: &str, _creation: Creation, _contact: bool) -> leasehold::Result<Opened> {
    Err(not_in_build("azblob"))
}

/// `backend` opened, with `count` reading its request counter (`None`
/// where one backend call is one request).
#[allow(dead_code)] // Builds without any server store.
fn opened<B: Backend>(backend: B, count: Option<fn(&B) -> u64>) -> Opened {
    let backend = Arc::new(backend);
    let counted = backend.clone();
    Opened {
        concrete: backend.clone(),
        backend,
        requests: count.map(|count| -> RequestCounter { Arc::new(move || count(&counted)) }),
    }
}

/// For each `"FEATURE" => NAME(FROM_URL, COUNT);`, `async fn NAME(url,
/// creation)`: opens the store of cargo feature FEATURE with its builder
/// (`FROM_URL(url)`, given `creation`, built), counting its requests with
/// COUNT (as [`opened`]); in a build without the feature, says so
/// ([`not_in_build`]).
macro_rules! openers {
    ($($feature:literal => $name:ident($from_url:path, $count:expr);)+) => {
        $(
            #[cfg(feature = $feature)]
            async fn $name(url: &str, creation: Creation) -> leasehold::Result<Opened> {
                let backend = $from_url(url)?.creation(creation).build().await?;
                Ok(opened(backend, $count))
            }

            #[cfg(not(feature = $feature))]
            async fn $name(_url: &str, _creation: Creation) -> leasehold::Result<Opened> {
                Err(not_in_build($feature))
            }
        )+
    };
}

openers! {
    // The backend counts its HTTP requests (the SDK's retries included).
    "dynamodb" => open_dynamodb(
        leasehold_dynamodb::DynamoDbBackend::builder_from_url,
        Some(leasehold_dynamodb::DynamoDbBackend::requests_sent)
    );
    // One backend call is one statement, one round trip: no counter.
    "postgres" => open_postgres(leasehold_postgres::PostgresBackendBuilder::from_url, None);
    // A backend call is one statement, or one short transaction of a few
    // (see leasehold-mysql): no counter.
    "mysql" => open_mysql(leasehold_mysql::MysqlBackendBuilder::from_url, None);
    // One backend call is one script, one round trip: no counter.
    "redis" => open_redis(leasehold_redis::RedisBackendBuilder::from_url, None);
    // Backend calls take one to three requests (see leasehold-etcd): the
    // backend counts them.
    "etcd" => open_etcd(
        leasehold_etcd::EtcdBackendBuilder::from_url,
        Some(leasehold_etcd::EtcdBackend::requests_sent)
    );
    // Backend calls take one to three HTTP requests: the backend counts
    // them (the SDK's retries included).
    "s3" => open_s3(
        leasehold_s3::S3Backend::builder_from_url,
        Some(leasehold_s3::S3Backend::requests_sent)
    );
    // Backend calls take one to a few requests (a read before each
    // conditional write): the backend counts them.
    "zookeeper" => open_zookeeper(
        leasehold_zookeeper::ZkBackendBuilder::from_url,
        Some(leasehold_zookeeper::ZkBackend::requests_sent)
    );
}

#[cfg(not(all(
    feature = "azblob",
    feature = "dynamodb",
    feature = "postgres",
    feature = "mysql",
    feature = "redis",
    feature = "etcd",
    feature = "s3",
    feature = "zookeeper"
)))]
fn not_in_build(scheme: &str) -> leasehold::Error {
    leasehold::Error::NotSupported(format!(
        "this leasehold was built without the {scheme}:// store (cargo feature \"{scheme}\")"
    ))
}

/// The network store schemes (every one the opener knows but `sqlite:`
/// and `memory:`).
const NETWORK_SCHEMES: &[&str] = &[
    "azblob",
    "dynamodb",
    "postgres",
    "postgresql",
    "mysql",
    "mariadb",
    "redis",
    "rediss",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
    "etcd",
    "etcds",
    "s3",
    "zk",
];

/// The scheme `url` starts with (letters, digits, `+ . -`), if a `:` or
/// `/` follows it.
fn scheme_of(url: &str) -> Option<&str> {
    let end = url.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-')))?;
    (end > 0 && url[end..].starts_with([':', '/'])).then(|| &url[..end])
}

/// The network store scheme `url` starts with when it lacks the `://`
/// after it (`postgres:/…`, `postgres//…`, `s3:bucket`).
fn mistyped_scheme(url: &str) -> Option<&str> {
    let scheme = scheme_of(url)?;
    (!url[scheme.len()..].starts_with("://")
        && NETWORK_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()))
    .then_some(scheme)
}

/// `url`'s scheme and what follows its `://` (or, for a network store, a
/// mistyped form of it: `postgres:/`, `postgres:`, `postgres//`).
fn split_scheme(url: &str) -> Option<(&str, &str)> {
    let scheme = scheme_of(url)?;
    let after = &url[scheme.len()..];
    if let Some(rest) = after.strip_prefix("://") {
        return Some((scheme, rest));
    }
    mistyped_scheme(url)?;
    Some((scheme, after.trim_start_matches([':', '/'])))
}

/// Query parameters whose values carry no secret: shown in messages and
/// in [`redact`]ed URLs ("region us-east-1", "table leases"). Every other
/// parameter's value is hidden.
const NOT_SECRET: &[&str] = &[
    "region",
    "profile",
    "max_clock_skew",
    "create_table",
    "table",
    "sslmode",
    "max_ttl",
    "prefix",
    "wake_ups",
    "create_bucket",
    "options",
    "pool_size",
];

/// The URL without anything that may be secret: the password of its user
/// info (`user:***@`; the user name stays), and the value of every query
/// parameter but the settings that carry no secret ([`NOT_SECRET`]; an
/// `endpoint` too, unless it has user info or a query of its own) and the
/// fragment are replaced by `***`.
pub fn redact(url: &str) -> String {
    let (before_query, query) = match url.find(['?', '#']) {
        Some(i) => (&url[..i], Some(&url[i + 1..])),
        None => (url, None),
    };
    let mut out = match split_scheme(before_query) {
        Some((scheme, rest)) => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => {
                    let userinfo = &rest[..at];
                    let shown = match userinfo.split_once(':') {
                        _ if mistyped_scheme(url).is_some() => "***".to_string(),
                        Some((user, _)) => format!("{user}:***"),
                        None => userinfo.to_string(),
                    };
                    format!("{scheme}://{shown}@{}", &rest[at + 1..])
                }
                None => before_query.to_string(),
            }
        }
        None => before_query.to_string(),
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split(['&', ';', '#'])
            .map(|pair| match pair.split_once('=') {
                Some(_) if !is_secret_param(pair) => pair.to_string(),
                Some((name, _)) => format!("{name}=***"),
                None => "***".to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
}

/// Whether the query pair `name=value` may hold a secret.
fn is_secret_param(pair: &str) -> bool {
    match pair.split_once('=') {
        Some((name, _)) if NOT_SECRET.contains(&name) => false,
        Some(("endpoint", v)) => {
            let endpoint = percent_decode(v).unwrap_or_else(|| v.to_string());
            endpoint.contains(['@', '?', '#'])
        }
        _ => true,
    }
}

/// `text` with every secret part of `url` removed: the URL itself (shown
/// [`redact`]ed), and each secret query value and the password, raw or
/// percent-decoded. Everything the CLI prints about a failure passes
/// through here.
pub fn scrub(text: &str, url: Option<&str>) -> String {
    let Some(url) = url else {
        return text.to_string();
    };
    let mut out = text.replace(url, &redact(url));
    for secret in secrets_of(url) {
        if secret.len() >= 3 {
            out = out.replace(&secret, "***");
        }
    }
    out
}

/// The parts of `url` that may be secret (see [`scrub`]), longest first,
/// raw and percent-decoded.
pub fn secrets(url: &str) -> Vec<String> {
    secrets_of(url)
}

/// The parts of `url` that may be secret, longest first.
fn secrets_of(url: &str) -> Vec<String> {
    let mut parts = Vec::new();
    if let Some(i) = url.find(['?', '#']) {
        let query = &url[i + 1..];
        let mut any = false;
        for pair in query.split(['&', ';', '#']) {
            if !is_secret_param(pair) {
                continue;
            }
            any = true;
            match pair.split_once('=') {
                // An endpoint's own user info and query.
                Some(("endpoint", v)) => {
                    let endpoint = percent_decode(v).unwrap_or_else(|| v.to_string());
                    parts.push(v.to_string());
                    parts.extend(secrets_of(&endpoint));
                }
                Some((_, v)) => parts.push(v.to_string()),
                None => parts.push(pair.to_string()),
            }
        }
        if any {
            parts.push(query.to_string());
        }
    }
    if let Some((_, rest)) = split_scheme(url) {
        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
        // The password; a user name is no secret (and often a word such as
        // "postgres", which redacting would blank out of every message).
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            match userinfo.split_once(':') {
                // `redis:/:pw@h`: the ':' before the password went with
                // the mistyped `://`, so all of it may be the password.
                _ if mistyped_scheme(url).is_some() => {
                    parts.extend(userinfo.split(':').map(str::to_string));
                    parts.push(userinfo.to_string());
                }
                Some((_, password)) => {
                    parts.push(userinfo.to_string());
                    parts.push(password.to_string());
                }
                None => {}
            }
        }
    }
    let decoded: Vec<String> = parts.iter().filter_map(|p| percent_decode(p)).collect();
    parts.extend(decoded);
    parts.sort_by_key(|p| std::cmp::Reverse(p.len()));
    parts.dedup();
    parts
}

/// `s` percent-decoded (`+` as a space, as in a query), for matching
/// decoded secrets in messages; `None` if that changes nothing or is not
/// UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    if !s.contains(['%', '+']) {
        return None;
    }
    leasehold::backend::params::decode_query_component(s).filter(|decoded| decoded != s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn built_in_stores_open_and_unknown_schemes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("l.db").display());
        let opened = block_on(open_backend(&url)).unwrap();
        assert_eq!(opened.backend.name(), "sqlite");
        assert!(
            opened.requests.is_none(),
            "a SQLite call is one transaction"
        );
        let opened = block_on(open_backend("memory:")).unwrap();
        assert_eq!(opened.backend.name(), "memory");
        let abs = format!("sqlite://{}", dir.path().join("m.db").display());
        assert_eq!(
            block_on(open_backend(&abs)).unwrap().backend.name(),
            "sqlite"
        );
        let err = block_on(open_backend("nosuch://x")).err().unwrap();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        assert!(err.to_string().contains("nosuch: is not a store"), "{err}");
        assert!(err.to_string().contains("dynamodb://TABLE"), "{err}");
    }

    /// A path without `sqlite:`, or a scheme in capitals, is told what to
    /// write, in the command's terms (the library's own message named its
    /// internals: "Store::open opens ..., open the other stores with their
    /// own crates").
    #[test]
    fn a_url_without_a_known_scheme_is_told_the_fix() {
        for (url, says) in [
            ("leases.db", "a SQLite file is sqlite:leases.db"),
            ("/var/lib/l.db", "sqlite:/var/lib/l.db"),
            ("SQLITE:x.db", "in capitals"),
            ("Postgres://u:pw@h/db", "in capitals"),
            ("nosuch:x", "nosuch: is not a store"),
        ] {
            let err = block_on(open_with(Some(url), Access::Lease)).err().unwrap();
            let text = err.to_string();
            assert!(matches!(err, Error::InvalidInput { .. }), "{url}: {text}");
            assert!(text.contains(says), "{url}: {text}");
            assert!(text.contains("redis://"), "{url}: {text}");
            assert!(
                !text.contains("Store::open") && !text.contains("crate"),
                "{url}: {text}"
            );
            assert!(!text.contains("pw"), "{url}: {text}");
        }
    }

    #[test]
    fn the_command_refuses_stores_no_other_process_sees() {
        for url in [
            "memory:",
            "sqlite::memory:",
            "sqlite:file::memory:?cache=shared",
        ] {
            let err = block_on(open_with(Some(url), Access::Lease)).err().unwrap();
            assert!(
                format!("{err:#}").contains("private to this one process"),
                "{url}: {err:#}"
            );
        }
    }

    #[cfg(not(feature = "azblob"))]
    #[test]
    fn a_build_without_a_store_says_which_feature_it_lacks() {
        let err = block_on(open_backend("azblob://c")).err().unwrap();
        assert!(matches!(err, Error::NotSupported(_)), "{err}");
        assert!(
            err.to_string().contains("cargo feature \"azblob\""),
            "{err}"
        );
    }

    #[cfg(feature = "azblob")]
    #[test]
    fn an_azure_store_counts_its_requests_from_zero() {
        std::env::set_var(
            "AZURE_STORAGE_CONNECTION_STRING",
            "UseDevelopmentStorage=true",
        );
        let opened = block_on(open_backend("azblob://leases")).unwrap();
        assert_eq!(opened.backend.name(), "azblob");
        assert_eq!(
            opened.requests.expect("counted")(),
            0,
            "opening sends nothing"
        );
        assert!(opened
            .concrete
            .downcast::<leasehold_azure::AzureBackend>()
            .is_ok());
    }

    #[test]
    fn redact_hides_passwords_secret_values_and_fragments() {
        assert_eq!(
            redact("azblob://c?sv=1&sig=abc"),
            "azblob://c?sv=***&sig=***"
        );
        assert_eq!(redact("azblob://user:pw@c/p"), "azblob://user:***@c/p");
        assert_eq!(
            redact("dynamodb://t?region=x&token=s3cr3t"),
            "dynamodb://t?region=x&token=***"
        );
        assert_eq!(redact("sqlite:/tmp/a.db"), "sqlite:/tmp/a.db");
        assert_eq!(redact("x://a@b#frag"), "x://a@b?***");
        // A user name alone is shown: it is no secret.
        assert_eq!(
            redact("postgres://postgres@h/nosuchdb"),
            "postgres://postgres@h/nosuchdb"
        );
    }

    /// A user name without a password is not blanked out of messages: it
    /// was, everywhere ("***://***@h/***", "*** backend failed").
    #[test]
    fn a_user_name_is_no_secret() {
        let url = "postgres://postgres@h/nosuchdb";
        let text = format!("cannot open store {url}: postgres backend failed: password missing");
        assert_eq!(scrub(&text, Some(url)), text);
        assert!(secrets(url).is_empty(), "{:?}", secrets(url));
        let url = "etcd://app@h:2379";
        assert_eq!(scrub("user app refused", Some(url)), "user app refused");
    }

    #[test]
    fn scrub_removes_every_secret_part_raw_or_decoded() {
        let url = "azblob://me:pa%2Fss@c?sig=abc%2Bdef&sv=2020";
        let text =
            format!("cannot open {url}: \"{url}\" is bad; sig abc+def, also abc%2Bdef, pass pa/ss");
        let s = scrub(&text, Some(url));
        for secret in ["abc", "pa/ss", "pa%2Fss", "me:pa"] {
            assert!(!s.contains(secret), "{secret} in {s}");
        }
        assert!(s.contains("azblob://me:***@c?sig=***&sv=***"), "{s}");
    }

    #[test]
    fn settings_that_are_no_secret_stay_readable() {
        let url =
            "dynamodb://t?region=us-east-1&endpoint=http%3A%2F%2F127.0.0.1%3A8000&token=S3CRET";
        let s = scrub(
            "region us-east-1, endpoint http://127.0.0.1:8000, S3CRET",
            Some(url),
        );
        assert_eq!(s, "region us-east-1, endpoint http://127.0.0.1:8000, ***");
        let url = "dynamodb://t?endpoint=http%3A%2F%2Fme%3APW123%40h%3A1";
        let s = scrub("endpoint http://me:PW123@h:1 refused", Some(url));
        assert!(!s.contains("PW123"), "{s}");
        // The store max TTL is no secret: a TTL error names the range.
        let url = "azblob://c?max_ttl=15s";
        let s = scrub("30s is outside the range 15s..=15s", Some(url));
        assert_eq!(s, "30s is outside the range 15s..=15s");
    }

    /// Server stores' passwords (PostgreSQL, Redis, etcd), raw or
    /// percent-decoded, never survive `scrub`; user names and the other
    /// settings stay readable, and `redact` hides the password only.
    #[test]
    fn server_store_passwords_are_scrubbed() {
        // (URL, text naming its parts, the text scrubbed, the URL redacted)
        let cases = [
            (
                "postgres://postgres:pa%40ss99@127.0.0.1:5432/db?table=t&sslmode=require",
                "postgres backend failed for postgres: pa@ss99 pa%40ss99; table t, sslmode require",
                // PostgreSQL's user name is no secret (it is often the database's name).
                "postgres backend failed for postgres: *** ***; table t, sslmode require",
                "postgres://postgres:***@127.0.0.1:5432/db?table=t&sslmode=require",
            ),
            (
                "redis://:s3cr%40t99@127.0.0.1:6379/0?prefix=jobs:&max_ttl=30s",
                "redis backend failed: s3cr@t99 s3cr%40t99; prefix jobs:, max_ttl 30s",
                "redis backend failed: *** ***; prefix jobs:, max_ttl 30s",
                "redis://:***@127.0.0.1:6379/0?prefix=jobs:&max_ttl=30s",
            ),
            (
                "etcd://app:s3cr%40t99@10.0.0.1:2379,10.0.0.2:2379?prefix=jobs/&max_ttl=30s",
                "etcd backend failed: app s3cr@t99 s3cr%40t99; prefix jobs/, max_ttl 30s",
                "etcd backend failed: app *** ***; prefix jobs/, max_ttl 30s",
                "etcd://app:***@10.0.0.1:2379,10.0.0.2:2379?prefix=jobs/&max_ttl=30s",
            ),
        ];
        for (url, text, scrubbed, redacted) in cases {
            assert_eq!(scrub(text, Some(url)), scrubbed, "{url}");
            assert_eq!(redact(url), redacted);
        }
    }

    #[test]
    fn a_mistyped_scheme_is_named_and_its_password_never_shown() {
        for url in [
            "postgres:/bob:S3CRETpw@127.0.0.1/db",
            "postgres:bob:S3CRETpw@127.0.0.1/db",
            "postgres//bob:S3CRETpw@127.0.0.1/db",
            "redis:/:S3CRETpw@127.0.0.1:6379",
            "s3:/user:S3CRETpw@bucket?endpoint=http://127.0.0.1:1",
        ] {
            let err = block_on(open_with(Some(url), Access::Lease)).err().unwrap();
            let text = scrub(&format!("{err:#}"), Some(url));
            assert!(!text.contains("S3CRETpw"), "{url}: {text}");
            assert!(text.contains("store URL starts with"), "{url}: {text}");
            assert!(!redact(url).contains("S3CRETpw"), "{url}: {}", redact(url));
        }
        // A SQLite path with an '@' is left as it is.
        assert_eq!(redact("sqlite:/home/a@b/l.db"), "sqlite:/home/a@b/l.db");
    }

    #[test]
    fn in_memory_sqlite_is_recognised() {
        assert!(is_in_memory_sqlite(":memory:"));
        assert!(is_in_memory_sqlite("file::memory:?cache=shared"));
        assert!(is_in_memory_sqlite("file:x?mode=memory"));
        assert!(!is_in_memory_sqlite("/tmp/memory.db"));
    }
}
