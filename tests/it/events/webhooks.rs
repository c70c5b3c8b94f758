//! Events: webhooks. A receiver (an axum server inside the test) gets deployment events
//! as signed POSTs, each once as a success, in stream order; failures are retried,
//! a subscription is parked after the last attempt and resumed at the event it missed;
//! subscriptions survive a gateway restart; bad bodies get 4xx JSON; no secret leaks.

mod delete;
pub(crate) mod receiver;
mod sequences;
mod standard;

use std::time::Duration;

use flue_proto::webhook::{Webhook, WebhookStatus};
use flue_proto::{DeploymentId, EventFilter};
use flue_tests::{EventTap, Flue, WAIT};
use receiver::{Mode, Receiver, assert_signed};
use serde_json::{Value, json};

/// A Standard Webhooks secret: `whsec_` and the base64 of a 32-byte key.
pub(crate) const SECRET: &str = "whsec_Zmx1ZS13ZWJob29rLXRlc3Qta2V5LTAxMjM0NTY3ODk=";
/// Small retry settings so that parking takes well under a second.
const FAST: &[&str] = &["--webhook-max-attempts", "3", "--webhook-backoff-ms", "50"];

/// The receivers listen on loopback, which webhooks may only reach when allowed.
const ALLOW_LOOPBACK: &[&str] = &["--webhook-allow", "127.0.0.1/32"];

/// A gateway (allowing loopback targets) with one agent for server `s1` and a quick
/// script config `c1`.
async fn setup(flags: &[&str]) -> (Flue, flue_tests::Agent) {
    let flags: Vec<&str> = ALLOW_LOOPBACK.iter().chain(flags).copied().collect();
    let flue = Flue::start_with(&flags).await;
    flue.register("s1").await;
    let agent = flue.agent("s1", &[]).await;
    flue.script_config("c1", "#!/bin/sh\necho hello\n", &[], &[])
        .await;
    (flue, agent)
}

/// The events the tests subscribe to: a deployment's start and end on `s1`.
fn filter() -> Value {
    json!({"types": ["deployment.queued", "deployment.completed"], "server": "s1"})
}

async fn create(flue: &Flue, body: Value) -> reqwest::Response {
    flue.http()
        .post(format!("{}/v1/webhooks", flue.gateway.url()))
        .json(&body)
        .send()
        .await
        .expect("POST /v1/webhooks")
}

async fn subscribe(flue: &Flue, receiver: &Receiver) -> Webhook {
    let response = create(
        flue,
        json!({"url": receiver.url, "secret": SECRET, "filter": filter()}),
    )
    .await;
    assert_eq!(response.status(), 201);
    response.json().await.expect("webhook body")
}

async fn get_webhook(flue: &Flue, id: &str) -> (u16, Value) {
    let response = flue
        .http()
        .get(format!("{}/v1/webhooks/{id}", flue.gateway.url()))
        .send()
        .await
        .expect("GET webhook");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON body"))
}

/// Waits until the gateway has counted `n` deliveries (it counts after the ack).
async fn wait_counted(flue: &Flue, id: &str, n: u64) -> Webhook {
    let fut = async {
        loop {
            let (status, body) = get_webhook(flue, id).await;
            assert_eq!(status, 200, "{body}");
            let webhook: Webhook = serde_json::from_value(body).expect("webhook");
            if webhook.delivered >= n {
                return webhook;
            }
            tokio::time::sleep(Duration::from_millis(20)).await; // polling interval
        }
    };
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("webhook {id} did not count {n} deliveries"))
}

/// Runs one deployment to its end; the id of its `completed` event.
async fn deploy(flue: &Flue) -> (DeploymentId, String) {
    let d = flue.deploy("c1", "s1", &[]).await;
    flue.finished(&d.id).await;
    let completed = format!("deployment:{}:completed", d.id);
    (d.id, completed)
}

/// The ids, in stream order, of the events of the stream the subscription wants, up to
/// and including `last`.
async fn expected(flue: &Flue, last: &str) -> Vec<String> {
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
    tap.wait_for(last, WAIT, |e| e.id == last).await;
    let filter: EventFilter = serde_json::from_value(filter()).expect("filter");
    tap.events()
        .into_iter()
        .filter(|e| filter.matches(e))
        .map(|e| e.id)
        .collect()
}

#[tokio::test]
async fn failing_twice_then_succeeding_delivers_each_event_once_signed_in_order() {
    let (flue, _agent) =
        setup(&["--webhook-max-attempts", "5", "--webhook-backoff-ms", "50"]).await;
    let receiver = Receiver::start(Mode::FailTwice).await;
    let webhook = subscribe(&flue, &receiver).await;
    assert_eq!(webhook.status, WebhookStatus::Active);

    deploy(&flue).await;
    let (_, last) = deploy(&flue).await;
    receiver.wait_delivered(&last).await;

    let want = expected(&flue, &last).await;
    assert_eq!(
        want.len(),
        4,
        "queued and completed of two deployments: {want:?}"
    );
    assert_eq!(
        receiver.delivered(),
        want,
        "each event once, in stream order"
    );
    let got = receiver.received();
    for id in &want {
        let attempts: Vec<u32> = got
            .iter()
            .filter(|r| &r.event_id == id)
            .map(|r| r.attempt)
            .collect();
        assert_eq!(attempts, [1, 2, 3], "attempts of {id}");
    }
    for r in &got {
        assert_eq!(r.webhook_id, webhook.id.as_str());
        assert_signed(r, SECRET);
    }
    let counted = wait_counted(&flue, webhook.id.as_str(), 4).await;
    assert_eq!(counted.last_event_id.as_deref(), Some(last.as_str()));
    assert_eq!(counted.last_error, None);
}

#[tokio::test]
async fn parked_after_the_last_attempt_and_resumed_at_the_missed_event() {
    let (flue, _agent) = setup(FAST).await;
    let receiver = Receiver::start(Mode::Fail).await;
    let webhook = subscribe(&flue, &receiver).await;
    let id = webhook.id.as_str();

    let (d1, _) = deploy(&flue).await;
    let first = format!("deployment:{d1}:queued");
    flue.gateway.logs().wait_for("webhook parked", WAIT).await;
    let (status, body) = get_webhook(&flue, id).await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "parked", "{body}");
    let reason = body["parked_reason"].as_str().expect("a reason");
    assert!(
        reason.contains(&first) && reason.contains("3 attempts failed") && reason.contains("503"),
        "{reason}"
    );
    assert!(
        body["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("503")),
        "{body}"
    );
    let tries: Vec<(String, u32)> = receiver
        .received()
        .iter()
        .map(|r| (r.event_id.clone(), r.attempt))
        .collect();
    assert_eq!(
        tries,
        [(first.clone(), 1), (first.clone(), 2), (first.clone(), 3)],
        "three attempts of the first event, then nothing"
    );

    // Events keep coming while parked; the receiver is fixed; resume.
    let (_, last) = deploy(&flue).await;
    receiver.set_mode(Mode::Ok);
    let resumed = flue
        .http()
        .post(format!("{}/v1/webhooks/{id}/resume", flue.gateway.url()))
        .send()
        .await
        .expect("resume");
    assert_eq!(resumed.status(), 200);
    let resumed: Webhook = resumed.json().await.expect("webhook");
    assert_eq!(resumed.status, WebhookStatus::Active);
    assert_eq!(resumed.parked_reason, None);

    receiver.wait_delivered(&last).await;
    let want = expected(&flue, &last).await;
    assert_eq!(want.first(), Some(&first));
    assert_eq!(
        receiver.delivered(),
        want,
        "the parked event first, then the rest in order"
    );
    let counted = wait_counted(&flue, id, want.len() as u64).await;
    assert_eq!(counted.status, WebhookStatus::Active);

    // Resuming an active subscription changes nothing.
    let again = flue
        .http()
        .post(format!("{}/v1/webhooks/{id}/resume", flue.gateway.url()))
        .send()
        .await
        .expect("resume");
    assert_eq!(again.status(), 200);
}

#[tokio::test]
async fn subscriptions_survive_a_gateway_restart() {
    let (mut flue, _agent) = setup(FAST).await;
    let receiver = Receiver::start(Mode::Ok).await;
    let webhook = subscribe(&flue, &receiver).await;
    let id = webhook.id.as_str();

    let (_, before) = deploy(&flue).await;
    receiver.wait_delivered(&before).await;
    // Counted means acknowledged: a kill now cannot cause a redelivery.
    wait_counted(&flue, id, 2).await;

    flue.gateway.restart().await;
    let (_, after) = deploy(&flue).await;
    receiver.wait_delivered(&after).await;

    let want = expected(&flue, &after).await;
    assert_eq!(want.len(), 4, "{want:?}");
    assert_eq!(
        receiver.delivered(),
        want,
        "none lost, none twice, in order"
    );
    let (status, body) = get_webhook(&flue, id).await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "active");
}

#[tokio::test]
async fn an_answer_slower_than_the_timeout_is_a_failed_attempt() {
    let mut flags = FAST.to_vec();
    flags.extend(["--webhook-timeout-ms", "300"]);
    let (flue, _agent) = setup(&flags).await;
    let receiver = Receiver::start(Mode::HangFirst).await;
    let webhook = subscribe(&flue, &receiver).await;

    let (d1, _) = deploy(&flue).await;
    let first = format!("deployment:{d1}:queued");
    receiver.wait_delivered(&first).await;
    let got = receiver.received();
    assert_eq!(got[0].event_id, first);
    assert_eq!(
        (got[0].attempt, got[0].status),
        (1, None),
        "the hung attempt"
    );
    assert_eq!(
        (got[1].event_id.as_str(), got[1].attempt),
        (first.as_str(), 2)
    );
    assert_eq!(receiver.delivered().first(), Some(&first));
    let counted = wait_counted(&flue, webhook.id.as_str(), 1).await;
    assert_eq!(counted.status, WebhookStatus::Active);
}

#[tokio::test]
async fn bad_bodies_are_refused_and_secrets_never_shown() {
    let (flue, _agent) = setup(FAST).await;
    let receiver = Receiver::start(Mode::FailTwice).await;
    let url = receiver.url.clone();
    for (body, status, code, needle) in [
        (
            json!({"url": "ftp://h/x", "secret": SECRET}),
            422,
            "invalid_input",
            "url",
        ),
        (
            json!({"url": "not a url", "secret": SECRET}),
            422,
            "invalid_input",
            "url",
        ),
        (
            json!({"url": "http://u:p@h/x", "secret": SECRET}),
            422,
            "invalid_input",
            "credentials",
        ),
        (
            json!({"url": url, "secret": "short"}),
            422,
            "invalid_input",
            "secret",
        ),
        (
            json!({"url": url, "secret": "x".repeat(1025)}),
            422,
            "invalid_input",
            "secret",
        ),
        (json!({"url": url}), 422, "invalid_body", "secret"),
        (
            json!({"url": url, "secret": "webhook-test-secret-0123456789"}),
            422,
            "invalid_input",
            "whsec_",
        ),
        (
            json!({"url": url, "secret": "whsec_c2hvcnQta2V5"}),
            422,
            "invalid_input",
            "9-byte key",
        ),
        (
            json!({"url": url, "secret": SECRET, "signature": "flue-v2"}),
            422,
            "invalid_body",
            "signature",
        ),
        (
            json!({"url": url, "secret": SECRET, "filter": {"types": ["deployment.nope"]}}),
            422,
            "invalid_body",
            "deployment.nope",
        ),
        (
            json!({"url": url, "secret": SECRET, "start": "yesterday"}),
            422,
            "invalid_body",
            "start",
        ),
        (
            json!({"url": url, "secret": SECRET, "extra": 1}),
            422,
            "invalid_body",
            "extra",
        ),
    ] {
        let response = create(&flue, body.clone()).await;
        assert_eq!(response.status().as_u16(), status, "{body}");
        let error: Value = response.json().await.expect("JSON error");
        assert_eq!(error["error"]["code"], code, "{body}: {error}");
        let message = error["error"]["message"].as_str().expect("message");
        assert!(message.contains(needle), "{body}: {message}");
        assert!(!message.contains(SECRET), "{message}");
    }
    let api = flue.gateway.url().to_owned();
    let client = flue.http();
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(
        status(
            client
                .get(format!("{api}/v1/webhooks/nope"))
                .send()
                .await
                .expect("get")
        ),
        404
    );
    assert_eq!(
        status(
            client
                .get(format!("{api}/v1/webhooks/a.b"))
                .send()
                .await
                .expect("get")
        ),
        400
    );
    assert_eq!(
        status(
            client
                .delete(format!("{api}/v1/webhooks/nope"))
                .send()
                .await
                .expect("delete")
        ),
        404
    );
    assert_eq!(
        status(
            client
                .post(format!("{api}/v1/webhooks/nope/resume"))
                .send()
                .await
                .expect("resume")
        ),
        404
    );

    // Deliveries happen (with failed attempts, which are logged), yet no read and no
    // log line shows the secret or a signature.
    let webhook = subscribe(&flue, &receiver).await;
    let id = webhook.id.as_str();
    let (_, last) = deploy(&flue).await;
    receiver.wait_delivered(&last).await;
    wait_counted(&flue, id, 2).await;
    let list = client
        .get(format!("{api}/v1/webhooks"))
        .send()
        .await
        .expect("list")
        .text()
        .await
        .expect("list body");
    let one = get_webhook(&flue, id).await.1.to_string();
    assert!(list.contains(id), "{list}");
    let logs = flue.gateway.logs().lines().join("\n");
    assert!(
        logs.contains("webhook delivery attempt failed"),
        "failures are logged"
    );
    for text in [&list, &one, &logs] {
        assert!(!text.contains(SECRET), "secret shown: {text}");
        for r in receiver.received() {
            assert!(!text.contains(&r.signature), "signature shown: {text}");
        }
    }

    // Delete: 204, then gone, consumer included.
    let deleted = client
        .delete(format!("{api}/v1/webhooks/{id}"))
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status(), 204);
    assert_eq!(get_webhook(&flue, id).await.0, 404);
    let js = async_nats::jetstream::new(flue.nats.events_client().await);
    let stream = js
        .get_stream(flue_proto::event::EVENT_STREAM)
        .await
        .expect("event stream");
    let tenant = flue_proto::TenantId::new("default").expect("tenant");
    let name = flue_proto::webhook::consumer_name(&tenant, &webhook.id);
    assert!(
        stream.consumer_info(&name).await.is_err(),
        "consumer {name} is gone"
    );
}
