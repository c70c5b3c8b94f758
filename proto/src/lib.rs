//! Flue's wire contract: the only crate that defines what crosses the wire.
//!
//! - [`auth`]: roles, token claims and the token / ticket API bodies;
//! - [`ids`]: id types that can only hold a valid NATS subject token;
//! - [`subject`]: subject, stream and consumer names;
//! - [`config`], [`deployment`], [`server`], [`stack`]: the JSON bodies of the HTTP API and of
//!   the messages on the request and response queues;
//! - [`creds`]: NATS `.creds` files and the agent's credentials bundle;
//! - [`jsapi`]: NATS's own subjects (JetStream API, KV, claim updates) broker permissions name;
//! - [`digest`]: the digest tying an agent's answer to the exact request it answers;
//! - [`signing`]: signed requests (gateway) and answers (agent), and refusal codes;
//! - [`event`]: lifecycle events (CloudEvents), their subjects and filters, heartbeats;
//! - [`webhook`]: webhook subscriptions;
//! - [`nats_url`], [`nats_tls`]: broker URLs with their credentials, and client TLS;
//! - [`tenant`]: the tenant API's bodies;
//! - [`limits`]: nesting depth and `script` environment limits on what the API accepts;
//! - [`heat`]: input values as Heat hands them to hooks (declared types, text, environment);
//! - [`operation`]: stack operations submitted over HTTP and queued for engine workers;
//! - `retry` (feature `retry`): the one retry policy, jittered exponential backoff;
//! - `openapi` (feature `openapi`): the schemas of the types above that serde cannot describe.

pub mod auth;
pub mod config;
pub mod creds;
pub mod deployment;
pub mod digest;
pub mod event;
pub mod heat;
pub mod ids;
pub mod jsapi;
pub mod limits;
pub mod nats_jwt;
pub mod nats_tls;
pub mod nats_url;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod operation;
pub mod output;
pub mod poll;
#[cfg(feature = "retry")]
pub mod retry;
pub mod seal;
pub mod server;
pub mod signing;
pub mod stack;
pub mod stack_export;
pub mod subject;
pub mod tenant;
pub mod text;
pub mod upgrade;
pub mod webhook;

pub use config::{
    AdhocAction, CHECK_ACTION, Config, ConfigError, ConfigSpec, InputDecl, LIFECYCLE_ACTIONS,
    OutputDecl,
};
pub use deployment::{
    Action, AgentMessage, CreateDeployment, Deployment, DeploymentRequest, DeploymentResult,
    DeploymentStatus, NEXT_CURSOR_HEADER, OutputRef, PROTOCOL_VERSION, SKIPPED_RECORDS_HEADER,
};
pub use digest::RequestDigest;
pub use event::{
    AgentMetrics, BrokerConnection, CloudEvent, EventFilter, EventKind, EventType, Heartbeat,
    HeartbeatState, Presence, PresenceStatus,
};
pub use ids::{
    ConfigId, DeploymentId, IdError, MAX_ID_LEN, ServerId, StackId, TenantId, WebhookId,
};
pub use server::{
    AgentBootstrap, BrokerState, ErrorBody, ErrorDetail, HTTPS_REQUIRED, Health, HealthStatus,
    INSUFFICIENT_STORAGE, NotReady, NotReadyCode, RegisterServer, Registration, Server, ServerKeys,
};
pub use stack::{
    ActionResult, ActionRun, ConvergePolicy, InputMade, InputSource, MappedResource, OpStatus,
    Operation, OutputRead, Pending, PutStack, PutStackError, Stack, StackAction, StackState,
    StackStatus, StackUnit, Unit,
};
pub use tenant::{CreateTenant, Tenant};

/// A random subject-safe token (UUID v4, simple hex form).
pub(crate) fn random_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
