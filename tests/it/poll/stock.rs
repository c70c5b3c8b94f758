//! One real poll cycle through the stock tools of a Heat image, end to end.

use std::time::Duration;

use flue_proto::poll::Metadata;
use flue_proto::{DeploymentStatus, EventType};
use flue_tests::{EventTap, Flue, PolledServer};
use serde_json::{Value, json};

use super::{anonymous, register_polling};

const EVENTS: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_server_polling_with_stock_os_collect_config_runs_its_deployment_and_signals_it_complete()
{
    let flue = Flue::start().await;
    let access = register_polling(&flue, "web1").await;
    assert!(
        access
            .os_collect_config
            .contains(&format!("metadata_url = {}", access.metadata_url)),
        "{}",
        access.os_collect_config
    );
    flue.script_config(
        "greet",
        "#!/bin/sh\n\
         echo \"hello $who from $deploy_server_id by $deploy_signal_transport\"\n\
         echo warn >&2\n\
         printf '%s' \"hi-$who\" > \"$heat_outputs_path.greeting\"\n",
        &["who"],
        &["greeting"],
    )
    .await;
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
    let d = flue.deploy("greet", "web1", &[("who", "world")]).await;
    assert_eq!(d.status, DeploymentStatus::Queued);

    let dir = tempfile::tempdir().expect("tempdir");
    let server = PolledServer::new(dir.path(), &access.metadata_url);
    let log = server.poll_once().await;

    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}\n{log}");
    assert_eq!(done.outputs.get("greeting"), Some(&json!("hi-world")));
    assert_eq!(
        done.deploy_stdout,
        "hello world from web1 by TEMP_URL_SIGNAL\n"
    );
    assert_eq!(done.deploy_stderr, "warn\n");
    assert_eq!(done.deploy_status_code, Some(0));
    // 55-heat-config keeps what it ran, and never runs that id again.
    let kept: Value = serde_json::from_str(
        &std::fs::read_to_string(server.deployed().join(format!("{}.json", d.id)))
            .expect("deployed/<id>.json"),
    )
    .expect("json");
    let input = |name: &str| {
        kept["inputs"]
            .as_array()
            .expect("inputs")
            .iter()
            .find(|i| i["name"] == name)
            .map(|i| i["value"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(input("deploy_signal_verb"), json!("PUT"));
    assert_eq!(input("deploy_action"), json!("CREATE"));
    let signal_url = input("deploy_signal_id");
    let signal_url = signal_url.as_str().expect("a signal URL");

    // The same path as an agent's answer: queued, delivered, completed, each once.
    for step in ["queued", "delivered", "completed"] {
        let id = format!("deployment:{}:{step}", d.id);
        tap.wait_for(&id, EVENTS, |e| e.id == id).await;
    }

    // A finished deployment leaves the metadata: the next cycle runs nothing.
    let metadata: Metadata = anonymous()
        .get(&access.metadata_url)
        .send()
        .await
        .expect("metadata")
        .json()
        .await
        .expect("metadata json");
    assert!(metadata.deployments.is_empty(), "{metadata:?}");

    // heat-config-notify sending the signal again (a replay): refused, nothing changes.
    let replay = anonymous()
        .put(signal_url)
        .json(&json!({"deploy_stdout": "again", "deploy_status_code": 1}))
        .send()
        .await
        .expect("replayed signal");
    assert_eq!(replay.status(), reqwest::StatusCode::CONFLICT);
    let body: Value = replay.json().await.expect("a JSON refusal");
    assert_eq!(body["error"]["code"], "conflict", "{body}");
    let after = flue
        .client()
        .get_deployment(&d.id)
        .await
        .expect("deployment");
    assert_eq!(after.deploy_stdout, done.deploy_stdout);
    assert_eq!(after.finished_at, done.finished_at);
    // Any event the replay made would be in the stream before its answer: one after it
    // bounds the wait.
    let sentinel = register_polling(&flue, "sentinel").await;
    drop(sentinel);
    tap.wait_for("the sentinel's registration", EVENTS, |e| {
        e.ty == EventType::ServerRegistered
            && e.server.as_ref().is_some_and(|s| s.as_str() == "sentinel")
    })
    .await;
    let ends = tap
        .events()
        .iter()
        .filter(|e| e.deployment.as_ref() == Some(&d.id))
        .filter(|e| {
            matches!(
                e.ty,
                EventType::DeploymentCompleted | EventType::DeploymentFailed
            )
        })
        .count();
    assert_eq!(ends, 1, "one end, whatever is signalled again");
}
