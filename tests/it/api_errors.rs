//! Every kind of bad input gets a 4xx with a JSON body naming the problem, over a real socket,
//! and none of it disturbs what was already accepted.

use flue_proto::{DeploymentStatus, ErrorBody};
use flue_tests::Flue;
use reqwest::StatusCode;
use serde_json::json;

async fn expect_error(resp: reqwest::Response, status: StatusCode, code: &str, needle: &str) {
    assert_eq!(resp.status(), status);
    let body: ErrorBody = resp.json().await.expect("a JSON error body");
    assert_eq!(body.error.code, code, "{body:?}");
    assert!(
        body.error.message.contains(needle),
        "message {:?} should mention {needle:?}",
        body.error.message
    );
}

#[tokio::test]
async fn bad_requests_get_clear_json_errors_and_lose_nothing() {
    let flue = Flue::start_with(&["--max-body-bytes", "4096"]).await;
    let base = flue.gateway.url().to_owned();
    let http = flue.http();
    flue.register("s1").await;
    flue.script_config("c1", "#!/bin/sh\necho ok\n", &[], &[])
        .await;
    let accepted = flue.deploy("c1", "s1", &[]).await;
    let post = |path: &str| http.post(format!("{base}{path}"));

    let r = post("/v1/deployments").json(&json!({"config_id": "nope", "server_id": "s1"}));
    expect_error(
        r.send().await.expect("send"),
        StatusCode::NOT_FOUND,
        "not_found",
        "nope",
    )
    .await;

    let r = post("/v1/deployments").json(&json!({"config_id": "c1", "server_id": "ghost"}));
    expect_error(
        r.send().await.expect("send"),
        StatusCode::NOT_FOUND,
        "not_found",
        "ghost",
    )
    .await;

    let r = post("/v1/deployments").json(&json!({"config_id": "c1", "server_id": "a.b"}));
    expect_error(
        r.send().await.expect("send"),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_body",
        "'.'",
    )
    .await;

    let r = post("/v1/servers").json(&json!({"id": "web *"}));
    expect_error(
        r.send().await.expect("send"),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_body",
        "' '",
    )
    .await;

    let r = http.get(format!("{base}/v1/deployments/a>b"));
    expect_error(
        r.send().await.expect("send"),
        StatusCode::BAD_REQUEST,
        "invalid_id",
        "'>'",
    )
    .await;

    let r = http.get(format!("{base}/v1/deployments/missing"));
    expect_error(
        r.send().await.expect("send"),
        StatusCode::NOT_FOUND,
        "not_found",
        "missing",
    )
    .await;

    let r = post("/v1/deployments")
        .header("content-type", "application/json")
        .body("{\"config_id\": \"c1\", ");
    expect_error(
        r.send().await.expect("send"),
        StatusCode::BAD_REQUEST,
        "malformed_json",
        "",
    )
    .await;

    let r = post("/v1/deployments").json(&json!({"server_id": "s1"}));
    expect_error(
        r.send().await.expect("send"),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_body",
        "config_id",
    )
    .await;

    let r = post("/v1/configs").json(&json!({"config": "x"}));
    expect_error(
        r.send().await.expect("send"),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_body",
        "group",
    )
    .await;

    // An input name is anything an environment entry can carry, as in Heat; an output
    // name becomes a file suffix.
    let r = post("/v1/configs").json(&json!({"group": "script", "inputs": [{"name": "a=b"}]}));
    expect_error(
        r.send().await.expect("send"),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_config",
        "a=b",
    )
    .await;
    let r =
        post("/v1/configs").json(&json!({"group": "script", "outputs": [{"name": "bad name"}]}));
    expect_error(
        r.send().await.expect("send"),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_config",
        "bad name",
    )
    .await;

    let r = post("/v1/configs").json(&json!({"id": "c1", "group": "other"}));
    expect_error(
        r.send().await.expect("send"),
        StatusCode::CONFLICT,
        "conflict",
        "c1",
    )
    .await;

    let big = "x".repeat(8192);
    let r = post("/v1/configs").json(&json!({"group": "script", "config": big}));
    expect_error(
        r.send().await.expect("send"),
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        "",
    )
    .await;

    let r = post("/v1/configs")
        .header("content-type", "text/plain")
        .body("{}");
    expect_error(
        r.send().await.expect("send"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        "",
    )
    .await;

    let r = post("/v1/deployments")
        .json(&json!({"config_id": "c1", "server_id": "s1", "timeout_secs": 0}));
    expect_error(
        r.send().await.expect("send"),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "timeout",
    )
    .await;

    let r = http.get(format!(
        "{base}/v1/deployments/{}?wait_secs=999",
        accepted.id
    ));
    expect_error(
        r.send().await.expect("send"),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "wait_secs",
    )
    .await;

    // The deployment accepted before all that is untouched, and still runs.
    let still = flue
        .client()
        .get_deployment(&accepted.id)
        .await
        .expect("still there");
    assert_eq!(still.status, DeploymentStatus::Queued);
    let _agent = flue.agent("s1", &[]).await;
    assert_eq!(
        flue.finished(&accepted.id).await.status,
        DeploymentStatus::Complete
    );
}

#[tokio::test]
async fn creating_the_same_config_twice_is_idempotent() {
    let flue = Flue::start().await;
    let a = flue.script_config("same", "#!/bin/sh\n", &["x"], &[]).await;
    let b = flue.script_config("same", "#!/bin/sh\n", &["x"], &[]).await;
    assert_eq!(a, b);
}
