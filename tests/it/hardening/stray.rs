//! Stray messages on a server's request queue cannot decide a real deployment: an
//! undecodable one is reported as rejected (a `server.request_rejected` event) and
//! attributed to no deployment; a decodable forgery for a queued deployment runs (there
//! are no signatures yet) but its answers carry the digest of the forged request, which
//! does not match the record, so the real request still decides the deployment.

use async_nats::jetstream;
use flue_proto::{
    Action, CloudEvent, CreateDeployment, DeploymentId, DeploymentRequest, DeploymentStatus,
    EventType, PROTOCOL_VERSION, ServerId, TenantId, subject,
};
use flue_tests::{EventTap, Flue, WAIT};
use time::OffsetDateTime;

const REAL: &str = "printf real > \"$heat_outputs_path.result\"\n";

fn default_tenant() -> TenantId {
    TenantId::new("default").expect("tenant")
}

/// Publishes `payload` on `server`'s request subject as anyone on the broker could, and
/// returns its stream sequence.
async fn publish_on_queue(flue: &Flue, server: &str, payload: Vec<u8>) -> u64 {
    let js = jetstream::new(flue.nats.client().await);
    let subject = subject::request(&default_tenant(), &ServerId::new(server).expect("id"));
    js.publish(subject, payload.into())
        .await
        .expect("publish")
        .await
        .expect("stored")
        .sequence
}

/// Creates deployment `id` of config `real` on `s` (its agent not started yet).
async fn deploy_real(flue: &Flue, id: &str) -> DeploymentId {
    let id = DeploymentId::new(id).expect("id");
    flue.client()
        .create_deployment(&CreateDeployment {
            id: Some(id.clone()),
            ..CreateDeployment::new("real".parse().expect("id"), "s".parse().expect("id"))
        })
        .await
        .expect("create deployment");
    id
}

fn about_deployment<'a>(id: &'a DeploymentId) -> impl Fn(&CloudEvent) -> bool + 'a {
    move |e| e.deployment.as_ref() == Some(id)
}

#[tokio::test]
async fn stray_garbage_ahead_of_a_request_is_reported_and_decides_nothing() {
    let flue = Flue::start().await;
    flue.register("s").await;
    flue.script_config("real", REAL, &[], &["result"]).await;
    let mut tap = EventTap::from_start(&flue.nats.client().await).await;
    let stray = br#"{"v":99,"deployment_id":"victim"}"#.to_vec();
    let seq = publish_on_queue(&flue, "s", stray).await;
    let victim = deploy_real(&flue, "victim").await;

    let _agent = flue.agent("s", &[]).await;
    let done = flue.finished(&victim).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.outputs["result"], "real");

    let rejected = tap
        .wait_for("request rejected", WAIT, |e| {
            e.ty == EventType::ServerRequestRejected
        })
        .await;
    assert_eq!(rejected.server.as_ref().map(|s| s.as_str()), Some("s"));
    assert_eq!(rejected.deployment, None, "attributed to a deployment");
    assert_eq!(rejected.data["server_id"], "s", "{}", rejected.data);
    assert_eq!(rejected.data["stream_seq"], seq, "{}", rejected.data);
    let reason = rejected.data["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("unreadable request"), "{reason}");
    tap.wait_for("victim completed", WAIT, |e| {
        about_deployment(&victim)(e) && e.ty == EventType::DeploymentCompleted
    })
    .await;
    let victims: Vec<EventType> = tap
        .events()
        .iter()
        .filter(|e| about_deployment(&victim)(e))
        .map(|e| e.ty)
        .collect();
    assert_eq!(
        victims,
        [
            EventType::DeploymentQueued,
            EventType::DeploymentDelivered,
            EventType::DeploymentStarted,
            EventType::DeploymentCompleted
        ],
        "only the real request's events"
    );
}

#[tokio::test]
async fn a_forged_request_for_a_queued_deployment_cannot_change_its_record() {
    let flue = Flue::start().await;
    flue.register("s").await;
    flue.script_config("real", REAL, &[], &["result"]).await;
    let forged_config = flue
        .script_config("forged", "echo forged; exit 3\n", &[], &[])
        .await;
    let now = OffsetDateTime::now_utc();
    let forged = DeploymentRequest {
        v: PROTOCOL_VERSION,
        tenant: default_tenant(),
        server: ServerId::new("s").expect("id"),
        deployment_id: DeploymentId::new("d1").expect("id"),
        name: "d1".to_owned(),
        action: Action::create(),
        config: forged_config,
        input_values: Default::default(),
        hidden_inputs: Vec::new(),
        stack_id: None,
        resource_name: None,
        created_at: now,
        expires_at: now + time::Duration::hours(1),
    };
    // The forgery is ahead of the real request on the queue.
    publish_on_queue(&flue, "s", serde_json::to_vec(&forged).expect("json")).await;
    let id = deploy_real(&flue, "d1").await;

    let agent = flue.agent("s", &[]).await;
    // The forgery ran (nothing can tell it from a real request before issue 10's
    // signatures), and its answers reached the gateway, which refused them.
    agent.logs().wait_for("exited with status 3", WAIT).await;
    flue.gateway
        .logs()
        .wait_for("stray agent answer", WAIT)
        .await;
    let done = flue.finished(&id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.outputs["result"], "real");
    assert!(!done.deploy_stdout.contains("forged"), "{done:?}");
}
