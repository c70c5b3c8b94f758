//! The examples in `examples/`, run as the README describes.

use flue_tests::write_executable;
use serde_json::{Value, json};

use super::{cluster, create_stack, deployments, example, flue, lines, ran, stack};

#[tokio::test]
async fn ordering_example_runs_config1_then_config3_then_config2() {
    let (env, _agents) = cluster(&["server1", "server2"]).await;
    let record = env.path("record.log");
    let record_param = format!("record_file={}", record.display());
    let run = create_stack(&env, "order", &example("ordering"), &[&record_param]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("stack order: CREATE_COMPLETE"), "{run}");
    // The hooks' own records: each step starts only after the one it depends on ended.
    assert_eq!(
        lines(&record),
        [
            "start config1",
            "end config1",
            "start config3",
            "end config3",
            "start config2",
            "end config2"
        ],
        "{run}"
    );
    let s = stack(&env, "order").await;
    assert_eq!(
        s.state.outputs["order"],
        json!("config1@server1, config3@server2, config2@server1")
    );
    assert_eq!(
        ran(&env, "server2").await,
        [("config3".into(), "CREATE".into())]
    );
}

/// Two deployments with no dependency between them, on two servers, each waiting for
/// a key only the other one writes: they can only both finish if they run at the same
/// time, and the values cross servers through the stack's data space.
#[tokio::test]
async fn independent_deployments_run_in_parallel_and_exchange_data() {
    let (env, _agents) = cluster(&["left", "right"]).await;
    let template = env.path("pair.yaml");
    std::fs::write(
        &template,
        r#"
heat_template_version: 2018-08-31
resources:
  swap:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: mine}, {name: theirs}]
      outputs: [{name: got}]
      config: |
        #!/bin/sh
        set -eu
        flue-agent data put "$mine" "hello from $deploy_server_id"
        got=$(flue-agent data get "$theirs" --wait 60s)
        printf '%s' "$got" > "$heat_outputs_path.got"
  left_deploy:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: swap}
      server: left
      input_values: {mine: from-left, theirs: from-right}
  right_deploy:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: swap}
      server: right
      input_values: {mine: from-right, theirs: from-left}
outputs:
  left_got: {value: {get_attr: [left_deploy, got]}}
  right_got: {value: {get_attr: [right_deploy, got]}}
"#,
    )
    .expect("template");
    let run = create_stack(&env, "pair", &template.display().to_string(), &[]).await;
    assert_eq!(run.code, 0, "{run}");
    let s = stack(&env, "pair").await;
    assert_eq!(s.state.outputs["left_got"], json!("hello from right"));
    assert_eq!(s.state.outputs["right_got"], json!("hello from left"));
}

#[tokio::test]
async fn two_tier_web_receives_the_database_address_and_password_as_a_hidden_input() {
    let (env, agents) = cluster(&["db", "web"]).await;
    let data = env.path("data");
    let data_param = format!("data_dir={}", data.display());
    let run = create_stack(&env, "shop", &example("two-tier"), &[&data_param]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("url: http://127.0.0.1:8080/"), "{run}");

    // The password the database hook generated (its own file on the db server)...
    let password = std::fs::read_to_string(data.join("db/password")).expect("db password");
    let password = password.trim_end().to_owned();
    assert_eq!(password.len(), 24);
    // ...reached the web server's config,
    let app_conf = std::fs::read_to_string(data.join("web/app.conf")).expect("app.conf");
    assert!(
        app_conf.contains(&format!("postgres://app:{password}@127.0.0.1:5432/app")),
        "{app_conf}"
    );
    // but no read shows it: not db's output, not web's input.
    let db = deployments(&env, "db").await;
    assert_eq!(db[0].outputs["password"], json!("<hidden>"));
    assert_eq!(db[0].outputs["address"], json!("127.0.0.1:5432"));
    let web = deployments(&env, "web").await;
    assert_eq!(web[0].input_values["db_password"], json!("<hidden>"));
    assert_eq!(web[0].input_values["db_address"], json!("127.0.0.1:5432"));
    let shown = flue(&env, &["stack", "show", "shop", "--json"]).await;
    assert_eq!(shown.code, 0, "{shown}");
    let output = flue(
        &env,
        &[
            "deployment",
            "show",
            db[0].id.as_str(),
            "--output",
            "password",
        ],
    )
    .await;
    assert_eq!(output.code, 1, "{output}");
    assert!(output.stderr.contains("is hidden"), "{output}");
    assert!(output.stdout.is_empty(), "{output}");
    let config = env
        .client()
        .get_config(&web[0].config_id)
        .await
        .expect("web config");
    let config_text = serde_json::to_string(&config).expect("json");
    let listing =
        serde_json::to_string(&db).expect("json") + &serde_json::to_string(&web).expect("json");
    let mut logs = env.gateway.logs().lines().join("\n");
    for agent in &agents {
        logs.push_str(&agent.logs().lines().join("\n"));
    }
    for text in [&shown.stdout, &config_text, &run.stdout, &listing, &logs] {
        assert!(!text.contains(&password), "password leaked: {text}");
    }

    // A db UPDATE makes a new password; web is re-run with it, still never shown.
    let run = flue(
        &env,
        &[
            "stack",
            "update",
            "shop",
            "-t",
            &example("two-tier"),
            "-P",
            "db_port=5433",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    let new_password = std::fs::read_to_string(data.join("db/password")).expect("db password");
    let new_password = new_password.trim_end();
    assert_ne!(new_password, password);
    let app_conf = std::fs::read_to_string(data.join("web/app.conf")).expect("app.conf");
    assert!(
        app_conf.contains(&format!("postgres://app:{new_password}@127.0.0.1:5433/app")),
        "{app_conf}"
    );
    assert!(!run.stdout.contains(new_password), "{run}");
}

#[tokio::test]
async fn cluster_scale_out_recontextualizes_every_member_and_the_head() {
    let (env, _agents) = cluster(&["head", "compute1", "compute2", "compute3"]).await;
    let state = env.path("cluster");
    let state_param = format!("state_dir={}", state.display());
    let run = create_stack(&env, "hpc", &example("cluster"), &[&state_param]).await;
    assert_eq!(run.code, 0, "{run}");
    let members = |server: &str| -> Value {
        let text =
            std::fs::read_to_string(state.join(server).join("members.json")).expect("members.json");
        serde_json::from_str(&text).expect("members json")
    };
    let names = |v: Value| -> Vec<String> {
        v.as_array()
            .expect("list")
            .iter()
            .map(|m| m["name"].as_str().expect("name").to_owned())
            .collect()
    };
    assert_eq!(names(members("compute1")), ["c1", "c2"]);
    let head_address = std::fs::read_to_string(state.join("compute2/head_address")).expect("addr");
    assert_eq!(head_address, "head.cluster.internal");

    let three = r#"compute_servers={"c1": "compute1", "c2": "compute2", "c3": "compute3"}"#;
    let run = flue(
        &env,
        &[
            "stack",
            "update",
            "hpc",
            "-t",
            &example("cluster"),
            "-P",
            three,
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    for server in ["compute1", "compute2", "compute3"] {
        assert_eq!(names(members(server)), ["c1", "c2", "c3"], "{server}");
    }
    let computes: Value = serde_json::from_str(
        &std::fs::read_to_string(state.join("head/computes.json")).expect("computes.json"),
    )
    .expect("json");
    assert_eq!(
        computes,
        json!({"c1": "compute1.cluster.internal", "c2": "compute2.cluster.internal", "c3": "compute3.cluster.internal"})
    );
    // What ran: the new member CREATE, each old member and the head's registration
    // UPDATE; head_setup, whose inputs did not change, only ever ran once.
    let pair = |r: &str, a: &str| (r.to_owned(), a.to_owned());
    // A member's hook sees its member name as deploy_resource_name, as in Heat.
    assert_eq!(ran(&env, "compute3").await, [pair("c3", "CREATE")]);
    for (server, member) in [("compute1", "c1"), ("compute2", "c2")] {
        assert_eq!(
            ran(&env, server).await,
            [pair(member, "CREATE"), pair(member, "UPDATE")]
        );
    }
    assert_eq!(
        ran(&env, "head").await,
        [
            pair("head_setup", "CREATE"),
            pair("head_register", "CREATE"),
            pair("head_register", "UPDATE")
        ]
    );
    assert!(run.stdout.contains("head_setup"), "{run}");
    assert!(run.stdout.contains("unchanged"), "{run}");

    // Scale in to 2: c2 leaves (its config has no delete hook, so nothing runs there),
    // c1 and the head learn the new membership.
    let two = r#"compute_servers={"c1": "compute1", "c3": "compute3"}"#;
    let run = flue(
        &env,
        &[
            "stack",
            "update",
            "hpc",
            "-t",
            &example("cluster"),
            "-P",
            two,
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout
            .contains("compute/c2               removed from the stack"),
        "{run}"
    );
    for server in ["compute1", "compute3"] {
        assert_eq!(names(members(server)), ["c1", "c3"], "{server}");
    }
    assert_eq!(
        ran(&env, "compute2").await.len(),
        2,
        "nothing more ran on compute2"
    );
    let s = stack(&env, "hpc").await;
    let units: Vec<&str> = s.state.units.keys().map(String::as_str).collect();
    assert_eq!(
        units,
        ["compute/c1", "compute/c3", "head_register", "head_setup"]
    );
}

/// A hook put on PATH by no one: the agent's own directory is appended to the hook's
/// PATH, which is what lets the templates above call `flue-agent` by name. This test
/// makes sure a hook can also use `$FLUE_AGENT`.
#[tokio::test]
async fn hooks_can_reach_the_agent_binary_by_variable() {
    let (env, _agents) = cluster(&["solo"]).await;
    let hook_check = env.path("check.sh");
    write_executable(&hook_check, "#!/bin/sh\ntest -x \"$FLUE_AGENT\"\n");
    let template = env.path("solo.yaml");
    std::fs::write(
        &template,
        format!(
            "heat_template_version: 2018-08-31\nresources:\n  c:\n    type: OS::Heat::SoftwareConfig\n    properties:\n      group: script\n      config: {{get_file: {}}}\n  d:\n    type: OS::Heat::SoftwareDeployment\n    properties: {{config: {{get_resource: c}}, server: solo}}\n",
            "check.sh"
        ),
    )
    .expect("template");
    let run = create_stack(&env, "solo", &template.display().to_string(), &[]).await;
    assert_eq!(run.code, 0, "{run}");
}

/// `OS::Heat::StructuredConfig`: the agent replaces `get_input` with the deployment's
/// input values before the hook sees the config; the stored config keeps the
/// placeholders. `get_attr` reads outputs and `deploy_stdout` / `deploy_status_code`.
#[tokio::test]
async fn structured_configs_get_their_inputs_substituted_by_the_agent() {
    let env = flue_tests::Flue::start().await;
    env.register("box").await;
    let hooks = flue_tests::repo_root().join("examples/hooks");
    let _agent = env.agent("box", &[hooks]).await;
    let template = env.path("structured.yaml");
    std::fs::write(
        &template,
        r#"heat_template_version: 2018-08-31
parameters:
  url: {type: string, default: "postgres://db:5432/app"}
resources:
  facts:
    type: OS::Heat::StructuredConfig
    properties:
      group: json-echo
      inputs: [{name: db_url}]
      outputs: [{name: database}, {name: port}]
      config:
        database: {get_input: db_url}
        port: 5432
        server: {get_input: deploy_server_id}
  d:
    type: OS::Heat::StructuredDeployment
    properties:
      config: {get_resource: facts}
      server: box
      input_values: {db_url: {get_param: url}}
outputs:
  database: {value: {get_attr: [d, database]}}
  port: {value: {get_attr: [d, port]}}
  stdout: {value: {get_attr: [d, deploy_stdout]}}
  code: {value: {get_attr: [d, deploy_status_code]}}
"#,
    )
    .expect("template");
    let run = create_stack(&env, "st", &template.display().to_string(), &[]).await;
    assert_eq!(run.code, 0, "{run}");
    let s = stack(&env, "st").await;
    assert_eq!(s.state.outputs["database"], json!("postgres://db:5432/app"));
    assert_eq!(s.state.outputs["port"], json!(5432));
    assert_eq!(s.state.outputs["code"], json!(0));
    let stdout = s.state.outputs["stdout"].as_str().expect("stdout");
    assert!(stdout.contains("server = \"box\""), "{stdout}");
    let d = &deployments(&env, "box").await[0];
    let config = env.client().get_config(&d.config_id).await.expect("config");
    assert_eq!(config.config["database"], json!({"get_input": "db_url"}));
    assert!(config.substitute_inputs);
}
