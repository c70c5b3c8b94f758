//! A failed deployment stops its dependents and fails the stack; an interrupted driver
//! is resumed by running the same command again, without re-running anything.

use flue_proto::OpStatus;

use super::{
    cluster, create_stack, flue, flue_in_background, kill_driver_once, lines, put_data, ran, stack,
};

const TEMPLATE: &str = r#"heat_template_version: 2018-08-31
parameters:
  record: {type: string}
  broken: {type: string, default: "yes"}
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: record}, {name: broken}]
      outputs: [{name: out}]
      config: |
        #!/bin/sh
        echo "$deploy_action $deploy_resource_name" >> "$record"
        if [ "$deploy_resource_name" = a ] && [ "$broken" = yes ]; then
          echo "disk full on /var/lib/app" >&2
          exit 3
        fi
        printf done > "$heat_outputs_path.out"
  a:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: cfg}
      server: s1
      input_values: {record: {get_param: record}, broken: {get_param: broken}}
  b:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: cfg}
      server: s2
      input_values: {record: {get_param: record}, broken: {get_attr: [a, out]}}
  c:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: cfg}
      server: s2
      input_values: {record: {get_param: record}}
  e:
    type: OS::Heat::SoftwareDeployment
    depends_on: b
    properties:
      config: {get_resource: cfg}
      server: s2
      input_values: {record: {get_param: record}}
"#;

#[tokio::test]
async fn a_failure_stops_dependents_independent_branches_finish_and_a_retry_completes() {
    let (env, _agents) = cluster(&["s1", "s2"]).await;
    let record = env.path("record.log");
    let t = env.path("t.yaml");
    std::fs::write(&t, TEMPLATE).expect("template");
    let t = t.display().to_string();
    let p = format!("record={}", record.display());

    let run = flue(&env, &["stack", "create", "f", "-t", &t, "-P", &p]).await;
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stdout.contains("stack f: CREATE_FAILED"), "{run}");
    assert!(
        run.stdout.contains("b ") && run.stdout.contains("not run: depends on a, which failed"),
        "{run}"
    );
    let s = stack(&env, "f").await;
    assert_eq!(s.status.status, OpStatus::Failed);
    let reason = s.status.reason.clone().expect("reason");
    assert!(
        reason.starts_with("a (CREATE on server s1) failed"),
        "{reason}"
    );
    assert!(reason.contains("disk full on /var/lib/app"), "{reason}");
    let mut done = lines(&record);
    done.sort();
    assert_eq!(
        done,
        ["CREATE a", "CREATE c"],
        "b and e (after b) must not run"
    );
    assert!(
        run.stdout.contains("not run: depends on b, which failed"),
        "{run}"
    );
    assert_eq!(s.state.units["c"].status, OpStatus::Complete);

    // Fixed: the retry runs a and then b; c completed already and is not re-run.
    let run = flue(
        &env,
        &[
            "stack",
            "create",
            "f",
            "-t",
            &t,
            "-P",
            &p,
            "-P",
            "broken=no",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    let after: Vec<String> = lines(&record)[2..].to_vec();
    assert_eq!(after, ["CREATE a", "CREATE b", "CREATE e"], "{run}");
    assert_eq!(
        ran(&env, "s2")
            .await
            .iter()
            .filter(|(r, _)| r == "c")
            .count(),
        1
    );
}

#[tokio::test]
async fn a_killed_driver_is_resumed_and_nothing_runs_twice() {
    let (env, _agents) = cluster(&["s1", "s2"]).await;
    let record = env.path("record.log");
    let t = env.path("t.yaml");
    // b blocks until the test puts the data key `go`; a before it, c after it.
    std::fs::write(
        &t,
        r#"heat_template_version: 2018-08-31
parameters:
  record: {type: string}
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: record}]
      config: |
        #!/bin/sh
        set -eu
        echo "start $deploy_resource_name" >> "$record"
        if [ "$deploy_resource_name" = b ]; then flue-agent data get go --wait 120s; fi
        echo "end $deploy_resource_name" >> "$record"
  a: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: cfg}, server: s1, input_values: {record: {get_param: record}}}}
  b: {type: OS::Heat::SoftwareDeployment, depends_on: a, properties: {config: {get_resource: cfg}, server: s2, input_values: {record: {get_param: record}}}}
  c: {type: OS::Heat::SoftwareDeployment, depends_on: b, properties: {config: {get_resource: cfg}, server: s1, input_values: {record: {get_param: record}}}}
"#,
    )
    .expect("template");
    let t = t.display().to_string();
    let p = format!("record={}", record.display());
    kill_driver_once(
        &env,
        &["stack", "create", "k", "-t", &t, "-P", &p],
        &record,
        "start b",
    )
    .await;
    let s = stack(&env, "k").await;
    assert_eq!(s.status.to_string(), "CREATE_IN_PROGRESS");

    // Another operation is refused while this one is unfinished.
    let run = flue(&env, &["stack", "delete", "k"]).await;
    assert_eq!(run.code, 2, "{run}");
    assert!(
        run.stderr
            .contains("run `flue stack create` again to resume it"),
        "{run}"
    );
    let other = format!("record={}.other", record.display());
    let run = flue(&env, &["stack", "create", "k", "-t", &t, "-P", &other]).await;
    assert_eq!(run.code, 2, "{run}");
    assert!(
        run.stderr.contains("another template or other parameters"),
        "{run}"
    );

    let resumed = flue_in_background(&env, &["stack", "create", "k", "-t", &t, "-P", &p]);
    // Release b: the agent finishes it whether or not the resumed driver is already
    // waiting for it; either way the driver must adopt that deployment, not start another.
    put_data(&env, "k", "go", "now").await;
    let out = resumed.await.expect("join");
    let stdout = &out.stdout;
    assert_eq!(out.code, 0, "{out}");
    assert!(
        stdout.contains("resuming the interrupted CREATE"),
        "{stdout}"
    );
    assert!(
        stdout.contains("already COMPLETE before the interruption"),
        "{stdout}"
    );
    assert_eq!(
        lines(&record),
        ["start a", "end a", "start b", "end b", "start c", "end c"],
        "{stdout}"
    );
    let s = stack(&env, "k").await;
    assert_eq!(s.status.to_string(), "CREATE_COMPLETE");
}

#[tokio::test]
async fn force_takes_a_stack_over_from_a_dead_driver() {
    let (env, _agents) = cluster(&["s1"]).await;
    let record = env.path("record.log");
    let t = env.path("t.yaml");
    std::fs::write(
        &t,
        r#"heat_template_version: 2018-08-31
parameters:
  record: {type: string}
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: record}]
      config: |
        #!/bin/sh
        set -eu
        echo "start $deploy_resource_name" >> "$record"
        flue-agent data get go --wait 120s
      hooks:
        DELETE: |
          #!/bin/sh
          echo "DELETE $deploy_resource_name" >> "$record"
  a: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: cfg}, server: s1, input_values: {record: {get_param: record}}}}
"#,
    )
    .expect("template");
    let t = t.display().to_string();
    let p = format!("record={}", record.display());
    kill_driver_once(
        &env,
        &["stack", "create", "f", "-t", &t, "-P", &p],
        &record,
        "start a",
    )
    .await;
    // --force does not turn an unfinished create into a resume.
    let run = flue(&env, &["stack", "resume", "f", "--force"]).await;
    assert_eq!(run.code, 2, "{run}");
    assert!(
        run.stderr.contains("--force cannot turn it into a RESUME"),
        "{run}"
    );

    // The delete queues its DELETE behind the CREATE still running on s1.
    let deleting = flue_in_background(&env, &["stack", "delete", "f", "--force"]);
    put_data(&env, "f", "go", "now").await;
    let out = deleting.await.expect("join");
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(lines(&record), ["start a", "DELETE a"]);
    let list = flue(&env, &["stack", "list"]).await;
    assert_eq!(list.stdout, "no stacks\n", "{list}");
}

/// `--force` starts a new operation over a dead one; what the dead one started is
/// waited for and counted as done, not run again.
#[tokio::test]
async fn a_forced_update_over_a_dead_create_runs_nothing_twice() {
    let (env, _agents) = cluster(&["s1"]).await;
    let record = env.path("record.log");
    let t = env.path("t.yaml");
    std::fs::write(
        &t,
        r#"heat_template_version: 2018-08-31
parameters:
  record: {type: string}
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: record}]
      config: |
        #!/bin/sh
        set -eu
        echo "start $deploy_action $deploy_resource_name" >> "$record"
        flue-agent data get go --wait 120s
  a: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: cfg}, server: s1, input_values: {record: {get_param: record}}}}
"#,
    )
    .expect("template");
    let t = t.display().to_string();
    let p = format!("record={}", record.display());
    kill_driver_once(
        &env,
        &["stack", "create", "u", "-t", &t, "-P", &p],
        &record,
        "start CREATE a",
    )
    .await;
    put_data(&env, "u", "go", "now").await;
    let run = flue(&env, &["stack", "update", "u", "-t", &t, "--force"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("unchanged, not run"), "{run}");
    assert_eq!(lines(&record), ["start CREATE a"]);
    assert_eq!(stack(&env, "u").await.status.to_string(), "UPDATE_COMPLETE");
}

/// A unit the gateway refuses (here: a timeout over its 7-day limit) fails on its own;
/// the rest of the stack goes on and the stack ends FAILED, not stuck.
#[tokio::test]
async fn a_deployment_the_gateway_refuses_fails_its_unit_only() {
    let (env, _agents) = cluster(&["s1"]).await;
    let t = env.path("t.yaml");
    std::fs::write(
        &t,
        r#"heat_template_version: 2018-08-31
resources:
  cfg: {type: OS::Heat::SoftwareConfig, properties: {group: script, config: "echo ok"}}
  slow: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: cfg}, server: s1, timeout: 99999999}}
  fine: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: cfg}, server: s1}}
"#,
    )
    .expect("template");
    let run = flue(
        &env,
        &["stack", "create", "r", "-t", &t.display().to_string()],
    )
    .await;
    assert_eq!(run.code, 1, "{run}");
    let s = stack(&env, "r").await;
    assert_eq!(s.status.to_string(), "CREATE_FAILED");
    let reason = s.status.reason.expect("reason");
    assert!(
        reason.contains("slow: the gateway refused its deployment"),
        "{reason}"
    );
    assert!(reason.contains("timeout_secs"), "{reason}");
    assert_eq!(s.state.units["fine"].status, OpStatus::Complete);
    assert_eq!(s.state.units["slow"].status, OpStatus::Failed);
}

/// A rolling group stops at a failed batch, as Heat does: later members do not run.
#[tokio::test]
async fn a_failed_batch_stops_the_rest_of_its_group() {
    let (env, _agents) = cluster(&["m1", "m2", "m3"]).await;
    let record = env.path("record.log");
    let t = env.path("g.yaml");
    std::fs::write(
        &t,
        r#"heat_template_version: 2018-08-31
parameters:
  record: {type: string}
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: record}]
      config: |
        #!/bin/sh
        echo "$deploy_resource_name" >> "$record"
        test "$deploy_resource_name" != b
  grp:
    type: OS::Heat::SoftwareDeploymentGroup
    update_policy: {batch_create: {max_batch_size: 1}}
    properties:
      config: {get_resource: cfg}
      servers: {a: m1, b: m2, c: m3}
      input_values: {record: {get_param: record}}
"#,
    )
    .expect("template");
    let p = format!("record={}", record.display());
    let run = create_stack(&env, "g", &t.display().to_string(), &[&p]).await;
    assert_eq!(run.code, 1, "{run}");
    assert_eq!(lines(&record), ["a", "b"]);
    assert!(
        run.stdout.contains("not run: batch 2 of grp failed"),
        "{run}"
    );
}
