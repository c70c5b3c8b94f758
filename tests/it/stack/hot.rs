//! Heat templates as Heat users write them: conditions, constraints, environment
//! files, pseudo-parameters, and `flue stack validate`.

use super::{cluster, flue, lines, run_flue, stack};

const TEMPLATE: &str = r#"heat_template_version: rocky
parameters:
  record: {type: string}
  env:
    type: string
    default: dev
    constraints: [{allowed_values: [dev, prod], description: env must be dev or prod}]
  replicas: {type: number, default: 2, constraints: [{range: {min: 1, max: 5}}]}
  flavor: {type: string, default: m1.small, constraints: [{custom_constraint: nova.flavor}]}
conditions:
  is_prod: {equals: [{get_param: env}, prod]}
resources:
  cfg:
    type: My::Config
    properties:
      group: script
      inputs: [{name: record}, {name: mode}, {name: stack}]
      config: |
        #!/bin/sh
        echo "$deploy_action $deploy_resource_name $mode $stack" >> "$record"
      hooks:
        DELETE: |
          #!/bin/sh
          echo "DELETE $deploy_resource_name" >> "$record"
  base:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: cfg}
      server: s1
      input_values:
        record: {get_param: record}
        mode: {if: [is_prod, production, development]}
        stack: {get_param: OS::stack_name}
  monitor:
    type: OS::Heat::SoftwareDeployment
    condition: is_prod
    properties:
      config: {get_resource: cfg}
      server: s1
      input_values:
        record: {get_param: record}
        mode: {str_split: [",", "a,watch,b", 1]}
        stack: {list_join: ["-", {list_concat: [[x], [y]]}]}
outputs:
  monitored:
    condition: is_prod
    value: {get_attr: [monitor, deploy_status_code]}
"#;

const ENV: &str =
    "parameters:\n  env: dev\nresource_registry:\n  My::Config: OS::Heat::SoftwareConfig\n";

#[tokio::test]
async fn validate_checks_a_template_with_its_environment_without_a_gateway() {
    let dir = tempfile::tempdir().expect("temp dir");
    let t = dir.path().join("t.yaml");
    let e = dir.path().join("env.yaml");
    std::fs::write(&t, TEMPLATE).expect("template");
    std::fs::write(&e, ENV).expect("env");
    let (t, e) = (t.display().to_string(), e.display().to_string());
    // Nothing listens on this port: validate never asks the gateway.
    let nowhere = "http://127.0.0.1:9".to_owned();
    let args = |extra: &[&str]| {
        let mut a = vec![
            "stack",
            "validate",
            "-t",
            &t,
            "-e",
            &e,
            "-P",
            "record=/tmp/x",
        ];
        a.extend(extra);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };

    let run = run_flue(nowhere.clone(), None, args(&[])).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout
            .contains("valid (heat_template_version 2018-08-31)"),
        "{run}"
    );
    assert!(run.stdout.contains("  is_prod: false"), "{run}");
    assert!(
        run.stdout.contains(
            "monitor (OS::Heat::SoftwareDeployment): not created, condition is_prod is false"
        ),
        "{run}"
    );
    assert!(
        run.stdout
            .contains("base (OS::Heat::SoftwareDeployment): deploys cfg on server s1 with hook group script for CREATE, UPDATE"),
        "{run}"
    );
    assert!(
        run.stdout
            .contains("custom_constraint nova.flavor is not checked by Flue"),
        "{run}"
    );

    // -P wins over the environment's parameters.
    let run = run_flue(nowhere.clone(), None, args(&["-P", "env=prod"])).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("  is_prod: true"), "{run}");
    assert!(
        run.stdout
            .contains("monitor (OS::Heat::SoftwareDeployment): deploys"),
        "{run}"
    );

    // A broken constraint: exit 1, the parameter named, Heat's message.
    let run = run_flue(nowhere.clone(), None, args(&["-P", "replicas=9"])).await;
    assert_eq!(run.code, 1, "{run}");
    assert!(
        run.stderr
            .contains("parameters.replicas: 9 is out of range (min: 1, max: 5)"),
        "{run}"
    );
    // Without the environment, My::Config is not a type Flue knows.
    let run = run_flue(
        nowhere.clone(),
        None,
        ["stack", "validate", "-t", &t, "-P", "record=x"]
            .map(str::to_owned)
            .to_vec(),
    )
    .await;
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stderr.contains("resources.cfg.type"), "{run}");
    // A file that cannot be read is a usage error.
    let run = run_flue(
        nowhere,
        None,
        ["stack", "validate", "-t", "/nonexistent.yaml"]
            .map(str::to_owned)
            .to_vec(),
    )
    .await;
    assert_eq!(run.code, 2, "{run}");
}

#[tokio::test]
async fn validate_maps_heat_servers_and_asks_for_infrastructure_values_it_cannot_know() {
    let t = flue_tests::repo_root()
        .join("examples/heat/two-servers.yaml")
        .display()
        .to_string();
    let nowhere = "http://127.0.0.1:9".to_owned();
    let validate = |extra: &[&str]| {
        let mut a = vec!["stack", "validate", "-t", &t, "-P", "data_dir=/tmp/x"];
        a.extend(extra);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let run = run_flue(
        nowhere.clone(),
        None,
        validate(&["--server", "db_server=db1", "--server", "web_server=web1"]),
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout
            .contains("db_deployment (OS::Heat::SoftwareDeployment): deploys db_config on server db1 with hook group script"),
        "{run}"
    );
    assert!(
        run.stdout.contains(
            "web_deployment (OS::Heat::SoftwareDeployment): deploys web_config on server web1"
        ),
        "{run}"
    );
    // Each resource says what Flue does with it: servers mapped, what is ignored,
    // values made.
    assert!(
        run.stdout.contains(
            "db_server (OS::Nova::Server): mapped to registered server db1; flavor/image"
        ),
        "{run}"
    );
    assert!(
        run.stdout.contains(
            "db_password (OS::Heat::RandomString): a hidden value made once, kept by a deployment on server db1"
        ),
        "{run}"
    );
    // A map naming a resource the template does not have is refused, naming it.
    let run = run_flue(nowhere, None, validate(&["--server", "dbserver=db1"])).await;
    assert_eq!(run.code, 2, "{run}");
    assert!(
        run.stderr
            .contains("--server dbserver: the template has no resource \"dbserver\""),
        "{run}"
    );
}

#[tokio::test]
async fn conditions_and_constraints_decide_what_a_stack_runs() {
    let (env, _agents) = cluster(&["s1"]).await;
    let record = env.path("record.log");
    let p = format!("record={}", record.display());
    let t = env.path("t.yaml");
    let e = env.path("env.yaml");
    std::fs::write(&t, TEMPLATE).expect("template");
    std::fs::write(&e, ENV).expect("env");
    let (t, e) = (t.display().to_string(), e.display().to_string());

    // A value the constraint refuses: nothing is stored, nothing runs.
    let run = flue(
        &env,
        &[
            "stack", "create", "shop", "-t", &t, "-e", &e, "-P", &p, "-P", "env=test",
        ],
    )
    .await;
    assert_eq!(run.code, 2, "{run}");
    assert!(
        run.stderr
            .contains("parameters.env: env must be dev or prod"),
        "{run}"
    );
    assert!(env.client().list_stacks().await.expect("stacks").is_empty());
    assert!(lines(&record).is_empty());

    // dev (from the environment): monitor's condition is false, it does not run.
    let run = flue(
        &env,
        &["stack", "create", "shop", "-t", &t, "-e", &e, "-P", &p],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout
            .contains("note: parameters.flavor: custom_constraint nova.flavor"),
        "{run}"
    );
    assert_eq!(lines(&record), ["CREATE base development shop"]);
    let s = stack(&env, "shop").await;
    assert_eq!(s.state.units.keys().collect::<Vec<_>>(), ["base"]);
    assert!(s.state.outputs.is_empty(), "{:?}", s.state.outputs);

    // prod: monitor now exists and runs; base's `if` picks the other branch.
    let run = flue(
        &env,
        &[
            "stack", "update", "shop", "-t", &t, "-e", &e, "-P", "env=prod",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    let got = lines(&record);
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(
        got[1..].contains(&"UPDATE base production shop".to_owned()),
        "{got:?}"
    );
    assert!(
        got[1..].contains(&"CREATE monitor watch x-y".to_owned()),
        "{got:?}"
    );
    assert_eq!(stack(&env, "shop").await.state.outputs["monitored"], 0);

    // Back to dev: the condition turns false and monitor is deleted.
    let run = flue(
        &env,
        &[
            "stack", "update", "shop", "-t", &t, "-e", &e, "-P", "env=dev",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    let got = lines(&record);
    assert!(got[3..].contains(&"DELETE monitor".to_owned()), "{got:?}");
    assert!(
        got[3..].contains(&"UPDATE base development shop".to_owned()),
        "{got:?}"
    );
    let s = stack(&env, "shop").await;
    assert_eq!(s.state.units.keys().collect::<Vec<_>>(), ["base"]);
}
