//! Benchmark (not a test): what a 3-node NATS cluster with `--replicas 3` costs against
//! one broker. Both Flues run side by side (the harness's secure way: operator mode,
//! tokens, signed requests and answers) and deployment latency is sampled in alternating
//! rounds, so a busy moment of the machine falls on both alike. Also: how long a fresh
//! cluster takes from the first `nats-server` spawned to a gateway serving.
//!
//! Run with `cargo bench -p flue-tests --bench cluster --profile dev` after
//! `cargo build --workspace --bins` (the harness runs the debug binaries next to it).
//! `FLUE_BENCH_N` sets the number of latency samples per setup (default 100).

use std::time::{Duration, Instant};

use flue_client::Client;
use flue_proto::{CreateDeployment, DeploymentStatus};
use flue_tests::{Cluster, Flue};
use serde_json::json;

/// Latency samples are taken in rounds of this many, alternating between the setups.
const ROUND: usize = 10;

#[tokio::main]
async fn main() {
    let samples: usize = std::env::var("FLUE_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    println!("Flue benchmark: one broker (R1) against a 3-node cluster (R3), debug binaries");

    let t = Instant::now();
    let cluster = Cluster::start(3, &["--replicas", "3"]).await;
    println!(
        "3-node cluster from the first spawn to a gateway serving (R3 streams and buckets): {} ms",
        t.elapsed().as_millis()
    );
    let single = Flue::start().await;
    let clients = [prepare(&single).await.0, prepare(&cluster.flue).await.0];
    let _agents = (
        prepare_agent(&single).await,
        prepare_agent(&cluster.flue).await,
    );

    let mut taken: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    while taken[0].len() < samples {
        for (i, client) in clients.iter().enumerate() {
            for _ in 0..ROUND {
                taken[i].push(latency(client).await);
            }
        }
    }
    println!(
        "deployment latency (POST → client sees COMPLETE, no-op script hook), {samples} samples each:"
    );
    println!("{:<24} {:>10} {:>10}", "", "p50 ms", "p99 ms");
    for (name, values) in ["1 node, R1", "3 nodes, R3"].iter().zip(&mut taken) {
        values.sort_unstable();
        println!(
            "{name:<24} {:>10.2} {:>10.2}",
            pct(values, 50),
            pct(values, 99)
        );
    }
}

/// Registers `b0` and creates the no-op config; returns the engine client.
async fn prepare(flue: &Flue) -> (Client,) {
    flue.register("b0").await;
    flue.script_config("noop", "#!/bin/sh\ntrue\n", &[], &[])
        .await;
    (flue.client(),)
}

async fn prepare_agent(flue: &Flue) -> flue_tests::Agent {
    flue.agent("b0", &[]).await
}

async fn latency(client: &Client) -> Duration {
    let body: CreateDeployment =
        serde_json::from_value(json!({"config_id": "noop", "server_id": "b0"})).expect("body");
    let t = Instant::now();
    let d = client.create_deployment(&body).await.expect("create");
    let done = client
        .wait_until_terminal(&d.id, Duration::from_secs(60), |_| {})
        .await
        .expect("finish");
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    t.elapsed()
}

fn pct(sorted: &[Duration], p: usize) -> f64 {
    let i = (sorted.len() * p / 100).min(sorted.len() - 1);
    sorted[i].as_secs_f64() * 1000.0
}
