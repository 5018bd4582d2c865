//! Every SDK error becomes a [`leasehold::Error`] here, in one place.

use std::fmt;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use leasehold::Error;

pub(crate) const BACKEND: &str = "dynamodb";

/// Service error codes after which a later retry may succeed.
const RETRYABLE_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "ThrottlingException",
    "ThrottlingError",
    "InternalServerError",
    "ServiceUnavailable",
    "TransactionConflictException",
    "ReplicatedWriteConflictException",
    "LimitExceededException",
];

/// Service error codes that mean the credentials are missing, wrong or not
/// allowed: said plainly, since the SDK's own text can be terse.
const AUTH_CODES: &[&str] = &[
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "AccessDeniedException",
    "ExpiredTokenException",
    "InvalidClientTokenId",
];

/// A message-only error used as the source of [`Error::Backend`].
#[derive(Debug)]
pub(crate) struct Message(pub(crate) String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Message {}

/// Maps an SDK failure of `operation` on `table`.
///
/// The text comes from the SDK's error chain, which names the failure (and
/// the service's code and message) but never the credentials.
pub(crate) fn map_sdk<E>(
    table: &str,
    operation: &'static str,
    err: SdkError<E, HttpResponse>,
) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let chain = match &err {
        SdkError::ServiceError(se) => {
            let code = se.err().code().unwrap_or("unknown error");
            match se.err().message() {
                Some(m) => format!("{code}: {m}"),
                None => code.to_string(),
            }
        }
        other => chain(other),
    };
    let (retryable, text) = match &err {
        SdkError::ConstructionFailure(_) => (
            false,
            format!(
                "could not build the request (is a region or are credentials missing?): {chain}"
            ),
        ),
        SdkError::TimeoutError(_) => (
            true,
            format!("no answer in time; the request may or may not have been applied: {chain}"),
        ),
        SdkError::DispatchFailure(d) => {
            // Identity resolution failures surface here too, and are not
            // transient in the way a refused connection may be.
            let no_credentials = chain.contains("credentials") || chain.contains("identity");
            if chain.contains("no identity resolver") {
                (
                    false,
                    "no AWS credentials: none are configured (the standard chain looks at the environment, profile files, web identity, container and instance metadata)".to_string(),
                )
            } else if no_credentials {
                (
                    false,
                    format!("could not get AWS credentials from the standard chain (environment, profile, web identity, instance metadata): {chain}"),
                )
            } else {
                (
                    d.is_io() || d.is_timeout() || d.is_other() || d.is_user(),
                    format!("could not reach DynamoDB: {chain}"),
                )
            }
        }
        SdkError::ResponseError(_) => (true, format!("unreadable response: {chain}")),
        SdkError::ServiceError(se) => {
            let code = se.err().code().unwrap_or("");
            let status = se.raw().status().as_u16();
            if AUTH_CODES.contains(&code) {
                (
                    false,
                    format!("DynamoDB refused the credentials or the permission: {chain}"),
                )
            } else if code == "ResourceNotFoundException" {
                (
                    false,
                    format!("table {table:?} does not exist (or is not ACTIVE): {chain}"),
                )
            } else {
                (RETRYABLE_CODES.contains(&code) || status >= 500, chain)
            }
        }
        _ => (true, chain),
    };
    Error::backend(BACKEND, operation, retryable, Message(text))
}

/// The Display texts of an error and its sources, without the Debug dumps
/// (raw responses, headers) that the SDK's own context printer adds.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![err.to_string()];
    let mut source = err.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = e.source();
    }
    parts.join(": ")
}
