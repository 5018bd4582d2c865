//! SDK errors mapped into [`leasehold::Error`], in one place.

use std::fmt;
use std::sync::Arc;

use azure_core::error::ErrorKind;
use azure_core::http::headers::HeaderName;
use azure_core::http::StatusCode;
use azure_core::time::OffsetDateTime;
use leasehold::{Error, Key, LossReason};

pub(crate) const NAME: &str = "azblob";

/// One failed request, as far as leasehold cares: its status, Azure's error
/// code, and a message with every secret removed.
#[derive(Debug)]
pub(crate) struct RequestError {
    pub status: Option<u16>,
    pub code: Option<String>,
    /// The answer's `Date` (the service's clock), when it had one.
    pub date: Option<OffsetDateTime>,
    message: String,
    retryable: bool,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RequestError {}

impl RequestError {
    pub(crate) fn new(err: azure_core::Error, secrets: &[String]) -> Self {
        match err.kind() {
            ErrorKind::HttpResponse {
                status,
                error_code,
                raw_response,
            } => {
                let code = error_code.clone();
                let date = raw_response.as_ref().and_then(|r| {
                    r.headers()
                        .get_optional_str(&HeaderName::from_static("date"))
                        .and_then(|d| azure_core::time::parse_rfc7231(d).ok())
                });
                let n = u16::from(*status);
                let retryable = matches!(n, 408 | 429 | 500..=599);
                let hint = match (n, &code) {
                    (401 | 403, _) => {
                        "; the service refused the credentials (check the account key, SAS token or Entra ID role)"
                    }
                    (404, None) => {
                        "; that is not an answer from Azure Blob Storage (a wrong endpoint URL, or a proxy?)"
                    }
                    _ => "",
                };
                let message = format!(
                    "HTTP {n} {}{hint}",
                    code.as_deref().unwrap_or("(no error code)")
                );
                RequestError {
                    status: Some(n),
                    code,
                    date,
                    message,
                    retryable,
                }
            }
            kind => {
                // Connection failures, I/O, timeouts: may pass. Credential
                // failures (Entra ID) usually do not, but a token endpoint can
                // be briefly unreachable: retry those too.
                let retryable = matches!(
                    kind,
                    ErrorKind::Connection | ErrorKind::Io | ErrorKind::Credential
                ) || err.to_string().contains("timed out");
                RequestError {
                    status: None,
                    code: None,
                    date: None,
                    message: redact(&leasehold::backend::error_chain(&err), secrets),
                    retryable,
                }
            }
        }
    }

    /// An answer leasehold cannot use (not an HTTP error), retryable.
    pub(crate) fn other(message: &str) -> Self {
        RequestError {
            status: None,
            code: None,
            date: None,
            message: message.to_string(),
            retryable: true,
        }
    }

    /// The same failure, marked as one a retry may cure.
    pub(crate) fn retryable(mut self) -> Self {
        self.retryable = true;
        self
    }

    pub(crate) fn is(&self, status: StatusCode) -> bool {
        self.status == Some(u16::from(status))
    }

    pub(crate) fn code_is(&self, code: &str) -> bool {
        self.code.as_deref() == Some(code)
    }

    /// Azure said the blob or container does not exist: a 404 *with* an
    /// Azure error code. A bare 404 (a wrong endpoint, a proxy, another
    /// service) says nothing about our blobs and is an error.
    pub(crate) fn is_not_found(&self) -> bool {
        self.is(StatusCode::NotFound)
            && matches!(
                self.code.as_deref(),
                Some("BlobNotFound" | "ContainerNotFound" | "ResourceNotFound")
            )
    }

    /// As a backend failure of `operation`.
    pub(crate) fn into_error(self, operation: &'static str) -> Error {
        Error::backend(NAME, operation, self.retryable, self)
    }

    /// As a definitive loss of the lease on `key` when the service said so
    /// (404 with an Azure error code: blob or container gone; 409: another
    /// lease, none, or broken; 412: lease conditions), otherwise as a
    /// backend failure.
    pub(crate) fn into_lease_error(self, operation: &'static str, key: &Key) -> Error {
        let definitive = self.is_not_found() || matches!(self.status, Some(409) | Some(412));
        match self.status {
            Some(_) if definitive => Error::LeaseLost {
                key: key.to_string(),
                reason: LossReason::Revoked(format!(
                    "Azure answered {} to {operation}",
                    self.message
                )),
            },
            _ => self.into_error(operation),
        }
    }
}

/// `text` with every occurrence of a secret (raw or percent-encoded) and
/// every URL query string replaced.
pub(crate) fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        out = out.replace(secret.as_str(), "<redacted>");
        let encoded = crate::record::encode(secret);
        out = out.replace(&encoded, "<redacted>");
    }
    // A URL's query may carry a SAS signature: drop it wholesale.
    let mut cleaned = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(q) = rest.find('?') {
        cleaned.push_str(&rest[..q]);
        let after = &rest[q..];
        let end = after
            .find(|c: char| c.is_whitespace() || c == ')' || c == '"' || c == '\'')
            .unwrap_or(after.len());
        cleaned.push_str("?<query redacted>");
        rest = &after[end..];
    }
    cleaned.push_str(rest);
    cleaned
}

/// Shared by the backend's clones: what to scrub from messages.
pub(crate) type Secrets = Arc<[String]>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_removes_secrets_and_queries() {
        let s = redact(
            "error sending request for url (http://h/c/b?sv=1&sig=abc%2B) key=S3cr3tKey",
            &["S3cr3tKey".into()],
        );
        assert!(!s.contains("abc") && !s.contains("S3cr3tKey"), "{s}");
        assert!(s.contains("http://h/c/b"), "{s}");
    }
}
