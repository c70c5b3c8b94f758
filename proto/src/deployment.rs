//! Deployments: the request the gateway queues for an agent, the messages the agent
//! answers with, and the record the gateway keeps.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::config::Config;
use crate::digest::RequestDigest;
use crate::ids::{ConfigId, DeploymentId, ServerId, StackId, TenantId};

/// HTTP response header of the listings (`GET /v1/deployments`,
/// `GET /v1/servers/{id}/deployments`, `GET /v1/stacks`): how many stored records were
/// left out because they cannot be decoded (absent when none was).
pub const SKIPPED_RECORDS_HEADER: &str = "flue-skipped-records";

/// HTTP response header of the paginated listings (`GET /v1/deployments`,
/// `GET /v1/servers`): the opaque cursor of the next page, passed back as the `cursor`
/// query parameter. Absent on the last page. The body stays a bare JSON array, so
/// clients that read one page keep working.
pub const NEXT_CURSOR_HEADER: &str = "flue-next-cursor";

/// Version of the gateway↔agent messages; an agent refuses a request of another version.
pub const PROTOCOL_VERSION: u32 = 1;

/// The action a deployment runs: one of Heat's lifecycle actions or an ad-hoc action name.
///
/// Serialised as a plain string. Lifecycle actions are upper case; any other name of
/// `[A-Za-z0-9_-]` is an ad-hoc action.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Action(String);

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Action {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        crate::openapi::token_schema()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Action {}

impl Action {
    /// Heat's CREATE.
    pub const CREATE: &'static str = "CREATE";
    /// Heat's UPDATE.
    pub const UPDATE: &'static str = "UPDATE";
    /// Heat's SUSPEND.
    pub const SUSPEND: &'static str = "SUSPEND";
    /// Heat's RESUME.
    pub const RESUME: &'static str = "RESUME";
    /// Heat's DELETE.
    pub const DELETE: &'static str = "DELETE";

    /// Validates an action name (a subject-token-shaped string).
    pub fn new(s: impl Into<String>) -> Result<Self, crate::IdError> {
        let s = s.into();
        crate::ids::validate(&s)?;
        Ok(Self(s))
    }

    /// The CREATE action.
    pub fn create() -> Self {
        Self(Self::CREATE.to_owned())
    }

    /// The action's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Action {
    fn default() -> Self {
        Self::create()
    }
}

impl TryFrom<String> for Action {
    type Error = crate::IdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<Action> for String {
    fn from(a: Action) -> String {
        a.0
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a deployment stands, as the gateway records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DeploymentStatus {
    /// Accepted and on the server's request queue.
    Queued,
    /// The agent has recorded it as started and is running the hook.
    InProgress,
    /// The hook succeeded.
    Complete,
    /// The hook failed, the agent was interrupted, or no answer came in time.
    Failed,
}

impl DeploymentStatus {
    /// True once nothing can change the deployment any more.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Complete | Self::Failed)
    }

    /// The status named as on the wire (`QUEUED`, `IN_PROGRESS`, `COMPLETE`, `FAILED`).
    pub fn from_wire(name: &str) -> Option<Self> {
        match name {
            "QUEUED" => Some(Self::Queued),
            "IN_PROGRESS" => Some(Self::InProgress),
            "COMPLETE" => Some(Self::Complete),
            "FAILED" => Some(Self::Failed),
            _ => None,
        }
    }
}

impl fmt::Display for DeploymentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Queued => "QUEUED",
            Self::InProgress => "IN_PROGRESS",
            Self::Complete => "COMPLETE",
            Self::Failed => "FAILED",
        })
    }
}

/// A deployment as queued for an agent on `flue.<tenant>.req.<server>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeploymentRequest {
    /// Protocol version, [`PROTOCOL_VERSION`].
    pub v: u32,
    /// Tenant of the server.
    pub tenant: TenantId,
    /// The server that must apply it; an agent refuses a request for another server.
    pub server: ServerId,
    /// Deployment id; also the JetStream message id used for de-duplication.
    pub deployment_id: DeploymentId,
    /// Deployment name (Heat's resource name when an engine has one), given to the hook.
    pub name: String,
    /// The action to run.
    pub action: Action,
    /// The whole config, so the agent needs nothing but the queue.
    pub config: Config,
    /// Input values by name (declared defaults already applied by the gateway).
    #[serde(default)]
    pub input_values: BTreeMap<String, serde_json::Value>,
    /// Names of every hidden input, including those hidden because their value came from
    /// another deployment (`inputs_from`, `input_refs`) while the config does not say so:
    /// the agent keeps their values out of progress events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden_inputs: Vec<String>,
    /// Stack the deployment belongs to, if an engine said so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_id: Option<StackId>,
    /// Resource name in that stack, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    /// When the gateway accepted it (the hook item's `creation_time`).
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// After this instant the gateway has given up: the agent answers FAILED without running it.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    /// The server's current NATS user JWT ([`crate::Server::agent_jwt`]), carried by
    /// every request of a deployment in a stack: its rights include that stack's
    /// data-space keys. An agent holding another one adopts it (for its own user key,
    /// issued by its account) and reconnects before running the hook. A JWT is public
    /// (the user's seed never leaves the agent); being part of the request, it is covered
    /// by the request digest and the gateway's signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_jwt: Option<String>,
}

/// The outcome of one deployment, as an agent reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeploymentResult {
    /// [`DeploymentStatus::Complete`] or [`DeploymentStatus::Failed`].
    pub status: DeploymentStatus,
    /// Why it failed (`interrupted`, `hook exited with status 2`, …); absent on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// Declared outputs the hook produced.
    #[serde(default)]
    pub outputs: BTreeMap<String, serde_json::Value>,
    /// Hook's stdout (bounded by the agent).
    #[serde(default)]
    pub deploy_stdout: String,
    /// Hook's stderr (bounded by the agent).
    #[serde(default)]
    pub deploy_stderr: String,
    /// Hook's status code; absent when the hook never ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy_status_code: Option<i64>,
    /// When the agent started it, if it did.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub started_at: Option<OffsetDateTime>,
    /// When the agent finished it.
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
}

/// What an agent publishes on `flue.<tenant>.resp.<server>`.
///
/// Every answer about a deployment carries `request_digest`, the [`RequestDigest`] of the
/// request message it answers, and the gateway applies it only when that matches the
/// digest it recorded for the deployment. An answer without one (an agent older than the
/// digest) is applied only to records without one (made by a gateway older than it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentMessage {
    /// The agent durably recorded the deployment as started and is about to run the hook.
    Started {
        /// Protocol version.
        v: u32,
        /// Which deployment.
        deployment_id: DeploymentId,
        /// When the agent recorded it.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// Digest of the request answered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_digest: Option<RequestDigest>,
    },
    /// The agent received the request (before its ledger decides anything).
    Delivered {
        /// Protocol version.
        v: u32,
        /// Which deployment.
        deployment_id: DeploymentId,
        /// When the agent pulled it.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// Digest of the request answered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_digest: Option<RequestDigest>,
    },
    /// Lines the running hook printed, in order (`progress.seq` 1, 2, …).
    Progress {
        /// Protocol version.
        v: u32,
        /// Which deployment.
        deployment_id: DeploymentId,
        /// The lines and their sequence number.
        progress: crate::event::ProgressEventData,
        /// Digest of the request answered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_digest: Option<RequestDigest>,
    },
    /// The deployment's final result.
    Finished {
        /// Protocol version.
        v: u32,
        /// Which deployment.
        deployment_id: DeploymentId,
        /// The result.
        result: DeploymentResult,
        /// Digest of the request answered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_digest: Option<RequestDigest>,
    },
    /// A message on the agent's request queue that is not a request it can read, or that
    /// it refused (unsigned, badly signed, for another server, expired, replayed); the
    /// agent dropped it (terminated it on the queue) and ran nothing. It names no
    /// deployment: nothing in such a message can be trusted to.
    Rejected {
        /// Protocol version.
        v: u32,
        /// The message's sequence in the request stream.
        stream_seq: u64,
        /// Digest of the message's bytes.
        request_digest: RequestDigest,
        /// Why it could not be read or was refused (`unreadable request: …`, `bad_signature:
        /// …`).
        reason: String,
        /// The refusal's code; absent from agents older than signed requests.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<crate::signing::RefusalCode>,
        /// When the agent rejected it.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
    },
}

impl AgentMessage {
    /// The deployment the message is about; `None` for [`AgentMessage::Rejected`].
    pub fn deployment_id(&self) -> Option<&DeploymentId> {
        match self {
            Self::Started { deployment_id, .. }
            | Self::Delivered { deployment_id, .. }
            | Self::Progress { deployment_id, .. }
            | Self::Finished { deployment_id, .. } => Some(deployment_id),
            Self::Rejected { .. } => None,
        }
    }

    /// Digest of the request message this answers, if the agent sent one.
    pub fn request_digest(&self) -> Option<&RequestDigest> {
        match self {
            Self::Started { request_digest, .. }
            | Self::Delivered { request_digest, .. }
            | Self::Progress { request_digest, .. }
            | Self::Finished { request_digest, .. } => request_digest.as_ref(),
            Self::Rejected { request_digest, .. } => Some(request_digest),
        }
    }

    /// JetStream message id for de-duplicating republished answers.
    ///
    /// JetStream de-duplicates per stream, not per subject, so the id names the tenant
    /// and server too: no other server's message can shadow this one's answer. It names
    /// the request's digest as well, so that the answers to a stray request naming a
    /// deployment never shadow those to the real one:
    /// `<tenant>.<server>.<deployment>.<digest>.<kind>` (without a digest,
    /// `<tenant>.<server>.<deployment>.<kind>`), and for a rejected message
    /// `<tenant>.<server>.~.<stream seq>.<digest>.rejected`.
    pub fn msg_id(&self, tenant: &TenantId, server: &ServerId) -> String {
        let (id, kind) = match self {
            Self::Started { deployment_id, .. } => (deployment_id, "started".to_owned()),
            Self::Delivered { deployment_id, .. } => (deployment_id, "delivered".to_owned()),
            Self::Progress {
                deployment_id,
                progress,
                ..
            } => (deployment_id, format!("progress-{}", progress.seq)),
            Self::Finished { deployment_id, .. } => (deployment_id, "finished".to_owned()),
            Self::Rejected {
                stream_seq,
                request_digest,
                ..
            } => return format!("{tenant}.{server}.~.{stream_seq}.{request_digest}.rejected"),
        };
        match self.request_digest() {
            Some(digest) => format!("{tenant}.{server}.{id}.{digest}.{kind}"),
            None => format!("{tenant}.{server}.{id}.{kind}"),
        }
    }
}

impl DeploymentRequest {
    /// JetStream message id of the request: unique across tenants, because the
    /// request stream de-duplicates across all its subjects.
    pub fn msg_id(&self) -> String {
        format!("{}.{}", self.tenant, self.deployment_id)
    }

    /// The bytes published for this request. The gateway records their
    /// [`RequestDigest`] ([`DeploymentRequest::digest`]) before publishing them, so both
    /// must come from here.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a request always serialises")
    }

    /// The digest of [`DeploymentRequest::encode`].
    pub fn digest(&self) -> RequestDigest {
        RequestDigest::of(&self.encode())
    }
}

/// What an engine sends to create a deployment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateDeployment {
    /// Id to use; random when absent. Creating an existing id again is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<DeploymentId>,
    /// Config to apply.
    pub config_id: ConfigId,
    /// Server to apply it on.
    pub server_id: ServerId,
    /// Action; CREATE when absent.
    #[serde(default)]
    pub action: Action,
    /// Input values by name.
    #[serde(default)]
    pub input_values: BTreeMap<String, serde_json::Value>,
    /// Name handed to the hook; the deployment id when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Seconds to wait for the agent's answer before FAILED "timed out"; the gateway default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 604_800))]
    pub timeout_secs: Option<u64>,
    /// Stack the deployment belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_id: Option<StackId>,
    /// Resource name within the stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    /// Start from this deployment's input values, hidden ones included (which no API
    /// read shows); values in `input_values` replace same-named ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs_from: Option<DeploymentId>,
    /// Input values taken from other deployments' outputs by the gateway, hidden
    /// outputs included (which no API read shows): input name → output reference.
    /// Each referenced deployment must be COMPLETE; the inputs are hidden in this one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub input_refs: BTreeMap<String, OutputRef>,
    /// When the new deployment would apply the same config content with the same input
    /// values to the same server as this deployment, create nothing and answer 200
    /// with this deployment instead (how an engine re-runs only what changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_if_unchanged_from: Option<DeploymentId>,
}

impl CreateDeployment {
    /// Checks what needs no gateway state: every given input value within
    /// [`crate::limits::MAX_VALUE_DEPTH`]. The values a deployment finally runs with
    /// (defaults, `inputs_from`, `input_refs` added) are checked by the gateway with
    /// [`crate::limits::check_input_values`].
    pub fn validate(&self) -> Result<(), crate::limits::LimitError> {
        for (name, value) in &self.input_values {
            crate::limits::check_depth(|| format!("input_values.{name}"), value)?;
        }
        Ok(())
    }

    /// A CREATE of `config_id` on `server_id` with no inputs and every option left out;
    /// set the rest with struct update syntax (`CreateDeployment { name, ..new(c, s) }`).
    pub fn new(config_id: ConfigId, server_id: ServerId) -> Self {
        Self {
            id: None,
            config_id,
            server_id,
            action: Action::default(),
            input_values: BTreeMap::new(),
            name: None,
            timeout_secs: None,
            stack_id: None,
            resource_name: None,
            inputs_from: None,
            input_refs: BTreeMap::new(),
            skip_if_unchanged_from: None,
        }
    }
}

/// One output of one deployment, used as another deployment's input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OutputRef {
    /// The deployment (it must be COMPLETE).
    pub deployment_id: DeploymentId,
    /// Its output's name; a missing output gives null, as `get_attr` does.
    pub output: String,
}

/// A deployment as the gateway records it and the API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Deployment {
    /// Deployment id.
    pub id: DeploymentId,
    /// Tenant.
    pub tenant: TenantId,
    /// Server it runs on.
    pub server_id: ServerId,
    /// Config applied.
    pub config_id: ConfigId,
    /// Hook group of that config.
    pub group: String,
    /// Name handed to the hook.
    pub name: String,
    /// Action.
    pub action: Action,
    /// Input values (hidden ones replaced by `"<hidden>"` in API reads).
    #[serde(default)]
    pub input_values: BTreeMap<String, serde_json::Value>,
    /// Stack, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_id: Option<StackId>,
    /// Resource name, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    /// Current status.
    pub status: DeploymentStatus,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// Outputs, once complete (hidden ones replaced by `"<hidden>"` in API reads).
    #[serde(default)]
    pub outputs: BTreeMap<String, serde_json::Value>,
    /// Hook stdout.
    #[serde(default)]
    pub deploy_stdout: String,
    /// Hook stderr.
    #[serde(default)]
    pub deploy_stderr: String,
    /// Hook status code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy_status_code: Option<i64>,
    /// Seconds the gateway waits for an answer.
    pub timeout_secs: u64,
    /// Accepted at.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// Last change.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// Agent received it at (the first time; when it started the hook at once, sending
    /// no `delivered`: when it started it).
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub delivered_at: Option<OffsetDateTime>,
    /// Agent started it at.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub started_at: Option<OffsetDateTime>,
    /// Agent finished it at (or the gateway gave up at).
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    /// Gives up waiting at.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigSpec;
    use serde_json::json;

    fn request() -> DeploymentRequest {
        let spec: ConfigSpec =
            serde_json::from_value(json!({"group": "script", "config": "echo hi"})).expect("spec");
        DeploymentRequest {
            hidden_inputs: Vec::new(),
            v: PROTOCOL_VERSION,
            tenant: TenantId::new("acme").expect("id"),
            server: ServerId::new("web1").expect("id"),
            deployment_id: DeploymentId::new("d1").expect("id"),
            name: "d1".into(),
            action: Action::create(),
            config: spec.into_config(ConfigId::new("c1").expect("id"), OffsetDateTime::UNIX_EPOCH),
            input_values: [("foo".to_owned(), json!("bar"))].into(),
            stack_id: None,
            resource_name: None,
            created_at: OffsetDateTime::UNIX_EPOCH,
            expires_at: OffsetDateTime::UNIX_EPOCH + time::Duration::hours(1),
            agent_jwt: None,
        }
    }

    #[test]
    fn request_round_trips() {
        let r = request();
        assert_eq!(r.msg_id(), "acme.d1");
        let bytes = serde_json::to_vec(&r).expect("ser");
        assert_eq!(
            serde_json::from_slice::<DeploymentRequest>(&bytes).expect("de"),
            r
        );
    }

    #[test]
    fn agent_messages_round_trip_with_a_kind_tag() {
        let started = AgentMessage::Started {
            v: PROTOCOL_VERSION,
            deployment_id: DeploymentId::new("d1").expect("id"),
            at: OffsetDateTime::UNIX_EPOCH,
            request_digest: None,
        };
        let text = serde_json::to_string(&started).expect("ser");
        assert!(text.contains("\"kind\":\"started\""), "{text}");
        assert_eq!(
            serde_json::from_str::<AgentMessage>(&text).expect("de"),
            started
        );

        let finished = AgentMessage::Finished {
            v: PROTOCOL_VERSION,
            deployment_id: DeploymentId::new("d1").expect("id"),
            result: DeploymentResult {
                status: DeploymentStatus::Failed,
                status_reason: Some("interrupted".into()),
                outputs: BTreeMap::new(),
                deploy_stdout: String::new(),
                deploy_stderr: "boom".into(),
                deploy_status_code: Some(2),
                started_at: None,
                finished_at: OffsetDateTime::UNIX_EPOCH,
            },
            request_digest: None,
        };
        let text = serde_json::to_string(&finished).expect("ser");
        assert!(text.contains("\"status\":\"FAILED\""), "{text}");
        assert_eq!(
            serde_json::from_str::<AgentMessage>(&text).expect("de"),
            finished
        );
        let (t, s) = (
            TenantId::new("t").expect("id"),
            ServerId::new("s").expect("id"),
        );
        assert_eq!(finished.msg_id(&t, &s), "t.s.d1.finished");
        assert_ne!(started.msg_id(&t, &s), finished.msg_id(&t, &s));
        let other = ServerId::new("s2").expect("id");
        assert_ne!(finished.msg_id(&t, &s), finished.msg_id(&t, &other));
    }

    #[test]
    fn answers_name_the_digest_of_their_request_in_their_message_id() {
        let (t, s) = (
            TenantId::new("t").expect("id"),
            ServerId::new("s").expect("id"),
        );
        let digest = request().digest();
        assert_eq!(digest, RequestDigest::of(&request().encode()));
        let answer = |request_digest| AgentMessage::Delivered {
            v: PROTOCOL_VERSION,
            deployment_id: DeploymentId::new("d1").expect("id"),
            at: OffsetDateTime::UNIX_EPOCH,
            request_digest,
        };
        let real = answer(Some(digest.clone()));
        assert_eq!(real.msg_id(&t, &s), format!("t.s.d1.{digest}.delivered"));
        let stray = answer(Some(RequestDigest::of(b"stray")));
        assert_ne!(real.msg_id(&t, &s), stray.msg_id(&t, &s));
        // An answer of an older agent, without a digest, still reads.
        let old = r#"{"kind":"delivered","v":1,"deployment_id":"d1","at":"1970-01-01T00:00:00Z"}"#;
        let old: AgentMessage = serde_json::from_str(old).expect("de");
        assert_eq!(old, answer(None));
        assert_eq!(old.request_digest(), None);

        let rejected = AgentMessage::Rejected {
            v: PROTOCOL_VERSION,
            stream_seq: 7,
            request_digest: digest.clone(),
            reason: "unreadable request".into(),
            code: Some(crate::signing::RefusalCode::Undecodable),
            at: OffsetDateTime::UNIX_EPOCH,
        };
        assert_eq!(rejected.deployment_id(), None);
        assert_eq!(
            rejected.msg_id(&t, &s),
            format!("t.s.~.7.{digest}.rejected")
        );
        let text = serde_json::to_string(&rejected).expect("ser");
        assert!(text.contains("\"kind\":\"rejected\""), "{text}");
        assert_eq!(
            serde_json::from_str::<AgentMessage>(&text).expect("de"),
            rejected
        );
    }

    #[test]
    fn actions_validate_and_default_to_create() {
        assert_eq!(Action::default().as_str(), "CREATE");
        assert!(Action::new("backup").is_ok());
        assert!(Action::new("back up").is_err());
        assert!(serde_json::from_str::<Action>("\"a.b\"").is_err());
    }

    #[test]
    fn create_deployment_refuses_unknown_fields_and_bad_ids() {
        let ok: CreateDeployment =
            serde_json::from_value(json!({"config_id": "c1", "server_id": "s1"})).expect("ok");
        assert_eq!(ok.action.as_str(), "CREATE");
        let err = serde_json::from_value::<CreateDeployment>(
            json!({"config_id": "c1", "server_id": "s.1"}),
        )
        .expect_err("bad id");
        assert!(err.to_string().contains("'.'"), "{err}");
        assert!(
            serde_json::from_value::<CreateDeployment>(
                json!({"config_id": "c1", "server_id": "s1", "sever": 1})
            )
            .is_err()
        );
    }

    #[test]
    fn status_is_screaming_snake_case() {
        assert_eq!(
            serde_json::to_string(&DeploymentStatus::InProgress).expect("ser"),
            "\"IN_PROGRESS\""
        );
        assert_eq!(DeploymentStatus::InProgress.to_string(), "IN_PROGRESS");
        assert!(DeploymentStatus::Failed.is_terminal());
        assert!(!DeploymentStatus::Queued.is_terminal());
    }
}
