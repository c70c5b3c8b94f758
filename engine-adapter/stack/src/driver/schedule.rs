//! The scheduler: runs an operation's steps in dependency order, independent ones in
//! parallel, rolling groups batch by batch; a failed unit's dependents do not run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use flue_proto::OpStatus;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::execute::{Outcome, StartError};
use super::plan::Step;
use super::record::WAVE_UNITS;
use super::state::{ApplyContext, Driver};
use super::{EngineError, Event};

/// How often a driver writes to the stack record while it waits, renewing its hold on
/// the operation (see [`super::state::LEASE`]).
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// Deployments being found or created at once (their waits are not counted).
const CREATING_AT_ONCE: usize = 32;
use flue_client::ClientError;

impl Driver<'_> {
    /// Runs `steps` in dependency order (and rolling batches), independent ones in
    /// parallel. Returns the failures, each `(unit, reason)`; a failed unit's
    /// dependents do not run, independent branches finish.
    pub(super) async fn run(
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
        let mut batches = Batches::new(waiting.values());
        let mut heartbeat = tokio::time::interval_at(Instant::now() + HEARTBEAT, HEARTBEAT);
        let creating = Arc::new(Semaphore::new(CREATING_AT_ONCE));
        // Units the interrupted run already finished.
        for (key, status) in self.done_before(&waiting) {
            let step = waiting.remove(&key).expect("present");
            (self.opts.report)(&Event::AlreadyDone {
                unit: key.clone(),
                status,
            });
            if status == OpStatus::Failed {
                batches.fail(&step);
                let reason = self.failure_before(&key).await?;
                failures.push((key.clone(), reason));
                bad.insert(key);
            } else {
                batches.finish(&step, false);
                ok.insert(key);
            }
        }

        loop {
            let mut progressed = false;
            // Steps whose dependencies failed never run, nor do later batches of a
            // rolling group one of whose batches failed (as in Heat).
            let blocked: Vec<(String, String)> = waiting
                .iter()
                .filter_map(|(k, s)| {
                    let reason = s
                        .after
                        .iter()
                        .find(|a| bad.contains(*a))
                        .map(|a| format!("not run: depends on {a}, which failed"))
                        .or_else(|| batches.failed_before(s))?;
                    Some((k.clone(), reason))
                })
                .collect();
            for (key, reason) in blocked {
                let step = waiting.remove(&key).expect("present");
                batches.finish(&step, false);
                (self.opts.report)(&Event::NotRun {
                    unit: key.clone(),
                    reason: reason.clone(),
                });
                self.save_units(&[&key], |s, _| {
                    if let Some(u) = s.units.get_mut(&key) {
                        u.status_reason = Some(reason.clone());
                    }
                })
                .await?;
                failures.push((key.clone(), reason));
                bad.insert(key);
                progressed = true;
            }

            let now = Instant::now();
            let mut wake: Option<Instant> = None;
            let mut pausing: Vec<(String, usize, Duration)> = Vec::new();
            let ready: Vec<String> = waiting
                .iter()
                .filter(|(_, s)| {
                    s.after.iter().all(|a| {
                        ok.contains(a) || (!bad.contains(a) && !known(a, &waiting, &running_steps))
                    })
                })
                .filter(|(_, s)| match batches.gate(s) {
                    Gate::Open => true,
                    Gate::Closed => false,
                    Gate::At(t) if t <= now => true,
                    Gate::At(t) => {
                        wake = Some(wake.map_or(t, |w| w.min(t)));
                        if let Some((group, b)) = &s.batch {
                            pausing.push((group.clone(), b.index, b.pause));
                        }
                        false
                    }
                })
                .map(|(k, _)| k.clone())
                .collect();
            for (group, batch, pause) in pausing {
                if batches.announce(&group, batch) {
                    (self.opts.report)(&Event::Pausing {
                        group,
                        batch,
                        pause,
                    });
                }
            }
            for (i, key) in ready.iter().enumerate() {
                // The ids of the next wave of deployments about to start, recorded in
                // one write (each start then finds its own); its deployments are created
                // while the next wave is planned.
                if i % WAVE_UNITS == 0 {
                    let wave: Vec<&Step> = ready[i..]
                        .iter()
                        .take(WAVE_UNITS)
                        .filter_map(|k| waiting.get(k))
                        .collect();
                    self.plan_wave(&wave).await?;
                }
                let key = key.clone();
                progressed = true;
                let step = waiting.remove(&key).expect("present");
                match self.start(&step, ctx, &creating, &mut running).await {
                    Ok(true) => {
                        running_steps.insert(key, step);
                    }
                    Ok(false) => {
                        batches.finish(&step, false);
                        ok.insert(key);
                    }
                    Err(StartError::Engine(e)) => return Err(e),
                    Err(StartError::Failed(reason)) => {
                        self.record_failure(&key, &reason).await?;
                        failures.push((key.clone(), reason));
                        batches.fail(&step);
                        bad.insert(key);
                    }
                }
            }
            if running.is_empty() {
                if waiting.is_empty() {
                    break;
                }
                if progressed {
                    continue;
                }
                match wake {
                    Some(t) => {
                        tokio::select! {
                            _ = tokio::time::sleep_until(t) => {}
                            _ = heartbeat.tick() => self.heartbeat().await?,
                        }
                        continue;
                    }
                    None => {
                        // Nothing runs, nothing can start, no pause to wait out: only an
                        // inconsistent plan gets here. Never spin.
                        for key in waiting.keys() {
                            failures.push((key.clone(), "not run: unmet dependencies".into()));
                        }
                        break;
                    }
                }
            }
            let sleep_until = wake.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            let joined = tokio::select! {
                j = running.join_next() => j,
                _ = tokio::time::sleep_until(sleep_until) => continue,
                _ = heartbeat.tick() => {
                    self.heartbeat().await?;
                    continue;
                }
            };
            let Some(joined) = joined else { continue };
            // Every deployment that ended meanwhile is recorded with this one, in one
            // write per wave rather than one each.
            let mut joined = vec![joined];
            while let Some(more) = running.try_join_next() {
                joined.push(more);
            }
            let mut ends = Vec::with_capacity(joined.len());
            let mut ran = BTreeSet::new();
            for joined in joined {
                let (key, result) = joined.map_err(|e| {
                    EngineError::Refused(format!("a deployment task failed unexpectedly: {e}"))
                })?;
                let step = running_steps.remove(&key).expect("running step");
                match result {
                    Ok(outcome) => {
                        if !matches!(outcome, Outcome::Unchanged) {
                            ran.insert(key);
                        }
                        ends.push((step, outcome));
                    }
                    // The gateway refused this unit's deployment (a 4xx): the unit fails,
                    // the others go on. Anything else (unreachable, a 5xx the step's own
                    // retries did not get past) stops the run, to be resumed.
                    Err(e) if e.status().is_some_and(|s| (400..500).contains(&s)) => {
                        let reason = format!("{key}: the gateway refused its deployment: {e}");
                        self.record_failure(&key, &reason).await?;
                        failures.push((key.clone(), reason));
                        batches.fail(&step);
                        bad.insert(key);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            for (step, failed) in self.finished(ends).await? {
                match failed {
                    None => {
                        batches.finish(&step, ran.contains(&step.key));
                        ok.insert(step.key.clone());
                    }
                    Some(reason) => {
                        failures.push((step.key.clone(), reason));
                        batches.fail(&step);
                        bad.insert(step.key.clone());
                    }
                }
            }
        }
        Ok(failures)
    }

    /// The stack's failure reason for a unit that failed before an interruption: from
    /// its deployment when there is one (with its stderr), else its own short reason.
    async fn failure_before(&self, key: &str) -> Result<String, EngineError> {
        let unit = &self.stack.state.units[key];
        if let Some(id) = &unit.current {
            match self.client.get_deployment(id).await {
                Ok(d) if d.status == flue_proto::DeploymentStatus::Failed => {
                    return Ok(super::execute::failure_reason(key, &d));
                }
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(unit.status_reason.clone().unwrap_or_default())
    }

    /// The steps of `waiting` that the interrupted run of this operation already
    /// finished, and how each ended.
    fn done_before(&self, waiting: &BTreeMap<String, Step>) -> Vec<(String, OpStatus)> {
        let state = &self.stack.state;
        let run = state.actions.iter().find(|a| a.op_id == self.op_id);
        waiting
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
            .collect()
    }
}

/// True when `key` is a step of this run (a dependency outside it is satisfied).
fn known(key: &str, waiting: &BTreeMap<String, Step>, running: &BTreeMap<String, Step>) -> bool {
    waiting.contains_key(key) || running.contains_key(key)
}

/// Progress of one rolling batch.
#[derive(Debug, Default)]
pub(super) struct BatchState {
    /// Steps of the batch not finished yet.
    pub(super) left: usize,
    /// True once one of its steps ran a deployment (or failed to start one).
    pub(super) ran: bool,
    /// True once the pause before it was reported.
    pub(super) announced: bool,
    /// True once one of its steps failed: later batches do not run.
    pub(super) failed: bool,
    /// When its last step finished.
    pub(super) finished_at: Option<Instant>,
}

/// Whether a step of a rolling batch may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gate {
    /// Now.
    Open,
    /// Not until an earlier batch is done.
    Closed,
    /// Once the pause after the previous batch is over.
    At(Instant),
}

/// The rolling batches of one run: per group, batch index to its progress.
#[derive(Debug, Default)]
pub(super) struct Batches(BTreeMap<String, BTreeMap<usize, BatchState>>);

impl Batches {
    /// Counts the steps of each batch among `steps`.
    pub(super) fn new<'a>(steps: impl Iterator<Item = &'a Step>) -> Self {
        let mut batches = Self::default();
        for step in steps {
            if let Some((group, b)) = &step.batch {
                let e = batches
                    .0
                    .entry(group.clone())
                    .or_default()
                    .entry(b.index)
                    .or_default();
                e.left += 1;
            }
        }
        batches
    }

    /// Whether `step` may start; a step outside any batch always may.
    pub(super) fn gate(&self, step: &Step) -> Gate {
        match &step.batch {
            None => Gate::Open,
            Some((group, b)) => batch_gate(&self.0[group], b.index, b.pause),
        }
    }

    /// Counts `step` as finished; `ran` when it ran a deployment (or failed to start
    /// one), which makes the next batch pause.
    pub(super) fn finish(&mut self, step: &Step, ran: bool) {
        if let Some((group, b)) = &step.batch
            && let Some(state) = self.0.get_mut(group).and_then(|g| g.get_mut(&b.index))
        {
            state.left = state.left.saturating_sub(1);
            state.ran |= ran;
            state.finished_at = Some(Instant::now());
        }
    }

    /// Counts `step` as finished and failed: the later batches of its group do not run.
    pub(super) fn fail(&mut self, step: &Step) {
        self.finish(step, true);
        if let Some((group, b)) = &step.batch
            && let Some(state) = self.0.get_mut(group).and_then(|g| g.get_mut(&b.index))
        {
            state.failed = true;
        }
    }

    /// Why `step` may not run: an earlier batch of its group failed.
    pub(super) fn failed_before(&self, step: &Step) -> Option<String> {
        let (group, b) = step.batch.as_ref()?;
        let (index, _) = self
            .0
            .get(group)?
            .range(..b.index)
            .find(|(_, s)| s.failed)?;
        Some(format!("not run: batch {} of {group} failed", index + 1))
    }

    /// True the first time it is called for batch `batch` of `group`: its pause is
    /// reported once.
    pub(super) fn announce(&mut self, group: &str, batch: usize) -> bool {
        match self.0.get_mut(group).and_then(|g| g.get_mut(&batch)) {
            Some(state) if !state.announced => {
                state.announced = true;
                true
            }
            _ => false,
        }
    }
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
