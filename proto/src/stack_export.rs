//! A stack taken out of Flue (`flue stack abandon`) and brought back (`flue stack adopt`):
//! its whole record, the configs and the deployments its units name, and its data space,
//! in one JSON document.
//!
//! Hidden values (hidden inputs' and outputs' values, hidden config defaults) stay
//! sealed in it, each in an *export envelope*: the value together with the tenant it
//! belongs to, sealed by the gateway to itself. Only a gateway holding the same sealing
//! key opens it, and it adopts it only into that tenant, so a record passed to another
//! tenant's admin yields nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::config::Config;
use crate::deployment::Deployment;
use crate::ids::{ConfigId, DeploymentId, TenantId};
use crate::stack::Stack;

/// The `format` of a [`StackExport`] this version writes and reads.
pub const STACK_EXPORT_FORMAT: &str = "flue.stack-export/1";

/// A stack's whole record, as `GET /v1/stacks/{id}/export` answers it and
/// `POST /v1/stacks/{id}/adopt` takes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StackExport {
    /// [`STACK_EXPORT_FORMAT`].
    pub format: String,
    /// The tenant it was exported from.
    pub tenant: TenantId,
    /// When it was exported.
    #[serde(with = "time::serde::rfc3339")]
    pub exported_at: OffsetDateTime,
    /// The stack: head and every unit.
    pub stack: Stack,
    /// The configs its units and deployments name, hidden defaults in export envelopes.
    #[serde(default)]
    pub configs: BTreeMap<ConfigId, Config>,
    /// The deployments its units name (baseline, last, current, pending, action
    /// results), hidden values in export envelopes.
    #[serde(default)]
    pub deployments: BTreeMap<DeploymentId, ExportedDeployment>,
    /// Its data space: key (inside the stack) → value, base64 (standard, padded).
    #[serde(default)]
    pub data: BTreeMap<String, String>,
}

/// One deployment of an exported stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ExportedDeployment {
    /// The deployment; the values named below are export envelopes.
    pub deployment: Deployment,
    /// Its hidden inputs.
    #[serde(default)]
    pub hidden_inputs: Vec<String>,
    /// Its hidden outputs.
    #[serde(default)]
    pub hidden_outputs: Vec<String>,
}

/// What the engine's `POST /v1/stacks/{id}/abandon` takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AbandonStack {
    /// Remove the stack only if it is still at this revision (the exported one).
    pub expected_revision: u64,
}

/// The plaintext of an export envelope: a hidden value and the tenant it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// The tenant whose value it is.
    pub tenant: TenantId,
    /// The value.
    pub value: serde_json::Value,
}
