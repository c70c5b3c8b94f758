//! Domain operations on deployments, each on the handles it needs rather than on the
//! whole `Service`:
//!
//! - [`accept`]: a `POST /v1/deployments` ([`Accept`]: store, broker limits, sealing key,
//!   stack rights, publisher);
//! - [`publish`]: publishing requests in each server's order, the background retry and
//!   recovery at start ([`Publisher`]: store, broker, events, signing and sealing keys,
//!   timeouts);
//! - [`inputs`]: a new deployment's input values (pure), and [`references`]: which
//!   deployments it may take them from.

pub mod accept;
pub mod inputs;
pub mod publish;
pub mod references;

use flue_proto::DeploymentId;
use flue_proto::limits::LimitError;

pub use accept::{Accept, Created};
pub use publish::{Publisher, PublisherHandles, republish};

use crate::broker::TooLarge;
use crate::rights::RightsError;
use crate::sealing::SealFailure;
use crate::store::StoreError;

/// Why a deployment was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// A value of the body is refused (the message names the field, never a value).
    #[error("{0}")]
    Invalid(String),
    /// A value is nested too deeply, or cannot be passed to its hook.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The record or the request would not fit in one broker message.
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
    /// The config, the server or a referenced deployment does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The id is taken by a different deployment.
    #[error("{0}")]
    Conflict(String),
    /// The record's write was not confirmed: it may or may not be stored.
    #[error("deployment {:?} may or may not have been recorded; retry with the same id", .0.as_str())]
    NotConfirmed(DeploymentId),
    /// A hidden value cannot be sealed or opened.
    #[error(transparent)]
    Sealing(#[from] SealFailure),
    /// The agent's JWT for the deployment's stack could not be had.
    #[error(transparent)]
    Rights(#[from] RightsError),
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}
