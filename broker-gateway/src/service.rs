//! A tenant runtime's shared state as the HTTP handlers see it: the domain operations'
//! handles ([`Accept`], [`Publisher`], [`Servers`], [`Answers`], [`Stacks`]) built once
//! from the tenant's connections, and the few raw handles the handlers not yet split out
//! still read.
//!
//! Nothing takes a `Service` whole except the HTTP handlers (as axum state): every domain
//! operation and background task gets the handles it needs (see ARCHITECTURE.md, "Domain
//! operations").

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::Config;
use crate::broker::Broker;
use crate::credentials::Minter;
use crate::deployments::{Accept, Publisher, PublisherHandles};
use crate::events::Events;
use crate::natsauth::BrokerUsers;
use crate::presence::PresenceTracker;
use crate::responses::{Answers, Signers};
use crate::rights::StackRights;
use crate::servers::Servers;
use crate::stacks::Stacks;
use crate::state::GatewayKeys;
use crate::store::Store;
use crate::timeouts::{Sweeper, TimeoutSet};
use crate::webhooks::Webhooks;

/// What a tenant runtime is made of, before the domain handles are built from it.
#[derive(Debug, Clone)]
pub struct Parts {
    /// The gateway's configuration, `tenant` set to the runtime's.
    pub config: Arc<Config>,
    /// KV state.
    pub store: Store,
    /// Streams and consumers.
    pub broker: Broker,
    /// The event stream.
    pub events: Events,
    /// Servers' presence.
    pub presence: PresenceTracker,
    /// Webhook subscriptions (they hold their own handles).
    pub webhooks: Webhooks,
    /// The gateway's own keys (request signing, sealing, HTTP tokens).
    pub keys: GatewayKeys,
    /// The tenant's broker users; `None` with `--insecure-dev-broker`, where the broker
    /// checks no user.
    pub users: Option<BrokerUsers>,
    /// Cancelled when the runtime stops.
    pub shutdown: CancellationToken,
    /// Tracker of every task the runtime spawns, waited for at shutdown.
    pub tasks: TaskTracker,
}

/// The HTTP handlers' state (axum `State`): one pointer to [`Shared`], so that the copy
/// every request, task and future holds is small (the handles themselves take tens of
/// KiB, mostly the KV bucket handles, which a debug build's futures would otherwise carry
/// by value until a test thread's stack overflows).
#[derive(Debug, Clone)]
pub struct Service(Arc<Shared>);

impl std::ops::Deref for Service {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`Service`] points to.
#[derive(Debug)]
pub struct Shared {
    /// The gateway's configuration (configs, stacks, events, poll and listener handlers).
    pub config: Arc<Config>,
    /// KV state (reads, and the handlers of configs and stacks).
    pub store: Store,
    /// What the broker takes (configs' and stacks' size checks).
    pub broker: Broker,
    /// The event stream (SSE, stack events, polling servers' registrations).
    pub events: Events,
    /// Servers' presence (server reads).
    pub presence: PresenceTracker,
    /// Webhook subscriptions.
    pub webhooks: Webhooks,
    /// The gateway's own keys (config defaults sealed, polling servers' secrets).
    pub keys: GatewayKeys,
    /// Accepting deployments.
    pub accept: Accept,
    /// Publishing deployments' requests; recovery at start.
    pub publisher: Publisher,
    /// Registering, rotating and deregistering servers.
    pub servers: Servers,
    /// Applying answers (agents' and polling servers').
    pub answers: Answers,
    /// Writing, deleting and transferring stacks.
    pub stacks: Stacks,
    /// Cancelled when the gateway shuts down; long polls return early on it.
    pub shutdown: CancellationToken,
    /// Tracker of every task the gateway spawns, waited for at shutdown.
    pub tasks: TaskTracker,
    /// The tenant's broker users (listener credentials, stack rights).
    pub users: Option<BrokerUsers>,
}

impl Service {
    /// Builds the domain handles from `parts`; they share one set of watched timeouts
    /// and one cache of servers' answer keys.
    pub fn new(parts: Parts) -> Self {
        let Parts {
            config,
            store,
            broker,
            events,
            presence,
            webhooks,
            keys,
            users,
            shutdown,
            tasks,
        } = parts;
        let tenant = config.tenant.clone();
        let timeouts = TimeoutSet::default();
        let rights = StackRights {
            tenant: tenant.clone(),
            servers: store.servers.clone(),
            users: users.clone(),
        };
        let signers = Signers::default();
        let publisher = Publisher::new(PublisherHandles {
            tenant: tenant.clone(),
            configs: store.configs.clone(),
            servers: store.servers.clone(),
            deployments: store.deployments.clone(),
            broker: broker.clone(),
            events: events.clone(),
            signing: keys.signing.clone(),
            sealing: keys.sealing.clone(),
            timeouts: timeouts.clone(),
            shutdown: shutdown.clone(),
        });
        let accept = Accept {
            tenant: tenant.clone(),
            default_timeout_secs: config.default_timeout_secs,
            configs: store.configs.clone(),
            servers: store.servers.clone(),
            deployments: store.deployments.clone(),
            stacks: store.stacks.clone(),
            broker: broker.clone(),
            sealing: keys.sealing.clone(),
            rights: rights.clone(),
            publisher: publisher.clone(),
        };
        let stacks = Stacks {
            tenant: tenant.clone(),
            stacks: store.stacks.clone(),
            data: store.data.clone(),
            configs: store.configs.clone(),
            deployments: store.deployments.clone(),
            servers: store.servers.clone(),
            broker: broker.clone(),
            events: events.clone(),
            rights,
            sealing: keys.sealing.clone(),
        };
        let servers = Servers {
            tenant: tenant.clone(),
            agent_nats_url: config.agent_nats_url(),
            records: store.servers.clone(),
            deployments: store.deployments.clone(),
            broker: broker.clone(),
            events: events.clone(),
            presence: presence.clone(),
            signers: signers.clone(),
            minter: Minter::new(tenant.clone(), users.clone(), &keys),
            users: users.clone(),
        };
        let answers = Answers {
            tenant,
            insecure_unsigned_answers: config.insecure_unsigned_answers,
            deployments: store.deployments.clone(),
            servers: store.servers.clone(),
            broker: broker.clone(),
            events: events.clone(),
            signers,
            timeouts,
            sealing: keys.sealing.clone(),
        };
        Self(Arc::new(Shared {
            config,
            store,
            broker,
            events,
            presence,
            webhooks,
            keys,
            accept,
            publisher,
            servers,
            answers,
            stacks,
            shutdown,
            tasks,
            users,
        }))
    }

    /// The timeout sweeper's handles: the watched deployments, their records and the
    /// event stream.
    pub fn sweeper(&self) -> Sweeper {
        Sweeper {
            tenant: self.config.tenant.clone(),
            timeouts: self.publisher.timeouts().clone(),
            deployments: self.store.deployments.clone(),
            events: self.events.clone(),
            every: self.config.timeout_sweep(),
        }
    }
}
