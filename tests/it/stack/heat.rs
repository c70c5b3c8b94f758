//! Templates written for Heat, run by Flue: `OS::Nova::Server` mapped onto registered
//! servers, `OS::Heat::RandomString`, and groups of deployments (the `examples/heat`
//! templates), against a real broker, gateway and agents.

use serde_json::json;

use super::{
    cluster, deployments, flue, flue_in_background, kill_driver_once, lines, put_data, ran, stack,
};

fn heat_example(name: &str) -> String {
    flue_tests::repo_root()
        .join("examples/heat")
        .join(name)
        .display()
        .to_string()
}

/// `flue stack update STACK -t TEMPLATE -P PARAM`, which must succeed.
async fn update(env: &flue_tests::Flue, stack: &str, template: &str, param: &str) -> super::Run {
    let run = flue(
        env,
        &["stack", "update", stack, "-t", template, "-P", param],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    run
}

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim_end()
        .to_owned()
}

#[tokio::test]
async fn the_heat_two_server_template_runs_db_then_web_on_the_mapped_servers() {
    let (env, agents) = cluster(&["db1", "web1"]).await;
    let data = env.path("data");
    let data_param = format!("data_dir={}", data.display());
    let template = heat_example("two-servers.yaml");
    let args = [
        "stack",
        "create",
        "shop",
        "-t",
        &template,
        "-P",
        &data_param,
        "--server",
        "db_server=db1",
        "--server",
        "web_server=web1",
    ];
    let run = flue(&env, &args).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("stack shop: CREATE_COMPLETE"), "{run}");
    // What the mapping did is said once, with what is ignored.
    let note = "db_server: OS::Nova::Server mapped to registered server db1; \
                flavor/image/key_name/software_config_transport/user_data_format ignored";
    assert_eq!(run.stdout.matches(note).count(), 1, "{run}");
    assert!(run.stdout.contains("url: http://127.0.0.1:8080/"), "{run}");
    assert!(run.stdout.contains("db_password: <hidden>"), "{run}");

    // db first, then web, each on its mapped server.
    assert_eq!(lines(&data.join("order.log")), ["db on db1", "web on web1"]);
    // The generated password reached both servers, and no read shows it.
    let password = read(&data.join("db/password"));
    assert_eq!(password.len(), 24);
    assert!(
        password.chars().all(|c| c.is_ascii_alphanumeric()),
        "{password}"
    );
    assert_eq!(
        read(&data.join("web/app.conf")),
        format!("postgres://app:{password}@127.0.0.1:5432/app (server db1)")
    );
    let web = deployments(&env, "web1").await;
    assert_eq!(web[0].input_values["db_password"], json!("<hidden>"));
    assert_eq!(web[0].input_values["db_server_name"], json!("db1"));
    let shown = flue(&env, &["stack", "show", "shop"]).await;
    assert_eq!(shown.code, 0, "{shown}");
    assert!(
        shown.stdout.contains("  db_server = server db1\n"),
        "{shown}"
    );
    assert!(
        shown.stdout.contains("  web_server = server web1\n"),
        "{shown}"
    );
    // The password's keeper is a unit of the stack, on the first server that uses it.
    assert!(
        shown.stdout.contains("db_password                  db1"),
        "{shown}"
    );
    let s = stack(&env, "shop").await;
    assert_eq!(s.state.outputs["db_password"], json!("<hidden>"));
    assert_eq!(
        s.state.mapped["db_server"]
            .server_id
            .as_ref()
            .map(|s| s.as_str()),
        Some("db1")
    );
    let record = serde_json::to_string(&s).expect("json");
    let mut logs = env.gateway.logs().lines().join("\n");
    for agent in &agents {
        logs.push_str(&agent.logs().lines().join("\n"));
    }
    for (what, text) in [("stack record", &record), ("logs", &logs)] {
        assert!(
            !text.contains(&password),
            "the password shows in the {what}"
        );
    }

    // The map is kept: an update without --server runs on the same servers, and only
    // what changed runs (web's port).
    let run = update(&env, "shop", &template, "app_port=9090").await;
    assert!(run.stdout.contains("url: http://127.0.0.1:9090/"), "{run}");
    assert_eq!(
        lines(&data.join("order.log")),
        ["db on db1", "web on web1", "web on web1"]
    );
    // Delete runs nothing here (no delete hooks) and forgets the stack.
    let run = flue(&env, &["stack", "delete", "shop"]).await;
    assert_eq!(run.code, 0, "{run}");
}

#[tokio::test]
async fn a_heat_server_that_maps_to_no_registered_server_is_refused_before_anything_runs() {
    let (env, _agents) = cluster(&["db1", "web1"]).await;
    let data = env.path("data");
    let data_param = format!("data_dir={}", data.display());
    let template = heat_example("two-servers.yaml");
    // Unmapped, db_server stands for a server named db_server, which is not registered.
    let run = flue(
        &env,
        &[
            "stack",
            "create",
            "shop",
            "-t",
            &template,
            "-P",
            &data_param,
            "--server",
            "web_server=web1",
        ],
    )
    .await;
    assert_eq!(run.code, 2, "{run}");
    assert!(
        run.stderr.contains(
            "resources.db_server: OS::Nova::Server mapped by its resource name to server \"db_server\", which is not registered"
        ),
        "{run}"
    );
    assert!(run.stderr.contains("--server db_server=SERVER_ID"), "{run}");
    // A mapping onto a server that does not exist is refused the same way.
    let run = flue(
        &env,
        &[
            "stack",
            "create",
            "shop",
            "-t",
            &template,
            "-P",
            &data_param,
            "--server",
            "db_server=db9",
            "--server",
            "web_server=web1",
        ],
    )
    .await;
    assert_eq!(run.code, 2, "{run}");
    assert!(
        run.stderr
            .contains("OS::Nova::Server mapped with --server to server \"db9\""),
        "{run}"
    );
    // Nothing was stored or run.
    let listed = flue(&env, &["stack", "list"]).await;
    assert!(listed.stdout.contains("no stacks"), "{listed}");
    assert!(deployments(&env, "db1").await.is_empty());
    assert!(deployments(&env, "web1").await.is_empty());
    assert!(!data.exists());
}

#[tokio::test]
async fn a_random_string_keeps_its_value_across_updates_until_its_properties_change() {
    let (env, _agents) = cluster(&["db1", "web1"]).await;
    let data = env.path("data");
    let data_param = format!("data_dir={}", data.display());
    let template = heat_example("two-servers.yaml");
    let servers = ["--server", "db_server=db1", "--server", "web_server=web1"];
    let mut args = vec![
        "stack",
        "create",
        "shop",
        "-t",
        &template,
        "-P",
        &data_param,
    ];
    args.extend(servers);
    let run = flue(&env, &args).await;
    assert_eq!(run.code, 0, "{run}");
    let first = read(&data.join("db/password"));

    // Another port: web runs again and gets the same password; db does not run.
    let run = update(&env, "shop", &template, "app_port=9090").await;
    assert!(
        run.stdout
            .contains("db_password              unchanged, not run"),
        "{run}"
    );
    assert!(
        run.stdout
            .contains("db_deployment            unchanged, not run"),
        "{run}"
    );
    assert_eq!(
        read(&data.join("web/app.conf")),
        format!("postgres://app:{first}@127.0.0.1:5432/app (server db1)")
    );
    assert_eq!(read(&data.join("db/password")), first);

    // Another salt is another RandomString, as in Heat: a new value, and both servers
    // are configured again with it.
    update(&env, "shop", &template, "password_salt=2").await;
    let second = read(&data.join("db/password"));
    assert_ne!(second, first);
    assert_eq!(second.len(), 24);
    assert_eq!(
        read(&data.join("web/app.conf")),
        format!("postgres://app:{second}@127.0.0.1:5432/app (server db1)")
    );
}

#[tokio::test]
async fn heat_deployment_groups_run_one_member_per_server_and_scale_by_count() {
    let (env, _agents) = cluster(&["n1", "n2", "w1", "w2", "w3"]).await;
    let data = env.path("data");
    let data_param = format!("data_dir={}", data.display());
    let template = heat_example("deployment-group.yaml");
    let run = flue(
        &env,
        &[
            "stack",
            "create",
            "grp",
            "-t",
            &template,
            "-P",
            &data_param,
            "-P",
            "servers=w1,w2,w3",
            "--server",
            "node_a=n1",
            "--server",
            "node_b=n2",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    let s = stack(&env, "grp").await;
    assert_eq!(
        s.state.outputs["worker_greetings"],
        json!(["hello from w1 (worker-0)", "hello from w2 (worker-1)"])
    );
    assert_eq!(
        s.state.outputs["node_greetings"],
        json!({"a": "hello from n1 (node)", "b": "hello from n2 (node)"})
    );
    assert_eq!(
        s.state.outputs["first_worker"],
        json!("hello from w1 (worker-0)")
    );
    assert_eq!(lines(&data.join("1.log")), ["worker-1 on w2"]);
    assert!(ran(&env, "w3").await.is_empty());

    // count 3: the third member runs on the third server; the others are unchanged.
    update(&env, "grp", &template, "count=3").await;
    assert_eq!(ran(&env, "w3").await, [("2".into(), "CREATE".into())]);
    assert_eq!(ran(&env, "w1").await, [("0".into(), "CREATE".into())]);
    // count 1: members 1 and 2 leave the stack.
    update(&env, "grp", &template, "count=1").await;
    let s = stack(&env, "grp").await;
    let keys: Vec<&str> = s.state.units.keys().map(String::as_str).collect();
    assert_eq!(keys, ["nodes/a", "nodes/b", "workers/0"]);
    assert_eq!(
        s.state.outputs["worker_greetings"],
        json!(["hello from w1 (worker-0)"])
    );
}

#[tokio::test]
async fn a_killed_driver_of_a_heat_template_resumes_with_its_mapping_and_password() {
    let (env, _agents) = cluster(&["s1", "s2"]).await;
    let record = env.path("record.log");
    let t = env.path("heat.yaml");
    // b blocks until the test puts the data key `go`: the driver is killed meanwhile.
    std::fs::write(
        &t,
        r#"heat_template_version: 2018-08-31
parameters:
  record: {type: string}
resources:
  secret: {type: OS::Heat::RandomString, properties: {length: 16}}
  srv_a: {type: OS::Nova::Server, properties: {image: cirros, flavor: m1.tiny}}
  srv_b: {type: OS::Nova::Server, properties: {image: cirros, name: s2}}
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: record}, {name: secret}]
      config: |
        #!/bin/sh
        set -eu
        echo "start $deploy_resource_name" >> "$record"
        echo "secret $deploy_resource_name $secret" >> "$record"
        if [ "$deploy_resource_name" = b ]; then flue-agent data get go --wait 120s; fi
        echo "end $deploy_resource_name" >> "$record"
  a:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: cfg}
      server: {get_resource: srv_a}
      input_values: {record: {get_param: record}, secret: {get_attr: [secret, value]}}
  b:
    type: OS::Heat::SoftwareDeployment
    depends_on: a
    properties:
      config: {get_resource: cfg}
      server: {get_resource: srv_b}
      input_values: {record: {get_param: record}, secret: {get_attr: [secret, value]}}
"#,
    )
    .expect("template");
    let t = t.display().to_string();
    let p = format!("record={}", record.display());
    let args = [
        "stack", "create", "k", "-t", &t, "-P", &p, "--server", "srv_a=s1",
    ];
    kill_driver_once(&env, &args, &record, "start b").await;
    assert_eq!(
        stack(&env, "k").await.status.to_string(),
        "CREATE_IN_PROGRESS"
    );

    // The same command again resumes it; the map was recorded before anything ran.
    let resumed = flue_in_background(&env, &args);
    put_data(&env, "k", "go", "now").await;
    let out = resumed.await.expect("join");
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains("resuming the interrupted CREATE"),
        "{out}"
    );
    let record = lines(&record);
    assert_eq!(record.len(), 6, "{record:?}");
    let secret = record[1]
        .strip_prefix("secret a ")
        .expect("a first")
        .to_owned();
    assert_eq!(secret.len(), 16);
    assert_eq!(
        record,
        [
            "start a".to_owned(),
            format!("secret a {secret}"),
            "end a".to_owned(),
            "start b".to_owned(),
            format!("secret b {secret}"),
            "end b".to_owned(),
        ]
    );
    assert_eq!(ran(&env, "s2").await, [("b".into(), "CREATE".into())]);
}

#[tokio::test]
async fn infrastructure_attributes_reach_hooks_only_when_given() {
    let (env, _agents) = cluster(&["app1"]).await;
    let record = env.path("record.log");
    let t = env.path("infra.yaml");
    std::fs::write(
        &t,
        r#"heat_template_version: 2018-08-31
parameters:
  record: {type: string}
resources:
  port: {type: OS::Neutron::Port, properties: {network: private}}
  fip: {type: OS::Neutron::FloatingIP, properties: {floating_network: public}}
  app: {type: OS::Nova::Server, properties: {name: app1, networks: [{port: {get_resource: port}}]}}
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: record}, {name: address}, {name: port_id}]
      config: |
        #!/bin/sh
        echo "$deploy_server_id $address $port_id" >> "$record"
  deploy:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: cfg}
      server: {get_resource: app}
      input_values:
        record: {get_param: record}
        address: {get_attr: [app, first_address]}
        port_id: {get_resource: port}
"#,
    )
    .expect("template");
    let t = t.display().to_string();
    let p = format!("record={}", record.display());
    let run = flue(&env, &["stack", "create", "infra", "-t", &t, "-P", &p]).await;
    assert_eq!(run.code, 2, "{run}");
    assert!(
        run.stderr.contains(
            "resources.deploy.properties.input_values.address: get_attr: app (OS::Nova::Server) is not created by Flue"
        ),
        "{run}"
    );
    assert!(
        run.stderr.contains("--attr app.first_address=VALUE"),
        "{run}"
    );
    assert!(deployments(&env, "app1").await.is_empty());

    let run = flue(
        &env,
        &[
            "stack",
            "create",
            "infra",
            "-t",
            &t,
            "-P",
            &p,
            "--attr",
            "app.first_address=10.0.0.5",
            "--attr",
            "port=0c6b-port",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    // app is mapped by its name property; the port and the floating IP are listed.
    assert!(
        run.stdout.contains(
            "app: OS::Nova::Server mapped to registered server app1 (by its name property)"
        ),
        "{run}"
    );
    assert!(
        run.stdout
            .contains("fip: OS::Neutron::FloatingIP is external: not created by Flue"),
        "{run}"
    );
    assert_eq!(lines(&record), ["app1 10.0.0.5 0c6b-port"]);
}
