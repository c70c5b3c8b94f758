//! The inputs of the item: declared types kept, Heat's derived inputs, and values that
//! cannot be their declared type refused before anything runs.

use flue_proto::{DeploymentStatus, ErrorBody, ServerId};
use flue_tests::Flue;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::config;

#[tokio::test]
async fn the_item_carries_each_input_with_its_declared_type_and_heats_derived_inputs() {
    let flue = Flue::start().await;
    let (hooks, item_file) = flue.item_recording_hook("typed", &json!({"deploy_status_code": 0}));
    flue.register("s1").await;
    let _agent = flue.agent("s1", std::slice::from_ref(&hooks)).await;
    config(
        &flue,
        json!({
            "id": "typed", "group": "typed",
            "inputs": [
                {"name": "port", "type": "Number"},
                {"name": "ratio", "type": "Number", "default": "0.25"},
                {"name": "enabled", "type": "Boolean"},
                {"name": "settings", "type": "Json"},
                {"name": "hosts", "type": "CommaDelimitedList"},
                {"name": "label", "description": "a String"},
                {"name": "unset_number", "type": "Number"}
            ],
        }),
    )
    .await;
    let created = flue
        .client()
        .create_deployment(
            &serde_json::from_value(json!({
                "config_id": "typed", "server_id": "s1", "name": "app-config",
                "stack_id": "shop", "resource_name": "app_deployment",
                "input_values": {
                    "port": "8080", "enabled": "on", "settings": "{\"a\": [1]}",
                    "hosts": "h1, h2", "label": 42, "extra": true
                }
            }))
            .expect("body"),
        )
        .await
        .expect("deploy");
    let done = flue.finished(&created.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    // The API shows the values as they were given.
    assert_eq!(done.input_values["port"], json!("8080"));

    let item: Value =
        serde_json::from_str(&std::fs::read_to_string(&item_file).expect("item")).expect("json");
    let inputs = item["inputs"].as_array().expect("inputs");
    let input = |name: &str| {
        inputs
            .iter()
            .find(|i| i["name"] == json!(name))
            .unwrap_or_else(|| panic!("input {name} missing in {item}"))
            .clone()
    };
    let value = |name: &str| input(name)["value"].clone();
    assert_eq!(value("port"), json!(8080));
    assert_eq!(value("ratio"), json!(0.25));
    assert_eq!(value("enabled"), json!(true));
    assert_eq!(value("settings"), json!({"a": [1]}));
    assert_eq!(value("hosts"), json!(["h1", "h2"]));
    assert_eq!(value("label"), json!("42"), "a String is text");
    assert_eq!(input("label")["description"], json!("a String"));
    assert_eq!(value("unset_number"), json!(null));
    assert_eq!(
        input("extra"),
        json!({"name": "extra", "type": "String", "value": "True"}),
        "an undeclared value is a String, made text as Python's str() makes it"
    );
    assert_eq!(value("deploy_server_id"), json!("s1"));
    assert_eq!(value("deploy_action"), json!("CREATE"));
    assert_eq!(
        value("deploy_stack_id"),
        json!("shop/shop"),
        "Heat's <stack name>/<stack id>"
    );
    assert_eq!(value("deploy_resource_name"), json!("app_deployment"));
    assert_eq!(value("deploy_signal_transport"), json!("NO_SIGNAL"));
    assert_eq!(
        input("deploy_server_id")["description"],
        json!("ID of the server being deployed to")
    );
    for absent in [
        "deploy_signal_id",
        "deploy_signal_verb",
        "deploy_auth_url",
        "deploy_queue_id",
    ] {
        assert!(
            inputs.iter().all(|i| i["name"] != json!(absent)),
            "{absent}: nothing for a stock tool to signal to"
        );
    }
}

#[tokio::test]
async fn a_value_that_is_not_its_declared_type_is_refused_naming_the_input_and_nothing_runs() {
    let flue = Flue::start().await;
    let ran = flue.path("ran");
    flue.register("s1").await;
    let _agent = flue.agent("s1", &[]).await;
    config(
        &flue,
        json!({
            "id": "typed", "group": "script",
            "config": format!("#!/bin/sh\ntouch '{}'\n", ran.display()),
            "inputs": [
                {"name": "port", "type": "Number"},
                {"name": "pin", "type": "Number", "hidden": true},
                {"name": "enabled", "type": "Boolean", "default": "no"}
            ],
        }),
    )
    .await;
    let base = flue.gateway.url().to_owned();
    let http = flue.http();
    // A default of the wrong type is refused with the config, as Heat refuses it.
    let resp = http
        .post(format!("{base}/v1/configs"))
        .json(&json!({"id": "odd", "group": "script",
                      "inputs": [{"name": "a"}, {"name": "on", "type": "Boolean", "default": "maybe"}]}))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: ErrorBody = resp.json().await.expect("error body");
    assert_eq!(body.error.code, "invalid_config");
    assert_eq!(
        body.error.message,
        "inputs[1].default is declared Boolean, but its value is text that does not read as one"
    );

    let post = async |values: Value| {
        let resp = http
            .post(format!("{base}/v1/deployments"))
            .json(&json!({"config_id": "typed", "server_id": "s1", "input_values": values}))
            .send()
            .await
            .expect("send");
        let status = resp.status();
        (status, resp.json::<ErrorBody>().await.expect("error body"))
    };

    let (status, body) = post(json!({"port": "80 or so", "enabled": true, "pin": 1})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body.error.code, "invalid_input");
    assert_eq!(
        body.error.message,
        "input_values.port is declared Number, but its value is text that does not read as one"
    );
    let (status, body) = post(json!({"port": 80, "pin": "s3cret-pin"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        body.error
            .message
            .starts_with("input_values.pin is declared Number")
    );
    assert!(
        !body.error.message.contains("s3cret"),
        "a hidden value is never shown: {}",
        body.error.message
    );

    let listed = flue
        .client()
        .list_server_deployments(&ServerId::new("s1").expect("id"))
        .await
        .expect("list");
    assert!(listed.is_empty(), "nothing recorded: {listed:?}");
    assert!(!ran.exists(), "nothing ran");
}

#[tokio::test]
async fn a_stack_gives_hooks_heats_stack_id_and_each_members_resource_name_with_typed_parameters() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    flue.register("s2").await;
    let _s1 = flue.agent("s1", &[]).await;
    let _s2 = flue.agent("s2", &[]).await;
    let seen = flue.path("seen");
    let template = flue.path("shop.yaml");
    std::fs::write(
        &template,
        format!(
            r#"heat_template_version: 2018-08-31
parameters:
  port: {{type: number, default: 8080}}
  debug: {{type: boolean, default: true}}
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{{name: port, type: Number}}, {{name: debug, type: Boolean}}]
      config: |
        #!/bin/sh
        printf '%s %s %s %s %s' "$deploy_stack_id" "$deploy_resource_name" "$deploy_action" \
          "$port" "$debug" > '{seen}.'"$deploy_resource_name"
  app:
    type: OS::Heat::SoftwareDeploymentGroup
    properties:
      config: {{get_resource: cfg}}
      servers: {{web1: s1, web2: s2}}
      input_values: {{port: {{get_param: port}}, debug: {{get_param: debug}}}}
"#,
            seen = seen.display()
        ),
    )
    .expect("template");

    let run = crate::stack::create_stack(
        &flue,
        "shop",
        &template.display().to_string(),
        &["port=9090"],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    for member in ["web1", "web2"] {
        let text = std::fs::read_to_string(format!("{}.{member}", seen.display()))
            .unwrap_or_else(|e| panic!("{member} ran: {e}"));
        assert_eq!(text, format!("shop/shop {member} CREATE 9090 true"));
    }
}
