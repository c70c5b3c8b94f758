//! Stacks: the state an engine keeps in the gateway while it runs a HOT-style template.
//!
//! The gateway stores a stack as a head (status, operation, parameters, outputs, …)
//! with a revision, and each of its units under a key of its own, and never changes
//! [`StackState`] (it only reads the operation and units to derive lifecycle events):
//! the engine owns its meaning and writes it back with compare-and-set
//! ([`PutStack::expected_revision`]), so two engine processes driving the same stack
//! can never overwrite each other's progress unnoticed. A write names only the units
//! it changes ([`PutStack::changed_units`]), so an operation on a group of N members
//! costs O(N) bytes, not O(N²).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ids::{ConfigId, DeploymentId, ServerId, StackId, TenantId};

/// What a stack does when one of its servers is rebuilt under the same id.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ConvergePolicy {
    /// Report it (`server.rebuilt`); `flue stack converge` re-applies by hand.
    #[default]
    Manual,
    /// Re-apply its units on that server at once, with a converge operation.
    Auto,
}

impl ConvergePolicy {
    /// True for the default, [`ConvergePolicy::Manual`].
    pub fn is_manual(&self) -> bool {
        *self == Self::Manual
    }
}

impl std::str::FromStr for ConvergePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "manual" => Ok(Self::Manual),
            "auto" => Ok(Self::Auto),
            other => Err(format!("{other:?} is not a converge policy (auto, manual)")),
        }
    }
}

/// A stack operation, as Heat names them; `ACTION` is an ad-hoc action run on a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// Re-applying the units a check found drifted or missing (`flue stack converge`).
    Converge,
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
            Self::Converge => "CONVERGE",
        })
    }
}

/// Where an operation (or one unit of it) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PutStack {
    /// Absent: create the stack, refused (409) if it exists. Present: replace the
    /// stack only if its revision is still this one, else 409 `revision_mismatch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<u64>,
    /// Status of the current or last operation.
    pub status: StackStatus,
    /// The engine's state. With [`PutStack::changed_units`], its `units` must be empty
    /// (the write changes only the units named there); without, `units` is the whole
    /// set and replaces the stored one (the form of engines before units were stored
    /// apart: it costs the gateway a read of every unit).
    pub state: StackState,
    /// The units this write changes, by key: a unit to store, or `null` for a unit that
    /// leaves the stack. The others stay as stored. The answer holds these units only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::changed_units))]
    pub changed_units: Option<BTreeMap<String, Option<Unit>>>,
}

/// Longest unit key, in bytes: a group member's key (`<group>/<member>`) is stored
/// under a key of its own, base64url-encoded ([`unit_token`]).
pub const MAX_UNIT_KEY: usize = 256;

/// Why a [`PutStack`] is refused.
#[derive(Debug, thiserror::Error)]
pub enum PutStackError {
    /// `state` nests too deeply.
    #[error(transparent)]
    Limit(#[from] crate::limits::LimitError),
    /// Units given both ways.
    #[error("state.units must be empty when changed_units is given")]
    UnitsTwice,
    /// A unit key that cannot be stored.
    #[error("{field}: a unit key is 1 to {MAX_UNIT_KEY} bytes, got {len}")]
    UnitKey {
        /// Where the key is in the body.
        field: String,
        /// Its length in bytes.
        len: usize,
    },
}

impl PutStack {
    /// Checks that the stack can be read back: `state` within
    /// [`crate::limits::MAX_STATE_DEPTH`], units given one way only, unit keys storable.
    pub fn validate(&self) -> Result<(), PutStackError> {
        let changed = self.changed_units.iter().flat_map(|c| c.keys());
        let keys = self
            .state
            .units
            .keys()
            .map(|k| ("state.units", k))
            .chain(changed.map(|k| ("changed_units", k)));
        for (field, key) in keys {
            if key.is_empty() || key.len() > MAX_UNIT_KEY {
                return Err(PutStackError::UnitKey {
                    field: field.to_owned(),
                    len: key.len(),
                });
            }
        }
        if self.changed_units.is_some() && !self.state.units.is_empty() {
            return Err(PutStackError::UnitsTwice);
        }
        // A state that does not serialise has nothing to be deep with.
        let Ok(state) = serde_json::to_value(&self.state) else {
            return Ok(());
        };
        crate::limits::check_depth_within(
            || "state".to_owned(),
            &state,
            crate::limits::MAX_STATE_DEPTH,
        )?;
        for (key, unit) in self.changed_units.iter().flatten() {
            let Ok(unit) = serde_json::to_value(unit) else {
                continue;
            };
            crate::limits::check_depth_within(
                || format!("changed_units.{key}"),
                &unit,
                crate::limits::MAX_STATE_DEPTH,
            )?;
        }
        Ok(())
    }
}

/// A unit key as one subject token (`[A-Za-z0-9_-]`, base64url without padding): unit
/// keys come from templates (`<group>/<member>`) and may hold any character, so each is
/// stored under its encoding, which [`unit_key_of`] reverses.
pub fn unit_token(key: &str) -> String {
    data_encoding::BASE64URL_NOPAD.encode(key.as_bytes())
}

/// The unit key a [`unit_token`] encodes; `None` for a token it did not make.
pub fn unit_key_of(token: &str) -> Option<String> {
    let bytes = data_encoding::BASE64URL_NOPAD
        .decode(token.as_bytes())
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// One unit of a stack, as `GET /v1/stacks/{id}/units` lists them (by key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StackUnit {
    /// The unit's key in [`StackState::units`].
    pub key: String,
    /// The unit.
    pub unit: Unit,
}

/// Everything the engine needs to resume, update or delete a stack. Never holds the
/// value of a hidden parameter or input.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// What happens when a server of the stack is rebuilt under the same id (a new agent
    /// with an empty ledger): `manual` (reported, nothing runs) or `auto` (its units are
    /// re-applied by a converge, dependencies first).
    #[serde(default, skip_serializing_if = "ConvergePolicy::is_manual")]
    pub converge: ConvergePolicy,
}

/// What one infrastructure resource of a template stands for: never a secret, so
/// stored and shown as it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// For a converge: the units it re-applies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<String>,
    /// For a converge: report the units whose inputs read outputs that changed instead
    /// of re-running them (`--no-follow`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_follow: bool,
}

/// One deployment unit: what runs one config on one server across the stack's life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// The inputs of `baseline` that came from other units' outputs (`get_attr`), by
    /// input name: which outputs of which deployments they read. What a converge follows
    /// and a check compares; never a value (hidden outputs are read by the gateway).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs_read: BTreeMap<String, InputSource>,
}

/// Where one input of a unit came from: outputs of other units of the stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputSource {
    /// The outputs read, in the order they were read.
    pub reads: Vec<OutputRead>,
    /// How the value was made of them.
    pub made: InputMade,
}

/// How an input's value was made of the outputs it read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum InputMade {
    /// The value is its one read's output, at `path` within it (`get_attr: [unit,
    /// output, path…]`): a converge can take the new value as it is.
    Output {
        /// Keys and indexes into the output.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        path: Vec<serde_json::Value>,
    },
    /// A hidden output handed on by reference (`input_refs`): only the gateway reads it.
    Hidden,
    /// An expression of the template made it: only an update can make it again.
    Expression,
}

/// One output of one unit's deployment, as an input read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OutputRead {
    /// The unit.
    pub unit: String,
    /// Its output (or `deploy_stdout`, …); absent: every output (a group member's
    /// whole view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The unit's deployment that was read (its baseline then).
    pub deployment_id: DeploymentId,
}

/// A deployment planned by an operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
        assert_eq!(put.changed_units, None);
        assert_eq!(put.state, StackState::default());
        let bad = json!({"status": {"action": "CREATE", "status": "IN_PROGRESS"}, "state": {}, "revision": 1});
        assert!(serde_json::from_value::<PutStack>(bad).is_err());
    }

    #[test]
    fn a_unit_key_of_any_characters_becomes_one_subject_token_and_back() {
        for key in ["web", "g/c1", "grp/0", "a.b*c>d e/ü"] {
            let token = unit_token(key);
            assert!(
                token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{token}"
            );
            assert_eq!(unit_key_of(&token).as_deref(), Some(key));
        }
        assert_eq!(unit_key_of("not base64!"), None);
    }

    #[test]
    fn a_write_names_its_units_one_way_with_storable_keys() {
        let status = json!({"action": "CREATE", "status": "IN_PROGRESS"});
        let unit =
            json!({"resource": "web", "server_id": "s1", "action": "INIT", "status": "COMPLETE"});
        let both: PutStack = serde_json::from_value(json!({
            "status": status, "state": {"units": {"web": unit}}, "changed_units": {"web": null}
        }))
        .expect("decodes");
        assert!(matches!(both.validate(), Err(PutStackError::UnitsTwice)));
        let long = "x".repeat(MAX_UNIT_KEY + 1);
        let too_long: PutStack = serde_json::from_value(json!({
            "status": status, "state": {}, "changed_units": {long: null}
        }))
        .expect("decodes");
        let err = too_long.validate().expect_err("refused");
        assert!(err.to_string().starts_with("changed_units: "), "{err}");
        let delta: PutStack = serde_json::from_value(json!({
            "status": status, "state": {}, "changed_units": {"g/c1": unit, "g/c2": null}
        }))
        .expect("decodes");
        delta.validate().expect("valid");
    }
}
