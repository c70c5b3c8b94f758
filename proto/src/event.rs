//! Lifecycle events: CloudEvents 1.0 JSON envelopes, their types, NATS subjects, ids and
//! the filter listeners (SSE, webhooks, `flue events`) select them with.
//!
//! Every event is published on
//! `flue.<tenant>.evt.<kind>.<stack>.<server>.<name>` ([`CloudEvent::nats_subject`]) and
//! kept in the stream [`EVENT_STREAM`]. `<kind>` is `server`, `group`, `deployment` or
//! `stack`; `<stack>` and `<server>` are the ids the event concerns, or [`NONE_TOKEN`]
//! (`~`, which no id can be) when it concerns none; `<name>` is the last part of the
//! event's type (`online`, `completed`, `progress`, …). So `flue.acme.evt.>` is everything
//! of tenant `acme`, `flue.acme.evt.deployment.>` its deployments, `flue.acme.evt.*.*.web1.>`
//! everything about server `web1`, `flue.acme.evt.*.shop.>` everything about stack `shop`.
//!
//! An event's `id` is derived from what it reports (`deployment:<id>:completed`,
//! `deployment:<id>:progress:<seq>`, `server:<id>:online:<epoch>`, …), never random: the
//! same fact reported twice (a redelivered agent message, a retried publish) carries the
//! same id, and the stream drops the copy ([`CloudEvent::msg_id`] is its JetStream message
//! id) within its duplicate window.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::OffsetDateTime;

use crate::ids::{DeploymentId, ServerId, StackId, TenantId};

/// Stream keeping every event (Limits retention, bounded by age and size).
pub const EVENT_STREAM: &str = "FLUE_EVT";
/// The copy of [`EVENT_STREAM`] gateways before issue 24 kept in the same (events)
/// account: a stream with no subjects of its own that *sourced* every event of
/// [`EVENT_STREAM`], where their SSE and webhook consumers lived. A gateway now moves the
/// webhook consumers it finds there back to [`EVENT_STREAM`] and deletes it. Its
/// sequences are its own: the sequence of an event in [`EVENT_STREAM`] is read from each
/// copy's [`SOURCE_HEADER`] ([`origin_sequence`]).
pub const GATEWAY_EVENT_STREAM: &str = "FLUE_EVT_GW";
/// Header nats-server puts on every message it copies into a sourcing stream:
/// `<origin stream>[:<hash>] <origin sequence> <filter> <transform>`.
pub const SOURCE_HEADER: &str = "Nats-Stream-Source";
/// Subjects captured by [`EVENT_STREAM`].
pub const EVENT_SUBJECTS: &str = "flue.*.evt.>";
/// The [`EVENT_STREAM`] sequence of an event copied into [`GATEWAY_EVENT_STREAM`], read
/// from the copy's [`SOURCE_HEADER`] value; `None` when the value is not a copy of
/// [`EVENT_STREAM`] (another stream, or not the format nats-server writes).
pub fn origin_sequence(source_header: &str) -> Option<u64> {
    let mut tokens = source_header.split_ascii_whitespace();
    let stream = tokens.next()?;
    // An origin in another domain or account carries `:<hash>` after its name.
    let name = stream.split(':').next()?;
    if name != EVENT_STREAM {
        return None;
    }
    tokens.next()?.parse().ok().filter(|&seq| seq > 0)
}

/// Subject token standing for "no stack" or "no server": not a valid id, so never ambiguous.
pub const NONE_TOKEN: &str = "~";
/// CloudEvents version of every envelope.
pub const SPEC_VERSION: &str = "1.0";
/// Prefix of every event type.
pub const TYPE_PREFIX: &str = "io.flue.";

/// What an event is about: the third token of its subject after `evt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// A server: registered, deregistered, online, offline.
    Server,
    /// A member of a deployment group: joined, left.
    Group,
    /// One deployment's life.
    Deployment,
    /// A stack operation.
    Stack,
}

impl EventKind {
    /// The subject token: `server`, `group`, `deployment`, `stack`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Server => "server",
            Self::Group => "group",
            Self::Deployment => "deployment",
            Self::Stack => "stack",
        }
    }
}

/// Every documented event type. Serialised as its full CloudEvents type,
/// `io.flue.deployment.completed`; [`FromStr`] also takes the short form
/// `deployment.completed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    /// `io.flue.server.registered`: an engine registered the server (its queue exists).
    ServerRegistered,
    /// `io.flue.server.deregistered`: the server was removed (its queue is gone).
    ServerDeregistered,
    /// `io.flue.server.online`: its agent's heartbeats arrive.
    ServerOnline,
    /// `io.flue.server.offline`: its agent stopped cleanly, or fell silent.
    ServerOffline,
    /// `io.flue.server.request_rejected`: the agent could not read a message on its
    /// request queue (not a request of this protocol) and dropped it; no deployment is
    /// concerned, since nothing in such a message can be trusted to name one.
    ServerRequestRejected,
    /// `io.flue.server.answer_rejected`: the gateway refused a message on the server's
    /// response subject (unsigned, not signed by the server's current key, or for a server
    /// it does not know) and applied nothing of it.
    ServerAnswerRejected,
    /// `io.flue.server.rebuilt`: the server's agent came back with a new, empty ledger (a
    /// server rebuilt under the same id): what its deployments applied may be gone.
    ServerRebuilt,
    /// `io.flue.group.member_joined`: a deployment group gained a member (scale out).
    GroupMemberJoined,
    /// `io.flue.group.member_left`: a deployment group lost a member (scale in).
    GroupMemberLeft,
    /// `io.flue.deployment.queued`: accepted and on the server's queue.
    DeploymentQueued,
    /// `io.flue.deployment.delivered`: the agent received it.
    DeploymentDelivered,
    /// `io.flue.deployment.started`: the agent recorded it started; the hook runs.
    DeploymentStarted,
    /// `io.flue.deployment.progress`: lines the running hook printed.
    DeploymentProgress,
    /// `io.flue.deployment.completed`: it ended COMPLETE.
    DeploymentCompleted,
    /// `io.flue.deployment.failed`: it ended FAILED (not by a timeout).
    DeploymentFailed,
    /// `io.flue.deployment.timed_out`: it ended FAILED "timed out".
    DeploymentTimedOut,
    /// `io.flue.stack.operation_started`: a stack operation began.
    StackOperationStarted,
    /// `io.flue.stack.operation_progress`: a unit of a stack operation changed state.
    StackOperationProgress,
    /// `io.flue.stack.operation_completed`: a stack operation ended COMPLETE.
    StackOperationCompleted,
    /// `io.flue.stack.operation_failed`: a stack operation ended FAILED.
    StackOperationFailed,
    /// `io.flue.stack.abandoned`: the stack was taken out of Flue (`flue stack abandon`)
    /// without running anything; its servers keep what they run.
    StackAbandoned,
    /// `io.flue.stack.adopted`: the stack was recreated from an abandoned record
    /// (`flue stack adopt`) without running anything.
    StackAdopted,
}

impl EventType {
    /// Every type, in documentation order.
    pub const ALL: [Self; 22] = [
        Self::ServerRegistered,
        Self::ServerDeregistered,
        Self::ServerOnline,
        Self::ServerOffline,
        Self::ServerRequestRejected,
        Self::ServerAnswerRejected,
        Self::ServerRebuilt,
        Self::GroupMemberJoined,
        Self::GroupMemberLeft,
        Self::DeploymentQueued,
        Self::DeploymentDelivered,
        Self::DeploymentStarted,
        Self::DeploymentProgress,
        Self::DeploymentCompleted,
        Self::DeploymentFailed,
        Self::DeploymentTimedOut,
        Self::StackOperationStarted,
        Self::StackOperationProgress,
        Self::StackOperationCompleted,
        Self::StackOperationFailed,
        Self::StackAbandoned,
        Self::StackAdopted,
    ];

    /// What the event is about.
    pub fn kind(self) -> EventKind {
        match self {
            Self::ServerRegistered
            | Self::ServerDeregistered
            | Self::ServerOnline
            | Self::ServerOffline
            | Self::ServerRequestRejected
            | Self::ServerAnswerRejected
            | Self::ServerRebuilt => EventKind::Server,
            Self::GroupMemberJoined | Self::GroupMemberLeft => EventKind::Group,
            Self::DeploymentQueued
            | Self::DeploymentDelivered
            | Self::DeploymentStarted
            | Self::DeploymentProgress
            | Self::DeploymentCompleted
            | Self::DeploymentFailed
            | Self::DeploymentTimedOut => EventKind::Deployment,
            Self::StackOperationStarted
            | Self::StackOperationProgress
            | Self::StackOperationCompleted
            | Self::StackOperationFailed
            | Self::StackAbandoned
            | Self::StackAdopted => EventKind::Stack,
        }
    }

    /// The last token of the subject, and of the type: `online`, `member_joined`, …
    pub fn name(self) -> &'static str {
        match self {
            Self::ServerRegistered => "registered",
            Self::ServerDeregistered => "deregistered",
            Self::ServerOnline => "online",
            Self::ServerOffline => "offline",
            Self::ServerRequestRejected => "request_rejected",
            Self::ServerAnswerRejected => "answer_rejected",
            Self::ServerRebuilt => "rebuilt",
            Self::GroupMemberJoined => "member_joined",
            Self::GroupMemberLeft => "member_left",
            Self::DeploymentQueued => "queued",
            Self::DeploymentDelivered => "delivered",
            Self::DeploymentStarted => "started",
            Self::DeploymentProgress => "progress",
            Self::DeploymentCompleted => "completed",
            Self::DeploymentFailed => "failed",
            Self::DeploymentTimedOut => "timed_out",
            Self::StackOperationStarted => "operation_started",
            Self::StackOperationProgress => "operation_progress",
            Self::StackOperationCompleted => "operation_completed",
            Self::StackOperationFailed => "operation_failed",
            Self::StackAbandoned => "abandoned",
            Self::StackAdopted => "adopted",
        }
    }

    /// The short form, `deployment.completed`.
    pub fn short(self) -> String {
        format!("{}.{}", self.kind().as_str(), self.name())
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{TYPE_PREFIX}{}.{}", self.kind().as_str(), self.name())
    }
}

/// An unknown event type name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown event type {0:?} (known: server.registered, server.deregistered, server.online, server.offline, server.request_rejected, server.answer_rejected, server.rebuilt, group.member_joined, group.member_left, deployment.queued, deployment.delivered, deployment.started, deployment.progress, deployment.completed, deployment.failed, deployment.timed_out, stack.operation_started, stack.operation_progress, stack.operation_completed, stack.operation_failed, stack.abandoned, stack.adopted)"
)]
pub struct UnknownEventType(pub String);

impl FromStr for EventType {
    type Err = UnknownEventType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let short = s.strip_prefix(TYPE_PREFIX).unwrap_or(s);
        Self::ALL
            .into_iter()
            .find(|t| t.short() == short)
            .ok_or_else(|| UnknownEventType(s.to_owned()))
    }
}

impl Serialize for EventType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One event: a CloudEvents 1.0 envelope in JSON (structured mode) with Flue's extension
/// attributes `tenant`, `server`, `stack`, `deployment` (the ids it concerns).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CloudEvent {
    /// Always `1.0`.
    pub specversion: String,
    /// Unique per `source`, derived from the fact reported (see the module docs).
    pub id: String,
    /// `/flue/<tenant>`.
    pub source: String,
    /// The event type, `io.flue.<kind>.<name>`.
    #[serde(rename = "type")]
    pub ty: EventType,
    /// The object concerned: `servers/<id>`, `deployments/<id>`, `stacks/<id>`,
    /// `stacks/<id>/groups/<group>/members/<member>`.
    pub subject: String,
    /// When it happened (as the gateway saw it).
    #[serde(with = "time::serde::rfc3339")]
    pub time: OffsetDateTime,
    /// Always `application/json`.
    pub datacontenttype: String,
    /// Tenant (extension attribute).
    pub tenant: TenantId,
    /// Server concerned, if any (extension attribute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerId>,
    /// Stack concerned, if any (extension attribute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<StackId>,
    /// Deployment concerned, if any (extension attribute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentId>,
    /// The payload: one of the `*Data` structs of this module, by kind.
    pub data: serde_json::Value,
}

impl CloudEvent {
    /// An event of `ty` for `tenant`, happening now, with the given id, subject and data.
    /// Add the ids it concerns with [`CloudEvent::server`], [`CloudEvent::stack`],
    /// [`CloudEvent::deployment`].
    pub fn new(
        ty: EventType,
        tenant: &TenantId,
        id: String,
        subject: String,
        data: &impl Serialize,
    ) -> Self {
        Self {
            specversion: SPEC_VERSION.to_owned(),
            id,
            source: format!("/flue/{tenant}"),
            ty,
            subject,
            time: OffsetDateTime::now_utc(),
            datacontenttype: "application/json".to_owned(),
            tenant: tenant.clone(),
            server: None,
            stack: None,
            deployment: None,
            data: serde_json::to_value(data).expect("event data always serialises"),
        }
    }

    /// Sets the server concerned.
    pub fn server(mut self, server: &ServerId) -> Self {
        self.server = Some(server.clone());
        self
    }

    /// Sets the stack concerned, if any.
    pub fn stack(mut self, stack: Option<&StackId>) -> Self {
        self.stack = stack.cloned();
        self
    }

    /// Sets the deployment concerned.
    pub fn deployment(mut self, deployment: &DeploymentId) -> Self {
        self.deployment = Some(deployment.clone());
        self
    }

    /// The subject it is published on: `flue.<tenant>.evt.<kind>.<stack|~>.<server|~>.<name>`.
    pub fn nats_subject(&self) -> String {
        format!(
            "flue.{}.evt.{}.{}.{}.{}",
            self.tenant,
            self.ty.kind().as_str(),
            self.stack.as_ref().map_or(NONE_TOKEN, |s| s.as_str()),
            self.server.as_ref().map_or(NONE_TOKEN, |s| s.as_str()),
            self.ty.name()
        )
    }

    /// JetStream message id: the event id, made unique across tenants.
    pub fn msg_id(&self) -> String {
        format!("{}/{}", self.tenant, self.id)
    }
}

/// Id of a deployment event other than progress: `deployment:<id>:<name>`.
pub fn deployment_event_id(deployment: &DeploymentId, ty: EventType) -> String {
    format!("deployment:{deployment}:{}", ty.name())
}

/// Id of a progress event: `deployment:<id>:progress:<seq>`.
pub fn progress_event_id(deployment: &DeploymentId, seq: u64) -> String {
    format!("deployment:{deployment}:progress:{seq}")
}

/// Subject filter of every event of `tenant`.
pub fn tenant_events(tenant: &TenantId) -> String {
    format!("flue.{tenant}.evt.>")
}

/// What listeners select events by; every field that is set must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EventFilter {
    /// Event types; empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<EventType>,
    /// Only events about this server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerId>,
    /// Only events about this stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<StackId>,
    /// Only events about this deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentId>,
}

impl EventFilter {
    /// True when `event` passes every set field.
    pub fn matches(&self, event: &CloudEvent) -> bool {
        (self.types.is_empty() || self.types.contains(&event.ty))
            && self
                .server
                .as_ref()
                .is_none_or(|s| event.server.as_ref() == Some(s))
            && self
                .stack
                .as_ref()
                .is_none_or(|s| event.stack.as_ref() == Some(s))
            && self
                .deployment
                .as_ref()
                .is_none_or(|d| event.deployment.as_ref() == Some(d))
    }

    /// The narrowest single NATS subject filter of `tenant`'s events that still lets every
    /// matching event through ([`EventFilter::matches`] does the rest): the kind when all
    /// types share one, the stack, the server, the name when there is one type.
    pub fn subject_filter(&self, tenant: &TenantId) -> String {
        let kind = match self.types.split_first() {
            Some((first, rest)) if rest.iter().all(|t| t.kind() == first.kind()) => {
                first.kind().as_str()
            }
            _ => "*",
        };
        let name = match self.types.as_slice() {
            [one] => one.name(),
            _ => "*",
        };
        let stack = self.stack.as_ref().map_or("*", |s| s.as_str());
        let server = self.server.as_ref().map_or("*", |s| s.as_str());
        format!("flue.{tenant}.evt.{kind}.{stack}.{server}.{name}")
    }
}

/// `data` of server events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServerEventData {
    /// The server.
    pub server_id: ServerId,
    /// Its human name; empty when it has none (always present, as documented).
    #[serde(default)]
    pub name: String,
    /// The agent process the presence event is about (random per agent start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_instance: Option<String>,
    /// Why it went offline: `agent stopped`, `no heartbeat for 10 s`, `agent restarted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Last heartbeat seen before it went offline.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_seen: Option<OffsetDateTime>,
}

/// `data` of `server.request_rejected`: a message on the server's request queue that its
/// agent could not read as a request, and dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RequestRejectedEventData {
    /// The server whose queue held it.
    pub server_id: ServerId,
    /// Its sequence in the request stream (`FLUE_REQ`).
    pub stream_seq: u64,
    /// SHA-256 of its bytes, hex.
    pub request_digest: crate::RequestDigest,
    /// Why the agent could not read it or refused it.
    pub reason: String,
    /// The refusal's code (`unsigned`, `bad_signature`, `replayed`, …); absent from agents
    /// older than signed requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<crate::signing::RefusalCode>,
}

/// `data` of `server.answer_rejected`: a message on the server's response subject the
/// gateway refused and applied nothing of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AnswerRejectedEventData {
    /// The server whose response subject it came on.
    pub server_id: ServerId,
    /// Its sequence in the response stream (`FLUE_RESP`).
    pub stream_seq: u64,
    /// The refusal's code.
    pub code: crate::signing::RefusalCode,
    /// What was wrong.
    pub reason: String,
}

/// Id of a `server.answer_rejected` event: `server:<id>:answer_rejected:<stream seq>`.
pub fn answer_rejected_event_id(server: &ServerId, stream_seq: u64) -> String {
    format!("server:{server}:answer_rejected:{stream_seq}")
}

/// Id of a `server.request_rejected` event:
/// `server:<id>:request_rejected:<stream seq>:<digest>`.
pub fn request_rejected_event_id(
    server: &ServerId,
    stream_seq: u64,
    digest: &crate::RequestDigest,
) -> String {
    format!("server:{server}:request_rejected:{stream_seq}:{digest}")
}

/// `data` of deployment events other than progress. Hidden outputs read `<hidden>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeploymentEventData {
    /// The deployment.
    pub deployment_id: DeploymentId,
    /// Its server.
    pub server_id: ServerId,
    /// Its config.
    pub config_id: crate::ids::ConfigId,
    /// Its action (`CREATE`, … or an ad-hoc action name).
    pub action: String,
    /// Its status after the event: `QUEUED`, `IN_PROGRESS`, `COMPLETE`, `FAILED`.
    pub status: crate::deployment::DeploymentStatus,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// Stack, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_id: Option<StackId>,
    /// Resource name in the stack, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    /// Hook status code, on completed / failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy_status_code: Option<i64>,
    /// Outputs, on completed (hidden ones `<hidden>`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub outputs: std::collections::BTreeMap<String, serde_json::Value>,
}

/// Which output stream a progress line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    /// The hook's stdout.
    Stdout,
    /// The hook's stderr.
    Stderr,
}

/// One line a running hook printed (without its newline).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProgressLine {
    /// Where it came from.
    pub stream: OutputStream,
    /// The text (lossy UTF-8), cut at the agent's line limit with `…[truncated]` appended.
    pub text: String,
}

/// `data` of `deployment.progress`, and the body of an agent's progress message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProgressEventData {
    /// The deployment.
    pub deployment_id: DeploymentId,
    /// Its server.
    pub server_id: ServerId,
    /// 1, 2, 3, … per deployment, in the order the lines were printed.
    pub seq: u64,
    /// The lines, in order.
    pub lines: Vec<ProgressLine>,
    /// Lines dropped before this batch (rate or size limit); 0 when none.
    #[serde(default)]
    pub dropped_lines: u64,
    /// True on the last batch the agent sends once the deployment's progress budget is
    /// spent: later output is only in the final result.
    #[serde(default)]
    pub truncated: bool,
}

/// `data` of group events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberEventData {
    /// The stack.
    pub stack_id: StackId,
    /// The `SoftwareDeploymentGroup` resource.
    pub group: String,
    /// The member that joined or left.
    pub member: String,
    /// Its server.
    pub server_id: ServerId,
    /// The stack operation that made the change.
    ///
    /// (Events no longer list the group's members: that list made each event O(group)
    /// and a group's life O(group²); a listener keeps the membership from the joins and
    /// leaves, or reads `GET /v1/stacks/{id}/units`.)
    pub operation_id: String,
}

/// `data` of stack events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StackEventData {
    /// The stack.
    pub stack_id: StackId,
    /// The operation.
    pub operation_id: String,
    /// `CREATE_IN_PROGRESS`, `UPDATE_COMPLETE`, … (the stack's status after the event).
    pub status: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// On progress: the unit that changed (`web_deploy`, `workers/w2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// On progress: the unit's state, `CREATE_COMPLETE`, `UPDATE_IN_PROGRESS`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_status: Option<String>,
    /// On progress: the unit's current deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_id: Option<DeploymentId>,
}

/// An agent's heartbeat on `flue.<tenant>.hb.<server>` (core NATS, not stored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Heartbeat {
    /// Protocol version.
    pub v: u32,
    /// Tenant.
    pub tenant: TenantId,
    /// Server.
    pub server: ServerId,
    /// Random per agent process start: a new one means the agent restarted.
    pub instance: String,
    /// 1, 2, 3, … per instance.
    pub seq: u64,
    /// Milliseconds until the next heartbeat.
    pub interval_ms: u64,
    /// `alive`, or `stopping` when the agent shuts down cleanly (its last heartbeat).
    pub state: HeartbeatState,
    /// The agent's counters since its process started (this `instance`); absent from
    /// agents older than them, which work all the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<AgentMetrics>,
    /// When the agent's ledger was created: a later one for the same server means a new,
    /// empty ledger (a server rebuilt under the same id), which the gateway reports as
    /// `server.rebuilt`. Absent from older agents and from ledgers they created.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub ledger_created_at: Option<OffsetDateTime>,
    /// The agent build's version (`flue-agent version`, e.g. `0.1.0+42`); absent from
    /// agents older than agent upgrades.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// The broker connection this heartbeat was sent on, as the broker names it: the
    /// gateway matches it against the broker's own disconnect advisories, so that a
    /// server whose agent's connection closed goes offline at once. Absent from older
    /// agents (their servers go offline after a silence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<BrokerConnection>,
    /// True when the agent pulls from the sealed request consumer its user JWT names
    /// (`subject::sealed_request_consumer`) whenever it exists: the gateway then moves the
    /// server's consumer to that name. Absent (false) from older agents, whose servers
    /// keep the older name they compute themselves.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sealed_consumer: bool,
}

/// One client connection as nats-server names it: the id of the server (node) it is
/// connected to, and its client id there (the `client_id` of that server's `INFO`; the
/// `server.id` and `client.id` of its connect and disconnect advisories).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BrokerConnection {
    /// The broker server's id (`N…`).
    pub server_id: String,
    /// The connection's client id on that server.
    pub client_id: u64,
}

/// What an agent counted since its process started, carried by its heartbeats: the
/// gateway adds up what each agent instance counted since its last heartbeat, so that its
/// totals never go backwards when an agent restarts (`docs/metrics.md`). Counts only: no
/// deployment, hook or value is named.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct AgentMetrics {
    /// Hooks that ran and succeeded.
    pub hooks_completed: u64,
    /// Hooks that ran and failed (including those stopped by a timeout or a shutdown).
    pub hooks_failed: u64,
    /// The run time of those hooks added up, in milliseconds.
    pub hook_millis: u64,
    /// Requests refused before any hook ran (signature, replay, another server, …).
    pub requests_rejected: u64,
    /// Requests answered from the ledger without running anything (redeliveries).
    pub answered_from_ledger: u64,
    /// Reconnections of the agent's broker connection (the first connection not counted).
    pub broker_reconnects: u64,
}

/// What a heartbeat says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum HeartbeatState {
    /// Running.
    Alive,
    /// Shutting down: report offline now.
    Stopping,
}

/// A server's presence as the gateway derived it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum PresenceStatus {
    /// Heartbeats arrive.
    Online,
    /// Its agent stopped or fell silent.
    Offline,
    /// No heartbeat seen yet.
    Unknown,
}

/// Presence of one server, as `GET /v1/servers` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Presence {
    /// Online, offline or unknown.
    pub status: PresenceStatus,
    /// Since when.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub since: Option<OffsetDateTime>,
    /// The agent instance last seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_instance: Option<String>,
    /// The version its last heartbeat to this gateway named (absent from older agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// Why it is offline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TenantId {
        TenantId::new(s).expect("valid")
    }

    #[test]
    fn the_origin_sequence_is_read_from_the_source_header() {
        assert_eq!(origin_sequence("FLUE_EVT 42 > >"), Some(42));
        assert_eq!(origin_sequence("FLUE_EVT:a1b2c3 7 flue.*.evt.> >"), Some(7));
        assert_eq!(origin_sequence("FLUE_EVT_OTHER 42 > >"), None);
        assert_eq!(origin_sequence("FLUE_EVT"), None);
        assert_eq!(origin_sequence("FLUE_EVT x > >"), None);
        assert_eq!(origin_sequence("FLUE_EVT 0 > >"), None);
        assert_eq!(origin_sequence(""), None);
    }

    #[test]
    fn types_round_trip_in_both_forms() {
        for ty in EventType::ALL {
            let full = ty.to_string();
            assert!(full.starts_with("io.flue."), "{full}");
            assert_eq!(full.parse::<EventType>(), Ok(ty));
            assert_eq!(ty.short().parse::<EventType>(), Ok(ty));
            let json = serde_json::to_string(&ty).expect("ser");
            assert_eq!(serde_json::from_str::<EventType>(&json).expect("de"), ty);
        }
        assert!("deployment.done".parse::<EventType>().is_err());
    }

    #[test]
    fn subjects_have_seven_tokens_and_none_is_not_an_id() {
        let dep = DeploymentId::new("d1").expect("id");
        let server = ServerId::new("web1").expect("id");
        let e = CloudEvent::new(
            EventType::DeploymentCompleted,
            &t("acme"),
            deployment_event_id(&dep, EventType::DeploymentCompleted),
            "deployments/d1".into(),
            &serde_json::json!({}),
        )
        .server(&server)
        .deployment(&dep);
        assert_eq!(
            e.nats_subject(),
            "flue.acme.evt.deployment.~.web1.completed"
        );
        assert_eq!(e.id, "deployment:d1:completed");
        assert_eq!(e.msg_id(), "acme/deployment:d1:completed");
        assert!(StackId::new(NONE_TOKEN).is_err());
        let v = serde_json::to_value(&e).expect("ser");
        assert_eq!(v["type"], "io.flue.deployment.completed");
        assert_eq!(v["specversion"], "1.0");
        assert_eq!(v["source"], "/flue/acme");
        assert!(v.get("stack").is_none());
    }

    #[test]
    fn filters_narrow_the_subject_and_check_the_rest() {
        let mut f = EventFilter::default();
        assert_eq!(f.subject_filter(&t("a")), "flue.a.evt.*.*.*.*");
        f.types = vec![EventType::ServerOnline, EventType::ServerOffline];
        f.server = Some(ServerId::new("s1").expect("id"));
        assert_eq!(f.subject_filter(&t("a")), "flue.a.evt.server.*.s1.*");
        f.types = vec![EventType::DeploymentProgress];
        assert_eq!(
            f.subject_filter(&t("a")),
            "flue.a.evt.deployment.*.s1.progress"
        );
        let e = CloudEvent::new(
            EventType::DeploymentProgress,
            &t("a"),
            "x".into(),
            "deployments/d".into(),
            &(),
        )
        .server(&ServerId::new("s1").expect("id"));
        assert!(f.matches(&e));
        f.deployment = Some(DeploymentId::new("other").expect("id"));
        assert!(!f.matches(&e));
    }
}
