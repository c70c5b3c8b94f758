//! A server's request consumer under a name only the gateway can compute (issue 22): a
//! leaf node's link may give any request a `$JS.ACK.<stream>.<consumer>.…` reply, which
//! acks whatever that consumer has in flight; nobody can aim one at a consumer it cannot
//! name. A server starts on the older name (the one an agent of the previous release
//! computes) and moves to its sealed one once its agent, which reads that name from its
//! own user JWT, says in its heartbeats that it pulls it.

use std::time::Duration;

use async_nats::jetstream::{self, consumer::PullConsumer};
use flue_proto::{DeploymentStatus, ServerId, TenantId, subject};
use flue_tests::consumers::request_consumer;
use flue_tests::{Flue, WAIT, file_lines};
use futures_util::StreamExt as _;

fn ids() -> (TenantId, ServerId) {
    ("default".parse().expect("id"), "web1".parse().expect("id"))
}

/// Waits until server `web1`'s request consumer is no longer named `old`; its new name.
async fn moved_from(js: &jetstream::Context, old: &str) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let now = request_consumer(js, "default", "web1").await;
        if now != old {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the request consumer never moved from {old}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The request stream's consumer names.
async fn names(js: &jetstream::Context) -> Vec<String> {
    let stream = js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("request stream");
    let mut names: Vec<String> = stream
        .consumer_names()
        .map(|n| n.expect("a consumer name"))
        .collect()
        .await;
    names.sort();
    names
}

#[tokio::test]
async fn a_request_consumer_moves_to_its_sealed_name_after_what_the_older_one_acked_and_goes_with_its_server()
 {
    let flue = Flue::start().await;
    let (tenant, server) = ids();
    flue.register("web1").await;
    let js = jetstream::new(flue.nats.client().await);
    let legacy = subject::request_consumer(&tenant, &server);
    // Registered, no agent yet: the older name, which an agent of the previous release
    // computes, and only that one.
    assert_eq!(names(&js).await, std::slice::from_ref(&legacy));
    let marks = flue.path("marks");
    let script = format!("#!/bin/sh\necho \"$name\" >> {}\n", marks.display());
    flue.script_config("mark", &script, &["name"], &[]).await;
    // An agent of the previous release takes two requests from it and acks them
    // (played here by the test's own client: it never runs their hooks).
    let one = flue.deploy("mark", "web1", &[("name", "one")]).await;
    let two = flue.deploy("mark", "web1", &[("name", "two")]).await;
    let older: PullConsumer = js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("request stream")
        .get_consumer(&legacy)
        .await
        .expect("the older consumer");
    let mut taken = Vec::new();
    while taken.len() < 2 {
        let mut batch = older
            .fetch()
            .max_messages(2 - taken.len())
            .expires(Duration::from_secs(1))
            .messages()
            .await
            .expect("pull");
        while let Some(msg) = batch.next().await {
            let msg = msg.expect("a request");
            msg.double_ack().await.expect("ack");
            taken.push(msg.payload.clone());
        }
    }
    for (d, body) in [&one, &two].into_iter().zip(&taken) {
        let text = String::from_utf8_lossy(body);
        assert!(text.contains(d.id.as_str()), "{text}");
    }
    // The agent of this release finds the older name, says it pulls the sealed one, and
    // the gateway moves its consumer there.
    let _agent = flue.agent("web1", &[]).await;
    let sealed = moved_from(&js, &legacy).await;
    assert!(
        sealed.starts_with(&flue_tests::consumers::sealed_prefix(&tenant, &server)),
        "{sealed}"
    );
    assert_eq!(
        names(&js).await,
        std::slice::from_ref(&sealed),
        "the older one is deleted"
    );
    // What the older consumer had acked is not delivered again: the sealed one starts
    // after it, so the hooks of `one` and `two` (never run, the agent's ledger knows
    // nothing of them) do not run now.
    let three = flue.deploy("mark", "web1", &[("name", "three")]).await;
    let three = flue.finished(&three.id).await;
    assert_eq!(three.status, DeploymentStatus::Complete, "{three:?}");
    assert_eq!(file_lines(&marks), ["three"]);
    let mut moved: PullConsumer = js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("request stream")
        .get_consumer(&sealed)
        .await
        .expect("the sealed consumer");
    let info = moved.info().await.expect("info");
    assert_eq!(info.delivered.consumer_sequence, 1, "{info:?}");
    assert_eq!(info.num_pending, 0, "{info:?}");
    // Its name is in the agent's JWT and nowhere public: not in the server's record.
    let record = flue
        .admin_client()
        .get_server(&server)
        .await
        .expect("read the server");
    let shown = serde_json::to_string(&record).expect("json");
    assert!(!shown.contains(&sealed[sealed.len() - 32..]), "{shown}");
    // A rotation hands out the sealed name (the one the server has now).
    let rotated = flue
        .admin_client()
        .rotate_server_credentials(&server)
        .await
        .expect("rotate");
    let agent = rotated.agent.expect("the agent's bootstrap");
    assert_eq!(agent.request_consumer, sealed);
}

#[tokio::test]
async fn a_server_deregistered_after_its_move_leaves_no_consumer_and_starts_again_on_the_older_name()
 {
    let flue = Flue::start().await;
    let (tenant, server) = ids();
    flue.register("web1").await;
    let js = jetstream::new(flue.nats.client().await);
    let legacy = subject::request_consumer(&tenant, &server);
    let agent = flue.agent("web1", &[]).await;
    let sealed = moved_from(&js, &legacy).await;
    drop(agent);
    flue.admin_client()
        .delete_server(&server)
        .await
        .expect("deregister");
    assert!(names(&js).await.is_empty(), "{:?}", names(&js).await);
    // Registered again: the older name, for whichever agent comes (maybe an older one).
    flue.register("web1").await;
    assert_eq!(names(&js).await, std::slice::from_ref(&legacy));
    let _agent = flue.agent("web1", &[]).await;
    assert_eq!(moved_from(&js, &legacy).await, sealed);
}

#[tokio::test]
async fn a_server_at_the_request_streams_consumer_limit_keeps_its_older_name_and_runs_its_deployments()
 {
    // One server allowed: the sealed consumer cannot be made beside the older one, and the
    // older one is never deleted first (a gateway dying between the two calls would leave
    // the server with no consumer).
    let flue = Flue::start_with(&["--max-servers", "1"]).await;
    let (tenant, server) = ids();
    flue.register("web1").await;
    let js = jetstream::new(flue.nats.client().await);
    let legacy = subject::request_consumer(&tenant, &server);
    let agent = flue.agent("web1", &[]).await;
    flue.gateway
        .logs()
        .wait_for("the request stream is at its consumer limit", WAIT)
        .await;
    // The agent gave up waiting for the move and pulls the older one.
    agent
        .logs()
        .wait_for("did not move the request consumer to its sealed name", WAIT)
        .await;
    assert_eq!(names(&js).await, std::slice::from_ref(&legacy));
    let marks = flue.path("marks");
    let script = format!("#!/bin/sh\necho \"$name\" >> {}\n", marks.display());
    flue.script_config("mark", &script, &["name"], &[]).await;
    let d = flue.deploy("mark", "web1", &[("name", "one")]).await;
    let d = flue.finished(&d.id).await;
    assert_eq!(d.status, DeploymentStatus::Complete, "{d:?}");
    assert_eq!(file_lines(&marks), ["one"]);
    assert_eq!(names(&js).await, [legacy]);
}
