//! Servers and what an agent needs to start.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ids::{ServerId, TenantId};
use crate::poll::Transport;

/// What an engine sends to register a server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegisterServer {
    /// Server id (the agent's identity; a subject token).
    pub id: ServerId,
    /// Human name.
    #[serde(default)]
    pub name: String,
    /// How the server gets its deployments: `nats` (a flue-agent, the default) or `poll`
    /// (stock os-collect-config reading a secret metadata URL, see [`crate::poll`]).
    #[serde(default, skip_serializing_if = "Transport::is_default")]
    pub transport: Transport,
}

/// A registered server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Server {
    /// Server id.
    pub id: ServerId,
    /// Tenant.
    pub tenant: TenantId,
    /// Human name.
    #[serde(default)]
    pub name: String,
    /// Registered at.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// The public keys minted for its agent at registration (or the last credential
    /// rotation): its answers must be signed by `signing`; hidden inputs are sealed to
    /// `sealing`. Absent on records written before keys existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<ServerKeys>,
    /// The stacks it takes part in (had a deployment of), oldest first: its agent's NATS
    /// user may use these stacks' data-space keys. Grows with a server's first deployment
    /// in a stack (compare-and-set); public, like everything in the record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<crate::ids::StackId>,
    /// The last NATS user JWT minted for its agent with the rights of `stacks` (for the
    /// user key `keys.signing`). Every request of a deployment in a stack carries it, so
    /// a hook always runs with its own stack's rights. Public: the seed stays with the
    /// agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_jwt: Option<String>,
    /// Presence derived from its agent's heartbeats: filled in by API reads, never stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence: Option<crate::event::Presence>,
    /// How it gets its deployments (absent: `nats`).
    #[serde(default, skip_serializing_if = "Transport::is_default")]
    pub transport: Transport,
    /// A polling server's metadata URL secret, SHA-256, lower-case hex: stored so that the
    /// URL can be checked, taken out of every API read ([`Server::public`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_secret_sha256: Option<String>,
}

impl Server {
    /// The record as API reads show it: without the hash of its metadata URL's secret.
    pub fn public(mut self) -> Self {
        self.poll_secret_sha256 = None;
        self
    }
}

/// The public halves of a server's keys; the secret halves exist only in its agent's
/// credentials file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServerKeys {
    /// The agent's NATS user public key (`U...`), which also signs its answers.
    pub signing: String,
    /// The agent's curve25519 public key (`X...`): hidden inputs are sealed to it.
    pub sealing: String,
}

/// Everything an agent needs to start, returned by registration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentBootstrap {
    /// Broker URL(s) the agent should connect to, comma separated.
    pub nats_url: String,
    /// Tenant.
    pub tenant: TenantId,
    /// This server's id.
    pub server_id: ServerId,
    /// Request stream name.
    pub request_stream: String,
    /// The durable pull consumer the gateway created for this server.
    pub request_consumer: String,
    /// Subject the agent publishes responses on.
    pub response_subject: String,
    /// Inbox prefix the agent must use.
    pub inbox_prefix: String,
}

/// Answer to a registration: the server and its agent bootstrap (or, for a polling
/// server, its metadata URL).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Registration {
    /// The server record.
    pub server: Server,
    /// What its agent needs; absent for a polling server, which has no agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentBootstrap>,
    /// A polling server's metadata URL and os-collect-config snippet: present only in the
    /// answer that made the URL (first registration, credential rotation), never shown
    /// again. A secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll: Option<crate::poll::PollAccess>,
    /// The agent's credentials file ([`crate::creds::AgentCredentials`] text): present only
    /// in the answer that minted them (first registration, credential rotation), never
    /// stored by the gateway and never shown again. A secret: write it with mode 0600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<String>,
}

/// Error code of the `400` a gateway serving HTTPS answers to a plain-HTTP request.
pub const HTTPS_REQUIRED: &str = "https_required";

/// Body of every API error: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// One API error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    /// Stable machine-readable code, e.g. `not_found`, `invalid_id`, `body_too_large`.
    pub code: String,
    /// What was wrong, for a human.
    pub message: String,
}

/// Body of `GET /livez`, `/healthz` and `/readyz`: how the gateway and its broker link are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    /// `ok` when the endpoint answers 200, `unavailable` when it answers 503.
    pub status: HealthStatus,
    /// Whether the gateway's broker connection is up right now.
    pub broker: BrokerState,
    /// Long polls (`GET /v1/deployments/{id}?wait_secs=N`) waiting right now.
    pub long_polls: usize,
    /// Why `/readyz` answers 503; absent when it answers 200 and on `/livez`. Names what
    /// cannot take writes (a stream, the broker's store, its cluster), never a tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<NotReady>,
}

/// Why the gateway is not ready (`Health::reason`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NotReady {
    /// Stable machine-readable code.
    pub code: NotReadyCode,
    /// What cannot take writes and what would change it, for a human.
    pub message: String,
}

/// `NotReady::code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum NotReadyCode {
    /// A broker connection of the gateway is down (it reconnects by itself).
    BrokerDisconnected,
    /// The broker refuses writes for lack of JetStream storage (its `max_file_store`, or
    /// the account's storage limit): writes answer 507 `insufficient_storage` until
    /// there is room, then resume by themselves.
    StoreFull,
    /// The JetStream cluster has no metadata leader, or a state stream no leader (too few
    /// of its nodes are up for a quorum): writes answer 503 until they return.
    NoQuorum,
    /// The broker's JetStream does not answer (disabled, or not enabled for the account).
    JetstreamUnavailable,
    /// The broker holds a state stream broken by a failed write (its disk was full) and
    /// drops its writes until nats-server is restarted, even once there is room (nats-server's
    /// own health check says so): writes answer 503 until then.
    BrokerNeedsRestart,
}

/// The error code of a write the broker refused for lack of JetStream storage (507):
/// nothing was stored, the request was not accepted.
pub const INSUFFICIENT_STORAGE: &str = "insufficient_storage";

/// `Health::status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// Serving.
    Ok,
    /// Not ready: calls that need the broker answer 503.
    Unavailable,
}

/// `Health::broker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum BrokerState {
    /// Connected.
    Connected,
    /// Not connected (reconnecting in the background).
    Disconnected,
}
