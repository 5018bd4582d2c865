//! TLS with rustls (no OpenSSL): the system's trusted roots plus an
//! optional PEM file of CA certificates.

use std::path::Path;
use std::sync::Arc;

use leasehold::{Error, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::builder::SslMode;
use crate::error::NAME;

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
