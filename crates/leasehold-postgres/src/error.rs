//! Mapping the client's and the pool's errors into [`leasehold::Error`], in
//! one place.

use leasehold::Error;
use tokio_postgres::error::SqlState;

pub(crate) const NAME: &str = "postgres";

/// A failure of the database client during `op`. Connection failures,
/// serialization and deadlock failures, and a server shutting down or
/// refusing connections are retryable; SQL and permission errors are not.
/// The message never holds the password: the client's errors do not carry
/// its configuration.
pub(crate) fn db(op: &'static str, e: tokio_postgres::Error) -> Error {
    let retryable = match e.code() {
        // A configuration the server will never accept (a password it asks
        // for and the URL and PGPASSWORD lack, an authentication method the
        // client lacks): trying again cannot help.
        None if is_permanent_client_error(&e) => false,
        None => true, // I/O, a closed connection, a protocol hiccup
        Some(code) => is_transient(code),
    };
    Error::backend(NAME, op, retryable, e)
}

/// Whether the client itself refused to go on: its configuration or its
/// side of authentication. tokio-postgres does not expose the error's kind;
/// its `Display` starts with the kind's fixed text.
fn is_permanent_client_error(e: &tokio_postgres::Error) -> bool {
    let text = e.to_string();
    [
        "invalid configuration",
        "authentication error",
        "invalid connection string",
    ]
    .iter()
    .any(|kind| text.starts_with(kind))
        // `sslmode=require` against a server without TLS: its answer to
        // the TLS request (in the error's source), not a failed handshake
        // that may pass.
        || leasehold::backend::error_chain(e).contains("server does not support TLS")
}

fn is_transient(code: &SqlState) -> bool {
    let c = code.code();
    // 08: connection exception; 40: transaction rollback (serialization,
    // deadlock); 53: insufficient resources; 57P0x: admin/crash shutdown,
    // cannot connect now; 55P03: lock not available.
    c.starts_with("08")
        || c.starts_with("40")
        || c.starts_with("53")
        || c.starts_with("57P0")
        || c == "55P03"
}

/// A failure to get a connection from the pool.
pub(crate) fn pool(op: &'static str, e: deadpool_postgres::PoolError) -> Error {
    use deadpool_postgres::PoolError;
    match e {
        PoolError::Backend(e) => db(op, e),
        PoolError::Timeout(_) => Error::backend(
            NAME,
            op,
            true,
            "timed out waiting for a database connection",
        ),
        other => Error::backend(NAME, op, true, other.to_string()),
    }
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
pub(crate) fn is_missing_table(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNDEFINED_TABLE)
}
