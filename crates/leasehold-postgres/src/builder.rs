//! Building a [`PostgresBackend`]: from a store URL, the `PG*` environment
//! variables, or in code.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use leasehold::backend::params::{split_query, QuerySpec};
use leasehold::backend::shared_builder::{
    check_max_ttl, require, split_scheme, RecordedMaxTtl, ServerCommon, ServerOptions,
};
use leasehold::{Creation, Error, Result};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use leasehold::backend::Listener;

use crate::backend::{Inner, PostgresBackend};
use crate::error::NAME;
use crate::listen::{self, Announcements};
use crate::statements::Statements;
use crate::tls::{self, SslMode};
use crate::{MAX_TTL, MIN_TTL};

const WHAT: &str = "store URL";
/// The query parameters of a `postgres://` URL: leasehold's own
/// ([`OWN_PARAMS`], the first seven), then those passed on to the client.
const ALL_PARAMS: &[&str] = &[
    "table",
    "sslmode",
    "sslrootcert",
    "max_ttl",
    "wake_ups",
    "prepared",
    "unlogged",
    "connect_timeout",
    "application_name",
    "options",
    "keepalives",
    "keepalives_idle",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
    "hostaddr",
    "host",
    "port",
    "user",
    "dbname",
    "password",
];
const PARAMS: QuerySpec = QuerySpec::new("postgres", ALL_PARAMS);
/// The parameters of [`ALL_PARAMS`] that leasehold reads; `tokio_postgres`
/// reads the others.
const OWN_PARAMS: &[&str] = ALL_PARAMS.split_at(7).0;
const FORM: &str = "the form is postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?table=NAME&sslmode=disable|prefer|require|verify-ca|verify-full&sslrootcert=PATH&max_ttl=DURATION&wake_ups=on|off&prepared=on|off&unlogged=on|off] (or postgresql://); the PG* environment variables fill in what it omits";

/// The default table name.
pub const DEFAULT_TABLE: &str = "leasehold_leases";

/// Builds a [`PostgresBackend`]. Its `Debug` output never shows the
/// password.
#[derive(Clone)]
pub struct PostgresBackendBuilder {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) table: String,
    pub(crate) ssl_mode: SslMode,
    pub(crate) root_cert: Option<PathBuf>,
    pub(crate) pool_size: usize,
    /// `None`: as `wake_ups`.
    pub(crate) prepared: Option<bool>,
    /// `Some`: make a new table UNLOGGED (or not), and refuse an existing
    /// one made the other way; `None`: as the table is (a new one logged).
    pub(crate) unlogged: Option<bool>,
    /// Max TTL, request timeout, wake-ups, creation.
    pub(crate) options: ServerOptions,
}

// tokio_postgres::Config's Debug already redacts the password.
impl std::fmt::Debug for PostgresBackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackendBuilder")
            .field("config", &self.config)
            .field("table", &self.table)
            .field("max_ttl", &self.options.max_ttl)
            .field("ssl_mode", &self.ssl_mode)
            .field("root_cert", &self.root_cert)
            .field("pool_size", &self.pool_size)
            .field("request_timeout", &self.options.request_timeout)
            .field("wake_ups", &self.options.wake_ups)
            .field("prepared", &self.prepared)
            .field("unlogged", &self.unlogged)
            .finish()
    }
}

impl PostgresBackend {
    /// A builder for the server `config` describes (see
    /// [`PostgresBackendBuilder`]).
    pub fn builder(config: tokio_postgres::Config) -> PostgresBackendBuilder {
        PostgresBackendBuilder::new(config)
    }

    /// Opens the store a URL names (see the crate docs for its form; the
    /// `PG*` environment variables fill in what it omits): connects,
    /// creates the table if missing and reads its store epoch.
    ///
    /// # Errors
    /// As [`PostgresBackendBuilder::from_url`] and
    /// [`PostgresBackendBuilder::build`].
    pub async fn from_url(url: &str) -> Result<Self> {
        PostgresBackendBuilder::from_url(url)?.build().await
    }
}

impl PostgresBackendBuilder {
    /// A builder for the server `config` describes, with the defaults: table
    /// [`DEFAULT_TABLE`], max TTL 60 s, `sslmode` prefer, 4 connections, 5 s
    /// request timeout, wake-ups on. Nothing of the environment is read here
    /// (see [`from_url`](Self::from_url) for that).
    pub fn new(config: tokio_postgres::Config) -> Self {
        PostgresBackendBuilder {
            config,
            table: DEFAULT_TABLE.to_string(),
            ssl_mode: SslMode::default(),
            root_cert: None,
            pool_size: 4,
            prepared: None,
            unlogged: None,
            options: ServerOptions::default(),
        }
    }

    /// Parses a store URL (see the crate docs for its form), with the `PG*`
    /// environment variables filling in what it omits. Nothing is
    /// contacted yet.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL or parameter; the message
    /// never holds the password.
    pub fn from_url(url: &str) -> Result<Self> {
        Self::from_url_and_env(url, |name| std::env::var(name).ok())
    }

    /// As [`from_url`](Self::from_url), with `env` standing for the
    /// environment.
    pub(crate) fn from_url_and_env(
        url: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        let (_, rest) = split_scheme(url, &["postgres", "postgresql"], FORM)?;
        let (base, query) = split_query(rest);
        let query = PARAMS.parse(query)?;
        // Passed on to the client, which knows these, encoded as it decodes
        // them (`%XX` only).
        let passed: Vec<String> = query
            .iter()
            .filter(|(name, _)| !OWN_PARAMS.contains(name))
            .map(|(name, value)| format!("{name}={}", utf8_percent_encode(value, NON_ALPHANUMERIC)))
            .collect();
        let client_url = if passed.is_empty() {
            format!("postgresql://{base}")
        } else {
            format!("postgresql://{base}?{}", passed.join("&"))
        };
        // The client's parse errors name the offending part, never the
        // password's value.
        let mut config = tokio_postgres::Config::from_str(&client_url)
            .map_err(|e| Error::invalid(WHAT, format!("{e}; {FORM}")))?;
        fill_from_env(&mut config, &env)?;
        let mut ssl_mode = query.string("sslmode").map(str::parse).transpose()?;
        let mut root_cert = query.string("sslrootcert").map(PathBuf::from);
        if ssl_mode.is_none() {
            if let Some(mode) = env("PGSSLMODE") {
                ssl_mode = Some(mode.parse()?);
            }
        }
        if root_cert.is_none() {
            root_cert = env("PGSSLROOTCERT").map(PathBuf::from);
        }
        let mut builder = PostgresBackendBuilder::new(config);
        if let Some(table) = query.string("table") {
            builder = builder.table(table);
        }
        builder.ssl_mode = ssl_mode.unwrap_or_default();
        builder.root_cert = root_cert;
        builder.options.read_query(&query)?;
        if let Some(on) = query.boolean("prepared")? {
            builder.prepared = Some(on);
        }
        builder.unlogged = query.boolean("unlogged")?;
        builder.check()?;
        Ok(builder)
    }

    /// The table (created if missing): lowercase letters, digits and `_`,
    /// optionally after a schema name and a dot (`locks.leases`).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The max TTL a table created by this backend records (1 s to 24 h;
    /// 60 s by default): no lease may be longer. An existing table keeps
    /// its own. After the table is lost under a live holder grants wait one
    /// confirmation window ([`leasehold::CONFIRMATION_WINDOW`]), whatever
    /// this says.
    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.options.max_ttl = max_ttl;
        self
    }

    /// When to use TLS.
    pub fn ssl_mode(mut self, mode: SslMode) -> Self {
        self.ssl_mode = mode;
        self
    }

    /// A PEM file of CA certificates to trust besides the system's.
    pub fn root_cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.root_cert = Some(path.into());
        self
    }

    /// How many connections the pool keeps at most (4 by default; one more
    /// is used for wake-ups).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// How long one request may take before it counts as failed (retryable)
    /// and its connection is discarded (5 s by default).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.options.request_timeout = timeout;
        self
    }

    /// Whether waiters LISTEN for releases (on by default; needs a direct
    /// or session-pooled connection, see the crate docs). Off, waiters only
    /// poll.
    pub fn wake_ups(mut self, on: bool) -> Self {
        self.options.wake_ups = on;
        self
    }

    /// Whether statements are prepared once per connection (named prepared
    /// statements, cached) instead of parsed and planned at every request:
    /// about twice the operations a second (see the crate docs). Named
    /// prepared statements are session state, so this needs a direct or
    /// session-pooled connection, as wake-ups do: by default it follows
    /// [`wake_ups`](Self::wake_ups) (so `wake_ups=off`, the setting for a
    /// transaction-mode pooler, also turns it off). Behind a
    /// transaction-mode pooler it must stay off: a named statement could be
    /// bound on a server connection where another client prepared another
    /// statement under the same name.
    pub fn prepared(mut self, on: bool) -> Self {
        self.prepared = Some(on);
        self
    }

    /// Whether the table is UNLOGGED (see the crate docs, "Unlogged
    /// table"): `true` makes a new table UNLOGGED and refuses a logged one;
    /// `false` makes a new table logged and refuses an unlogged one. Unset
    /// (the default), a new table is logged and an existing one is used as
    /// it is.
    ///
    /// An UNLOGGED table writes nothing to the WAL, so a grant commits
    /// without a disk flush; the server empties it after a crash, and it is
    /// empty on a promoted standby or a restored base backup. leasehold
    /// treats each of those as a loss of the store's data: every holder is
    /// told its lease is lost and grants wait a quarantine.
    pub fn unlogged(mut self, on: bool) -> Self {
        self.unlogged = Some(on);
        self
    }

    /// The client configuration (its `Debug` hides the password).
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// The table name as given.
    pub fn table_name(&self) -> &str {
        &self.table
    }

    pub(crate) fn check(&self) -> Result<()> {
        require("table", valid_table(&self.table), || {
            format!(
                "{:?}: use lowercase letters, digits and _ (not starting with a digit, at most 63), optionally SCHEMA.TABLE",
                self.table
            )
        })?;
        check_max_ttl(self.options.max_ttl, MIN_TTL, MAX_TTL)?;
        Ok(())
    }

    /// What opening may do to the table (default
    /// [`Creation::IfMissing`](leasehold::Creation::IfMissing)): with
    /// `Never`, nothing is created or written, ever (a missing table is
    /// [`Error::NoStore`](leasehold::Error::NoStore); a missing or restored
    /// epoch row is reported, not renewed); with `NewProven`, the epoch row
    /// of a new, empty table records that its epoch is proven (see
    /// [`Creation::NewProven`](leasehold::Creation::NewProven)).
    pub fn creation(mut self, creation: Creation) -> Self {
        self.options.creation = creation;
        self
    }

    /// Connects (checking that the server answers), creates the table if
    /// it is missing and reads its store epoch.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad table name or max TTL;
    /// [`Error::Backend`] when the server cannot be reached or refuses
    /// (retryable when that may pass).
    pub async fn build(self) -> Result<PostgresBackend> {
        self.check()?;
        let mut config = self.config.clone();
        config.ssl_mode(match self.ssl_mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        });
        let tls = tls::connector(self.ssl_mode, self.root_cert.as_deref())?;
        let target = target_of(&config);
        let channel = self.options.wake_ups.then(|| listen::channel(&self.table));
        let listener = channel.clone().map(|channel| {
            Listener::new(Announcements {
                config: config.clone(),
                tls: tls.clone(),
                channel,
            })
        });
        let manager = Manager::from_config(
            config,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(self.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(self.options.request_timeout))
            .create_timeout(Some(self.options.request_timeout))
            .recycle_timeout(Some(self.options.request_timeout))
            .build()
            .map_err(|e| Error::backend(NAME, "open", false, e.to_string()))?;
        PostgresBackend::open(Inner {
            pool,
            sql: Statements::new(&self.table, channel.as_deref(), self.unlogged == Some(true)),
            unlogged: self.unlogged,
            table: self.table,
            max_ttl: self.options.max_ttl,
            store_max_ttl: RecordedMaxTtl::new(self.options.max_ttl),
            request_timeout: self.options.request_timeout,
            prepared: self.prepared.unwrap_or(self.options.wake_ups),
            target,
            common: ServerCommon::new(listener),
            creation: self.options.creation,
        })
        .await
    }
}

fn target_of(config: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "?".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", config.get_dbname().unwrap_or(""))
}

/// Fills what the URL left out from the `PG*` variables, as libpq does.
fn fill_from_env(
    config: &mut tokio_postgres::Config,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<()> {
    if config.get_hosts().is_empty() {
        let hosts = env("PGHOST").unwrap_or_else(|| "localhost".to_string());
        for host in hosts.split(',') {
            config.host(host);
        }
    }
    if config.get_ports().is_empty() {
        if let Some(port) = env("PGPORT") {
            let port: u16 = port
                .parse()
                .map_err(|_| Error::invalid("PGPORT", format!("{port:?} is not a port number")))?;
            config.port(port);
        }
    }
    if config.get_user().is_none() {
        let user = env("PGUSER")
            .or_else(|| env("USER"))
            .unwrap_or_else(|| "postgres".to_string());
        config.user(user);
    }
    if config.get_password().is_none() {
        if let Some(password) = env("PGPASSWORD") {
            config.password(password);
        }
    }
    if config.get_dbname().is_none() {
        if let Some(db) = env("PGDATABASE") {
            config.dbname(db);
        }
    }
    if config.get_application_name().is_none() {
        config.application_name(env("PGAPPNAME").unwrap_or_else(|| "leasehold".to_string()));
    }
    if config.get_connect_timeout().is_none() {
        let secs = env("PGCONNECT_TIMEOUT")
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|s| *s > 0)
            .unwrap_or(5);
        config.connect_timeout(Duration::from_secs(secs));
    }
    // Notice a dead peer on an idle connection within about a minute.
    config.keepalives_idle(Duration::from_secs(30));
    Ok(())
}

fn valid_table(name: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && p.len() <= 63
            && !p.starts_with(|c: char| c.is_ascii_digit())
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    match name.split_once('.') {
        Some((schema, table)) => part(schema) && part(table),
        None => part(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_testkit::builders::{assert_debug_hides, assert_refused_without};

    fn parse(url: &str, env: &[(&str, &str)]) -> Result<PostgresBackendBuilder> {
        PostgresBackendBuilder::from_url_and_env(url, |name| {
            env.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    /// `url` parsed without environment.
    fn parse_ok(url: &str) -> PostgresBackendBuilder {
        parse(url, &[]).unwrap()
    }

    #[test]
    fn url_parts_and_parameters() {
        let b = parse_ok("postgres://me:s3cret@db.example:6543/app?table=locks.leases&sslmode=verify-full&max_ttl=5m&application_name=x");
        assert_eq!(b.config.get_user(), Some("me"));
        assert_eq!(b.config.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(b.config.get_dbname(), Some("app"));
        assert_eq!(b.config.get_ports(), &[6543]);
        assert_eq!(b.table, "locks.leases");
        assert_eq!(b.ssl_mode, SslMode::VerifyFull);
        assert_eq!(b.options.max_ttl, Duration::from_secs(300));
        assert_eq!(b.config.get_application_name(), Some("x"));
        assert!(b.options.wake_ups);
        assert!(!parse_ok("postgres://h/d?wake_ups=off").options.wake_ups);
        assert!(parse("postgres://h/d?wake_ups=maybe", &[]).is_err());
        // Prepared statements follow wake-ups unless told.
        assert_eq!(parse_ok("postgres://h/d").prepared, None);
        assert_eq!(
            parse_ok("postgres://h/d?wake_ups=off&prepared=on").prepared,
            Some(true)
        );
        assert!(parse("postgres://h/d?prepared=maybe", &[]).is_err());
        assert_eq!(parse_ok("postgres://h/d").unlogged, None);
        assert_eq!(parse_ok("postgres://h/d?unlogged=on").unlogged, Some(true));
        assert_eq!(
            parse_ok("postgres://h/d?unlogged=off").unlogged,
            Some(false)
        );
        assert!(parse("postgres://h/d?unlogged=maybe", &[]).is_err());
        assert!(parse("postgresql://h/db", &[]).is_ok());
    }

    #[test]
    fn client_parameters_reach_the_client_decoded_once() {
        let b = parse_ok(
            "postgres://u@h/d?application_name=night+job%2B1%25&password=p%26w%3Dx+y&wake_ups=no",
        );
        assert_eq!(b.config.get_application_name(), Some("night job+1%"));
        assert_eq!(b.config.get_password(), Some(&b"p&w=x y"[..]));
        assert!(!b.options.wake_ups);
    }

    #[test]
    fn environment_fills_what_the_url_omits() {
        let env = [
            ("PGHOST", "pg.internal"),
            ("PGPORT", "5433"),
            ("PGUSER", "svc"),
            ("PGPASSWORD", "from-env"),
            ("PGDATABASE", "jobs"),
            ("PGSSLMODE", "require"),
        ];
        let b = parse("postgres://", &env).unwrap();
        assert_eq!(b.config.get_user(), Some("svc"));
        assert_eq!(b.config.get_password(), Some(&b"from-env"[..]));
        assert_eq!(b.config.get_dbname(), Some("jobs"));
        assert_eq!(b.config.get_ports(), &[5433]);
        assert_eq!(b.ssl_mode, SslMode::Require);
        // The URL wins over the environment.
        let b = parse("postgres://u:p@h:1/d?sslmode=disable", &env).unwrap();
        assert_eq!(b.config.get_user(), Some("u"));
        assert_eq!(b.config.get_password(), Some(&b"p"[..]));
        assert_eq!(b.config.get_dbname(), Some("d"));
        assert_eq!(b.ssl_mode, SslMode::Disable);
    }

    #[test]
    fn bad_urls_are_refused_without_the_password() {
        let urls = [
            "postgres://u:hunter22@h/d?table=Bad-Name",
            "postgres://u:hunter22@h/d?table=1x",
            "postgres://u:hunter22@h/d?sslmode=maybe",
            "postgres://u:hunter22@h/d?max_ttl=forever",
            "postgres://u:hunter22@h/d?max_ttl=100ms",
            "postgres://u:hunter22@h/d?bogus=1",
            "postgres://u:hunter22@h/d?table=a&table=b",
            "postgres://u@h/d?password=hunter22&password=x",
            "postgres://u@h/d?password=hunter22%zz",
            "postgres://u:hunter22@h:notaport/d",
            "mysql://u:hunter22@h/d",
            "postgres:u:hunter22@h/d",
        ];
        assert_refused_without(&urls, "hunter22", |url| parse(url, &[]));
    }

    #[test]
    fn debug_never_shows_the_password() {
        let b = parse("postgres://u:hunter22@h/d", &[("PGPASSWORD", "x")]).unwrap();
        assert_debug_hides(&b, "hunter22", "table");
    }
}
