//! Running stack operations: create, update, delete, suspend, resume and ad-hoc
//! actions, over the gateway's queues.
//!
//! The driver keeps every decision in the stack record (compare-and-set on its
//! revision) *before* acting on it: a deployment id is recorded as pending before the
//! deployment is created, and a unit is marked done by the operation before the next
//! step relies on it. A driver that dies therefore leaves a record from which running
//! the same command again continues: it re-uses the recorded ids (the gateway answers
//! an identical create idempotently) and never re-runs a finished unit.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use flue_proto::{
    Action, ActionResult, ActionRun, ConfigId, CreateDeployment, Deployment, DeploymentId,
    DeploymentStatus, OpStatus, Operation, Pending, PutStack, ServerId, Stack, StackAction,
    StackId, StackState, StackStatus, Unit,
};
use serde_json::Value;
use time::OffsetDateTime;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::functions;
use super::resolve::{self, RuntimeResolver};
use super::template::{Parameters, Template, TemplateError};
use super::units::{self, DesiredUnit, Plan};
use crate::{Client, ClientError};

/// How many ad-hoc action runs a stack remembers.
pub const MAX_ACTION_RUNS: usize = 20;
/// How much of a failed hook's stderr the stack's status reason quotes.
pub const STDERR_TAIL_BYTES: usize = 2000;
/// Added to a deployment's own timeout when waiting for it: the gateway fails it at
/// its timeout, so this is only a bound against a gateway that never answers.
const WAIT_SLACK: Duration = Duration::from_secs(120);
/// A unit's `action` before its first deployment.
pub const INIT: &str = "INIT";

/// Why an operation could not run (as opposed to running and ending FAILED).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The template or its parameters are wrong.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The gateway refused a request or could not be reached; the operation stays in
    /// progress and running the same command again resumes it.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The stack is not in a state that allows the operation.
    #[error("{0}")]
    Refused(String),
    /// Another operation took the stack over while this one ran.
    #[error("stack {stack}: this {action} was taken over by another operation ({by}); stopping")]
    Superseded {
        /// Stack.
        stack: StackId,
        /// This operation.
        action: StackAction,
        /// The operation that took over.
        by: String,
    },
}

/// What the driver reports while it works.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// An operation started, or an interrupted one is being resumed.
    OperationStarted {
        /// Which operation.
        action: StackAction,
        /// True when continuing an interrupted one.
        resumed: bool,
    },
    /// A unit's deployment changed status.
    Deployment {
        /// Unit key.
        unit: String,
        /// Action.
        action: String,
        /// Server.
        server: ServerId,
        /// The deployment.
        deployment: DeploymentId,
        /// Its new status.
        status: DeploymentStatus,
        /// Why it failed.
        reason: Option<String>,
    },
    /// A unit's config and inputs did not change: nothing ran.
    Unchanged {
        /// Unit key.
        unit: String,
    },
    /// A unit was finished by the interrupted run being resumed.
    AlreadyDone {
        /// Unit key.
        unit: String,
        /// How it ended.
        status: OpStatus,
    },
    /// A unit did not run.
    NotRun {
        /// Unit key.
        unit: String,
        /// Why.
        reason: String,
    },
    /// A unit left the stack.
    Removed {
        /// Unit key.
        unit: String,
    },
    /// A rolling group pauses before its next batch.
    Pausing {
        /// Group resource.
        group: String,
        /// Batch about to start.
        batch: usize,
        /// How long.
        pause: Duration,
    },
    /// The operation ended.
    OperationFinished {
        /// The stack's status.
        status: StackStatus,
    },
}

/// Receives [`Event`]s; called from several tasks.
pub type Reporter = Arc<dyn Fn(&Event) + Send + Sync>;

/// Options common to every operation.
#[derive(Clone)]
pub struct Options {
    /// Take over from an operation of another kind that is still marked in progress
    /// (its driver is gone).
    pub force: bool,
    /// Where progress goes.
    pub report: Reporter,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("force", &self.force)
            .finish_non_exhaustive()
    }
}

/// The template and parameters of a create or update.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// Parsed template.
    pub template: &'a Template,
    /// Parameters given on the command line, as text.
    pub given: &'a BTreeMap<String, String>,
}

/// `flue stack create`: creates the stack, or resumes its interrupted creation, or
/// retries a creation that failed (finished units are left alone unless changed).
pub async fn create(
    client: &Client,
    id: &StackId,
    source: Source<'_>,
    opts: &Options,
) -> Result<Stack, EngineError> {
    apply(client, id, source, StackAction::Create, opts).await
}

/// `flue stack update`: applies a new template or new parameters; only units whose
/// config or inputs changed run (UPDATE), new ones CREATE, removed ones DELETE.
pub async fn update(
    client: &Client,
    id: &StackId,
    source: Source<'_>,
    opts: &Options,
) -> Result<Stack, EngineError> {
    apply(client, id, source, StackAction::Update, opts).await
}

/// `flue stack delete`: delete hooks in reverse dependency order, then the record
/// (and the stack's data space). `Ok(None)` once the stack is gone.
pub async fn delete(
    client: &Client,
    id: &StackId,
    opts: &Options,
) -> Result<Option<Stack>, EngineError> {
    let mut d = Driver::begin(client, id, OpKind::Delete, opts).await?;
    d.adopt_dead_pending().await?;
    let state = &d.stack.state;
    let dependents = dependents(state);
    let mut steps = Vec::new();
    for (key, unit) in &state.units {
        let after = dependents.get(key).cloned().unwrap_or_default();
        steps.push(Step {
            key: key.clone(),
            after,
            batch: None,
            kind: reuse_or_drop(unit, Action::DELETE, true),
        });
    }
    let failures = d.run(steps, None).await?;
    if failures.is_empty() {
        d.client.delete_stack(id, Some(d.stack.revision)).await?;
        let status = StackStatus {
            action: StackAction::Delete,
            status: OpStatus::Complete,
            reason: None,
        };
        (d.opts.report)(&Event::OperationFinished { status });
        return Ok(None);
    }
    d.finish(failures).await.map(Some)
}

/// `flue stack suspend`: SUSPEND on every unit that runs for it, dependents first.
pub async fn suspend(client: &Client, id: &StackId, opts: &Options) -> Result<Stack, EngineError> {
    lifecycle(client, id, OpKind::Suspend, opts).await
}

/// `flue stack resume`: RESUME on every unit that runs for it, dependencies first.
pub async fn resume(client: &Client, id: &StackId, opts: &Options) -> Result<Stack, EngineError> {
    lifecycle(client, id, OpKind::Resume, opts).await
}

/// `flue stack action`: runs the ad-hoc action `name` declared by the config of
/// `resource`, on each of its units, each a recorded deployment with its own result.
pub async fn action(
    client: &Client,
    id: &StackId,
    resource: &str,
    name: &Action,
    opts: &Options,
) -> Result<Stack, EngineError> {
    let stack = client.get_stack(id).await.map_err(|e| not_found(e, id))?;
    let keys: Vec<String> = stack
        .state
        .units
        .iter()
        .filter(|(_, u)| u.resource == resource)
        .map(|(k, _)| k.clone())
        .collect();
    if keys.is_empty() {
        return Err(EngineError::Refused(format!(
            "stack {id} has no deployment resource {resource:?}"
        )));
    }
    for key in &keys {
        let unit = &stack.state.units[key];
        let Some(config_id) = unit.baseline_config.as_ref() else {
            return Err(EngineError::Refused(format!(
                "{key} has not completed a deployment yet; nothing to run {name} with"
            )));
        };
        let config = client.get_config(config_id).await?;
        if !config.allows(name) {
            let declared: Vec<&str> = config.actions.keys().map(String::as_str).collect();
            return Err(EngineError::Refused(format!(
                "the config of {resource} does not declare action {:?} (it declares: {})",
                name.as_str(),
                if declared.is_empty() {
                    "none".to_owned()
                } else {
                    declared.join(", ")
                }
            )));
        }
    }
    let kind = OpKind::Action {
        name: name.to_string(),
        resource: resource.to_owned(),
    };
    let mut d = Driver::begin(client, id, kind, opts).await?;
    let op = d.op_id.clone();
    let run = ActionRun {
        op_id: op.clone(),
        name: name.to_string(),
        resource: resource.to_owned(),
        status: OpStatus::InProgress,
        results: BTreeMap::new(),
    };
    d.save(|s, _| {
        if !s.actions.iter().any(|a| a.op_id == op) {
            s.actions.push(run.clone());
            let extra = s.actions.len().saturating_sub(MAX_ACTION_RUNS);
            s.actions.drain(..extra);
        }
    })
    .await?;
    let steps = keys
        .iter()
        .map(|key| Step {
            key: key.clone(),
            after: BTreeSet::new(),
            batch: None,
            kind: reuse_or_drop(&d.stack.state.units[key], name.as_str(), false),
        })
        .collect();
    let failures = d.run(steps, None).await?;
    let status = if failures.is_empty() {
        OpStatus::Complete
    } else {
        OpStatus::Failed
    };
    d.save(|s, _| {
        if let Some(run) = s.actions.iter_mut().find(|a| a.op_id == op) {
            run.status = status;
        }
    })
    .await?;
    d.finish(failures).await
}

async fn lifecycle(
    client: &Client,
    id: &StackId,
    kind: OpKind,
    opts: &Options,
) -> Result<Stack, EngineError> {
    let action = kind.deployment_action().to_owned();
    let action = action.as_str();
    let reverse = matches!(kind, OpKind::Suspend);
    let mut d = Driver::begin(client, id, kind, opts).await?;
    let state = &d.stack.state;
    let dependents = dependents(state);
    let steps = state
        .units
        .iter()
        .map(|(key, unit)| Step {
            key: key.clone(),
            after: if reverse {
                dependents.get(key).cloned().unwrap_or_default()
            } else {
                unit.depends_on
                    .iter()
                    .filter(|k| state.units.contains_key(*k))
                    .cloned()
                    .collect()
            },
            batch: None,
            kind: if unit.actions.iter().any(|a| a == action) && unit.baseline.is_some() {
                reuse_or_drop(unit, action, false)
            } else {
                StepKind::Skip
            },
        })
        .collect();
    let failures = d.run(steps, None).await?;
    d.finish(failures).await
}

/// Create and update: one algorithm, starting from whatever the stack holds.
async fn apply(
    client: &Client,
    id: &StackId,
    source: Source<'_>,
    action: StackAction,
    opts: &Options,
) -> Result<Stack, EngineError> {
    let template = source.template;
    // Non-hidden parameters of the last run stand unless given again (Heat's --existing).
    let mut given = source.given.clone();
    let previous = match client.get_stack(id).await {
        Ok(s) => Some(s),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    if action == StackAction::Update && previous.is_none() {
        return Err(EngineError::Refused(format!(
            "stack {id} does not exist; create it with `flue stack create`"
        )));
    }
    if let Some(prev) = &previous {
        for (name, value) in &prev.state.parameters {
            if template.parameters.contains_key(name) && !given.contains_key(name) {
                given.insert(name.clone(), param_text(value));
            }
        }
    }
    let params = template.bind_parameters(&given).map_err(|e| {
        match previous.as_ref().and_then(|p| {
            p.state
                .hidden_parameters
                .iter()
                .find(|h| e.path.ends_with(&format!(".{h}")))
        }) {
            Some(h) => TemplateError {
                path: e.path,
                message: format!(
                    "hidden parameter {h:?} is never stored; pass it again with -P {h}=…"
                ),
            },
            None => e,
        }
    })?;
    let creating = action == StackAction::Create
        && previous
            .as_ref()
            .is_none_or(|p| p.state.units.values().all(|u| u.baseline.is_none()));
    let plan = units::expand(template, &params, creating)?;
    check_servers(client, &plan).await?;

    let kind = match action {
        StackAction::Create => OpKind::Create,
        _ => OpKind::Update,
    };
    let mut d = Driver::begin(client, id, kind, opts).await?;
    let op = d.op_id.clone();
    let visible: BTreeMap<String, Value> = params
        .values
        .iter()
        .filter(|(k, _)| !params.hidden.contains(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let hidden: Vec<String> = params.hidden.iter().cloned().collect();
    d.save(|s, _| {
        s.parameters = visible.clone();
        s.hidden_parameters = hidden.clone();
        for (key, want) in &plan.units {
            match s.units.get(key) {
                // Moved to another server: the old one is retired (DELETE at the end)
                // and the unit starts afresh on the new server.
                Some(old) if old.server_id != want.server_id && old.op_id.as_ref() != Some(&op) => {
                    let old = s.units.remove(key).expect("present");
                    s.units.insert(format!("{key}@{}", old.server_id), old);
                    s.units.insert(key.clone(), new_unit(want));
                }
                Some(_) => {}
                None => {
                    s.units.insert(key.clone(), new_unit(want));
                }
            }
            let unit = s.units.get_mut(key).expect("present");
            unit.actions = want.actions.clone();
            unit.depends_on = want.depends_on.iter().cloned().collect();
        }
    })
    .await?;

    let state = &d.stack.state;
    let mut steps = Vec::new();
    for (key, want) in &plan.units {
        let unit = &state.units[key];
        let kind = if unit.baseline.is_some() {
            if want.actions.iter().any(|a| a == Action::UPDATE) {
                StepKind::Apply {
                    action: Action::UPDATE,
                    compare_with: unit.baseline.clone(),
                }
            } else {
                StepKind::Skip
            }
        } else if want.actions.iter().any(|a| a == Action::CREATE) {
            StepKind::Apply {
                action: Action::CREATE,
                compare_with: None,
            }
        } else {
            StepKind::Skip
        };
        steps.push(Step {
            key: key.clone(),
            after: want.depends_on.clone(),
            batch: want
                .member
                .as_ref()
                .and(want.batch)
                .map(|b| (want.resource.clone(), b)),
            kind,
        });
    }
    // Units the template no longer has: DELETE once everything else is done, in
    // reverse dependency order.
    let applied: BTreeSet<String> = plan.units.keys().cloned().collect();
    let dependents = dependents(state);
    for (key, unit) in &state.units {
        if applied.contains(key) {
            continue;
        }
        let mut after = applied.clone();
        after.extend(
            dependents
                .get(key)
                .into_iter()
                .flatten()
                .filter(|k| !applied.contains(*k))
                .cloned(),
        );
        steps.push(Step {
            key: key.clone(),
            after,
            batch: None,
            kind: reuse_or_drop(unit, Action::DELETE, true),
        });
    }
    let ctx = ApplyContext {
        template,
        params: &params,
        plan: &plan,
    };
    let failures = d.run(steps, Some(&ctx)).await?;
    if failures.is_empty() {
        let outputs = d.outputs(&ctx).await?;
        d.save(|s, _| s.outputs = outputs.clone()).await?;
    }
    d.finish(failures).await
}

fn param_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    }
}

fn new_unit(want: &DesiredUnit) -> Unit {
    Unit {
        resource: want.resource.clone(),
        member: want.member.clone(),
        server_id: want.server_id.clone(),
        actions: want.actions.clone(),
        depends_on: want.depends_on.iter().cloned().collect(),
        baseline: None,
        baseline_config: None,
        last: None,
        last_config: None,
        pending: None,
        op_id: None,
        action: INIT.to_owned(),
        status: OpStatus::Complete,
        status_reason: None,
    }
}

/// Every server the plan deploys to must be registered before anything runs.
async fn check_servers(client: &Client, plan: &Plan) -> Result<(), EngineError> {
    let servers: BTreeMap<&ServerId, &str> = plan
        .units
        .values()
        .map(|u| (&u.server_id, u.key.as_str()))
        .collect();
    for (server, unit) in servers {
        match client.get_server(server).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {
                return Err(EngineError::Refused(format!(
                    "{unit}: server {:?} is not registered (flue server register {server})",
                    server.as_str()
                )));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// For each unit, the units that depend on it.
fn dependents(state: &StackState) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (key, unit) in &state.units {
        for dep in &unit.depends_on {
            if state.units.contains_key(dep) {
                out.entry(dep.clone()).or_default().insert(key.clone());
            }
        }
    }
    out
}

/// A step re-running a unit's recorded config and inputs with `action`. For a
/// `lifecycle` DELETE, a unit that never reached an agent, or does not run DELETE, is
/// dropped without running anything.
fn reuse_or_drop(unit: &Unit, action: &str, removal: bool) -> StepKind {
    let (deployment, config) = if removal {
        (unit.last.as_ref(), unit.last_config.as_ref())
    } else {
        (unit.baseline.as_ref(), unit.baseline_config.as_ref())
    };
    match (deployment, config) {
        (Some(d), Some(c)) if !removal || unit.actions.iter().any(|a| a == action) => {
            StepKind::Reuse {
                action: action.to_owned(),
                config: c.clone(),
                inputs_from: d.clone(),
                removal,
            }
        }
        _ if removal => StepKind::Drop,
        _ => StepKind::Skip,
    }
}

/// Which operation a driver runs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OpKind {
    Create,
    Update,
    Delete,
    Suspend,
    Resume,
    Action { name: String, resource: String },
}

impl OpKind {
    fn stack_action(&self) -> StackAction {
        match self {
            Self::Create => StackAction::Create,
            Self::Update => StackAction::Update,
            Self::Delete => StackAction::Delete,
            Self::Suspend => StackAction::Suspend,
            Self::Resume => StackAction::Resume,
            Self::Action { .. } => StackAction::Action,
        }
    }

    fn deployment_action(&self) -> &str {
        match self {
            Self::Create => Action::CREATE,
            Self::Update => Action::UPDATE,
            Self::Delete => Action::DELETE,
            Self::Suspend => Action::SUSPEND,
            Self::Resume => Action::RESUME,
            Self::Action { name, .. } => name,
        }
    }

    fn command(&self) -> String {
        match self {
            Self::Action { name, resource } => format!("action {resource} {name}"),
            other => other.stack_action().to_string().to_lowercase(),
        }
    }

    fn matches(&self, op: &Operation) -> bool {
        op.action == self.stack_action()
            && match self {
                Self::Action { name, resource } => {
                    op.name.as_deref() == Some(name) && op.resource.as_deref() == Some(resource)
                }
                _ => true,
            }
    }
}

/// What one step does.
#[derive(Debug, Clone, PartialEq)]
enum StepKind {
    /// Resolve the template's config and inputs for the unit and deploy them.
    Apply {
        action: &'static str,
        /// The unit's completed deployment: nothing runs when nothing changed.
        compare_with: Option<DeploymentId>,
    },
    /// Deploy the unit's recorded config with its recorded inputs, for another action.
    Reuse {
        action: String,
        config: ConfigId,
        inputs_from: DeploymentId,
        /// The unit leaves the stack once this succeeds.
        removal: bool,
    },
    /// Leave the stack without running anything.
    Drop,
    /// Nothing to do.
    Skip,
}

#[derive(Debug, Clone)]
struct Step {
    key: String,
    after: BTreeSet<String>,
    batch: Option<(String, units::Batch)>,
    kind: StepKind,
}

struct ApplyContext<'a> {
    template: &'a Template,
    params: &'a Parameters,
    plan: &'a Plan,
}

/// How a step's deployment ended.
#[derive(Debug)]
enum Outcome {
    Unchanged,
    Finished(Box<Deployment>),
}

struct Driver<'c> {
    client: &'c Client,
    id: StackId,
    kind: OpKind,
    op_id: String,
    stack: Stack,
    opts: Options,
    deployments: HashMap<DeploymentId, Deployment>,
}

impl<'c> Driver<'c> {
    /// Starts `kind` on the stack, or resumes it when the stack shows it in progress.
    async fn begin(
        client: &'c Client,
        id: &StackId,
        kind: OpKind,
        opts: &Options,
    ) -> Result<Driver<'c>, EngineError> {
        let action = kind.stack_action();
        let operation = |name: Option<String>, resource: Option<String>| Operation {
            id: uuid_like(),
            action,
            name,
            resource,
            started_at: OffsetDateTime::now_utc(),
            finished_at: None,
        };
        let (name, resource) = match &kind {
            OpKind::Action { name, resource } => (Some(name.clone()), Some(resource.clone())),
            _ => (None, None),
        };
        let in_progress = StackStatus {
            action,
            status: OpStatus::InProgress,
            reason: None,
        };
        loop {
            let existing = match client.get_stack(id).await {
                Ok(s) => Some(s),
                Err(e) if e.is_not_found() => None,
                Err(e) => return Err(e.into()),
            };
            let Some(stack) = existing else {
                if kind != OpKind::Create {
                    return Err(EngineError::Refused(format!("stack {id} does not exist")));
                }
                let op = operation(None, None);
                let put = PutStack {
                    expected_revision: None,
                    status: in_progress.clone(),
                    state: StackState {
                        operation: Some(op.clone()),
                        ..StackState::default()
                    },
                };
                match client.put_stack(id, &put).await {
                    Ok(stack) => return Ok(Self::new(client, id, kind, op.id, stack, opts, false)),
                    // Someone else created it meanwhile: look again.
                    Err(e) if e.status() == Some(409) => continue,
                    Err(e) => return Err(e.into()),
                }
            };
            let current = stack.state.operation.as_ref();
            if stack.status.status == OpStatus::InProgress {
                if let Some(op) = current.filter(|op| kind.matches(op)) {
                    let op_id = op.id.clone();
                    return Ok(Self::new(client, id, kind, op_id, stack, opts, true));
                }
                if !opts.force {
                    let started = current
                        .map(|op| format!(" (started {})", rfc3339(op.started_at)))
                        .unwrap_or_default();
                    let what = current.map_or_else(
                        || stack.status.action.to_string().to_lowercase(),
                        |op| {
                            OpKind::from_operation(op).map_or_else(
                                || op.action.to_string().to_lowercase(),
                                |k| k.command(),
                            )
                        },
                    );
                    return Err(EngineError::Refused(format!(
                        "stack {id} has a {} in progress{started}; run `flue stack {what}` again to resume it, or pass --force if its driver is gone",
                        stack.status.action
                    )));
                }
            } else if kind == OpKind::Create
                && !(stack.status.action == StackAction::Create
                    && stack.status.status == OpStatus::Failed)
            {
                return Err(EngineError::Refused(format!(
                    "stack {id} already exists ({}); use `flue stack update`",
                    stack.status
                )));
            }
            let op = operation(name.clone(), resource.clone());
            let mut state = stack.state.clone();
            state.operation = Some(op.clone());
            let put = PutStack {
                expected_revision: Some(stack.revision),
                status: in_progress.clone(),
                state,
            };
            match client.put_stack(id, &put).await {
                Ok(stack) => return Ok(Self::new(client, id, kind, op.id, stack, opts, false)),
                Err(e) if e.status() == Some(409) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn new(
        client: &'c Client,
        id: &StackId,
        kind: OpKind,
        op_id: String,
        stack: Stack,
        opts: &Options,
        resumed: bool,
    ) -> Self {
        (opts.report)(&Event::OperationStarted {
            action: kind.stack_action(),
            resumed,
        });
        Driver {
            client,
            id: id.clone(),
            kind,
            op_id,
            stack,
            opts: opts.clone(),
            deployments: HashMap::new(),
        }
    }

    /// Applies `change` to the stored state with compare-and-set, re-reading and
    /// re-applying it when another writer got there first. `change` must give the
    /// same result when applied to a state it was already applied to.
    async fn save(
        &mut self,
        change: impl Fn(&mut StackState, &mut StackStatus),
    ) -> Result<(), EngineError> {
        loop {
            let mut state = self.stack.state.clone();
            let mut status = self.stack.status.clone();
            change(&mut state, &mut status);
            let put = PutStack {
                expected_revision: Some(self.stack.revision),
                status,
                state,
            };
            match self.client.put_stack(&self.id, &put).await {
                Ok(stack) => {
                    self.stack = stack;
                    return Ok(());
                }
                Err(e) if e.status() == Some(409) => {
                    let fresh = self.client.get_stack(&self.id).await?;
                    let op = fresh.state.operation.as_ref().map(|o| o.id.as_str());
                    if op != Some(self.op_id.as_str()) {
                        return Err(EngineError::Superseded {
                            stack: self.id.clone(),
                            action: self.kind.stack_action(),
                            by: op.unwrap_or("none").to_owned(),
                        });
                    }
                    self.stack = fresh;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// A deployment planned by an operation that was taken over may exist: if it does,
    /// it is the unit's last deployment (a DELETE queues behind it on its server).
    async fn adopt_dead_pending(&mut self) -> Result<(), EngineError> {
        let mut adopted = Vec::new();
        for (key, unit) in &self.stack.state.units {
            let Some(p) = unit.pending.as_ref().filter(|p| p.op_id != self.op_id) else {
                continue;
            };
            match self.client.get_deployment(&p.deployment_id).await {
                Ok(d) => adopted.push((key.clone(), Some((d.id, d.config_id)))),
                Err(e) if e.is_not_found() => adopted.push((key.clone(), None)),
                Err(e) => return Err(e.into()),
            }
        }
        if adopted.is_empty() {
            return Ok(());
        }
        self.save(|s, _| {
            for (key, found) in &adopted {
                if let Some(unit) = s.units.get_mut(key) {
                    unit.pending = None;
                    if let Some((d, c)) = found {
                        unit.last = Some(d.clone());
                        unit.last_config = Some(c.clone());
                    }
                }
            }
        })
        .await
    }

    /// Runs `steps` in dependency order (and rolling batches), independent ones in
    /// parallel. Returns the failures, each `(unit, reason)`; a failed unit's
    /// dependents do not run, independent branches finish.
    async fn run(
        &mut self,
        steps: Vec<Step>,
        ctx: Option<&ApplyContext<'_>>,
    ) -> Result<Vec<(String, String)>, EngineError> {
        let mut waiting: BTreeMap<String, Step> =
            steps.into_iter().map(|s| (s.key.clone(), s)).collect();
        let mut ok: BTreeSet<String> = BTreeSet::new();
        let mut bad: BTreeSet<String> = BTreeSet::new();
        let mut failures = Vec::new();
        let mut running: JoinSet<(String, Result<Outcome, ClientError>)> = JoinSet::new();
        let mut running_steps: BTreeMap<String, Step> = BTreeMap::new();
        // Per group: batch index -> (steps left, ran anything, finished at).
        let mut batches: BTreeMap<String, BTreeMap<usize, BatchState>> = BTreeMap::new();
        for step in waiting.values() {
            if let Some((group, b)) = &step.batch {
                let e = batches
                    .entry(group.clone())
                    .or_default()
                    .entry(b.index)
                    .or_default();
                e.left += 1;
            }
        }
        // Units the interrupted run already finished.
        let state = &self.stack.state;
        let run = state.actions.iter().find(|a| a.op_id == self.op_id);
        let done_before: Vec<(String, OpStatus)> = waiting
            .keys()
            .filter_map(|k| {
                let u = state.units.get(k)?;
                if u.op_id.as_deref() != Some(&self.op_id) || u.pending.is_some() {
                    return None;
                }
                let status = match run {
                    Some(run) => run.results.get(k).map_or(OpStatus::Failed, |r| r.status),
                    None => u.status,
                };
                Some((k.clone(), status))
            })
            .collect();
        for (key, status) in done_before {
            let step = waiting.remove(&key).expect("present");
            (self.opts.report)(&Event::AlreadyDone {
                unit: key.clone(),
                status,
            });
            if status == OpStatus::Failed {
                let reason = self.stack.state.units[&key]
                    .status_reason
                    .clone()
                    .unwrap_or_default();
                failures.push((key.clone(), reason));
                bad.insert(key);
            } else {
                finish_batch(&mut batches, &step, false);
                ok.insert(key);
            }
        }

        loop {
            // Steps whose dependencies failed never run.
            let blocked: Vec<(String, String)> = waiting
                .iter()
                .filter_map(|(k, s)| {
                    s.after
                        .iter()
                        .find(|a| bad.contains(*a))
                        .map(|a| (k.clone(), a.clone()))
                })
                .collect();
            for (key, cause) in blocked {
                waiting.remove(&key);
                let reason = format!("not run: depends on {cause}, which failed");
                (self.opts.report)(&Event::NotRun {
                    unit: key.clone(),
                    reason: reason.clone(),
                });
                self.save(|s, _| {
                    if let Some(u) = s.units.get_mut(&key) {
                        u.status_reason = Some(reason.clone());
                    }
                })
                .await?;
                bad.insert(key);
            }

            let now = Instant::now();
            let mut wake: Option<Instant> = None;
            let mut pausing: Vec<(String, usize, Duration)> = Vec::new();
            let ready: Vec<String> = waiting
                .iter()
                .filter(|(_, s)| {
                    s.after
                        .iter()
                        .all(|a| ok.contains(a) || !self.known(a, &waiting, &running_steps))
                })
                .filter(|(_, s)| match &s.batch {
                    None => true,
                    Some((group, b)) => match batch_gate(&batches[group], b.index, b.pause) {
                        Gate::Open => true,
                        Gate::Closed => false,
                        Gate::At(t) if t <= now => true,
                        Gate::At(t) => {
                            wake = Some(wake.map_or(t, |w| w.min(t)));
                            pausing.push((group.clone(), b.index, b.pause));
                            false
                        }
                    },
                })
                .map(|(k, _)| k.clone())
                .collect();
            for (group, batch, pause) in pausing {
                if let Some(state) = batches.get_mut(&group).and_then(|g| g.get_mut(&batch))
                    && !state.announced
                {
                    state.announced = true;
                    (self.opts.report)(&Event::Pausing {
                        group,
                        batch,
                        pause,
                    });
                }
            }
            for key in ready {
                let step = waiting.remove(&key).expect("present");
                match self.start(&step, ctx, &mut running).await {
                    Ok(true) => {
                        running_steps.insert(key, step);
                    }
                    Ok(false) => {
                        finish_batch(&mut batches, &step, false);
                        ok.insert(key);
                    }
                    Err(StartError::Engine(e)) => return Err(e),
                    Err(StartError::Failed(reason)) => {
                        self.record_failure(&key, &reason).await?;
                        failures.push((key.clone(), reason));
                        finish_batch(&mut batches, &step, true);
                        bad.insert(key);
                    }
                }
            }
            if running.is_empty() {
                match wake {
                    Some(t) => {
                        tokio::time::sleep_until(t).await;
                        continue;
                    }
                    None if waiting.is_empty() => break,
                    // Re-check: a step may have become ready through a skipped one.
                    None if waiting.values().any(|s| {
                        s.after
                            .iter()
                            .all(|a| ok.contains(a) || !self.known(a, &waiting, &running_steps))
                    }) =>
                    {
                        continue;
                    }
                    None => {
                        // Unreachable with an acyclic plan; never spin.
                        for key in waiting.keys() {
                            failures.push((key.clone(), "not run: unmet dependencies".into()));
                        }
                        break;
                    }
                }
            }
            let joined = match wake {
                Some(t) => tokio::select! {
                    j = running.join_next() => j,
                    _ = tokio::time::sleep_until(t) => continue,
                },
                None => running.join_next().await,
            };
            let Some(joined) = joined else { continue };
            let (key, result) = joined.map_err(|e| {
                EngineError::Refused(format!("a deployment task failed unexpectedly: {e}"))
            })?;
            let step = running_steps.remove(&key).expect("running step");
            let outcome = result?;
            match self.finished(&step, outcome).await? {
                None => {
                    finish_batch(&mut batches, &step, true);
                    ok.insert(key);
                }
                Some(reason) => {
                    failures.push((key.clone(), reason));
                    finish_batch(&mut batches, &step, true);
                    bad.insert(key);
                }
            }
        }
        Ok(failures)
    }

    /// True when `key` is a step of this run (a dependency outside it is satisfied).
    fn known(
        &self,
        key: &str,
        waiting: &BTreeMap<String, Step>,
        running: &BTreeMap<String, Step>,
    ) -> bool {
        waiting.contains_key(key) || running.contains_key(key)
    }

    /// Starts one step: `Ok(true)` when a deployment task now runs, `Ok(false)` when
    /// the step needed no deployment.
    async fn start(
        &mut self,
        step: &Step,
        ctx: Option<&ApplyContext<'_>>,
        running: &mut JoinSet<(String, Result<Outcome, ClientError>)>,
    ) -> Result<bool, StartError> {
        let key = step.key.clone();
        let (action, config_spec, body, compare_with) = match &step.kind {
            StepKind::Skip => return Ok(false),
            StepKind::Drop => {
                self.save(|s, _| {
                    s.units.remove(&key);
                })
                .await?;
                (self.opts.report)(&Event::Removed { unit: key });
                return Ok(false);
            }
            StepKind::Apply {
                action,
                compare_with,
            } => {
                let ctx = ctx.expect("apply steps come with a template");
                let want = &ctx.plan.units[&key];
                self.fetch_completed(&want.depends_on).await?;
                let resolver = RuntimeResolver {
                    template: ctx.template,
                    params: ctx.params,
                    plan: ctx.plan,
                    state: &self.stack.state,
                    deployments: &self.deployments,
                };
                let resolved = resolve::unit_deployment(&resolver, want)
                    .map_err(|e| StartError::Failed(e.to_string()))?;
                let pending = self.plan_pending(&key, action, true).await?;
                let mut spec = resolved.spec;
                spec.id = pending.config_id.clone();
                let body = CreateDeployment {
                    id: Some(pending.deployment_id.clone()),
                    config_id: pending.config_id.clone().expect("apply plans a config"),
                    server_id: want.server_id.clone(),
                    action: Action::new(*action).expect("lifecycle action"),
                    input_values: resolved.input_values,
                    name: Some(resolved.name),
                    timeout_secs: resolved.timeout_secs,
                    stack_id: Some(self.id.clone()),
                    resource_name: Some(key.clone()),
                    inputs_from: None,
                    skip_if_unchanged_from: compare_with.clone(),
                };
                ((*action).to_owned(), Some(spec), body, compare_with.clone())
            }
            StepKind::Reuse {
                action,
                config,
                inputs_from,
                ..
            } => {
                let unit = self.stack.state.units[&key].clone();
                let pending = self.plan_pending(&key, action, false).await?;
                let body = CreateDeployment {
                    id: Some(pending.deployment_id.clone()),
                    config_id: config.clone(),
                    server_id: unit.server_id.clone(),
                    action: Action::new(action.as_str())
                        .map_err(|e| StartError::Failed(format!("action {action:?} {e}")))?,
                    input_values: BTreeMap::new(),
                    name: Some(match &unit.member {
                        Some(m) => format!("{}-{m}", unit.resource),
                        None => unit.resource.clone(),
                    }),
                    timeout_secs: None,
                    stack_id: Some(self.id.clone()),
                    resource_name: Some(key.clone()),
                    inputs_from: Some(inputs_from.clone()),
                    skip_if_unchanged_from: None,
                };
                (action.clone(), None, body, None)
            }
        };
        let client = self.client.clone();
        let report = self.opts.report.clone();
        let server = body.server_id.clone();
        running.spawn(async move {
            let result = execute(&client, config_spec, body, compare_with, |d| {
                report(&Event::Deployment {
                    unit: key.clone(),
                    action: action.clone(),
                    server: server.clone(),
                    deployment: d.id.clone(),
                    status: d.status,
                    reason: d.status_reason.clone(),
                });
            })
            .await;
            (key, result)
        });
        Ok(true)
    }

    /// The ids this operation uses for `key`'s deployment: the recorded ones when an
    /// interrupted run planned them, else new ones, recorded before use.
    async fn plan_pending(
        &mut self,
        key: &str,
        action: &str,
        with_config: bool,
    ) -> Result<Pending, EngineError> {
        let op = self.op_id.clone();
        let planned = |u: &Unit| {
            u.pending
                .as_ref()
                .filter(|p| p.op_id == op && p.action == action)
                .cloned()
        };
        if let Some(p) = self.stack.state.units.get(key).and_then(planned) {
            return Ok(p);
        }
        let fresh = Pending {
            op_id: op.clone(),
            action: action.to_owned(),
            deployment_id: DeploymentId::random(),
            config_id: with_config.then(ConfigId::random),
        };
        let lifecycle = !matches!(self.kind, OpKind::Action { .. });
        self.save(|s, _| {
            if let Some(u) = s.units.get_mut(key)
                && planned(u).is_none()
            {
                u.pending = Some(fresh.clone());
                if lifecycle {
                    u.action = action.to_owned();
                    u.status = OpStatus::InProgress;
                    u.status_reason = None;
                }
            }
        })
        .await?;
        self.stack
            .state
            .units
            .get(key)
            .and_then(planned)
            .ok_or_else(|| EngineError::Refused(format!("{key} left the stack while planning")))
    }

    /// Records a finished step; `Some(reason)` when it failed.
    async fn finished(
        &mut self,
        step: &Step,
        outcome: Outcome,
    ) -> Result<Option<String>, EngineError> {
        let key = step.key.clone();
        let op = self.op_id.clone();
        let action_run = matches!(self.kind, OpKind::Action { .. });
        let removal = matches!(step.kind, StepKind::Reuse { removal: true, .. });
        let deployment = match outcome {
            Outcome::Unchanged => {
                (self.opts.report)(&Event::Unchanged { unit: key.clone() });
                self.save(|s, _| {
                    if let Some(u) = s.units.get_mut(&key) {
                        u.pending = None;
                        u.op_id = Some(op.clone());
                        u.status = OpStatus::Complete;
                        u.status_reason = None;
                    }
                })
                .await?;
                return Ok(None);
            }
            Outcome::Finished(d) => *d,
        };
        let complete = deployment.status == DeploymentStatus::Complete;
        let reason = (!complete).then(|| failure_reason(&key, &deployment));
        if complete {
            self.deployments
                .insert(deployment.id.clone(), deployment.clone());
        }
        let d = deployment.clone();
        let r = reason.clone();
        self.save(|s, _| {
            if action_run {
                if let Some(run) = s.actions.iter_mut().find(|a| a.op_id == op) {
                    run.results.insert(
                        key.clone(),
                        ActionResult {
                            deployment_id: d.id.clone(),
                            status: if complete {
                                OpStatus::Complete
                            } else {
                                OpStatus::Failed
                            },
                            reason: r.clone(),
                        },
                    );
                }
                if let Some(u) = s.units.get_mut(&key) {
                    u.pending = None;
                    u.op_id = Some(op.clone());
                }
                return;
            }
            if removal && complete {
                s.units.remove(&key);
                return;
            }
            let Some(u) = s.units.get_mut(&key) else {
                return;
            };
            u.pending = None;
            u.op_id = Some(op.clone());
            u.status = if complete {
                OpStatus::Complete
            } else {
                OpStatus::Failed
            };
            u.status_reason = r.clone();
            let lifecycle_run = matches!(d.action.as_str(), Action::CREATE | Action::UPDATE);
            if lifecycle_run || u.last.is_none() {
                u.last = Some(d.id.clone());
                u.last_config = Some(d.config_id.clone());
            }
            if complete && lifecycle_run {
                u.baseline = Some(d.id.clone());
                u.baseline_config = Some(d.config_id.clone());
            }
        })
        .await?;
        if removal && complete {
            (self.opts.report)(&Event::Removed { unit: key });
        }
        Ok(reason)
    }

    async fn record_failure(&mut self, key: &str, reason: &str) -> Result<(), EngineError> {
        let op = self.op_id.clone();
        let lifecycle = !matches!(self.kind, OpKind::Action { .. });
        (self.opts.report)(&Event::NotRun {
            unit: key.to_owned(),
            reason: reason.to_owned(),
        });
        self.save(|s, _| {
            if let Some(u) = s.units.get_mut(key) {
                u.pending = None;
                u.op_id = Some(op.clone());
                if lifecycle {
                    u.status = OpStatus::Failed;
                }
                u.status_reason = Some(reason.to_owned());
            }
        })
        .await
    }

    /// Fetches the completed deployments of `keys` (for `get_attr`).
    async fn fetch_completed(&mut self, keys: &BTreeSet<String>) -> Result<(), EngineError> {
        let ids: Vec<DeploymentId> = keys
            .iter()
            .filter_map(|k| self.stack.state.units.get(k)?.baseline.clone())
            .filter(|id| !self.deployments.contains_key(id))
            .collect();
        for id in ids {
            let d = self.client.get_deployment(&id).await?;
            self.deployments.insert(id, d);
        }
        Ok(())
    }

    /// The template's outputs, resolved against the finished units.
    async fn outputs(
        &mut self,
        ctx: &ApplyContext<'_>,
    ) -> Result<BTreeMap<String, Value>, EngineError> {
        let all: BTreeSet<String> = ctx.plan.units.keys().cloned().collect();
        self.fetch_completed(&all).await?;
        let resolver = RuntimeResolver {
            template: ctx.template,
            params: ctx.params,
            plan: ctx.plan,
            state: &self.stack.state,
            deployments: &self.deployments,
        };
        let mut out = BTreeMap::new();
        for (name, def) in &ctx.template.outputs {
            let resolved =
                functions::resolve(&def.value, &resolver, &format!("outputs.{name}.value"))?;
            // A value derived from a hidden parameter is not stored.
            let value = if resolved.hidden {
                Value::String("<hidden>".into())
            } else {
                resolved.value
            };
            out.insert(name.clone(), value);
        }
        Ok(out)
    }

    /// Ends the operation: COMPLETE, or FAILED naming each failed unit.
    async fn finish(mut self, failures: Vec<(String, String)>) -> Result<Stack, EngineError> {
        let action = self.kind.stack_action();
        let status = if failures.is_empty() {
            StackStatus {
                action,
                status: OpStatus::Complete,
                reason: None,
            }
        } else {
            let reason = failures
                .iter()
                .filter(|(_, r)| !r.starts_with("not run:"))
                .map(|(_, r)| r.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            StackStatus {
                action,
                status: OpStatus::Failed,
                reason: Some(reason),
            }
        };
        let st = status.clone();
        self.save(|s, status| {
            *status = st.clone();
            if let Some(op) = s.operation.as_mut() {
                op.finished_at.get_or_insert_with(OffsetDateTime::now_utc);
            }
        })
        .await?;
        (self.opts.report)(&Event::OperationFinished { status });
        Ok(self.stack)
    }
}

impl OpKind {
    fn from_operation(op: &Operation) -> Option<OpKind> {
        Some(match op.action {
            StackAction::Create => OpKind::Create,
            StackAction::Update => OpKind::Update,
            StackAction::Delete => OpKind::Delete,
            StackAction::Suspend => OpKind::Suspend,
            StackAction::Resume => OpKind::Resume,
            StackAction::Action => OpKind::Action {
                name: op.name.clone()?,
                resource: op.resource.clone()?,
            },
        })
    }
}

enum StartError {
    Engine(EngineError),
    Failed(String),
}

impl From<EngineError> for StartError {
    fn from(e: EngineError) -> Self {
        Self::Engine(e)
    }
}

#[derive(Debug, Default)]
struct BatchState {
    left: usize,
    ran: bool,
    announced: bool,
    finished_at: Option<Instant>,
}

enum Gate {
    Open,
    Closed,
    At(Instant),
}

/// Whether batch `index` of a group may start: every earlier batch is done, and the
/// pause after the previous one (when it ran anything) is over.
fn batch_gate(group: &BTreeMap<usize, BatchState>, index: usize, pause: Duration) -> Gate {
    if group.range(..index).any(|(_, b)| b.left > 0) {
        return Gate::Closed;
    }
    match group.range(..index).next_back() {
        Some((_, prev)) if prev.ran && !pause.is_zero() => match prev.finished_at {
            Some(t) => Gate::At(t + pause),
            None => Gate::Open,
        },
        _ => Gate::Open,
    }
}

fn finish_batch(
    batches: &mut BTreeMap<String, BTreeMap<usize, BatchState>>,
    step: &Step,
    ran: bool,
) {
    if let Some((group, b)) = &step.batch
        && let Some(state) = batches.get_mut(group).and_then(|g| g.get_mut(&b.index))
    {
        state.left = state.left.saturating_sub(1);
        state.ran |= ran;
        state.finished_at = Some(Instant::now());
    }
}

/// Creates (or finds, when an interrupted run already created it) one deployment and
/// waits for its end.
async fn execute(
    client: &Client,
    config: Option<flue_proto::ConfigSpec>,
    body: CreateDeployment,
    compare_with: Option<DeploymentId>,
    on_change: impl FnMut(&Deployment),
) -> Result<Outcome, ClientError> {
    let id = body
        .id
        .clone()
        .expect("the driver always names its deployments");
    let existing = match client.get_deployment(&id).await {
        Ok(d) => Some(d),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e),
    };
    let d = match existing {
        Some(d) => d,
        None => {
            if let Some(spec) = &config {
                client.create_config(spec).await?;
            }
            let d = client.create_deployment(&body).await?;
            if compare_with.as_ref() == Some(&d.id) {
                return Ok(Outcome::Unchanged);
            }
            d
        }
    };
    let wait = Duration::from_secs(d.timeout_secs) + WAIT_SLACK;
    let d = client.wait_until_terminal(&d.id, wait, on_change).await?;
    Ok(Outcome::Finished(Box::new(d)))
}

/// The stack's failure reason for one unit: resource, server, why, and its stderr.
fn failure_reason(key: &str, d: &Deployment) -> String {
    let why = d.status_reason.as_deref().unwrap_or("failed");
    let mut reason = format!(
        "{key} ({} on server {}) failed: {why}",
        d.action, d.server_id
    );
    let stderr = d.deploy_stderr.trim_end();
    if !stderr.is_empty() {
        let start = stderr.len().saturating_sub(STDERR_TAIL_BYTES);
        let start = (start..stderr.len())
            .find(|i| stderr.is_char_boundary(*i))
            .unwrap_or(stderr.len());
        reason.push_str("\nstderr:\n");
        if start > 0 {
            reason.push_str("[…]");
        }
        reason.push_str(&stderr[start..]);
    }
    reason
}

fn not_found(e: ClientError, id: &StackId) -> EngineError {
    if e.is_not_found() {
        EngineError::Refused(format!("stack {id} does not exist"))
    } else {
        e.into()
    }
}

fn uuid_like() -> String {
    DeploymentId::random().to_string()
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}
