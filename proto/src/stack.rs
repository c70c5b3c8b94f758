//! Stacks: the state an engine keeps in the gateway while it runs a HOT-style template.
//!
//! The gateway stores a stack as one record with a revision and never changes
//! [`StackState`] (it only reads the operation and units to derive lifecycle events):
//! the engine owns its meaning and writes it back with
//! compare-and-set ([`PutStack::expected_revision`]), so two engine processes driving
//! the same stack can never overwrite each other's progress unnoticed.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ids::{ConfigId, DeploymentId, ServerId, StackId, TenantId};

/// A stack operation, as Heat names them; `ACTION` is an ad-hoc action run on a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StackAction {
    /// First creation.
    Create,
    /// A new template or new parameters.
    Update,
    /// Removal: delete hooks in reverse dependency order.
    Delete,
    /// Suspend hooks.
    Suspend,
    /// Resume hooks.
    Resume,
    /// An ad-hoc action on one resource.
    Action,
}

impl fmt::Display for StackAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
            Self::Suspend => "SUSPEND",
            Self::Resume => "RESUME",
            Self::Action => "ACTION",
        })
    }
}

/// Where an operation (or one unit of it) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OpStatus {
    /// Running, or interrupted and waiting to be resumed.
    InProgress,
    /// Done.
    Complete,
    /// Stopped by a failure.
    Failed,
}

impl fmt::Display for OpStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InProgress => "IN_PROGRESS",
            Self::Complete => "COMPLETE",
            Self::Failed => "FAILED",
        })
    }
}

/// A stack's status: `CREATE_COMPLETE`, `UPDATE_FAILED`, … plus why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackStatus {
    /// The last operation.
    pub action: StackAction,
    /// How it stands.
    pub status: OpStatus,
    /// Why it failed (the failing resource and its stderr), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl fmt::Display for StackStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.action, self.status)
    }
}

/// A stack as the gateway stores and returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stack {
    /// Stack id (its name).
    pub id: StackId,
    /// Tenant.
    pub tenant: TenantId,
    /// Revision of the record; pass it back as [`PutStack::expected_revision`].
    pub revision: u64,
    /// First stored at.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// Last stored at.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// Status of the last operation.
    pub status: StackStatus,
    /// The engine's state.
    pub state: StackState,
}

/// `PUT /v1/stacks/{id}`: store a stack's status and state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutStack {
    /// Absent: create the stack, refused (409) if it exists. Present: replace the
    /// stack only if its revision is still this one, else 409 `revision_mismatch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<u64>,
    /// Status of the current or last operation.
    pub status: StackStatus,
    /// The engine's state.
    pub state: StackState,
}

impl PutStack {
    /// Checks that the stack can be read back: `state` within
    /// [`crate::limits::MAX_STATE_DEPTH`].
    pub fn validate(&self) -> Result<(), crate::limits::LimitError> {
        // A state that does not serialise has nothing to be deep with.
        let Ok(state) = serde_json::to_value(&self.state) else {
            return Ok(());
        };
        crate::limits::check_depth_within(
            || "state".to_owned(),
            &state,
            crate::limits::MAX_STATE_DEPTH,
        )
    }
}

/// Everything the engine needs to resume, update or delete a stack. Never holds the
/// value of a hidden parameter or input.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StackState {
    /// Values of the parameters that are not hidden, as last applied.
    #[serde(default)]
    pub parameters: BTreeMap<String, serde_json::Value>,
    /// Names of hidden parameters (their values are never stored).
    #[serde(default)]
    pub hidden_parameters: Vec<String>,
    /// The operation running or last run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
    /// Deployment units by key: a `SoftwareDeployment` resource's name, or
    /// `<group>/<member>` for one member of a `SoftwareDeploymentGroup`.
    #[serde(default)]
    pub units: BTreeMap<String, Unit>,
    /// The template's outputs, resolved when the last create or update completed.
    #[serde(default)]
    pub outputs: BTreeMap<String, serde_json::Value>,
    /// Recent ad-hoc actions, newest last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<ActionRun>,
    /// What the template's infrastructure resources (`OS::Nova::Server`, Neutron ports,
    /// volumes, …, which Flue never creates) stand for, as given at create or update
    /// (`flue stack create --server NAME=ID --attr NAME.ATTR=VALUE`): kept for later
    /// operations unless given again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mapped: BTreeMap<String, MappedResource>,
}

/// What one infrastructure resource of a template stands for: never a secret, so
/// stored and shown as it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MappedResource {
    /// For an `OS::Nova::Server`: the registered server it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<ServerId>,
    /// For an external resource: what `get_resource` of it gives (its name otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Values of its attributes (`get_attr`), by attribute name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, serde_json::Value>,
}

/// One stack operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    /// Random id; every deployment the operation plans records it.
    pub id: String,
    /// Which operation.
    pub action: StackAction,
    /// Ad-hoc action name, for [`StackAction::Action`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Resource the ad-hoc action runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// Started at.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// Finished at.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    /// The engine process driving it (`host/pid/nonce`): only that one may write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// When its driver last wrote: a driver silent for longer than its lease is gone.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub seen_at: Option<OffsetDateTime>,
    /// What it was started with (a digest of the template and the visible parameters):
    /// a resume with other ones is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

/// One deployment unit: what runs one config on one server across the stack's life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unit {
    /// Template resource name.
    pub resource: String,
    /// Group member name, for a member of a deployment group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// Server it deploys to.
    pub server_id: ServerId,
    /// Lifecycle actions the deployment runs for (Heat's `actions` property, plus the
    /// actions its config has a dedicated hook for).
    #[serde(default)]
    pub actions: Vec<String>,
    /// Keys of the units it depended on when last applied (delete runs in reverse).
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// Last lifecycle deployment that completed: what an update compares with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<DeploymentId>,
    /// Config of `baseline`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_config: Option<ConfigId>,
    /// Last lifecycle deployment the gateway accepted, whatever became of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<DeploymentId>,
    /// Config of `last`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_config: Option<ConfigId>,
    /// A deployment the current operation planned for this unit. Recorded before it
    /// is created, so a resumed operation re-uses its ids instead of running twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Pending>,
    /// The deployment of the unit's last action, whatever it was (for display).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<DeploymentId>,
    /// The operation whose step for this unit finished last: a resumed operation skips
    /// the units it already finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_id: Option<String>,
    /// The unit's last action (`CREATE`, `UPDATE`, …; `INIT` before its first one).
    pub action: String,
    /// How that action stands.
    pub status: OpStatus,
    /// Why it failed, or why it was not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
}

/// A deployment planned by an operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// The operation that planned it.
    pub op_id: String,
    /// Action.
    pub action: String,
    /// Deployment id to create.
    pub deployment_id: DeploymentId,
    /// Config id to create (absent when an existing config is re-used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_id: Option<ConfigId>,
}

/// One run of an ad-hoc action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionRun {
    /// Operation id.
    pub op_id: String,
    /// Action name.
    pub name: String,
    /// Resource it ran on.
    pub resource: String,
    /// Outcome so far.
    pub status: OpStatus,
    /// Its deployments by unit key, as they finish.
    #[serde(default)]
    pub results: BTreeMap<String, ActionResult>,
}

/// What an ad-hoc action did on one unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionResult {
    /// The deployment that ran it.
    pub deployment_id: DeploymentId,
    /// Its outcome.
    pub status: OpStatus,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_reads_like_heat() {
        let s = StackStatus {
            action: StackAction::Create,
            status: OpStatus::InProgress,
            reason: None,
        };
        assert_eq!(s.to_string(), "CREATE_IN_PROGRESS");
        assert_eq!(
            serde_json::to_value(&s).expect("ser"),
            json!({"action": "CREATE", "status": "IN_PROGRESS"})
        );
    }

    #[test]
    fn put_stack_refuses_unknown_fields() {
        let ok = json!({"status": {"action": "CREATE", "status": "IN_PROGRESS"}, "state": {}});
        let put: PutStack = serde_json::from_value(ok).expect("valid");
        assert_eq!(put.expected_revision, None);
        assert_eq!(put.state, StackState::default());
        let bad = json!({"status": {"action": "CREATE", "status": "IN_PROGRESS"}, "state": {}, "revision": 1});
        assert!(serde_json::from_value::<PutStack>(bad).is_err());
    }
}
