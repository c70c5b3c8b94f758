//! Deployments on the 3-node cluster through faults (issue 11, point 7): 1,000
//! deployments accepted through two gateways while a NATS node is SIGKILLed and started
//! again and the gateway applying the answers is SIGKILLed (and not started again: the
//! other one carries on alone). Every accepted deployment ends, no hook runs twice
//! (counted from the hooks' own log), and `FLUE_EVT` holds every deployment's history
//! once, in order.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use flue_client::{Client, ClientError};
use flue_proto::{Deployment, DeploymentId, DeploymentStatus, subject};
use flue_tests::Cluster;
use futures_util::StreamExt;
use tokio::sync::watch;

use super::answers::{create_either, with_id};
use super::{REPLICAS, history, leader, recording_config};

/// Deployments submitted.
const DEPLOYMENTS: usize = 1000;
/// Real agents (one server each), each running its deployments one after the other.
const SERVERS: usize = 10;
/// Requests in flight at once, spread over both gateways.
const IN_FLIGHT: usize = 16;
/// Bound on the whole run's waits (accepting, finishing): generous, the suite shares
/// two cores.
const RUN_WAIT: Duration = Duration::from_secs(150);
/// Bound on the wait for the next deployment to end once all are accepted: the gateway
/// applying no answer for this long has stalled. How fast they end is the bench's matter
/// (on a loaded machine the surviving gateway applied 3 to 45 answers a second here).
const STALL_WAIT: Duration = Duration::from_secs(60);
/// Bound on the whole test, below the test runner's 240 s.
const TEST_WAIT: Duration = Duration::from_secs(220);

/// Long-polls `client` (retrying 503s and connection errors) until deployment `id` is
/// terminal.
async fn terminal(client: &Client, id: &DeploymentId) -> Deployment {
    let mut last = None;
    loop {
        match client
            .wait_deployment(id, last, Duration::from_secs(10))
            .await
        {
            Ok(d) if d.status.is_terminal() => return d,
            Ok(d) => last = Some(d.status),
            Err(ClientError::Api { status: 503, .. })
            | Err(ClientError::Http { .. } | ClientError::Unreachable { .. }) => {
                tokio::time::sleep(Duration::from_millis(200)).await; // retry backoff
            }
            Err(e) => panic!("long-poll deployment {id}: {e}"),
        }
    }
}

/// Waits (bounded) until `accepted` reaches `n`.
async fn accepted_reaches(accepted: &mut watch::Receiver<usize>, n: usize) {
    tokio::time::timeout(RUN_WAIT, accepted.wait_for(|a| *a >= n))
        .await
        .unwrap_or_else(|_| panic!("{n} deployments not accepted within {RUN_WAIT:?}"))
        .expect("the submitting task runs");
}

#[tokio::test]
async fn a_thousand_deployments_through_two_gateways_survive_a_nats_node_and_a_gateway_killed_each_once_and_only_once()
 {
    let mut cluster = Cluster::start(3, REPLICAS).await;
    // The first gateway pulls the response consumer first, so it holds the pin: it is
    // the one killed below, and the second must take the answers over.
    let second = cluster.another_gateway(REPLICAS).await;
    let record = cluster.flue.path("record");
    recording_config(&cluster, &record).await;
    let servers: Vec<String> = (0..SERVERS).map(|i| format!("s{i:02}")).collect();
    let mut agents = Vec::new();
    for server in &servers {
        cluster.flue.register(server).await;
        agents.push(cluster.flue.agent(server, &[]).await);
    }
    let ids: Vec<DeploymentId> = (0..DEPLOYMENTS)
        .map(|i| format!("f{i:04}").parse().expect("deployment id"))
        .collect();

    let t0 = std::time::Instant::now();
    let lines = || std::fs::read_to_string(&record).map_or(0, |r| r.lines().count());
    // Submit everything in the background, counting acceptances.
    let (count, mut accepted) = watch::channel(0usize);
    let gateways = Arc::new([cluster.flue.client(), second.client()]);
    let submit = tokio::spawn({
        let (ids, servers, gateways) = (ids.clone(), servers.clone(), gateways.clone());
        async move {
            futures_util::stream::iter(ids.into_iter().enumerate())
                .map(|(i, id)| {
                    let (gateways, server) = (gateways.clone(), servers[i % SERVERS].clone());
                    async move {
                        let mut create = with_id("rec", &server, &id);
                        create
                            .input_values
                            .insert("name".into(), serde_json::Value::String(id.to_string()));
                        let pair = (&gateways[i % 2], &gateways[(i + 1) % 2]);
                        create_either(pair, &create).await
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .for_each(|_| {
                    count.send_modify(|n| *n += 1);
                    async {}
                })
                .await;
        }
    });

    // A NATS node goes: the one leading the response stream unless the agents' own node
    // (node 0) does, then the request stream's leader, else node 1.
    accepted_reaches(&mut accepted, DEPLOYMENTS / 5).await;
    let watcher = cluster.others[0].client().await;
    let mut victim = 1;
    for stream in [subject::RESPONSE_STREAM, subject::REQUEST_STREAM] {
        let lead = Cluster::index_of(&leader(&watcher, stream).await);
        if lead != 0 {
            victim = lead;
            break;
        }
    }
    cluster.node_mut(victim).kill().await;
    eprintln!(
        "{:?}: node {victim} killed; {} hooks ran",
        t0.elapsed(),
        lines()
    );
    accepted_reaches(&mut accepted, DEPLOYMENTS * 2 / 5).await;
    cluster.node_mut(victim).start_again().await;
    eprintln!(
        "{:?}: node {victim} started again; {} hooks ran",
        t0.elapsed(),
        lines()
    );

    // The gateway holding the answers goes, and stays gone.
    accepted_reaches(&mut accepted, DEPLOYMENTS * 3 / 5).await;
    cluster.flue.gateway.kill().await;
    eprintln!(
        "{:?}: first gateway killed; {} hooks ran",
        t0.elapsed(),
        lines()
    );

    tokio::time::timeout(RUN_WAIT, submit)
        .await
        .expect("every deployment accepted")
        .expect("the submitting task");
    eprintln!("{:?}: all accepted; {} hooks ran", t0.elapsed(), lines());
    let client = second.client();
    let mut ends = Vec::new();
    let mut ending = futures_util::stream::iter(&ids)
        .map(|id| terminal(&client, id))
        .buffer_unordered(IN_FLIGHT);
    let deadline = tokio::time::Instant::now() + TEST_WAIT.saturating_sub(t0.elapsed());
    let mut stalled = None;
    while ends.len() < ids.len() {
        let wait = STALL_WAIT.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        match tokio::time::timeout(wait, ending.next()).await {
            Ok(Some(d)) => ends.push(d),
            Ok(None) => break,
            Err(_) => {
                stalled = Some(wait);
                break;
            }
        }
    }
    drop(ending);
    if let Some(wait) = stalled {
        let ended: Vec<DeploymentId> = ends.iter().map(|d| d.id.clone()).collect();
        let mut open = Vec::new();
        for id in ids.iter().filter(|id| !ended.contains(id)) {
            let d = client.get_deployment(id).await.expect("read a deployment");
            open.push(format!("{id} {} {:?}", d.status, d.server_id));
        }
        panic!(
            "{} deployments not terminal ({} ended; none for {wait:?}, {:?} into the test): {open:#?}",
            open.len(),
            ends.len(),
            t0.elapsed()
        );
    }
    eprintln!("{:?}: all terminal; {} hooks ran", t0.elapsed(), lines());
    let mut statuses: HashMap<DeploymentStatus, usize> = HashMap::new();
    for d in &ends {
        *statuses.entry(d.status).or_default() += 1;
    }
    let failed: Vec<_> = ends
        .iter()
        .filter(|d| d.status != DeploymentStatus::Complete)
        .map(|d| format!("{} {} {:?}", d.id, d.status, d.status_reason))
        .collect();
    assert!(failed.is_empty(), "{statuses:?}: {failed:#?}");

    // No hook ran twice, and every deployment's ran (its own log).
    let ran = std::fs::read_to_string(&record).expect("the hooks' log");
    let mut runs: HashMap<&str, usize> = HashMap::new();
    for line in ran.lines() {
        *runs.entry(line).or_default() += 1;
    }
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "hooks run more than once: {twice:?}");
    assert_eq!(runs.len(), DEPLOYMENTS, "every deployment's hook ran");

    // Every history complete, once, in order; no event id twice.
    history::answers_settled(&second_nats(&cluster).await).await;
    let events = history::all_events(&cluster.others[0].events_client().await).await;
    let problems = history::problems(&events, &ids, true);
    assert!(
        problems.is_empty(),
        "{} problems in the event stream:\n{}",
        problems.len(),
        problems.join("\n")
    );
    drop(agents);
}

/// A tenant connection to node 1 (node 0 serves the agents and is never killed here,
/// but reading through another node shows the replicated state).
async fn second_nats(cluster: &Cluster) -> async_nats::Client {
    cluster.others[0].client().await
}
