//! A gateway started while its cluster cannot answer (two of three nodes frozen: no
//! quorum, so every stream, bucket and consumer it sets up times out) keeps trying its
//! tenant's start, and serves once the nodes are back. Before, one slow replicated
//! stream at start ended the gateway, which a loaded machine turned into a failed test.

use flue_proto::DeploymentStatus;
use flue_tests::{Cluster, START_WAIT};

use super::{REPLICAS, deploy_through, finished_through, recording_config};

#[tokio::test]
async fn a_gateway_started_while_its_cluster_has_no_quorum_waits_for_it_then_serves() {
    let mut cluster = Cluster::start(3, REPLICAS).await;
    let record = cluster.flue.path("record");
    recording_config(&cluster, &record).await;
    cluster.flue.register("s1").await;
    let _agent = cluster.flue.agent("s1", &[]).await;

    cluster.node_mut(1).pause();
    cluster.node_mut(2).pause();
    let flags: Vec<&str> = REPLICAS
        .iter()
        .copied()
        .chain(["--broker-timeout-ms", "1000"])
        .collect();
    let mut late = cluster.spawn_gateway_on_node(0, &flags);
    late.logs().wait_for("starting it again", START_WAIT).await;
    assert!(
        !late
            .stdout()
            .lines()
            .iter()
            .any(|l| l.contains("listening on")),
        "the gateway served before its cluster could answer: {:?}",
        late.stdout().lines()
    );
    cluster.node_mut(1).resume();
    cluster.node_mut(2).resume();
    late.listening().await;

    let client = late.client();
    let queued = deploy_through(&client, "s1", "after-quorum").await;
    let done = finished_through(&client, &queued.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(
        flue_tests::file_lines(&record),
        vec!["after-quorum".to_owned()],
        "the hook ran once"
    );
}
