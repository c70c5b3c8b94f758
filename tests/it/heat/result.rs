//! A hook's answer judged as Heat judges it: an error output present fails even empty; a
//! silent hook that exits 0 succeeds; a JSON answer counts whatever the exit status.

use flue_proto::DeploymentStatus;
use flue_tests::{Flue, write_executable};
use serde_json::json;

use super::{config, run, stock_hooks};

#[tokio::test]
async fn an_error_output_that_is_present_but_empty_fails_the_deployment() {
    let flue = Flue::start().await;
    let hooks = stock_hooks(&flue, &["script"]);
    flue.register("stock").await;
    flue.register("builtin").await;
    let _stock = flue.agent("stock", std::slice::from_ref(&hooks)).await;
    let _builtin = flue.agent("builtin", &[]).await;
    // Writes the error output only when asked: an empty file.
    config(
        &flue,
        json!({
            "id": "maybe", "group": "script",
            "config": "#!/bin/sh\necho working\n[ \"$fail\" = yes ] && : > \"$heat_outputs_path.errors\"\nexit 0\n",
            "inputs": [{"name": "fail"}],
            "outputs": [{"name": "errors", "error_output": true}],
        }),
    )
    .await;

    for server in ["stock", "builtin"] {
        let failed = run(&flue, "maybe", server, json!({"fail": "yes"})).await;
        assert_eq!(
            failed.status,
            DeploymentStatus::Failed,
            "{server}: {failed:?}"
        );
        assert_eq!(failed.deploy_status_code, Some(0), "{server}");
        assert_eq!(
            failed.status_reason.as_deref(),
            Some("error output \"errors\" present (empty)"),
            "{server}"
        );
        assert_eq!(failed.outputs.get("errors"), Some(&json!("")), "{server}");

        let fine = run(&flue, "maybe", server, json!({"fail": "no"})).await;
        assert_eq!(
            fine.status,
            DeploymentStatus::Complete,
            "{server}: {fine:?}"
        );
        assert!(!fine.outputs.contains_key("errors"), "{server}");
    }
}

#[tokio::test]
async fn a_hook_that_prints_nothing_and_exits_zero_completes() {
    let flue = Flue::start().await;
    let hooks = flue.path("hooks");
    std::fs::create_dir_all(&hooks).expect("hook dir");
    write_executable(
        &hooks.join("quiet"),
        "#!/bin/sh\ncat > /dev/null\necho 'applied, nothing to say' >&2\n",
    );
    flue.register("s1").await;
    let _agent = flue.agent("s1", std::slice::from_ref(&hooks)).await;
    config(&flue, json!({"id": "quiet", "group": "quiet"})).await;

    let done = run(&flue, "quiet", "s1", json!({})).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.status_reason, None);
    assert_eq!(done.deploy_stdout, "");
    assert_eq!(done.deploy_stderr, "applied, nothing to say\n");
    // 55-heat-config signals `{}` for it: no status code.
    assert_eq!(done.deploy_status_code, None);
}

#[tokio::test]
async fn a_hook_that_exits_nonzero_after_printing_its_json_is_judged_by_that_json() {
    let flue = Flue::start().await;
    let hooks = flue.path("hooks");
    std::fs::create_dir_all(&hooks).expect("hook dir");
    // Answers what its config says, then exits 1 anyway.
    write_executable(
        &hooks.join("answers"),
        &format!(
            "#!/bin/sh\n'{}' -c 'import json, sys; print(json.dumps(json.load(sys.stdin)[\"config\"]))'\nexit 1\n",
            super::python().display()
        ),
    );
    flue.register("s1").await;
    let _agent = flue.agent("s1", std::slice::from_ref(&hooks)).await;
    let outputs = json!([{"name": "result"}]);
    config(
        &flue,
        json!({"id": "ok", "group": "answers", "outputs": outputs,
               "config": {"deploy_stdout": "done", "deploy_status_code": 0, "result": "r1"}}),
    )
    .await;
    config(
        &flue,
        json!({"id": "bad", "group": "answers", "outputs": outputs,
               "config": {"deploy_stderr": "half done", "deploy_status_code": 4, "result": "r2"}}),
    )
    .await;
    config(
        &flue,
        json!({"id": "mute", "group": "answers", "outputs": outputs,
               "config": {"result": "r3"}}),
    )
    .await;

    // Its status code says 0: COMPLETE, as 55-heat-config signals the JSON.
    let ok = run(&flue, "ok", "s1", json!({})).await;
    assert_eq!(ok.status, DeploymentStatus::Complete, "{ok:?}");
    assert_eq!(ok.deploy_stdout, "done");
    assert_eq!(ok.outputs.get("result"), Some(&json!("r1")));
    // Its status code says 4: FAILED with its streams and outputs.
    let bad = run(&flue, "bad", "s1", json!({})).await;
    assert_eq!(bad.status, DeploymentStatus::Failed, "{bad:?}");
    assert_eq!(bad.deploy_status_code, Some(4));
    assert_eq!(bad.deploy_stderr, "half done");
    assert_eq!(bad.outputs.get("result"), Some(&json!("r2")));
    // No status code in the JSON: the exit status decides (Heat would lose it).
    let mute = run(&flue, "mute", "s1", json!({})).await;
    assert_eq!(mute.status, DeploymentStatus::Failed, "{mute:?}");
    assert_eq!(mute.deploy_status_code, Some(1));
    assert_eq!(mute.outputs.get("result"), Some(&json!("r3")));
}

#[tokio::test]
async fn a_component_runs_the_config_for_its_action_and_completes_an_action_it_has_none_for() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let _agent = flue.agent("s1", &[]).await;
    config(
        &flue,
        json!({
            "id": "comp", "group": "component",
            "config": {"configs": [
                {"actions": ["CREATE", "UPDATE"], "tool": "script",
                 "config": "#!/bin/sh\necho \"up $deploy_action\"\nprintf on > \"$heat_outputs_path.state\"\n"}
            ]},
            "outputs": [{"name": "state"}],
        }),
    )
    .await;
    let deploy = async |action: &str| {
        let created = flue
            .client()
            .create_deployment(&flue_proto::CreateDeployment {
                action: flue_proto::Action::new(action).expect("action"),
                ..flue_proto::CreateDeployment::new(
                    "comp".parse().expect("id"),
                    "s1".parse().expect("id"),
                )
            })
            .await
            .expect("deploy");
        flue.finished(&created.id).await
    };

    let created = deploy("CREATE").await;
    assert_eq!(created.status, DeploymentStatus::Complete, "{created:?}");
    assert_eq!(created.deploy_stdout, "up CREATE\n");
    assert_eq!(created.outputs.get("state"), Some(&json!("on")));
    // No config lists SUSPEND: Heat's engine sends nothing and the deployment completes.
    let suspended = deploy("SUSPEND").await;
    assert_eq!(
        suspended.status,
        DeploymentStatus::Complete,
        "{suspended:?}"
    );
    assert_eq!(suspended.deploy_stdout, "");
    assert!(suspended.outputs.is_empty(), "nothing ran: {suspended:?}");
}
