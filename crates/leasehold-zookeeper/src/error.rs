//! Mapping the ZooKeeper client's errors into [`leasehold::Error`], in one
//! place.

use std::time::Duration;

use leasehold::Error;
use zookeeper_client as zk;

pub(crate) const NAME: &str = "zookeeper";

/// A failure of a ZooKeeper request during `op`. Losing the connection or
/// the session, a time-out, throttling, or no reachable server are
/// retryable, as are the connection's I/O errors; refused credentials or permissions, bad arguments and
/// operations the server does not implement are not. The client's errors
/// never carry the URL or the password.
pub(crate) fn zk(op: &'static str, e: zk::Error) -> Error {
    let retryable = matches!(
        e,
        zk::Error::ConnectionLoss
            | zk::Error::Timeout
            | zk::Error::SessionExpired
            | zk::Error::SessionMoved
            | zk::Error::ClientClosed
            | zk::Error::NoHosts
            | zk::Error::Throttled
            | zk::Error::NotReadOnly
            // I/O errors of the connection (reset, refused, ...).
            | zk::Error::Custom(_)
            // Conditions a caller retries past (a race lost at the last
            // moment); reaching here means it ran out of rounds.
            | zk::Error::BadVersion
            | zk::Error::NodeExists
            | zk::Error::NoNode
    );
    let hint = match e {
        zk::Error::NoAuth => {
            " (the store's nodes refuse this client: see the README, \"Permissions and ACLs\")"
        }
        zk::Error::Unimplemented => " (ZooKeeper 3.6 or later is needed)",
        _ => "",
    };
    Error::backend(NAME, op, retryable, format!("{e}{hint}"))
}

/// A request that did not answer within the backend's request timeout.
pub(crate) fn timed_out(op: &'static str, after: Duration) -> Error {
    Error::backend(
        NAME,
        op,
        true,
        format!("ZooKeeper did not answer within {after:?}"),
    )
}

/// A record or marker whose bytes this build cannot read.
pub(crate) fn corrupt(op: &'static str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::backend(NAME, op, false, format!("unreadable {what}: {e}"))
}
