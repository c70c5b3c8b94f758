//! What the operations API refuses: bad bodies (4xx JSON naming the field, nothing
//! queued), a second operation while one is unfinished (409), a role that may not
//! submit (403), and another tenant (404: it neither sees nor reaches them).

use flue_proto::auth::Role;
use flue_proto::operation::{OperationState, StackOperation};
use flue_proto::{CreateTenant, TenantId};
use flue_tests::{Flue, Tokens, WAIT, file_lines, wait_until};
use serde_json::{Value, json};

use super::takeover::gated_body;
use super::{accepted, ended, group_body, read, submit};

/// The error code and message of an error body.
fn error(body: &Value) -> (String, String) {
    (
        body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

#[tokio::test]
async fn bad_operation_bodies_are_refused_naming_the_field_and_nothing_is_queued() {
    let flue = Flue::start().await;
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let log = flue.path("hooks.log");
    let gw = &flue.gateway;

    let raw = gw
        .http()
        .post(format!("{}/v1/stacks/bad/operations", gw.url()))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("answers");
    assert_eq!(raw.status().as_u16(), 400);
    let body: Value = raw.json().await.expect("JSON");
    assert_eq!(error(&body).0, "malformed_json", "{body}");

    let mut cases: Vec<(Value, u16, &str)> = Vec::new();
    let mut misspelt = group_body("create", 1, &log);
    misspelt["paramters"] = json!({});
    cases.push((misspelt, 422, "paramters"));
    let mut no_file = group_body("create", 1, &log);
    no_file["files"] = json!({});
    cases.push((no_file, 422, "template.resources.config.properties.config"));
    let mut not_a_number = group_body("create", 1, &log);
    not_a_number["parameters"]["count"] = json!("three");
    cases.push((not_a_number, 422, "count"));
    let mut no_secret = group_body("create", 1, &log);
    no_secret["parameters"]
        .as_object_mut()
        .expect("map")
        .remove("secret");
    cases.push((no_secret, 422, "secret"));
    let mut broken = group_body("create", 1, &log);
    broken["template"] =
        json!("heat_template_version: 2018-08-31\nresources: {a: {type: OS::Nope}}\n");
    cases.push((broken, 422, "template.resources.a"));
    cases.push((json!({"operation": "create"}), 422, "template"));
    cases.push((json!({"operation": "explode"}), 422, "operation"));
    cases.push((
        json!({"operation": "delete", "template": "x"}),
        422,
        "template",
    ));
    cases.push((
        json!({"operation": "delete", "no_follow": true}),
        422,
        "no_follow",
    ));
    cases.push((
        json!({"operation": "converge", "units": ["a"], "no_follow": "yes"}),
        422,
        "no_follow",
    ));
    cases.push((json!({"operation": "delete"}), 404, "bad"));
    for (body, status, names) in cases {
        let (got, _, answer) = submit(gw, "bad", &body).await;
        assert_eq!(got, status, "{body} → {answer}");
        let (code, message) = error(&answer);
        assert!(!code.is_empty(), "{answer}");
        assert!(message.contains(names), "{body} → {message}");
    }
    let (status, _) = read(gw, "bad", "nope").await;
    assert_eq!(status, 404);

    // Nothing was queued: no stack, no hook ran, and a good body runs at once.
    let missing = flue.client().get_stack(&"bad".parse().expect("id")).await;
    assert!(missing.is_err_and(|e| e.is_not_found()));
    assert!(file_lines(&log).is_empty());
    let op = accepted(gw, "bad", &group_body("create", 1, &log)).await;
    assert_eq!(
        ended(gw, "bad", &op.id).await.state,
        OperationState::Succeeded
    );
    assert_eq!(file_lines(&log).len(), 1, "only the good operation ran");
}

#[tokio::test]
async fn a_second_operation_on_a_busy_stack_is_refused_until_the_first_ends() {
    let flue = Flue::start().await;
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let (log, gate) = (flue.path("hooks.log"), flue.path("gate"));
    let gw = &flue.gateway;

    let first = accepted(gw, "busy", &gated_body(&log, &gate)).await;
    let (status, _, body) = submit(gw, "busy", &json!({"operation": "delete"})).await;
    assert_eq!(status, 409, "{body}");
    assert!(error(&body).1.contains(&first.id), "{body}");

    std::fs::write(&gate, "open").expect("open the gate");
    assert_eq!(
        ended(gw, "busy", &first.id).await.state,
        OperationState::Succeeded
    );
    let delete = accepted(gw, "busy", &json!({"operation": "delete"})).await;
    assert_eq!(
        ended(gw, "busy", &delete.id).await.state,
        OperationState::Succeeded
    );
}

#[tokio::test]
async fn another_tenant_neither_sees_nor_submits_operations_on_a_tenants_stacks() {
    let flue = Flue::start().await;
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let log = flue.path("hooks.log");
    let gw = &flue.gateway;
    let op = accepted(gw, "mine", &group_body("create", 1, &log)).await;
    assert_eq!(
        ended(gw, "mine", &op.id).await.state,
        OperationState::Succeeded
    );

    // A viewer of the same tenant reads it but may not submit.
    let viewer = reqwest::Client::new();
    let as_viewer = |req: reqwest::RequestBuilder| req.bearer_auth(gw.tokens().get(Role::Viewer));
    let url = format!("{}/v1/stacks/mine/operations", gw.url());
    let refused = as_viewer(viewer.post(&url)).json(&json!({"operation": "delete"}));
    assert_eq!(
        refused.send().await.expect("answers").status().as_u16(),
        403
    );
    let read_back = as_viewer(viewer.get(format!("{url}/{}", op.id)));
    assert_eq!(
        read_back.send().await.expect("answers").status().as_u16(),
        200
    );

    let acme = TenantId::new("acme").expect("id");
    gw.client_as(Role::Operator)
        .create_tenant(&CreateTenant {
            id: acme.clone(),
            name: "Acme".to_owned(),
        })
        .await
        .expect("the operator creates a tenant");
    let acme_tokens = Tokens::for_tenant(&gw.state_dir(), &acme);
    let acme_engine = acme_tokens.get(Role::Engine).to_owned();
    let other = reqwest::Client::new();
    let seen = other
        .get(format!("{url}/{}", op.id))
        .bearer_auth(&acme_engine)
        .send()
        .await
        .expect("answers");
    assert_eq!(seen.status().as_u16(), 404);
    // Its listing of a stack by that name holds none of the first tenant's operations.
    let listed = other
        .get(&url)
        .bearer_auth(&acme_engine)
        .send()
        .await
        .expect("answers");
    assert_eq!(listed.status().as_u16(), 200);
    assert_eq!(
        listed.json::<serde_json::Value>().await.expect("json"),
        json!([])
    );
    let mine = as_viewer(viewer.get(&url)).send().await.expect("answers");
    let mine: Vec<StackOperation> = mine.json().await.expect("operations");
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].id, op.id);
    let deleted = other
        .post(&url)
        .bearer_auth(&acme_engine)
        .json(&json!({"operation": "delete"}))
        .send()
        .await
        .expect("answers");
    assert_eq!(deleted.status().as_u16(), 404);

    // The stack is untouched: still there, and its delete hooks never ran.
    let stack = flue
        .client()
        .get_stack(&"mine".parse().expect("id"))
        .await
        .expect("still there");
    assert_eq!(stack.status.to_string(), "CREATE_COMPLETE");
    wait_until("the create ran", WAIT, || {
        (file_lines(&log).len() == 1).then_some(())
    })
    .await;
    assert!(file_lines(&log).iter().all(|l| l.starts_with("CREATE")));
}
