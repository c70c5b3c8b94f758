//! Two gateways on one broker applying agents' answers (issue 11, point 2): whichever
//! gateway takes a server's answers, each deployment's history in `FLUE_EVT` is complete,
//! once, and in the order the agent reported it.

use std::time::Duration;

use flue_client::{Client, ClientError};
use flue_proto::{CreateDeployment, Deployment, DeploymentId, DeploymentStatus};
use flue_tests::sim::{self, SimAgents, SimOptions};
use flue_tests::{Flue, Gateway, WAIT};
use futures_util::StreamExt;

use super::history;

/// Creates `create` (its id set) through `client`, as a client of two gateways would: a
/// 503 or a connection error is retried on `other`, then back, with the same id; a 409
/// (an earlier attempt was recorded after all) is read back.
pub async fn create_either(
    (client, other): (&Client, &Client),
    create: &CreateDeployment,
) -> Deployment {
    let id = create.id.as_ref().expect("a client id");
    let attempts = async {
        let mut through = [client, other].into_iter().cycle();
        loop {
            let gateway = through.next().expect("cycle");
            match gateway.create_deployment(create).await {
                Ok(d) => return d,
                Err(ClientError::Api { status: 409, .. }) => match gateway.get_deployment(id).await
                {
                    Ok(d) => return d,
                    Err(e) => eprintln!("reading {id} back: {e}; retrying"),
                },
                Err(ClientError::Api { status: 503, .. })
                | Err(ClientError::Http { .. } | ClientError::Unreachable { .. }) => {
                    tokio::time::sleep(Duration::from_millis(100)).await; // retry backoff
                }
                Err(e) => panic!("create deployment {id}: {e}"),
            }
        }
    };
    tokio::time::timeout(WAIT, attempts)
        .await
        .unwrap_or_else(|_| panic!("deployment {id} not accepted within {WAIT:?}"))
}

/// A CREATE deployment of `config` on `server` with the client id `id`.
pub fn with_id(config: &str, server: &str, id: &DeploymentId) -> CreateDeployment {
    let mut create = CreateDeployment::new(
        config.parse().expect("config id"),
        server.parse().expect("server id"),
    );
    create.id = Some(id.clone());
    create
}

/// Simulated agents answer `delivered`, `started` and `finished` back to back, so a
/// server's three answers are in the response stream at nearly the same moment: with the
/// two gateways pulling the one shared consumer they would be split between them.
#[tokio::test]
async fn two_gateways_report_every_deployment_of_twenty_servers_queued_delivered_started_and_completed_once_in_order()
 {
    let flue = Flue::start().await;
    let second = Gateway::start_like(&flue.gateway, &flue.nats.url(), &[]).await;
    let servers = sim::register(&flue.admin_client(), "sim", 20, 10).await;
    let options = SimOptions {
        nats_url: flue.nats.url(),
        tenant: "default".parse().expect("tenant"),
        heartbeat: Duration::from_secs(3),
        connecting_at_once: 10,
    };
    let agents = SimAgents::start(&options, servers.clone());
    agents.wait_ready(WAIT).await;
    flue.script_config("noop", "true", &[], &[]).await;

    let gateways = [flue.client(), second.client()];
    let ids: Vec<(String, DeploymentId)> = (0..300)
        .map(|i| {
            let server = servers[i % servers.len()].id.to_string();
            (server, format!("d{i:03}").parse().expect("deployment id"))
        })
        .collect();
    let created: Vec<Deployment> = futures_util::stream::iter(ids.iter().enumerate())
        .map(|(i, (server, id))| {
            let pair = (&gateways[i % 2], &gateways[(i + 1) % 2]);
            async move { create_either(pair, &with_id("noop", server, id)).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert_eq!(created.len(), ids.len());
    for (i, (_, id)) in ids.iter().enumerate() {
        let done = super::finished_through(&gateways[(i + 1) % 2], id).await;
        assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    }

    history::answers_settled(&flue.nats.client().await).await;
    let events = history::all_events(&flue.nats.events_client().await).await;
    let ids: Vec<DeploymentId> = ids.into_iter().map(|(_, id)| id).collect();
    let problems = history::problems(&events, &ids, true);
    assert!(
        problems.is_empty(),
        "{} of {} deployments' histories are wrong:\n{}",
        problems.len(),
        ids.len(),
        problems.join("\n")
    );
    agents.stop().await;
}
