//! The gateway's own record of a deployment and the pure rules that move it between states.
//!
//! Every change goes through one of the `apply_*` functions below, which say whether
//! anything changed; the store runs them inside a compare-and-set loop so that the API,
//! the response consumer and the timeout sweeper never overwrite each other.
//! [`DeploymentRecord::event`] turns a record into the lifecycle event reporting it.

use std::collections::BTreeMap;

use flue_proto::event::{DeploymentEventData, deployment_event_id};
use flue_proto::{
    AgentMessage, CloudEvent, Config, Deployment, DeploymentResult, DeploymentStatus, EventType,
    RequestDigest,
};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

mod queued;

pub use queued::NewDeployment;

/// What replaces a hidden input's value in every API read.
pub const HIDDEN: &str = "<hidden>";

/// Reason recorded when no answer came before the deployment expired.
pub const TIMED_OUT: &str = "timed out";

/// How long past its `expires_at` the gateway waits before failing an IN_PROGRESS deployment.
///
/// The agent stops a hook still running at `expires_at` itself (SIGTERM, then SIGKILL 5 s
/// later) and reports FAILED "timed out" with the hook's output. Failing the deployment
/// at `expires_at` too would race that report and throw the output away, so the gateway
/// only steps in when the agent stayed silent well beyond it: 30 s covers the kill delay,
/// publishing the answer, and clock skew between the agent's host and the gateway's. A
/// QUEUED deployment has no agent working on it and times out at `expires_at` exactly.
pub const IN_PROGRESS_GRACE: time::Duration = time::Duration::seconds(30);

/// A deployment as stored in the `flue_deployments` bucket (internal to the gateway).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeploymentRecord {
    /// The deployment as the API shows it (before redaction).
    pub deployment: Deployment,
    /// True once the request is on the server's queue (the broker acknowledged it).
    pub request_published: bool,
    /// Names of the inputs declared hidden by the config.
    #[serde(default)]
    pub hidden_inputs: Vec<String>,
    /// Names of the outputs declared hidden by the config.
    #[serde(default)]
    pub hidden_outputs: Vec<String>,
    /// Digest of the request message published for it, recorded before it is published;
    /// only answers naming it apply ([`answers_request`]). Absent in records of gateways
    /// older than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_digest: Option<RequestDigest>,
    /// The agent's NATS user JWT its request carries (deployments in a stack:
    /// `rights`), kept so that a republished request has the same bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_jwt: Option<String>,
    /// Its server polls (`poll`): the record is the request, served in the
    /// server's metadata, and nothing goes to the broker's request queue.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub polled: bool,
    /// The steps the answer that last moved the record went past, their own answers not
    /// applied before it ([`Skipped::by`]): reported from the record just before that
    /// answer's event, each time that answer is handled, so that a gateway that died
    /// between writing the record and publishing the events leaves them to the
    /// redelivery as it leaves the answer's own event.
    #[serde(default, skip_serializing_if = "Skipped::is_none")]
    pub skipped: Skipped,
}

/// Steps of a deployment an agent's answer finds the record without: their events are
/// reported, in order, just before the answer's own. The agent took them (it sends
/// `delivered` first unless it starts the hook at once, and `started` before the result
/// of a hook it ran), but their answers come after this one (a gateway that held them
/// stalled past the ack wait, or died, and they were delivered again behind it) or not
/// at all (`delivered` folded into `started`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// `delivered`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delivered: bool,
    /// `started`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub started: bool,
}

impl Skipped {
    /// What `message` skips on `record` as it was before `message` changed it. A
    /// `delivered` reported already (or reported as skipped by `started`) leaves the
    /// record QUEUED no longer (or with its delivery time), and a result whose hook never
    /// started skips no `started`.
    pub fn by(record: &DeploymentRecord, message: &AgentMessage) -> Self {
        let d = &record.deployment;
        let queued = d.status == DeploymentStatus::Queued;
        let delivered = queued && d.delivered_at.is_none();
        match message {
            AgentMessage::Started { .. } => Self {
                delivered,
                started: false,
            },
            AgentMessage::Finished { result, .. } => Self {
                delivered,
                started: queued && result.started_at.is_some(),
            },
            _ => Self::default(),
        }
    }

    /// Nothing skipped.
    pub fn is_none(&self) -> bool {
        *self == Self::default()
    }

    /// The skipped steps' event types, in their order.
    pub fn events(self) -> impl Iterator<Item = EventType> {
        [
            (self.delivered, EventType::DeploymentDelivered),
            (self.started, EventType::DeploymentStarted),
        ]
        .into_iter()
        .filter_map(|(skipped, ty)| skipped.then_some(ty))
    }
}

/// Notes on `record`, just moved by `message`, the steps `skipped` it went past
/// ([`DeploymentRecord::skipped`]); a skipped `delivered` is recorded as delivered when
/// the agent started the hook (or, for a result of none, finished).
pub fn note_skipped(record: &mut DeploymentRecord, message: &AgentMessage, skipped: Skipped) {
    record.skipped = skipped;
    let d = &mut record.deployment;
    if skipped.delivered && d.delivered_at.is_none() {
        d.delivered_at = match message {
            AgentMessage::Started { at, .. } => Some(*at),
            AgentMessage::Finished { result, .. } => {
                Some(result.started_at.unwrap_or(result.finished_at))
            }
            _ => None,
        };
    }
}

impl DeploymentRecord {
    /// The deployment with every hidden input's and output's value replaced by [`HIDDEN`].
    pub fn redacted(&self) -> Deployment {
        let mut deployment = self.deployment.clone();
        redact(&mut deployment.input_values, &self.hidden_inputs);
        redact(&mut deployment.outputs, &self.hidden_outputs);
        deployment
    }

    /// [`DeploymentRecord::redacted`] without what a run produced (outputs, stdout,
    /// stderr): what a listing shows unless asked for output, so that a page's size
    /// does not grow with what hooks print. The fields stay, empty, so the shape is
    /// the same.
    pub fn summary(&self) -> Deployment {
        let mut deployment = self.redacted();
        deployment.outputs.clear();
        deployment.deploy_stdout.clear();
        deployment.deploy_stderr.clear();
        deployment
    }

    /// The event of type `ty` about this deployment as it now stands (hidden outputs
    /// `<hidden>`), with its stable id `deployment:<id>:<name>`.
    pub fn event(&self, ty: EventType) -> CloudEvent {
        event_of(&self.redacted(), ty)
    }

    /// The event of step `ty` (`delivered` or `started`) as the deployment showed at that
    /// step, reported once the record went past it before the step's own answer came
    /// (see `responses`): status QUEUED or IN_PROGRESS, no reason, code or outputs yet.
    pub fn step_event(&self, ty: EventType) -> CloudEvent {
        let mut at_step = self.clone();
        let d = &mut at_step.deployment;
        d.status = if ty == EventType::DeploymentDelivered {
            DeploymentStatus::Queued
        } else {
            DeploymentStatus::InProgress
        };
        d.status_reason = None;
        d.deploy_status_code = None;
        d.outputs = BTreeMap::new();
        at_step.event(ty)
    }
}

/// The event of type `ty` about `d` (redacted already), with its stable id
/// `deployment:<id>:<name>`.
fn event_of(d: &Deployment, ty: EventType) -> CloudEvent {
    let data = DeploymentEventData {
        deployment_id: d.id.clone(),
        server_id: d.server_id.clone(),
        config_id: d.config_id.clone(),
        action: d.action.to_string(),
        status: d.status,
        status_reason: d.status_reason.clone(),
        stack_id: d.stack_id.clone(),
        resource_name: d.resource_name.clone(),
        deploy_status_code: d.deploy_status_code,
        outputs: d.outputs.clone(),
    };
    CloudEvent::new(
        ty,
        &d.tenant,
        deployment_event_id(&d.id, ty),
        format!("deployments/{}", d.id),
        &data,
    )
    .server(&d.server_id)
    .stack(d.stack_id.as_ref())
    .deployment(&d.id)
}

/// The `deployment.queued` event of `d` as it was at acceptance (status QUEUED, no
/// reason, code or outputs), from the deployment as it stands now: the same id, so the
/// broker drops it when the acceptance's copy is stored ([`crate::events`]). Hidden
/// values are in no field of it.
pub fn queued_event(d: &Deployment) -> CloudEvent {
    let mut at_acceptance = d.clone();
    at_acceptance.status = DeploymentStatus::Queued;
    at_acceptance.status_reason = None;
    at_acceptance.deploy_status_code = None;
    at_acceptance.outputs = BTreeMap::new();
    event_of(&at_acceptance, EventType::DeploymentQueued)
}

/// The event reporting how `d` ended: `completed`, `timed_out` (FAILED "timed out",
/// whether the agent or the sweeper said so) or `failed`; `None` while it runs.
pub fn end_event_type(d: &Deployment) -> Option<EventType> {
    match d.status {
        DeploymentStatus::Complete => Some(EventType::DeploymentCompleted),
        DeploymentStatus::Failed if d.status_reason.as_deref() == Some(TIMED_OUT) => {
            Some(EventType::DeploymentTimedOut)
        }
        DeploymentStatus::Failed => Some(EventType::DeploymentFailed),
        _ => None,
    }
}

/// Names of the outputs a config declares hidden.
pub fn hidden_outputs(config: &Config) -> Vec<String> {
    config
        .outputs
        .iter()
        .filter(|o| o.hidden)
        .map(|o| o.name.clone())
        .collect()
}

/// Replaces the value of every input (or output) named in `hidden` by [`HIDDEN`].
pub fn redact(values: &mut BTreeMap<String, serde_json::Value>, hidden: &[String]) {
    for name in hidden {
        if let Some(value) = values.get_mut(name) {
            *value = serde_json::Value::String(HIDDEN.to_owned());
        }
    }
}

/// The config as the API shows it: the declared default of every hidden input is a
/// secret too, so it reads as [`HIDDEN`].
pub fn redacted_config(mut config: Config) -> Config {
    for input in config.inputs.iter_mut().filter(|i| i.hidden) {
        if input.default.is_some() {
            input.default = Some(serde_json::Value::String(HIDDEN.to_owned()));
        }
    }
    config
}

/// The input values a deployment runs with: the given ones plus every declared default.
pub fn with_defaults(
    config: &Config,
    mut values: BTreeMap<String, serde_json::Value>,
) -> BTreeMap<String, serde_json::Value> {
    for input in &config.inputs {
        if let Some(default) = &input.default {
            values
                .entry(input.name.clone())
                .or_insert_with(|| default.clone());
        }
    }
    values
}

/// Names of the inputs a config declares hidden.
pub fn hidden_inputs(config: &Config) -> Vec<String> {
    config
        .inputs
        .iter()
        .filter(|i| i.hidden)
        .map(|i| i.name.clone())
        .collect()
}

/// Names of the inputs hidden in either list, `first`'s order first: a value carried
/// over from another deployment stays hidden even if the new config does not say so.
pub fn hidden_union(first: Vec<String>, second: &[String]) -> Vec<String> {
    let mut names = first;
    for name in second {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

/// True when two configs would hand a hook the same thing: everything but id, name
/// and creation time is equal.
pub fn same_config_content(a: &Config, b: &Config) -> bool {
    a.group == b.group
        && a.config == b.config
        && a.inputs == b.inputs
        && a.outputs == b.outputs
        && a.options == b.options
        && a.hooks == b.hooks
        && a.actions == b.actions
        && a.substitute_inputs == b.substitute_inputs
}

/// True when `new` asks for what `stored` holds: the same config, server, action and
/// input values, so a `POST` repeated with the same id is answered with `stored`.
///
/// Hidden inputs are compared by name only: comparing their values would let anyone who
/// can guess one confirm it by the answer.
pub fn same_request(stored: &DeploymentRecord, new: &DeploymentRecord) -> bool {
    let (a, b) = (&stored.deployment, &new.deployment);
    a.config_id == b.config_id
        && a.server_id == b.server_id
        && a.action == b.action
        && stored.redacted().input_values == new.redacted().input_values
}

/// Whether an agent's answer naming the request message of `digest` is about `record`'s
/// request.
///
/// A record with a digest takes only answers with the same digest: a stray or forged
/// message that names the deployment, and every answer to it, has another digest (or,
/// from an agent older than digests, none). A record without one (written by a gateway
/// older than digests) takes every answer, as that gateway did.
pub fn answers_request(record: &DeploymentRecord, digest: Option<&RequestDigest>) -> bool {
    match &record.request_digest {
        Some(recorded) => digest == Some(recorded),
        None => true,
    }
}

/// Marks the request as published; true if that changed anything.
pub fn apply_published(record: &mut DeploymentRecord) -> bool {
    !std::mem::replace(&mut record.request_published, true)
}

/// The agent received the request: records when, the first time only, and not once
/// the deployment ended (a request that reaches its agent after it timed out).
pub fn apply_delivered(record: &mut DeploymentRecord, at: OffsetDateTime) -> bool {
    let d = &mut record.deployment;
    if d.delivered_at.is_some() || d.status.is_terminal() {
        return false;
    }
    d.delivered_at = Some(at);
    // An agent only answers what it pulled from the queue, so the request is out.
    record.request_published = true;
    true
}

/// The agent recorded the deployment as started: QUEUED → IN_PROGRESS, never backwards.
pub fn apply_started(
    record: &mut DeploymentRecord,
    at: OffsetDateTime,
    now: OffsetDateTime,
) -> bool {
    let d = &mut record.deployment;
    if d.status != DeploymentStatus::Queued {
        return false;
    }
    d.status = DeploymentStatus::InProgress;
    d.started_at = Some(at);
    d.updated_at = now;
    // An agent only answers what it pulled from the queue, so the request is out.
    record.request_published = true;
    true
}

/// The agent's final result: moves a non-terminal deployment to COMPLETE or FAILED.
///
/// A result whose status is not terminal is refused (returns false), as is anything
/// for a deployment that already finished.
pub fn apply_finished(
    record: &mut DeploymentRecord,
    result: &DeploymentResult,
    now: OffsetDateTime,
) -> bool {
    let d = &mut record.deployment;
    if d.status.is_terminal() || !result.status.is_terminal() {
        return false;
    }
    d.status = result.status;
    d.status_reason = result.status_reason.clone();
    d.outputs = result.outputs.clone();
    d.deploy_stdout = result.deploy_stdout.clone();
    d.deploy_stderr = result.deploy_stderr.clone();
    d.deploy_status_code = result.deploy_status_code;
    if result.started_at.is_some() {
        d.started_at = result.started_at;
    }
    d.finished_at = Some(result.finished_at);
    d.updated_at = now;
    record.request_published = true;
    true
}

/// When the gateway fails `d` for want of an answer: `expires_at` while it is QUEUED,
/// [`IN_PROGRESS_GRACE`] later once an agent started it, never once it is terminal.
pub fn timeout_deadline(d: &Deployment) -> Option<OffsetDateTime> {
    match d.status {
        s if s.is_terminal() => None,
        DeploymentStatus::InProgress => Some(d.expires_at + IN_PROGRESS_GRACE),
        _ => Some(d.expires_at),
    }
}

/// No answer came in time: a deployment past its [`timeout_deadline`] becomes FAILED
/// "timed out"; false (nothing changed) before it, or once the deployment is terminal.
pub fn apply_timeout(record: &mut DeploymentRecord, now: OffsetDateTime) -> bool {
    let d = &mut record.deployment;
    if timeout_deadline(d).is_none_or(|deadline| now < deadline) {
        return false;
    }
    d.status = DeploymentStatus::Failed;
    d.status_reason = Some(TIMED_OUT.to_owned());
    d.finished_at = Some(now);
    d.updated_at = now;
    true
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flue_proto::{Action, ConfigId, ConfigSpec, DeploymentId, ServerId, TenantId};
    use serde_json::json;

    /// A `script` config with a plain input, a hidden one with a default, and one without.
    pub(crate) fn config() -> Config {
        let spec: ConfigSpec = serde_json::from_value(json!({
            "group": "script",
            "inputs": [
                {"name": "foo", "default": "dflt"},
                {"name": "secret", "hidden": true, "default": "s3cret"},
                {"name": "plain"}
            ]
        }))
        .expect("spec");
        spec.into_config(ConfigId::new("c1").expect("id"), OffsetDateTime::UNIX_EPOCH)
    }

    /// A queued deployment of [`config`] (its values as given, nothing sealed).
    pub(crate) fn record() -> DeploymentRecord {
        let config = config();
        let now = OffsetDateTime::UNIX_EPOCH;
        DeploymentRecord {
            deployment: Deployment {
                id: DeploymentId::new("d1").expect("id"),
                tenant: TenantId::new("t").expect("id"),
                server_id: ServerId::new("s1").expect("id"),
                config_id: config.id.clone(),
                group: config.group.clone(),
                name: "d1".into(),
                action: Action::create(),
                input_values: with_defaults(&config, [("foo".into(), json!("given"))].into()),
                stack_id: None,
                resource_name: None,
                status: DeploymentStatus::Queued,
                status_reason: None,
                outputs: BTreeMap::new(),
                deploy_stdout: String::new(),
                deploy_stderr: String::new(),
                deploy_status_code: None,
                timeout_secs: 60,
                created_at: now,
                updated_at: now,
                delivered_at: None,
                started_at: None,
                finished_at: None,
                expires_at: now + time::Duration::seconds(60),
            },
            request_published: false,
            request_digest: None,
            agent_jwt: None,
            polled: false,
            hidden_inputs: hidden_inputs(&config),
            hidden_outputs: Vec::new(),
            skipped: Skipped::default(),
        }
    }

    fn result(status: DeploymentStatus) -> DeploymentResult {
        DeploymentResult {
            status,
            status_reason: None,
            outputs: [("out".to_owned(), json!("v"))].into(),
            deploy_stdout: "hi".into(),
            deploy_stderr: String::new(),
            deploy_status_code: Some(0),
            started_at: Some(OffsetDateTime::UNIX_EPOCH),
            finished_at: OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(2),
        }
    }

    #[test]
    fn defaults_fill_only_missing_inputs_and_hidden_values_are_redacted() {
        let r = record();
        assert_eq!(r.deployment.input_values["foo"], json!("given"));
        assert_eq!(r.deployment.input_values["secret"], json!("s3cret"));
        assert!(!r.deployment.input_values.contains_key("plain"));
        let shown = r.redacted();
        assert_eq!(shown.input_values["secret"], json!(HIDDEN));
        assert_eq!(shown.input_values["foo"], json!("given"));
    }

    #[test]
    fn started_never_moves_backwards() {
        let now = OffsetDateTime::UNIX_EPOCH;
        let mut r = record();
        assert!(apply_started(&mut r, now, now));
        assert_eq!(r.deployment.status, DeploymentStatus::InProgress);
        assert!(!apply_started(&mut r, now, now), "second start is a no-op");
        assert!(apply_finished(
            &mut r,
            &result(DeploymentStatus::Complete),
            now
        ));
        assert!(!apply_started(&mut r, now, now), "no start after the end");
        assert_eq!(r.deployment.status, DeploymentStatus::Complete);
        assert_eq!(r.deployment.outputs["out"], json!("v"));
    }

    #[test]
    fn queued_deployments_time_out_at_expiry_started_ones_after_the_grace() {
        let expires = record().deployment.expires_at;
        let just_before = expires - time::Duration::milliseconds(1);

        let mut queued = record();
        assert_eq!(timeout_deadline(&queued.deployment), Some(expires));
        assert!(!apply_timeout(&mut queued, just_before));
        assert!(apply_timeout(&mut queued, expires));
        assert_eq!(queued.deployment.status, DeploymentStatus::Failed);
        assert_eq!(queued.deployment.status_reason.as_deref(), Some(TIMED_OUT));
        assert_eq!(queued.deployment.finished_at, Some(expires));

        let mut started = record();
        assert!(apply_started(&mut started, just_before, just_before));
        let deadline = expires + IN_PROGRESS_GRACE;
        assert_eq!(timeout_deadline(&started.deployment), Some(deadline));
        for early in [expires, deadline - time::Duration::milliseconds(1)] {
            assert!(!apply_timeout(&mut started, early), "{early}");
            assert_eq!(started.deployment.status, DeploymentStatus::InProgress);
        }
        // The agent's own "timed out" report, with the hook's output, still lands.
        let mut killed = result(DeploymentStatus::Failed);
        killed.status_reason = Some(TIMED_OUT.to_owned());
        let mut reported = started.clone();
        assert!(apply_finished(&mut reported, &killed, expires));
        assert_eq!(reported.deployment.deploy_stdout, "hi");
        assert_eq!(timeout_deadline(&reported.deployment), None);

        assert!(apply_timeout(&mut started, deadline));
        assert_eq!(started.deployment.status_reason.as_deref(), Some(TIMED_OUT));
    }

    #[test]
    fn terminal_deployments_are_frozen() {
        let now = OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(60);
        let mut r = record();
        assert!(apply_timeout(&mut r, now));
        assert_eq!(r.deployment.status_reason.as_deref(), Some(TIMED_OUT));
        assert!(!apply_finished(
            &mut r,
            &result(DeploymentStatus::Complete),
            now
        ));
        assert!(!apply_timeout(&mut r, now));
        assert_eq!(r.deployment.status, DeploymentStatus::Failed);
    }

    #[test]
    fn non_terminal_results_are_refused() {
        let now = OffsetDateTime::UNIX_EPOCH;
        let mut r = record();
        assert!(!apply_finished(
            &mut r,
            &result(DeploymentStatus::InProgress),
            now
        ));
        assert_eq!(r.deployment.status, DeploymentStatus::Queued);
    }

    #[test]
    fn repeated_requests_compare_everything_but_hidden_values() {
        let stored = record();
        let mut retry = stored.clone();
        retry.deployment.created_at += time::Duration::seconds(5);
        retry.deployment.expires_at += time::Duration::seconds(5);
        assert!(same_request(&stored, &retry));
        retry
            .deployment
            .input_values
            .insert("secret".into(), json!("a guess"));
        assert!(same_request(&stored, &retry), "a hidden value is no oracle");
        for change in [
            |d: &mut Deployment| d.server_id = ServerId::new("s2").expect("id"),
            |d: &mut Deployment| d.config_id = ConfigId::new("c2").expect("id"),
            |d: &mut Deployment| d.action = Action::new("DELETE").expect("action"),
            |d: &mut Deployment| {
                d.input_values.insert("foo".into(), json!("other"));
            },
            |d: &mut Deployment| {
                d.input_values.remove("secret");
            },
        ] {
            let mut other = stored.clone();
            change(&mut other.deployment);
            assert!(!same_request(&stored, &other), "{:?}", other.deployment);
        }
    }

    #[test]
    fn config_content_ignores_id_name_and_time_only() {
        let a = config();
        let mut b = a.clone();
        b.id = ConfigId::new("c2").expect("id");
        b.name = "other name".into();
        b.created_at += time::Duration::seconds(5);
        assert!(same_config_content(&a, &b));
        for change in [
            |c: &mut Config| c.group = "ansible".into(),
            |c: &mut Config| c.config = json!("echo other"),
            |c: &mut Config| c.inputs[0].default = Some(json!("other")),
            |c: &mut Config| {
                c.outputs = serde_json::from_value(json!([{"name": "o"}])).expect("outputs")
            },
            |c: &mut Config| c.options = json!({"x": 1}),
            |c: &mut Config| {
                c.hooks.insert("DELETE".into(), json!("rm -rf /opt/app"));
            },
            |c: &mut Config| {
                c.actions.insert(
                    "backup".into(),
                    flue_proto::AdhocAction {
                        config: json!("tar c"),
                        description: None,
                    },
                );
            },
            |c: &mut Config| c.substitute_inputs = true,
        ] {
            let mut other = b.clone();
            change(&mut other);
            assert!(!same_config_content(&a, &other), "{other:?}");
        }
    }

    #[test]
    fn hidden_names_are_united_without_repeats() {
        let names = hidden_union(vec!["a".into(), "b".into()], &["b".into(), "c".into()]);
        assert_eq!(names, ["a", "b", "c"]);
    }

    #[test]
    fn events_report_the_record_with_hidden_outputs_redacted() {
        let now = OffsetDateTime::UNIX_EPOCH;
        let mut r = record();
        r.hidden_outputs = vec!["out".into()];
        assert_eq!(end_event_type(&r.deployment), None);
        let queued = r.event(EventType::DeploymentQueued);
        assert_eq!(queued.id, "deployment:d1:queued");
        assert_eq!(queued.subject, "deployments/d1");
        assert_eq!(queued.nats_subject(), "flue.t.evt.deployment.~.s1.queued");
        assert_eq!(queued.data["status"], json!("QUEUED"));
        assert!(queued.data.get("outputs").is_none());

        assert!(apply_finished(
            &mut r,
            &result(DeploymentStatus::Complete),
            now
        ));
        let ty = end_event_type(&r.deployment).expect("terminal");
        assert_eq!(ty, EventType::DeploymentCompleted);
        let done = r.event(ty);
        assert_eq!(done.id, "deployment:d1:completed");
        assert_eq!(done.data["outputs"]["out"], json!(HIDDEN));
        assert_eq!(done.data["deploy_status_code"], json!(0));
        let text = serde_json::to_string(&done).expect("json");
        assert!(!text.contains("s3cret"), "{text}");

        let mut timed_out = record();
        assert!(apply_timeout(
            &mut timed_out,
            now + time::Duration::seconds(60)
        ));
        assert_eq!(
            end_event_type(&timed_out.deployment),
            Some(EventType::DeploymentTimedOut)
        );
        let mut failed = record();
        assert!(apply_finished(
            &mut failed,
            &result(DeploymentStatus::Failed),
            now
        ));
        assert_eq!(
            end_event_type(&failed.deployment),
            Some(EventType::DeploymentFailed)
        );
    }

    #[test]
    fn delivery_is_recorded_once_and_not_after_the_end() {
        let at = OffsetDateTime::UNIX_EPOCH;
        let mut r = record();
        assert!(apply_delivered(&mut r, at));
        assert!(r.request_published);
        assert!(!apply_delivered(&mut r, at + time::Duration::seconds(1)));
        assert_eq!(r.deployment.delivered_at, Some(at));
        let mut late = record();
        assert!(apply_timeout(&mut late, at + time::Duration::seconds(60)));
        assert!(!apply_delivered(
            &mut late,
            at + time::Duration::seconds(61)
        ));
        assert_eq!(late.deployment.delivered_at, None);
    }

    #[test]
    fn only_answers_to_the_recorded_request_apply() {
        let mut r = record();
        let real = RequestDigest::of(b"real");
        let stray = RequestDigest::of(b"stray");
        // A record of an older gateway takes any answer.
        assert!(answers_request(&r, None));
        assert!(answers_request(&r, Some(&stray)));
        r.request_digest = Some(real.clone());
        assert!(answers_request(&r, Some(&real)));
        assert!(!answers_request(&r, Some(&stray)));
        assert!(!answers_request(&r, None));
    }

    #[test]
    fn publishing_is_recorded_once() {
        let mut r = record();
        assert!(apply_published(&mut r));
        assert!(!apply_published(&mut r));
    }
}
