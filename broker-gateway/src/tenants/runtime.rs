//! One tenant's part of the gateway: its service (store, broker, events, presence,
//! webhooks), its background tasks, its long polls and its router.
//!
//! Everything here is what a single-tenant gateway was: a runtime keeps its own copy of
//! the configuration with `tenant` set to its tenant, so the code under it reads
//! `service.config.tenant` as before. Its state is reached through its tenant account's
//! connection, its event stream (events, SSE, webhook consumers) through its events
//! account's connection.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use flue_proto::{NotReady, NotReadyCode, Tenant, TenantId};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use super::connector::TenantConnections;
use super::readiness::{self, Readiness};
use crate::auth::{Revocations, Revoked};
use crate::broker::{self, Broker};
use crate::error;
use crate::link::BrokerLink;
use crate::service::Service;
use crate::startup::Error;
use crate::state::GatewayKeys;
use crate::store::Store;
use crate::waiters::Waiters;
use crate::{
    Config, deployments, events, presence, responses, service, timeouts, waiters, webhooks,
};

/// Builds a runtime's HTTP routes from its handles (`api::tenant_router`; given by the
/// gateway, so that the registry does not depend on the HTTP layer above it).
pub type TenantRouter = fn(Service, BrokerLink, Waiters) -> axum::Router;

/// Longest wait for a runtime's background tasks when it stops.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How a runtime stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Every background task ended within [`SHUTDOWN_GRACE`] and its broker connections
    /// are closed.
    Clean,
    /// Some were still running when the grace period ran out, or a connection did not
    /// close in time (logged).
    GraceExceeded,
}

/// A running tenant: streams, consumers and buckets in place, state recovered, tasks
/// running. Stopped by [`TenantRuntime::shutdown`] (or its parent token).
#[derive(Debug)]
pub struct TenantRuntime {
    tenant: Tenant,
    service: Service,
    link: BrokerLink,
    waiters: Waiters,
    router: axum::Router,
    connections: TenantConnections,
    readiness: Readiness,
}

impl TenantRuntime {
    /// Sets up `tenant`'s streams, buckets and response consumer over `connections`,
    /// recovers its pending deployments and starts its background tasks, stopped when
    /// `parent` is cancelled or by [`TenantRuntime::shutdown`].
    pub async fn start(
        base: &Config,
        tenant: Tenant,
        connections: TenantConnections,
        keys: GatewayKeys,
        revocations: &Revocations,
        parent: &CancellationToken,
        router: TenantRouter,
    ) -> Result<Self, Error> {
        let mut config = base.clone();
        config.tenant = tenant.id.clone();
        // Every JetStream call (KV reads and writes, API requests, publish acks) of the
        // gateway is bounded by this, so that an API call waits at most that long on it.
        let context = |client: &async_nats::Client| {
            jetstream::ContextBuilder::new()
                .timeout(config.broker_timeout())
                .build(client.clone())
        };
        let js = context(&connections.tenant.client);
        let events_js = context(&connections.events().client);
        // Checked when the gateway started (`Gateway::start`), so this is the same answer.
        let request_consumers = config.request_consumers()?;
        let names = match &connections.users {
            Some(users) => users.consumer_names()?,
            None => crate::consumer_names::ConsumerNames::none(),
        };
        let broker = Broker::new(js.clone())
            .with_request_consumers(request_consumers)
            .with_consumer_names(names);
        once_placed(|| {
            broker.ensure_streams(
                config.stream_max_age(),
                config.max_servers,
                config.replicas(),
            )
        })
        .await?;
        check_consumer_limits(&broker, config.max_servers).await;
        let metrics = crate::metrics::TenantMetrics::default();
        let events =
            once_placed(|| events::Events::open(events_js.clone(), config.event_retention()))
                .await?
                .counting(metrics.clone());
        let store = Store::open_with(&js, config.replicas()).await?;
        let presence = presence::PresenceTracker::open(&js, &config)
            .await?
            .counting(metrics.clone());
        let shutdown = parent.child_token();
        // A start that fails past here (and is tried again) leaves no task running.
        let stop_if_failed = shutdown.clone().drop_guard();
        let tasks = TaskTracker::new();
        let webhooks = webhooks::Webhooks::new(
            store.webhooks.clone(),
            &events_js,
            config.webhook_policy(),
            webhooks::Scope {
                tenant: tenant.id.clone(),
                settings: config.webhook_settings(),
                shutdown: shutdown.clone(),
                tasks: tasks.clone(),
                metrics: metrics.clone(),
            },
        );
        broker.response_consumer().await?;
        // Revoked HTTP tokens live in the tenant's own account, like everything of it.
        let revoked = Revoked::open(&js, config.replicas()).await?;
        let operations = crate::operations::Operations::open(
            &js,
            store.operations.clone(),
            tenant.id.clone(),
            config.replicas(),
            Duration::from_secs(config.engine_lease_secs),
            broker.operations_consumer_name(),
        )
        .await?;
        // Streams and buckets made under another `--replicas` are brought to this one.
        for context in [&js, &events_js] {
            crate::replicas::ensure(context, config.replicas()).await?;
        }

        let service = Service::new(service::Parts {
            config: Arc::new(config),
            store,
            broker,
            events,
            presence,
            webhooks,
            keys,
            users: connections.users.clone(),
            shutdown: shutdown.clone(),
            tasks,
        });
        service.publisher.recover().await?;

        let tenant_conn = &connections.tenant;
        let mut link = BrokerLink::new(tenant_conn.client.clone(), tenant_conn.reconnected.clone());
        if let Some(events) = &connections.events {
            link = link.with_events(events.client.clone());
        }
        let (probed, readiness) = readiness::channel();
        service.tasks.spawn(readiness::run(
            readiness::Probe::new(js.clone(), &tenant.id),
            link.clone(),
            probed,
            shutdown.child_token(),
        ));
        let waiters = Waiters::default();
        let router = router(service.clone(), link.clone(), waiters.clone())
            .layer(axum::Extension(operations.clone()));

        let tasks = &service.tasks;
        tasks.spawn(responses::consume(
            service.answers.clone(),
            shutdown.child_token(),
        ));
        tasks.spawn(timeouts::sweep(service.sweeper(), shutdown.child_token()));
        tasks.spawn(deployments::republish(
            service.publisher.clone(),
            shutdown.child_token(),
        ));
        tasks.spawn(crate::metrics::pending::run(
            service.config.tenant.clone(),
            service.store.deployments.clone(),
            service.events.metrics().pending().clone(),
            shutdown.child_token(),
        ));
        tasks.spawn(crate::adopt::run(
            service.config.tenant.clone(),
            service.store.deployments.clone(),
            service.publisher.clone(),
            shutdown.child_token(),
        ));
        let (rebuilt, rebuilt_servers) = tokio::sync::mpsc::unbounded_channel();
        tasks.spawn(crate::operations::auto::run(
            crate::operations::auto::AutoHandles {
                tenant: service.config.tenant.clone(),
                servers: service.store.servers.clone(),
                stacks: service.store.stacks.clone(),
                broker: service.broker.clone(),
                sealing: service.keys.sealing.clone(),
                tasks: service.tasks.clone(),
            },
            operations.clone(),
            rebuilt_servers,
            shutdown.child_token(),
        ));
        let (sealed, sealed_asked) = tokio::sync::mpsc::unbounded_channel();
        tasks.spawn(crate::servers::sealed::run(
            service.broker.clone(),
            service.config.tenant.clone(),
            sealed_asked,
            shutdown.child_token(),
        ));
        tasks.spawn(presence::run(
            service.presence.clone(),
            presence::PresenceHandles {
                servers: service.store.servers.clone(),
                events: service.events.clone(),
                rebuilt: Some(rebuilt),
                sealed: Some(sealed),
            },
            shutdown.child_token(),
        ));
        // Consumers an older gateway left on FLUE_EVT_GW move to FLUE_EVT before any
        // delivery task runs (issue 24).
        service.webhooks.retire_copy().await?;
        tasks.spawn(webhooks::run(
            service.webhooks.clone(),
            shutdown.child_token(),
        ));
        tasks.spawn(revoked.clone().follow(shutdown.child_token()));
        // Listeners' consumers are made by the gateway (operator mode: listeners are
        // users of the listener account, which has no JetStream).
        if let (Some(events), Some(_)) = (&connections.events, &connections.users) {
            let retention = service.config.event_retention();
            let bounds = crate::natsauth::creates::Bounds {
                max_consumers: events::capped_listener_bound(
                    service.events.jetstream(),
                    retention.max_consumers,
                )
                .await,
                idle: retention.listener_idle,
            };
            let creations = crate::natsauth::creates::Creations::subscribe(
                events.client.clone(),
                tenant.id.clone(),
                bounds,
            )
            .await
            .map_err(|e| {
                Error::from(broker::BrokerError::Consumer {
                    stream: flue_proto::event::EVENT_STREAM,
                    consumer: "listeners' creations".to_owned(),
                    source: e,
                })
            })?;
            tasks.spawn(creations.serve(service.config.broker_timeout(), shutdown.child_token()));
        }
        revocations.insert(tenant.id.clone(), revoked);
        for n in 0..service.config.engine_workers {
            let ctx = crate::operations::worker::WorkerContext {
                operations: operations.clone(),
                stacks: service.store.stacks.clone(),
                sealing: service.keys.sealing.clone(),
                token_secret: service.keys.token_secret.clone(),
                api_url: service.config.engine_api_url.clone().unwrap_or_default(),
                api_ca: service
                    .config
                    .engine_api_ca
                    .clone()
                    .or_else(|| service.config.tls_cert.clone()),
                metrics: service.events.metrics().clone(),
            };
            tasks.spawn(crate::operations::worker::run(
                ctx,
                n,
                shutdown.child_token(),
            ));
        }
        tasks.spawn(waiters::run(
            service.store.deployments.clone(),
            waiters.clone(),
            link.reconnected(),
            service.config.broker_timeout(),
            shutdown.child_token(),
        ));
        info!(tenant = %tenant.id, "tenant runtime started");
        stop_if_failed.disarm();
        Ok(Self {
            tenant,
            service,
            link,
            waiters,
            router,
            connections,
            readiness,
        })
    }

    /// Follows the broker's disconnect advisories of the tenant's account for presence
    /// (operator mode; see [`presence`]), until the runtime stops.
    pub fn follow_disconnects(&self, advisories: presence::Advisories) {
        self.service.tasks.spawn(presence::follow_disconnects(
            self.service.presence.clone(),
            advisories,
            self.service.shutdown.child_token(),
        ));
    }

    /// The tenant served.
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// Its id.
    pub fn id(&self) -> &TenantId {
        &self.tenant.id
    }

    /// Its shared state (the store, recovery), for in-process tests and tools.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// The tenant's routes (`/v1/…`, the dashboard), for requests of its callers.
    pub fn router(&self) -> axum::Router {
        self.router.clone()
    }

    /// True while its broker connections are up (its `/v1` calls can be served).
    pub fn is_connected(&self) -> bool {
        self.link.is_connected()
    }

    /// Why its `/v1` writes cannot be served now, if so: a broker connection down, or
    /// (at the last background probe, [`readiness`]) a state stream that cannot take
    /// writes (the broker's store full, no quorum, JetStream not answering).
    pub fn not_ready(&self) -> Option<NotReady> {
        if !self.link.is_connected() {
            return Some(NotReady {
                code: NotReadyCode::BrokerDisconnected,
                message: "a broker connection of the gateway is down; it reconnects by itself"
                    .to_owned(),
            });
        }
        self.readiness.not_ready()
    }

    /// Long polls waiting right now.
    pub fn long_polls(&self) -> usize {
        self.waiters.waiting()
    }

    /// What `GET /metrics` shows of this tenant now: its counters, and the gauges read
    /// now (presence: one pass over the servers the tracker holds in memory; long polls
    /// and reconnections: counters in memory). Nothing is asked of the broker.
    pub fn metrics_sample(&self) -> crate::metrics::Sample {
        let reconnects = |c: &async_nats::Client| {
            let connects = c
                .statistics()
                .connects
                .load(std::sync::atomic::Ordering::Relaxed);
            connects.saturating_sub(1)
        };
        let mut by_kind = vec![("tenant", reconnects(&self.connections.tenant.client))];
        if let Some(events) = &self.connections.events {
            by_kind.push(("events", reconnects(&events.client)));
        }
        crate::metrics::Sample {
            tenant: self.tenant.id.clone(),
            metrics: self.service.events.metrics().clone(),
            presence: self.service.presence.counts(),
            long_polls: u64::try_from(self.long_polls()).unwrap_or(u64::MAX),
            reconnects: by_kind,
        }
    }

    /// True once it was told to stop (its tasks end, its long polls return).
    pub fn is_stopping(&self) -> bool {
        self.service.shutdown.is_cancelled()
    }

    /// Stops its background tasks (bounded by [`SHUTDOWN_GRACE`]), then drains its broker
    /// connections and waits (bounded) until they are closed. Calls of its router still in flight end early (long polls return).
    pub async fn shutdown(&self) -> Stopped {
        self.service.shutdown.cancel();
        self.service.tasks.close();
        let stopped = match tokio::time::timeout(SHUTDOWN_GRACE, self.service.tasks.wait()).await {
            Ok(()) => Stopped::Clean,
            Err(_) => {
                warn!(
                    tenant = %self.tenant.id,
                    grace_secs = SHUTDOWN_GRACE.as_secs(),
                    "tenant tasks still running at the end of the shutdown grace period"
                );
                Stopped::GraceExceeded
            }
        };
        if !self.connections.drain().await {
            warn!(tenant = %self.tenant.id, "tenant broker connections could not be drained and closed (broker away, or too slow)");
            return Stopped::GraceExceeded;
        }
        info!(tenant = %self.tenant.id, "tenant runtime stopped");
        stopped
    }

    /// True once its broker connections are closed for good (after [`Self::shutdown`]).
    pub fn is_closed(&self) -> bool {
        self.connections.is_closed()
    }
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

/// How long a start waits for a JetStream cluster that is still forming.
const CLUSTER_FORMING_WAIT: Duration = Duration::from_secs(30);

/// `attempt` (setting up streams), retried while the broker answers that its cluster
/// cannot place a stream yet ([`broker::cluster_forming`]): nodes started together elect
/// a metadata leader and learn their peers and the accounts just pushed in the first
/// seconds, and a gateway started with them must not fail for it. Anything else, or a
/// cluster that still cannot place them after [`CLUSTER_FORMING_WAIT`] (fewer nodes than
/// `--replicas`), stops the start as before.
async fn once_placed<T, F, Fut>(mut attempt: F) -> Result<T, broker::BrokerError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, broker::BrokerError>>,
{
    let until = tokio::time::Instant::now() + CLUSTER_FORMING_WAIT;
    let mut warned = false;
    loop {
        match attempt().await {
            Err(e) if broker::cluster_forming(&e) && tokio::time::Instant::now() < until => {
                if !warned {
                    warn!(error = %error::chain(&e), "the JetStream cluster cannot place the streams yet; waiting for it");
                    warned = true;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            done => return done,
        }
    }
}
