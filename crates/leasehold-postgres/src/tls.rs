//! TLS with rustls (no OpenSSL): the system's trusted roots plus an
//! optional PEM file of CA certificates.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use leasehold::{Error, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::NAME;

/// When to use TLS, as libpq's `sslmode` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SslMode {
    /// Never.
    Disable,
    /// If the server offers it (certificate verified, see the crate docs).
    #[default]
    Prefer,
    /// Always; fail if the server does not offer it.
    Require,
    /// Always, with the certificate chain verified.
    VerifyCa,
    /// Always, with the chain and the host name verified.
    VerifyFull,
}

impl FromStr for SslMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" | "allow" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(Error::invalid(
                    "sslmode",
                    format!("{other:?} is not one of disable, allow, prefer, require, verify-ca, verify-full"),
                ))
            }
        })
    }
}

/// The connector the pool uses. With [`SslMode::Disable`] it is never asked
/// for a handshake.
pub(crate) fn connector(mode: SslMode, root_cert: Option<&Path>) -> Result<MakeRustlsConnect> {
    let mut roots = rustls::RootCertStore::empty();
    if mode != SslMode::Disable {
        // Unreadable system certificates are skipped, as browsers do.
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        if let Some(path) = root_cert {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|e| {
                    Error::invalid(
                        "sslrootcert",
                        format!("cannot read CA certificates from {}: {e}", path.display()),
                    )
                })?;
            for cert in certs {
                roots.add(cert).map_err(|e| {
                    Error::invalid("sslrootcert", format!("{}: {e}", path.display()))
                })?;
            }
        }
    }
    // An explicit provider: another crate in the build may enable a second
    // one, and then rustls cannot pick a default.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::backend(NAME, "open", false, e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}
