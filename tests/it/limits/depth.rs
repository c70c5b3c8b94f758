//! One nesting-depth limit on every value the API accepts: deeper is a 422 naming the
//! field; at the limit, the value runs through a real agent and hook and reads back.

use flue_proto::limits::{MAX_STATE_DEPTH, MAX_VALUE_DEPTH, nested};
use flue_proto::{DeploymentStatus, ServerId};
use flue_tests::{Flue, write_executable};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::expect_error;

#[tokio::test]
async fn values_nested_past_the_limit_are_refused_naming_the_field() {
    let flue = Flue::start().await;
    let base = flue.gateway.url().to_owned();
    let http = flue.http();
    flue.register("s1").await;
    flue.script_config("c1", "#!/bin/sh\necho ok\n", &["foo"], &[])
        .await;
    let post = |path: &str, body: Value| http.post(format!("{base}{path}")).json(&body);
    let deep = nested(125);

    expect_error(
        post(
            "/v1/deployments",
            json!({"config_id": "c1", "server_id": "s1", "input_values": {"foo": deep}}),
        ),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        &["input_values.foo", "limit is 64"],
    )
    .await;
    let over = nested(MAX_VALUE_DEPTH + 1);
    for (body, field) in [
        (json!({"group": "x", "config": nested(126)}), "config"),
        (
            json!({"group": "x", "options": {"a": nested(MAX_VALUE_DEPTH)}}),
            "options",
        ),
        (
            json!({"group": "x", "inputs": [{"name": "a"}, {"name": "b", "default": nested(124)}]}),
            "inputs[1].default",
        ),
        (
            json!({"group": "x", "hooks": {"DELETE": over}}),
            "hooks.DELETE",
        ),
        (
            json!({"group": "x", "actions": {"backup": {"config": over}}}),
            "actions.backup.config",
        ),
    ] {
        expect_error(
            post("/v1/configs", body),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_config",
            &[field, "nested"],
        )
        .await;
    }
    let state = json!({"outputs": {"o": nested(MAX_STATE_DEPTH)}});
    expect_error(
        http.put(format!("{base}/v1/stacks/st1")).json(&json!({
            "status": {"action": "CREATE", "status": "IN_PROGRESS"},
            "state": state,
        })),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        &["state", "limit is 96"],
    )
    .await;

    let listed = flue.client().list_stacks().await.expect("list stacks");
    assert!(listed.is_empty(), "nothing refused was stored: {listed:?}");
    let s1 = ServerId::new("s1").expect("id");
    let deployments = flue
        .client()
        .list_server_deployments(&s1)
        .await
        .expect("list");
    assert!(deployments.is_empty(), "{deployments:?}");
}

#[tokio::test]
async fn values_nested_exactly_at_the_limit_run_to_complete_and_read_back_everywhere() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let (hooks, item_file) = flue.item_recording_hook(
        "deep",
        &json!({"deploy_stdout": "ok", "deploy_status_code": 0}),
    );
    let _agent = flue.agent("s1", std::slice::from_ref(&hooks)).await;
    let at = nested(MAX_VALUE_DEPTH);
    let http = flue.http();
    let base = flue.gateway.url().to_owned();
    let config = http
        .post(format!("{base}/v1/configs"))
        .json(&json!({
            "id": "deep",
            "group": "deep",
            "config": at,
            "options": {"o": nested(MAX_VALUE_DEPTH - 1)},
            "inputs": [{"name": "given", "type": "Json"}, {"name": "dflt", "type": "Json", "default": at}],
            "actions": {"backup": {"config": at}},
        }))
        .send()
        .await
        .expect("send");
    assert_eq!(config.status(), StatusCode::CREATED);
    let created = http
        .post(format!("{base}/v1/deployments"))
        .json(&json!({"config_id": "deep", "server_id": "s1", "input_values": {"given": at}}))
        .send()
        .await
        .expect("send");
    assert_eq!(created.status(), StatusCode::ACCEPTED);
    let id = created
        .json::<flue_proto::Deployment>()
        .await
        .expect("deployment")
        .id;

    let done = flue.finished(&id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.input_values["given"], at);
    assert_eq!(done.input_values["dflt"], at);
    let item: Value =
        serde_json::from_str(&std::fs::read_to_string(&item_file).expect("item")).expect("json");
    assert_eq!(item["config"], at, "the hook got the body intact");

    let client = flue.client();
    assert_eq!(client.get_deployment(&id).await.expect("get").id, id);
    let s1 = ServerId::new("s1").expect("id");
    assert_eq!(
        client
            .list_server_deployments(&s1)
            .await
            .expect("list")
            .len(),
        1
    );
    let all = http
        .get(format!("{base}/v1/deployments"))
        .send()
        .await
        .expect("send");
    assert_eq!(all.status(), StatusCode::OK);
    assert_eq!(all.json::<Vec<Value>>().await.expect("list").len(), 1);
}

#[tokio::test]
async fn a_hook_output_nested_past_the_limit_fails_its_deployment_naming_the_output() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let hooks = flue.path("hooks");
    std::fs::create_dir_all(&hooks).expect("hook dir");
    // 126 levels: the agent can read the hook's answer, but no reader of an answer
    // (which wraps outputs three levels deeper) could read it back.
    write_executable(
        &hooks.join("deep-out"),
        "#!/bin/sh\no=''; c=''; i=0\nwhile [ $i -lt 126 ]; do o=\"$o[\"; c=\"$c]\"; i=$((i+1)); done\n\
         printf '{\"deploy_status_code\":0,\"deep\":%s1%s,\"flat\":\"ok\"}' \"$o\" \"$c\"\n",
    );
    let _agent = flue.agent("s1", std::slice::from_ref(&hooks)).await;
    let http = flue.http();
    let created = http
        .post(format!("{}/v1/configs", flue.gateway.url()))
        .json(&json!({"id": "d", "group": "deep-out", "outputs": [{"name": "deep"}, {"name": "flat"}]}))
        .send()
        .await
        .expect("send");
    assert_eq!(created.status(), StatusCode::CREATED);

    let d = flue.deploy("d", "s1", &[]).await;
    let done = flue
        .finished_within(&d.id, std::time::Duration::from_secs(30))
        .await;
    assert_eq!(done.status, DeploymentStatus::Failed);
    let reason = done.status_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("output deep") && reason.contains("limit is 64"),
        "{reason}"
    );
    assert!(!done.outputs.contains_key("deep"), "{:?}", done.outputs);
    assert_eq!(done.outputs.get("flat"), Some(&json!("ok")));
}
