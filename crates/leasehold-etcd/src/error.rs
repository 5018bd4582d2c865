//! Mapping the client's errors into [`leasehold::Error`], in one place.

use leasehold::Error;

pub(crate) const NAME: &str = "etcd";

/// A failure of the etcd client during `op`. Transport failures and the
/// gRPC codes that may pass (unavailable, deadline, aborted, resource
/// exhausted, and etcd's "no leader" / "leader changed", sent as
/// `Unavailable`) are retryable; authentication and permission failures
/// and invalid requests are not. The client's errors carry no password.
pub(crate) fn client(op: &'static str, e: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    let retryable = match &e {
        E::GRpcStatus(status) => {
            use tonic::Code;
            !matches!(
                status.code(),
                Code::InvalidArgument
                    | Code::Unauthenticated
                    | Code::PermissionDenied
                    | Code::FailedPrecondition
            )
        }
        E::InvalidArgs(_) | E::InvalidUri(_) | E::InvalidHeaderValue(_) => false,
        _ => true,
    };
    Error::backend(NAME, op, retryable, e)
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
