//! A deployment's life through the gateway, with the test playing the agent's part.

use std::time::Duration;

use async_nats::jetstream;
use axum::http::{Method, StatusCode};
use flue_gateway::{Config, Gateway};
use flue_proto::seal;
use flue_proto::signing;
use flue_proto::{
    AgentMessage, DeploymentId, DeploymentRequest, DeploymentResult, DeploymentStatus,
    PROTOCOL_VERSION, RequestDigest, ServerId, TenantId, subject,
};
use futures_util::StreamExt;
use serde_json::json;
use time::OffsetDateTime;

use super::fixture::{Fixture, code, config_and_server, message};

/// Reads the next request from web1's queue, as the agent would, and acknowledges it.
async fn pull_request(js: &jetstream::Context) -> (DeploymentRequest, String) {
    let consumer: jetstream::consumer::PullConsumer = js
        .get_consumer_from_stream("req-7-default-web1", subject::REQUEST_STREAM)
        .await
        .expect("consumer");
    let mut batch = consumer
        .fetch()
        .max_messages(1)
        .expires(Duration::from_secs(5))
        .messages()
        .await
        .expect("fetch");
    let msg = batch.next().await.expect("a request").expect("message");
    msg.ack().await.expect("ack");
    let msg_id = msg
        .headers
        .as_ref()
        .and_then(|h| h.get("Nats-Msg-Id"))
        .map(|v| v.to_string())
        .expect("message id");
    (
        serde_json::from_slice(&msg.payload).expect("request json"),
        msg_id,
    )
}

/// Publishes `message` on `server`'s response subject as its agent would: with its
/// de-duplication id, signed with the server's user key.
async fn answer(fx: &Fixture, js: &jetstream::Context, server: &str, message: &AgentMessage) {
    let id = message.msg_id(
        &TenantId::new("default").expect("id"),
        &ServerId::new(server).expect("id"),
    );
    answer_with_id(fx, js, server, message, &id).await;
}

async fn answer_with_id(
    fx: &Fixture,
    js: &jetstream::Context,
    server: &str,
    message: &AgentMessage,
    msg_id: &str,
) {
    let tenant = TenantId::new("default").expect("id");
    let server_id = ServerId::new(server).expect("id");
    let payload = serde_json::to_vec(message).expect("json");
    let claims = signing::AnswerClaims {
        v: signing::CLAIMS_VERSION,
        tenant: tenant.clone(),
        server: server_id.clone(),
        digest: RequestDigest::of(&payload),
        at: OffsetDateTime::now_utc(),
    };
    let signed = signing::sign(&claims, &fx.user_key(server)).expect("signs");
    js.send_publish(
        subject::response(&tenant, &server_id),
        jetstream::message::PublishMessage::build()
            .payload(payload.into())
            .message_id(msg_id)
            .header(signing::ANSWER_CLAIMS_HEADER, signed.claims.as_str())
            .header(signing::SIGNATURE_HEADER, signed.signature.as_str()),
    )
    .await
    .expect("publish")
    .await
    .expect("ack");
}

/// The digest the gateway recorded for deployment `id`'s request, which a real agent's
/// answers to that request carry.
async fn recorded_digest(js: &jetstream::Context, id: &str) -> Option<RequestDigest> {
    let kv = js.get_key_value("flue_deployments").await.expect("bucket");
    let entry = kv.get(format!("default.{id}")).await.expect("read")?;
    let record: serde_json::Value = serde_json::from_slice(&entry).expect("record json");
    serde_json::from_value(record["request_digest"].clone()).ok()
}

/// The `finished` answer a real agent would send for deployment `id`.
async fn finished(js: &jetstream::Context, id: &str, status: DeploymentStatus) -> AgentMessage {
    AgentMessage::Finished {
        request_digest: recorded_digest(js, id).await,
        v: PROTOCOL_VERSION,
        deployment_id: DeploymentId::new(id).expect("id"),
        result: DeploymentResult {
            status,
            status_reason: None,
            outputs: [("result".to_owned(), json!("42"))].into(),
            deploy_stdout: "hi\n".into(),
            deploy_stderr: String::new(),
            deploy_status_code: Some(0),
            started_at: None,
            finished_at: OffsetDateTime::now_utc(),
        },
    }
}

/// Caps `stream` at `max_msgs` messages, refusing new ones beyond (`-1`: no cap).
async fn cap_messages(js: &jetstream::Context, stream: &str, max_msgs: i64) {
    let mut handle = js.get_stream(stream).await.expect("stream");
    let mut config = handle.info().await.expect("stream info").config.clone();
    config.max_messages = max_msgs;
    config.discard = jetstream::stream::DiscardPolicy::New;
    js.update_stream(&config).await.expect("stream update");
}

async fn post_deployment(fx: &Fixture, id: &str) -> serde_json::Value {
    let body = json!({"id": id, "config_id": "c1", "server_id": "web1"});
    let (s, created) = fx.call(Method::POST, "/v1/deployments", Some(body)).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{created}");
    created
}

#[tokio::test]
async fn deployment_life_with_redaction_and_long_poll() {
    let fx = Fixture::start().await;
    let creds = config_and_server(&fx).await;
    let js = fx.jetstream().await;
    let body = json!({
        "id": "d1", "config_id": "c1", "server_id": "web1",
        "input_values": {"secret": "s3cret"}, "timeout_secs": 600
    });
    let (s, created) = fx
        .call(Method::POST, "/v1/deployments", Some(body.clone()))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{created}");
    assert_eq!(created["status"], "QUEUED");
    assert_eq!(
        created["input_values"],
        json!({"foo": "dflt", "secret": "<hidden>"})
    );
    // The same request again (a client retrying) gets the recorded deployment; any
    // difference but a hidden value's (which must not be confirmable) is a conflict.
    let (s, again) = fx
        .call(Method::POST, "/v1/deployments", Some(body.clone()))
        .await;
    assert_eq!((s, &again), (StatusCode::ACCEPTED, &created));
    let mut guess = body.clone();
    guess["input_values"]["secret"] = json!("a guess");
    let (s, again) = fx.call(Method::POST, "/v1/deployments", Some(guess)).await;
    assert_eq!((s, &again), (StatusCode::ACCEPTED, &created));
    let mut other = body;
    other["input_values"]["foo"] = json!("other");
    let (s, conflict) = fx.call(Method::POST, "/v1/deployments", Some(other)).await;
    assert_eq!((s, code(&conflict)), (StatusCode::CONFLICT, "conflict"));

    let (request, msg_id) = pull_request(&js).await;
    assert_eq!(msg_id, "default.d1");
    // Sealed to the server: its agent (and only it) opens the real value.
    let server = seal::seed_key(&creds.settings.xkey_seed).expect("seed");
    let gateway = seal::public_key(&creds.settings.gateway_xkey).expect("key");
    assert_eq!(
        seal::open(&request.input_values["secret"], &server, &gateway).expect("opens"),
        json!("s3cret"),
        "the agent gets the real value"
    );
    assert_eq!(request.config.id.as_str(), "c1");
    assert_eq!(
        request.expires_at - request.created_at,
        time::Duration::seconds(600)
    );

    // A long poll waiting for a change from QUEUED is woken by the agent's "started".
    let poll = fx.call(
        Method::GET,
        "/v1/deployments/d1?wait_secs=30&after_status=QUEUED",
        None,
    );
    let start = AgentMessage::Started {
        v: PROTOCOL_VERSION,
        deployment_id: request.deployment_id.clone(),
        at: OffsetDateTime::now_utc(),
        request_digest: Some(request.digest()),
    };
    let ((s, seen), ()) = tokio::join!(poll, answer(&fx, &js, "web1", &start));
    assert_eq!(
        (s, seen["status"].as_str()),
        (StatusCode::OK, Some("IN_PROGRESS"))
    );

    // Answers from another server are ignored; the owner's result is applied once.
    assert_eq!(fx.register("web2").await, StatusCode::CREATED);
    // (Its own message id: the response stream de-duplicates ids across all subjects.)
    let spoof = finished(&js, "d1", DeploymentStatus::Failed).await;
    answer_with_id(&fx, &js, "web2", &spoof, "web2-d1-finished").await;
    answer(
        &fx,
        &js,
        "web1",
        &finished(&js, "d1", DeploymentStatus::Complete).await,
    )
    .await;
    let (s, done) = fx
        .call(Method::GET, "/v1/deployments/d1?wait_secs=30", None)
        .await;
    assert_eq!(
        (s, done["status"].as_str()),
        (StatusCode::OK, Some("COMPLETE")),
        "{done}"
    );
    assert_eq!(done["outputs"], json!({"result": "42"}));
    assert_eq!(done["input_values"]["secret"], "<hidden>");
    assert!(done["started_at"].is_string() && done["finished_at"].is_string());

    let (s, list) = fx
        .call(Method::GET, "/v1/servers/web1/deployments", None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    assert_eq!(list[0]["input_values"]["secret"], "<hidden>");
    let (_, list) = fx
        .call(Method::GET, "/v1/servers/web2/deployments", None)
        .await;
    assert_eq!(list, json!([]));
    fx.shutdown().await;
}

#[tokio::test]
async fn unanswered_deployments_time_out() {
    let fx = Fixture::start().await;
    config_and_server(&fx).await;
    let body = json!({"id": "slow", "config_id": "c1", "server_id": "web1", "timeout_secs": 1});
    let (s, _) = fx.call(Method::POST, "/v1/deployments", Some(body)).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let (s, done) = fx
        .call(Method::GET, "/v1/deployments/slow?wait_secs=20", None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        (done["status"].as_str(), done["status_reason"].as_str()),
        (Some("FAILED"), Some("timed out"))
    );
    // A late answer changes nothing.
    let js = fx.jetstream().await;
    answer(
        &fx,
        &js,
        "web1",
        &finished(&js, "slow", DeploymentStatus::Complete).await,
    )
    .await;
    let (_, list) = fx
        .call(Method::GET, "/v1/servers/web1/deployments", None)
        .await;
    assert_eq!(list[0]["status"], "FAILED");
    fx.shutdown().await;
}

#[tokio::test]
async fn a_started_deployment_is_left_to_the_agent_past_its_expiry() {
    let fx = Fixture::start().await;
    config_and_server(&fx).await;
    let js = fx.jetstream().await;
    let body = json!({"id": "d1", "config_id": "c1", "server_id": "web1", "timeout_secs": 2});
    let (s, _) = fx.call(Method::POST, "/v1/deployments", Some(body)).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let (request, _) = pull_request(&js).await;
    let start = AgentMessage::Started {
        v: PROTOCOL_VERSION,
        deployment_id: request.deployment_id.clone(),
        at: OffsetDateTime::now_utc(),
        request_digest: Some(request.digest()),
    };
    answer(&fx, &js, "web1", &start).await;
    let (_, seen) = fx
        .call(
            Method::GET,
            "/v1/deployments/d1?wait_secs=10&after_status=QUEUED",
            None,
        )
        .await;
    assert_eq!(seen["status"], "IN_PROGRESS", "{seen}");

    // The long poll ends past expires_at, after dozens of sweeps (every 50 ms): the
    // gateway leaves the started deployment to the agent's own report for the grace.
    let (_, seen) = fx
        .call(
            Method::GET,
            "/v1/deployments/d1?wait_secs=3&after_status=IN_PROGRESS",
            None,
        )
        .await;
    assert!(OffsetDateTime::now_utc() > request.expires_at + time::Duration::milliseconds(500));
    assert_eq!(seen["status"], "IN_PROGRESS", "{seen}");

    // The agent killed the hook at expires_at; its report, with the output, is kept.
    let mut killed = finished(&js, "d1", DeploymentStatus::Failed).await;
    if let AgentMessage::Finished { result, .. } = &mut killed {
        result.status_reason = Some("timed out".into());
        result.outputs.clear();
    }
    answer(&fx, &js, "web1", &killed).await;
    let (_, done) = fx
        .call(Method::GET, "/v1/deployments/d1?wait_secs=20", None)
        .await;
    assert_eq!(
        (
            done["status"].as_str(),
            done["status_reason"].as_str(),
            done["deploy_stdout"].as_str()
        ),
        (Some("FAILED"), Some("timed out"), Some("hi\n")),
        "{done}"
    );
    fx.shutdown().await;
}

#[tokio::test]
async fn a_deferred_request_is_not_overtaken_by_a_later_one_of_its_server() {
    let fx = Fixture::start().await;
    config_and_server(&fx).await;
    let js = fx.jetstream().await;
    post_deployment(&fx, "d0").await;
    // The queue is full: publishing fails until the cap is lifted. Ids sort against
    // acceptance order, which the retries must follow.
    cap_messages(&js, subject::REQUEST_STREAM, 1).await;
    let first = post_deployment(&fx, "z-first").await;
    let second = post_deployment(&fx, "a-second").await;
    assert_eq!(
        (&first["status"], &second["status"]),
        (&json!("QUEUED"), &json!("QUEUED"))
    );
    // The broker takes requests again, but the earlier ones wait for the background
    // retry: the next one must queue behind them, not go first.
    cap_messages(&js, subject::REQUEST_STREAM, -1).await;
    post_deployment(&fx, "m-third").await;

    let mut order = Vec::new();
    for _ in 0..4 {
        order.push(pull_request(&js).await.0.deployment_id.to_string());
    }
    assert_eq!(order, ["d0", "z-first", "a-second", "m-third"]);
    fx.shutdown().await;
}

#[tokio::test]
async fn an_unconfirmed_record_answers_503_and_a_retry_with_the_same_id_goes_through() {
    let fx = Fixture::start().await;
    config_and_server(&fx).await;
    let js = fx.jetstream().await;
    post_deployment(&fx, "d0").await;
    // The deployments bucket refuses new keys: the record's `create` fails.
    let bucket = format!("KV_{}", flue_proto::subject::DEPLOYMENTS_BUCKET);
    cap_messages(&js, &bucket, 1).await;
    let body = json!({"id": "d1", "config_id": "c1", "server_id": "web1"});
    let (s, err) = fx
        .call(Method::POST, "/v1/deployments", Some(body.clone()))
        .await;
    assert_eq!(
        (s, code(&err)),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
    );
    let text = message(&err);
    assert!(
        text.contains("\"d1\"") && text.contains("retry with the same id"),
        "{err}"
    );

    cap_messages(&js, &bucket, -1).await;
    let (s, created) = fx.call(Method::POST, "/v1/deployments", Some(body)).await;
    assert_eq!(
        (s, created["id"].as_str()),
        (StatusCode::ACCEPTED, Some("d1"))
    );
    let (first, _) = pull_request(&js).await;
    let (second, _) = pull_request(&js).await;
    assert_eq!(
        (first.deployment_id.as_str(), second.deployment_id.as_str()),
        ("d0", "d1")
    );
    fx.shutdown().await;
}

#[tokio::test]
async fn answers_are_applied_after_a_broker_restart() {
    let mut fx = Fixture::start().await;
    config_and_server(&fx).await;
    let body = json!({"id": "d1", "config_id": "c1", "server_id": "web1"});
    let (s, _) = fx.call(Method::POST, "/v1/deployments", Some(body)).await;
    assert_eq!(s, StatusCode::ACCEPTED);

    fx.nats.restart().await;
    let js = fx.jetstream().await;
    answer(
        &fx,
        &js,
        "web1",
        &finished(&js, "d1", DeploymentStatus::Complete).await,
    )
    .await;
    // The gateway's client reconnects by itself; the long poll waits for the answer.
    let done = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let (s, d) = fx
                .call(Method::GET, "/v1/deployments/d1?wait_secs=5", None)
                .await;
            if s == StatusCode::OK && d["status"] == "COMPLETE" {
                return d;
            }
            // A 503 comes at once while the broker is away: pause as a client would, which
            // also lets the in-process gateway (same runtime) reconnect.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("answer applied after the restart");
    assert_eq!(done["outputs"]["result"], "42");
    fx.shutdown().await;
}

#[tokio::test]
async fn a_restarted_gateway_recovers_pending_deployments() {
    let mut fx = Fixture::start().await;
    config_and_server(&fx).await;
    let body = json!({"id": "d1", "config_id": "c1", "server_id": "web1", "timeout_secs": 2});
    let (s, _) = fx.call(Method::POST, "/v1/deployments", Some(body)).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    if let Some(g) = fx.gateway.take() {
        g.shutdown().await;
    }
    let mut config = Config::new(fx.nats.url());
    config.listen = "127.0.0.1:0".parse().expect("addr");
    config.state_dir = fx.state_dir();
    config.insecure_dev_broker = true;
    config.timeout_sweep_ms = 50;
    let gateway = Gateway::start(config).await.expect("second gateway");
    fx.app = gateway.router();
    fx.gateway = Some(gateway);
    let (_, done) = fx
        .call(Method::GET, "/v1/deployments/d1?wait_secs=20", None)
        .await;
    assert_eq!(
        done["status_reason"], "timed out",
        "the new gateway watches the old one's timeouts"
    );
    fx.shutdown().await;
}

#[tokio::test]
async fn requests_never_confirmed_are_published_at_start() {
    let mut fx = Fixture::start().await;
    config_and_server(&fx).await;
    let body = json!({"id": "d1", "config_id": "c1", "server_id": "web1"});
    let (s, _) = fx.call(Method::POST, "/v1/deployments", Some(body)).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    if let Some(g) = fx.gateway.take() {
        g.shutdown().await;
    }

    // What a gateway leaves behind when it dies between recording and publishing,
    // written into the buckets as it would have: d1's record, unpublished, copied.
    let js = fx.jetstream().await;
    let kv = fx.deployments_bucket().await;
    let mut record = fx.stored_record("d1").await.expect("d1 recorded");
    assert_eq!(record["request_published"], true);
    record["request_published"] = json!(false);
    // Two unpublished, whose ids sort against their acceptance order; each marked
    // pending and listed under its server first, as the gateway does.
    let d1_created = OffsetDateTime::parse(
        record["deployment"]["created_at"].as_str().expect("a time"),
        &time::format_description::well_known::Rfc3339,
    )
    .expect("an RFC 3339 time");
    let pending = js
        .get_key_value(subject::PENDING_BUCKET)
        .await
        .expect("the pending bucket");
    let listed = js
        .get_key_value(subject::SERVER_DEPLOYMENTS_BUCKET)
        .await
        .expect("the listing index's bucket");
    for (id, later) in [("d2", 1), ("a3", 2)] {
        record["deployment"]["id"] = json!(id);
        record["deployment"]["created_at"] = json!(
            (d1_created + time::Duration::seconds(later))
                .format(&time::format_description::well_known::Rfc3339)
                .expect("formats")
        );
        pending
            .put(format!("default.{id}"), bytes::Bytes::new())
            .await
            .expect("mark pending");
        listed
            .put(format!("default.web1.{id}"), bytes::Bytes::new())
            .await
            .expect("list under web1");
        kv.create(
            format!("default.{id}"),
            serde_json::to_vec(&record).expect("json").into(),
        )
        .await
        .expect("create");
    }
    // One bad value does not keep the gateway from starting.
    kv.put("default.bad", "not a record".into())
        .await
        .expect("put");

    fx.restart_with(|_| {}).await;
    let republished = fx.stored_record("d2").await.expect("d2");
    assert_eq!(
        republished["request_published"], true,
        "marked published by recovery"
    );
    let (first, _) = pull_request(&js).await;
    let (second, msg_id) = pull_request(&js).await;
    let (third, _) = pull_request(&js).await;
    assert_eq!(
        [&first, &second, &third].map(|r| r.deployment_id.as_str()),
        ["d1", "d2", "a3"],
        "republished in acceptance order"
    );
    assert_eq!(msg_id, "default.d2");
    let (s, list) = fx
        .call(Method::GET, "/v1/servers/web1/deployments", None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        list.as_array().map(Vec::len),
        Some(3),
        "d2 and a3 are listed: {list}"
    );
    fx.shutdown().await;
}
