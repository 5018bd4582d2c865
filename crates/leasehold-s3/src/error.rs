//! Every SDK error becomes a [`leasehold::Error`] here, in one place (the
//! mapping itself is leasehold-aws's, shared with the DynamoDB store).

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use leasehold_aws::Service;

pub(crate) const BACKEND: &str = "s3";

/// S3's error codes and how messages name the bucket: `SERVICE.map_sdk`
/// maps an SDK failure of an operation in a bucket.
pub(crate) const SERVICE: Service = Service {
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
    place: |bucket| format!("bucket {bucket:?}"),
};

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
