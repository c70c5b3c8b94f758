//! Running stack operations: create, update, delete, suspend, resume and ad-hoc
//! actions, over the gateway's queues.
//!
//! The driver keeps every decision in the stack record (compare-and-set on its
//! revision) *before* acting on it: a deployment id is recorded as pending before the
//! deployment is created, and a unit is marked done by the operation before the next
//! step relies on it. A driver that dies therefore leaves a record from which running
//! the same command again continues: it re-uses the recorded ids (the gateway answers
//! an identical create idempotently) and never re-runs a finished unit.
//!
//! Here: the operations and what they report. `plan` decides each unit's step,
//! `state` holds the stack record, `record` writes each step into it, `schedule` runs
//! the steps and `execute` one deployment.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flue_proto::{
    Action, ActionRun, DeploymentId, DeploymentStatus, MappedResource, OpStatus, ServerId, Stack,
    StackAction, StackId, StackState, StackStatus,
};

use super::template::{Parameters, Template, TemplateError};
use super::{infra, units};
use flue_client::{Client, ClientError};

mod execute;
mod plan;
mod record;
mod schedule;
mod state;
#[cfg(test)]
mod tests;
mod wave;

use plan::OpKind;
use state::{ApplyContext, Driver};

/// How many ad-hoc action runs a stack remembers.
pub const MAX_ACTION_RUNS: usize = 20;
/// How much of a failed hook's stderr the stack's status reason quotes.
pub const STDERR_TAIL_BYTES: usize = 2000;
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
    /// A unit's inputs read outputs that changed: a converge re-runs it with the new
    /// values.
    InputsChanged {
        /// Unit key.
        unit: String,
        /// Each input, with the outputs it read (`password (db.password)`).
        inputs: Vec<String>,
    },
    /// A unit left the stack.
    Removed {
        /// Unit key.
        unit: String,
    },
    /// The operation is marked as driven by another `flue` process that may still
    /// be alive: this one waits for its lease to run out before taking over.
    WaitingForDriver {
        /// That process (`host/pid/nonce`).
        driver: String,
        /// The longest this one waits.
        up_to: Duration,
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
    /// What an infrastructure resource of the template stands for (an
    /// `OS::Nova::Server` mapped onto a registered server, an external resource).
    Mapped {
        /// The resource.
        resource: String,
        /// What it stands for and what of it is ignored.
        note: String,
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
    /// What infrastructure resources stand for, given on the command line
    /// (`--server`, `--attr`); what the stack kept stands for the rest.
    pub mapped: &'a BTreeMap<String, MappedResource>,
    /// The converge policy to keep (`None`: the stack's own, `manual` for a new one).
    pub converge: Option<flue_proto::ConvergePolicy>,
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
    let mut d = Driver::begin(client, id, OpKind::Delete, None, opts).await?;
    let steps = plan::delete_steps(&d.stack.state);
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
    let mut d = Driver::begin(client, id, kind, None, opts).await?;
    let op = d.op_id.clone();
    let run = ActionRun {
        op_id: op.clone(),
        name: name.to_string(),
        resource: resource.to_owned(),
        status: OpStatus::InProgress,
        results: BTreeMap::new(),
    };
    d.save_units(&[], |s, _| {
        if !s.actions.iter().any(|a| a.op_id == op) {
            s.actions.push(run.clone());
            let extra = s.actions.len().saturating_sub(MAX_ACTION_RUNS);
            s.actions.drain(..extra);
        }
    })
    .await?;
    let steps = plan::action_steps(&d.stack.state, &keys, name.as_str());
    let failures = d.run(steps, None).await?;
    let status = if failures.is_empty() {
        OpStatus::Complete
    } else {
        OpStatus::Failed
    };
    d.save_units(&[], |s, _| {
        if let Some(run) = s.actions.iter_mut().find(|a| a.op_id == op) {
            run.status = status;
        }
    })
    .await?;
    d.finish(failures).await
}

/// How a converge treats the units whose inputs read outputs it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dependents {
    /// Re-run each whose inputs changed, with the new values, after the units it reads.
    #[default]
    Follow,
    /// Report them (`Event::NotRun`); `flue stack check` then finds them drifted.
    Report,
}

/// `flue stack converge`: re-applies `units` (those a check found drifted or missing),
/// each with the config and inputs it last applied (an input read from an output that
/// has changed since taken again), dependencies first; then the units whose inputs
/// read outputs that changed, followed as `dependents` says; the other units are left
/// alone. Resumed like any other operation.
pub async fn converge(
    client: &Client,
    id: &StackId,
    units: &[String],
    dependents: Dependents,
    opts: &Options,
) -> Result<Stack, EngineError> {
    let stack = client.get_stack(id).await.map_err(|e| not_found(e, id))?;
    if units.is_empty() {
        return Err(EngineError::Refused("no unit to converge".to_owned()));
    }
    if let Some(unknown) = units.iter().find(|u| !stack.state.units.contains_key(*u)) {
        return Err(EngineError::Refused(format!(
            "stack {id} has no unit {unknown:?}"
        )));
    }
    let no_follow = dependents == Dependents::Report;
    let kind = OpKind::Converge {
        units: units.to_vec(),
        no_follow,
    };
    let mut d = Driver::begin(client, id, kind, None, opts).await?;
    let steps = plan::converge_steps(&d.stack.state, units, no_follow);
    let failures = d.run(steps, None).await?;
    d.finish(failures).await
}

/// Suspend or resume: the lifecycle action on every unit that runs for it.
async fn lifecycle(
    client: &Client,
    id: &StackId,
    kind: OpKind,
    opts: &Options,
) -> Result<Stack, EngineError> {
    let mut d = Driver::begin(client, id, kind, None, opts).await?;
    let steps = plan::lifecycle_steps(&d.stack.state, &d.kind);
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
    // Parameters given before stand unless given again (Heat's --existing); hidden
    // ones were never stored and must be given again.
    let kept = previous
        .as_ref()
        .map(|p| p.state.parameters.clone())
        .unwrap_or_default();
    // A hidden parameter given before must be given again: falling back to its
    // default (say, a password) without a word would be worse than refusing.
    if let Some(prev) = &previous
        && let Some(h) = prev.state.hidden_parameters.iter().find(|h| {
            template.parameters.get(*h).is_some_and(|d| d.hidden) && !source.given.contains_key(*h)
        })
    {
        return Err(TemplateError {
            path: format!("parameters.{h}"),
            message: format!(
                "hidden parameter {h:?} is never stored; pass it again with -P {h}=… or --parameter-file {h}=PATH"
            ),
        }
        .into());
    }
    let params = template
        .bind_parameters_over(source.given, &kept)
        .map_err(|e| {
            match previous.as_ref().and_then(|p| {
                p.state
                    .hidden_parameters
                    .iter()
                    .find(|h| e.path == format!("parameters.{h}"))
            }) {
                Some(h) => TemplateError {
                    path: e.path,
                    message: format!(
                        "hidden parameter {h:?} is never stored; pass it again with -P {h}=… or --parameter-file {h}=PATH"
                    ),
                },
                None => e,
            }
        })?;
    let kept_mapped = previous
        .as_ref()
        .map(|p| p.state.mapped.clone())
        .unwrap_or_default();
    let mapped =
        infra::merge(template, &kept_mapped, source.mapped).map_err(EngineError::Refused)?;
    let fingerprint = fingerprint(template, &params, &mapped);
    // Pseudo-parameters, then conditions: the template that runs is the one they leave.
    let project = match &previous {
        Some(p) => Some(p.tenant.to_string()),
        // An engine token sees its own tenant's servers only.
        None => client
            .list_servers()
            .await?
            .first()
            .map(|s| s.tenant.to_string()),
    };
    let mut params = params;
    params.add_pseudo(id.as_str(), project.as_deref());
    let (instantiated, _) = template.instantiate(&params)?;
    let template = &instantiated;
    // The same create run again after it completed (its driver died after its last
    // write, say): nothing to do.
    if let Some(prev) = &previous
        && action == StackAction::Create
        && prev.status.action == StackAction::Create
        && prev.status.status == OpStatus::Complete
        && prev
            .state
            .operation
            .as_ref()
            .and_then(|o| o.fingerprint.as_ref())
            == Some(&fingerprint)
    {
        (opts.report)(&Event::OperationFinished {
            status: prev.status.clone(),
        });
        return Ok(prev.clone());
    }
    let creating =
        action == StackAction::Create && previous.as_ref().is_none_or(|p| never_created(&p.state));
    let mut plan = units::expand_mapped(template, &params, &mapped, creating)?;
    if let Some(prev) = &previous {
        units::keep_keepers_in_place(template, &mut plan, &prev.state);
    }
    plan::check_servers(client, &mut plan).await?;
    for (resource, note) in infra::notes(template, &plan.servers, &plan.mapped) {
        (opts.report)(&Event::Mapped { resource, note });
    }

    let kind = match action {
        StackAction::Create => OpKind::Create,
        _ => OpKind::Update,
    };
    let mut d = Driver::begin(client, id, kind, Some(fingerprint), opts).await?;
    let op = d.op_id.clone();
    let keep = params.to_keep();
    // The hidden parameters a user gave (their names only): they must be given again.
    let hidden: Vec<String> = params.hidden.intersection(&params.given).cloned().collect();
    d.save(|s, _| {
        s.parameters = keep.clone();
        s.hidden_parameters = hidden.clone();
        s.mapped = mapped.clone();
        if let Some(policy) = source.converge {
            s.converge = policy;
        }
        plan::place_units(s, &plan, &op);
    })
    .await?;

    let steps = plan::apply_steps(&plan, &d.stack.state);
    let ctx = ApplyContext {
        template,
        params: &params,
        plan: &plan,
    };
    let failures = d.run(steps, Some(&ctx)).await?;
    if failures.is_empty() {
        let outputs = d.outputs(&ctx).await?;
        d.save_units(&[], |s, _| s.outputs = outputs.clone())
            .await?;
    }
    d.finish(failures).await
}

/// True when no unit of `state` completed a deployment, but for the units the create
/// being resumed completed itself: a resumed create keeps its groups' `batch_create`
/// (size and order), as the run it takes over had them.
fn never_created(state: &StackState) -> bool {
    let resumed = state
        .operation
        .as_ref()
        .filter(|o| o.action == StackAction::Create && o.finished_at.is_none())
        .map(|o| o.id.as_str());
    state
        .units
        .values()
        .all(|u| u.baseline.is_none() || (resumed.is_some() && u.op_id.as_deref() == resumed))
}

/// What a create or update runs with, as a short digest: the template as parsed and
/// the parameters a user gave (not hidden ones, which are never stored anywhere). It
/// only tells runs apart, so a non-cryptographic hash (FNV-1a) is enough.
fn fingerprint(
    template: &Template,
    params: &Parameters,
    mapped: &BTreeMap<String, MappedResource>,
) -> String {
    let text = format!("{template:?}{:?}{mapped:?}", params.to_keep());
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// A failed stack read as an [`EngineError`]: a missing stack is refused by name.
fn not_found(e: ClientError, id: &StackId) -> EngineError {
    if e.is_not_found() {
        EngineError::Refused(format!("stack {id} does not exist"))
    } else {
        e.into()
    }
}
