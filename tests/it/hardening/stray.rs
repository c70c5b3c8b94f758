//! Stray messages on a server's request queue cannot decide a real deployment: garbage is
//! reported as rejected (a `server.request_rejected` event, code `unsigned`) and
//! attributed to no deployment; a well-formed forgery for a queued deployment is refused
//! before anything runs (it is not signed by the gateway), so the real request still
//! decides the deployment. The signature cases one by one are in `security/signing.rs`.

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
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
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
    assert_eq!(rejected.data["code"], "unsigned", "{}", rejected.data);
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
async fn an_unsigned_forgery_for_a_queued_deployment_never_runs_nor_changes_its_record() {
    let flue = Flue::start().await;
    flue.register("s").await;
    flue.script_config("real", REAL, &[], &["result"]).await;
    let marker = flue.path("forged-ran");
    let forged_config = flue
        .script_config(
            "forged",
            &format!("touch '{}'; exit 3\n", marker.display()),
            &[],
            &[],
        )
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
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
    // The forgery is ahead of the real request on the queue.
    let seq = publish_on_queue(&flue, "s", serde_json::to_vec(&forged).expect("json")).await;
    let id = deploy_real(&flue, "d1").await;

    let _agent = flue.agent("s", &[]).await;
    let rejected = tap
        .wait_for("the forgery rejected", WAIT, |e| {
            e.ty == EventType::ServerRequestRejected && e.data["stream_seq"] == seq
        })
        .await;
    assert_eq!(rejected.data["code"], "unsigned", "{}", rejected.data);
    let done = flue.finished(&id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.outputs["result"], "real");
    assert!(!done.deploy_stdout.contains("forged"), "{done:?}");
    // The agent handles one message at a time, in order: the forgery was settled before
    // the real request ran, and its hook never did.
    assert!(!marker.exists(), "the forged request's hook ran");
}
