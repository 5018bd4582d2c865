//! Mapping the client's errors into [`leasehold::Error`], in one place.

use leasehold::Error;
use mysql_async::{DriverError, Error as MyError};

pub(crate) const NAME: &str = "mysql";

/// Server error codes (`ER_*`, the same numbers on MySQL and MariaDB).
pub(crate) mod code {
    /// `ER_NO_SUCH_TABLE`: the table is missing.
    pub const NO_SUCH_TABLE: u16 = 1146;
    /// `ER_DUP_ENTRY`: a row with that key was inserted meanwhile.
    pub const DUP_ENTRY: u16 = 1062;
    /// `ER_LOCK_DEADLOCK`: the transaction was rolled back.
    pub const LOCK_DEADLOCK: u16 = 1213;
    /// `ER_LOCK_WAIT_TIMEOUT`.
    pub const LOCK_WAIT_TIMEOUT: u16 = 1205;
}

/// The server's error code, if `e` is the server's answer.
pub(crate) fn server_code(e: &MyError) -> Option<u16> {
    match e {
        MyError::Server(s) => Some(s.code),
        _ => None,
    }
}

/// A failure of the database client during `op`. Connection failures,
/// deadlocks, lock waits and a server shutting down or out of connections
/// are retryable; SQL, permission and configuration errors are not. The
/// message never holds the password: the client's errors do not carry
/// its options.
pub(crate) fn db(op: &'static str, e: MyError) -> Error {
    let retryable = match &e {
        MyError::Io(_) => true,
        MyError::Driver(d) => !matches!(
            d,
            DriverError::UnknownAuthPlugin { .. }
                | DriverError::MysqlOldPasswordDisabled
                | DriverError::CleartextPluginDisabled
                | DriverError::NoClientSslFlagFromServer
                | DriverError::CantParseServerVersion { .. }
        ),
        MyError::Server(s) => is_transient(s.code),
        MyError::Url(_) => false,
        MyError::Other(_) => true,
    };
    Error::backend(NAME, op, retryable, e)
}

/// Server errors worth another try: deadlock, lock wait timeout, too many
/// connections, a server shutting down or a killed connection, a read-only
/// server (a replica being promoted), and lost connections.
fn is_transient(code: u16) -> bool {
    matches!(
        code,
        code::LOCK_DEADLOCK
            | code::LOCK_WAIT_TIMEOUT
            | 1040 // ER_CON_COUNT_ERROR
            | 1053 // ER_SERVER_SHUTDOWN
            | 1077 // ER_NORMAL_SHUTDOWN
            | 1079 // ER_SHUTDOWN_COMPLETE
            | 1158
            ..=1161 // network read/write errors
            | 1290 // ER_OPTION_PREVENTS_STATEMENT (read-only)
            | 1836 // ER_READ_ONLY_MODE
            | 1927 // ER_CONNECTION_KILLED
            | 2006 // CR_SERVER_GONE_ERROR
            | 2013 // CR_SERVER_LOST
    )
}

/// A request that did not answer within the backend's request timeout.
pub(crate) fn timed_out(op: &'static str, after: std::time::Duration) -> Error {
    Error::backend(
        NAME,
        op,
        true,
        format!("the database did not answer within {after:?}"),
    )
}

/// Whether `e` says the table does not exist (dropped, or never created).
pub(crate) fn is_missing_table(e: &MyError) -> bool {
    server_code(e) == Some(code::NO_SUCH_TABLE)
}
