//! The agent's ledger outlives the broker's state: a deployment id used again after the
//! broker lost its store is a new request, and its hook runs.

use flue_proto::{CreateDeployment, DeploymentStatus};
use flue_tests::{Flue, file_lines};
use serde_json::json;

/// A script that appends `$tag` to `counter`, so the test can count hook runs and see
/// which input each run got.
fn counting_script(counter: &std::path::Path) -> String {
    format!(
        "#!/bin/sh\nprintf '%s\\n' \"$tag\" >> '{}'\n",
        counter.display()
    )
}

/// Creates deployment `job-1` of config `c` on `s1` with input `tag`.
async fn deploy_job_1(flue: &Flue, tag: &str) -> flue_proto::Deployment {
    let create: CreateDeployment = serde_json::from_value(json!({
        "id": "job-1",
        "config_id": "c",
        "server_id": "s1",
        "input_values": {"tag": tag},
    }))
    .expect("create deployment body");
    flue.client()
        .create_deployment(&create)
        .await
        .expect("create deployment job-1")
}

#[tokio::test]
async fn reused_deployment_id_after_broker_state_loss_runs_the_new_request() {
    let mut flue = Flue::start().await;
    flue.register("s1").await;
    let counter = flue.path("counter");
    let script = counting_script(&counter);
    flue.script_config("c", &script, &["tag"], &[]).await;
    let mut agent = flue.agent("s1", &[]).await;

    let first = deploy_job_1(&flue, "first").await;
    let done = flue.finished(&first.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(file_lines(&counter), vec!["first"]);

    // The broker loses its store (streams, consumers, KV): the gateway no longer knows
    // job-1, while the agent's ledger still holds its result.
    let before = agent.logs().len();
    flue.nats.wipe_and_restart().await;
    flue.gateway.restart().await;
    // Registered anew, the server has new keys: its agent restarts (same state dir, so
    // the same ledger) with the credentials this registration handed out.
    flue.register("s1").await;
    assert!(agent.terminate().await.success());
    agent.restart().await;
    flue.script_config("c", &script, &["tag"], &[]).await;

    let second = deploy_job_1(&flue, "second").await;
    assert_eq!(second.id, first.id);
    let done = flue.finished(&second.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(
        file_lines(&counter),
        vec!["first", "second"],
        "the hook ran again, with the new request's input"
    );
    let answered_from_ledger = agent
        .logs()
        .lines()
        .iter()
        .skip(before)
        .any(|l| l.contains("answering from the ledger"));
    assert!(!answered_from_ledger, "the new request got the old result");
}
