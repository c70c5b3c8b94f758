//! Recording each step in the stack: every write (compare-and-set on the revision,
//! only the units it changes, at most [`WAVE_UNITS`] of them per request), the ids a
//! deployment will use, planned before it is created, and how the step ended (for
//! steps that start or end together, in waves: `wave.rs`).

use std::collections::BTreeMap;

use flue_proto::{
    Action, ActionResult, ConfigId, Deployment, DeploymentId, DeploymentStatus, LIFECYCLE_ACTIONS,
    OpStatus, Pending, PutStack, StackState, StackStatus, Unit,
};
use time::OffsetDateTime;

use super::plan::OpKind;
use super::state::{Driver, head_of, with_units};
use super::{EngineError, Event};

/// How many times one write (or one step's deployment call) is tried again after a 503.
pub(super) const BUSY_RETRIES: u32 = 5;
/// The wait before the first try again (then twice it, …).
pub(super) const BUSY_BACKOFF: std::time::Duration = std::time::Duration::from_millis(500);
/// The most units one write sends: a wave of members planned or finished together is
/// split into writes of this many, so that a request stays small and quick (its unit
/// reads and writes, and their events, are done within the request) whatever the
/// group's size. A write the gateway refuses as too large (413) is halved again.
pub(super) const WAVE_UNITS: usize = 100;

/// How one write went.
enum Put {
    /// Stored; the driver's copy is the stack as stored.
    Stored,
    /// Not stored: to be computed again from the driver's (re-read) copy and sent.
    Again,
    /// Refused as too large (413) while it named more than one unit: to be sent in
    /// smaller parts.
    TooLarge,
}

/// Units a write changes, by key: the new unit, or `None` when it leaves the stack.
type Changed = BTreeMap<String, Option<Unit>>;

impl Driver<'_> {
    /// Applies `change` to the stored state with compare-and-set, re-reading and
    /// re-applying it when another writer got there first. `change` must give the
    /// same result when applied to a state it was already applied to. Every write
    /// also renews this driver's hold on the operation; a driver whose operation was
    /// taken over stops here.
    ///
    /// `change` may touch any unit, so every unit is compared to find the ones to
    /// send: for changes of the whole plan; a step uses [`Driver::save_units`].
    pub(super) async fn save(
        &mut self,
        change: impl Fn(&mut StackState, &mut StackStatus),
    ) -> Result<(), EngineError> {
        let mut busy = 0;
        let mut room = WAVE_UNITS;
        loop {
            let mut state = self.stack.state.clone();
            let mut status = self.stack.status.clone();
            change(&mut state, &mut status);
            let old = &self.stack.state.units;
            let mut changed: Changed = old
                .keys()
                .filter(|k| !state.units.contains_key(*k))
                .map(|k| (k.clone(), None))
                .collect();
            for (key, unit) in std::mem::take(&mut state.units) {
                if old.get(&key) != Some(&unit) {
                    changed.insert(key, Some(unit));
                }
            }
            // A change of many units (a whole plan placed) goes in parts: the first
            // carries the new head, each next one is computed again from the stack as
            // stored, so only what is still missing is sent. `change` is idempotent,
            // so a run interrupted between parts places the rest when resumed.
            let last = changed.len() <= room;
            if !last {
                let first_left = changed.keys().nth(room).cloned().expect("more than room");
                changed.split_off(&first_left);
            }
            match self.put(state, status, changed, &mut busy).await? {
                Put::Stored if last => return Ok(()),
                Put::Stored | Put::Again => {}
                Put::TooLarge => room = (room / 2).max(1),
            }
        }
    }

    /// [`Driver::save`] for a `change` that touches the head and at most the units
    /// `keys`: only those are copied, compared and sent, so a step costs O(1) whatever
    /// the stack's size, and a wave of `keys` costs one write per [`WAVE_UNITS`].
    ///
    /// With more keys than one write takes, `change` is applied once per part to the
    /// head and that part's units (the others are not in the state it is given), so it
    /// must leave a unit it does not find alone; its head changes are stored with the
    /// first part and found already made by the next ones.
    pub(super) async fn save_units(
        &mut self,
        keys: &[&str],
        change: impl Fn(&mut StackState, &mut StackStatus),
    ) -> Result<(), EngineError> {
        let mut busy = 0;
        let mut room = WAVE_UNITS;
        let mut left = keys;
        loop {
            let part = &left[..left.len().min(room)];
            let mut state = head_of(&self.stack.state);
            for key in part {
                if let Some(unit) = self.stack.state.units.get(*key) {
                    state.units.insert((*key).to_owned(), unit.clone());
                }
            }
            let mut status = self.stack.status.clone();
            change(&mut state, &mut status);
            let mut changed = Changed::new();
            for key in part {
                let new = state.units.remove(*key);
                if self.stack.state.units.get(*key) != new.as_ref() {
                    changed.insert((*key).to_owned(), new);
                }
            }
            match self.put(state, status, changed, &mut busy).await? {
                Put::Stored => {
                    left = &left[part.len()..];
                    if left.is_empty() {
                        return Ok(());
                    }
                }
                Put::Again => {}
                Put::TooLarge => room = (room / 2).max(1),
            }
        }
    }

    /// Renews this driver's hold on the operation while it waits.
    pub(super) async fn heartbeat(&mut self) -> Result<(), EngineError> {
        self.save_units(&[], |_, _| {}).await
    }

    /// One compare-and-set write of the head `state` (its units ignored) and the units
    /// `changed`: [`Put::Stored`] when stored (and the driver's copy updated),
    /// [`Put::Again`] when another writer got there first and the driver read the stack
    /// again, or when the gateway answered 503 (its broker slower than its deadline)
    /// and the write is to be tried again, at most [`BUSY_RETRIES`] times (`busy`
    /// counts them), and [`Put::TooLarge`] when a write of several units was refused
    /// as larger than the gateway takes (413).
    ///
    /// Trying again is safe: a write the gateway did not finish either changed nothing
    /// (it is done again) or moved the stack's revision on (the next try is a 409, and
    /// the change is re-applied to the stack as stored, units already written
    /// comparing equal).
    async fn put(
        &mut self,
        mut state: StackState,
        status: StackStatus,
        changed: Changed,
        busy: &mut u32,
    ) -> Result<Put, EngineError> {
        let several = changed.len() > 1;
        state.units.clear();
        if let Some(op) = state.operation.as_mut() {
            op.seen_at = Some(OffsetDateTime::now_utc());
        }
        let put = PutStack {
            expected_revision: Some(self.stack.revision),
            status,
            state,
            changed_units: Some(changed),
        };
        match self.client.put_stack(&self.id, &put).await {
            Ok(head) => {
                let mut units = std::mem::take(&mut self.stack.state.units);
                for (key, unit) in put.changed_units.into_iter().flatten() {
                    match unit {
                        Some(unit) => units.insert(key, unit),
                        None => units.remove(&key),
                    };
                }
                self.stack = with_units(head, units);
                Ok(Put::Stored)
            }
            Err(e) if e.status() == Some(409) => {
                let fresh = self.client.get_stack(&self.id).await?;
                let op = fresh.state.operation.as_ref();
                let ours = op.is_some_and(|o| {
                    o.id == self.op_id && o.driver.as_deref() == Some(self.me.as_str())
                });
                if !ours {
                    return Err(EngineError::Superseded {
                        stack: self.id.clone(),
                        action: self.kind.stack_action(),
                        by: op
                            .and_then(|o| o.driver.clone())
                            .unwrap_or_else(|| "another operation".to_owned()),
                    });
                }
                self.stack = fresh;
                Ok(Put::Again)
            }
            Err(e) if e.status() == Some(503) && *busy < BUSY_RETRIES => {
                *busy += 1;
                // Backoff, not synchronisation: the gateway said "retry later".
                tokio::time::sleep(BUSY_BACKOFF * *busy).await;
                Ok(Put::Again)
            }
            // Refused before anything was stored (the body is read first): send less.
            Err(e) if e.status() == Some(413) && several => Ok(Put::TooLarge),
            Err(e) => Err(e.into()),
        }
    }

    /// The ids this operation uses for `key`'s deployment: the recorded ones when an
    /// interrupted run planned them, else a new deployment id and `new_config` (the id
    /// of the config the deployment creates; `None` when it runs a recorded config),
    /// recorded before use.
    pub(super) async fn plan_pending(
        &mut self,
        key: &str,
        action: &str,
        new_config: Option<ConfigId>,
    ) -> Result<Pending, EngineError> {
        let op = self.op_id.clone();
        let planned = |u: &Unit| planned_by(u, &op, action);
        if let Some(p) = self.stack.state.units.get(key).and_then(planned) {
            return Ok(p);
        }
        let fresh = Pending {
            op_id: op.clone(),
            action: action.to_owned(),
            deployment_id: DeploymentId::random(),
            config_id: new_config,
        };
        let lifecycle = !matches!(self.kind, OpKind::Action { .. });
        self.save_units(&[key], |s, _| {
            if let Some(u) = s.units.get_mut(key)
                && planned(u).is_none()
            {
                plan_into(u, &fresh, lifecycle);
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

    /// Records a step that failed before its deployment was created.
    pub(super) async fn record_failure(
        &mut self,
        key: &str,
        reason: &str,
    ) -> Result<(), EngineError> {
        let op = self.op_id.clone();
        let lifecycle = !matches!(self.kind, OpKind::Action { .. });
        (self.opts.report)(&Event::NotRun {
            unit: key.to_owned(),
            reason: reason.to_owned(),
        });
        let short = unit_reason(reason);
        self.save_units(&[key], |s, _| {
            if let Some(run) = s.actions.iter_mut().find(|a| a.op_id == op)
                && let Some(u) = s.units.get(key)
                && let Some(p) = &u.pending
            {
                run.results.insert(
                    key.to_owned(),
                    ActionResult {
                        deployment_id: p.deployment_id.clone(),
                        status: OpStatus::Failed,
                        reason: Some(short.clone()),
                    },
                );
            }
            if let Some(u) = s.units.get_mut(key) {
                u.pending = None;
                u.op_id = Some(op.clone());
                if lifecycle {
                    u.status = OpStatus::Failed;
                }
                u.status_reason = Some(short.clone());
            }
        })
        .await
    }
}

/// The deployment operation `op` planned for unit `u` and `action`, if any.
pub(super) fn planned_by(u: &Unit, op: &str, action: &str) -> Option<Pending> {
    u.pending
        .as_ref()
        .filter(|p| p.op_id == op && p.action == action)
        .cloned()
}

/// Records `fresh` as unit `u`'s planned deployment; in a lifecycle operation the
/// unit is now in progress. Its action changes only once a deployment really ran (an
/// UPDATE that finds nothing changed leaves it as it was).
pub(super) fn plan_into(u: &mut Unit, fresh: &Pending, lifecycle: bool) {
    u.pending = Some(fresh.clone());
    if lifecycle {
        u.status = OpStatus::InProgress;
        u.status_reason = None;
    }
}

/// Longest reason a unit keeps in the stack record (the stack's status and the
/// deployment itself keep the whole story).
pub(super) const MAX_UNIT_REASON: usize = 300;

/// The first line of `reason`, cut at [`MAX_UNIT_REASON`] bytes.
pub(super) fn unit_reason(reason: &str) -> String {
    let first = reason.lines().next().unwrap_or_default();
    if first.len() <= MAX_UNIT_REASON {
        return first.to_owned();
    }
    format!("{}…", flue_proto::text::head(first, MAX_UNIT_REASON))
}

/// An operation status from how deployment `d` ended.
pub(super) fn op_status(d: &Deployment) -> OpStatus {
    if d.status == DeploymentStatus::Complete {
        OpStatus::Complete
    } else {
        OpStatus::Failed
    }
}

/// What an ad-hoc action run keeps of its deployment `d` on one unit.
pub(super) fn action_result(d: &Deployment, reason: Option<String>) -> ActionResult {
    ActionResult {
        deployment_id: d.id.clone(),
        status: op_status(d),
        reason,
    }
}

/// Records deployment `d`, which ran to its end, as unit `u`'s latest: the unit's
/// action and status (for a lifecycle action), its last deployment, and for a CREATE
/// or UPDATE that completed, the baseline later updates compare with.
pub(super) fn record_deployment(u: &mut Unit, d: &Deployment) {
    let lifecycle_run = matches!(d.action.as_str(), Action::CREATE | Action::UPDATE);
    u.pending = None;
    u.current = Some(d.id.clone());
    if lifecycle_run || u.last.is_none() {
        u.last = Some(d.id.clone());
        u.last_config = Some(d.config_id.clone());
    }
    if lifecycle_run && d.status == DeploymentStatus::Complete {
        u.baseline = Some(d.id.clone());
        u.baseline_config = Some(d.config_id.clone());
    }
    if LIFECYCLE_ACTIONS.contains(&d.action.as_str()) {
        u.action = d.action.to_string();
        u.status = op_status(d);
    }
}
