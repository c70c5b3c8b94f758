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

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

/// Pause after a failed `accept` (out of file descriptors, say) before the next one, so
/// that the loop does not spin while the cause lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// How connections are served.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionRules {
    /// Most connections open at once.
    pub max_connections: usize,
    /// Longest wait for a request's headers.
    pub header_timeout: Duration,
}

/// Serves `router` on `listener` until `shutdown`, then stops accepting, lets every open
/// connection finish the request it is serving, and returns once they are closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    rules: ConnectionRules,
    shutdown: CancellationToken,
) {
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
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            debug!(%peer, limit = rules.max_connections, "connection limit reached; closing the new connection");
            drop(stream);
            continue;
        };
        let connection = builder.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let stop = shutdown.clone();
        connections.spawn(async move {
            let _permit = permit;
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
        });
    }
    connections.close();
    connections.wait().await;
}
