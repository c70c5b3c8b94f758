//! Stack operations submitted over HTTP (`POST /v1/stacks/{id}/operations`) and run by the
//! gateway's engine workers: the request body, the record a `GET` reads, and the message
//! the work queue carries.
//!
//! The body follows Heat's stack API: the template (text, or the document as JSON), the
//! files `get_file` reads (inlined by the client, as Heat's client does), environments,
//! parameters as values, and what the template's infrastructure resources stand for.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::ids::{ServerId, StackId, TenantId};
use crate::stack::{MappedResource, StackAction, StackStatus};

/// The work-queue stream of stack operations (in each tenant's account).
pub const OPERATIONS_STREAM: &str = "FLUE_OPS";
/// Subjects of the work queue: `flue.<tenant>.ops.<stack>` (beside the request and
/// response subjects, never overlapping them).
pub const OPERATIONS_SUBJECTS: &str = "flue.*.ops.*";
/// The durable pull consumer every engine worker of every gateway shares.
pub const OPERATIONS_CONSUMER: &str = "flue-engine";
/// The KV bucket holding operation records (`<stack>.<op>`) and each stack's active
/// operation (`<stack>`).
pub const OPERATIONS_BUCKET: &str = "flue_ops";

/// The subject an operation on `stack` of `tenant` is queued on.
pub fn operation_subject(tenant: &TenantId, stack: &StackId) -> String {
    format!("flue.{tenant}.ops.{stack}")
}

/// Which operation to run (Heat's stack actions, lowercase as on the CLI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// `flue stack create`.
    Create,
    /// `flue stack update`.
    Update,
    /// `flue stack delete`.
    Delete,
    /// `flue stack suspend`.
    Suspend,
    /// `flue stack resume`.
    Resume,
    /// `flue stack action`: an ad-hoc action on one resource (`resource`, `action`).
    Action,
    /// `flue stack converge`: re-applies `units` (those a check found drifted or missing)
    /// with what each last applied, dependencies first.
    Converge,
}

impl OperationKind {
    /// The stack action it runs.
    pub fn stack_action(self) -> StackAction {
        match self {
            Self::Create => StackAction::Create,
            Self::Update => StackAction::Update,
            Self::Delete => StackAction::Delete,
            Self::Suspend => StackAction::Suspend,
            Self::Resume => StackAction::Resume,
            Self::Action => StackAction::Action,
            Self::Converge => StackAction::Converge,
        }
    }

    /// True for the operations that take a template.
    pub fn takes_template(self) -> bool {
        matches!(self, Self::Create | Self::Update)
    }
}

impl fmt::Display for OperationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Create => "create",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::Suspend => "suspend",
            Self::Resume => "resume",
            Self::Action => "action",
            Self::Converge => "converge",
        })
    }
}

/// `POST /v1/stacks/{id}/operations`. Unknown fields are refused, so a misspelt option
/// never passes silently. Its `Debug` form names the parameters without their values
/// (hidden ones among them).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SubmitOperation {
    /// What to run.
    pub operation: OperationKind,
    /// For create and update: the template, as YAML text or as the document itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Value>,
    /// What `get_file` reads, by the path the template names.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// Environments (text or documents), merged in order, the later winning.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environments: Vec<Value>,
    /// Parameter values (strings, numbers, booleans, or JSON for `json` parameters); they
    /// win over the environments' `parameters`. Hidden ones are sealed before queuing.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, Value>,
    /// `--server RESOURCE=SERVER_ID`: the registered server an `OS::Nova::Server` is.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub servers: BTreeMap<String, ServerId>,
    /// `--attr`: what other infrastructure resources stand for (reference, attributes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mapped: BTreeMap<String, MappedResource>,
    /// For `action`: the deployment resource to run it on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// For `action`: the ad-hoc action's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// `--force`: take over from an unfinished operation of another kind.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
    /// For `converge`: the units to re-apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<String>,
    /// For create and update: the stack's converge policy (kept by the stack; an update
    /// without it keeps the one it had).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub converge: Option<crate::stack::ConvergePolicy>,
    /// For `converge`: only report the units whose inputs read outputs the converge
    /// changed (by default they are re-run with the new values, dependencies first).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_follow: bool,
}

impl fmt::Debug for SubmitOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubmitOperation")
            .field("operation", &self.operation)
            .field("template", &self.template.as_ref().map(|_| "…"))
            .field("files", &self.files.keys().collect::<Vec<_>>())
            .field("environments", &self.environments.len())
            .field("parameters", &self.parameters.keys().collect::<Vec<_>>())
            .field("servers", &self.servers)
            .field("mapped", &self.mapped)
            .field("resource", &self.resource)
            .field("action", &self.action)
            .field("force", &self.force)
            .field("units", &self.units)
            .field("converge", &self.converge)
            .field("no_follow", &self.no_follow)
            .finish()
    }
}

impl SubmitOperation {
    /// An operation with nothing but its kind (delete, suspend, resume).
    pub fn new(operation: OperationKind) -> Self {
        Self {
            operation,
            template: None,
            files: BTreeMap::new(),
            environments: Vec::new(),
            parameters: BTreeMap::new(),
            servers: BTreeMap::new(),
            mapped: BTreeMap::new(),
            resource: None,
            action: None,
            force: false,
            units: Vec::new(),
            converge: None,
            no_follow: false,
        }
    }

    /// A create or update of `template` (YAML text).
    pub fn with_template(operation: OperationKind, template: impl Into<String>) -> Self {
        Self {
            template: Some(Value::String(template.into())),
            ..Self::new(operation)
        }
    }
}

/// Where a submitted operation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OperationState {
    /// Waiting for a worker.
    Queued,
    /// A worker holds it (until its lease runs out, when another takes it over).
    Running,
    /// The stack operation completed.
    Succeeded,
    /// The stack operation failed, or could not run (`reason` says why).
    Failed,
}

impl OperationState {
    /// True once nothing will change it any more.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

impl fmt::Display for OperationState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        })
    }
}

/// A submitted operation, as `GET /v1/stacks/{id}/operations/{op}` reads it. Never holds
/// a parameter value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StackOperation {
    /// Its id (random).
    pub id: String,
    /// The stack.
    pub stack: StackId,
    /// The tenant.
    pub tenant: TenantId,
    /// What runs.
    pub operation: OperationKind,
    /// Why the gateway submitted it by itself (an automatic converge names the rebuilt
    /// server); absent for an operation a client submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// Where it stands.
    pub state: OperationState,
    /// The worker holding it (`host/pid/worker`), while running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// When the worker's lease runs out unless renewed (another worker then takes over).
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub lease_expires_at: Option<OffsetDateTime>,
    /// How many times a worker took it (more than one: a worker died or gave it back).
    #[serde(default)]
    pub attempts: u64,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The stack's status when the operation ended (absent after a delete that removed it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_status: Option<StackStatus>,
    /// When it was accepted.
    #[serde(with = "time::serde::rfc3339")]
    pub submitted_at: OffsetDateTime,
    /// When it ended.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub finished_at: Option<OffsetDateTime>,
    /// What the engine reported, as `flue stack …` prints it, the last
    /// [`MAX_PROGRESS_LINES`] lines (a worker that took over adds its own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub progress: Vec<String>,
    /// Lines dropped from the front of `progress` to keep the record small.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub progress_dropped: u64,
}

/// Most progress lines an operation record keeps.
pub const MAX_PROGRESS_LINES: usize = 2000;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl StackOperation {
    /// Appends `lines`, dropping the oldest past [`MAX_PROGRESS_LINES`].
    pub fn add_progress(&mut self, lines: impl IntoIterator<Item = String>) {
        self.progress.extend(lines);
        let extra = self.progress.len().saturating_sub(MAX_PROGRESS_LINES);
        if extra > 0 {
            self.progress.drain(..extra);
            self.progress_dropped += extra as u64;
        }
    }

    /// The progress lines after the first `seen` ever added (those dropped count).
    pub fn progress_after(&self, seen: u64) -> &[String] {
        let skip =
            usize::try_from(seen.saturating_sub(self.progress_dropped)).unwrap_or(usize::MAX);
        self.progress.get(skip..).unwrap_or_default()
    }

    /// How many progress lines were ever added.
    pub fn progress_total(&self) -> u64 {
        self.progress_dropped + self.progress.len() as u64
    }
}

/// `202 Accepted` of a submission: the operation as queued (`Location` names it too).
pub type Accepted = StackOperation;

/// What the work queue carries: the operation's id and its body, hidden parameter values
/// sealed to the gateways' key, the environments without their `parameters` section
/// (moved into `parameters`, hidden ones sealed there too).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueuedOperation {
    /// The operation's id.
    pub id: String,
    /// The stack.
    pub stack: StackId,
    /// The body, as sealed.
    pub body: SubmitOperation,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_with_an_unknown_field_is_refused() {
        let e = serde_json::from_str::<SubmitOperation>(r#"{"operation":"create","tempalte":"x"}"#)
            .expect_err("refused");
        assert!(e.to_string().contains("tempalte"), "{e}");
    }

    #[test]
    fn debug_output_names_parameters_without_their_values() {
        let mut body = SubmitOperation::new(OperationKind::Create);
        body.parameters
            .insert("password".into(), Value::from("s3cret-value"));
        let text = format!("{body:?}");
        assert!(
            text.contains("password") && !text.contains("s3cret-value"),
            "{text}"
        );
    }

    #[test]
    fn a_minimal_body_reads_back_unchanged() {
        let body = SubmitOperation::with_template(
            OperationKind::Create,
            "heat_template_version: 2018-08-31",
        );
        let text = serde_json::to_string(&body).expect("json");
        assert_eq!(
            text,
            r#"{"operation":"create","template":"heat_template_version: 2018-08-31"}"#
        );
        assert_eq!(
            serde_json::from_str::<SubmitOperation>(&text).expect("back"),
            body
        );
    }
}
