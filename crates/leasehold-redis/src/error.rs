//! Mapping the client's errors into [`leasehold::Error`], in one place.

use leasehold::Error;

pub(crate) const NAME: &str = "redis";

/// A failure of the Redis client during `op`. Connection and I/O failures,
/// timeouts, a server loading its data, busy with a script, out of memory
/// (`OOM` under `noeviction`), a replica that cannot take writes, a primary
/// without enough replicas (`NOREPLICAS`, `min-replicas-to-write`), or
/// answering `TRYAGAIN`/`CLUSTERDOWN`, are retryable; wrong passwords, missing permissions and script errors are
/// not. The message never holds the password: the client's errors do not
/// carry its connection settings.
pub(crate) fn client(op: &'static str, e: redis::RedisError) -> Error {
    client_with(op, e, "")
}

/// [`client`], with `hint` (what to check, or empty) after the client's
/// message. A server that answers as a Redis Cluster node (`MOVED`,
/// `CROSSSLOT`) to a `redis://` store says so.
pub(crate) fn client_with(op: &'static str, e: redis::RedisError, hint: &str) -> Error {
    if e.code() == Some("LEASEHOLD_PROTOCOL") {
        // A script found a marker of a protocol this build does not speak
        // and wrote nothing (see the prelude's `current_epoch`).
        // The detail is the protocol, then where in which script Redis
        // raised it ("3 script: SHA, on @user_script:59.").
        let found = e
            .detail()
            .unwrap_or("")
            .split_whitespace()
            .next()
            .unwrap_or("");
        if let Err(refused) = leasehold::backend::protocol::check_protocol_up_to(
            NAME,
            Some(found),
            crate::scripts::CARRYING_PROTOCOL,
        ) {
            return refused;
        }
    }
    let retryable = e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.code(),
            Some(
                "LOADING"
                    | "BUSY"
                    | "READONLY"
                    | "TRYAGAIN"
                    | "CLUSTERDOWN"
                    | "MASTERDOWN"
                    | "OOM"
                    | "NOREPLICAS"
            )
        );
    let cluster = matches!(e.code(), Some("MOVED" | "CROSSSLOT" | "ASK"))
        || e.to_string().contains("CrossSlot");
    let hint = if cluster {
        "; this server is a Redis Cluster node: open the store with redis+cluster://"
    } else {
        hint
    };
    if hint.is_empty() {
        Error::backend(NAME, op, retryable, e)
    } else {
        Error::backend(NAME, op, retryable, format!("{e}{hint}"))
    }
}

/// A request that did not answer within the backend's request timeout.
pub(crate) fn timed_out(op: &'static str, after: std::time::Duration) -> Error {
    Error::backend(
        NAME,
        op,
        true,
        format!("the server did not answer within {after:?}"),
    )
}

/// A reply of a shape the scripts never send.
pub(crate) fn bad_reply(op: &'static str, what: impl std::fmt::Display) -> Error {
    Error::backend(NAME, op, false, format!("unexpected reply: {what}"))
}
