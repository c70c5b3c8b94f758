//! A client that may create deployments cannot route a stack's hidden value to a server
//! of its own (`input_refs`, `inputs_from`) nor confirm a guess of one
//! (`skip_if_unchanged_from`): references stay inside the deployment's own stack.

use flue_tests::WAIT;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::stack::{cluster, create_stack, deployments, example};

#[tokio::test]
async fn a_deployment_cannot_take_a_stacks_hidden_values_outside_it_or_to_another_server() {
    let (env, _agents) = cluster(&["db", "web", "evil"]).await;
    let data = env.path("data");
    let run = create_stack(
        &env,
        "shop",
        &example("two-tier"),
        &[&format!("data_dir={}", data.display())],
    )
    .await;
    assert_eq!(run.code, 0, "the engine's own references still work: {run}");
    let db = deployments(&env, "db").await[0].id.to_string();
    let web = deployments(&env, "web").await;
    let web = &web[0];
    env.script_config(
        "steal",
        "#!/bin/sh\necho \"$pw\"\n",
        &["pw", "db_password"],
        &[],
    )
    .await;

    let http = env.http();
    let url = format!("{}/v1/deployments", env.gateway.url());
    let pw_of_db = json!({"pw": {"deployment_id": db, "output": "password"}});
    let guess: Value = serde_json::to_value(&web.input_values).expect("values");
    let attempts = [
        (
            "input_refs outside any stack",
            json!({"config_id": "steal", "server_id": "evil", "input_refs": pw_of_db}),
            "own stack",
        ),
        (
            "input_refs in the stack, to a server outside it",
            json!({"config_id": "steal", "server_id": "evil", "stack_id": "shop", "input_refs": pw_of_db}),
            "not a server of stack \"shop\"",
        ),
        (
            "inputs_from in the stack, on another server",
            json!({"config_id": "steal", "server_id": "evil", "stack_id": "shop", "inputs_from": web.id}),
            "on their own server only",
        ),
        (
            "inputs_from outside any stack",
            json!({"config_id": "steal", "server_id": "evil", "inputs_from": web.id}),
            "own stack",
        ),
        (
            "skip_if_unchanged_from outside the stack, to confirm a guess",
            json!({"config_id": web.config_id, "server_id": "web", "input_values": guess,
                   "skip_if_unchanged_from": web.id}),
            "own stack",
        ),
    ];
    for (what, body, says) in attempts {
        let response = http.post(&url).json(&body).send().await.expect("POST");
        let status = response.status();
        let answer: Value = response.json().await.expect("json");
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{what}: {answer}");
        let message = answer["error"]["message"].as_str().expect("message");
        assert!(message.contains(says), "{what}: {message}");
    }
    // Nothing was queued for the other server, and web got nothing new.
    assert!(
        deployments(&env, "evil").await.is_empty(),
        "a request reached evil"
    );
    assert_eq!(deployments(&env, "web").await.len(), 1);
    // The stack goes on working: its delete re-uses the recorded inputs (`inputs_from`).
    let delete = tokio::time::timeout(WAIT, crate::stack::flue(&env, &["stack", "delete", "shop"]))
        .await
        .expect("in time");
    assert_eq!(delete.code, 0, "{delete}");
}
