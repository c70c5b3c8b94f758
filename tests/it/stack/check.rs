//! `flue stack check` and `flue stack converge`: each unit's `CHECK` hook runs with the inputs the unit last applied,
//! on its server, and reports drift per unit without changing anything.

use flue_proto::{Action, CreateDeployment};
use serde_json::Value;

use super::{cluster, create_stack, deployments, flue};

const TEMPLATE: &str = r#"heat_template_version: 2018-08-31
parameters:
  dir: {type: string}
  token: {type: string, hidden: true}
resources:
  checked:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: dir}, {name: sub}, {name: token}]
      config: |
        #!/bin/sh
        set -eu
        mkdir -p "$dir/$sub"
        echo "$token" > "$dir/$sub/marker"
        echo "$deploy_action $deploy_resource_name" >> "$dir/order.log"
      hooks:
        CHECK: |
          #!/bin/sh
          # In place when the marker holds the token it was applied with.
          if [ "$(cat "$dir/$sub/marker" 2>/dev/null)" = "$token" ]; then echo "marker in place"; exit 0; fi
          echo "marker missing or changed in $dir/$sub" >&2
          exit 4
  plain:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      config: |
        #!/bin/sh
        echo plain
  a: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: checked}, server: s1, input_values: {dir: {get_param: dir}, sub: a, token: {get_param: token}}}}
  b: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: plain}, server: s2}}
  c: {type: OS::Heat::SoftwareDeployment, depends_on: a, properties: {config: {get_resource: checked}, server: s2, input_values: {dir: {get_param: dir}, sub: c, token: {get_param: token}}}}
"#;

#[tokio::test]
async fn check_reports_drift_per_unit_changing_nothing_and_converge_reapplies_it_dependencies_first()
 {
    let (env, mut agents) = cluster(&["s1", "s2"]).await;
    let dir = env.path("a-dir");
    std::fs::create_dir_all(&dir).expect("dir");
    let t = env.path("t.yaml");
    std::fs::write(&t, TEMPLATE).expect("template");
    let dir_param = format!("dir={}", dir.display());
    let run = create_stack(
        &env,
        "chk",
        &t.display().to_string(),
        &[&dir_param, "token=s3cret-value"],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    let applied = |server: &str| {
        let server = server.to_owned();
        let env = &env;
        async move {
            deployments(env, &server)
                .await
                .iter()
                .filter(|d| d.action.as_str() != "CHECK")
                .count()
        }
    };
    let before = (applied("s1").await, applied("s2").await);

    // In place: a's CHECK hook passes (it got the hidden token); b has no CHECK hook.
    let run = flue(&env, &["stack", "check", "chk", "--json"]).await;
    assert_eq!(run.code, 0, "{run}");
    let report: Value = serde_json::from_str(&run.stdout).expect("json");
    assert_eq!(report[0]["unit"], "a", "{report}");
    assert_eq!(report[0]["result"], "in_place", "{report}");
    assert_eq!(report[1]["unit"], "b", "{report}");
    assert_eq!(report[1]["result"], "not_checked", "{report}");
    assert_eq!(report[2]["result"], "in_place", "{report}");

    // Drift: the marker changed behind Flue's back. The check says so, with the hook's
    // words, and puts nothing back.
    std::fs::write(dir.join("a/marker"), "tampered\n").expect("tamper");
    let run = flue(&env, &["stack", "check", "chk"]).await;
    assert_eq!(run.code, 1, "{run}");
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("a "))
        .unwrap_or_else(|| panic!("{run}"));
    assert!(line.contains("drifted"), "{run}");
    assert!(line.contains("marker missing or changed"), "{run}");
    assert!(run.stdout.contains("1 unit(s) drifted"), "{run}");
    assert_eq!(
        std::fs::read_to_string(dir.join("a/marker")).expect("marker"),
        "tampered\n",
        "the check changed the server"
    );
    assert_eq!(
        (applied("s1").await, applied("s2").await),
        before,
        "a check ran a lifecycle deployment"
    );
    let checks: Vec<_> = deployments(&env, "s1")
        .await
        .into_iter()
        .filter(|d| d.action.as_str() == "CHECK")
        .collect();
    assert_eq!(checks.len(), 2, "one recorded deployment per check");
    assert_eq!(checks[1].input_values["token"], "<hidden>");

    // A config without a CHECK hook is never run with the CHECK action.
    let b = deployments(&env, "s2").await.remove(0);
    let refused = env
        .client()
        .create_deployment(&CreateDeployment {
            action: Action::new("CHECK").expect("action"),
            ..CreateDeployment::new(b.config_id.clone(), b.server_id.clone())
        })
        .await
        .expect_err("no CHECK hook");
    assert!(
        refused.to_string().contains("has no CHECK hook"),
        "{refused}"
    );

    // Converge: a and c drifted (c's marker is gone too); both re-applied with what they
    // last applied (the hidden token too), a before c which depends on it; b untouched.
    std::fs::remove_file(dir.join("c/marker")).expect("remove c's marker");
    std::fs::write(dir.join("order.log"), "").expect("clear the log");
    let run = flue(&env, &["stack", "converge", "chk"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("converging a, c"), "{run}");
    assert_eq!(
        super::lines(&dir.join("order.log")),
        ["CREATE a", "CREATE c"]
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("a/marker")).expect("marker"),
        "s3cret-value\n"
    );
    assert_eq!(applied("s2").await, before.1 + 1, "only c ran again on s2");
    let show = super::stack(&env, "chk").await;
    assert_eq!(show.status.to_string(), "CONVERGE_COMPLETE");
    let run = flue(&env, &["stack", "check", "chk"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("nothing drifted"), "{run}");
    let run = flue(&env, &["stack", "converge", "chk"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("nothing to converge"), "{run}");

    // A server whose agent is gone: its unit is reported offline, not waited for.
    agents[1].terminate().await;
    let mut tap = flue_tests::EventTap::from_start(&env.nats.events_client().await).await;
    tap.wait_for("s2 offline", flue_tests::WAIT, |e| {
        e.ty == flue_proto::EventType::ServerOffline && e.subject.ends_with("s2")
    })
    .await;
    let run = flue(&env, &["stack", "check", "chk", "--json"]).await;
    assert_eq!(run.code, 1, "{run}");
    let report: Value = serde_json::from_str(&run.stdout).expect("json");
    assert_eq!(report[0]["result"], "in_place", "{report}");
    assert_eq!(report[2]["unit"], "c", "{report}");
    assert_eq!(report[2]["result"], "offline", "{report}");
}
