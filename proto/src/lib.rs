//! Flue's wire contract: the only crate that defines what crosses the wire.
//!
//! - [`ids`]: id types that can only hold a valid NATS subject token;
//! - [`subject`]: subject, stream and consumer names;
//! - [`config`], [`deployment`], [`server`], [`stack`]: the JSON bodies of the HTTP API and of
//!   the messages on the request and response queues;
//! - [`creds`]: NATS `.creds` files and the agent's credentials bundle;
//! - [`digest`]: the digest tying an agent's answer to the exact request it answers;
//! - [`event`]: lifecycle events (CloudEvents), their subjects and filters, heartbeats;
//! - [`webhook`]: webhook subscriptions;
//! - [`limits`]: nesting depth and `script` environment limits on what the API accepts.

pub mod config;
pub mod creds;
pub mod deployment;
pub mod digest;
pub mod event;
pub mod ids;
pub mod limits;
pub mod nats_url;
pub mod output;
pub mod seal;
pub mod server;
pub mod stack;
pub mod subject;
pub mod webhook;

pub use config::{
    AdhocAction, Config, ConfigError, ConfigSpec, InputDecl, LIFECYCLE_ACTIONS, OutputDecl,
};
pub use deployment::{
    Action, AgentMessage, CreateDeployment, Deployment, DeploymentRequest, DeploymentResult,
    DeploymentStatus, OutputRef, PROTOCOL_VERSION, SKIPPED_RECORDS_HEADER,
};
pub use digest::RequestDigest;
pub use event::{
    CloudEvent, EventFilter, EventKind, EventType, Heartbeat, HeartbeatState, Presence,
    PresenceStatus,
};
pub use ids::{
    ConfigId, DeploymentId, IdError, MAX_ID_LEN, ServerId, StackId, TenantId, WebhookId,
};
pub use server::{
    AgentBootstrap, BrokerState, ErrorBody, ErrorDetail, Health, HealthStatus, RegisterServer,
    Registration, Server, ServerKeys,
};
pub use stack::{
    ActionResult, ActionRun, OpStatus, Operation, Pending, PutStack, Stack, StackAction,
    StackState, StackStatus, Unit,
};

/// A random subject-safe token (UUID v4, simple hex form).
pub(crate) fn random_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
