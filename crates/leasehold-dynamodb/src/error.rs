//! Every SDK error becomes a [`leasehold::Error`] here, in one place (the
//! mapping itself is leasehold-aws's, shared with the S3 store).

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use leasehold::Error;
use leasehold_aws::Service;

pub(crate) use leasehold_aws::Message;

pub(crate) const BACKEND: &str = "dynamodb";

/// DynamoDB's error codes.
const SERVICE: Service = Service {
    backend: BACKEND,
    name: "DynamoDB",
    retryable_codes: &[
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "ThrottlingException",
        "ThrottlingError",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionConflictException",
        "ReplicatedWriteConflictException",
        "LimitExceededException",
    ],
    auth_codes: &[
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "IncompleteSignature",
        "MissingAuthenticationToken",
        "AccessDeniedException",
        "ExpiredTokenException",
        "InvalidClientTokenId",
    ],
    not_found_code: "ResourceNotFoundException",
};

/// Maps an SDK failure of `operation` on `table`.
pub(crate) fn map_sdk<E>(
    table: &str,
    operation: &'static str,
    err: SdkError<E, HttpResponse>,
) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    leasehold_aws::map_sdk(
        &SERVICE,
        &format!("table {table:?} (or it is not ACTIVE)"),
        operation,
        err,
    )
}
