//! Credentials: account key (shared-key signing), SAS token, Entra ID.
//!
//! The official SDK signs requests with Entra ID tokens and passes SAS
//! tokens through the URL, but has no shared-key signing; [`SharedKeyPolicy`]
//! adds it as a per-try pipeline policy (so a retried request is signed again
//! with a fresh `x-ms-date`). None of the types here print their secrets.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use azure_core::credentials::{Secret, TokenCredential};
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{Context, Request};
use azure_core::time::{to_rfc7231, OffsetDateTime};

/// How requests are authorised.
#[derive(Clone)]
pub(crate) enum Credential {
    /// Account name + key: every request is signed (shared key).
    SharedKey { account: String, key: Secret },
    /// A SAS token, appended to every request's query.
    Sas(Secret),
    /// Entra ID tokens (https only).
    Token(Arc<dyn TokenCredential>),
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::SharedKey { account, .. } => f
                .debug_struct("SharedKey")
                .field("account", account)
                .field("key", &"<redacted>")
                .finish(),
            Credential::Sas(_) => f.write_str("Sas(<redacted>)"),
            Credential::Token(_) => f.write_str("Token(Entra ID)"),
        }
    }
}

impl Credential {
    /// The secret strings that must never appear in an error or a log.
    pub(crate) fn secrets(&self) -> Vec<String> {
        match self {
            Credential::SharedKey { key, .. } => vec![key.secret().to_string()],
            Credential::Sas(sas) => {
                let mut v = vec![sas.secret().to_string()];
                // The signature alone, also percent-encoded, as URLs show it.
                for pair in sas.secret().split('&') {
                    if let Some(sig) = pair.strip_prefix("sig=") {
                        v.push(sig.to_string());
                    }
                }
                v
            }
            Credential::Token(_) => Vec::new(),
        }
    }
}

/// Signs each try of a request with the account key (Azure Storage "Shared
/// Key" authorisation, blob service, version 2009-09-19 and later).
pub(crate) struct SharedKeyPolicy {
    account: String,
    key: Secret,
}

impl SharedKeyPolicy {
    pub(crate) fn new(account: String, key: Secret) -> Self {
        SharedKeyPolicy { account, key }
    }
}

impl fmt::Debug for SharedKeyPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedKeyPolicy")
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

// azure_core's trait takes `&Context` with its lifetime hidden, and
// async-trait cannot match an impl that names it (`Context<'_>`).
#[allow(elided_lifetimes_in_paths)]
#[async_trait]
impl Policy for SharedKeyPolicy {
    async fn send(
        &self,
        ctx: &Context,
        request: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        request.insert_header("x-ms-date", to_rfc7231(&OffsetDateTime::now_utc()));
        let to_sign = string_to_sign(&self.account, request);
        let signature = azure_core::hmac::hmac_sha256(&to_sign, &self.key)?;
        request.insert_header(
            "authorization",
            format!("SharedKey {}:{}", self.account, signature),
        );
        next[0].send(ctx, request, &next[1..]).await
    }
}

/// The canonical string the shared-key signature covers.
fn string_to_sign(account: &str, request: &Request) -> String {
    let headers = request.headers();
    let header = |name: &str| -> String {
        headers
            .iter()
            .find(|(n, _)| n.as_str().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str().to_string())
            .unwrap_or_default()
    };
    let content_length = match header("content-length").as_str() {
        "" | "0" => match request.body().len() {
            Some(n) if n > 0 => n.to_string(),
            _ => String::new(),
        },
        n => n.to_string(),
    };
    let mut s = String::with_capacity(256);
    s.push_str(request.method().as_ref());
    s.push('\n');
    for value in [
        header("content-encoding"),
        header("content-language"),
        content_length,
        header("content-md5"),
        header("content-type"),
        String::new(), // Date: we send x-ms-date instead.
        header("if-modified-since"),
        header("if-match"),
        header("if-none-match"),
        header("if-unmodified-since"),
        header("range"),
    ] {
        s.push_str(&value);
        s.push('\n');
    }
    // Canonicalised headers: every x-ms-*, lower-case, sorted.
    let mut ms: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| (n.as_str().to_ascii_lowercase(), v.as_str()))
        .filter(|(n, _)| n.starts_with("x-ms-"))
        .map(|(n, v)| (n, v.trim().to_string()))
        .collect();
    ms.sort();
    for (n, v) in ms {
        s.push_str(&n);
        s.push(':');
        s.push_str(&v);
        s.push('\n');
    }
    // Canonicalised resource: /account/path, then the query parameters,
    // names lower-cased and sorted, values decoded.
    let url = request.url();
    s.push('/');
    s.push_str(account);
    s.push_str(url.path());
    let mut params: Vec<(String, Vec<String>)> = Vec::new();
    for (k, v) in url.query_pairs() {
        let k = k.to_ascii_lowercase();
        match params.iter_mut().find(|(n, _)| *n == k) {
            Some((_, vs)) => vs.push(v.into_owned()),
            None => params.push((k, vec![v.into_owned()])),
        }
    }
    params.sort();
    for (k, mut vs) in params {
        vs.sort();
        s.push('\n');
        s.push_str(&k);
        s.push(':');
        s.push_str(&vs.join(","));
    }
    s
}

/// Entra ID credentials tried in turn: workload identity (when its
/// environment is set), managed identity, then developer tools (Azure CLI,
/// Azure Developer CLI). The first that yields a token is kept.
#[cfg(feature = "identity")]
pub(crate) fn default_token_credential() -> azure_core::Result<Arc<dyn TokenCredential>> {
    let mut sources: Vec<Arc<dyn TokenCredential>> = Vec::new();
    if std::env::var_os("AZURE_FEDERATED_TOKEN_FILE").is_some() {
        sources.push(azure_identity::WorkloadIdentityCredential::new(None)?);
    }
    sources.push(azure_identity::ManagedIdentityCredential::new(None)?);
    sources.push(azure_identity::DeveloperToolsCredential::new(None)?);
    Ok(Arc::new(ChainedCredential {
        sources,
        chosen: std::sync::Mutex::new(None),
    }))
}

#[cfg(feature = "identity")]
#[derive(Debug)]
struct ChainedCredential {
    sources: Vec<Arc<dyn TokenCredential>>,
    chosen: std::sync::Mutex<Option<usize>>,
}

#[cfg(feature = "identity")]
#[async_trait]
impl TokenCredential for ChainedCredential {
    async fn get_token(
        &self,
        scopes: &[&str],
        options: Option<azure_core::credentials::TokenRequestOptions<'_>>,
    ) -> azure_core::Result<azure_core::credentials::AccessToken> {
        let chosen = *self.chosen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = chosen {
            return self.sources[i].get_token(scopes, options).await;
        }
        let mut failures = Vec::new();
        for (i, source) in self.sources.iter().enumerate() {
            match source.get_token(scopes, options.clone()).await {
                Ok(token) => {
                    *self.chosen.lock().unwrap_or_else(|e| e.into_inner()) = Some(i);
                    return Ok(token);
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
        Err(azure_core::Error::with_message(
            azure_core::error::ErrorKind::Credential,
            format!(
                "no Entra ID credential worked (workload identity, managed identity, developer tools): {}",
                failures.join("; ")
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use azure_core::http::{Method, Url};

    #[test]
    fn canonical_string_covers_headers_and_query() {
        let url =
            Url::parse("http://127.0.0.1:10000/devstoreaccount1/locks/a%2Fb?comp=lease&timeout=5")
                .unwrap();
        let mut req = Request::new(url, Method::Put);
        req.insert_header("x-ms-version", "2025-11-05");
        req.insert_header("x-ms-lease-action", "acquire");
        req.insert_header("x-ms-date", "Mon, 01 Jan 2024 00:00:00 GMT");
        req.insert_header("if-match", "\"0x1\"");
        let s = string_to_sign("devstoreaccount1", &req);
        assert_eq!(
            s,
            "PUT\n\n\n\n\n\n\n\n\"0x1\"\n\n\n\n\
             x-ms-date:Mon, 01 Jan 2024 00:00:00 GMT\n\
             x-ms-lease-action:acquire\n\
             x-ms-version:2025-11-05\n\
             /devstoreaccount1/devstoreaccount1/locks/a%2Fb\ncomp:lease\ntimeout:5"
        );
    }

    #[test]
    fn debug_hides_secrets() {
        let c = Credential::SharedKey {
            account: "acct".into(),
            key: Secret::new("c2VjcmV0"),
        };
        assert!(!format!("{c:?}").contains("c2VjcmV0"));
        let c = Credential::Sas(Secret::new("sv=1&sig=abc"));
        assert!(!format!("{c:?}").contains("abc"));
    }
}
