//! The model behind `flue watch`: the rows ([`Row`]), the stack's status or the server's
//! presence, and how each event changes them, described as the lines printed when not on
//! a terminal.

use flue_proto::event::{
    DeploymentEventData, EventKind, MemberEventData, OutputStream, ProgressEventData,
    ServerEventData, StackEventData,
};
use flue_proto::{CloudEvent, DeploymentId, EventType, ServerId};
use serde::de::DeserializeOwned;

use super::row::{Row, State, Target};
use crate::Outcome;

/// Everything shown.
#[derive(Debug, Clone)]
pub(super) struct View {
    /// What is watched.
    pub(super) target: Target,
    /// The stack's status (`CREATE_IN_PROGRESS`) or the server's presence (`online`).
    pub(super) status: Option<String>,
    /// Why (a failed stack, an offline server).
    pub(super) reason: Option<String>,
    /// How the stack's operation ended, once it has.
    pub(super) ended: Option<Outcome>,
    /// One per deployment stream, in display order.
    pub(super) rows: Vec<Row>,
    /// A connection problem or missed events, shown under the title.
    pub(super) note: Option<String>,
    /// A deployment seen running during the watch failed.
    failed: bool,
}

impl View {
    /// An empty view of `target`.
    pub(super) fn new(target: Target) -> View {
        View {
            target,
            status: None,
            reason: None,
            ended: None,
            rows: Vec::new(),
            note: None,
            failed: false,
        }
    }

    /// Sets the stack's status (and forgets how a previous operation ended).
    pub(super) fn set_stack_status(&mut self, status: String, reason: Option<String>) {
        self.status = Some(status);
        self.reason = reason;
    }

    /// `stack shop: CREATE_IN_PROGRESS`, `server web1: online`.
    pub(super) fn title(&self) -> String {
        let what = match &self.target {
            Target::Stack(id) => format!("stack {id}"),
            Target::Server(id) => format!("server {id}"),
        };
        let mut title = format!("{what}: {}", self.status.as_deref().unwrap_or("?"));
        if let Some(reason) = &self.reason {
            title.push_str(&format!(" ({})", reason.lines().next().unwrap_or_default()));
        }
        title
    }

    /// The lines describing the view as loaded: the title, then the rows still running
    /// (every unit, for a stack).
    pub(super) fn summary(&self) -> Vec<String> {
        let stack = matches!(self.target, Target::Stack(_));
        std::iter::once(self.title())
            .chain(
                self.rows
                    .iter()
                    .filter(|r| stack || !r.state.is_terminal())
                    .map(|r| r.line(&self.target)),
            )
            .collect()
    }

    /// With `--until-complete`: how the watch ends, once it does. A stack ends with its
    /// operation; a server once none of its deployments is queued or running.
    pub(super) fn finished(&self) -> Option<Outcome> {
        match self.target {
            Target::Stack(_) => self.ended,
            Target::Server(_) if self.rows.iter().any(|r| !r.state.is_terminal()) => None,
            Target::Server(_) if self.failed => Some(Outcome::DeploymentFailed),
            Target::Server(_) => Some(Outcome::Success),
        }
    }

    /// Applies one event; returns the lines describing what changed.
    pub(super) fn apply(&mut self, event: &CloudEvent) -> Vec<String> {
        match (event.ty.kind(), &self.target) {
            (EventKind::Deployment, _) if event.ty == EventType::DeploymentProgress => {
                data(event).map_or_else(Vec::new, |d| self.progress(&d))
            }
            (EventKind::Deployment, _) => {
                data(event).map_or_else(Vec::new, |d| self.deployment(event.ty, &d))
            }
            (EventKind::Stack, Target::Stack(_)) => {
                data(event).map_or_else(Vec::new, |d| self.stack(event.ty, &d))
            }
            (EventKind::Group, Target::Stack(_)) => data(event).map_or_else(Vec::new, |d| {
                let d: MemberEventData = d;
                let verb = match event.ty {
                    EventType::GroupMemberJoined => "joined",
                    _ => "left",
                };
                vec![format!("group {}: member {} {verb}", d.group, d.member)]
            }),
            (EventKind::Server, Target::Server(_)) => {
                data(event).map_or_else(Vec::new, |d| self.server(event.ty, &d))
            }
            _ => Vec::new(),
        }
    }

    fn deployment(&mut self, ty: EventType, d: &DeploymentEventData) -> Vec<String> {
        let state = match ty {
            EventType::DeploymentQueued => State::Queued,
            EventType::DeploymentDelivered => State::Delivered,
            EventType::DeploymentStarted => State::InProgress,
            EventType::DeploymentCompleted => State::Complete,
            _ => State::Failed,
        };
        let reason = match (ty, &d.status_reason) {
            (_, Some(reason)) => Some(reason.clone()),
            (EventType::DeploymentTimedOut, None) => Some("timed out".to_owned()),
            _ => None,
        };
        let i = self.row_of(&d.deployment_id, d.resource_name.as_deref(), &d.server_id);
        let row = &mut self.rows[i];
        // A unit first seen in a stack event does not know its server yet.
        row.server.get_or_insert_with(|| d.server_id.clone());
        let same = row.deployment.as_ref() == Some(&d.deployment_id);
        // Events can trail the records read at start: a deployment never goes back. The
        // stack's own unit events may have told the state already (`IN_PROGRESS`).
        if same
            && (row.state.is_terminal() || state.rank() < row.state.rank() || state == row.state)
        {
            return Vec::new();
        }
        if state == State::Failed {
            self.failed = true;
        }
        if !same {
            row.output = None;
        }
        row.deployment = Some(d.deployment_id.clone());
        row.action = d.action.clone();
        row.state = state;
        row.reason = reason;
        vec![row.line(&self.target)]
    }

    fn progress(&mut self, p: &ProgressEventData) -> Vec<String> {
        let i = self.row_of(&p.deployment_id, None, &p.server_id);
        let row = &mut self.rows[i];
        if row.state.rank() < State::InProgress.rank() {
            row.state = State::InProgress;
        }
        let label = row.label(&self.target);
        let mut lines: Vec<String> = p
            .lines
            .iter()
            .map(|l| {
                let stream = match l.stream {
                    OutputStream::Stdout => "stdout",
                    OutputStream::Stderr => "stderr",
                };
                format!("{label} {stream}: {}", l.text)
            })
            .collect();
        if p.dropped_lines > 0 {
            lines.push(format!("{label}: ({} lines dropped)", p.dropped_lines));
        }
        if p.truncated {
            lines.push(format!(
                "{label}: (output truncated; the rest is in the result)"
            ));
        }
        if let Some(last) = p.lines.last() {
            row.output = Some(last.text.clone());
        }
        lines
    }

    fn stack(&mut self, ty: EventType, d: &StackEventData) -> Vec<String> {
        if ty != EventType::StackOperationProgress {
            let before = self.title();
            self.set_stack_status(d.status.clone(), d.reason.clone());
            self.ended = match ty {
                EventType::StackOperationCompleted => Some(Outcome::Success),
                EventType::StackOperationFailed => Some(Outcome::Failed),
                _ => None,
            };
            let title = self.title();
            return if title == before {
                Vec::new()
            } else {
                vec![title]
            };
        }
        let (Some(unit), Some(unit_status)) = (&d.unit, &d.unit_status) else {
            return Vec::new();
        };
        let (action, state) = match split_status(unit_status) {
            // A unit planned but not run yet (`INIT_COMPLETE`): pending, as when loaded.
            (action, _) if action == flue_stack::driver::INIT => (action, State::Pending),
            split => split,
        };
        let i = match self.rows.iter().position(|r| &r.key == unit) {
            Some(i) => i,
            None => {
                self.rows.push(Row {
                    key: unit.clone(),
                    deployment: None,
                    resource_name: None,
                    server: None,
                    action: String::new(),
                    state,
                    reason: None,
                    output: None,
                });
                self.rows.len() - 1
            }
        };
        let row = &mut self.rows[i];
        if let Some(id) = &d.deployment_id {
            if row.deployment.as_ref() != Some(id) {
                row.output = None;
            }
            row.deployment = Some(id.clone());
        }
        let changed = row.action != action || row.state != state;
        row.action = action;
        row.state = state;
        row.reason = if state == State::Failed {
            d.reason.clone()
        } else {
            None
        };
        if changed {
            vec![row.line(&self.target)]
        } else {
            Vec::new()
        }
    }

    fn server(&mut self, ty: EventType, d: &ServerEventData) -> Vec<String> {
        if ty == EventType::ServerRequestRejected {
            // Not a change of the server's state: its agent dropped a message it could not read.
            let reason = d.reason.as_deref().unwrap_or_default();
            return vec![format!("request rejected: {reason}")];
        }
        let before = self.title();
        self.status = Some(ty.name().to_owned());
        self.reason = d.reason.clone();
        let title = self.title();
        if title == before {
            Vec::new()
        } else {
            vec![title]
        }
    }

    /// The row of `deployment`: known by id, else a stack unit with its resource name on
    /// its server, else a new row.
    fn row_of(
        &mut self,
        deployment: &DeploymentId,
        resource: Option<&str>,
        server: &ServerId,
    ) -> usize {
        if let Some(i) = self
            .rows
            .iter()
            .position(|r| r.deployment.as_ref() == Some(deployment))
        {
            return i;
        }
        if let (Target::Stack(_), Some(name)) = (&self.target, resource)
            && let Some(i) = self.rows.iter().position(|r| {
                r.resource_name.as_deref() == Some(name) && r.server.as_ref() == Some(server)
            })
        {
            return i;
        }
        let key = match (&self.target, resource) {
            (Target::Stack(_), Some(name)) => name.to_owned(),
            _ => deployment.to_string(),
        };
        self.rows.push(Row {
            key,
            deployment: Some(deployment.clone()),
            resource_name: resource.map(str::to_owned),
            server: Some(server.clone()),
            action: String::new(),
            // Nothing known yet: the event that made the row sets its state.
            state: State::Pending,
            reason: None,
            output: None,
        });
        self.rows.len() - 1
    }
}

/// `CREATE_IN_PROGRESS` → (`CREATE`, in progress); an unknown suffix reads as in progress.
fn split_status(status: &str) -> (String, State) {
    for (suffix, state) in [
        ("_IN_PROGRESS", State::InProgress),
        ("_COMPLETE", State::Complete),
        ("_FAILED", State::Failed),
    ] {
        if let Some(action) = status.strip_suffix(suffix) {
            return (action.to_owned(), state);
        }
    }
    (status.to_owned(), State::InProgress)
}

/// The event's data as `T`; an event whose data does not fit is left out of the view.
fn data<T: DeserializeOwned>(event: &CloudEvent) -> Option<T> {
    serde_json::from_value(event.data.clone()).ok()
}
