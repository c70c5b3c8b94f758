//! The scale bench's load generator (`flue_tests::sim`) on a small scale: simulated agents
//! registered through the API, each on its own authenticated connection, answer real
//! signed requests so that the gateway records them COMPLETE. Keeps the bench honest
//! without running it (`bash scripts/bench.sh scale` does).

use std::time::Duration;

use flue_proto::DeploymentStatus;
use flue_proto::event::PresenceStatus;
use flue_tests::sim::{self, SimAgents, SimOptions};
use flue_tests::{Flue, WAIT};

#[tokio::test]
async fn five_simulated_agents_answer_their_deployments_and_the_gateway_records_them_complete() {
    let flue = Flue::start().await;
    let servers = sim::register(&flue.admin_client(), "sim", 5, 5).await;
    let options = SimOptions {
        nats_url: flue.nats.url(),
        tenant: "default".parse().expect("tenant"),
        heartbeat: Duration::from_secs(3),
        connecting_at_once: 5,
    };
    let agents = SimAgents::start(&options, servers.clone());
    agents.wait_ready(WAIT).await;
    flue.script_config("noop", "true", &[], &[]).await;

    let mut deployments = Vec::new();
    for server in &servers {
        deployments.push(flue.deploy("noop", server.id.as_str(), &[]).await);
    }
    for deployment in &deployments {
        let done = flue.finished(&deployment.id).await;
        assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
        assert!(done.delivered_at.is_some(), "delivered recorded: {done:?}");
    }
    assert_eq!(agents.answered(), 5);
    assert_eq!(
        agents.rejected(),
        0,
        "every request's signature checked out"
    );

    // Presence: every simulated agent's heartbeats make its server online (the gateway
    // takes them in on its own time: polled, bounded).
    let admin = flue.admin_client();
    let online = || async {
        let listed = admin.list_servers().await.expect("list servers");
        listed
            .iter()
            .filter(|s| s.presence.as_ref().map(|p| p.status) == Some(PresenceStatus::Online))
            .count()
    };
    let all_online = async {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            if online().await == 5 {
                return;
            }
        }
    };
    tokio::time::timeout(WAIT, all_online)
        .await
        .expect("the five servers online");
    agents.stop().await;
}
