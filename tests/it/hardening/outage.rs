//! While the broker is down every call that needs it answers 503 `unavailable` with
//! `Retry-After`, quickly and without internals; liveness stays up, readiness goes down
//! and comes back; what was accepted before the outage still completes after it.

use std::time::Duration;

use flue_proto::{DeploymentStatus, ErrorBody, HealthStatus};
use flue_tests::{Flue, WAIT};
use reqwest::{RequestBuilder, StatusCode};
use serde_json::json;

use super::{health, health_until};

/// Far above the broker deadline (2 s by default), far below the 10 s calls used to take.
const ANSWER_BOUND: Duration = Duration::from_secs(8);

/// Text that would tell a client about the gateway's insides.
const INTERNALS: [&str; 7] = [
    "flue_",
    "KV_",
    "$JS",
    "nats",
    "127.0.0.1",
    "timed out",
    "bucket",
];

async fn expect_unavailable(what: &str, request: RequestBuilder) {
    let resp = tokio::time::timeout(ANSWER_BOUND, request.send())
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {ANSWER_BOUND:?}"))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE, "{what}");
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .unwrap_or_else(|| panic!("{what}: no Retry-After"))
        .to_str()
        .expect("ascii")
        .parse::<u64>()
        .unwrap_or_else(|e| panic!("{what}: Retry-After is not seconds: {e}"));
    assert!(retry_after >= 1, "{what}: Retry-After {retry_after}");
    let body: ErrorBody = resp.json().await.expect("a JSON error body");
    assert_eq!(body.error.code, "unavailable", "{what}: {body:?}");
    for needle in INTERNALS {
        assert!(
            !body.error.message.contains(needle),
            "{what}: the message {:?} shows {needle:?}",
            body.error.message
        );
    }
}

#[tokio::test]
async fn with_the_broker_down_every_call_answers_503_with_retry_after_and_nothing_accepted_is_lost()
{
    let mut flue = Flue::start().await;
    flue.script_config("c", "#!/bin/sh\necho after\n", &[], &[])
        .await;
    flue.register("s1").await;
    // Accepted before the outage; its agent only starts after it.
    let accepted = flue.deploy("c", "s1", &[]).await;
    let base = flue.gateway.url().to_owned();
    let http = flue.http();
    let url = |path: &str| format!("{base}{path}");
    let (status, ready) = health(&http, &base, "/readyz").await;
    assert_eq!((status, ready.status), (200, HealthStatus::Ok));

    flue.nats.kill().await;
    health_until(
        &http,
        &base,
        "/readyz",
        "readyz to say 503",
        WAIT,
        |s, h| s == 503 && h.status == HealthStatus::Unavailable,
    )
    .await;
    for path in ["/livez", "/healthz"] {
        let (status, live) = health(&http, &base, path).await;
        assert_eq!((status, live.status), (200, HealthStatus::Ok), "{path}");
    }

    let config = json!({"id": "c2", "group": "script", "config": "#!/bin/sh\n"});
    expect_unavailable("create config", http.post(url("/v1/configs")).json(&config)).await;
    let deployment = json!({"config_id": "c", "server_id": "s1", "id": "d-outage"});
    expect_unavailable(
        "create deployment",
        http.post(url("/v1/deployments")).json(&deployment),
    )
    .await;
    let one = url(&format!("/v1/deployments/{}", accepted.id));
    expect_unavailable("get deployment", http.get(&one)).await;
    expect_unavailable("list deployments", http.get(url("/v1/deployments"))).await;
    expect_unavailable(
        "register server",
        http.post(url("/v1/servers")).json(&json!({"id": "s2"})),
    )
    .await;
    expect_unavailable("long poll", http.get(format!("{one}?wait_secs=30"))).await;

    flue.nats.restart().await;
    health_until(
        &http,
        &base,
        "/readyz",
        "readyz to say 200",
        WAIT,
        |s, h| s == 200 && h.status == HealthStatus::Ok,
    )
    .await;
    let _agent = flue.agent("s1", &[]).await;
    let done = flue.finished(&accepted.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert!(done.deploy_stdout.contains("after"), "{done:?}");
    // The refused create left nothing behind: the same id is free and runs now.
    let resp = http
        .post(url("/v1/deployments"))
        .json(&deployment)
        .send()
        .await
        .expect("create after the outage");
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let d = flue.finished(&"d-outage".parse().expect("id")).await;
    assert_eq!(d.status, DeploymentStatus::Complete, "{d:?}");
}

#[tokio::test]
async fn with_a_hung_broker_calls_answer_503_once_the_broker_deadline_passes() {
    let flue = Flue::start_with(&["--broker-timeout-ms", "1000"]).await;
    flue.script_config("c", "#!/bin/sh\necho after\n", &[], &[])
        .await;
    flue.register("s1").await;
    let accepted = flue.deploy("c", "s1", &[]).await;
    let base = flue.gateway.url().to_owned();
    let http = flue.http();
    let url = |path: &str| format!("{base}{path}");

    // The connection stays up, so only the deadline on each broker call can end a wait.
    flue.nats.pause();
    let one = url(&format!("/v1/deployments/{}", accepted.id));
    expect_unavailable("get deployment", http.get(&one)).await;
    expect_unavailable("long poll", http.get(format!("{one}?wait_secs=30"))).await;
    let deployment = json!({"config_id": "c", "server_id": "s1", "id": "d-hung"});
    expect_unavailable(
        "create deployment",
        http.post(url("/v1/deployments")).json(&deployment),
    )
    .await;
    flue.nats.resume();

    let _agent = flue.agent("s1", &[]).await;
    let done = flue.finished(&accepted.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    // The create the broker never answered is found or made by a retry with its id.
    let retried = tokio::time::timeout(WAIT, async {
        loop {
            let resp = http
                .post(url("/v1/deployments"))
                .json(&deployment)
                .send()
                .await
                .expect("retry the create");
            if resp.status() != StatusCode::SERVICE_UNAVAILABLE {
                return resp.status();
            }
            let pause = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1);
            tokio::time::sleep(Duration::from_secs(pause)).await; // as the client is told
        }
    })
    .await
    .expect("the create is accepted once the broker is back");
    assert_eq!(retried, StatusCode::ACCEPTED);
    let d = flue.finished(&"d-hung".parse().expect("id")).await;
    assert_eq!(d.status, DeploymentStatus::Complete, "{d:?}");
}
