//! Suspend, resume, ad-hoc actions and delete, each through the config's own hooks.

use serde_json::json;

use super::{cluster, create_stack, deployments, example, flue, lines};

#[tokio::test]
async fn lifecycle_hooks_and_adhoc_actions_run_as_recorded_deployments() {
    let (env, _agents) = cluster(&["db", "web"]).await;
    let data = env.path("data");
    let data_param = format!("data_dir={}", data.display());
    let template = example("two-tier");
    let run = create_stack(&env, "shop", &template, &[&data_param]).await;
    assert_eq!(run.code, 0, "{run}");
    let log = data.join("lifecycle.log");

    // SUSPEND: only db's config has a suspend hook, so only db runs it.
    let run = flue(&env, &["stack", "suspend", "shop"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("SUSPEND_COMPLETE"), "{run}");
    assert!(data.join("db/suspended").exists());
    let run = flue(&env, &["stack", "resume", "shop"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(!data.join("db/suspended").exists());
    assert_eq!(lines(&log), ["SUSPEND db", "RESUME db"]);

    // An ad-hoc action: its own deployment, with its own result and outputs.
    let run = flue(&env, &["stack", "action", "shop", "db_deploy", "backup"]).await;
    assert_eq!(run.code, 0, "{run}");
    let backup = deployments(&env, "db")
        .await
        .into_iter()
        .find(|d| d.action.as_str() == "backup")
        .expect("a backup deployment");
    assert_eq!(backup.status.to_string(), "COMPLETE");
    let path = backup.outputs["backup_path"].as_str().expect("backup_path");
    assert!(std::path::Path::new(path).join("postgresql.conf").exists());
    assert_eq!(
        backup.input_values["data_dir"],
        json!(data.display().to_string())
    );
    let show = flue(&env, &["stack", "show", "shop"]).await;
    assert!(
        show.stdout.contains("backup on db_deploy: COMPLETE"),
        "{show}"
    );

    // An action the config does not declare is refused before anything runs.
    let run = flue(&env, &["stack", "action", "shop", "db_deploy", "restore"]).await;
    assert_eq!(run.code, 2, "{run}");
    assert!(
        run.stderr.contains("does not declare action \"restore\""),
        "{run}"
    );
    assert!(run.stderr.contains("backup"), "{run}");

    // DELETE in reverse dependency order: web (which used db's outputs) first.
    let run = flue(&env, &["stack", "delete", "shop"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(
        lines(&log),
        [
            "SUSPEND db",
            "RESUME db",
            "backup db",
            "DELETE web",
            "DELETE db"
        ]
    );
    assert!(!data.join("db").exists() && !data.join("web").exists());
    let show = flue(&env, &["stack", "show", "shop"]).await;
    assert_eq!(show.code, 2, "{show}");
    assert!(show.stderr.contains("not_found"), "{show}");
    let list = flue(&env, &["stack", "list"]).await;
    assert!(!list.stdout.contains("shop"), "{list}");
}

/// One config, one body per lifecycle action; two units where `second` depends on
/// `first`: suspend runs dependents first, resume and create dependencies first,
/// delete in reverse.
#[tokio::test]
async fn a_config_can_carry_a_hook_per_lifecycle_action() {
    let (env, _agents) = cluster(&["box1", "box2"]).await;
    let record = env.path("record.log");
    let template = env.path("all.yaml");
    let hook = |word: &str| {
        format!(
            "|\n          #!/bin/sh\n          echo \"{word} $deploy_action $deploy_resource_name\" >> \"$record\""
        )
    };
    std::fs::write(
        &template,
        format!(
            r#"heat_template_version: 2018-08-31
parameters:
  record: {{type: string}}
  version: {{type: string, default: "1"}}
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{{name: record}}, {{name: version}}]
      config: {create}
      hooks:
        UPDATE: {update}
        SUSPEND: {suspend}
        RESUME: {resume}
        DELETE: {delete}
  first:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {{get_resource: cfg}}
      server: box1
      input_values: {{record: {{get_param: record}}, version: {{get_param: version}}}}
  second:
    type: OS::Heat::SoftwareDeployment
    depends_on: first
    properties:
      config: {{get_resource: cfg}}
      server: box2
      input_values: {{record: {{get_param: record}}, version: {{get_param: version}}}}
"#,
            create = hook("create-hook"),
            update = hook("update-hook"),
            suspend = hook("suspend-hook"),
            resume = hook("resume-hook"),
            delete = hook("delete-hook"),
        ),
    )
    .expect("template");
    let t = template.display().to_string();
    let p = format!("record={}", record.display());
    for args in [
        vec!["stack", "create", "s", "-t", &t, "-P", &p],
        vec!["stack", "update", "s", "-t", &t, "-P", "version=2"],
        vec!["stack", "suspend", "s"],
    ] {
        let run = flue(&env, &args).await;
        assert_eq!(run.code, 0, "{args:?}: {run}");
    }
    // A suspended stack is resumed before anything else, and suspended only once.
    for (args, needle) in [
        (
            vec!["stack", "update", "s", "-t", &t, "-P", "version=3"],
            "is suspended",
        ),
        (vec!["stack", "suspend", "s"], "already suspended"),
    ] {
        let run = flue(&env, &args).await;
        assert_eq!(run.code, 2, "{args:?}: {run}");
        assert!(run.stderr.contains(needle), "{args:?}: {run}");
    }
    for args in [vec!["stack", "resume", "s"], vec!["stack", "delete", "s"]] {
        let run = flue(&env, &args).await;
        assert_eq!(run.code, 0, "{args:?}: {run}");
    }
    assert_eq!(
        lines(&record),
        [
            "create-hook CREATE first",
            "create-hook CREATE second",
            "update-hook UPDATE first",
            "update-hook UPDATE second",
            "suspend-hook SUSPEND second",
            "suspend-hook SUSPEND first",
            "resume-hook RESUME first",
            "resume-hook RESUME second",
            "delete-hook DELETE second",
            "delete-hook DELETE first",
        ]
    );
}
