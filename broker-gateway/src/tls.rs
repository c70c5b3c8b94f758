//! TLS at the gateway's edges: the HTTPS server configuration (rustls with ring), and
//! the `tls { … }` blocks of the broker's nats-server configuration.
//!
//! The broker blocks are text for `flue-gateway init` (which writes the whole broker
//! configuration) and the leaf-node configuration writer to embed: a block for client
//! connections, one for the hub's leaf-node port, one for a leaf node's remote.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Seconds nats-server gives a client for its TLS handshake (`timeout` in a `tls` block);
/// nats-server's own default, 0.5 s, is short for a client across a slow link.
pub const BROKER_TLS_TIMEOUT_SECS: u32 = 2;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read.
    #[error("cannot read {}", .0.display())]
    Read(PathBuf, #[source] std::io::Error),
    /// A file holds no certificate.
    #[error("{} holds no PEM certificate", .0.display())]
    NoCertificate(PathBuf),
    /// A file holds no usable private key.
    #[error("{} holds no PEM private key", .0.display())]
    NoKey(PathBuf),
    /// rustls refused the certificate and key (they do not match, say).
    #[error("the certificate {} and the key {} cannot be used together", .cert.display(), .key.display())]
    Config {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Cause.
        #[source]
        source: rustls::Error,
    },
    /// A path cannot be written into a nats-server configuration (not UTF-8, or holding a
    /// control character).
    #[error("the path {} cannot be written into a nats-server configuration", .0.display())]
    Path(PathBuf),
}

/// The HTTPS server configuration: the certificate chain of `cert` (PEM, leaf first) and
/// the private key in `key` (PEM), ring as the crypto provider, HTTP/1.1 only.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let cert_pem = std::fs::read(cert).map_err(|e| TlsError::Read(cert.to_owned(), e))?;
    let key_pem = std::fs::read(key).map_err(|e| TlsError::Read(key.to_owned(), e))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert.to_owned()));
    }
    let private =
        PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| TlsError::NoKey(key.to_owned()))?;
    let config_error = |source| TlsError::Config {
        cert: cert.to_owned(),
        key: key.to_owned(),
        source,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(config_error)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Certificate files of one TLS endpoint of the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerTlsFiles {
    /// The broker's certificate (PEM).
    pub cert_file: PathBuf,
    /// Its private key (PEM).
    pub key_file: PathBuf,
    /// The CA that clients' certificates must chain to; when given, a client must
    /// present one (mutual TLS: `verify: true`).
    pub client_ca_file: Option<PathBuf>,
}

/// `tls { … }` for the broker's client port: every client connection must speak TLS.
pub fn client_tls_block(files: &BrokerTlsFiles) -> Result<String, TlsError> {
    server_block("tls", files, "")
}

/// `leafnodes { tls { … } }` lines for the hub's leaf-node port, to put inside the
/// `leafnodes` block next to its `port` (the caller writes the rest of that block).
pub fn leafnode_tls_block(files: &BrokerTlsFiles) -> Result<String, TlsError> {
    server_block("tls", files, "  ")
}

/// `tls { … }` for one remote of a leaf node: the hub's certificate is verified against
/// `ca_file`; `client` is the leaf's own certificate when the hub asks for one.
pub fn remote_tls_block(
    ca_file: &Path,
    client: Option<(&Path, &Path)>,
) -> Result<String, TlsError> {
    let mut text = String::from("tls {\n");
    line(&mut text, "  ", "ca_file", ca_file)?;
    if let Some((cert, key)) = client {
        line(&mut text, "  ", "cert_file", cert)?;
        line(&mut text, "  ", "key_file", key)?;
    }
    let _ = writeln!(text, "  timeout: {BROKER_TLS_TIMEOUT_SECS}");
    text.push_str("}\n");
    Ok(text)
}

fn server_block(name: &str, files: &BrokerTlsFiles, indent: &str) -> Result<String, TlsError> {
    let inner = format!("{indent}  ");
    let mut text = format!("{indent}{name} {{\n");
    line(&mut text, &inner, "cert_file", &files.cert_file)?;
    line(&mut text, &inner, "key_file", &files.key_file)?;
    if let Some(ca) = &files.client_ca_file {
        line(&mut text, &inner, "ca_file", ca)?;
        let _ = writeln!(text, "{inner}verify: true");
    }
    let _ = writeln!(text, "{inner}timeout: {BROKER_TLS_TIMEOUT_SECS}");
    let _ = writeln!(text, "{indent}}}");
    Ok(text)
}

/// `<indent><key>: "<path>"`, the path quoted for nats-server's configuration parser.
fn line(text: &mut String, indent: &str, key: &str, path: &Path) -> Result<(), TlsError> {
    let quoted = quote(path)?;
    let _ = writeln!(text, "{indent}{key}: {quoted}");
    Ok(())
}

/// A path as a double-quoted nats-server configuration string: `\` and `"` escaped;
/// a path that is not UTF-8 or holds a control character is refused rather than
/// written in a form the parser would read differently.
fn quote(path: &Path) -> Result<String, TlsError> {
    let text = path
        .to_str()
        .filter(|t| !t.chars().any(char::is_control))
        .ok_or_else(|| TlsError::Path(path.to_owned()))?;
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(ca: bool) -> BrokerTlsFiles {
        BrokerTlsFiles {
            cert_file: "/etc/flue/broker.pem".into(),
            key_file: "/etc/flue/broker.key".into(),
            client_ca_file: ca.then(|| "/etc/flue/ca.pem".into()),
        }
    }

    #[test]
    fn client_blocks_name_the_files_and_verify_clients_only_with_a_ca() {
        assert_eq!(
            client_tls_block(&files(false)).expect("block"),
            "tls {\n  cert_file: \"/etc/flue/broker.pem\"\n  key_file: \"/etc/flue/broker.key\"\n  timeout: 2\n}\n"
        );
        let with_ca = client_tls_block(&files(true)).expect("block");
        assert!(
            with_ca.contains("  ca_file: \"/etc/flue/ca.pem\"\n  verify: true\n"),
            "{with_ca}"
        );
        let leaf = leafnode_tls_block(&files(true)).expect("block");
        assert!(leaf.starts_with("  tls {\n    cert_file: "), "{leaf}");
        assert!(leaf.ends_with("    timeout: 2\n  }\n"), "{leaf}");
    }

    #[test]
    fn remote_blocks_trust_the_ca_and_may_present_a_certificate() {
        let text = remote_tls_block(Path::new("/ca.pem"), None).expect("block");
        assert_eq!(text, "tls {\n  ca_file: \"/ca.pem\"\n  timeout: 2\n}\n");
        let text = remote_tls_block(
            Path::new("/ca.pem"),
            Some((Path::new("/leaf.pem"), Path::new("/leaf.key"))),
        )
        .expect("block");
        assert!(
            text.contains("cert_file: \"/leaf.pem\"\n  key_file: \"/leaf.key\""),
            "{text}"
        );
    }

    #[test]
    fn paths_are_quoted_or_refused() {
        assert_eq!(
            quote(Path::new(r#"/a "b"\c"#)).expect("quoted"),
            r#""/a \"b\"\\c""#
        );
        assert!(matches!(quote(Path::new("/a\nb")), Err(TlsError::Path(_))));
    }

    #[test]
    fn unreadable_or_empty_files_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").expect("write");
        let missing = dir.path().join("missing.pem");
        assert!(
            matches!(server_config(&missing, &empty), Err(TlsError::Read(p, _)) if p == missing)
        );
        assert!(
            matches!(server_config(&empty, &empty), Err(TlsError::NoCertificate(p)) if p == empty)
        );
    }
}
