//! Steps that start or end together, recorded together: the ids of a wave of
//! deployments planned in one write, and the ends of the deployments that finished
//! meanwhile recorded in one write, so that a group of N members costs about N /
//! `WAVE_UNITS` writes to plan and few more than its waves of ends to record, rather
//! than two writes per member one after another.

use std::collections::BTreeMap;

use flue_proto::{
    ConfigId, Deployment, DeploymentId, DeploymentStatus, InputSource, OpStatus, Pending,
    StackState,
};

use super::execute::{self, Outcome};
use super::plan::{OpKind, Step, StepKind};
use super::record::{action_result, plan_into, planned_by, record_deployment, unit_reason};
use super::state::Driver;
use super::{EngineError, Event};

/// How one finished step is recorded in its unit.
enum Ending {
    /// Nothing ran: the unit is complete as it was (its inputs now read `reads`, when
    /// the step resolved them).
    Unchanged {
        /// What its inputs read.
        reads: Option<BTreeMap<String, InputSource>>,
    },
    /// Its deployment ran to this end.
    Ran {
        /// What its inputs read, when the step resolved them: the unit's once the
        /// deployment is its baseline.
        reads: Option<BTreeMap<String, InputSource>>,
        /// The deployment as it ended.
        deployment: Box<Deployment>,
        /// The unit's one-line reason when it failed.
        reason: Option<String>,
        /// The unit leaves the stack once this completes.
        removal: bool,
    },
}

impl Driver<'_> {
    /// Plans the deployments of `steps` about to start (those that need one and have
    /// none planned by this operation yet), as [`Driver::plan_pending`] would one by
    /// one, but a wave of units per write: a group of N members starting together costs
    /// N / `WAVE_UNITS` writes instead of N. The ids are drawn before the write, so a
    /// write re-applied after a conflict records the same ones.
    pub(super) async fn plan_wave(&mut self, steps: &[&Step]) -> Result<(), EngineError> {
        let op = self.op_id.clone();
        let lifecycle = !matches!(self.kind, OpKind::Action { .. });
        let fresh: BTreeMap<String, Pending> = steps
            .iter()
            .filter_map(|step| {
                let (action, config_id) = match &step.kind {
                    StepKind::Apply { action, .. } => {
                        ((*action).to_owned(), Some(ConfigId::random()))
                    }
                    StepKind::Reuse { action, .. } => (action.clone(), None),
                    // Decided when it starts: it may need no deployment.
                    StepKind::Follow { .. }
                    | StepKind::ReportInputs
                    | StepKind::Drop
                    | StepKind::Skip => return None,
                };
                let unit = self.stack.state.units.get(&step.key)?;
                if planned_by(unit, &op, &action).is_some() {
                    return None;
                }
                let pending = Pending {
                    op_id: op.clone(),
                    action,
                    deployment_id: DeploymentId::random(),
                    config_id,
                };
                Some((step.key.clone(), pending))
            })
            .collect();
        if fresh.is_empty() {
            return Ok(());
        }
        let keys: Vec<&str> = fresh.keys().map(String::as_str).collect();
        self.save_units(&keys, |s, _| {
            for (key, pending) in &fresh {
                if let Some(u) = s.units.get_mut(key)
                    && planned_by(u, &op, &pending.action).is_none()
                {
                    plan_into(u, pending, lifecycle);
                }
            }
        })
        .await
    }

    /// Records steps whose deployments ended (or found nothing changed), all in one
    /// write per `WAVE_UNITS`; each step comes back with `Some(reason)` when it failed.
    pub(super) async fn finished(
        &mut self,
        ends: Vec<(Step, Outcome)>,
    ) -> Result<Vec<(Step, Option<String>)>, EngineError> {
        let op = self.op_id.clone();
        let action_run = matches!(self.kind, OpKind::Action { .. });
        let mut endings: BTreeMap<String, Ending> = BTreeMap::new();
        let mut results = Vec::with_capacity(ends.len());
        for (step, outcome) in ends {
            let key = step.key.clone();
            let reads = self.reads.remove(&key);
            let deployment = match outcome {
                Outcome::Unchanged => {
                    (self.opts.report)(&Event::Unchanged { unit: key.clone() });
                    endings.insert(key, Ending::Unchanged { reads });
                    results.push((step, None));
                    continue;
                }
                Outcome::Finished(d) => d,
            };
            let complete = deployment.status == DeploymentStatus::Complete;
            let reason = (!complete).then(|| execute::failure_reason(&key, &deployment));
            if complete {
                self.deployments
                    .insert(deployment.id.clone(), (*deployment).clone());
            }
            let ending = Ending::Ran {
                reads,
                // The unit keeps one line; the stack's reason and the deployment keep
                // the rest.
                reason: reason.as_deref().map(unit_reason),
                removal: matches!(step.kind, StepKind::Reuse { removal: true, .. }),
                deployment,
            };
            endings.insert(key, ending);
            results.push((step, reason));
        }
        if endings.is_empty() {
            return Ok(results);
        }
        let keys: Vec<&str> = endings.keys().map(String::as_str).collect();
        self.save_units(&keys, |s, _| {
            for (key, ending) in &endings {
                record_ending(s, key, ending, &op, action_run);
            }
        })
        .await?;
        for (key, ending) in &endings {
            if let Ending::Ran {
                deployment,
                removal: true,
                ..
            } = ending
                && deployment.status == DeploymentStatus::Complete
            {
                (self.opts.report)(&Event::Removed { unit: key.clone() });
            }
        }
        Ok(results)
    }
}

/// Records how one step ended in the stack (its unit and, for an ad-hoc action, the
/// action run's results); a unit not in `s` is left alone.
fn record_ending(s: &mut StackState, key: &str, ending: &Ending, op: &str, action_run: bool) {
    let (d, reason, removal, reads) = match ending {
        Ending::Unchanged { reads } => {
            if let Some(u) = s.units.get_mut(key) {
                u.pending = None;
                u.op_id = Some(op.to_owned());
                u.status = OpStatus::Complete;
                u.status_reason = None;
                // The gateway found the values the same: what they were read from now.
                if let Some(reads) = reads {
                    u.inputs_read = reads.clone();
                }
            }
            return;
        }
        Ending::Ran {
            deployment,
            reason,
            removal,
            reads,
        } => (deployment, reason, *removal, reads),
    };
    if action_run {
        if let Some(run) = s.actions.iter_mut().find(|a| a.op_id == op) {
            run.results
                .insert(key.to_owned(), action_result(d, reason.clone()));
        }
        if let Some(u) = s.units.get_mut(key) {
            u.pending = None;
            u.op_id = Some(op.to_owned());
            u.current = Some(d.id.clone());
        }
        return;
    }
    if removal && d.status == DeploymentStatus::Complete {
        s.units.remove(key);
        return;
    }
    let Some(u) = s.units.get_mut(key) else {
        return;
    };
    record_deployment(u, d);
    if let Some(reads) = reads
        && u.baseline.as_ref() == Some(&d.id)
    {
        u.inputs_read = reads.clone();
    }
    u.op_id = Some(op.to_owned());
    u.status_reason = reason.clone();
}
