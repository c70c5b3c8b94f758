//! The client's TLS: rustls with ring, trusting the operator's CA (`--ca` / `FLUE_CA`)
//! or else the system's roots.
//!
//! reqwest is built without a crypto provider of its own (its default would bring
//! aws-lc-rs next to the workspace's ring), so every client is handed a finished rustls
//! configuration.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use crate::ClientError;

/// A TLS configuration trusting only the certificates in `ca_file` when given, else the
/// system's root certificates when `https` (a plain-HTTP client needs none).
pub(crate) fn client_config(
    ca_file: Option<&Path>,
    https: bool,
) -> Result<rustls::ClientConfig, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let fail = |reason: String| ClientError::Tls {
                what: format!("the CA file {}", path.display()),
                reason,
            };
            let pem = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| fail(e.to_string()))?;
                roots.add(cert).map_err(|e| fail(e.to_string()))?;
            }
            if roots.is_empty() {
                return Err(fail("it holds no PEM certificate".to_owned()));
            }
        }
        None if https => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(ClientError::Tls {
                    what: "the system's root certificates".to_owned(),
                    reason: "none found; name the gateway's CA with --ca FILE (FLUE_CA)".to_owned(),
                });
            }
        }
        None => {}
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls {
            what: "the TLS protocol versions".to_owned(),
            reason: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
