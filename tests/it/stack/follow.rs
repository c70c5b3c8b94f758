//! Converge follows data (issue 26, point 3): a converge that changes a unit's outputs
//! re-runs every unit whose inputs read them, dependencies first, with the new values
//! (or, with `--no-follow`, reports them), and `flue stack check` reports a unit whose
//! inputs no longer match what it ran with. The example of the issue: a database whose
//! hook makes a new hidden password each time it runs, and a web server that reads it
//! through `get_attr`.

use serde_json::Value;

use super::{cluster, create_stack, deployments, flue, lines};

const TEMPLATE: &str = r#"heat_template_version: 2018-08-31
parameters:
  dir: {type: string}
resources:
  db_config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: dir}]
      outputs: [{name: password, hidden: true}]
      config: |
        #!/bin/sh
        set -eu
        pw="pw-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
        printf '%s' "$pw" > "$dir/db.password"
        echo "db_deploy $deploy_action" >> "$dir/order.log"
        printf '%s' "$pw" > "$heat_outputs_path.password"
      hooks:
        CHECK: |
          #!/bin/sh
          test -s "$dir/db.password" || { echo "the database has no password" >&2; exit 3; }
  web_config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: dir}, {name: db_password}]
      config: |
        #!/bin/sh
        set -eu
        printf '%s' "$db_password" > "$dir/web.password"
        echo "web_deploy $deploy_action" >> "$dir/order.log"
  db_deploy:
    type: OS::Heat::SoftwareDeployment
    properties: {config: {get_resource: db_config}, server: s1, input_values: {dir: {get_param: dir}}}
  web_deploy:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: web_config}
      server: s2
      input_values: {dir: {get_param: dir}, db_password: {get_attr: [db_deploy, password]}}
"#;

#[tokio::test]
async fn converging_a_unit_whose_hidden_output_changes_reruns_its_readers_with_the_new_value_after_it()
 {
    let (env, agents) = cluster(&["s1", "s2"]).await;
    let mut tap = flue_tests::EventTap::from_start(&env.nats.events_client().await).await;
    let dir = env.path("follow");
    std::fs::create_dir_all(&dir).expect("dir");
    let t = env.path("t.yaml");
    std::fs::write(&t, TEMPLATE).expect("template");
    let dir_param = format!("dir={}", dir.display());
    let run = create_stack(&env, "app", &t.display().to_string(), &[&dir_param]).await;
    assert_eq!(run.code, 0, "{run}");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).expect("password file");
    let first = read("db.password");
    assert_eq!(
        read("web.password"),
        first,
        "web got the database's password"
    );
    let mut passwords = vec![first.clone()];
    let mut outputs = vec![run.to_string()];

    // The database drifts (its password is gone); converged with --no-follow, it gets a
    // new password and web is only reported, so web still holds the old one.
    std::fs::remove_file(dir.join("db.password")).expect("drift");
    std::fs::write(dir.join("order.log"), "").expect("clear the log");
    let run = flue(&env, &["stack", "converge", "app", "--no-follow"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("converging db_deploy\n"), "{run}");
    assert!(
        run.stdout.contains(
            "inputs changed: db_password (db_deploy.password); not followed (--no-follow)"
        ),
        "{run}"
    );
    outputs.push(run.to_string());
    assert_eq!(lines(&dir.join("order.log")), ["db_deploy CREATE"]);
    let second = read("db.password");
    assert_ne!(second, first, "the converge made a new password");
    passwords.push(second.clone());
    assert_eq!(read("web.password"), first, "web was not re-run");

    // The check reports web's stale input: not a server-side drift, nothing run for it.
    let web_runs = deployments(&env, "s2").await.len();
    let run = flue(&env, &["stack", "check", "app", "--json"]).await;
    assert_eq!(run.code, 1, "{run}");
    outputs.push(run.to_string());
    let report: Value = serde_json::from_str(&run.stdout).expect("json");
    assert_eq!(report[0]["unit"], "db_deploy", "{report}");
    assert_eq!(report[0]["result"], "in_place", "{report}");
    assert_eq!(report[1]["unit"], "web_deploy", "{report}");
    assert_eq!(report[1]["result"], "inputs_changed", "{report}");
    let detail = report[1]["detail"].as_str().expect("detail");
    assert!(
        detail.contains("db_password (db_deploy.password)"),
        "{report}"
    );
    assert_eq!(
        deployments(&env, "s2").await.len(),
        web_runs,
        "a check of inputs runs nothing"
    );
    let run = flue(&env, &["stack", "check", "app"]).await;
    assert!(run.stdout.contains("1 unit(s) drifted"), "{run}");
    outputs.push(run.to_string());

    // A converge now re-runs web with the password the database has.
    std::fs::write(dir.join("order.log"), "").expect("clear the log");
    let run = flue(&env, &["stack", "converge", "app"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("converging web_deploy\n"), "{run}");
    outputs.push(run.to_string());
    assert_eq!(lines(&dir.join("order.log")), ["web_deploy CREATE"]);
    assert_eq!(
        read("web.password"),
        second,
        "web's hook got the new password"
    );
    let run = flue(&env, &["stack", "check", "app"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("nothing drifted"), "{run}");

    // Followed in one converge: the database re-run first, then web with its new
    // password, as an UPDATE (its inputs changed).
    std::fs::remove_file(dir.join("db.password")).expect("drift");
    std::fs::write(dir.join("order.log"), "").expect("clear the log");
    let run = flue(&env, &["stack", "converge", "app"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("converging db_deploy\n"), "{run}");
    assert!(
        run.stdout
            .contains("inputs changed: db_password (db_deploy.password)"),
        "{run}"
    );
    outputs.push(run.to_string());
    assert_eq!(
        lines(&dir.join("order.log")),
        ["db_deploy CREATE", "web_deploy UPDATE"],
        "dependencies first"
    );
    let third = read("db.password");
    assert!(!passwords.contains(&third), "a new password");
    passwords.push(third.clone());
    assert_eq!(
        read("web.password"),
        third,
        "web's hook got the new password"
    );
    let show = super::stack(&env, "app").await;
    assert_eq!(show.status.to_string(), "CONVERGE_COMPLETE");
    let run = flue(&env, &["stack", "check", "app"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("nothing drifted"), "{run}");

    // Nothing drifted and no input is stale: nothing runs.
    let web_runs = deployments(&env, "s2").await.len();
    let run = flue(&env, &["stack", "converge", "app"]).await;
    assert!(run.stdout.contains("nothing to converge"), "{run}");
    assert_eq!(deployments(&env, "s2").await.len(), web_runs);

    // The password is in no event, log, CLI output or API read.
    // Three converges ran: the events of the last one are in once its end is.
    let converged = std::cell::Cell::new(0);
    let done = |e: &flue_proto::CloudEvent| {
        if e.ty == flue_proto::EventType::StackOperationCompleted
            && e.data.to_string().contains("CONVERGE")
        {
            converged.set(converged.get() + 1);
        }
        converged.get() == 3
    };
    tap.wait_for("the third converge's completion", flue_tests::WAIT, done)
        .await;
    let mut seen: Vec<String> = tap.events().iter().map(|e| e.data.to_string()).collect();
    seen.extend(outputs);
    seen.extend(env.gateway.logs().lines());
    for agent in &agents {
        seen.extend(agent.logs().lines());
    }
    let client = env.client();
    for server in ["s1", "s2"] {
        for d in deployments(&env, server).await {
            seen.push(serde_json::to_string(&d).expect("json"));
        }
    }
    let stack = client
        .get_stack(&flue_proto::StackId::new("app").expect("id"))
        .await
        .expect("stack");
    seen.push(serde_json::to_string(&stack).expect("json"));
    for password in &passwords {
        assert!(
            !seen.iter().any(|s| s.contains(password.as_str())),
            "a password leaked"
        );
    }
}

const VISIBLE: &str = r#"heat_template_version: 2018-08-31
parameters:
  dir: {type: string}
resources:
  db_config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: dir}]
      outputs: [{name: port}, {name: flavor}]
      config: |
        #!/bin/sh
        set -eu
        n=$(( $(cat "$dir/db.runs" 2>/dev/null || echo 0) + 1 ))
        echo "$n" > "$dir/db.runs"
        echo "$((8000 + n))" > "$dir/db.port"
        echo "db_deploy $deploy_action" >> "$dir/order.log"
        printf '%s' "$((8000 + n))" > "$heat_outputs_path.port"
        printf small > "$heat_outputs_path.flavor"
      hooks:
        CHECK: |
          #!/bin/sh
          test -s "$dir/db.port" || { echo "the database is not listening" >&2; exit 3; }
  reader_config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: dir}, {name: value}]
      config: |
        #!/bin/sh
        set -eu
        printf '%s' "$value" > "$dir/$deploy_resource_name.value"
        echo "$deploy_resource_name $deploy_action" >> "$dir/order.log"
  db_deploy:
    type: OS::Heat::SoftwareDeployment
    properties: {config: {get_resource: db_config}, server: s1, input_values: {dir: {get_param: dir}}}
  web:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: reader_config}
      server: s2
      input_values: {dir: {get_param: dir}, value: {get_attr: [db_deploy, port]}}
  sizer:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: reader_config}
      server: s2
      input_values: {dir: {get_param: dir}, value: {get_attr: [db_deploy, flavor]}}
  linker:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: reader_config}
      server: s2
      input_values:
        dir: {get_param: dir}
        value: {list_join: ['', ['http://db:', {get_attr: [db_deploy, port]}]]}
"#;

#[tokio::test]
async fn a_converge_follows_only_outputs_that_changed_and_leaves_inputs_made_by_expressions_to_an_update()
 {
    let (env, _agents) = cluster(&["s1", "s2"]).await;
    let dir = env.path("visible");
    std::fs::create_dir_all(&dir).expect("dir");
    let t = env.path("t.yaml");
    std::fs::write(&t, VISIBLE).expect("template");
    let t = t.display().to_string();
    let dir_param = format!("dir={}", dir.display());
    let run = create_stack(&env, "vis", &t, &[&dir_param]).await;
    assert_eq!(run.code, 0, "{run}");
    let value = |unit: &str| {
        std::fs::read_to_string(dir.join(format!("{unit}.value"))).expect("value file")
    };
    assert_eq!(value("web"), "8001");
    assert_eq!(value("sizer"), "small");
    assert_eq!(value("linker"), "http://db:8001");

    // The database drifts; its converge gives it a new port and the same flavor. web
    // reads the port: re-run with it. sizer reads the flavor, which did not change: not
    // run. linker's input is an expression of the port: reported, left to an update.
    std::fs::remove_file(dir.join("db.port")).expect("drift");
    std::fs::write(dir.join("order.log"), "").expect("clear the log");
    let run = flue(&env, &["stack", "converge", "vis"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("converging db_deploy\n"), "{run}");
    assert!(
        run.stdout
            .contains("inputs changed: value (db_deploy.port)\n"),
        "{run}"
    );
    assert!(
        run.stdout.contains(
            "inputs changed: value (db_deploy.port): only `flue stack update` makes it again"
        ),
        "{run}"
    );
    assert_eq!(
        lines(&dir.join("order.log")),
        ["db_deploy CREATE", "web UPDATE"]
    );
    assert_eq!(value("web"), "8002");
    assert_eq!(value("linker"), "http://db:8001", "not made again");

    // The check says which unit only an update brings up to date; a converge cannot.
    let run = flue(&env, &["stack", "check", "vis", "--json"]).await;
    assert_eq!(run.code, 1, "{run}");
    let report: Value = serde_json::from_str(&run.stdout).expect("json");
    let result = |unit: &str| {
        report
            .as_array()
            .expect("array")
            .iter()
            .find(|r| r["unit"] == unit)
            .unwrap_or_else(|| panic!("{unit} in {report}"))["result"]
            .clone()
    };
    assert_eq!(result("db_deploy"), "in_place");
    assert_eq!(result("web"), "not_checked", "{report}");
    assert_eq!(result("sizer"), "not_checked", "{report}");
    assert_eq!(result("linker"), "needs_update", "{report}");
    let run = flue(&env, &["stack", "converge", "vis"]).await;
    assert!(run.stdout.contains("nothing to converge"), "{run}");

    // An update with the same template makes linker's input again, and runs only it.
    std::fs::write(dir.join("order.log"), "").expect("clear the log");
    let run = flue(
        &env,
        &["stack", "update", "vis", "-t", &t, "-P", &dir_param],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(lines(&dir.join("order.log")), ["linker UPDATE"]);
    assert_eq!(value("linker"), "http://db:8002");
    let run = flue(&env, &["stack", "check", "vis"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("nothing drifted"), "{run}");
}
