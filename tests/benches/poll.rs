//! Benchmark (not a test): a server that polls with the stock os-collect-config against
//! one running a flue-agent, on the same Flue (operator mode, plain HTTP on loopback).
//!
//! For each, the time from a deployment's creation (just before the POST) to its hook
//! starting (the hook's first command writes the clock), with os-collect-config polling
//! at 1 s (`--polling-interval 1`, its default `--min-polling-interval`: the shortest
//! it sleeps), and each one's resident memory while idle: the flue-agent after start,
//! os-collect-config between two polls.
//!
//! Run with `bash scripts/bench.sh poll` (builds the release binaries first; needs the
//! stock tools `scripts/test.sh` installs). `FLUE_BENCH_N` sets the samples per figure
//! (default 20).

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flue_client::Client;
use flue_proto::poll::Transport;
use flue_proto::{ConfigSpec, CreateDeployment, DeploymentStatus, RegisterServer, ServerId};
use flue_tests::{Flue, PolledServer};
use serde_json::json;

#[path = "measure.rs"]
mod measure;

use measure::rss_kib;

/// Polling interval of the stock os-collect-config, seconds.
const INTERVAL: &str = "1";

#[tokio::main]
async fn main() {
    let samples: usize = std::env::var("FLUE_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    println!("Flue benchmark: a polling server (stock os-collect-config) against a flue-agent");
    println!("samples per figure: {samples}; os-collect-config --polling-interval {INTERVAL}\n");
    let flue = Flue::start().await;
    let spec: ConfigSpec = serde_json::from_value(json!({
        "id": "stamp", "group": "script",
        "config": "#!/bin/sh\ndate +%s%N > \"$marker\"\n",
        "inputs": [{"name": "marker"}],
    }))
    .expect("spec");
    flue.client().create_config(&spec).await.expect("config");

    flue.register("agent1").await;
    let agent = flue.agent("agent1", &[]).await;
    let agent_rss = rss_kib(agent.pid().expect("agent running"));
    let agent_latency = latencies(&flue, "agent1", samples).await;

    let registration = flue
        .admin_client()
        .register_server(&RegisterServer {
            transport: Transport::Poll,
            id: ServerId::new("poll1").expect("id"),
            name: String::new(),
        })
        .await
        .expect("register");
    let url = registration.poll.expect("metadata URL").metadata_url;
    let root = flue.path("poll1");
    let server = PolledServer::new(&root, &url);
    let mut occ = server
        .poll_command()
        .args(["--polling-interval", INTERVAL])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("os-collect-config");
    // Its first cycle ran once the first deployment comes through; measured after that.
    let poll_latency = latencies(&flue, "poll1", samples).await;
    let occ_rss = rss_kib(occ.id().expect("os-collect-config running"));
    occ.kill().await.expect("stop os-collect-config");

    let (a, p) = (summary(agent_latency), summary(poll_latency));
    println!("| figure | unit | flue-agent | os-collect-config | ratio |");
    println!("|---|---|---|---|---|");
    for (name, i) in [("p50", 0), ("p90", 1), ("max", 2)] {
        println!(
            "| deployment created → hook started, {name} | ms | {} | {} | {:.0}× |",
            fmt(a[i]),
            fmt(p[i]),
            p[i] / a[i]
        );
    }
    let (a, p) = (agent_rss as f64 / 1024.0, occ_rss as f64 / 1024.0);
    println!(
        "| idle RSS (agent after start; os-collect-config between polls) | MiB | {} | {} | {:.1}× |",
        fmt(a),
        fmt(p),
        p / a
    );
    drop(agent);
}

/// `samples` deployments to `server`, one after the other: from just before each POST
/// to the clock its hook wrote first thing, in ms.
async fn latencies(flue: &Flue, server: &str, samples: usize) -> Vec<f64> {
    let client: Client = flue.client();
    let marker = flue.path(&format!("{server}.stamp"));
    let mut out = Vec::new();
    for _ in 0..samples {
        let body = CreateDeployment {
            input_values: [("marker".to_owned(), json!(marker.display().to_string()))].into(),
            ..CreateDeployment::new("stamp".parse().expect("id"), server.parse().expect("id"))
        };
        let sent = now_ns();
        let d = client.create_deployment(&body).await.expect("deploy");
        let done = flue.finished_within(&d.id, Duration::from_secs(120)).await;
        assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
        let started = stamp(&marker);
        out.push((started.saturating_sub(sent)) as f64 / 1e6);
    }
    out
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}

fn stamp(path: &Path) -> u128 {
    std::fs::read_to_string(path)
        .expect("the hook's stamp")
        .trim()
        .parse()
        .expect("nanoseconds")
}

/// p50, p90 and max.
fn summary(mut v: Vec<f64>) -> [f64; 3] {
    v.sort_by(f64::total_cmp);
    let at = |p: usize| v[((v.len() - 1) * p) / 100];
    [at(50), at(90), at(100)]
}

fn fmt(v: f64) -> String {
    match v {
        v if v >= 100.0 => format!("{v:.0}"),
        v if v >= 10.0 => format!("{v:.1}"),
        v => format!("{v:.2}"),
    }
}
