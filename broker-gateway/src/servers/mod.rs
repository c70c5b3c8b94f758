//! Domain operations on servers, on the handles they need ([`Servers`]): registering a
//! server that connects over NATS, rotating its credentials and deregistering it
//! ([`register`]); registering a polling server and rotating its metadata URL
//! ([`polled`]).

pub mod polled;
pub mod register;

use flue_proto::event::ServerEventData;
use flue_proto::{CloudEvent, EventType, Server, ServerId, TenantId};

use crate::broker::{Broker, BrokerError};
use crate::credentials::{MintError, Minter};
use crate::events::Events;
use crate::natsauth::BrokerUsers;
use crate::presence::PresenceTracker;
use crate::responses::Signers;
use crate::store::{Store, StoreError};

/// What registering, rotating and deregistering servers takes; cheap to clone.
#[derive(Debug, Clone)]
pub struct Servers {
    /// The tenant whose servers these are.
    pub tenant: TenantId,
    /// The broker URL handed to agents at registration (`--agent-nats-url`).
    pub agent_nats_url: String,
    /// The server records.
    pub store: Store,
    /// The servers' request consumers.
    pub broker: Broker,
    /// Where `server.registered` / `server.deregistered` go.
    pub events: Events,
    /// Presence, told of registrations and deregistrations.
    pub presence: PresenceTracker,
    /// Servers' answer-signing keys, forgotten when they change.
    pub signers: Signers,
    /// Mints an agent's credentials.
    pub minter: Minter,
    /// Revokes an agent's broker user (`None` with `--insecure-dev-broker`).
    pub users: Option<BrokerUsers>,
}

/// Why a server operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// No such server is registered.
    #[error("server {:?} not found", .0.as_str())]
    NotFound(ServerId),
    /// The server is registered with the other transport.
    #[error("server {:?} is registered with another transport", .0.id.as_str())]
    OtherTransport(Box<Server>),
    /// The server still has deployments that are not finished.
    #[error(
        "server {:?} has {unfinished} QUEUED or IN_PROGRESS deployment{}; wait for {} to finish (or time out) first",
        id.as_str(),
        if *unfinished == 1 { "" } else { "s" },
        if *unfinished == 1 { "it" } else { "them" },
    )]
    Busy {
        /// The server.
        id: ServerId,
        /// How many of its deployments are QUEUED or IN_PROGRESS.
        unfinished: usize,
    },
    /// The broker did not take the revocation of the server's broker user.
    #[error(
        "the broker did not take the revocation of server {:?}'s credentials; retry later",
        .0.as_str()
    )]
    Revocation(ServerId),
    /// New credentials could not be minted.
    #[error(transparent)]
    Mint(#[from] MintError),
    /// The system's random generator failed (a polling server's secret).
    #[error("the system random generator failed")]
    Random,
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The broker failed (the request consumer).
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// `server.registered` or `server.deregistered` of one registration of `server`: the
/// id names its `created_at`, so a later registration of the same id is another fact.
pub fn server_event(server: &Server, ty: EventType) -> CloudEvent {
    let millis = server.created_at.unix_timestamp_nanos() / 1_000_000;
    let data = ServerEventData {
        server_id: server.id.clone(),
        name: server.name.clone(),
        agent_instance: None,
        reason: None,
        last_seen: None,
    };
    CloudEvent::new(
        ty,
        &server.tenant,
        format!("server:{}:{}:{millis}", server.id, ty.name()),
        format!("servers/{}", server.id),
        &data,
    )
    .server(&server.id)
}
