//! Flue's broker gateway: the HTTP API engines call, the publisher of deployment requests
//! onto per-server JetStream queues, and the keeper of deployment state.
//!
//! - [`config`]: the typed [`Config`] (flags and environment);
//! - [`api`]: axum handlers and [`ApiError`] (the one place domain errors become HTTP answers);
//! - [`error`]: error chains for logs; [`startup`]: why the gateway or a tenant could not start;
//! - [`credentials`]: minting an agent's keys and credentials file at registration;
//! - [`store`]: state in JetStream KV buckets, changed by compare-and-set;
//! - [`broker`]: the request/response streams, consumers and publishing;
//! - [`record`]: the stored deployment record and its state transitions;
//! - [`service`]: shared handles, reliable publishing and start-up recovery;
//! - [`deferred`]: requests left to the background publisher, in each server's order;
//! - [`events`]: publishing lifecycle events into the event stream;
//! - [`responses`]: the consumer applying agents' answers;
//! - [`timeouts`]: the sweeper failing deployments nobody answered;
//! - [`presence`]: online / offline from agents' heartbeats;
//! - [`webhooks`]: webhook subscriptions and their delivery;
//! - [`operations`]: stack operations queued over HTTP and the engine workers running them;
//! - [`stacks`]: the engine's stack records written, deleted, exported, abandoned, adopted;
//! - [`waiters`]: long polls sharing one watch of the deployments;
//! - [`serve`]: HTTP connections (bound, header timeout, graceful stop);
//! - [`link`]: whether the broker connection is up;
//! - [`state`]: the state directory and the keys only the gateway holds;
//! - [`tenants`]: one runtime per tenant, the registry, and how tenants are reached
//!   ([`testing`] lends tests a few of its items);
//! - [`auth`]: bearer tokens, roles and the middleware in front of `/v1`;
//! - [`tls`]: the HTTPS server configuration and the broker's TLS configuration blocks;
//! - [`natsauth`]: broker authentication (operator, accounts, users) and `flue-gateway init`.
//!
//! # The library's surface
//!
//! Every module is the crate's own (`pub(crate)`) but those the binary (`main.rs`), the
//! fuzz targets and the tests need, and those need nothing but the following, which
//! `tests/it/structure.rs` holds the tests to:
//!
//! - the root: [`Gateway`], [`run`], [`Config`], [`Error`], [`ApiError`];
//! - [`api`]: the OpenAPI document (`flue-gateway openapi`) and, for the fuzz targets, the
//!   query types of [`api::deployments`], [`api::stacks`] and [`api::events`];
//! - operator tools, each a `flue-gateway` subcommand's library, which a test uses as an
//!   operator with the state directory would: [`auth`] (`token`: minting tokens offline,
//!   and which role a route allows), [`state`] (the state directory's keys), [`natsauth`]
//!   (`init`, `tenant create`, `leaf-config`: the operator's keys and what they sign; the
//!   attack tests forge and push JWTs with it, as an attacker's own tooling would;
//!   `natsauth::creates`, the gateway's part of listeners' consumer creations, which a
//!   test of listeners without a gateway runs on its own events connection) and
//!   [`tls`] (the broker's TLS blocks `leaf-config` and `cluster-config` write);
//! - [`webhooks::target`], the webhook target check a fuzz target runs;
//! - [`testing`]: what only an in-process test does (a tenant served from a second
//!   broker, one tenant's runtime stopped).
//!
//! The store, the records, the broker handles and the tenant runtimes' insides are not
//! part of it: a test reads and writes what the gateway keeps through the broker (bucket
//! and stream names from `flue_proto::subject`), and a rule of the store is unit-tested
//! here, on the in-memory buckets.

pub(crate) mod adopt;
pub mod api;
pub mod auth;
pub(crate) mod broker;
pub(crate) mod config;
pub(crate) mod configs;
pub(crate) mod consumer_names;
pub(crate) mod credentials;
pub(crate) mod deferred;
pub(crate) mod deployments;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod fit;
#[cfg(test)]
mod future_sizes;
pub(crate) mod link;
pub(crate) mod listen;
pub(crate) mod metrics;
pub mod natsauth;
pub(crate) mod operations;
pub(crate) mod poll;
pub(crate) mod presence;
pub(crate) mod record;
pub(crate) mod replicas;
pub(crate) mod request_consumers;
pub(crate) mod responses;
pub(crate) mod rights;
pub(crate) mod sealing;
pub(crate) mod serve;
pub(crate) mod servers;
pub(crate) mod service;
pub(crate) mod stack_events;
pub(crate) mod stacks;
pub(crate) mod startup;
pub mod state;
pub(crate) mod store;
pub(crate) mod tenants;
pub mod testing;
pub(crate) mod timeouts;
pub mod tls;
pub(crate) mod waiters;
pub mod webhooks;

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flue_proto::nats_url::NatsUrls;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

pub use api::ApiError;
pub use config::Config;
pub use startup::Error;

use tenants::{Connector, Tenants};

/// Longest wait for in-flight HTTP requests at shutdown (each tenant runtime then has
/// its own grace period for its tasks).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A running gateway: listener bound, every tenant's runtime started (streams, consumers
/// and buckets in place, state recovered).
#[derive(Debug)]
pub struct Gateway {
    local_addr: SocketAddr,
    https: bool,
    router: axum::Router,
    tenants: Tenants,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

impl Gateway {
    /// Starts the runtime of every tenant that exists (in development mode the one
    /// `--default-tenant`, over `--nats-url`), binds the listener and starts serving.
    pub async fn start(config: Config) -> Result<Self, Error> {
        // On the heap: the start holds every tenant's setup, more than a debug-built
        // test thread (2 MiB, where `#[tokio::test]` keeps its future) can spare.
        Box::pin(Self::start_boxed(config)).await
    }

    async fn start_boxed(mut config: Config) -> Result<Self, Error> {
        // Keys and certificates are read before anything else, so a state directory or
        // a path that cannot be used stops the start before the broker is touched.
        let keys = state::StateDir::open(&config.state_dir)?.gateway_keys()?;
        let https = config
            .https()
            .map(|(cert, key)| tls::server_config(cert, key))
            .transpose()?;
        warn_plaintext(&config, https.is_some());
        let nats_tls = config.nats_tls();
        nats_tls.check()?;
        config.request_consumers()?;
        let auth = match config.insecure_no_auth {
            true => auth::Auth::insecure(keys.token_secret.clone(), config.tenant.clone()),
            false => auth::Auth::tokens(keys.token_secret.clone(), config.tenant.clone()),
        };
        if config.insecure_unsigned_answers {
            warn!(
                "INSECURE: --insecure-unsigned-answers: agents' answers without a signature are applied; anyone who can publish on a response subject can decide deployments. Development only."
            );
        }
        // Bound before the tenants start: their engine workers drive stacks through this
        // gateway's own address unless told another (`--engine-api-url`).
        let listen = config.listen;
        let bound = async {
            let listener = tokio::net::TcpListener::bind(listen).await?;
            let local_addr = listener.local_addr()?;
            Ok((listener, local_addr))
        };
        let (listener, local_addr) = bound.await.map_err(|source| Error::Bind {
            addr: listen,
            source,
        })?;
        if config.engine_api_url.is_none() {
            config.engine_api_url = Some(operations::own_url(local_addr, https.is_some()));
        }
        let shutdown = CancellationToken::new();
        let connector = connector(&config, nats_tls, &shutdown).await?;
        let config = Arc::new(config);
        let tenants = match Tenants::new(
            config.clone(),
            keys,
            connector.clone(),
            auth.revocations().clone(),
            api::tenant_router,
            shutdown.clone(),
        ) {
            Ok(tenants) => tenants,
            Err(e) => {
                connector.close().await;
                return Err(e);
            }
        };
        if let Err(e) = Box::pin(tenants.start_existing()).await {
            tenants.shutdown().await;
            return Err(Box::new(e).into());
        }

        let router = api::router(tenants.clone(), auth);
        let rules = serve::ConnectionRules {
            max_connections: usize::try_from(config.max_connections).unwrap_or(usize::MAX),
            header_timeout: Duration::from_millis(config.header_timeout_ms),
        };
        let tasks = TaskTracker::new();
        let serves_https = https.is_some();
        tasks.spawn(serve::serve(
            listener,
            router.clone(),
            rules,
            https,
            shutdown.child_token(),
        ));
        info!(addr = %local_addr, https = serves_https, "gateway started");
        Ok(Self {
            local_addr,
            https: serves_https,
            router,
            tenants,
            shutdown,
            tasks,
        })
    }

    /// The API's base URL: `https://ADDR` when serving HTTPS, else `http://ADDR`.
    pub fn base_url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.local_addr)
    }

    /// The address the HTTP API is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The whole application, for in-process calls (`tower::ServiceExt::oneshot`).
    pub fn router(&self) -> axum::Router {
        self.router.clone()
    }

    /// The tenant runtimes it serves.
    pub fn tenants(&self) -> &Tenants {
        &self.tenants
    }

    /// Resolves once the gateway stops (shutdown asked, or the HTTP server failed).
    pub async fn stopped(&self) {
        self.shutdown.cancelled().await;
    }

    /// Stops serving, stops every tenant runtime (each waits, bounded, for its tasks and
    /// drains its broker connections); true when everything stopped within its grace.
    pub async fn shutdown(self) -> bool {
        self.shutdown.cancel();
        self.tasks.close();
        let served = tokio::time::timeout(SHUTDOWN_GRACE, self.tasks.wait())
            .await
            .is_ok();
        if !served {
            warn!(
                grace_secs = SHUTDOWN_GRACE.as_secs(),
                "connections still open at the end of the shutdown grace period"
            );
        }
        let clean = self.tenants.shutdown().await && served;
        info!("gateway stopped");
        clean
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // A gateway dropped without `shutdown` still stops its tasks.
        self.shutdown.cancel();
    }
}

/// Runs the gateway until `shutdown` is cancelled: prints
/// `flue-gateway listening on http://ADDR` (`https://` when serving HTTPS) on stdout
/// once serving, then waits.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let gateway = Gateway::start(config).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "flue-gateway listening on {}", gateway.base_url()).map_err(Error::Stdout)?;
        out.flush().map_err(Error::Stdout)?;
    }
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = gateway.stopped() => {}
    }
    gateway.shutdown().await;
    Ok(())
}

/// How the gateway reaches the broker: operator mode (the state directory's broker keys)
/// unless `--insecure-dev-broker` is given; refused when neither is there, so a gateway
/// never falls back to an anonymous broker by itself.
async fn connector(
    config: &Config,
    nats_tls: flue_proto::nats_tls::NatsTls,
    shutdown: &CancellationToken,
) -> Result<Connector, Error> {
    if config.insecure_dev_broker {
        warn!(
            tenant = %config.tenant,
            "INSECURE: --insecure-dev-broker: the broker connection is anonymous, every client of the broker can read and write every queue, event and data key; agents' credentials carry no broker user. Development only."
        );
        return Ok(Connector::dev(
            config.nats_url.clone(),
            config.tenant.clone(),
            nats_tls,
        ));
    }
    let auth = match natsauth::NatsAuth::open(&config.state_dir) {
        Ok(auth) => auth,
        Err(natsauth::NatsAuthError::NotInitialised(dir)) => return Err(Error::NoOperator(dir)),
        Err(e) => return Err(e.into()),
    };
    info!(operator = %auth.operator_public_key(), "operator mode: tenants reached as their own broker users");
    Connector::operator(
        config.nats_url.clone(),
        nats_tls,
        auth,
        config.account_push_every(),
        shutdown.clone(),
    )
    .await
    .map_err(|e| Error::Tenant(Box::new(tenants::TenantError::Connector(e))))
}

/// Warns loudly when something that crosses a network would go unencrypted: the API on a
/// non-loopback address without `--tls-cert`, or the broker off this host without TLS.
fn warn_plaintext(config: &Config, https: bool) {
    if !https && !config.listen.ip().is_loopback() {
        warn!(addr = %config.listen, "the API is served over PLAIN HTTP on a non-loopback address: give --tls-cert and --tls-key");
    }
    let urls = NatsUrls::parse(&config.nats_url);
    let off_host = urls.servers().iter().any(|url| {
        let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
        let host = rest.rsplit_once(':').map_or(rest, |(h, _)| h);
        !(host == "localhost" || host == "[::1]" || host.starts_with("127."))
    });
    let tls =
        config.nats_tls().required() || urls.servers().iter().all(|u| u.starts_with("tls://"));
    if off_host && !tls {
        warn!(nats_url = %urls.redacted(), "the broker connection leaves this host WITHOUT TLS: give --nats-ca (and tls:// URLs)");
    }
}
