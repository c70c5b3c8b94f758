//! Flue on a 3-node NATS cluster in operator mode (`flue-gateway cluster-config`) with
//! `--replicas 3`: a stack runs and every stream and bucket is kept on all three nodes, a
//! deployment completes while a node is down and the node rejoins, and two gateways serve
//! the same cluster, each deployment decided and announced once.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_nats::jetstream;
use flue_client::{Client, ClientError};
use flue_proto::event::{EVENT_STREAM, EventType};
use flue_proto::{CreateDeployment, Deployment, DeploymentId, DeploymentStatus, subject};
use flue_tests::{Cluster, EventTap, Flue, TestCa, WAIT};
use futures_util::TryStreamExt;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::stack::{create_stack, example};

mod answers;
mod cas;
mod failover;
mod faults;
mod history;
mod start;

const REPLICAS: &[&str] = &["--replicas", "3"];

/// Every stream of the account `client` belongs to, with its replica count and the
/// peers (besides the leader) that are current.
async fn streams(client: &async_nats::Client) -> BTreeMap<String, (usize, usize)> {
    let js = jetstream::new(client.clone());
    let names: Vec<String> = js.stream_names().try_collect().await.expect("stream names");
    let mut found = BTreeMap::new();
    for name in names {
        let mut stream = js.get_stream(&name).await.expect("stream");
        let info = stream.info().await.expect("stream info");
        let current = info
            .cluster
            .as_ref()
            .map_or(0, |c| c.replicas.iter().filter(|p| p.current).count());
        found.insert(name, (info.config.num_replicas, current));
    }
    found
}

/// The node (`n1`…) leading stream `name`.
async fn leader(client: &async_nats::Client, name: &str) -> String {
    let mut stream = jetstream::new(client.clone())
        .get_stream(name)
        .await
        .expect("stream");
    let info = stream.info().await.expect("stream info");
    info.cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .expect("a clustered stream has a leader")
}

/// The ids of `deployments`.
fn ids_of(deployments: &[Deployment]) -> Vec<DeploymentId> {
    deployments.iter().map(|d| d.id.clone()).collect()
}

/// A `script` config whose hook appends its deployment's `name` input to `record`.
pub(crate) async fn recording_config(cluster: &Cluster, record: &std::path::Path) {
    cluster
        .flue
        .script_config(
            "rec",
            &format!("#!/bin/sh\necho \"$name\" >> '{}'\n", record.display()),
            &["name"],
            &[],
        )
        .await;
}

/// Creates deployment `name` (also its id) of the recording config on `server` through
/// `client`, as an engine does: a 503 (the gateway reconnecting to another node) is
/// retried, and a retry finding the id taken reads what the first attempt stored.
pub(crate) async fn deploy_through(client: &Client, server: &str, name: &str) -> Deployment {
    let id: DeploymentId = name.parse().expect("deployment id");
    let mut create = CreateDeployment::new(
        "rec".parse().expect("config id"),
        server.parse().expect("server id"),
    );
    create.id = Some(id.clone());
    create
        .input_values
        .insert("name".into(), serde_json::Value::String(name.into()));
    let attempts = async {
        loop {
            match client.create_deployment(&create).await {
                Ok(d) => return d,
                Err(ClientError::Api { status: 409, .. }) => {
                    return client.get_deployment(&id).await.expect("read it back");
                }
                Err(ClientError::Api { status: 503, .. }) => {
                    tokio::time::sleep(Duration::from_millis(200)).await; // Retry-After
                }
                Err(e) => panic!("create deployment {name}: {e}"),
            }
        }
    };
    tokio::time::timeout(WAIT, attempts)
        .await
        .unwrap_or_else(|_| panic!("deployment {name} not accepted within {WAIT:?}"))
}

/// Long-polls `client` until deployment `id` is terminal, bounded by [`WAIT`]; a 503
/// (the gateway reconnecting) is retried.
pub(crate) async fn finished_through(client: &Client, id: &DeploymentId) -> Deployment {
    let poll = async {
        let mut last = None;
        loop {
            match client
                .wait_deployment(id, last, Duration::from_secs(10))
                .await
            {
                Ok(d) if d.status.is_terminal() => return d,
                Ok(d) => last = Some(d.status),
                Err(ClientError::Api { status: 503, .. }) => {
                    tokio::time::sleep(Duration::from_millis(200)).await; // Retry-After
                }
                Err(e) => panic!("long-poll deployment {id}: {e}"),
            }
        }
    };
    tokio::time::timeout(WAIT, poll)
        .await
        .unwrap_or_else(|_| panic!("deployment {id} did not finish within {WAIT:?}"))
}

/// The cluster is first served with one replica per stream and bucket; a gateway started
/// with `--replicas 3` brings them all to three, and a stack runs on them.
#[tokio::test]
async fn a_stack_runs_to_complete_on_a_three_node_cluster_with_every_stream_and_bucket_brought_to_three_nodes()
 {
    let mut cluster = Cluster::start(3, &[]).await;
    let single = streams(&cluster.flue.nats.client().await).await;
    assert_eq!(single[subject::REQUEST_STREAM].0, 1, "{single:?}");
    cluster.flue.gateway.kill().await;
    cluster.flue.gateway = cluster.another_gateway(REPLICAS).await;
    cluster
        .flue
        .gateway
        .logs()
        .wait_for("stream replicas changed", WAIT)
        .await;
    let env = &cluster.flue;
    let mut agents = Vec::new();
    for server in ["db", "web"] {
        env.register(server).await;
        agents.push(env.agent(server, &[]).await);
    }
    let data = format!("data_dir={}", env.path("data").display());
    let run = create_stack(env, "shop", &example("two-tier"), &[&data]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("CREATE_COMPLETE"), "{run}");

    let tenant = streams(&env.nats.client().await).await;
    let events = streams(&env.nats.events_client().await).await;
    for name in [subject::REQUEST_STREAM, subject::RESPONSE_STREAM] {
        assert!(tenant.contains_key(name), "{name} missing in {tenant:?}");
    }
    assert!(
        events.contains_key(EVENT_STREAM),
        "{EVENT_STREAM} missing in {events:?}"
    );
    let buckets = tenant.keys().filter(|n| n.starts_with("KV_flue_")).count();
    assert!(buckets >= 6, "the gateway's buckets: {tenant:?}");
    for (name, (replicas, _)) in tenant.iter().chain(&events) {
        assert_eq!(*replicas, 3, "{name} has {replicas} replicas");
    }
    // The stream holding the requests is really copied: both followers are current.
    let requests = tenant[subject::REQUEST_STREAM];
    assert_eq!(requests.1, 2, "followers of FLUE_REQ current: {requests:?}");
}

#[tokio::test]
async fn a_deployment_completes_while_the_node_leading_the_request_stream_is_killed_and_the_node_rejoins()
 {
    let mut cluster = Cluster::start(3, REPLICAS).await;
    let record = cluster.flue.path("record");
    recording_config(&cluster, &record).await;
    cluster.flue.register("s1").await;
    let _agent = cluster.flue.agent("s1", &[]).await;
    let client = cluster.flue.client();
    let before = deploy_through(&client, "s1", "before").await;
    assert_eq!(
        cluster.flue.finished(&before.id).await.status,
        DeploymentStatus::Complete
    );

    let watcher = cluster.flue.nats.client().await;
    let lead = leader(&watcher, subject::REQUEST_STREAM).await;
    let index = Cluster::index_of(&lead);
    // A watcher on node 0 loses its connection when node 0 goes: watch from another node.
    let watcher = match index {
        0 => cluster.others[0].client().await,
        _ => watcher,
    };
    cluster.node_mut(index).kill().await;

    let during = deploy_through(&client, "s1", "during").await;
    let done = finished_through(&client, &during.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    let new_leader = leader(&watcher, subject::REQUEST_STREAM).await;
    assert_ne!(new_leader, lead, "another node leads FLUE_REQ");

    let node = cluster.node_mut(index);
    let from = node.logs().len();
    node.start_again().await;
    node.logs()
        .wait_for_after(from, "metadata leader", WAIT)
        .await;
    // Rejoined: the node is a current follower of FLUE_REQ again (bounded poll of the
    // broker's own view; nothing else announces it).
    let rejoined = async {
        loop {
            let mut stream = jetstream::new(watcher.clone())
                .get_stream(subject::REQUEST_STREAM)
                .await
                .expect("stream");
            let info = stream.info().await.expect("stream info");
            let cluster_info = info.cluster.as_ref().expect("clustered");
            let back = cluster_info.leader.as_deref() == Some(lead.as_str())
                || cluster_info
                    .replicas
                    .iter()
                    .any(|p| p.name == lead && p.current && !p.offline);
            if back {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await; // poll interval
        }
    };
    tokio::time::timeout(WAIT, rejoined)
        .await
        .unwrap_or_else(|_| panic!("{lead} did not rejoin FLUE_REQ within {WAIT:?}"));
    let after = deploy_through(&client, "s1", "after").await;
    assert_eq!(
        finished_through(&client, &after.id).await.status,
        DeploymentStatus::Complete
    );
    let ran = std::fs::read_to_string(&record).expect("record");
    assert_eq!(
        ran.lines().collect::<Vec<_>>(),
        ["before", "during", "after"]
    );
}

/// Two gateways at once: every deployment runs its hook once, ends COMPLETE (read through
/// the other gateway), no event is published twice and each deployment's history is
/// complete and in order.
#[tokio::test]
async fn two_gateways_on_one_cluster_run_each_deployment_once_and_publish_no_event_twice() {
    let cluster = Cluster::start(3, REPLICAS).await;
    let second = cluster.another_gateway(REPLICAS).await;
    let record = cluster.flue.path("record");
    recording_config(&cluster, &record).await;
    let mut agents = Vec::new();
    for server in ["s1", "s2"] {
        cluster.flue.register(server).await;
        agents.push(cluster.flue.agent(server, &[]).await);
    }
    let gateways = [cluster.flue.client(), second.client()];
    let mut created = Vec::new();
    for i in 0..8 {
        let through = &gateways[i % 2];
        let server = ["s1", "s2"][(i / 2) % 2];
        created.push(deploy_through(through, server, &format!("d{i}")).await);
    }
    // Each read back through the gateway that did not create it.
    for (i, d) in created.iter().enumerate() {
        let done = finished_through(&gateways[(i + 1) % 2], &d.id).await;
        assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    }

    // Every hook ran once.
    let ran = std::fs::read_to_string(&record).expect("record");
    let mut ran: Vec<&str> = ran.lines().collect();
    ran.sort_unstable();
    let mut wanted: Vec<String> = (0..8).map(|i| format!("d{i}")).collect();
    wanted.sort_unstable();
    assert_eq!(ran, wanted);

    // Every deployment's completion announced; then every event up to the stream's last.
    let events_client = cluster.flue.nats.events_client().await;
    let mut tap = EventTap::from_start(&events_client).await;
    for d in &created {
        tap.wait_for("a completion", WAIT, |e| {
            e.ty == EventType::DeploymentCompleted && e.deployment.as_ref() == Some(&d.id)
        })
        .await;
    }
    let events = history::all_events(&events_client).await;

    let mut ids = HashMap::new();
    let mut per_deployment: HashMap<(DeploymentId, EventType), usize> = HashMap::new();
    for (_, event) in &events {
        *ids.entry(event.id.clone()).or_insert(0) += 1;
        if let Some(d) = event.deployment.clone() {
            *per_deployment.entry((d, event.ty)).or_insert(0) += 1;
        }
    }
    let repeated: Vec<_> = ids.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "event ids seen twice: {repeated:?}");
    for d in &created {
        for ty in [EventType::DeploymentQueued, EventType::DeploymentCompleted] {
            let n = per_deployment
                .get(&(d.id.clone(), ty))
                .copied()
                .unwrap_or(0);
            assert_eq!(n, 1, "{ty:?} of {} announced {n} times", d.id);
        }
    }
    // One gateway at a time applies the answers (the response consumer's pin), so each
    // deployment's `started` is announced too, before its completion (issue 11 point 2).
    let problems = history::problems(&events, &ids_of(&created), false);
    assert!(problems.is_empty(), "{problems:#?}");
    let repeated: Vec<_> = per_deployment.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "deployment events announced twice: {repeated:?}"
    );
}

#[tokio::test]
async fn a_gateway_asked_for_more_replicas_than_a_single_broker_keeps_stops_naming_the_flag() {
    let flue = Flue::start().await;
    let run = tokio::process::Command::new(flue_tests::bin("flue-gateway"))
        .args(["--listen", "127.0.0.1:0", "--nats-url", &flue.nats.url()])
        .arg("--state-dir")
        .arg(flue.gateway.state_dir())
        .args(REPLICAS)
        .env("NO_COLOR", "1")
        .env_remove("RUST_BACKTRACE")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(WAIT, run)
        .await
        .expect("the gateway stops")
        .expect("run flue-gateway");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--replicas needs a JetStream cluster of at least that many nodes"),
        "{stderr}"
    );
    // Nothing was changed: the first gateway's streams keep their one copy.
    let found = streams(&flue.nats.client().await).await;
    assert!(
        found.values().all(|(replicas, _)| *replicas == 1),
        "{found:?}"
    );
}

#[tokio::test]
async fn nodes_whose_routes_speak_tls_only_form_the_cluster_and_a_deployment_completes_on_three_replicas()
 {
    let ca = TestCa::new();
    let route = ca.leaf("route", &[]);
    let (cert, key, ca_file) = (
        route.cert.display().to_string(),
        route.key.display().to_string(),
        ca.ca_file().display().to_string(),
    );
    let cluster = Cluster::start_with(
        3,
        &[
            "--route-tls-cert",
            &cert,
            "--route-tls-key",
            &key,
            "--route-tls-ca",
            &ca_file,
        ],
        REPLICAS,
    )
    .await;
    // A node speaking plain NATS to a route port gets no INFO, no PONG: the port wants a
    // TLS handshake first, and the node drops the connection as a failed one.
    let mut route = tokio::net::TcpStream::connect(("127.0.0.1", cluster.route_port(1)))
        .await
        .expect("connect to a route port");
    route
        .write_all(b"CONNECT {}\r\nPING\r\n")
        .await
        .expect("send plain NATS");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(WAIT, route.read_to_end(&mut answer))
        .await
        .expect("the node closes the connection");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        !answer.contains("INFO") && !answer.contains("PONG"),
        "{answer}"
    );
    cluster.others[0]
        .logs()
        .wait_for("TLS route handshake error", WAIT)
        .await;

    let record = cluster.flue.path("record");
    recording_config(&cluster, &record).await;
    cluster.flue.register("s1").await;
    let _agent = cluster.flue.agent("s1", &[]).await;
    let d = deploy_through(&cluster.flue.client(), "s1", "over-tls").await;
    let done = finished_through(&cluster.flue.client(), &d.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    let found = streams(&cluster.flue.nats.client().await).await;
    assert_eq!(found[subject::REQUEST_STREAM], (3, 2), "{found:?}");
}
