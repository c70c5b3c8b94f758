//! The driver's hold on the stack record: starting, resuming or refusing an operation,
//! every write (compare-and-set on the revision), and the operation's end.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use flue_proto::{
    Deployment, DeploymentId, DeploymentStatus, InputSource, OpStatus, Operation, PutStack, Stack,
    StackAction, StackId, StackState, StackStatus,
};
use serde_json::Value;
use time::OffsetDateTime;

use super::plan::OpKind;
use super::record::{action_result, record_deployment};
use super::schedule::HEARTBEAT;
use super::{EngineError, Event, Options};
use crate::functions;
use crate::resolve::{HiddenOutputs, RuntimeResolver};
use crate::template::{Parameters, Template};
use crate::units::Plan;
use flue_client::Client;

/// How many failed units a stack's status reason describes in full.
pub(super) const MAX_REASONS: usize = 3;

/// What a create or update resolves units against.
pub(super) struct ApplyContext<'a> {
    /// The template.
    pub(super) template: &'a Template,
    /// Its bound parameters.
    pub(super) params: &'a Parameters,
    /// Its units.
    pub(super) plan: &'a Plan,
}

/// One operation on one stack, and the stack record as last written by it.
pub(super) struct Driver<'c> {
    /// The gateway.
    pub(super) client: &'c Client,
    /// The stack.
    pub(super) id: StackId,
    /// The operation.
    pub(super) kind: OpKind,
    /// The operation's id, as recorded in the stack.
    pub(super) op_id: String,
    /// This process, as recorded in the operation (`host/pid/nonce`).
    pub(super) me: String,
    /// The stack record as last read or written.
    pub(super) stack: Stack,
    /// The caller's options.
    pub(super) opts: Options,
    /// Completed deployments fetched so far (for `get_attr`), by id.
    pub(super) deployments: HashMap<DeploymentId, Deployment>,
    /// What each started step's inputs read, by unit: recorded with the step's end.
    pub(super) reads: HashMap<String, BTreeMap<String, InputSource>>,
    /// Deployments read to compare outputs (`crate::follow`).
    pub(super) fetched: crate::follow::Fetched,
}

impl<'c> Driver<'c> {
    /// Starts `kind` on the stack, or resumes it when the stack shows it in progress
    /// and its driver is gone. `fingerprint` identifies a create's or update's template
    /// and parameters: a resume with other ones is refused (or, with `--force`, starts
    /// over).
    pub(super) async fn begin(
        client: &'c Client,
        id: &StackId,
        kind: OpKind,
        fingerprint: Option<String>,
        opts: &Options,
    ) -> Result<Driver<'c>, EngineError> {
        let me = driver_id();
        let action = kind.stack_action();
        let (name, resource) = match &kind {
            OpKind::Action { name, resource } => (Some(name.clone()), Some(resource.clone())),
            OpKind::Converge { .. } => (None, None),
            _ => (None, None),
        };
        let operation = || Operation {
            id: uuid_like(),
            action,
            name: name.clone(),
            resource: resource.clone(),
            started_at: OffsetDateTime::now_utc(),
            finished_at: None,
            driver: Some(me.clone()),
            seen_at: Some(OffsetDateTime::now_utc()),
            fingerprint: fingerprint.clone(),
            units: match &kind {
                OpKind::Converge { units, .. } => units.clone(),
                _ => Vec::new(),
            },
            no_follow: matches!(
                kind,
                OpKind::Converge {
                    no_follow: true,
                    ..
                }
            ),
        };
        let in_progress = StackStatus {
            action,
            status: OpStatus::InProgress,
            reason: None,
        };
        let mut waited = false;
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
                let op = operation();
                let put = PutStack {
                    expected_revision: None,
                    status: in_progress.clone(),
                    state: StackState {
                        operation: Some(op.clone()),
                        ..StackState::default()
                    },
                    changed_units: Some(BTreeMap::new()),
                };
                match client.put_stack(id, &put).await {
                    Ok(stack) => {
                        return Ok(Self::new(client, id, kind, op.id, me, stack, opts, false));
                    }
                    // Someone else created it meanwhile: look again.
                    Err(e) if e.status() == Some(409) => continue,
                    Err(e) => return Err(e.into()),
                }
            };
            let current = stack.state.operation.clone();
            if stack.status.status == OpStatus::InProgress {
                match current.filter(|op| kind.matches(op)) {
                    Some(op) if op.fingerprint == fingerprint || fingerprint.is_none() => {
                        if let Some(left) = holder_alive(&op) {
                            if waited {
                                return Err(EngineError::Refused(format!(
                                    "another flue process ({}) is driving this {} of stack {id}; wait for it, or stop it first",
                                    op.driver.as_deref().unwrap_or("unknown"),
                                    action
                                )));
                            }
                            (opts.report)(&Event::WaitingForDriver {
                                driver: op.driver.clone().unwrap_or_default(),
                                up_to: left,
                            });
                            tokio::time::sleep(left + Duration::from_millis(200)).await;
                            waited = true;
                            continue;
                        }
                        // Take the operation over: from now on only this process writes.
                        let mut state = head_of(&stack.state);
                        if let Some(op) = state.operation.as_mut() {
                            op.driver = Some(me.clone());
                            op.seen_at = Some(OffsetDateTime::now_utc());
                        }
                        let put = PutStack {
                            expected_revision: Some(stack.revision),
                            status: stack.status.clone(),
                            state,
                            changed_units: Some(BTreeMap::new()),
                        };
                        match client.put_stack(id, &put).await {
                            Ok(head) => {
                                let stack = with_units(head, stack.state.units);
                                let mut d =
                                    Self::new(client, id, kind, op.id, me, stack, opts, true);
                                d.adopt_dead_pending().await?;
                                return Ok(d);
                            }
                            Err(e) if e.status() == Some(409) => continue,
                            Err(e) => return Err(e.into()),
                        }
                    }
                    Some(_) if !opts.force => {
                        return Err(EngineError::Refused(format!(
                            "the unfinished {action} of stack {id} was started with another template or other parameters; run it again with those to resume it, or pass --force to start over with these"
                        )));
                    }
                    None if !opts.force => return Err(in_progress_refusal(id, &stack)),
                    // --force: a new operation takes over; the old driver stops at its next
                    // write. Not one that the stack's state forbids, though.
                    _ => {
                        if let Some(refusal) = force_refusal(id, &kind, stack.status.action) {
                            return Err(refusal);
                        }
                    }
                }
            } else if let Some(refusal) = state_refusal(id, &kind, &stack.status) {
                return Err(refusal);
            }
            let op = operation();
            let mut state = head_of(&stack.state);
            state.operation = Some(op.clone());
            let put = PutStack {
                expected_revision: Some(stack.revision),
                status: in_progress.clone(),
                state,
                changed_units: Some(BTreeMap::new()),
            };
            match client.put_stack(id, &put).await {
                Ok(head) => {
                    let stack = with_units(head, stack.state.units);
                    let mut d = Self::new(client, id, kind, op.id, me, stack, opts, false);
                    d.adopt_dead_pending().await?;
                    return Ok(d);
                }
                Err(e) if e.status() == Some(409) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// A driver for operation `op_id`; `resumed` when it continues an interrupted one
    /// (only reported).
    #[allow(clippy::too_many_arguments)]
    fn new(
        client: &'c Client,
        id: &StackId,
        kind: OpKind,
        op_id: String,
        me: String,
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
            me,
            stack,
            opts: opts.clone(),
            deployments: HashMap::new(),
            reads: HashMap::new(),
            fetched: HashMap::new(),
        }
    }

    /// Deployments planned by an operation that was taken over may exist and may
    /// still run: each is waited for (all at once, this driver's hold renewed while it
    /// waits) and recorded as the unit's own, so nothing it did is run again and a
    /// DELETE never overtakes it. An ad-hoc action run left unfinished is closed.
    pub(super) async fn adopt_dead_pending(&mut self) -> Result<(), EngineError> {
        let mut adopted: Vec<(String, String, Option<Deployment>)> = Vec::new();
        let mut waits = tokio::task::JoinSet::new();
        for (key, unit) in &self.stack.state.units {
            let Some(p) = unit.pending.as_ref().filter(|p| p.op_id != self.op_id) else {
                continue;
            };
            let found = match self.client.get_deployment(&p.deployment_id).await {
                Ok(d) => d,
                Err(e) if e.is_not_found() => {
                    adopted.push((key.clone(), p.op_id.clone(), None));
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let client = self.client.clone();
            let report = self.opts.report.clone();
            let (key, op) = (key.clone(), p.op_id.clone());
            waits.spawn(async move {
                let wait = Duration::from_secs(found.timeout_secs) + Duration::from_secs(120);
                let server = found.server_id.clone();
                let d = client
                    .wait_until_terminal(&found.id, wait, |d| {
                        report(&Event::Deployment {
                            unit: key.clone(),
                            action: d.action.to_string(),
                            server: server.clone(),
                            deployment: d.id.clone(),
                            status: d.status,
                            reason: d.status_reason.clone(),
                        });
                    })
                    .await;
                (key, op, d)
            });
        }
        let mut heartbeat =
            tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
        while !waits.is_empty() {
            tokio::select! {
                joined = waits.join_next() => {
                    let Some(joined) = joined else { break };
                    let (key, op, d) = joined.map_err(|e| {
                        EngineError::Refused(format!("waiting for a deployment failed unexpectedly: {e}"))
                    })?;
                    adopted.push((key, op, Some(d?)));
                }
                _ = heartbeat.tick() => self.heartbeat().await?,
            }
        }
        let current_op = self.op_id.clone();
        let stale_runs = self
            .stack
            .state
            .actions
            .iter()
            .any(|r| r.op_id != current_op && r.status == OpStatus::InProgress);
        if adopted.is_empty() && !stale_runs {
            return Ok(());
        }
        let keys: Vec<&str> = adopted.iter().map(|(k, _, _)| k.as_str()).collect();
        self.save_units(&keys, |s, _| {
            for (key, op, found) in &adopted {
                if let Some(d) = found
                    && let Some(run) = s.actions.iter_mut().find(|r| &r.op_id == op)
                {
                    run.results
                        .insert(key.clone(), action_result(d, d.status_reason.clone()));
                }
                let Some(unit) = s.units.get_mut(key) else {
                    continue;
                };
                unit.pending = None;
                let Some(d) = found else { continue };
                // A DELETE that ran to its end took the unit out of the stack.
                if d.status == DeploymentStatus::Complete && d.action.as_str() == "DELETE" {
                    s.units.remove(key);
                    continue;
                }
                record_deployment(unit, d);
            }
            // An ad-hoc action run whose operation was taken over ends here.
            for run in &mut s.actions {
                if run.op_id != current_op && run.status == OpStatus::InProgress {
                    let all_ok = !run.results.is_empty()
                        && run.results.values().all(|r| r.status == OpStatus::Complete);
                    run.status = if all_ok {
                        OpStatus::Complete
                    } else {
                        OpStatus::Failed
                    };
                }
            }
        })
        .await
    }

    /// Fetches the completed deployments of `keys` (for `get_attr`).
    pub(super) async fn fetch_completed(
        &mut self,
        keys: &BTreeSet<String>,
    ) -> Result<(), EngineError> {
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
    pub(super) async fn outputs(
        &mut self,
        ctx: &ApplyContext<'_>,
    ) -> Result<BTreeMap<String, Value>, EngineError> {
        let all: BTreeSet<String> = ctx.plan.units.keys().cloned().collect();
        self.fetch_completed(&all).await?;
        let resolver = self.resolver(ctx, HiddenOutputs::Placeholder);
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

    /// What `get_param`, `get_resource` and `get_attr` read for `ctx`: the stack as
    /// recorded and the completed deployments fetched so far.
    pub(super) fn resolver<'a>(
        &'a self,
        ctx: &'a ApplyContext<'_>,
        hidden_outputs: HiddenOutputs,
    ) -> RuntimeResolver<'a> {
        RuntimeResolver {
            template: ctx.template,
            params: ctx.params,
            plan: ctx.plan,
            state: &self.stack.state,
            deployments: &self.deployments,
            hidden_outputs,
            reads: Default::default(),
        }
    }

    /// Ends the operation: COMPLETE, or FAILED naming each failed unit.
    pub(super) async fn finish(
        mut self,
        failures: Vec<(String, String)>,
    ) -> Result<Stack, EngineError> {
        let action = self.kind.stack_action();
        let status = if failures.is_empty() {
            StackStatus {
                action,
                status: OpStatus::Complete,
                reason: None,
            }
        } else {
            let failed: Vec<&str> = failures
                .iter()
                .filter(|(_, r)| !r.starts_with("not run:"))
                .map(|(_, r)| r.as_str())
                .collect();
            // A bounded reason: the stack record must stay small whatever failed.
            let mut reason = failed[..failed.len().min(MAX_REASONS)].join("\n");
            if failed.len() > MAX_REASONS {
                reason.push_str(&format!(
                    "\n… and {} more failed units (flue stack show)",
                    failed.len() - MAX_REASONS
                ));
            }
            StackStatus {
                action,
                status: OpStatus::Failed,
                reason: Some(reason),
            }
        };
        let st = status.clone();
        self.save_units(&[], |s, status| {
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

/// Everything of `state` but its units: what a write that changes no unit sends.
pub(super) fn head_of(state: &StackState) -> StackState {
    StackState {
        parameters: state.parameters.clone(),
        hidden_parameters: state.hidden_parameters.clone(),
        operation: state.operation.clone(),
        units: BTreeMap::new(),
        outputs: state.outputs.clone(),
        actions: state.actions.clone(),
        mapped: state.mapped.clone(),
        converge: state.converge,
    }
}

/// The stack `head` (as a write answered it) with `units`, the driver's copy of them.
pub(super) fn with_units(mut head: Stack, units: BTreeMap<String, flue_proto::Unit>) -> Stack {
    head.state.units = units;
    head
}

/// The refusal of an operation while the stack shows another one in progress: which,
/// since when, and how to go on.
fn in_progress_refusal(id: &StackId, stack: &Stack) -> EngineError {
    let current = stack.state.operation.as_ref();
    let started = current
        .map(|op| format!(" (started {})", rfc3339(op.started_at)))
        .unwrap_or_default();
    let what = current.map_or_else(
        || stack.status.action.to_string().to_lowercase(),
        |op| {
            OpKind::from_operation(op)
                .map_or_else(|| op.action.to_string().to_lowercase(), |k| k.command())
        },
    );
    EngineError::Refused(format!(
        "stack {id} has a {} in progress{started}; run `flue stack {what}` again to resume it, or pass --force if its driver is gone",
        stack.status.action
    ))
}

/// How long the driver of an operation that stopped writing keeps its hold on it.
pub const LEASE: Duration = Duration::from_secs(15);

/// This process as an operation's driver: `host/pid/nonce`.
fn driver_id() -> String {
    format!(
        "{}/{}/{}",
        host_name(),
        std::process::id(),
        &uuid_like()[..8]
    )
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// How much longer the driver of `op` may still be alive: `None` once its lease ran
/// out, or at once when it ran on this host and its process is gone.
fn holder_alive(op: &Operation) -> Option<Duration> {
    let driver = op.driver.as_deref()?;
    let mut parts = driver.split('/');
    if let (Some(host), Some(pid)) = (parts.next(), parts.next())
        && host == host_name()
        && pid.parse::<u32>().is_ok()
        && !std::path::Path::new(&format!("/proc/{pid}")).exists()
    {
        return None;
    }
    let seen = op.seen_at?;
    let elapsed = OffsetDateTime::now_utc() - seen;
    let left = time::Duration::try_from(LEASE).ok()? - elapsed;
    Duration::try_from(left).ok().filter(|d| !d.is_zero())
}

/// Why `kind` may not start on a stack whose last operation ended with `status`.
fn state_refusal(id: &StackId, kind: &OpKind, status: &StackStatus) -> Option<EngineError> {
    let suspended = status.action == StackAction::Suspend
        || (status.action == StackAction::Resume && status.status == OpStatus::Failed);
    let refuse = |m: String| Some(EngineError::Refused(m));
    match kind {
        OpKind::Create
            if !(status.action == StackAction::Create && status.status == OpStatus::Failed) =>
        {
            refuse(format!(
                "stack {id} already exists ({status}); use `flue stack update`"
            ))
        }
        OpKind::Suspend
            if status.action == StackAction::Suspend && status.status == OpStatus::Complete =>
        {
            refuse(format!("stack {id} is already suspended"))
        }
        OpKind::Resume if !suspended => refuse(format!(
            "stack {id} is not suspended ({status}); nothing to resume"
        )),
        OpKind::Update | OpKind::Action { .. } | OpKind::Converge { .. } if suspended => refuse(
            format!("stack {id} is suspended ({status}); resume it first: flue stack resume {id}"),
        ),
        _ => None,
    }
}

/// Why `--force` may not start `kind` over an unfinished operation `current`: a
/// create only replaces a create, a resume only follows a suspend or resume, and an
/// update or action waits until an interrupted suspend or resume is settled.
fn force_refusal(id: &StackId, kind: &OpKind, current: StackAction) -> Option<EngineError> {
    let suspending = matches!(current, StackAction::Suspend | StackAction::Resume);
    let refused = match kind {
        OpKind::Create => current != StackAction::Create,
        OpKind::Resume => !suspending,
        OpKind::Update | OpKind::Action { .. } | OpKind::Converge { .. } => suspending,
        OpKind::Suspend | OpKind::Delete => false,
    };
    refused.then(|| {
        EngineError::Refused(format!(
            "stack {id} has an unfinished {current}; --force cannot turn it into a {}: {}",
            kind.stack_action(),
            match current {
                StackAction::Suspend | StackAction::Resume => {
                    format!("run `flue stack resume {id} --force` first")
                }
                _ => format!("run the {current} again to finish it, or delete the stack"),
            }
        ))
    })
}

/// A fresh operation id.
fn uuid_like() -> String {
    DeploymentId::random().to_string()
}

/// `t` as RFC 3339 text, for messages.
fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}
