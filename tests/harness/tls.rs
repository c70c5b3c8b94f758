//! A throw-away certificate authority per test: a CA and leaf certificates it issues,
//! written as PEM files into a temp dir, for TLS on the broker, the gateway and clients.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;

/// Installs ring as the process's rustls crypto provider, once.
///
/// reqwest is built without a provider of its own (the workspace's rustls has only ring),
/// so a bare `reqwest::Client::new()` in a test needs a process default; the harness
/// installs it whenever it starts a broker or a gateway.
pub fn install_crypto_provider() {
    // An error only says one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A certificate and its private key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PKCS#8 PEM).
    pub key: PathBuf,
}

/// A test CA: its certificate at [`TestCa::ca_file`], and leaves issued on demand.
pub struct TestCa {
    dir: TempDir,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    /// Makes a new CA (an ECDSA P-256 key) and writes its certificate to `ca.pem`.
    pub fn new() -> TestCa {
        install_crypto_provider();
        let dir = tempfile::tempdir().expect("tempdir for the test CA");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params
            .distinguished_name
            .push(DnType::CommonName, "flue test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        std::fs::write(dir.path().join("ca.pem"), issuer.pem()).expect("write ca.pem");
        TestCa { dir, issuer }
    }

    /// The CA certificate (PEM): what clients and servers are told to trust.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The directory holding every file of this CA.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Issues `<name>.pem` / `<name>.key`: a certificate for `127.0.0.1`, `localhost` and
    /// `ips`, good for a server and for a client (mutual TLS).
    pub fn leaf(&self, name: &str, ips: &[IpAddr]) -> CertFiles {
        let mut names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
        names.extend(ips.iter().map(IpAddr::to_string));
        let mut params = CertificateParams::new(names).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().expect("leaf key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        let files = CertFiles {
            cert: self.dir.path().join(format!("{name}.pem")),
            key: self.dir.path().join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, cert.pem()).expect("write leaf certificate");
        std::fs::write(&files.key, key.serialize_pem()).expect("write leaf key");
        files
    }
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}
