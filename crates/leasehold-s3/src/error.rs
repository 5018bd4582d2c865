//! Every SDK error becomes a [`leasehold::Error`] here, in one place (the
//! mapping itself is leasehold-aws's, shared with the DynamoDB store).

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use leasehold::Error;
use leasehold_aws::Service;

pub(crate) use leasehold_aws::Message;

pub(crate) const BACKEND: &str = "s3";

/// S3's error codes.
const SERVICE: Service = Service {
    backend: BACKEND,
    name: "S3",
    retryable_codes: &[
        "SlowDown",
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "OperationAborted",
        // Two conditional writes on one object at the same moment: S3
        // answers one of them 409; trying again reads the winner's write.
        "ConditionalRequestConflict",
    ],
    auth_codes: &[
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "AllAccessDisabled",
        "AccountProblem",
    ],
    not_found_code: "NoSuchBucket",
};

/// Maps an SDK failure of `operation` in `bucket`.
pub(crate) fn map_sdk<E>(
    bucket: &str,
    operation: &'static str,
    err: SdkError<E, HttpResponse>,
) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    leasehold_aws::map_sdk(&SERVICE, &format!("bucket {bucket:?}"), operation, err)
}

/// The service's error code of a failure, if it has one.
pub(crate) fn code<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> Option<&str> {
    match err {
        SdkError::ServiceError(se) => se.err().code(),
        _ => None,
    }
}

/// The HTTP status of a service's answer, if there was one.
pub(crate) fn status<E>(err: &SdkError<E, HttpResponse>) -> Option<u16> {
    err.raw_response().map(|r| r.status().as_u16())
}
