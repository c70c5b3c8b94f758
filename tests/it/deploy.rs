//! A deployment's normal life: inputs in, outputs out, failures reported, external hooks.

use flue_proto::{DeploymentStatus, ServerId};
use flue_tests::Flue;
use serde_json::{Value, json};

#[tokio::test]
async fn script_hook_gets_inputs_and_returns_outputs() {
    let flue = Flue::start().await;
    flue.register("web1").await;
    let _agent = flue.agent("web1", &[]).await;
    flue.script_config(
        "greet",
        "#!/bin/sh\n\
         echo \"hello $who from $deploy_server_id\"\n\
         echo warn >&2\n\
         printf '%s' \"$who-$deploy_action\" > \"$heat_outputs_path.greeting\"\n",
        &["who"],
        &["greeting"],
    )
    .await;

    let d = flue.deploy("greet", "web1", &[("who", "world")]).await;
    assert_eq!(d.status, DeploymentStatus::Queued);
    let done = flue.finished(&d.id).await;

    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.outputs.get("greeting"), Some(&json!("world-CREATE")));
    assert_eq!(done.deploy_stdout, "hello world from web1\n");
    assert_eq!(done.deploy_stderr, "warn\n");
    assert_eq!(done.deploy_status_code, Some(0));
    assert!(done.started_at.is_some() && done.finished_at.is_some());

    let listed = flue
        .client()
        .list_server_deployments(&ServerId::new("web1").expect("id"))
        .await
        .expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, d.id);
    assert_eq!(listed[0].status, DeploymentStatus::Complete);
}

#[tokio::test]
async fn failing_hook_is_failed_with_its_stderr_and_code() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let _agent = flue.agent("s1", &[]).await;
    flue.script_config(
        "bad",
        "#!/bin/sh\necho partial\necho 'disk full' >&2\nexit 3\n",
        &[],
        &[],
    )
    .await;

    let d = flue.deploy("bad", "s1", &[]).await;
    let done = flue.finished(&d.id).await;

    assert_eq!(done.status, DeploymentStatus::Failed);
    assert_eq!(done.deploy_status_code, Some(3));
    assert_eq!(done.deploy_stderr, "disk full\n");
    assert_eq!(done.deploy_stdout, "partial\n");
    let reason = done.status_reason.expect("a failure has a reason");
    assert!(reason.contains('3'), "{reason}");
}

#[tokio::test]
async fn external_hook_speaks_the_heat_config_protocol() {
    let flue = Flue::start().await;
    // A hook in the stock heat-agents shape: item JSON on stdin, one JSON object on stdout.
    let (hooks, item_file) = flue.item_recording_hook(
        "echo-item",
        &json!({"deploy_stdout": "ext ok", "deploy_stderr": "", "deploy_status_code": 0, "answer": "42"}),
    );
    flue.register("s1").await;
    let _agent = flue.agent("s1", std::slice::from_ref(&hooks)).await;
    let spec = serde_json::from_value(json!({
        "id": "ext", "group": "echo-item", "config": {"k": "v"},
        "inputs": [{"name": "count", "type": "Number"}],
        "outputs": [{"name": "answer"}]
    }))
    .expect("spec");
    flue.client().create_config(&spec).await.expect("config");

    let created = flue
        .client()
        .create_deployment(
            &serde_json::from_value(json!({
                "config_id": "ext", "server_id": "s1", "input_values": {"count": 7},
                "name": "ext-deploy", "stack_id": "st1", "resource_name": "res1"
            }))
            .expect("body"),
        )
        .await
        .expect("deploy");
    let done = flue.finished(&created.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.outputs.get("answer"), Some(&json!("42")));
    assert_eq!(done.deploy_stdout, "ext ok");

    let item: Value =
        serde_json::from_str(&std::fs::read_to_string(&item_file).expect("item")).expect("json");
    assert_eq!(item["id"], json!(created.id.as_str()));
    assert_eq!(item["name"], json!("ext-deploy"));
    assert_eq!(item["group"], json!("echo-item"));
    assert!(item["creation_time"].is_string(), "{item}");
    assert_eq!(
        item["options"],
        json!({}),
        "options must be {{}}, never null"
    );
    assert_eq!(item["config"], json!({"k": "v"}));
    let inputs = item["inputs"].as_array().expect("inputs");
    let value = |name: &str| {
        inputs
            .iter()
            .find(|i| i["name"] == json!(name))
            .unwrap_or_else(|| panic!("input {name} missing in {item}"))["value"]
            .clone()
    };
    assert_eq!(
        value("count"),
        json!(7),
        "a Number is a JSON number, as Heat sends it"
    );
    assert_eq!(value("deploy_server_id"), json!("s1"));
    assert_eq!(value("deploy_action"), json!("CREATE"));
    assert_eq!(value("deploy_stack_id"), json!("st1/st1"));
    assert_eq!(value("deploy_resource_name"), json!("res1"));
    assert_eq!(item["outputs"][0]["name"], json!("answer"));
}

#[tokio::test]
async fn hidden_inputs_reach_the_hook_but_never_api_reads_or_logs() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let agent = flue.agent("s1", &[]).await;
    let seen = flue.path("seen");
    let secret = "s3cr3t-Zq9";
    let hidden_default = "dflt-T0ken-77";
    let spec = serde_json::from_value(json!({
        "id": "secretive", "group": "script",
        "config": format!("#!/bin/sh\nprintf '%s %s' \"$password\" \"$token\" > '{}'\n", seen.display()),
        "inputs": [
            {"name": "password", "hidden": true},
            {"name": "token", "hidden": true, "default": hidden_default}
        ]
    }))
    .expect("spec");
    let created = flue.client().create_config(&spec).await.expect("config");
    assert_eq!(created.inputs[1].default, Some(json!("<hidden>")));

    let d = flue
        .deploy("secretive", "s1", &[("password", secret)])
        .await;
    assert_eq!(d.input_values.get("password"), Some(&json!("<hidden>")));
    let done = flue.finished(&d.id).await;

    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(
        std::fs::read_to_string(&seen).expect("hook wrote"),
        format!("{secret} {hidden_default}"),
        "the hook gets the real values"
    );
    assert_eq!(done.input_values.get("password"), Some(&json!("<hidden>")));
    assert_eq!(done.input_values.get("token"), Some(&json!("<hidden>")));
    let base = flue.gateway.url();
    for path in [
        format!("/v1/deployments/{}", d.id),
        "/v1/servers/s1/deployments".to_owned(),
        "/v1/configs/secretive".to_owned(),
    ] {
        let body = flue
            .http()
            .get(format!("{base}{path}"))
            .send()
            .await
            .expect("get")
            .text()
            .await
            .expect("body");
        assert!(
            !body.contains(secret) && !body.contains(hidden_default),
            "{path}: {body}"
        );
    }
    for line in flue
        .gateway
        .logs()
        .lines()
        .iter()
        .chain(agent.logs().lines().iter())
    {
        assert!(
            !line.contains(secret) && !line.contains(hidden_default),
            "secret logged: {line}"
        );
    }
}

#[tokio::test]
async fn example_python_hook_in_the_stock_heat_agents_shape_runs() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let hooks = flue_tests::repo_root().join("examples/hooks");
    let _agent = flue.agent("s1", &[hooks]).await;
    let spec = serde_json::from_value(json!({
        "id": "facts", "group": "json-echo",
        "config": {"tier": "web", "replicas": 2},
        "inputs": [{"name": "url"}],
        "outputs": [{"name": "tier"}, {"name": "replicas"}, {"name": "url"}]
    }))
    .expect("spec");
    flue.client().create_config(&spec).await.expect("config");

    let d = flue.deploy("facts", "s1", &[("url", "http://x/")]).await;
    let done = flue.finished(&d.id).await;

    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.deploy_status_code, Some(0));
    assert_eq!(done.outputs.get("tier"), Some(&json!("web")));
    assert_eq!(done.outputs.get("url"), Some(&json!("http://x/")));
    assert!(
        done.deploy_stdout.contains("json-echo"),
        "{}",
        done.deploy_stdout
    );
}
