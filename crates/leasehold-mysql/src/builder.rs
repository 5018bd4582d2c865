//! Building a [`MysqlBackend`]: from a store URL or in code.

use std::path::PathBuf;
use std::time::Duration;

use leasehold::backend::params::{split_query, QuerySpec};
use leasehold::backend::shared_builder::{
    check_max_ttl, require, split_scheme, RecordedMaxTtl, ServerCommon, ServerOptions,
};
use leasehold::{Creation, Error, Result};
use mysql_async::prelude::Queryable;
use mysql_async::{Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts, SslOpts};

use crate::backend::{Inner, MysqlBackend};
use crate::statements::Statements;
use crate::{MAX_TTL, MIN_TTL};

const WHAT: &str = "store URL";
const PARAMS: QuerySpec = QuerySpec::new(
    "mysql",
    &["table", "max_ttl", "sslmode", "sslrootcert", "pool_size"],
);
const FORM: &str = "the form is mysql://USER[:PASSWORD]@HOST[:PORT]/DB[?table=NAME&max_ttl=DURATION&sslmode=disable|require|verify-ca|verify-full&sslrootcert=PATH&pool_size=N] (or mariadb://); MYSQL_PWD gives the password when the URL has none";

/// How long (whole seconds) MariaDB lets a connection of this backend sit
/// idle inside a transaction before it ends it: an acquire frozen between
/// its statements holds its key's row lock no longer than this.
pub(crate) const IDLE_IN_TRANSACTION_SECS: u64 = 2;

/// How long (whole seconds) a statement of this backend waits for a row
/// lock before it fails (retryably): less than a request's timeout.
pub(crate) const LOCK_WAIT_SECS: u64 = 2;

/// The table a store URL without `table=` uses.
pub const DEFAULT_TABLE: &str = "leasehold_leases";

/// When TLS is used. Whenever it is, the server's certificate chain and
/// host name are verified (against the built-in web roots plus
/// `sslrootcert`), whichever mode asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// Never (the default).
    #[default]
    Disable,
    /// Always, verified.
    Require,
    /// Always, verified (the same as `Require`: named for libpq's users).
    VerifyCa,
    /// Always, verified.
    VerifyFull,
}

impl std::str::FromStr for SslMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(Error::invalid(
                    "sslmode",
                    format!("{other:?}: use disable, require, verify-ca or verify-full"),
                ))
            }
        })
    }
}

/// Builds a [`MysqlBackend`]. `Debug` never shows the password.
#[derive(Clone)]
pub struct MysqlBackendBuilder {
    pub(crate) opts: Opts,
    pub(crate) table: String,
    pub(crate) ssl_mode: SslMode,
    pub(crate) root_cert: Option<PathBuf>,
    pub(crate) pool_size: usize,
    pub(crate) options: ServerOptions,
}

impl std::fmt::Debug for MysqlBackendBuilder {
    // mysql_async's `Opts` prints its password: not shown here.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlBackendBuilder")
            .field("target", &target_of(&self.opts))
            .field("user", &self.opts.user())
            .field("table", &self.table)
            .field("max_ttl", &self.options.max_ttl)
            .field("ssl_mode", &self.ssl_mode)
            .field("root_cert", &self.root_cert)
            .field("pool_size", &self.pool_size)
            .field("request_timeout", &self.options.request_timeout)
            .finish_non_exhaustive()
    }
}

impl MysqlBackend {
    /// A builder for a server the client options `opts` describe.
    pub fn builder(opts: Opts) -> MysqlBackendBuilder {
        MysqlBackendBuilder::new(opts)
    }

    /// Opens the store a URL names (see the [crate docs](crate)).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL; [`Error::Backend`] when
    /// the server cannot be reached or refuses.
    pub async fn from_url(url: &str) -> Result<Self> {
        MysqlBackendBuilder::from_url(url)?.build().await
    }
}

impl MysqlBackendBuilder {
    /// With the client options `opts` (server, user, password, database)
    /// and the defaults for the rest.
    pub fn new(opts: Opts) -> Self {
        MysqlBackendBuilder {
            opts,
            table: DEFAULT_TABLE.to_string(),
            ssl_mode: SslMode::default(),
            root_cert: None,
            pool_size: 8,
            options: ServerOptions::default(),
        }
    }

    /// From a store URL (see the [crate docs](crate)); `MYSQL_PWD` gives
    /// the password when the URL has none.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming what is wrong (never the password).
    pub fn from_url(url: &str) -> Result<Self> {
        Self::from_url_and_env(url, |name| std::env::var(name).ok())
    }

    pub(crate) fn from_url_and_env(
        url: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        let (_, rest) = split_scheme(url, &["mysql", "mariadb"], FORM)?;
        let (base, query) = split_query(rest);
        let query = PARAMS.parse(query)?;
        if base.contains('#') {
            return Err(Error::invalid(
                WHAT,
                format!("a fragment (#) has no meaning here; {FORM}"),
            ));
        }
        // The client parses the rest (and decodes %XX in the user and the
        // password); its errors name the part, never the password.
        let opts = Opts::from_url(&format!("mysql://{base}"))
            .map_err(|e| Error::invalid(WHAT, format!("{e}; {FORM}")))?;
        let mut opts = OptsBuilder::from_opts(opts);
        if !base.contains('@') || !base.split('@').next().unwrap_or("").contains(':') {
            if let Some(password) = env("MYSQL_PWD") {
                opts = opts.pass(Some(password));
            }
        }
        let mut builder = MysqlBackendBuilder::new(opts.into());
        if let Some(table) = query.string("table") {
            builder = builder.table(table);
        }
        if let Some(mode) = query.string("sslmode") {
            builder.ssl_mode = mode.parse()?;
        }
        builder.root_cert = query.string("sslrootcert").map(PathBuf::from);
        if let Some(size) = query.integer("pool_size")? {
            require("pool_size", (1..=1000).contains(&size), || {
                format!("{size}: use 1 to 1000")
            })?;
            builder.pool_size = size as usize;
        }
        if let Some(max_ttl) = query.duration("max_ttl")? {
            builder.options.max_ttl = max_ttl;
        }
        builder.check()?;
        Ok(builder)
    }

    /// The table (default [`DEFAULT_TABLE`]): lowercase letters, digits and
    /// `_`, optionally `DB.TABLE`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The max TTL a table created now records (default 60 s; 1 s to 24 h).
    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.options.max_ttl = max_ttl;
        self
    }

    /// When to use TLS (see [`SslMode`]).
    pub fn ssl_mode(mut self, mode: SslMode) -> Self {
        self.ssl_mode = mode;
        self
    }

    /// One more root certificate (PEM) to verify the server's with.
    pub fn root_cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.root_cert = Some(path.into());
        self
    }

    /// How many connections the backend keeps at most (default 8): one per
    /// operation in flight.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// How long one operation may take before it fails, retryably (default
    /// 5 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.options.request_timeout = timeout;
        self
    }

    /// What opening may do to the store (default
    /// [`Creation::IfMissing`]).
    pub fn creation(mut self, creation: Creation) -> Self {
        self.options.creation = creation;
        self
    }

    /// The table's name.
    pub fn table_name(&self) -> &str {
        &self.table
    }

    /// The client options (server, user, database; `Debug` on them prints
    /// the password).
    pub fn opts(&self) -> &Opts {
        &self.opts
    }

    pub(crate) fn check(&self) -> Result<()> {
        require("table", valid_table(&self.table), || {
            format!(
                "{:?}: use lowercase letters, digits and _ (not starting with a digit, at most 64), optionally DB.TABLE",
                self.table
            )
        })?;
        require(
            "store URL",
            self.opts.db_name().is_some() || self.table.contains('.'),
            || {
                format!(
                    "it names no database: add /DB after the host, or give table=DB.TABLE; {FORM}"
                )
            },
        )?;
        check_max_ttl(self.options.max_ttl, MIN_TTL, MAX_TTL)?;
        Ok(())
    }

    /// Opens the store: connects, creates the table if missing (unless
    /// [`creation`](Self::creation) says not to) and reads its epoch.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad setting; [`Error::Backend`] when
    /// the server cannot be reached or refuses.
    pub async fn build(self) -> Result<MysqlBackend> {
        self.check()?;
        let constraints = PoolConstraints::new(1, self.pool_size)
            .ok_or_else(|| Error::invalid("pool_size", "must be at least 1"))?;
        let mut opts = OptsBuilder::from_opts(self.opts.clone())
            // A renewal that finds its row counts as done even if the row
            // came out the same.
            .client_found_rows(true)
            .tcp_keepalive(Some(Duration::from_secs(30)))
            // The address the URL names, always: the client would otherwise
            // switch a loopback connection to the server's Unix socket
            // (bypassing, say, a proxy on the port).
            .prefer_socket(false)
            .after_connect(|conn| {
                Box::pin(async move {
                    // The same behaviour whatever the server's defaults:
                    // no gap locks (two acquirers of new keys never
                    // deadlock on them; a collision is a duplicate key,
                    // tried again), lock waits that end within a request,
                    // and UTC for the table's CREATE_TIME.
                    conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await?;
                    conn.query_drop(format!(
                        "SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_SECS}, time_zone = '+00:00'"
                    ))
                    .await?;
                    // MariaDB ends a connection left idle inside a
                    // transaction this long, and with it the row locks of an
                    // acquire frozen between its statements (see the crate
                    // docs). MySQL has no such setting: the error is ignored.
                    let _ = conn
                        .query_drop(format!(
                            "SET SESSION idle_transaction_timeout = {IDLE_IN_TRANSACTION_SECS}"
                        ))
                        .await;
                    Ok(())
                })
            })
            .stmt_cache_size(32)
            .pool_opts(
                PoolOpts::default()
                    .with_constraints(constraints)
                    // One connection stays open; more are closed after a
                    // minute idle (not at the next 30 s check, which
                    // would make a renewal every so often reconnect).
                    .with_inactive_connection_ttl(Duration::from_secs(60))
                    // A connection back in the pool keeps its prepared
                    // statements (the session state this backend uses: no
                    // variables, no locks); an unfinished transaction is
                    // rolled back by the pool either way.
                    .with_reset_connection(false),
            );
        if self.ssl_mode != SslMode::Disable {
            let mut ssl = SslOpts::default();
            if let Some(path) = &self.root_cert {
                ssl = ssl.with_root_certs(vec![path.clone().into()]);
            }
            opts = opts.ssl_opts(Some(ssl));
        }
        let opts: Opts = opts.into();
        let target = target_of(&opts);
        let pool = Pool::new(opts);
        MysqlBackend::open(Inner {
            pool,
            sql: Statements::new(&self.table),
            table: self.table,
            max_ttl: self.options.max_ttl,
            store_max_ttl: RecordedMaxTtl::new(self.options.max_ttl),
            request_timeout: self.options.request_timeout,
            target,
            common: ServerCommon::new(None),
            creation: self.options.creation,
        })
        .await
    }
}

/// `host:port/db`, for Debug and errors (never the user or password).
fn target_of(opts: &Opts) -> String {
    format!(
        "{}:{}/{}",
        opts.ip_or_hostname(),
        opts.tcp_port(),
        opts.db_name().unwrap_or("")
    )
}

fn valid_table(name: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && p.len() <= 64
            && !p.starts_with(|c: char| c.is_ascii_digit())
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    match name.split_once('.') {
        Some((db, table)) => part(db) && part(table),
        None => part(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_testkit::builders::{assert_debug_hides, assert_refused_without};

    fn parse(url: &str, env: &[(&str, &str)]) -> Result<MysqlBackendBuilder> {
        MysqlBackendBuilder::from_url_and_env(url, |name| {
            env.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn url_parts_and_parameters() {
        let b = parse(
            "mysql://me:s3cret@db.example:3307/app?table=locks.leases&sslmode=verify-full&max_ttl=5m&pool_size=3",
            &[],
        )
        .unwrap();
        assert_eq!(b.opts.user(), Some("me"));
        assert_eq!(b.opts.pass(), Some("s3cret"));
        assert_eq!(b.opts.db_name(), Some("app"));
        assert_eq!(b.opts.tcp_port(), 3307);
        assert_eq!(b.opts.ip_or_hostname(), "db.example");
        assert_eq!(b.table, "locks.leases");
        assert_eq!(b.ssl_mode, SslMode::VerifyFull);
        assert_eq!(b.options.max_ttl, Duration::from_secs(300));
        assert_eq!(b.pool_size, 3);
        let b = parse("mariadb://me@h/app", &[]).unwrap();
        assert_eq!(b.opts.tcp_port(), 3306);
        assert_eq!(b.table, DEFAULT_TABLE);
        assert_eq!(b.ssl_mode, SslMode::Disable);
        // Percent-encoded user and password.
        let b = parse("mysql://a%40b:p%2Fw%3Ad@h/app", &[]).unwrap();
        assert_eq!(b.opts.user(), Some("a@b"));
        assert_eq!(b.opts.pass(), Some("p/w:d"));
    }

    #[test]
    fn the_password_comes_from_mysql_pwd_only_when_the_url_has_none() {
        let env = [("MYSQL_PWD", "from-env")];
        assert_eq!(
            parse("mysql://me@h/app", &env).unwrap().opts.pass(),
            Some("from-env")
        );
        assert_eq!(
            parse("mysql://me:url@h/app", &env).unwrap().opts.pass(),
            Some("url")
        );
        assert_eq!(parse("mysql://me@h/app", &[]).unwrap().opts.pass(), None);
    }

    #[test]
    fn bad_urls_are_refused_without_the_password() {
        assert_refused_without(
            &[
                "postgres://me:s3cret@h/app",
                "mysql://me:s3cret@h/app?table=Bad-Name",
                "mysql://me:s3cret@h/app?table=1abc",
                "mysql://me:s3cret@h/app?sslmode=prefer",
                "mysql://me:s3cret@h/app?max_ttl=0s",
                "mysql://me:s3cret@h/app?max_ttl=2d",
                "mysql://me:s3cret@h/app?pool_size=0",
                "mysql://me:s3cret@h/app?wake_ups=on",
                "mysql://me:s3cret@h/app?nonsense=1",
                "mysql://me:s3cret@h:99999/app",
                "mysql://me:s3cret@h",
                "mysql://me:s3cret@h/app#frag",
            ],
            "s3cret",
            |url| parse(url, &[]),
        );
        // A database named by the table instead of the path is enough.
        assert!(parse("mysql://me@h?table=app.leases", &[]).is_ok());
    }

    #[test]
    fn debug_hides_the_password() {
        let b = parse("mysql://me:s3cret@h/app", &[]).unwrap();
        assert_debug_hides(&b, "s3cret", "h:3306/app");
    }
}
