//! What an operation does to each unit, decided before anything runs: the operation's
//! kind, the steps (one per unit, with what each waits for) and the checks that come
//! first.

use std::collections::{BTreeMap, BTreeSet};

use flue_proto::{
    Action, ConfigId, DeploymentId, OpStatus, Operation, ServerId, StackAction, StackState, Unit,
};

use super::{EngineError, INIT};
use crate::units::{self, DesiredUnit, Plan};
use flue_client::Client;

/// Which operation a driver runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum OpKind {
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
    /// `flue stack action`: the ad-hoc action `name` on the units of `resource`.
    Action {
        /// The config's action.
        name: String,
        /// The deployment resource it runs on.
        resource: String,
    },
    /// `flue stack converge`: `units` re-applied with what each last applied, and the
    /// units whose inputs read outputs that changed re-run with the new values (only
    /// reported with `no_follow`).
    Converge {
        /// The unit keys.
        units: Vec<String>,
        /// Report the units whose inputs changed instead of re-running them.
        no_follow: bool,
    },
}

impl OpKind {
    /// The operation a stored [`Operation`] records, if it names everything needed.
    pub(super) fn from_operation(op: &Operation) -> Option<OpKind> {
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
            StackAction::Converge if !op.units.is_empty() => OpKind::Converge {
                units: op.units.clone(),
                no_follow: op.no_follow,
            },
            StackAction::Converge => return None,
        })
    }

    /// The stack status action this operation reports.
    pub(super) fn stack_action(&self) -> StackAction {
        match self {
            Self::Create => StackAction::Create,
            Self::Update => StackAction::Update,
            Self::Delete => StackAction::Delete,
            Self::Suspend => StackAction::Suspend,
            Self::Resume => StackAction::Resume,
            Self::Action { .. } => StackAction::Action,
            Self::Converge { .. } => StackAction::Converge,
        }
    }

    /// The action its deployments run.
    pub(super) fn deployment_action(&self) -> &str {
        match self {
            Self::Create => Action::CREATE,
            Self::Update => Action::UPDATE,
            Self::Delete => Action::DELETE,
            Self::Suspend => Action::SUSPEND,
            Self::Resume => Action::RESUME,
            Self::Action { name, .. } => name,
            // Each unit re-runs its own last action (see `converge_step`).
            Self::Converge { .. } => Action::UPDATE,
        }
    }

    /// The `flue stack …` command that runs it.
    pub(super) fn command(&self) -> String {
        match self {
            Self::Action { name, resource } => format!("action {resource} {name}"),
            other => other.stack_action().to_string().to_lowercase(),
        }
    }

    /// True when `op` is an operation of this kind (and, for an action, the same one).
    pub(super) fn matches(&self, op: &Operation) -> bool {
        op.action == self.stack_action()
            && match self {
                Self::Action { name, resource } => {
                    op.name.as_deref() == Some(name) && op.resource.as_deref() == Some(resource)
                }
                Self::Converge { units, no_follow } => {
                    &op.units == units && op.no_follow == *no_follow
                }
                _ => true,
            }
    }
}

/// What one step does.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum StepKind {
    /// Resolve the template's config and inputs for the unit and deploy them.
    Apply {
        /// CREATE or UPDATE.
        action: &'static str,
        /// The unit's completed deployment: nothing runs when nothing changed.
        compare_with: Option<DeploymentId>,
    },
    /// Deploy the unit's recorded config with its recorded inputs, for another action.
    Reuse {
        /// The action to run.
        action: String,
        /// The recorded config.
        config: ConfigId,
        /// The deployment whose inputs are re-used.
        inputs_from: DeploymentId,
        /// The unit leaves the stack once this succeeds.
        removal: bool,
    },
    /// Re-run the unit's completed config with its inputs taken again from the outputs
    /// they read, where those changed (`crate::follow`); decided when the step starts,
    /// after the units it reads.
    Follow {
        /// A drifted unit: it runs even when no input changed. Otherwise the gateway
        /// runs nothing when the values it would get are the ones it has.
        drifted: bool,
    },
    /// Report whether the unit's inputs read outputs that changed; run nothing
    /// (`flue stack converge --no-follow`).
    ReportInputs,
    /// Leave the stack without running anything.
    Drop,
    /// Nothing to do.
    Skip,
}

/// One unit's part in an operation.
#[derive(Debug, Clone)]
pub(super) struct Step {
    /// The unit.
    pub(super) key: String,
    /// Units of the same operation that must succeed first.
    pub(super) after: BTreeSet<String>,
    /// The group and rolling batch the step belongs to.
    pub(super) batch: Option<(String, units::Batch)>,
    /// What it does.
    pub(super) kind: StepKind,
}

/// The steps of a create or update: every unit of `plan` (CREATE when it never
/// completed, UPDATE otherwise, when it runs for that action), then the units the
/// template no longer has (DELETE once everything else is done, in reverse dependency
/// order).
pub(super) fn apply_steps(plan: &Plan, state: &StackState) -> Vec<Step> {
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
            kind: removal_step(unit),
        });
    }
    steps
}

/// The steps of a delete: every unit leaves, dependents first.
pub(super) fn delete_steps(state: &StackState) -> Vec<Step> {
    let dependents = dependents(state);
    state
        .units
        .iter()
        .map(|(key, unit)| Step {
            key: key.clone(),
            after: dependents.get(key).cloned().unwrap_or_default(),
            batch: None,
            kind: removal_step(unit),
        })
        .collect()
}

/// The steps of a suspend (dependents first) or resume (dependencies first): `action`
/// on every unit that runs for it and has completed a deployment.
pub(super) fn lifecycle_steps(state: &StackState, kind: &OpKind) -> Vec<Step> {
    let action = kind.deployment_action();
    let reverse = matches!(kind, OpKind::Suspend);
    let dependents = dependents(state);
    state
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
            kind: if unit.actions.iter().any(|a| a == action)
                && unit.baseline.is_some()
                && needs(kind, unit)
            {
                rerun_step(unit, action)
            } else {
                StepKind::Skip
            },
        })
        .collect()
}

/// Whether a suspend or resume still has to run on `unit`: a retried suspend skips
/// the units already suspended, a resume runs only on suspended units (or ones whose
/// resume failed).
fn needs(kind: &OpKind, unit: &Unit) -> bool {
    let done = unit.status == OpStatus::Complete;
    match kind {
        OpKind::Suspend => !(unit.action == Action::SUSPEND && done),
        OpKind::Resume => {
            unit.action == Action::SUSPEND || (unit.action == Action::RESUME && !done)
        }
        _ => true,
    }
}

/// The steps of an ad-hoc action: `name` on each of `keys`, all at once.
pub(super) fn action_steps(state: &StackState, keys: &[String], name: &str) -> Vec<Step> {
    keys.iter()
        .map(|key| Step {
            key: key.clone(),
            after: BTreeSet::new(),
            batch: None,
            kind: rerun_step(&state.units[key], name),
        })
        .collect()
}

/// The steps of a converge: each of `units` re-applied with what it last applied (its
/// inputs read from outputs that changed taken again), dependencies first; then every
/// unit whose inputs read, directly or through others, a unit that runs, followed
/// (re-run where its inputs changed) after the units it reads, or with `no_follow` only
/// reported. The other units are left alone.
pub(super) fn converge_steps(state: &StackState, units: &[String], no_follow: bool) -> Vec<Step> {
    let readers = readers(state);
    // Everything downstream of a converged unit through the inputs that read it.
    let mut downstream: BTreeSet<&str> = BTreeSet::new();
    let mut todo: Vec<&str> = units.iter().map(String::as_str).collect();
    while let Some(key) = todo.pop() {
        for reader in readers.get(key).into_iter().flatten() {
            if downstream.insert(reader) {
                todo.push(reader);
            }
        }
    }
    state
        .units
        .iter()
        .map(|(key, unit)| {
            let converged = units.contains(key);
            let reads_data = !unit.inputs_read.is_empty() && unit.baseline_config.is_some();
            let kind = match (converged, downstream.contains(key.as_str())) {
                (true, _) if reads_data && !no_follow && unit.baseline.is_some() => {
                    StepKind::Follow { drifted: true }
                }
                (true, _) => converge_step(unit),
                (false, true) if no_follow => StepKind::ReportInputs,
                (false, true) if unit.baseline.is_some() && reads_data => {
                    StepKind::Follow { drifted: false }
                }
                _ => StepKind::Skip,
            };
            let mut after: BTreeSet<String> = unit.depends_on.iter().cloned().collect();
            after.extend(read_units(unit).map(str::to_owned));
            after.retain(|k| k != key && state.units.contains_key(k));
            Step {
                key: key.clone(),
                after,
                batch: None,
                kind,
            }
        })
        .collect()
}

/// The units whose outputs `unit`'s inputs read.
fn read_units(unit: &Unit) -> impl Iterator<Item = &str> {
    unit.inputs_read
        .values()
        .flat_map(|s| s.reads.iter().map(|r| r.unit.as_str()))
}

/// For each unit, the units whose inputs read its outputs.
fn readers(state: &StackState) -> BTreeMap<&str, BTreeSet<&str>> {
    let mut out: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (key, unit) in &state.units {
        for read in read_units(unit) {
            if read != key {
                out.entry(read).or_default().insert(key.as_str());
            }
        }
    }
    out
}

/// A drifted or missing unit re-applied: its completed config and inputs with the action
/// it last completed (UPDATE after an update, else CREATE); a unit that never completed
/// is created again with what it last tried; one that never ran is left alone.
pub(super) fn converge_step(unit: &Unit) -> StepKind {
    let action = if unit.action == Action::UPDATE {
        Action::UPDATE
    } else {
        Action::CREATE
    };
    match (
        &unit.baseline,
        &unit.baseline_config,
        &unit.last,
        &unit.last_config,
    ) {
        (Some(_), Some(_), _, _) => rerun_step(unit, action),
        (_, _, Some(d), Some(c)) => StepKind::Reuse {
            action: Action::CREATE.to_owned(),
            config: c.clone(),
            inputs_from: d.clone(),
            removal: false,
        },
        _ => StepKind::Skip,
    }
}

/// For each unit, the units that depend on it.
pub(super) fn dependents(state: &StackState) -> BTreeMap<String, BTreeSet<String>> {
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

/// A step running DELETE with the unit's last config and inputs, after which the unit
/// leaves the stack. A unit that never reached an agent, or does not run DELETE, is
/// dropped without running anything.
pub(super) fn removal_step(unit: &Unit) -> StepKind {
    match (&unit.last, &unit.last_config) {
        (Some(d), Some(c)) if unit.actions.iter().any(|a| a == Action::DELETE) => StepKind::Reuse {
            action: Action::DELETE.to_owned(),
            config: c.clone(),
            inputs_from: d.clone(),
            removal: true,
        },
        _ => StepKind::Drop,
    }
}

/// A step re-running the unit's completed config and inputs with `action`; nothing to
/// do for a unit that has not completed a deployment.
pub(super) fn rerun_step(unit: &Unit, action: &str) -> StepKind {
    match (&unit.baseline, &unit.baseline_config) {
        (Some(d), Some(c)) => StepKind::Reuse {
            action: action.to_owned(),
            config: c.clone(),
            inputs_from: d.clone(),
            removal: false,
        },
        _ => StepKind::Skip,
    }
}

/// Brings the stack's units in line with `plan` (operation `op`): new units are added,
/// and every planned unit takes the plan's actions and dependencies.
pub(super) fn place_units(s: &mut StackState, plan: &Plan, op: &str) {
    for (key, want) in &plan.units {
        match s.units.get(key) {
            // Moved to another server: the old one is retired (DELETE at the end)
            // and the unit starts afresh on the new server.
            Some(old) if old.server_id != want.server_id && old.op_id.as_deref() != Some(op) => {
                let old = s.units.remove(key).expect("present");
                if old.last.is_some() || old.pending.is_some() {
                    // A retired unit whose DELETE failed before may still be there:
                    // never overwrite one.
                    let mut retired = format!("{key}@{}", old.server_id);
                    let mut n = 2;
                    while s.units.contains_key(&retired) {
                        retired = format!("{key}@{}-{n}", old.server_id);
                        n += 1;
                    }
                    s.units.insert(retired, old);
                }
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
}

/// A unit the plan adds to the stack: nothing deployed yet.
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
        current: None,
        op_id: None,
        action: INIT.to_owned(),
        status: OpStatus::Complete,
        status_reason: None,
        inputs_read: BTreeMap::new(),
    }
}

/// Server reads [`check_servers`] has in flight at once.
const SERVER_READS_AT_ONCE: usize = 32;

/// Every server the plan deploys to, and every `OS::Nova::Server` it maps, must be
/// registered before anything runs.
pub(super) async fn check_servers(client: &Client, plan: &mut Plan) -> Result<(), EngineError> {
    for (name, mapped) in &mut plan.servers {
        match client.get_server(&mapped.server_id).await {
            Ok(server) => {
                mapped.registered_name = Some(server.name).filter(|n| !n.is_empty());
            }
            Err(e) if e.is_not_found() => {
                return Err(EngineError::Refused(crate::infra::not_registered(
                    name, mapped,
                )));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let servers: BTreeMap<ServerId, String> = plan
        .units
        .values()
        .map(|u| (u.server_id.clone(), u.key.clone()))
        .collect();
    // A group over thousands of servers: the reads side by side, a few at a time.
    let mut servers = servers.into_iter();
    let mut reads = tokio::task::JoinSet::new();
    loop {
        while reads.len() < SERVER_READS_AT_ONCE
            && let Some((server, unit)) = servers.next()
        {
            let client = client.clone();
            reads.spawn(async move {
                let read = client.get_server(&server).await;
                (server, unit, read)
            });
        }
        let Some(done) = reads.join_next().await else {
            return Ok(());
        };
        let (server, unit, read) = done.map_err(|e| {
            EngineError::Refused(format!("a server check failed unexpectedly: {e}"))
        })?;
        match read {
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
}
