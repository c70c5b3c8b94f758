//! One row of `flue watch` (a stack unit, or one deployment of a server) and the states
//! it goes through.

use std::fmt;

use flue_proto::{Deployment, DeploymentId, DeploymentStatus, OpStatus, ServerId, StackId, Unit};

/// What is watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    /// A stack's units.
    Stack(StackId),
    /// A server's deployments.
    Server(ServerId),
}

/// Where a row's deployment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// A stack unit that has not run yet (`INIT`).
    Pending,
    /// On the server's queue.
    Queued,
    /// Its agent received it.
    Delivered,
    /// Its hook runs.
    InProgress,
    /// Done.
    Complete,
    /// Failed (or timed out).
    Failed,
}

impl State {
    /// Order of the states: a deployment never goes back.
    pub(super) fn rank(self) -> u8 {
        match self {
            Self::Pending | Self::Queued => 0,
            Self::Delivered => 1,
            Self::InProgress => 2,
            Self::Complete | Self::Failed => 3,
        }
    }

    pub(super) fn is_terminal(self) -> bool {
        self.rank() == 3
    }

    fn of_op(status: OpStatus) -> Self {
        match status {
            OpStatus::InProgress => Self::InProgress,
            OpStatus::Complete => Self::Complete,
            OpStatus::Failed => Self::Failed,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Pending => "PENDING",
            Self::Queued => "QUEUED",
            Self::Delivered => "DELIVERED",
            Self::InProgress => "IN_PROGRESS",
            Self::Complete => "COMPLETE",
            Self::Failed => "FAILED",
        })
    }
}

/// One deployment stream: a stack unit, or one deployment of a server.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Row {
    /// Unit key (`web`, `workers/w2`) or deployment id.
    pub(super) key: String,
    /// Its current deployment.
    pub(super) deployment: Option<DeploymentId>,
    /// The resource name its deployments carry (a group member's name for a member).
    pub(super) resource_name: Option<String>,
    /// Its server.
    pub(super) server: Option<ServerId>,
    /// `CREATE`, `UPDATE`, … or an ad-hoc action.
    pub(super) action: String,
    /// Where it stands.
    pub(super) state: State,
    /// Why it failed.
    pub(super) reason: Option<String>,
    /// The last line its hook printed.
    pub(super) output: Option<String>,
}

impl Row {
    /// A stack unit as the stack record has it.
    pub(super) fn from_unit(key: &str, unit: &Unit) -> Row {
        Row {
            key: key.to_owned(),
            deployment: unit
                .pending
                .as_ref()
                .map(|p| p.deployment_id.clone())
                .or_else(|| unit.current.clone()),
            resource_name: Some(unit.member.clone().unwrap_or_else(|| unit.resource.clone())),
            server: Some(unit.server_id.clone()),
            action: unit.action.clone(),
            state: match unit.action.as_str() {
                flue_stack::driver::INIT => State::Pending,
                _ => State::of_op(unit.status),
            },
            reason: unit.status_reason.clone(),
            output: None,
        }
    }

    /// A deployment as the gateway has it.
    pub(super) fn from_deployment(d: &Deployment) -> Row {
        let state = match d.status {
            DeploymentStatus::Queued if d.delivered_at.is_some() => State::Delivered,
            DeploymentStatus::Queued => State::Queued,
            DeploymentStatus::InProgress => State::InProgress,
            DeploymentStatus::Complete => State::Complete,
            DeploymentStatus::Failed => State::Failed,
        };
        Row {
            key: d.id.to_string(),
            deployment: Some(d.id.clone()),
            resource_name: d.resource_name.clone(),
            server: Some(d.server_id.clone()),
            action: d.action.to_string(),
            state,
            reason: d.status_reason.clone(),
            output: None,
        }
    }

    /// `web on web1: CREATE IN_PROGRESS`, `deployment d1 on web1: CREATE FAILED: why`.
    pub(super) fn line(&self, target: &Target) -> String {
        let mut line = format!("{}: {} {}", self.label(target), self.action, self.state);
        if let (State::Failed, Some(reason)) = (self.state, &self.reason) {
            line.push_str(&format!(": {}", reason.lines().next().unwrap_or_default()));
        }
        line
    }

    pub(super) fn label(&self, target: &Target) -> String {
        let name = match target {
            Target::Stack(_) => self.key.clone(),
            Target::Server(_) => format!("deployment {}", self.key),
        };
        match &self.server {
            Some(server) => format!("{name} on {server}"),
            None => name,
        }
    }
}
