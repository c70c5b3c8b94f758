//! Flue's wire contract: the only crate that defines what crosses the wire.
//!
//! - [`ids`]: id types that can only hold a valid NATS subject token;
//! - [`subject`]: subject, stream and consumer names;
//! - [`config`], [`deployment`], [`server`]: the JSON bodies of the HTTP API and of
//!   the messages on the request and response queues.

pub mod config;
pub mod deployment;
pub mod ids;
pub mod server;
pub mod subject;

pub use config::{Config, ConfigError, ConfigSpec, InputDecl, OutputDecl};
pub use deployment::{
    Action, AgentMessage, CreateDeployment, Deployment, DeploymentRequest, DeploymentResult,
    DeploymentStatus, PROTOCOL_VERSION,
};
pub use ids::{ConfigId, DeploymentId, IdError, MAX_ID_LEN, ServerId, StackId, TenantId};
pub use server::{AgentBootstrap, ErrorBody, ErrorDetail, RegisterServer, Registration, Server};

/// A random subject-safe token (UUID v4, simple hex form).
pub(crate) fn random_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
