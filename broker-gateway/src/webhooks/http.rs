//! One delivery attempt: a POST over a fresh HTTP/1.1 connection, plain or TLS.
//!
//! Built on hyper and tokio-rustls (ring) directly rather than reqwest, because the
//! connection must go to the very address that was checked (reqwest resolves names
//! itself, and follows proxies and redirects). One connection per attempt keeps the
//! behaviour simple: no pool, no proxy, no redirects (a 3xx is a failed attempt).
//!
//! The target's host is resolved here, every address checked against the gateway's
//! [`AddressPolicy`], and the connection made to an address that passed: never to a
//! name resolved a second time.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{CONTENT_TYPE, HOST, USER_AGENT};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::address::{AddressPolicy, Refused};
use super::target::Target;

/// Bytes of a failed answer's body kept for the error text.
const EXCERPT_BYTES: usize = 200;

/// Why an attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum AttemptError {
    /// The stored secret cannot sign (a record changed behind the API); nothing was sent.
    #[error("cannot sign: the webhook's secret {0}")]
    Secret(#[source] super::sign::StandardSecretError),
    /// The TCP connection could not be made.
    #[error("cannot connect to {0}")]
    Connect(String, #[source] std::io::Error),
    /// The host is an address webhooks may not go to; no connection was made.
    #[error("not connecting to {0}")]
    Refused(String, #[source] Refused),
    /// The host is a name that did not resolve, or only to addresses webhooks may not go
    /// to; no connection was made. Which of the two, and to what, is not told: a
    /// caller who may create webhooks must not learn how the gateway's resolver sees
    /// names it could not otherwise look up (internal ones).
    #[error("{0} has no address webhooks may reach (a public one, or one --webhook-allow names)")]
    Unreachable(String),
    /// No trust roots for `https` targets.
    #[error("cannot verify TLS servers: {0}")]
    TlsSetup(String),
    /// The TLS handshake failed (certificate, protocol).
    #[error("TLS handshake with {0} failed")]
    Tls(String, #[source] std::io::Error),
    /// The HTTP exchange failed (connection closed, malformed answer).
    #[error("HTTP exchange failed")]
    Http(#[source] hyper::Error),
    /// The receiver answered with something other than 2xx.
    #[error("answered {status}{}", excerpt_text(.excerpt))]
    Status {
        /// The status code.
        status: StatusCode,
        /// The start of the answer's body, made printable.
        excerpt: String,
    },
    /// No complete answer within the attempt timeout.
    #[error("no answer within {} ms", .0.as_millis())]
    TimedOut(Duration),
}

fn excerpt_text(excerpt: &str) -> String {
    if excerpt.is_empty() {
        String::new()
    } else {
        format!(": {excerpt}")
    }
}

/// Sends deliveries; cheap to clone. The TLS trust roots (the system's) are loaded once,
/// at the first `https` delivery.
#[derive(Debug, Clone, Default)]
pub struct HttpClient {
    tls: Arc<OnceLock<Result<Arc<rustls::ClientConfig>, String>>>,
    policy: Arc<AddressPolicy>,
}

impl HttpClient {
    /// A client delivering only to addresses `policy` lets through.
    pub fn new(policy: AddressPolicy) -> Self {
        Self {
            tls: Arc::default(),
            policy: Arc::new(policy),
        }
    }

    /// The rule for target addresses.
    pub fn policy(&self) -> &AddressPolicy {
        &self.policy
    }

    /// POSTs `body` with `headers` to `target`; `Ok` on a 2xx answer within `timeout`.
    pub async fn post(
        &self,
        target: &Target,
        headers: &[(&'static str, String)],
        body: Bytes,
        timeout: Duration,
    ) -> Result<StatusCode, AttemptError> {
        let mut request = Request::post(target.path_and_query.as_str())
            .header(HOST, target.authority.as_str())
            .header(CONTENT_TYPE, flue_proto::webhook::CONTENT_TYPE)
            .header(
                USER_AGENT,
                concat!("flue-gateway/", env!("CARGO_PKG_VERSION")),
            );
        for (name, value) in headers {
            request = request.header(*name, value.as_str());
        }
        let request = request
            .body(Full::new(body))
            .expect("paths, header names and values are checked when built");
        tokio::time::timeout(timeout, self.attempt(target, request))
            .await
            .map_err(|_| AttemptError::TimedOut(timeout))?
    }

    async fn attempt(
        &self,
        target: &Target,
        request: Request<Full<Bytes>>,
    ) -> Result<StatusCode, AttemptError> {
        let place = format!("{}:{}", target.host, target.port);
        let tcp = self.connect(target, &place).await?;
        let _ = tcp.set_nodelay(true);
        if !target.tls {
            return exchange(tcp, request).await;
        }
        let config = self
            .tls
            .get_or_init(tls_config)
            .clone()
            .map_err(AttemptError::TlsSetup)?;
        let name = ServerName::try_from(target.host.clone())
            .map_err(|e| AttemptError::Tls(place.clone(), std::io::Error::other(e)))?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| AttemptError::Tls(place, e))?;
        exchange(tls, request).await
    }

    /// Resolves the target's host and connects to the first of its addresses that the
    /// policy lets through and that answers.
    ///
    /// An address in the URL is named in a refusal (the caller wrote it); for a name,
    /// a failed lookup, no address and only refused addresses are one error
    /// ([`AttemptError::Unreachable`]), which says nothing of what the name resolved to.
    async fn connect(&self, target: &Target, place: &str) -> Result<TcpStream, AttemptError> {
        if let Some(ip) = target.literal_ip() {
            self.policy
                .check(ip)
                .map_err(|r| AttemptError::Refused(place.to_owned(), r))?;
            return TcpStream::connect((ip, target.port))
                .await
                .map_err(|e| AttemptError::Connect(place.to_owned(), e));
        }
        let unreachable = || AttemptError::Unreachable(place.to_owned());
        let addrs = tokio::net::lookup_host((target.host.as_str(), target.port))
            .await
            .map_err(|_| unreachable())?;
        let mut failed = None;
        for addr in addrs {
            if self.policy.check(addr.ip()).is_err() {
                continue;
            }
            match TcpStream::connect(addr).await {
                Ok(tcp) => return Ok(tcp),
                Err(e) => failed = Some(e),
            }
        }
        Err(match failed {
            // Only an address the policy lets through was tried: the caller may know it
            // exists and did not answer.
            Some(e) => AttemptError::Connect(place.to_owned(), e),
            None => unreachable(),
        })
    }
}

/// Sends `request` over `io` and reads the answer (a failed one's body only in part).
async fn exchange<S>(io: S, request: Request<Full<Bytes>>) -> Result<StatusCode, AttemptError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(AttemptError::Http)?;
    let answer = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(AttemptError::Http)?;
        let status = response.status();
        if status.is_success() {
            return Ok(status);
        }
        let mut body = response.into_body();
        let mut excerpt = Vec::new();
        while excerpt.len() <= EXCERPT_BYTES {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        excerpt.extend_from_slice(data);
                    }
                }
                // The status says enough; a body cut short changes nothing.
                Some(Err(_)) | None => break,
            }
        }
        Err(AttemptError::Status {
            status,
            excerpt: printable(&excerpt),
        })
    };
    let mut conn = std::pin::pin!(conn);
    let mut answer = std::pin::pin!(answer);
    tokio::select! {
        biased;
        result = &mut answer => result,
        // The connection ended (closed, or failed): hyper hands its outcome to the
        // pending answer, which settles at once.
        _ = &mut conn => answer.await,
    }
}

/// At most [`EXCERPT_BYTES`] of `bytes` as one line of text.
fn printable(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::new();
    for c in text.chars() {
        if out.len() + c.len_utf8() > EXCERPT_BYTES {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out.trim().to_owned()
}

/// A TLS client configuration trusting the system's root certificates.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(format!(
            "no trusted root certificates found on this machine ({} errors reading them)",
            found.errors.len()
        ));
    }
    client_config(roots)
}

/// A TLS client configuration trusting `roots`, with ring as the crypto provider and
/// HTTP/1.1 as the only protocol offered.
fn client_config(roots: rustls::RootCertStore) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    // A throw-away test CA and a certificate it issued for localhost and 127.0.0.1,
    // valid from 2000 to 2100 (made with `openssl ca`; the key protects nothing).
    const CA: &[u8] = include_bytes!("testdata/ca.pem");
    const LEAF: &[u8] = include_bytes!("testdata/leaf.pem");
    const LEAF_KEY: &[u8] = include_bytes!("testdata/leaf.key");

    impl HttpClient {
        /// A client trusting only the test CA.
        fn trusting_test_ca() -> Self {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(CA) {
                roots.add(cert.expect("CA PEM")).expect("CA certificate");
            }
            let client = Self::loopback();
            client.tls.set(client_config(roots)).expect("fresh client");
            client
        }

        /// A client allowed to deliver to loopback addresses (the tests' servers).
        fn loopback() -> Self {
            Self::new(AddressPolicy::new(vec![
                "127.0.0.0/8".parse().expect("range"),
                "::1".parse().expect("range"),
            ]))
        }
    }

    /// A TLS server on 127.0.0.1 answering every request with 204; its port.
    async fn tls_server() -> u16 {
        let certs = CertificateDer::pem_slice_iter(LEAF)
            .collect::<Result<Vec<_>, _>>()
            .expect("leaf PEM");
        let key = PrivateKeyDer::from_pem_slice(LEAF_KEY).expect("key PEM");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    let answer = b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n";
                    let _ = tls.write_all(answer).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn https_targets_are_verified_and_delivered_to() {
        let port = tls_server().await;
        let client = HttpClient::trusting_test_ca();
        for host in ["localhost", "127.0.0.1"] {
            let target = Target::parse(&format!("https://{host}:{port}/hook")).expect("target");
            let status = client
                .post(
                    &target,
                    &[],
                    Bytes::from_static(b"{}"),
                    Duration::from_secs(10),
                )
                .await
                .unwrap_or_else(|e| panic!("{host}: {}", crate::error::chain(&e)));
            assert_eq!(status, StatusCode::NO_CONTENT);
        }
        // The system's roots do not include the test CA.
        let target = Target::parse(&format!("https://localhost:{port}/")).expect("target");
        let e = HttpClient::loopback()
            .post(&target, &[], Bytes::new(), Duration::from_secs(10))
            .await
            .expect_err("untrusted certificate");
        assert!(
            matches!(e, AttemptError::Tls(..) | AttemptError::TlsSetup(_)),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn restricted_addresses_are_never_connected_to() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        for host in ["127.0.0.1", "[::ffff:127.0.0.1]", "2130706433", "127.1"] {
            let target = Target::parse(&format!("http://{host}:{port}/")).expect("target");
            let e = HttpClient::default()
                .post(&target, &[], Bytes::new(), Duration::from_secs(5))
                .await
                .expect_err("refused");
            assert!(matches!(e, AttemptError::Refused(..)), "{host}: {e:?}");
            let text = crate::error::chain(&e);
            assert!(text.contains("is a loopback address"), "{text}");
        }
        // A name: refused without saying what it resolved to.
        let target = Target::parse(&format!("http://localhost:{port}/")).expect("target");
        let e = HttpClient::default()
            .post(&target, &[], Bytes::new(), Duration::from_secs(5))
            .await
            .expect_err("refused");
        assert!(matches!(e, AttemptError::Unreachable(..)), "{e:?}");
        let text = crate::error::chain(&e);
        assert!(
            !text.contains("127.") && !text.contains("::1") && !text.contains("loopback"),
            "{text}"
        );
        let accepted = listener.accept();
        assert!(
            matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "no connection may reach the listener: {accepted:?}"
        );
    }

    #[test]
    fn excerpts_are_short_single_lines() {
        assert_eq!(printable(b"  oops\r\nbad  "), "oops  bad");
        let long = printable("é".repeat(500).as_bytes());
        assert!(
            long.len() <= EXCERPT_BYTES + '…'.len_utf8(),
            "{}",
            long.len()
        );
        assert!(long.ends_with('…'));
    }

    #[tokio::test]
    async fn refused_connections_and_timeouts_are_failed_attempts() {
        let client = HttpClient::loopback();
        // Nothing listens on port 1.
        let target = Target::parse("http://127.0.0.1:1/").expect("target");
        let e = client
            .post(&target, &[], Bytes::new(), Duration::from_secs(5))
            .await
            .expect_err("refused");
        assert!(matches!(e, AttemptError::Connect(..)), "{e:?}");

        // A listener that never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let target = Target::parse(&format!("http://{addr}/")).expect("target");
        let e = client
            .post(&target, &[], Bytes::new(), Duration::from_millis(100))
            .await
            .expect_err("timeout");
        assert!(matches!(e, AttemptError::TimedOut(_)), "{e:?}");
        drop(listener);
    }
}
