//! Flue's broker gateway: the HTTP API engines call, the publisher of deployment requests
//! onto per-server JetStream queues, and the keeper of deployment state.
//!
//! - [`config`]: the typed [`Config`] (flags and environment);
//! - [`api`]: axum handlers and [`ApiError`];
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
//! - [`waiters`]: long polls sharing one watch of the deployments;
//! - [`serve`]: HTTP connections (bound, header timeout, graceful stop);
//! - [`link`]: whether the broker connection is up;
//! - [`state`]: the state directory and the keys only the gateway holds.

pub mod api;
pub mod broker;
pub mod config;
pub mod credentials;
pub mod deferred;
pub mod error;
pub mod events;
pub mod fit;
pub mod link;
pub mod listen;
pub mod presence;
pub mod record;
pub mod responses;
pub mod sealing;
pub mod serve;
pub mod service;
pub mod stack_events;
pub mod state;
pub mod store;
pub mod timeouts;
pub mod waiters;
pub mod webhooks;

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use flue_proto::nats_url::NatsUrls;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use api::ApiError;
pub use config::Config;
pub use error::Error;

use broker::Broker;
use service::Service;
use store::Store;

/// Longest wait for background tasks and in-flight requests at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A running gateway: listener bound, streams, consumers and buckets in place, state recovered.
#[derive(Debug)]
pub struct Gateway {
    local_addr: SocketAddr,
    router: axum::Router,
    service: Service,
    client: async_nats::Client,
}

impl Gateway {
    /// Connects to the broker, sets up streams, buckets and the response consumer,
    /// recovers pending deployments, binds the listener and starts serving.
    pub async fn start(config: Config) -> Result<Self, Error> {
        // The keys first: a state directory that cannot be used stops the start before
        // anything is touched on the broker.
        let keys = state::StateDir::open(&config.state_dir)?.gateway_keys()?;
        let (client, reconnected) = connect(&config.nats_url).await?;
        // Every JetStream call (KV reads and writes, API requests, publish acks) of the
        // gateway is bounded by this, so that an API call waits at most that long on it.
        let js = jetstream::ContextBuilder::new()
            .timeout(config.broker_timeout())
            .build(client.clone());
        let broker = Broker::new(js.clone());
        broker
            .ensure_streams(config.stream_max_age(), config.max_servers)
            .await?;
        check_consumer_limits(&broker, config.max_servers).await;
        let events = events::Events::open(js.clone(), config.event_retention()).await?;
        let store = Store::open(&js).await?;
        let presence = presence::PresenceTracker::open(&js, &config).await?;
        let webhooks = webhooks::Webhooks::open(&js).await?;
        broker.response_consumer().await?;

        let shutdown = CancellationToken::new();
        let service = Service::new(
            Arc::new(config),
            store,
            broker,
            events,
            presence,
            webhooks,
            keys,
            shutdown.clone(),
        );
        service.recover().await?;

        let listen = service.config.listen;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|source| Error::Bind {
                addr: listen,
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: listen,
            source,
        })?;
        let link = link::BrokerLink::new(client.clone(), reconnected);
        let waiters = waiters::Waiters::default();
        let router = api::router(service.clone(), link.clone(), waiters.clone());
        let rules = serve::ConnectionRules {
            max_connections: usize::try_from(service.config.max_connections).unwrap_or(usize::MAX),
            header_timeout: Duration::from_millis(service.config.header_timeout_ms),
        };

        let tasks = &service.tasks;
        tasks.spawn(responses::consume(service.clone(), shutdown.child_token()));
        tasks.spawn(timeouts::sweep(service.clone(), shutdown.child_token()));
        tasks.spawn(service::republish(service.clone(), shutdown.child_token()));
        tasks.spawn(presence::run(service.clone(), shutdown.child_token()));
        tasks.spawn(webhooks::run(service.clone(), shutdown.child_token()));
        tasks.spawn(waiters::run(
            service.store.clone(),
            waiters,
            link.reconnected(),
            shutdown.child_token(),
        ));
        tasks.spawn(serve::serve(
            listener,
            router.clone(),
            rules,
            shutdown.child_token(),
        ));
        info!(addr = %local_addr, "gateway started");
        Ok(Self {
            local_addr,
            router,
            service,
            client,
        })
    }

    /// The address the HTTP API is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The whole application, for in-process calls (`tower::ServiceExt::oneshot`).
    pub fn router(&self) -> axum::Router {
        self.router.clone()
    }

    /// Resolves once the gateway stops (shutdown asked, or the HTTP server failed).
    pub async fn stopped(&self) {
        self.service.shutdown.cancelled().await;
    }

    /// Stops serving, waits (bounded) for the background tasks, and drains the broker connection.
    pub async fn shutdown(self) {
        self.service.shutdown.cancel();
        self.service.tasks.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.service.tasks.wait())
            .await
            .is_err()
        {
            warn!(
                grace_secs = SHUTDOWN_GRACE.as_secs(),
                "tasks still running at the end of the shutdown grace period"
            );
        }
        if let Err(e) = self.client.drain().await {
            warn!(error = %e, "cannot drain the broker connection");
        }
        info!("gateway stopped");
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // A gateway dropped without `shutdown` still stops its tasks.
        self.service.shutdown.cancel();
    }
}

/// Runs the gateway until `shutdown` is cancelled: prints
/// `flue-gateway listening on http://ADDR` on stdout once serving, then waits.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let gateway = Gateway::start(config).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "flue-gateway listening on http://{}",
            gateway.local_addr()
        )
        .map_err(Error::Stdout)?;
        out.flush().map_err(Error::Stdout)?;
    }
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = gateway.stopped() => {}
    }
    gateway.shutdown().await;
    Ok(())
}

/// Warns when the broker lets fewer servers register than `max_servers`: the request
/// stream's own limit could not be set, or the account allows fewer consumers.
async fn check_consumer_limits(broker: &Broker, max_servers: i32) {
    let max_servers = i64::from(max_servers);
    let limits = match broker.consumer_limits().await {
        Ok(limits) => limits,
        Err(e) => {
            warn!(error = %error::chain(&e), "cannot read the broker's consumer limits");
            return;
        }
    };
    match limits.effective() {
        Some(limit) if limit >= max_servers => {
            info!(limit, max_servers, "broker consumer limit checked");
        }
        Some(limit) => warn!(
            limit,
            max_servers,
            stream_limit = limits.stream,
            account_limit = limits.account,
            "the broker allows fewer consumers than --max-servers: registrations past the limit will be refused"
        ),
        None => warn!(
            max_servers,
            default = broker::BROKER_DEFAULT_MAX_CONSUMERS,
            "the request stream has no consumer limit of its own: the broker's default applies (1,000 on nats-server 2.15 unless its configuration lifts it)"
        ),
    }
}

/// Connects to the broker; the receiver changes each time the connection is made again.
async fn connect(url: &str) -> Result<(async_nats::Client, watch::Receiver<u64>), Error> {
    let urls = NatsUrls::parse(url);
    let (connected, reconnected) = watch::channel(0_u64);
    let connected = Arc::new(connected);
    let client = urls
        .with_credentials(async_nats::ConnectOptions::new())
        .name("flue-gateway")
        .event_callback(move |event| {
            let connected = connected.clone();
            async move {
                match event {
                    async_nats::Event::Connected => {
                        info!("broker connected");
                        connected.send_modify(|n| *n += 1);
                    }
                    async_nats::Event::Disconnected => {
                        warn!("broker connection lost; reconnecting")
                    }
                    other => warn!(event = %other, "broker event"),
                }
            }
        })
        .connect(urls.servers())
        .await
        .map_err(|source| Error::Connect {
            url: urls.redacted(),
            source,
        })?;
    Ok((client, reconnected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connect_errors_hide_passwords() {
        // Nothing listens on port 1, so the connection is refused at once.
        let e = connect("nats://gw:s3cret@127.0.0.1:1")
            .await
            .expect_err("nothing listens on port 1");
        let text = error::chain(&e);
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("nats://gw:***@127.0.0.1:1"), "{text}");
    }
}
