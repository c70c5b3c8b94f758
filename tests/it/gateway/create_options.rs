//! What a deployment create may ask beyond the basics: an ad-hoc action the config
//! declares, `inputs_from` another deployment, `skip_if_unchanged_from` one. Hidden
//! values are carried and compared, never shown.

use axum::http::{Method, StatusCode};
use flue_proto::seal;
use serde_json::{Value, json};

use super::fixture::{Fixture, code, config_and_server, message, script_config};

const SECRET: &str = "s3cret";

/// Posts a deployment and checks the status; no answer may ever show the secret.
async fn post(fx: &Fixture, body: Value, expect: StatusCode) -> Value {
    let (s, answer) = fx.call(Method::POST, "/v1/deployments", Some(body)).await;
    assert_eq!(s, expect, "{answer}");
    assert!(!answer.to_string().contains(SECRET), "{answer}");
    answer
}

async fn post_config(fx: &Fixture, spec: Value) {
    let (s, body) = fx.call(Method::POST, "/v1/configs", Some(spec)).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
}

/// The input values as stored (hidden ones in clear), which only the agent ever gets.
async fn stored_inputs(fx: &Fixture, id: &str) -> Value {
    let record = fx.stored_record(id).await.expect("recorded");
    // Hidden values are stored sealed to the gateway: opened here to see what they hold.
    let mut values = record["deployment"]["input_values"].clone();
    let hidden = record["hidden_inputs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for name in hidden.iter().filter_map(Value::as_str) {
        if let Some(value) = values.get_mut(name) {
            assert!(
                seal::is_sealed(value),
                "{name} is stored in the clear: {value}"
            );
            *value = fx.open_at_rest(value);
        }
    }
    values
}

#[tokio::test]
async fn only_lifecycle_actions_and_declared_ad_hoc_ones_are_accepted() {
    let fx = Fixture::start().await;
    config_and_server(&fx).await;
    let mut spec = script_config("c-app");
    spec["hooks"] = json!({"DELETE": "#!/bin/sh\necho bye"});
    spec["actions"] = json!({
        "backup": {"config": "#!/bin/sh\necho backup", "description": "dump the db"},
        "rotate": {"config": "#!/bin/sh\necho rotate"}
    });
    post_config(&fx, spec).await;

    for (config, action) in [("c-app", "backup"), ("c-app", "DELETE"), ("c1", "SUSPEND")] {
        let body = json!({"config_id": config, "server_id": "web1", "action": action});
        let created = post(&fx, body, StatusCode::ACCEPTED).await;
        assert_eq!(created["action"], action);
    }
    for (config, action, declared) in [
        ("c-app", "restore", "it declares: backup, rotate"),
        ("c1", "backup", "it declares no ad-hoc actions"),
    ] {
        let body = json!({"config_id": config, "server_id": "web1", "action": action});
        let err = post(&fx, body, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert_eq!(code(&err), "invalid_input");
        assert_eq!(
            message(&err),
            format!("action {action:?} is not declared by config {config:?} ({declared})")
        );
    }
    fx.shutdown().await;
}

#[tokio::test]
async fn inputs_from_carries_every_value_hidden_ones_included() {
    let fx = Fixture::start().await;
    config_and_server(&fx).await;
    let first = json!({
        "id": "d1", "config_id": "c1", "server_id": "web1",
        "input_values": {"secret": SECRET, "foo": "given", "extra": 1}
    });
    post(&fx, first, StatusCode::ACCEPTED).await;

    let next = json!({
        "id": "d2", "config_id": "c1", "server_id": "web1", "action": "UPDATE",
        "inputs_from": "d1", "input_values": {"extra": 2}
    });
    let created = post(&fx, next, StatusCode::ACCEPTED).await;
    assert_eq!(
        created["input_values"],
        json!({"secret": "<hidden>", "foo": "given", "extra": 2})
    );
    assert_eq!(
        stored_inputs(&fx, "d2").await,
        json!({"secret": SECRET, "foo": "given", "extra": 2}),
        "given values over carried ones"
    );

    // A config that no longer declares `secret` hidden still never shows the carried value.
    post_config(
        &fx,
        json!({"id": "c-plain", "group": "script", "inputs": [{"name": "secret"}]}),
    )
    .await;
    let plain =
        json!({"id": "d3", "config_id": "c-plain", "server_id": "web1", "inputs_from": "d1"});
    let created = post(&fx, plain, StatusCode::ACCEPTED).await;
    assert_eq!(created["input_values"]["secret"], "<hidden>");
    let (_, read) = fx.call(Method::GET, "/v1/deployments/d3", None).await;
    assert_eq!(read["input_values"]["secret"], "<hidden>");

    // Defaults fill only what neither deployment gave.
    let fresh = json!({"id": "d4", "config_id": "c1", "server_id": "web1", "inputs_from": "d3"});
    post(&fx, fresh, StatusCode::ACCEPTED).await;
    assert_eq!(
        stored_inputs(&fx, "d4").await,
        json!({"secret": SECRET, "foo": "given", "extra": 1})
    );

    let missing = json!({"config_id": "c1", "server_id": "web1", "inputs_from": "nope"});
    let err = post(&fx, missing, StatusCode::NOT_FOUND).await;
    assert_eq!(
        (code(&err), message(&err)),
        ("not_found", "inputs_from deployment \"nope\" not found")
    );
    fx.shutdown().await;
}

#[tokio::test]
async fn an_unchanged_deployment_is_not_created_and_answers_200_with_the_old_one() {
    let fx = Fixture::start().await;
    config_and_server(&fx).await;
    let (s, _) = fx
        .call(Method::POST, "/v1/servers", Some(json!({"id": "web2"})))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    // Same content under another id and name: unchanged. Another body: changed.
    let mut same = script_config("c1-copy");
    same["name"] = json!("copy");
    post_config(&fx, same).await;
    let mut other = script_config("c1-new");
    other["config"] = json!("#!/bin/sh\necho new");
    post_config(&fx, other).await;
    let mut with_hook = script_config("c1-hook");
    with_hook["hooks"] = json!({"DELETE": "#!/bin/sh\necho bye"});
    post_config(&fx, with_hook).await;

    let base = json!({
        "id": "d1", "config_id": "c1", "server_id": "web1",
        "input_values": {"secret": SECRET}
    });
    let original = post(&fx, base, StatusCode::ACCEPTED).await;
    let update = |id: &str, config: &str, server: &str, values: Value| {
        json!({
            "id": id, "config_id": config, "server_id": server, "action": "UPDATE",
            "input_values": values, "skip_if_unchanged_from": "d1"
        })
    };

    // The same values (the default of `foo` filled in both), given or carried over.
    let mut carried = update("u1", "c1-copy", "web1", json!({}));
    carried["inputs_from"] = json!("d1");
    for body in [
        carried,
        update("u2", "c1", "web1", json!({"secret": SECRET, "foo": "dflt"})),
    ] {
        let answer = post(&fx, body, StatusCode::OK).await;
        assert_eq!(answer, original, "the old deployment, redacted");
    }
    for id in ["u1", "u2"] {
        let (s, _) = fx
            .call(Method::GET, &format!("/v1/deployments/{id}"), None)
            .await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{id} was not created");
    }

    // A hidden value is compared too; every other difference counts as well.
    let changed = [
        update("c1", "c1", "web1", json!({"secret": "other"})),
        update("c2", "c1", "web1", json!({"secret": SECRET, "foo": "x"})),
        update("c3", "c1-new", "web1", json!({"secret": SECRET})),
        update("c4", "c1-hook", "web1", json!({"secret": SECRET})),
        update("c5", "c1", "web2", json!({"secret": SECRET})),
    ];
    for body in changed {
        let id = body["id"].clone();
        let created = post(&fx, body, StatusCode::ACCEPTED).await;
        assert_eq!(
            (&created["id"], &created["status"]),
            (&id, &json!("QUEUED"))
        );
        assert_eq!(created["input_values"]["secret"], "<hidden>");
    }

    // An id already recorded takes the usual retry path: the same request gets its
    // deployment (202), another one a conflict, even if it would be "unchanged".
    let retry = update("c1", "c1", "web1", json!({"secret": "other"}));
    let again = post(&fx, retry, StatusCode::ACCEPTED).await;
    assert_eq!(again["id"], "c1");
    let unchanged_but_taken = update("c2", "c1", "web1", json!({"secret": SECRET}));
    let err = post(&fx, unchanged_but_taken, StatusCode::CONFLICT).await;
    assert_eq!(code(&err), "conflict");

    let mut missing = update("u9", "c1", "web1", json!({}));
    missing["skip_if_unchanged_from"] = json!("nope");
    let err = post(&fx, missing, StatusCode::NOT_FOUND).await;
    assert_eq!(
        message(&err),
        "skip_if_unchanged_from deployment \"nope\" not found"
    );
    fx.shutdown().await;
}

#[tokio::test]
async fn input_refs_name_complete_deployments_only() {
    let fx = Fixture::start().await;
    config_and_server(&fx).await;
    let queued = post(
        &fx,
        json!({"id": "d-src", "config_id": "c1", "server_id": "web1"}),
        StatusCode::ACCEPTED,
    )
    .await;
    assert_eq!(queued["status"], "QUEUED");
    let body = |from: &str| {
        json!({"config_id": "c1", "server_id": "web1",
               "input_refs": {"pw": {"deployment_id": from, "output": "password"}}})
    };
    let answer = post(&fx, body("d-nope"), StatusCode::NOT_FOUND).await;
    assert!(message(&answer).contains("d-nope"), "{answer}");
    let answer = post(&fx, body("d-src"), StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(code(&answer), "invalid_input");
    assert!(
        message(&answer).contains("input_refs.pw: deployment \"d-src\" is QUEUED, not COMPLETE"),
        "{answer}"
    );
    let bad = json!({"config_id": "c1", "server_id": "web1",
                     "input_refs": {"pw": {"deployment_id": "d.src", "output": "password"}}});
    post(&fx, bad, StatusCode::UNPROCESSABLE_ENTITY).await;
}
