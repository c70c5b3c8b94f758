//! Benchmark (not a test): does the gateway's cost grow with history? With N registered
//! servers (default 5,000, `FLUE_BENCH_SERVERS`) and one finished deployment each (they
//! time out: no agent is needed to make history), it measures:
//!
//! - `GET /v1/servers` as a client first calls it (no parameters; paginated gateways
//!   answer the first page, older ones everything), median of 5;
//! - `GET /v1/deployments` likewise;
//! - gateway start-up: SIGKILL, then spawn until it listens (recovery included), median
//!   of 3, and how many deployment records the recovery read (its log line).
//!
//! Runs the binaries of the target dir it is built in, in whatever profile: build the
//! gateway of the revision to measure (`cargo build --bins`), then
//! `cargo bench -p flue-tests --bench history` (or `cargo build --bench history` and run
//! `target/debug/deps/history-*` for a debug build).

use std::time::{Duration, Instant};

use flue_client::Client;
use flue_proto::{ConfigSpec, CreateDeployment, RegisterServer, ServerId};
use flue_tests::{Flue, WAIT};
use futures_util::StreamExt;

/// Requests in flight while setting up.
const IN_FLIGHT: usize = 16;

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("FLUE_BENCH_SERVERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5000);
    let max = (n + 1000).to_string();
    let mut flue = Flue::start_with(&["--max-servers", &max]).await;
    let admin = flue.admin_client();
    let client = flue.client();

    let started = Instant::now();
    let servers: Vec<String> = (0..n).map(|i| format!("s{i:05}")).collect();
    futures_util::stream::iter(&servers)
        .map(|s| register(&admin, s))
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<()>>()
        .await;
    println!(
        "registered {n} servers in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let spec: ConfigSpec = serde_json::from_value(serde_json::json!({
        "id": "noop", "group": "script", "config": "#!/bin/sh\ntrue\n",
    }))
    .expect("config spec");
    client.create_config(&spec).await.expect("config");
    let started = Instant::now();
    let ids: Vec<_> = futures_util::stream::iter(&servers)
        .map(|s| {
            let client = client.clone();
            async move {
                let body = CreateDeployment {
                    timeout_secs: Some(1),
                    ..CreateDeployment::new("noop".parse().expect("id"), s.parse().expect("id"))
                };
                client.create_deployment(&body).await.expect("deploy").id
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    for id in &ids {
        flue.finished(id).await;
    }
    println!(
        "{n} deployments created and timed out (history) in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let servers_ms = median_ms(5, || get(&flue, "/v1/servers")).await;
    let deployments_ms = median_ms(5, || get(&flue, "/v1/deployments")).await;
    let mut starts = Vec::new();
    let mut read = String::new();
    for _ in 0..3 {
        let from = flue.gateway.logs().len();
        let t = Instant::now();
        flue.gateway.restart().await;
        starts.push(t.elapsed());
        let line = flue
            .gateway
            .logs()
            .wait_for_after(from, "deployment state recovered", WAIT)
            .await;
        read = line
            .split_whitespace()
            .find(|w| w.starts_with("read="))
            .unwrap_or("read=(not logged)")
            .to_owned();
    }
    starts.sort();
    println!("\nat {n} registered servers and {n} finished deployments:");
    println!("  GET /v1/servers (first call)      {servers_ms:>9.1} ms");
    println!("  GET /v1/deployments (first call)  {deployments_ms:>9.1} ms");
    println!(
        "  gateway start-up (kill → listens) {:>9.1} ms   recovery {read}",
        starts[1].as_secs_f64() * 1e3
    );
}

async fn register(admin: &Client, id: &str) {
    admin
        .register_server(&RegisterServer {
            id: ServerId::new(id).expect("server id"),
            name: String::new(),
            transport: Default::default(),
        })
        .await
        .expect("register server");
}

/// One GET; its body's size, so that the read is not optimised away.
async fn get(flue: &Flue, path: &str) -> usize {
    let response = flue
        .http()
        .get(format!("{}{path}", flue.gateway.url()))
        .send()
        .await
        .expect("GET");
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    response.bytes().await.expect("body").len()
}

async fn median_ms<F, Fut>(runs: usize, mut call: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: Future<Output = usize>,
{
    let mut times: Vec<Duration> = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        call().await;
        times.push(t.elapsed());
    }
    times.sort();
    times[runs / 2].as_secs_f64() * 1e3
}
