//! TLS of a NATS client connection (the gateway's, an agent's): which CA verifies the
//! broker, and the client's own certificate when the broker asks for one (mutual TLS).
//!
//! A CA given means TLS is required: the connection is upgraded even on a `nats://` URL,
//! and a broker that does not speak TLS is an error, never a silent plaintext fallback.

use std::path::{Path, PathBuf};

/// Why the TLS files cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum NatsTlsError {
    /// A file could not be read.
    #[error("cannot read {}", .0.display())]
    Read(PathBuf, #[source] std::io::Error),
    /// A file holds no PEM block at all.
    #[error("{} is not a PEM file", .0.display())]
    NotPem(PathBuf),
}

/// The flags that set [`NatsTls`], the same in every binary that connects to the broker
/// (`#[command(flatten)]`); each also an environment variable.
#[cfg(feature = "cli")]
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct NatsTlsArgs {
    /// CA certificate (PEM) the broker's certificate must chain to. Given, the broker
    /// connection must be TLS (also on a `nats://` URL), verified against this CA only.
    #[arg(long, env = "FLUE_NATS_CA", value_name = "FILE")]
    pub nats_ca: Option<PathBuf>,
    /// Client certificate (PEM) for a broker that verifies clients (mutual TLS).
    #[arg(
        long,
        env = "FLUE_NATS_CERT",
        value_name = "FILE",
        requires = "nats_key"
    )]
    pub nats_cert: Option<PathBuf>,
    /// The private key (PEM) of `--nats-cert`.
    #[arg(
        long,
        env = "FLUE_NATS_KEY",
        value_name = "FILE",
        requires = "nats_cert"
    )]
    pub nats_key: Option<PathBuf>,
}

#[cfg(feature = "cli")]
impl From<NatsTlsArgs> for NatsTls {
    fn from(a: NatsTlsArgs) -> Self {
        Self {
            ca_file: a.nats_ca,
            client_cert: a.nats_cert.zip(a.nats_key),
        }
    }
}

/// TLS settings of one NATS client connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsTls {
    /// The CA (PEM) the broker's certificate must chain to; only it is trusted.
    pub ca_file: Option<PathBuf>,
    /// The client's certificate and key (PEM), presented when the broker verifies clients.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

impl NatsTls {
    /// Settings trusting `ca_file` (if any), without a client certificate.
    pub fn with_ca(ca_file: Option<PathBuf>) -> Self {
        Self {
            ca_file,
            client_cert: None,
        }
    }

    /// Whether the connection must be TLS.
    pub fn required(&self) -> bool {
        self.ca_file.is_some() || self.client_cert.is_some()
    }

    /// Reads every file once, so that a wrong path is reported at start rather than as
    /// a connection that keeps failing.
    pub fn check(&self) -> Result<(), NatsTlsError> {
        let client = self.client_cert.iter().flat_map(|(c, k)| [c, k]);
        for path in self.ca_file.iter().chain(client) {
            check_pem(path)?;
        }
        Ok(())
    }

    /// `options` with these settings applied.
    #[cfg(feature = "client")]
    pub fn apply(&self, options: async_nats::ConnectOptions) -> async_nats::ConnectOptions {
        let mut options = options;
        if let Some(ca) = &self.ca_file {
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &self.client_cert {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        if self.required() {
            options = options.require_tls(true);
        }
        options
    }
}

fn check_pem(path: &Path) -> Result<(), NatsTlsError> {
    let text = std::fs::read(path).map_err(|e| NatsTlsError::Read(path.to_owned(), e))?;
    if text.windows(11).any(|w| w == b"-----BEGIN ") {
        Ok(())
    } else {
        Err(NatsTlsError::NotPem(path.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_or_a_client_certificate_makes_tls_required() {
        assert!(!NatsTls::default().required());
        assert!(NatsTls::with_ca(Some("/ca.pem".into())).required());
        let mutual = NatsTls {
            ca_file: None,
            client_cert: Some(("/c.pem".into(), "/c.key".into())),
        };
        assert!(mutual.required());
    }

    #[cfg(feature = "cli")]
    #[test]
    fn the_flags_keep_their_names_and_variables_and_a_certificate_needs_its_key() {
        use clap::{CommandFactory, Parser};
        #[derive(Parser)]
        struct Binary {
            #[command(flatten)]
            tls: NatsTlsArgs,
        }
        let command = Binary::command();
        let named: Vec<(String, String)> = command
            .get_arguments()
            .filter_map(|a| {
                let env = a.get_env()?.to_str()?.to_owned();
                Some((format!("--{}", a.get_long()?), env))
            })
            .collect();
        let expected = [
            ("--nats-ca", "FLUE_NATS_CA"),
            ("--nats-cert", "FLUE_NATS_CERT"),
            ("--nats-key", "FLUE_NATS_KEY"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(f, e)| ((*f).to_owned(), (*e).to_owned()))
            .collect();
        assert_eq!(named, expected);

        let parsed = Binary::try_parse_from([
            "b",
            "--nats-ca",
            "/ca.pem",
            "--nats-cert",
            "/c.pem",
            "--nats-key",
            "/c.key",
        ])
        .expect("all three");
        let tls = NatsTls::from(parsed.tls);
        assert_eq!(tls.ca_file, Some(PathBuf::from("/ca.pem")));
        assert_eq!(
            tls.client_cert,
            Some((PathBuf::from("/c.pem"), PathBuf::from("/c.key")))
        );
        for alone in ["--nats-cert", "--nats-key"] {
            let err = Binary::try_parse_from(["b", alone, "/f.pem"])
                .err()
                .expect("one half of a client certificate is refused");
            assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        }
    }

    #[test]
    fn missing_or_non_pem_files_are_named() {
        let dir = std::env::temp_dir().join(format!("flue-nats-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let missing = dir.join("missing.pem");
        let e = NatsTls::with_ca(Some(missing.clone()))
            .check()
            .expect_err("missing");
        assert!(
            matches!(&e, NatsTlsError::Read(p, _) if *p == missing),
            "{e}"
        );
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate").expect("write");
        let e = NatsTls::with_ca(Some(junk.clone()))
            .check()
            .expect_err("junk");
        assert!(matches!(&e, NatsTlsError::NotPem(p) if *p == junk), "{e}");
        let good = dir.join("good.pem");
        std::fs::write(&good, "-----BEGIN CERTIFICATE-----\n").expect("write");
        NatsTls::with_ca(Some(good)).check().expect("a PEM file");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
