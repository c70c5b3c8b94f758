//! A server rebuilt under the same id (its agent back with a new, empty ledger) is
//! reported as `server.rebuilt`; a stack with the `converge: auto` policy re-applies its
//! units there by itself, dependencies first, saying why, and one with the default policy
//! does not.

use flue_proto::EventType;
use flue_tests::{EventTap, Flue, WAIT};

use super::{deployments, lines};

const TEMPLATE: &str = r#"heat_template_version: 2018-08-31
parameters:
  dir: {type: string}
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: dir}]
      config: |
        #!/bin/sh
        set -eu
        echo "$deploy_action $deploy_resource_name on $deploy_server_id" >> "$dir/order.log"
  base: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: cfg}, server: s1, input_values: {dir: {get_param: dir}}}}
  app: {type: OS::Heat::SoftwareDeployment, depends_on: base, properties: {config: {get_resource: cfg}, server: s1, input_values: {dir: {get_param: dir}}}}
  other: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: cfg}, server: s2, input_values: {dir: {get_param: dir}}}}
"#;

#[tokio::test]
async fn a_rebuilt_server_is_reported_and_an_auto_stack_reapplies_its_units_there() {
    let env = Flue::start().await;
    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    env.register("s1").await;
    env.register("s2").await;
    let mut s1 = env.agent("s1", &[]).await;
    let _s2 = env.agent("s2", &[]).await;
    let t = env.path("t.yaml");
    std::fs::write(&t, TEMPLATE).expect("template");
    let t = t.display().to_string();
    let (auto_dir, manual_dir) = (env.path("auto"), env.path("manual"));
    for (name, dir, policy) in [
        ("auto", &auto_dir, "auto"),
        ("manual", &manual_dir, "manual"),
    ] {
        std::fs::create_dir_all(dir).expect("dir");
        let p = format!("dir={}", dir.display());
        let run = super::flue(
            &env,
            &[
                "stack",
                "create",
                name,
                "-t",
                &t,
                "-P",
                &p,
                "--converge",
                policy,
            ],
        )
        .await;
        assert_eq!(run.code, 0, "{run}");
    }
    let before = deployments(&env, "s2").await.len();

    // A restart on the same ledger is no rebuild.
    s1.terminate().await;
    let mut s1 = env.agent("s1", &[]).await;
    // The server rebuilt: the same credentials, a fresh state dir (an empty ledger).
    s1.terminate().await;
    std::fs::write(auto_dir.join("order.log"), "").expect("clear");
    std::fs::write(manual_dir.join("order.log"), "").expect("clear");
    let _s1 = env.agent_in("s1", "agent-s1-rebuilt", &[], &[]).await;
    let rebuilt = tap
        .wait_for("server.rebuilt", WAIT, |e| e.ty == EventType::ServerRebuilt)
        .await;
    assert_eq!(rebuilt.subject, "servers/s1");

    // The auto stack converges: base then app on s1; other (on s2) is left alone.
    tap.wait_for("the auto stack's converge to complete", WAIT, |e| {
        e.ty == EventType::StackOperationCompleted
            && e.stack.as_ref().is_some_and(|s| s.as_str() == "auto")
            && e.data["status"] == "CONVERGE_COMPLETE"
    })
    .await;
    assert_eq!(
        lines(&auto_dir.join("order.log")),
        ["CREATE base on s1", "CREATE app on s1"]
    );
    assert_eq!(
        deployments(&env, "s2").await.len(),
        before,
        "s2 ran something"
    );
    // The converge says why it ran: its record, `flue stack operations`; a converge
    // someone submits says nothing of the kind.
    let ops = env
        .admin_client()
        .list_operations_up_to(&"auto".parse().expect("id"), 10)
        .await
        .expect("operations");
    let converge = ops
        .iter()
        .find(|op| op.operation.to_string() == "converge")
        .unwrap_or_else(|| panic!("{ops:?}"));
    let cause = converge.cause.as_deref().unwrap_or_default();
    assert!(
        cause.contains("server s1 was rebuilt") && cause.contains("converge: auto"),
        "{converge:?}"
    );
    assert!(cause.contains("base") && cause.contains("app"), "{cause}");
    assert!(
        ops.iter()
            .all(|op| op.id == converge.id || op.cause.is_none()),
        "{ops:?}"
    );
    let listed = super::flue(&env, &["stack", "operations", "auto"]).await;
    assert_eq!(listed.code, 0, "{listed}");
    assert!(listed.stdout.contains(cause), "{listed}");
    // The manual stack ran nothing and still says what it said.
    assert!(lines(&manual_dir.join("order.log")).is_empty());
    let manual = super::stack(&env, "manual").await;
    assert_eq!(manual.status.to_string(), "CREATE_COMPLETE");
    let rebuilds = tap
        .events()
        .iter()
        .filter(|e| e.ty == EventType::ServerRebuilt)
        .count();
    assert_eq!(rebuilds, 1, "a restart on the same ledger is no rebuild");
}
