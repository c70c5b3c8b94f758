//! Inputs of the built-in `script` group become environment variables: what cannot be
//! one is refused at accept time, naming the input; what can runs with its value intact.

use flue_proto::limits::MAX_SCRIPT_ENV_VAR_BYTES;
use flue_proto::{Deployment, DeploymentStatus};
use flue_tests::Flue;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::expect_error;

/// `printf` of the length of `$a` into output `n`.
const LENGTH_SCRIPT: &str = "#!/bin/sh\nprintf '%s' \"${#a}\" > \"$heat_outputs_path.n\"\n";

#[tokio::test]
async fn script_inputs_that_cannot_be_environment_variables_are_refused_naming_the_input() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let _agent = flue.agent("s1", &[]).await;
    flue.script_config("c", LENGTH_SCRIPT, &["a"], &["n"]).await;
    flue.script_config(
        "emit",
        "#!/bin/sh\nprintf 'a\\000b' > \"$heat_outputs_path.v\"\n",
        &[],
        &["v"],
    )
    .await;
    let base = flue.gateway.url().to_owned();
    let http = flue.http();
    let deploy = |body: Value| http.post(format!("{base}/v1/deployments")).json(&body);

    expect_error(
        deploy(json!({"config_id": "c", "server_id": "s1", "input_values": {"a": "x\u{0}y"}})),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        &["input_values.a", "NUL"],
    )
    .await;
    let too_long = "x".repeat(MAX_SCRIPT_ENV_VAR_BYTES - 2);
    expect_error(
        deploy(json!({"config_id": "c", "server_id": "s1", "input_values": {"a": too_long}})),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        &["input_values.a", "131073", "131072"],
    )
    .await;
    expect_error(
        http.post(format!("{base}/v1/configs")).json(&json!({
            "group": "script", "config": "true", "inputs": [{"name": "d", "default": "1\u{0}"}]
        })),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_config",
        &["inputs[0].default", "NUL"],
    )
    .await;

    // A value from another deployment's output breaks the rule just the same.
    let emitted = flue.deploy("emit", "s1", &[]).await;
    let emitted = flue.finished(&emitted.id).await;
    assert_eq!(emitted.outputs["v"], json!("a\u{0}b"), "{emitted:?}");
    expect_error(
        deploy(json!({
            "config_id": "c", "server_id": "s1",
            "input_refs": {"a": {"deployment_id": emitted.id, "output": "v"}}
        })),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        &["input_refs.a", "NUL"],
    )
    .await;
}

#[tokio::test]
async fn script_inputs_just_under_the_limit_and_nul_for_json_hooks_run_intact() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let (hooks, item_file) = flue.item_recording_hook("json", &json!({"deploy_status_code": 0}));
    let _agent = flue.agent("s1", std::slice::from_ref(&hooks)).await;
    flue.script_config("c", LENGTH_SCRIPT, &["a"], &["n"]).await;

    // `a=` + value + NUL is exactly the kernel's MAX_ARG_STRLEN.
    let longest = MAX_SCRIPT_ENV_VAR_BYTES - 3;
    let value = "x".repeat(longest);
    let d = flue.deploy("c", "s1", &[("a", &value)]).await;
    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.outputs["n"], json!(longest.to_string()));

    let base = flue.gateway.url().to_owned();
    let http = flue.http();
    let created = http
        .post(format!("{base}/v1/configs"))
        .json(&json!({"id": "j", "group": "json", "inputs": [{"name": "a"}]}))
        .send()
        .await
        .expect("send");
    assert_eq!(created.status(), StatusCode::CREATED);
    let resp = http
        .post(format!("{base}/v1/deployments"))
        .json(&json!({"config_id": "j", "server_id": "s1", "input_values": {"a": "x\u{0}y"}}))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let d: Deployment = resp.json().await.expect("deployment");
    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    let item: Value =
        serde_json::from_str(&std::fs::read_to_string(&item_file).expect("item")).expect("json");
    let a = item["inputs"]
        .as_array()
        .and_then(|inputs| inputs.iter().find(|i| i["name"] == "a"))
        .expect("input a");
    assert_eq!(
        a["value"],
        json!("x\u{0}y"),
        "JSON carries the NUL to the hook"
    );
}
