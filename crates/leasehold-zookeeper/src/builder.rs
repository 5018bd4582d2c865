//! Building a [`ZkBackend`]: from a store URL, or in code.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::backend::params::{decode_percent, split_query, QuerySpec};
use leasehold::backend::shared_builder::{
    check_max_ttl, check_range, split_scheme, RecordedMaxTtl, ServerCommon, ServerOptions,
};
use leasehold::backend::{Listener, Observations, SharedClock};
use leasehold::{Creation, Error, Result};

use crate::backend::{Inner, ZkBackend};
use crate::client::Connection;
use crate::listen::RecordWrites;
use crate::names::{check_root, Paths, DEFAULT_ROOT};
use crate::{MAX_TTL, MIN_TTL};

const WHAT: &str = "store URL";
const FORM: &str = "the form is zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/CHROOT][?max_ttl=DURATION&wake_ups=on|off&takeover_margin=DURATION]";
/// The query parameters of a `zk://` URL.
const PARAMS: QuerySpec = QuerySpec::new("zookeeper", &["max_ttl", "wake_ups", "takeover_margin"]);

/// The default takeover margin.
pub const DEFAULT_TAKEOVER_MARGIN: Duration = Duration::from_millis(200);

/// Builds a [`ZkBackend`]. Its `Debug` output never shows the password.
#[derive(Clone)]
pub struct ZkBackendBuilder {
    hosts: Vec<String>,
    root: String,
    user: Option<(String, String)>,
    margin: Duration,
    /// Max TTL, request timeout, wake-ups, creation, clock.
    options: ServerOptions,
}

impl std::fmt::Debug for ZkBackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkBackendBuilder")
            .field("hosts", &self.hosts)
            .field("root", &self.root)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("takeover_margin", &self.margin)
            .field("max_ttl", &self.options.max_ttl)
            .field("request_timeout", &self.options.request_timeout)
            .field("wake_ups", &self.options.wake_ups)
            .field("creation", &self.options.creation)
            .finish()
    }
}

impl ZkBackend {
    /// A builder for the ensemble at `hosts` (`HOST:PORT` each).
    pub fn builder<S: Into<String>>(hosts: impl IntoIterator<Item = S>) -> ZkBackendBuilder {
        ZkBackendBuilder::new(hosts)
    }

    /// Opens the store a URL names (see the crate docs).
    ///
    /// # Errors
    /// As [`ZkBackendBuilder::from_url`] and [`ZkBackendBuilder::build`].
    pub async fn from_url(url: &str) -> Result<Self> {
        ZkBackendBuilder::from_url(url)?.build().await
    }
}

impl ZkBackendBuilder {
    /// A builder for the ensemble at `hosts` (`HOST:PORT` each), with the
    /// defaults: root [`DEFAULT_ROOT`], max TTL 60 s, no credentials, 5 s
    /// request timeout, wake-ups on, takeover margin 200 ms.
    pub fn new<S: Into<String>>(hosts: impl IntoIterator<Item = S>) -> Self {
        ZkBackendBuilder {
            hosts: hosts.into_iter().map(Into::into).collect(),
            root: DEFAULT_ROOT.to_string(),
            user: None,
            margin: DEFAULT_TAKEOVER_MARGIN,
            options: ServerOptions::default(),
        }
    }

    /// Parses a store URL (see the crate docs for its form). Nothing is
    /// contacted yet.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL or parameter; the
    /// message never holds the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let (_, rest) = split_scheme(url, &["zk"], FORM)?;
        let (base, query) = split_query(rest);
        let (authority, root) = match base.find('/') {
            Some(i) => (&base[..i], Some(&base[i..])),
            None => (base, None),
        };
        let (user, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => {
                let Some((u, p)) = userinfo.split_once(':') else {
                    return Err(Error::invalid(
                        WHAT,
                        format!("a user needs a password (USER:PASSWORD@); {FORM}"),
                    ));
                };
                (Some((decode(u)?, decode(p)?)), hosts)
            }
            None => (None, authority),
        };
        let mut list = Vec::new();
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
            list.push(hp.to_string());
        }
        let mut b = ZkBackendBuilder::new(list);
        b.user = user;
        if let Some(root) = root.filter(|r| *r != "/") {
            b.root = root.strip_suffix('/').unwrap_or(root).to_string();
        }
        let query = PARAMS.parse(query)?;
        b.options.read_query(&query)?;
        if let Some(margin) = query.duration("takeover_margin")? {
            b.margin = margin;
        }
        b.check()?;
        Ok(b)
    }

    /// The node the store lives under (default [`DEFAULT_ROOT`]): two
    /// roots are two stores. Created, with its parents, where missing.
    pub fn root(mut self, root: impl Into<String>) -> Self {
        self.root = root.into();
        self
    }

    /// The max TTL a store created by this backend records (1 s to 24 h;
    /// 60 s by default). An existing store keeps its own.
    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.options.max_ttl = max_ttl;
        self
    }

    /// Authenticate with ZooKeeper's `digest` scheme as `user`; nodes the
    /// backend creates then carry the creator-only ACL (see the README,
    /// "Permissions and ACLs").
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
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

    /// Added to a holder's TTL (and its 0.1 % for clock rates) before a
    /// waiter that saw its record unchanged for that long takes over
    /// (200 ms by default, at most 1 min).
    pub fn takeover_margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// What opening may do (default [`Creation::IfMissing`]).
    pub fn creation(mut self, creation: Creation) -> Self {
        self.options.creation = creation;
        self
    }

    /// The monotonic clock takeovers are timed on (the system's, which
    /// counts a suspend, unless set; tests inject a
    /// [`ManualClock`](leasehold::backend::ManualClock)).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.options.clock = Some(clock);
        self
    }

    /// The store's root node.
    pub fn root_name(&self) -> &str {
        &self.root
    }

    fn check(&self) -> Result<()> {
        if self.hosts.is_empty() {
            return Err(Error::invalid("hosts", "at least one HOST:PORT"));
        }
        check_root(&self.root)?;
        check_max_ttl(self.options.max_ttl, MIN_TTL, MAX_TTL)?;
        check_range(
            "takeover margin",
            self.margin,
            Duration::ZERO,
            Duration::from_secs(60),
            || format!("{:?} is outside 0s..=60s", self.margin),
        )?;
        check_range(
            "request timeout",
            self.options.request_timeout,
            Duration::from_millis(100),
            Duration::from_secs(600),
            || format!("{:?} is outside 100ms..=600s", self.options.request_timeout),
        )
    }

    /// Connects, reads the store's epoch (creating the store where it is
    /// missing, unless [`Creation::Never`]), and returns the backend.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for bad settings; a retryable backend error
    /// when no server answers; [`Error::NoStore`] with `Creation::Never`
    /// and no store; [`Error::UnsupportedProtocol`] for a store of a newer
    /// protocol.
    ///
    /// # Cancel safety
    /// Cancel safe: a store created before the cancel stays, as any
    /// other process would find it.
    pub async fn build(self) -> Result<ZkBackend> {
        self.check()?;
        let auth = self.user.as_ref().map(|(u, p)| format!("{u}:{p}"));
        let conn = Arc::new(Connection::new(
            &self.hosts,
            auth,
            self.options.request_timeout,
        ));
        let paths = Paths::new(&self.root);
        let listener = self.options.wake_ups.then(|| {
            Listener::new(RecordWrites {
                conn: conn.clone(),
                paths: paths.clone(),
            })
        });
        let inner = Inner {
            conn,
            paths,
            clock: self.options.clock_or_system(),
            margin: self.margin,
            max_ttl: RecordedMaxTtl::new(self.options.max_ttl),
            observations: Observations::default(),
            epoch: Mutex::new(None),
            common: ServerCommon::new(listener),
            writes: Default::default(),
            options: self.options,
        };
        let creation = inner.options.creation;
        let state = inner.refresh_epoch("open").await?;
        inner.common.opened(state.epoch);
        inner.common.created(false);
        let mut inner = inner;
        inner.options.creation = creation.after_open();
        Ok(ZkBackend {
            inner: Arc::new(inner),
        })
    }
}

fn decode(raw: &str) -> Result<String> {
    decode_percent(raw).ok_or_else(|| {
        Error::invalid(
            WHAT,
            format!("the credentials are not valid percent-encoding (not shown); {FORM}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_hosts_root_credentials_and_parameters() {
        let b = ZkBackendBuilder::from_url("zk://127.0.0.1:2181").unwrap();
        assert_eq!(b.hosts, ["127.0.0.1:2181"]);
        assert_eq!(b.root, DEFAULT_ROOT);
        assert_eq!(b.options.max_ttl, Duration::from_secs(60));
        assert!(b.options.wake_ups);
        assert_eq!(b.margin, DEFAULT_TAKEOVER_MARGIN);

        let b = ZkBackendBuilder::from_url(
            "zk://u%40x:p%3Aw@a:1,b:2/apps/locks/?max_ttl=30s&wake_ups=off&takeover_margin=1s",
        )
        .unwrap();
        assert_eq!(b.hosts, ["a:1", "b:2"]);
        assert_eq!(b.root, "/apps/locks");
        assert_eq!(b.user, Some(("u@x".into(), "p:w".into())));
        assert_eq!(b.options.max_ttl, Duration::from_secs(30));
        assert!(!b.options.wake_ups);
        assert_eq!(b.margin, Duration::from_secs(1));
        // A bare `/` is no chroot.
        assert_eq!(
            ZkBackendBuilder::from_url("zk://h:1/").unwrap().root,
            DEFAULT_ROOT
        );
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (url, says) in [
            ("zookeeper://h:1", "the form is zk://"),
            ("zk://h", "is not HOST:PORT"),
            ("zk://h:0", "is not HOST:PORT"),
            ("zk://h:1,,k:2", "is not HOST:PORT"),
            ("zk://:1", "is not HOST:PORT"),
            ("zk://u@h:1", "a user needs a password"),
            ("zk://h:1/a//b", "a chroot is"),
            ("zk://h:1/zookeeper", "a chroot is"),
            ("zk://h:1/a b", "a chroot is"),
            ("zk://h:1?prefix=x", "unknown parameter \"prefix\""),
            ("zk://h:1?max_ttl=10", "max_ttl must be a duration"),
            ("zk://h:1?max_ttl=100ms", "max ttl"),
            ("zk://h:1?max_ttl=2d", "max ttl"),
            ("zk://h:1?wake_ups=maybe", "wake_ups must be true or false"),
            ("zk://h:1?takeover_margin=2m", "takeover margin"),
            ("zk://h:1?max_ttl=1s&max_ttl=2s", "more than once"),
        ] {
            let err = ZkBackendBuilder::from_url(url).unwrap_err();
            assert!(matches!(err, Error::InvalidInput { .. }), "{url}: {err:?}");
            assert!(err.to_string().contains(says), "{url}: {err}");
        }
    }

    #[test]
    fn the_password_is_never_shown() {
        let b = ZkBackendBuilder::from_url("zk://user:S3CRET@h:1").unwrap();
        assert!(!format!("{b:?}").contains("S3CRET"));
        let err = ZkBackendBuilder::from_url("zk://user:S3CRET%zz@h:1").unwrap_err();
        assert!(!err.to_string().contains("S3CRET"), "{err}");
        let err = ZkBackendBuilder::from_url("zk://user:S3CRET@h?x=1").unwrap_err();
        assert!(!err.to_string().contains("S3CRET"), "{err}");
    }

    #[test]
    fn builder_settings_are_checked_at_build() {
        let b = ZkBackendBuilder::new(["h:1"]).root("relative");
        assert!(b.check().unwrap_err().to_string().contains("a chroot is"));
        let b = ZkBackendBuilder::new(Vec::<String>::new());
        assert!(b.check().is_err());
        let b = ZkBackendBuilder::new(["h:1"]).request_timeout(Duration::ZERO);
        assert!(b
            .check()
            .unwrap_err()
            .to_string()
            .contains("request timeout"));
    }
}
