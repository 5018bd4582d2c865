//! Mapping the client's errors into [`leasehold::Error`], in one place.

use leasehold::Error;

use crate::grpc::ConnectError;

pub(crate) const NAME: &str = "etcd";

/// A gRPC status etcd (or the transport) answered `op` with. The codes
/// that may pass (unavailable, deadline, aborted, resource exhausted, and
/// etcd's "no leader" / "leader changed", sent as `Unavailable`) are
/// retryable; authentication and permission failures and invalid requests
/// are not. A status carries no password. The message is the status's own
/// (never the `Debug` form, which holds metadata and raw bytes).
pub(crate) fn status(op: &'static str, s: tonic::Status) -> Error {
    use tonic::Code;
    let retryable = !matches!(
        s.code(),
        Code::InvalidArgument
            | Code::Unauthenticated
            | Code::PermissionDenied
            | Code::FailedPrecondition
    );
    let message = if s.message().is_empty() {
        s.code().description()
    } else {
        s.message()
    };
    // Unavailable is also what the transport says when it never reached
    // etcd (a refused connection, a failed TLS handshake).
    let said = if s.code() == Code::Unavailable {
        "etcd unavailable"
    } else {
        "etcd refused the request"
    };
    Error::backend(NAME, op, retryable, format!("{said}: {message}"))
}

/// Opening the connection failed: an endpoint the transport refused (not
/// retryable) or refused credentials.
pub(crate) fn connect(e: ConnectError) -> Error {
    match e {
        ConnectError::Auth(s) => status("connect", s),
        ConnectError::Transport(e) => Error::backend(NAME, "connect", false, e),
    }
}

/// A request that did not answer within the backend's request timeout.
pub(crate) fn timed_out(op: &'static str, after: std::time::Duration) -> Error {
    Error::backend(
        NAME,
        op,
        true,
        format!("etcd did not answer within {after:?}"),
    )
}

/// A stored value that does not parse.
pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> Error {
    Error::backend(NAME, "read", false, format!("malformed {what}: {e}"))
}
