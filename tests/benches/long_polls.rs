//! Benchmark (not a test): N concurrent long polls (default 10,000, `FLUE_BENCH_POLLS`)
//! on one gateway with default settings (issue 24, point 4). Half of them on distinct
//! deployments, the other half on a tenth as many (ten polls each, on deployments the first
//! half polls too); every tenth deployment runs (its agent starts once the polls are sent),
//! the rest stay QUEUED and their polls end after `wait_secs` (`FLUE_BENCH_WAIT`, default
//! 30). One HTTP/1.1 connection per poll.
//!
//! Reported: the polls' answers by status (none should be 503), the time until all are
//! answered, how late after its `wait_secs` a QUEUED deployment's poll answers (p50 / max:
//! the time its gateway took to take it in, first read included), whether every running
//! deployment's poll saw it COMPLETE, the broker reads of deployment records while the
//! polls start (direct gets of the bucket: one per poll would be N), and the gateway's
//! RSS before and at its peak (`/proc/<pid>/status` VmRSS, sampled every 250 ms).
//!
//! Runs the binaries of the target dir it is built in, in whatever profile:
//! `bash scripts/bench.sh long-polls` (release), or `cargo build --workspace --bins &&
//! cargo build -p flue-tests --bench long_polls` and `target/debug/deps/long_polls-*`
//! (debug; `ulimit -n 20000` first: the bench and the gateway hold a socket per poll).

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use flue_proto::{Deployment, DeploymentId, DeploymentStatus};
use flue_tests::{Flue, RecordReads};
use futures_util::{FutureExt, StreamExt};

/// Requests in flight while setting up.
const IN_FLIGHT: usize = 16;
/// Every this-many-th deployment runs.
const RUNS_EVERY: usize = 10;

/// One poll's outcome.
struct Answer {
    id: DeploymentId,
    /// The HTTP status, or the transport error.
    status: Result<u16, String>,
    /// The body when it is no deployment (an error's).
    error: Option<String>,
    deployment: Option<Deployment>,
    /// Since the polls started.
    at: Duration,
}

#[tokio::main]
async fn main() {
    let env = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let polls = env("FLUE_BENCH_POLLS", 10_000);
    let wait = env("FLUE_BENCH_WAIT", 30) as u64;
    let distinct = polls / 2;
    let shared = (polls / 20).max(1);

    let flue = Flue::start().await;
    flue.script_config("c", "#!/bin/sh\necho done\n", &[], &[])
        .await;
    flue.register("runs").await;
    flue.register("idle").await;
    let started = Instant::now();
    let ids: Vec<(DeploymentId, bool)> = futures_util::stream::iter(0..distinct)
        .map(|i| {
            let flue = &flue;
            async move {
                let runs = i % RUNS_EVERY == 0;
                let server = if runs { "runs" } else { "idle" };
                (flue.deploy("c", server, &[]).await.id, runs)
            }
        })
        .buffered(IN_FLIGHT)
        .collect()
        .await;
    println!(
        "{distinct} deployments created in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let runs: BTreeMap<DeploymentId, bool> = ids.iter().cloned().collect();

    let gateway = flue.gateway.pid().expect("gateway running");
    let rss_before = rss_kib(gateway);
    let peak = Arc::new(AtomicU64::new(rss_before));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                peak.fetch_max(rss_kib(gateway), Ordering::Relaxed);
            }
        })
    };
    let reads = RecordReads::count(&flue).await;

    let http = flue.gateway.http_with(
        reqwest::Client::builder()
            .http1_only()
            .pool_max_idle_per_host(0)
            .build()
            .expect("http client"),
    );
    let base = flue.gateway.url().to_owned();
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..polls)
        .map(|i| {
            let (id, runs) = ids[if i < distinct { i } else { i % shared }].clone();
            let secs = if runs { 60 } else { wait };
            let url = format!("{base}/v1/deployments/{id}?wait_secs={secs}");
            let http = http.clone();
            tokio::spawn(async move {
                let (status, body) = match http.get(&url).send().await {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        (Ok(status), resp.text().await.unwrap_or_default())
                    }
                    Err(e) => (Err(e.to_string()), String::new()),
                };
                let deployment = serde_json::from_str(&body).ok();
                Answer {
                    id,
                    status,
                    error: deployment.is_none().then_some(body),
                    deployment,
                    at: t0.elapsed(),
                }
            })
        })
        .collect();
    // A gateway that answers 503 under the polls (the old one did) may refuse the agent's
    // start-up calls too: it is started again, a few times at most.
    let mut agent = None;
    for _ in 0..5 {
        match AssertUnwindSafe(flue.agent("runs", &[]))
            .catch_unwind()
            .await
        {
            Ok(started) => {
                agent = Some(started);
                break;
            }
            Err(_) => println!("the agent could not start (see above); starting it again"),
        }
    }
    let _agent = agent.expect("the agent starts");
    let mut answers = Vec::with_capacity(polls);
    for task in tasks {
        answers.push(task.await.expect("poll task"));
    }
    let all = t0.elapsed();
    sampler.abort();
    let peak = peak.load(Ordering::Relaxed);

    let mut by_status = BTreeMap::<String, usize>::new();
    let mut errors = BTreeMap::<String, usize>::new();
    let mut late = Vec::new();
    let (mut complete, mut running) = (0, 0);
    for a in &answers {
        let key = match &a.status {
            Ok(s) => s.to_string(),
            Err(e) => format!("error: {e}"),
        };
        *by_status.entry(key).or_default() += 1;
        if let Some(body) = a.error.clone().filter(|b| !b.is_empty()) {
            *errors.entry(body).or_default() += 1;
        }
        if runs[&a.id] {
            running += 1;
            if a.deployment
                .as_ref()
                .is_some_and(|d| d.status == DeploymentStatus::Complete)
            {
                complete += 1;
            }
        } else if a.status == Ok(200) {
            late.push(a.at.saturating_sub(Duration::from_secs(wait)));
        }
    }
    late.sort();
    let p = |q: f64| {
        late.get(((late.len() as f64 * q) as usize).min(late.len().saturating_sub(1)))
            .map_or(f64::NAN, |d| d.as_secs_f64())
    };
    println!(
        "{polls} long polls ({distinct} on distinct deployments, {} on {shared} of them), wait_secs {wait}",
        polls - distinct
    );
    println!("answers by status: {by_status:?}");
    if !errors.is_empty() {
        println!("error bodies: {errors:?}");
        let warnings = flue.gateway.logs().lines();
        let mut kinds = BTreeMap::<String, usize>::new();
        for line in warnings.iter().filter(|l| l.contains(" WARN ")) {
            // The message and the cause, without the time and the key read.
            let text = line.split_once(" WARN ").map_or(line.as_str(), |(_, t)| t);
            let text = match text.split_once("cannot read \"") {
                Some((head, tail)) => {
                    let tail = tail.split_once('"').map_or("", |(_, t)| t);
                    format!("{head}cannot read …{tail}")
                }
                None => text.to_owned(),
            };
            let text: String = text.chars().take(240).collect();
            *kinds.entry(text).or_default() += 1;
        }
        println!("gateway warnings: {kinds:#?}");
    }
    println!(
        "all answered {:.1} s after the first was sent; QUEUED polls answered past their wait_secs by p50 {:.2} s, max {:.2} s",
        all.as_secs_f64(),
        p(0.5),
        p(1.0)
    );
    println!("polls of running deployments that saw them COMPLETE: {complete} of {running}");
    println!(
        "broker reads of deployment records while the polls ran: {} ({:.4} per poll)",
        reads.so_far(),
        reads.so_far() as f64 / polls as f64
    );
    println!(
        "gateway RSS: {:.1} MiB before, {:.1} MiB at peak ({:.2}x; {:.1} KiB per poll)",
        rss_before as f64 / 1024.0,
        peak as f64 / 1024.0,
        peak as f64 / rss_before as f64,
        peak.saturating_sub(rss_before) as f64 / polls as f64
    );
}

/// A process's resident set, KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
