//! Every SDK error becomes a [`leasehold::Error`] here, in one place (the
//! mapping itself is leasehold-aws's, shared with the S3 store).

use leasehold_aws::Service;

pub(crate) const BACKEND: &str = "dynamodb";

/// DynamoDB's error codes and how messages name the table: `SERVICE.map_sdk`
/// maps an SDK failure of an operation on a table.
pub(crate) const SERVICE: Service = Service {
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
    place: |table| format!("table {table:?} (or it is not ACTIVE)"),
};
