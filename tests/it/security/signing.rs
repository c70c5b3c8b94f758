//! Signed requests and answers (issue 10, point 6): someone with publish rights on a
//! server's request subject cannot get a hook run, and someone with publish rights on
//! its response subject cannot change a deployment.
//!
//! Each refused request carries a config whose hook would create a marker file; the
//! agent handles its queue one message at a time, in order, so once the rejection event
//! is in and a real deployment queued behind the forgery has finished, the marker's
//! absence proves the hook never ran.

use async_nats::HeaderMap;
use async_nats::jetstream;
use flue_proto::signing::{self, AnswerClaims, PublishWindow, RequestClaims};
use flue_proto::{
    Action, AgentMessage, CloudEvent, DeploymentId, DeploymentRequest, DeploymentResult,
    DeploymentStatus, EventType, PROTOCOL_VERSION, RequestDigest, ServerId, TenantId, subject,
};
use flue_tests::{EventTap, Flue, WAIT};
use nkeys::KeyPair;
use time::OffsetDateTime;

fn tenant() -> TenantId {
    "default".parse().expect("tenant")
}

fn server(id: &str) -> ServerId {
    id.parse().expect("server")
}

/// The gateway's request-signing key, from its state directory.
fn gateway_key(flue: &Flue) -> KeyPair {
    let seed = std::fs::read_to_string(flue.gateway.state_dir().join("signing.nk"))
        .expect("the gateway's signing key");
    KeyPair::from_seed(seed.trim()).expect("seed")
}

/// A well-formed request for deployment `id` on server `s` whose hook touches `marker`.
async fn forged_request(flue: &Flue, id: &str, marker: &std::path::Path) -> DeploymentRequest {
    let config = flue
        .script_config(
            &format!("forged-{id}"),
            &format!("#!/bin/sh\ntouch '{}'\n", marker.display()),
            &[],
            &[],
        )
        .await;
    let now = OffsetDateTime::now_utc();
    DeploymentRequest {
        v: PROTOCOL_VERSION,
        tenant: tenant(),
        server: server("s"),
        deployment_id: DeploymentId::new(id).expect("id"),
        name: id.to_owned(),
        action: Action::create(),
        config,
        input_values: Default::default(),
        hidden_inputs: Vec::new(),
        stack_id: None,
        resource_name: None,
        created_at: now,
        expires_at: now + time::Duration::hours(1),
        agent_jwt: None,
    }
}

/// Publishes `payload` with `headers` on server `s`'s request subject, as any client with
/// publish rights there could; returns its stream sequence.
async fn publish_request(flue: &Flue, payload: Vec<u8>, headers: HeaderMap) -> u64 {
    let js = jetstream::new(flue.nats.client().await);
    js.publish_with_headers(
        subject::request(&tenant(), &server("s")),
        headers,
        payload.into(),
    )
    .await
    .expect("publish")
    .await
    .expect("stored")
    .sequence
}

fn signed_headers(claims: &impl serde::Serialize, key: &KeyPair) -> HeaderMap {
    let signed = signing::sign(claims, key).expect("signs");
    let mut headers = HeaderMap::new();
    headers.insert(signing::REQUEST_CLAIMS_HEADER, signed.claims.as_str());
    headers.insert(signing::SIGNATURE_HEADER, signed.signature.as_str());
    headers
}

/// A key and how it changes the claims before signing.
type Signer<'a> = (&'a KeyPair, &'a dyn Fn(&mut RequestClaims));

/// Publishes `forged` (signed by `key` with `claims` changed by `tweak`, or unsigned),
/// queues a real deployment behind it, starts the agent, and returns the rejection
/// event once the real deployment completed.
async fn refused(flue: &Flue, forged: &DeploymentRequest, sign: Option<Signer<'_>>) -> CloudEvent {
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
    let payload = forged.encode();
    let headers = match sign {
        None => HeaderMap::new(),
        Some((key, tweak)) => {
            let mut claims = RequestClaims::of(forged, RequestDigest::of(&payload));
            tweak(&mut claims);
            signed_headers(&claims, key)
        }
    };
    let seq = publish_request(flue, payload, headers).await;
    flue.script_config("real", "#!/bin/sh\necho real\n", &[], &[])
        .await;
    let real = flue.deploy("real", "s", &[]).await;
    let _agent = flue.agent("s", &[]).await;
    assert_eq!(
        flue.finished(&real.id).await.status,
        DeploymentStatus::Complete
    );
    tap.wait_for("the forgery rejected", WAIT, |e| {
        e.ty == EventType::ServerRequestRejected && e.data["stream_seq"] == seq
    })
    .await
}

#[tokio::test]
async fn an_unsigned_request_is_never_run_and_is_reported() {
    let flue = Flue::start().await;
    flue.register("s").await;
    let marker = flue.path("ran");
    let forged = forged_request(&flue, "f1", &marker).await;
    let rejected = refused(&flue, &forged, None).await;
    assert_eq!(rejected.data["code"], "unsigned", "{}", rejected.data);
    assert!(!marker.exists(), "the unsigned request's hook ran");
}

#[tokio::test]
async fn a_request_signed_by_another_key_is_never_run_and_is_reported() {
    let flue = Flue::start().await;
    flue.register("s").await;
    let marker = flue.path("ran");
    let forged = forged_request(&flue, "f1", &marker).await;
    let other = KeyPair::new_server();
    let rejected = refused(&flue, &forged, Some((&other, &|_| {}))).await;
    assert_eq!(rejected.data["code"], "bad_signature", "{}", rejected.data);
    assert!(!marker.exists(), "the forged request's hook ran");
}

#[tokio::test]
async fn a_request_signed_for_another_server_is_never_run_and_is_reported() {
    let flue = Flue::start().await;
    flue.register("s").await;
    let marker = flue.path("ran");
    let forged = forged_request(&flue, "f1", &marker).await;
    // Signed by the real gateway key, but for server `t`: put on `s`'s queue.
    let key = gateway_key(&flue);
    let rejected = refused(&flue, &forged, Some((&key, &|c| c.server = server("t")))).await;
    assert_eq!(rejected.data["code"], "wrong_server", "{}", rejected.data);
    assert!(!marker.exists(), "the request for another server ran");
}

#[tokio::test]
async fn a_request_signed_for_another_tenant_is_never_run_and_is_reported() {
    let flue = Flue::start().await;
    flue.register("s").await;
    let marker = flue.path("ran");
    let forged = forged_request(&flue, "f1", &marker).await;
    let key = gateway_key(&flue);
    let other = |c: &mut RequestClaims| c.tenant = "globex".parse().expect("tenant");
    let rejected = refused(&flue, &forged, Some((&key, &other))).await;
    assert_eq!(rejected.data["code"], "wrong_tenant", "{}", rejected.data);
    assert!(!marker.exists(), "the request for another tenant ran");
}

#[tokio::test]
async fn signed_bytes_that_are_no_request_are_reported_undecodable() {
    let flue = Flue::start().await;
    flue.register("s").await;
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
    let payload = b"{\"not\": \"a request\"}".to_vec();
    let now = OffsetDateTime::now_utc();
    let claims = RequestClaims {
        v: signing::CLAIMS_VERSION,
        tenant: tenant(),
        server: server("s"),
        deployment: DeploymentId::new("x").expect("id"),
        digest: RequestDigest::of(&payload),
        created: now,
        expires: now + time::Duration::hours(1),
    };
    // Signed as the gateway signs, publish window and message id included.
    let key = gateway_key(&flue);
    let mut headers = signed_headers(&claims, &key);
    let window = PublishWindow::of(RequestDigest::of(&payload), "x-1".into(), now);
    let window = signing::sign(&window, &key).expect("signs");
    headers.insert(signing::PUBLISH_WINDOW_HEADER, window.claims.as_str());
    headers.insert(signing::WINDOW_SIGNATURE_HEADER, window.signature.as_str());
    headers.insert(async_nats::header::NATS_MESSAGE_ID, "x-1");
    let seq = publish_request(&flue, payload, headers).await;
    let _agent = flue.agent("s", &[]).await;
    let rejected = tap
        .wait_for("the bytes rejected", WAIT, |e| {
            e.ty == EventType::ServerRequestRejected && e.data["stream_seq"] == seq
        })
        .await;
    assert_eq!(rejected.data["code"], "undecodable", "{}", rejected.data);
    assert_eq!(rejected.deployment, None, "attributed to a deployment");
}

#[tokio::test]
async fn an_expired_request_is_never_run_and_is_reported() {
    let flue = Flue::start().await;
    flue.register("s").await;
    let marker = flue.path("ran");
    let forged = forged_request(&flue, "f1", &marker).await;
    let key = gateway_key(&flue);
    let past =
        |c: &mut RequestClaims| c.expires = OffsetDateTime::now_utc() - time::Duration::SECOND;
    let rejected = refused(&flue, &forged, Some((&key, &past))).await;
    assert_eq!(rejected.data["code"], "expired", "{}", rejected.data);
    assert!(!marker.exists(), "the expired request ran");
}

#[tokio::test]
async fn a_replayed_copy_of_a_real_signed_request_is_never_run_again() {
    let flue = Flue::start().await;
    flue.register("s").await;
    let runs = flue.path("runs");
    let script = format!("#!/bin/sh\necho run >> '{}'\n", runs.display());
    flue.script_config("count", &script, &[], &[]).await;
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
    let _agent = flue.agent("s", &[]).await;
    let real = flue.deploy("count", "s", &[]).await;
    assert_eq!(
        flue.finished(&real.id).await.status,
        DeploymentStatus::Complete
    );
    // Copy the real request, headers and all, from the stream and publish it again.
    let js = jetstream::new(flue.nats.client().await);
    let stream = js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("stream");
    let original = stream
        .get_last_raw_message_by_subject(&subject::request(&tenant(), &server("s")))
        .await
        .expect("the real request");
    // The signed headers only: the message id would make the broker drop the copy as a
    // duplicate within its window (an attacker changes it, or waits the window out). The
    // signed publish window names that id, so the agent refuses the copy before its
    // ledger is even asked.
    let mut headers = HeaderMap::new();
    for name in [
        signing::REQUEST_CLAIMS_HEADER,
        signing::SIGNATURE_HEADER,
        signing::PUBLISH_WINDOW_HEADER,
        signing::WINDOW_SIGNATURE_HEADER,
    ] {
        let value = original.headers.get(name).expect("signed header");
        headers.insert(name, value.as_str());
    }
    let seq = publish_request(&flue, original.payload.to_vec(), headers).await;
    assert_ne!(seq, original.sequence);
    let rejected = tap
        .wait_for("the replay rejected", WAIT, |e| {
            e.ty == EventType::ServerRequestRejected && e.data["stream_seq"] == seq
        })
        .await;
    assert_eq!(rejected.data["code"], "replayed", "{}", rejected.data);
    assert_eq!(std::fs::read_to_string(&runs).expect("runs"), "run\n");
    let after = flue.client().get_deployment(&real.id).await.expect("read");
    assert_eq!(after.status, DeploymentStatus::Complete, "{after:?}");
    assert_eq!(after.finished_at, flue.finished(&real.id).await.finished_at);
}

#[tokio::test]
async fn a_copy_of_a_signed_request_never_runs_on_an_agent_that_lost_its_state_dir() {
    let flue = Flue::start().await;
    flue.register("s").await;
    let runs = flue.path("runs");
    let script = format!("#!/bin/sh\necho run >> '{}'\n", runs.display());
    flue.script_config("count", &script, &[], &[]).await;
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
    let mut agent = flue.agent("s", &[]).await;
    let real = flue.deploy("count", "s", &[]).await;
    assert_eq!(
        flue.finished(&real.id).await.status,
        DeploymentStatus::Complete
    );
    agent.terminate().await;
    // The server lost its state dir: the same credentials, a new empty ledger.
    let _agent = flue.agent_in("s", "agent-s-wiped", &[], &[]).await;
    let js = jetstream::new(flue.nats.client().await);
    let original = js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("stream")
        .get_last_raw_message_by_subject(&subject::request(&tenant(), &server("s")))
        .await
        .expect("the real request");
    // The copy as it is, message id and all: within the broker's duplicate window it is
    // dropped, so no agent ever sees it.
    let ack = js
        .publish_with_headers(
            subject::request(&tenant(), &server("s")),
            original.headers.clone(),
            original.payload.clone(),
        )
        .await
        .expect("publish")
        .await
        .expect("acknowledged");
    assert!(ack.duplicate, "{ack:?}");
    assert_eq!(ack.sequence, original.sequence);
    // Under another message id it is stored, and the agent, with nothing in its ledger,
    // refuses it: the signed publish window names the real message id.
    let mut headers = original.headers.clone();
    headers.insert(async_nats::header::NATS_MESSAGE_ID, "the-attackers-own-id");
    let seq = publish_request(&flue, original.payload.to_vec(), headers).await;
    assert!(seq > original.sequence);
    let rejected = tap
        .wait_for("the copy rejected", WAIT, |e| {
            e.ty == EventType::ServerRequestRejected && e.data["stream_seq"] == seq
        })
        .await;
    assert_eq!(rejected.data["code"], "replayed", "{}", rejected.data);
    assert!(
        rejected.data["reason"]
            .as_str()
            .is_some_and(|d| d.contains("the-attackers-own-id")),
        "{}",
        rejected.data
    );
    assert_eq!(std::fs::read_to_string(&runs).expect("runs"), "run\n");
    let after = flue.client().get_deployment(&real.id).await.expect("read");
    assert_eq!(after.status, DeploymentStatus::Complete, "{after:?}");
}

/// A `finished` COMPLETE answer for deployment `id`, naming the digest of its real request.
async fn forged_answer(flue: &Flue, id: &DeploymentId) -> Vec<u8> {
    let js = jetstream::new(flue.nats.client().await);
    let stream = js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("stream");
    let request = stream
        .get_last_raw_message_by_subject(&subject::request(&tenant(), &server("s")))
        .await
        .expect("the real request");
    let now = OffsetDateTime::now_utc();
    let answer = AgentMessage::Finished {
        v: PROTOCOL_VERSION,
        deployment_id: id.clone(),
        result: DeploymentResult {
            status: DeploymentStatus::Complete,
            status_reason: None,
            outputs: Default::default(),
            deploy_stdout: "forged".into(),
            deploy_stderr: String::new(),
            deploy_status_code: Some(0),
            started_at: Some(now),
            finished_at: now,
        },
        request_digest: Some(RequestDigest::of(&request.payload)),
    };
    serde_json::to_vec(&answer).expect("json")
}

/// Publishes an answer on `s`'s response subject, signed by `key` when given, and waits
/// for the gateway to refuse it; returns the refusal code.
async fn answer_refused(
    flue: &Flue,
    tap: &mut EventTap,
    body: Vec<u8>,
    key: Option<&KeyPair>,
) -> String {
    let headers = match key {
        Some(key) => {
            let claims = AnswerClaims {
                v: signing::CLAIMS_VERSION,
                tenant: tenant(),
                server: server("s"),
                digest: RequestDigest::of(&body),
                at: OffsetDateTime::now_utc(),
            };
            let signed = signing::sign(&claims, key).expect("signs");
            let mut headers = HeaderMap::new();
            headers.insert(signing::ANSWER_CLAIMS_HEADER, signed.claims.as_str());
            headers.insert(signing::SIGNATURE_HEADER, signed.signature.as_str());
            headers
        }
        None => HeaderMap::new(),
    };
    let js = jetstream::new(flue.nats.client().await);
    let seq = js
        .publish_with_headers(
            subject::response(&tenant(), &server("s")),
            headers,
            body.into(),
        )
        .await
        .expect("publish")
        .await
        .expect("stored")
        .sequence;
    let event = tap
        .wait_for("the answer refused", WAIT, |e| {
            e.ty == EventType::ServerAnswerRejected && e.data["stream_seq"] == seq
        })
        .await;
    event.data["code"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn an_answer_without_or_with_a_wrong_signature_never_changes_the_deployment() {
    let flue = Flue::start().await;
    flue.register("s").await;
    flue.script_config("real", "#!/bin/sh\necho real\n", &[], &[])
        .await;
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
    let real = flue.deploy("real", "s", &[]).await;
    let body = forged_answer(&flue, &real.id).await;
    assert_eq!(
        answer_refused(&flue, &mut tap, body.clone(), None).await,
        "unsigned"
    );
    let other = KeyPair::new_user();
    let code = answer_refused(&flue, &mut tap, body, Some(&other)).await;
    assert_eq!(code, "bad_signature");
    let now = flue.client().get_deployment(&real.id).await.expect("read");
    assert_eq!(now.status, DeploymentStatus::Queued, "{now:?}");
    // The real agent's signed answers still decide it.
    let _agent = flue.agent("s", &[]).await;
    let done = flue.finished(&real.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.deploy_stdout, "real\n");
}
