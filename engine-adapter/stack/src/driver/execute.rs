//! One step's deployment: its config and body, then (in its own task) finding or
//! creating it and following it to its end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flue_proto::{Action, ConfigId, ConfigSpec, CreateDeployment, Deployment, DeploymentId};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::plan::{Step, StepKind};
use super::record::{BUSY_BACKOFF, BUSY_RETRIES};
use super::state::{ApplyContext, Driver};
use super::{EngineError, Event, STDERR_TAIL_BYTES};
use crate::resolve::{self, HiddenOutputs};
use crate::template::ResourceKind;
use crate::{follow, random};
use flue_client::{Client, ClientError};

/// Added to a deployment's own timeout when waiting for it: the gateway fails it at
/// its timeout, so this is only a bound against a gateway that never answers.
const WAIT_SLACK: Duration = Duration::from_secs(120);

/// What a step starts: its action, the config to create (if any), the deployment, and
/// the deployment the gateway compares it with.
type Started = (
    String,
    Option<ConfigSpec>,
    CreateDeployment,
    Option<DeploymentId>,
);

/// How a step's deployment ended.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Its config and inputs did not change: nothing ran.
    Unchanged,
    /// It reached a terminal status.
    Finished(Box<Deployment>),
}

/// Why a step could not start.
pub(super) enum StartError {
    /// The operation cannot go on.
    Engine(EngineError),
    /// The step fails (its template does not resolve, its action is not valid); other
    /// steps go on.
    Failed(String),
}

impl From<EngineError> for StartError {
    fn from(e: EngineError) -> Self {
        Self::Engine(e)
    }
}

impl Driver<'_> {
    /// Starts one step: `Ok(true)` when a deployment task now runs, `Ok(false)` when
    /// the step needed no deployment.
    pub(super) async fn start(
        &mut self,
        step: &Step,
        ctx: Option<&ApplyContext<'_>>,
        creating: &Arc<Semaphore>,
        running: &mut JoinSet<(String, Result<Outcome, ClientError>)>,
    ) -> Result<bool, StartError> {
        let key = step.key.clone();
        let (action, config_spec, body, compare_with) = match &step.kind {
            StepKind::Skip => return Ok(false),
            StepKind::Drop => {
                self.save_units(&[&key], |s, _| {
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
                let resolver = self.resolver(ctx, HiddenOutputs::Refuse);
                let mut resolved = resolve::unit_deployment(&resolver, want)
                    .map_err(|e| StartError::Failed(e.to_string()))?;
                let mut inputs_from = None;
                // A RandomString whose properties did not change keeps its value: the
                // keeper re-uses its last inputs, so the gateway finds nothing changed.
                if ctx.template.resources[&want.resource].kind == ResourceKind::RandomString
                    && let Some(base) = compare_with
                {
                    let last = self
                        .client
                        .get_deployment(base)
                        .await
                        .map_err(|e| StartError::Engine(e.into()))?;
                    if last.input_values.get(random::PROPERTIES)
                        == resolved.input_values.get(random::PROPERTIES)
                    {
                        resolved.input_values.remove(random::VALUE);
                        inputs_from = Some(base.clone());
                    }
                }
                let pending = self
                    .plan_pending(&key, action, Some(ConfigId::random()))
                    .await?;
                self.reads.insert(key.clone(), resolved.inputs_read);
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
                    // What a hook sees as deploy_resource_name: Heat gives a group
                    // member's name, not the group's.
                    resource_name: Some(want.member.clone().unwrap_or(want.resource.clone())),
                    inputs_from,
                    input_refs: resolved.input_refs,
                    skip_if_unchanged_from: compare_with.clone(),
                };
                ((*action).to_owned(), Some(spec), body, compare_with.clone())
            }
            StepKind::ReportInputs => {
                let now = self.inputs_now(&key).await?;
                if !now.is_current() {
                    let mut inputs = now.changed;
                    inputs.extend(now.stuck);
                    (self.opts.report)(&Event::NotRun {
                        unit: key,
                        reason: format!(
                            "inputs changed: {}; not followed (--no-follow): `flue stack converge` re-runs it",
                            inputs.join(", ")
                        ),
                    });
                }
                return Ok(false);
            }
            StepKind::Follow { drifted } => match self.follow(&key, *drifted).await? {
                Some(follow) => follow,
                None => return Ok(false),
            },
            StepKind::Reuse {
                action,
                config,
                inputs_from,
                ..
            } => {
                let unit = self.stack.state.units[&key].clone();
                let pending = self.plan_pending(&key, action, None).await?;
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
                    resource_name: Some(unit.member.clone().unwrap_or(unit.resource.clone())),
                    inputs_from: Some(inputs_from.clone()),
                    input_refs: BTreeMap::new(),
                    skip_if_unchanged_from: None,
                };
                (action.clone(), None, body, None)
            }
        };
        let client = self.client.clone();
        let report = self.opts.report.clone();
        let server = body.server_id.clone();
        let creating = creating.clone();
        running.spawn(async move {
            let result = execute(&client, &creating, config_spec, body, compare_with, |d| {
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
}

impl Driver<'_> {
    /// Unit `key`'s inputs against the outputs they read as those units stand now.
    async fn inputs_now(&mut self, key: &str) -> Result<follow::Inputs, StartError> {
        follow::inputs_now(self.client, &self.stack.state, key, &mut self.fetched)
            .await
            .map_err(|e| StartError::Engine(e.into()))
    }

    /// A converge's step for unit `key` (`drifted`, or reading outputs that may have
    /// changed): its completed config re-run with the inputs that changed taken again
    /// (action, config, body, and what the gateway compares with when it is not
    /// drifted); `None` when nothing is to run.
    async fn follow(&mut self, key: &str, drifted: bool) -> Result<Option<Started>, StartError> {
        let unit = self.stack.state.units[key].clone();
        let (Some(baseline), Some(config)) = (unit.baseline.clone(), unit.baseline_config.clone())
        else {
            return Ok(None);
        };
        let now = self.inputs_now(key).await?;
        // Inputs an expression of the template made: only an update makes them again.
        let stuck: Vec<String> = now
            .stuck
            .iter()
            .map(|s| format!("{s}: only `flue stack update` makes it again"))
            .collect();
        if !drifted {
            if now.changed.is_empty() {
                if !stuck.is_empty() {
                    (self.opts.report)(&Event::NotRun {
                        unit: key.to_owned(),
                        reason: format!("inputs changed: {}", stuck.join(", ")),
                    });
                }
                // The outputs it read moved on with the same values: nothing to run.
                if now.reads != unit.inputs_read {
                    let reads = now.reads.clone();
                    self.save_units(&[key], |s, _| {
                        if let Some(u) = s.units.get_mut(key) {
                            u.inputs_read = reads.clone();
                        }
                    })
                    .await?;
                }
                return Ok(None);
            }
            if !unit.actions.iter().any(|a| a == Action::UPDATE) {
                (self.opts.report)(&Event::NotRun {
                    unit: key.to_owned(),
                    reason: format!(
                        "inputs changed: {}; not run: it does not run for UPDATE",
                        now.changed.join(", ")
                    ),
                });
                return Ok(None);
            }
        }
        if !now.changed.is_empty() || !stuck.is_empty() {
            let mut inputs = now.changed.clone();
            inputs.extend(stuck);
            (self.opts.report)(&Event::InputsChanged {
                unit: key.to_owned(),
                inputs,
            });
        }
        // A drifted unit runs its last action again; one only following data updates.
        let action = if !drifted || unit.action == Action::UPDATE {
            Action::UPDATE
        } else {
            Action::CREATE
        };
        let pending = self.plan_pending(key, action, None).await?;
        self.reads.insert(key.to_owned(), now.reads);
        let compare_with = (!drifted).then(|| baseline.clone());
        let body = CreateDeployment {
            id: Some(pending.deployment_id.clone()),
            input_values: now.values,
            name: Some(match &unit.member {
                Some(m) => format!("{}-{m}", unit.resource),
                None => unit.resource.clone(),
            }),
            stack_id: Some(self.id.clone()),
            resource_name: Some(unit.member.clone().unwrap_or(unit.resource.clone())),
            inputs_from: Some(baseline),
            input_refs: now.refs,
            skip_if_unchanged_from: compare_with.clone(),
            action: Action::new(action).expect("lifecycle action"),
            ..CreateDeployment::new(config, unit.server_id.clone())
        };
        Ok(Some((action.to_owned(), None, body, compare_with)))
    }
}

/// Creates (or finds, when an interrupted run already created it) one deployment and
/// waits for its end. The finding and creating hold a permit of `creating`, so that a
/// wave of thousands of members does not open thousands of connections at once (the
/// waits do not: a deployment may wait on another one of the same wave).
///
/// A call the gateway answers 503 (busy: its broker slower than its deadline) is tried
/// again, the whole step from the start, at most [`BUSY_RETRIES`] times. That is safe:
/// the deployment's id was recorded before its first try, the gateway answers a create
/// of a recorded id with the recorded deployment when the request is the same, and a
/// config id already stored is read rather than created.
pub(super) async fn execute(
    client: &Client,
    creating: &Semaphore,
    config: Option<ConfigSpec>,
    body: CreateDeployment,
    compare_with: Option<DeploymentId>,
    mut on_change: impl FnMut(&Deployment),
) -> Result<Outcome, ClientError> {
    let mut busy = 0;
    loop {
        let tried = async {
            let found = {
                let _permit = creating
                    .acquire()
                    .await
                    .expect("the semaphore is never closed");
                find_or_create(client, config.as_ref(), &body, compare_with.as_ref()).await?
            };
            let Some(d) = found else {
                return Ok::<_, ClientError>(Outcome::Unchanged);
            };
            let wait = Duration::from_secs(d.timeout_secs) + WAIT_SLACK;
            let d = client
                .wait_until_terminal(&d.id, wait, &mut on_change)
                .await?;
            Ok(Outcome::Finished(Box::new(d)))
        };
        match tried.await {
            Err(e) if e.status() == Some(503) && busy < BUSY_RETRIES => {
                busy += 1;
                // Backoff, not synchronisation: the gateway said "retry later".
                tokio::time::sleep(BUSY_BACKOFF * busy).await;
            }
            result => return result,
        }
    }
}

/// The step's deployment: the one an earlier try created, or a new one (its config
/// first); `None` when the gateway found nothing changed since `compare_with`.
async fn find_or_create(
    client: &Client,
    config: Option<&ConfigSpec>,
    body: &CreateDeployment,
    compare_with: Option<&DeploymentId>,
) -> Result<Option<Deployment>, ClientError> {
    let id = body
        .id
        .clone()
        .expect("the driver always names its deployments");
    match client.get_deployment(&id).await {
        Ok(d) => return Ok(Some(d)),
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e),
    }
    if let Some(spec) = config {
        match client.create_config(spec).await {
            Ok(_) => {}
            // The id was planned by this operation and recorded before use: a config
            // already stored under it is the one an interrupted run (or an earlier try)
            // created (the gateway does not compare configs with hidden defaults).
            Err(e) if e.status() == Some(409) => {
                let id = spec.id.clone().expect("planned configs have an id");
                client.get_config(&id).await?;
            }
            Err(e) => return Err(e),
        }
    }
    let d = client.create_deployment(body).await?;
    if compare_with == Some(&d.id) {
        return Ok(None);
    }
    Ok(Some(d))
}

/// The stack's failure reason for one unit: resource, server, why, and its stderr.
pub(super) fn failure_reason(key: &str, d: &Deployment) -> String {
    let why = d.status_reason.as_deref().unwrap_or("failed");
    let mut reason = format!(
        "{key} ({} on server {}) failed: {why}",
        d.action, d.server_id
    );
    let stderr = d.deploy_stderr.trim_end();
    if !stderr.is_empty() {
        let end = flue_proto::text::tail(stderr, STDERR_TAIL_BYTES);
        reason.push_str("\nstderr:\n");
        if end.len() < stderr.len() {
            reason.push_str("[…]");
        }
        reason.push_str(end);
    }
    reason
}
