//! Building an [`EtcdBackend`]: from a store URL, or in code.

use leasehold::backend::params::{decode_percent, split_query, QuerySpec};
use leasehold::backend::shared_builder::{check_max_ttl, split_scheme, ServerOptions};
use leasehold::backend::SharedClock;
use leasehold::{Creation, Error, Result};
use std::time::Duration;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use leasehold::backend::shared_builder::ServerCommon;
use leasehold::backend::Listener;

use crate::backend::{EtcdBackend, Inner};
use crate::error;
use crate::grpc::Connection;
use crate::listen::Deletions;
use crate::{MAX_TTL, MIN_TTL};

const WHAT: &str = "store URL";
const FORM: &str = "the form is etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][?prefix=P&max_ttl=DURATION&wake_ups=on|off] (etcds:// for TLS)";
/// The query parameters of an `etcd://` URL.
const PARAMS: QuerySpec = QuerySpec::new("etcd", &["prefix", "max_ttl", "wake_ups"]);

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "leasehold/";

/// Builds an [`EtcdBackend`]. Its `Debug` output never shows the password.
#[derive(Clone)]
pub struct EtcdBackendBuilder {
    pub(crate) endpoints: Vec<String>,
    pub(crate) tls: bool,
    pub(crate) user: Option<(String, String)>,
    pub(crate) prefix: String,
    /// Max TTL, request timeout, wake-ups, creation.
    pub(crate) options: ServerOptions,
}

impl std::fmt::Debug for EtcdBackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackendBuilder")
            .field("endpoints", &self.endpoints)
            .field("tls", &self.tls)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("prefix", &self.prefix)
            .field("max_ttl", &self.options.max_ttl)
            .field("request_timeout", &self.options.request_timeout)
            .field("wake_ups", &self.options.wake_ups)
            .finish()
    }
}

impl EtcdBackend {
    /// A builder for the cluster at `endpoints`.
    pub fn builder<S: Into<String>>(endpoints: impl IntoIterator<Item = S>) -> EtcdBackendBuilder {
        EtcdBackendBuilder::new(endpoints)
    }

    /// Opens the store a URL names (see the crate docs).
    ///
    /// # Errors
    /// As [`EtcdBackendBuilder::from_url`] and [`EtcdBackendBuilder::build`].
    pub async fn from_url(url: &str) -> Result<Self> {
        EtcdBackendBuilder::from_url(url)?.build().await
    }
}

impl EtcdBackendBuilder {
    /// A builder for the cluster at `endpoints` (`HOST:PORT` each), with the
    /// defaults: prefix [`DEFAULT_PREFIX`], max TTL 60 s, no TLS, no user,
    /// 5 s request timeout, wake-ups on.
    pub fn new<S: Into<String>>(endpoints: impl IntoIterator<Item = S>) -> Self {
        EtcdBackendBuilder {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            tls: false,
            user: None,
            prefix: DEFAULT_PREFIX.to_string(),
            options: ServerOptions::default(),
        }
    }

    /// Parses a store URL (see the crate docs for its form). Nothing is
    /// contacted yet.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL or parameter; the message
    /// never holds the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let (scheme, rest) = split_scheme(url, &["etcd", "etcds"], FORM)?;
        let tls = scheme == "etcds";
        let (base, query) = split_query(rest);
        let base = base.strip_suffix('/').unwrap_or(base);
        if base.contains('/') {
            return Err(Error::invalid(
                WHAT,
                format!("no path is allowed (the key prefix is ?prefix=); {FORM}"),
            ));
        }
        let (user, hosts) = match base.rsplit_once('@') {
            Some((userinfo, hosts)) => {
                let Some((u, p)) = userinfo.split_once(':') else {
                    return Err(Error::invalid(
                        WHAT,
                        format!("a user needs a password (USER:PASSWORD@); {FORM}"),
                    ));
                };
                (Some((decode(u)?, decode(p)?)), hosts)
            }
            None => (None, base),
        };
        let mut endpoints = Vec::new();
        for hp in hosts.split(',') {
            let ok = match hp.rsplit_once(':') {
                Some((h, p)) => !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0),
                None => false,
            };
            if !ok {
                return Err(Error::invalid(
                    WHAT,
                    format!("{hp:?} is not HOST:PORT; {FORM}"),
                ));
            }
            endpoints.push(hp.to_string());
        }
        let mut b = EtcdBackendBuilder::new(endpoints);
        b.tls = tls;
        b.user = user;
        let query = PARAMS.parse(query)?;
        if let Some(prefix) = query.string("prefix") {
            b.prefix = prefix.to_string();
        }
        b.options.read_query(&query)?;
        b.check()?;
        Ok(b)
    }

    /// The key prefix every key of this store lives under (default
    /// [`DEFAULT_PREFIX`]; not empty). Two prefixes are two stores.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The max TTL a store created by this backend records (2 s to 24 h;
    /// 60 s by default). An existing store keeps its own.
    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.options.max_ttl = max_ttl;
        self
    }

    /// Authenticate as `user` (etcd's auth must be enabled on the server).
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// TLS to every endpoint, verified against the system's roots (needs
    /// the crate feature `tls`).
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    /// How long one request may take before it counts as failed
    /// (retryable); 5 s by default.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.options.request_timeout = timeout;
        self
    }

    /// Whether waiters watch for releases (on by default). Off, they poll.
    pub fn wake_ups(mut self, on: bool) -> Self {
        self.options.wake_ups = on;
        self
    }

    /// The monotonic clock a session's age is timed on (the system's,
    /// which counts a suspend of the machine, unless set; tests inject a
    /// [`ManualClock`](leasehold::backend::ManualClock)). A session's etcd
    /// lease ages on the server while this machine sleeps, so its age
    /// must not be read off tokio's clock, which stands still then.
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.options.clock = Some(clock);
        self
    }

    /// The key prefix.
    pub fn prefix_name(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.endpoints.is_empty() {
            return Err(Error::invalid("endpoints", "at least one HOST:PORT"));
        }
        if self.prefix.is_empty() {
            return Err(Error::invalid("prefix", "must not be empty"));
        }
        check_max_ttl(self.options.max_ttl, MIN_TTL, MAX_TTL)?;
        if self.tls && !cfg!(feature = "tls") {
            return Err(Error::invalid(
                WHAT,
                "etcds:// needs leasehold-etcd's feature \"tls\"",
            ));
        }
        Ok(())
    }

    /// What opening may do to the store (default
    /// [`Creation::IfMissing`](leasehold::Creation::IfMissing)): with
    /// `Never`, nothing is written (a prefix without keys is
    /// [`Error::NoStore`](leasehold::Error::NoStore)); with `NewProven`,
    /// the marker of a new store (a prefix without keys) records that its
    /// epoch is proven (see
    /// [`Creation::NewProven`](leasehold::Creation::NewProven)).
    pub fn creation(mut self, creation: Creation) -> Self {
        self.options.creation = creation;
        self
    }

    /// Connects (checking that the cluster answers, and authenticating),
    /// and reads or creates the store's epoch.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad prefix or max TTL;
    /// [`Error::Backend`] when the cluster cannot be reached or refuses.
    pub async fn build(self) -> Result<EtcdBackend> {
        self.check()?;
        let scheme = if self.tls { "https" } else { "http" };
        let urls: Vec<String> = self
            .endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect();
        let conn = tokio::time::timeout(
            self.options.request_timeout,
            Connection::connect(&urls, self.options.request_timeout, self.user.clone()),
        )
        .await
        .map_err(|_| error::timed_out("connect", self.options.request_timeout))?
        .map_err(error::connect)?;
        let clock = self.options.clock_or_system();
        let queue = Arc::new(crate::queue::Queue::new(clock.clone()));
        let listener = self
            .options
            .wake_ups
            .then(|| Listener::new(Deletions::new(conn.clone(), &self.prefix, queue.clone())));
        EtcdBackend::open(Inner {
            conn,
            endpoints: self.endpoints,
            prefix: self.prefix,
            max_ttl: self.options.max_ttl,
            request_timeout: self.options.request_timeout,
            common: ServerCommon::new(listener),
            requests: AtomicU64::new(0),
            creation: self.options.creation,
            sessions: Default::default(),
            seen: Default::default(),
            held: Default::default(),
            queues: self.options.wake_ups,
            queue,
            view_stop: Default::default(),
            granted: Default::default(),
            clock,
        })
        .await
    }
}

/// `%XX` decoding of a user name or password (which may hold `@`, `:` or
/// `,`); the message never shows the part.
fn decode(s: &str) -> Result<String> {
    decode_percent(s).ok_or_else(|| {
        Error::invalid(
            WHAT,
            "the user name or password is not valid percent-encoded UTF-8 (a % must be followed by two hex digits)",
        )
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use leasehold_testkit::builders::{assert_debug_hides, assert_refused_without};

    #[test]
    fn url_parts_and_parameters() {
        let b = EtcdBackendBuilder::from_url(
            "etcd://me:s%40cret@10.0.0.1:2379,10.0.0.2:2379?prefix=jobs/&max_ttl=5m&wake_ups=off",
        )
        .unwrap();
        assert_eq!(b.endpoints, ["10.0.0.1:2379", "10.0.0.2:2379"]);
        assert_eq!(b.user, Some(("me".into(), "s@cret".into())));
        assert_eq!(b.prefix, "jobs/");
        assert_eq!(b.options.max_ttl, Duration::from_secs(300));
        assert!(!b.options.wake_ups && !b.tls);
        // Query values are form-decoded; a password's `+` stays a `+`.
        let b =
            EtcdBackendBuilder::from_url("etcd://me:a+b@h:1?prefix=a%2Fb+c/&wake_ups=no").unwrap();
        assert_eq!(b.user, Some(("me".into(), "a+b".into())));
        assert_eq!(b.prefix, "a/b c/");
        assert!(!b.options.wake_ups);
        let b = EtcdBackendBuilder::from_url("etcd://127.0.0.1:2379/").unwrap();
        assert_eq!(b.prefix, DEFAULT_PREFIX);
        assert!(b.user.is_none() && b.options.wake_ups);
    }

    #[test]
    fn bad_urls_are_refused_without_the_password() {
        let urls = [
            "etcd://u:hunter22@h",
            "etcd://u:hunter22@h:notaport",
            "etcd://u:hunter22@h:2379?bogus=1",
            "etcd://u:hunter22@h:2379?max_ttl=forever",
            "etcd://u:hunter22@h:2379?max_ttl=1s",
            "etcd://u:hunter22@h:2379?max_ttl=5m&max_ttl=1m",
            "etcd://u:hunter22@h:2379?wake_ups=maybe",
            "etcd://u:hunter22%zz@h:2379",
            "etcd://u:hunter22@h:2379?prefix=",
            "etcd://u:hunter22@h:2379/some/path",
            "etcd://u:hunter22@h:2379,",
            "redis://u:hunter22@h:2379",
            "etcd:u:hunter22@h:2379",
        ];
        assert_refused_without(&urls, "hunter22", EtcdBackendBuilder::from_url);
    }

    #[test]
    fn debug_never_shows_the_password() {
        let b = EtcdBackendBuilder::from_url("etcd://u:hunter22@h:1").unwrap();
        assert_debug_hides(&b, "hunter22", "prefix");
    }
}
