//! Serving the API over HTTP/1.1: a bound on open connections, a header read timeout,
//! and a graceful stop.
//!
//! `axum::serve` has neither a header read timeout nor a connection bound, so a client
//! sending headers a byte at a time, or many clients holding idle connections, could hold
//! the gateway's sockets for ever. Here each connection is served by hyper with a timer:
//! a request's headers must arrive within `--header-timeout-ms` of the gateway starting to
//! wait for them (on a kept-alive connection too, so that is also the idle limit), or the
//! connection is closed. At most `--max-connections` are open at once; one more is closed
//! as soon as it is accepted (rather than left waiting in the backlog, where health checks
//! would hang), and the client may retry.
//!
//! With a certificate (`--tls-cert`, `--tls-key`) every connection is HTTPS: the TLS
//! handshake must be over within the header timeout too (it counts as part of the wait
//! for the first request's headers), and a client speaking plain HTTP to the port gets a
//! plain-text `400` JSON answer saying so instead of a handshake error it cannot read.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use flue_proto::{ErrorBody, ErrorDetail, HTTPS_REQUIRED};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

/// Pause after a failed `accept` (out of file descriptors, say) before the next one, so
/// that the loop does not spin while the cause lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The first byte of a TLS handshake record: what a TLS client sends first.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// How connections are served.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionRules {
    /// Most connections open at once.
    pub max_connections: usize,
    /// Longest wait for a request's headers.
    pub header_timeout: Duration,
}

/// Serves `router` on `listener` until `shutdown`, then stops accepting, lets every open
/// connection finish the request it is serving, and returns once they are closed. With
/// `tls`, every connection is HTTPS.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    rules: ConnectionRules,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: CancellationToken,
) {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(rules.header_timeout);
    let builder = Arc::new(builder);
    let permits = Arc::new(Semaphore::new(rules.max_connections));
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                warn!(error = %e, "cannot accept a connection");
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                }
            }
        };
        // Answers are written in several small pieces (TLS records above all): with
        // Nagle's algorithm the later ones would wait for the client's delayed ACK (~40 ms).
        let _ = stream.set_nodelay(true);
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            debug!(%peer, limit = rules.max_connections, "connection limit reached; closing the new connection");
            drop(stream);
            continue;
        };
        let builder = builder.clone();
        let router = router.clone();
        let acceptor = acceptor.clone();
        let stop = shutdown.clone();
        connections.spawn(async move {
            let _permit = permit;
            let Some(acceptor) = acceptor else {
                return serve_connection(&builder, stream, router, peer, stop).await;
            };
            // The handshake is part of the wait for the first request's headers, so the
            // same timeout bounds it: a client that never finishes it holds nothing long.
            let handshake = tokio::select! {
                () = stop.cancelled() => return,
                done = tokio::time::timeout(rules.header_timeout, handshake(&acceptor, stream)) => done,
            };
            match handshake {
                Ok(Some(tls)) => serve_connection(&builder, tls, router, peer, stop).await,
                Ok(None) => {}
                Err(_) => debug!(%peer, "TLS handshake not done within the header timeout; connection closed"),
            }
        });
    }
    connections.close();
    connections.wait().await;
}

/// Serves one connection (plain or TLS) until it ends, or gracefully stops it at `stop`.
async fn serve_connection<I>(
    builder: &http1::Builder,
    io: I,
    router: Router,
    peer: std::net::SocketAddr,
    stop: CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connection = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(router));
    let mut connection = std::pin::pin!(connection);
    let served = tokio::select! {
        served = connection.as_mut() => served,
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = served {
        debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// The TLS handshake on `stream`; `None` when it failed, or when the client spoke plain
/// HTTP (it is told so, in plain text, before the connection closes).
async fn handshake(
    acceptor: &tokio_rustls::TlsAcceptor,
    mut stream: TcpStream,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let mut first = [0_u8; 1];
    match stream.peek(&mut first).await {
        Ok(1..) if first[0] != TLS_HANDSHAKE_RECORD => {
            refuse_plain_http(&mut stream).await;
            return None;
        }
        Ok(1..) => {}
        // Closed before saying anything, or broken.
        Ok(0) | Err(_) => return None,
    }
    match acceptor.accept(stream).await {
        Ok(tls) => Some(tls),
        Err(e) => {
            debug!(error = %e, "TLS handshake failed; connection closed");
            None
        }
    }
}

/// Answers a plain-HTTP request on the HTTPS port with a `400` and closes the connection.
async fn refuse_plain_http(stream: &mut TcpStream) {
    let body = ErrorBody {
        error: ErrorDetail {
            code: HTTPS_REQUIRED.to_owned(),
            message: "this port serves HTTPS only; use an https:// URL".to_owned(),
        },
    };
    let body = serde_json::to_string(&body).unwrap_or_default();
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    // The client may be gone already; there is nothing more to do for it either way.
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}
