//! `--request-consumer-storage memory` (issue 11, point 5): servers' request consumers kept
//! in the broker's memory, replicated on a 3-node cluster, so that a broker's shutdown does
//! not wait ~10 ms per registered server. Refused without a replicated stream; under it a
//! server's requests run exactly once across a node's kill -9 and a kill -9 of every node
//! (which loses the consumers' state: the agent answers the redelivered requests from its
//! ledger).
//!
//! `--request-consumer-replicas 1`: each consumer on one node of the cluster (the stream
//! keeps three copies). Refused above `--replicas`; with the node that holds a server's
//! consumer killed, deployments are still accepted, and once the node is back each runs
//! exactly once, with memory storage (the consumer comes back without its state and
//! delivers again what it had delivered) and with file storage.

use async_nats::jetstream::{self, consumer};

use flue_client::Client;
use flue_proto::{Deployment, DeploymentStatus, subject};
use flue_tests::{Agent, Cluster, WAIT, file_lines};

use crate::cluster::{deploy_through, finished_through, recording_config};

const MEMORY: &[&str] = &["--replicas", "3", "--request-consumer-storage", "memory"];
const MEMORY_R1: &[&str] = &[
    "--replicas",
    "3",
    "--request-consumer-storage",
    "memory",
    "--request-consumer-replicas",
    "1",
];
const FILE_R1: &[&str] = &["--replicas", "3", "--request-consumer-replicas", "1"];

/// Starts a gateway with `flags` (against a broker it never reaches) and asserts that it
/// refuses to start, saying `message`, before it listens.
async fn refused_at_start(flags: &[&str], message: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = tokio::process::Command::new(flue_tests::bin("flue-gateway"))
        .args(["--listen", "127.0.0.1:0", "--insecure-dev-broker"])
        .args(["--nats-url", "nats://127.0.0.1:1"])
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(flags)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(WAIT, run)
        .await
        .expect("the gateway exits")
        .expect("run flue-gateway");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains(message), "{stderr}");
    assert!(!stdout.contains("listening"), "{stdout}");
}

#[tokio::test]
async fn a_gateway_asked_for_memory_request_consumers_without_three_replicas_refuses_to_start() {
    refused_at_start(
        &["--request-consumer-storage", "memory"],
        "--request-consumer-storage memory needs --replicas 3 or more",
    )
    .await;
}

#[tokio::test]
async fn a_gateway_asked_for_more_request_consumer_replicas_than_stream_replicas_refuses_to_start()
{
    refused_at_start(
        &["--request-consumer-replicas", "3"],
        "--request-consumer-replicas 3 is more than --replicas 1",
    )
    .await;
}

#[tokio::test]
async fn with_single_replica_memory_request_consumers_deployments_sent_while_the_consumers_node_is_down_run_once_when_it_is_back()
 {
    let agent_log = across_the_consumers_node_kill(MEMORY_R1).await;
    // The consumer came back without its state: it delivered `before` again, which the
    // agent answered from its ledger.
    assert_eq!(replays(&agent_log), 1, "{agent_log:#?}");
}

#[tokio::test]
async fn with_single_replica_file_request_consumers_deployments_sent_while_the_consumers_node_is_down_run_once_when_it_is_back()
 {
    // File state survives the kill (or loses its last write): a redelivery, if any, is
    // answered from the ledger, which the hook's record below proves.
    let agent_log = across_the_consumers_node_kill(FILE_R1).await;
    assert!(replays(&agent_log) <= 1, "{agent_log:#?}");
}

/// A 3-node cluster whose gateway runs with `flags`, server `s1` with its agent, and the
/// recording config's deployment `before` COMPLETE on it; with the hooks' log and `before`.
async fn one_server_past_a_first_deployment(
    flags: &[&str],
) -> (Cluster, std::path::PathBuf, Agent, Client, Deployment) {
    let cluster = Cluster::start(3, flags).await;
    let record = cluster.flue.path("record");
    recording_config(&cluster, &record).await;
    cluster.flue.register("s1").await;
    let agent = cluster.flue.agent("s1", &[]).await;
    let client = cluster.flue.client();
    let before = deploy_through(&client, "s1", "before").await;
    assert_eq!(
        finished_through(&client, &before.id).await.status,
        DeploymentStatus::Complete
    );
    (cluster, record, agent, client, before)
}

/// One server on a 3-node cluster whose gateway runs with `flags` (one consumer replica):
/// a deployment before; the node holding the server's consumer killed (kill -9), two
/// deployments accepted while it is down; the node started again, both COMPLETE and
/// every hook run once. Returns the agent's log.
async fn across_the_consumers_node_kill(flags: &[&str]) -> Vec<String> {
    let memory = flags.contains(&"memory");
    let (mut cluster, record, agent, client, before) =
        one_server_past_a_first_deployment(flags).await;

    // The server's consumer is on one node only, with the storage asked for.
    let watcher = cluster.others[0].client().await;
    let info = consumer_info(&watcher).await;
    assert_eq!(info.config.memory_storage, memory, "{:?}", info.config);
    assert_eq!(info.config.num_replicas, 1, "{:?}", info.config);
    let placement = info.cluster.as_ref().expect("a clustered consumer");
    assert!(placement.replicas.is_empty(), "{placement:?}");
    drop(watcher);

    // Its node killed: the requests are accepted (the stream has two copies left) and wait.
    let lead = placement.leader.clone().expect("the consumer has a leader");
    let index = Cluster::index_of(&lead);
    cluster.node_mut(index).kill().await;
    let during = [
        deploy_through(&client, "s1", "during1").await,
        deploy_through(&client, "s1", "during2").await,
    ];

    // Back: both run, in order, once each; nothing runs twice.
    cluster.node_mut(index).start_again().await;
    for d in &during {
        assert_eq!(
            finished_through(&client, &d.id).await.status,
            DeploymentStatus::Complete
        );
    }
    assert_eq!(file_lines(&record), ["before", "during1", "during2"]);
    let d = client
        .get_deployment(&before.id)
        .await
        .expect("read it back");
    assert_eq!(d.status, DeploymentStatus::Complete, "{d:?}");
    agent.logs().lines()
}

/// How many requests an agent's log says it answered from its ledger.
fn replays(agent_log: &[String]) -> usize {
    agent_log
        .iter()
        .filter(|l| l.contains("already finished, answering from the ledger"))
        .count()
}

#[tokio::test]
async fn with_memory_request_consumers_a_servers_requests_run_once_across_a_node_kill_and_a_kill_of_every_node()
 {
    let (mut cluster, record, agent, client, before) =
        one_server_past_a_first_deployment(MEMORY).await;

    // The server's consumer is kept in memory, on the stream's three nodes.
    let watcher = cluster.others[0].client().await;
    let info = consumer_info(&watcher).await;
    assert!(info.config.memory_storage, "{:?}", info.config);
    let placement = info.cluster.as_ref().expect("a clustered consumer");
    assert_eq!(placement.replicas.len(), 2, "{placement:?}");

    // One node killed: the other two keep the consumer and its state.
    let lead = placement.leader.clone().expect("the consumer has a leader");
    let index = Cluster::index_of(&lead);
    cluster.node_mut(index).kill().await;
    let during = deploy_through(&client, "s1", "during").await;
    assert_eq!(
        finished_through(&client, &during.id).await.status,
        DeploymentStatus::Complete
    );
    cluster.node_mut(index).start_again().await;

    // Every node killed at once: the consumer comes back from the cluster's metadata with
    // no state, so it delivers `before` and `during` again; the agent answers them from
    // its ledger and runs neither. `after` is queued behind them (one in flight at a time),
    // so its completion means both were handled.
    for i in 0..3 {
        cluster.node_mut(i).kill().await;
    }
    for i in 0..3 {
        cluster.node_mut(i).start_again().await;
    }
    let after = deploy_through(&client, "s1", "after").await;
    assert_eq!(
        finished_through(&client, &after.id).await.status,
        DeploymentStatus::Complete
    );
    assert_eq!(file_lines(&record), ["before", "during", "after"]);
    // The state really was lost and the old requests came again.
    let replays = agent
        .logs()
        .lines()
        .iter()
        .filter(|l| l.contains("already finished, answering from the ledger"))
        .count();
    assert_eq!(replays, 2, "{:#?}", agent.logs().lines());
    for id in [&before.id, &during.id] {
        let d = client.get_deployment(id).await.expect("read it back");
        assert_eq!(d.status, DeploymentStatus::Complete, "{d:?}");
    }
}

/// The request consumer of server `s1`, read from another node than node 0.
async fn consumer_info(client: &async_nats::Client) -> consumer::Info {
    // Under the name it has now (its agent's first heartbeat moved it to its sealed one).
    let js = jetstream::new(client.clone());
    let name = flue_tests::consumers::request_consumer(&js, "default", "s1").await;
    let mut consumer: consumer::PullConsumer = js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("request stream")
        .get_consumer(&name)
        .await
        .expect("the server's request consumer");
    consumer.info().await.expect("consumer info").clone()
}
