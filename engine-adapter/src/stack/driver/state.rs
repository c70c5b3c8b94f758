//! The driver's hold on the stack record: starting, resuming or refusing an operation,
//! every write (compare-and-set on the revision), and the operation's end.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use flue_proto::{
    Deployment, DeploymentId, OpStatus, Operation, PutStack, Stack, StackAction, StackId,
    StackState, StackStatus,
};
use serde_json::Value;
use time::OffsetDateTime;

use super::plan::OpKind;
use super::{EngineError, Event, Options};
use crate::Client;
use crate::stack::functions;
use crate::stack::resolve::RuntimeResolver;
use crate::stack::template::{Parameters, Template};
use crate::stack::units::Plan;

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
    /// The stack record as last read or written.
    pub(super) stack: Stack,
    /// The caller's options.
    pub(super) opts: Options,
    /// Completed deployments fetched so far (for `get_attr`), by id.
    pub(super) deployments: HashMap<DeploymentId, Deployment>,
}

impl<'c> Driver<'c> {
    /// Starts `kind` on the stack, or resumes it when the stack shows it in progress.
    pub(super) async fn begin(
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
                    return Err(in_progress_refusal(id, &stack));
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

    /// A driver for operation `op_id`; `resumed` when it continues an interrupted one
    /// (only reported).
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
    pub(super) async fn save(
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
    pub(super) async fn adopt_dead_pending(&mut self) -> Result<(), EngineError> {
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

/// A fresh operation id.
fn uuid_like() -> String {
    DeploymentId::random().to_string()
}

/// `t` as RFC 3339 text, for messages.
fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}
