//! Nothing is lost or run twice when the broker or the gateway dies mid-run.

use std::collections::BTreeSet;

use flue_proto::DeploymentStatus;
use flue_tests::{Flue, WAIT, file_lines, wait_until};

#[tokio::test]
async fn broker_killed_and_restarted_with_200_in_flight_loses_and_repeats_nothing() {
    let flue = Flue::start().await;
    let counter = flue.path("counter");
    // Each run appends its tag; the short pause keeps many deployments in flight.
    let script = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$tag\" >> '{}'\nsleep 0.03\n",
        counter.display()
    );
    flue.script_config("count", &script, &["tag"], &[]).await;
    let servers = ["s0", "s1", "s2", "s3"];
    let mut agents = Vec::new();
    for s in servers {
        flue.register(s).await;
        agents.push(flue.agent(s, &[]).await);
    }
    let mut ids = Vec::new();
    for i in 0..200 {
        let server = servers[i % servers.len()];
        ids.push(
            flue.deploy("count", server, &[("tag", &format!("t{i}"))])
                .await
                .id,
        );
    }

    wait_until("some hooks to have run", WAIT, || {
        (file_lines(&counter).len() >= 30).then_some(())
    })
    .await;
    let mut flue = flue;
    flue.nats.restart().await;

    for id in &ids {
        let d = flue.finished(id).await;
        assert_eq!(d.status, DeploymentStatus::Complete, "{d:?}");
    }
    let runs = file_lines(&counter);
    let distinct: BTreeSet<&String> = runs.iter().collect();
    assert_eq!(distinct.len(), 200, "every deployment ran");
    assert_eq!(runs.len(), 200, "no deployment ran twice");
}

#[tokio::test]
async fn gateway_killed_mid_run_loses_nothing() {
    let mut flue = Flue::start().await;
    flue.register("s1").await;
    let counter = flue.path("counter");
    let script = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$tag\" >> '{}'\nprintf '%s' \"done-$tag\" > \"$heat_outputs_path.r\"\n",
        counter.display()
    );
    flue.script_config("c", &script, &["tag"], &["r"]).await;
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(
            flue.deploy("c", "s1", &[("tag", &format!("t{i}"))])
                .await
                .id,
        );
    }

    // The gateway dies with all 20 queued; the agent answers while it is gone.
    flue.gateway.kill().await;
    // The credentials kept at registration: the gateway is down.
    let agent = flue.spawn_agent_as_is("s1", "agent-s1", &[], &[]);
    agent.ready().await;
    wait_until("all hooks to have run", WAIT, || {
        (file_lines(&counter).len() == 20).then_some(())
    })
    .await;
    flue.gateway.restart().await;

    for (i, id) in ids.iter().enumerate() {
        let d = flue.finished(id).await;
        assert_eq!(d.status, DeploymentStatus::Complete, "{d:?}");
        assert_eq!(d.outputs["r"], serde_json::json!(format!("done-t{i}")));
    }
    assert_eq!(file_lines(&counter).len(), 20);
}
