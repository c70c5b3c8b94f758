//! Sizes against the broker's max payload: what would not fit is refused at accept time
//! with 413 naming the size and the limit, and a request the broker refuses fails that
//! one deployment while the server's queue moves on.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream;
use flue_proto::{DeploymentStatus, ServerId};
use flue_tests::{Flue, queued_deployment};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::expect_error;

/// The broker's default max payload (1 MiB) less the 4 KiB the gateway keeps for headers.
const BUDGET: &str = "1044480";

#[tokio::test]
async fn what_would_not_fit_the_broker_is_refused_with_413_and_blocks_nothing() {
    let flue = Flue::start_with(&["--max-body-bytes", "2000000"]).await;
    flue.register("s1").await;
    let _agent = flue.agent("s1", &[]).await;
    flue.script_config("c", "#!/bin/sh\necho ok\n", &[], &[])
        .await;
    let base = flue.gateway.url().to_owned();
    let http = flue.http();
    let post = |path: &str, body: &Value| http.post(format!("{base}{path}")).json(body);

    let big = json!({"id": "big", "group": "ext", "config": "x".repeat(700_000), "inputs": [{"name": "blob"}]});
    let created = post("/v1/configs", &big).send().await.expect("send");
    assert_eq!(
        created.status(),
        StatusCode::CREATED,
        "a 700 KB config fits"
    );
    expect_error(
        post(
            "/v1/deployments",
            &json!({"config_id": "big", "server_id": "s1", "input_values": {"blob": "y".repeat(600_000)}}),
        ),
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        &["deployment request", BUDGET],
    )
    .await;

    let inputs: Vec<Value> = (0..40_000)
        .map(|i| json!({"name": format!("i{i}")}))
        .collect();
    expect_error(
        post("/v1/configs", &json!({"group": "ext", "inputs": inputs})),
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        &["config", BUDGET],
    )
    .await;
    expect_error(
        http.put(format!("{base}/v1/stacks/st1")).json(&json!({
            "status": {"action": "CREATE", "status": "IN_PROGRESS"},
            "state": {"outputs": {"o": "z".repeat(1_100_000)}},
        })),
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        &["stack", BUDGET],
    )
    .await;

    let next = flue.deploy("c", "s1", &[]).await;
    let done = flue
        .finished_within(&next.id, Duration::from_secs(30))
        .await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
}

#[tokio::test]
async fn a_request_the_broker_refuses_fails_that_deployment_and_the_server_queue_moves_on() {
    let mut flue = Flue::start().await;
    flue.register("s1").await;
    flue.script_config("c", "#!/bin/sh\necho ok\n", &[], &[])
        .await;
    let http = flue.http();
    let created = http
        .post(format!("{}/v1/configs", flue.gateway.url()))
        .json(&json!({"id": "big", "group": "ext", "config": "x".repeat(700_000), "inputs": [{"name": "blob"}]}))
        .send()
        .await
        .expect("send");
    assert_eq!(created.status(), StatusCode::CREATED);

    // A record accepted by an older gateway (or written by another client) and marked
    // pending: its request, config plus input, is larger than the broker takes.
    flue.gateway.kill().await;
    let mut deployment = queued_deployment("huge", "s1", "big");
    deployment.group = "ext".into();
    deployment.input_values = BTreeMap::from([("blob".to_owned(), json!("y".repeat(600_000)))]);
    let id = deployment.id.clone();
    // As the gateway stores it: the API's deployment and what only the gateway keeps.
    let record = json!({"deployment": deployment, "request_published": false});
    let js = jetstream::new(flue.nats.client().await);
    js.get_key_value(flue_proto::subject::DEPLOYMENTS_BUCKET)
        .await
        .expect("bucket")
        .put(
            "default.huge",
            serde_json::to_vec(&record).expect("ser").into(),
        )
        .await
        .expect("put record");
    // Pending, as every gateway marks what it records (`flue_pending`, entry first).
    js.get_key_value(flue_proto::subject::PENDING_BUCKET)
        .await
        .expect("pending bucket")
        .put("default.huge", bytes::Bytes::new())
        .await
        .expect("mark pending");
    flue.gateway.restart().await;
    let _agent = flue.agent("s1", &[]).await;

    let next = flue.deploy("c", "s1", &[]).await;
    let done = flue
        .finished_within(&next.id, Duration::from_secs(30))
        .await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    let huge = flue.finished_within(&id, Duration::from_secs(30)).await;
    assert_eq!(huge.status, DeploymentStatus::Failed);
    let reason = huge.status_reason.unwrap_or_default();
    assert!(
        reason.contains("max payload") && reason.contains(BUDGET),
        "{reason}"
    );
}

#[tokio::test]
async fn a_result_that_would_overflow_its_record_is_shortened_and_the_deployment_completes() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let _agent = flue.agent("s1", &[]).await;
    // 480 KB of inputs, then 900 KB of stdout: each fits one message, not both together.
    flue.script_config(
        "loud",
        "#!/bin/sh\nhead -c 900000 /dev/zero | tr '\\000' o\nprintf done > \"$heat_outputs_path.r\"\n",
        &["a", "b", "c", "d"],
        &["r"],
    )
    .await;
    let value = "x".repeat(120_000);
    let inputs: Vec<(&str, &str)> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| (*n, value.as_str()))
        .collect();
    let d = flue.deploy("loud", "s1", &inputs).await;

    let done = flue.finished_within(&d.id, Duration::from_secs(30)).await;
    assert_eq!(
        done.status,
        DeploymentStatus::Complete,
        "{:?}",
        done.status_reason
    );
    assert_eq!(done.outputs["r"], json!("done"));
    assert_eq!(
        done.input_values["d"],
        json!(value),
        "inputs are kept whole"
    );
    assert!(done.deploy_stdout.ends_with("\n[truncated]"));
    assert!(
        done.deploy_stdout.len() < 900_000 && done.deploy_stdout.len() > 400_000,
        "{}",
        done.deploy_stdout.len()
    );
    let listed = flue
        .client()
        .list_server_deployments(&ServerId::new("s1").expect("id"))
        .await
        .expect("list");
    assert_eq!(listed.len(), 1);
}
