//! Benchmark (not a test): Flue's end-to-end cost against a raw JetStream round trip on
//! the same broker, how soon a listener hears of a finished deployment, deployment
//! throughput with 1 and 50 agents, and an idle agent's RSS.
//!
//! Run with `bash scripts/bench.sh` (builds the release binaries first).
//! `FLUE_BENCH_N` sets the number of latency samples (default 300).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use flue_proto::{ConfigSpec, CreateDeployment, DeploymentStatus};
use flue_tests::{Flue, write_executable};
use futures_util::StreamExt;
use serde_json::json;

#[tokio::main]
async fn main() {
    let samples: usize = std::env::var("FLUE_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let flue = Flue::start().await;
    println!("Flue benchmark — one nats-server, one gateway, agents as processes, same machine");
    println!("samples per latency figure: {samples}\n");

    let raw = raw_round_trip(&flue, samples).await;
    print_latency(
        "raw JetStream round trip (publish → pull → ack → reply)",
        &raw,
    );

    let hooks = flue.path("hooks");
    std::fs::create_dir_all(&hooks).expect("hooks dir");
    let noop = hooks.join("noop");
    write_executable(&noop, "#!/bin/sh\necho '{\"deploy_status_code\": 0}'\n");
    let spawn = hook_spawn(&noop, samples.min(200)).await;
    print_latency("no-op hook process alone (spawn, stdin, read JSON)", &spawn);

    let spec: ConfigSpec =
        serde_json::from_value(json!({"id": "noop", "group": "noop"})).expect("spec");
    flue.client().create_config(&spec).await.expect("config");
    flue.register("b0").await;
    let agent = flue.agent("b0", std::slice::from_ref(&hooks)).await;
    let rss = rss_kib(agent.pid().expect("agent pid"));

    let (stored, observed) = flue_latency(&flue, samples).await;
    print_latency(
        "Flue no-op deployment, accepted → result stored (gateway clock)",
        &stored,
    );
    print_latency(
        "Flue no-op deployment, POST sent → client sees COMPLETE",
        &observed,
    );
    println!(
        "ratio Flue stored / raw round trip: p50 {:.1}x, p99 {:.1}x\n",
        pct(&stored, 50) / pct(&raw, 50),
        pct(&stored, 99) / pct(&raw, 99)
    );

    let heard = event_latency(&flue, samples).await;
    print_latency(
        "Flue no-op deployment, POST sent → NATS listener gets deployment.completed",
        &heard,
    );
    println!(
        "ratio event / long poll: p50 {:.2}x\n",
        pct(&heard, 50) / pct(&observed, 50)
    );

    stack_chain(&flue, 20, pct(&observed, 50)).await;

    let one = throughput(&flue, &["b0"], 300).await;
    println!("throughput, 1 agent:   {one:>8.1} deployments/s (300 no-op deployments)");
    let mut agents = vec![agent];
    let names: Vec<String> = (1..=50).map(|i| format!("m{i}")).collect();
    for n in &names {
        flue.register(n).await;
    }
    let mut pending = Vec::new();
    for n in &names {
        pending.push(
            flue.spawn_agent_with(n, &format!("agent-{n}"), std::slice::from_ref(&hooks), &[])
                .await,
        );
    }
    for a in &pending {
        a.ready().await;
    }
    agents.extend(pending);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let fifty = throughput(&flue, &refs, 1000).await;
    println!("throughput, 50 agents: {fifty:>8.1} deployments/s (1000 no-op deployments)");
    println!(
        "\nidle agent RSS: {rss} KiB ({:.1} MiB)",
        rss as f64 / 1024.0
    );
    drop(agents);
}

/// A stack of `n` no-op deployments on one server, each depending on the one before:
/// what the engine adds per unit to a plain deployment's round trip, and how long an
/// update that changes nothing takes.
async fn stack_chain(flue: &Flue, n: usize, plain_p50_ms: f64) {
    use flue_engine::stack::driver::{self, Options, Source};
    use flue_engine::stack::template::Template;
    let mut text = String::from(
        "heat_template_version: 2018-08-31\nresources:\n  noop:\n    type: OS::Heat::SoftwareConfig\n    properties: {group: noop, config: ''}\n",
    );
    for i in 0..n {
        let after = if i == 0 {
            String::new()
        } else {
            format!("    depends_on: d{}\n", i - 1)
        };
        text.push_str(&format!(
            "  d{i}:\n    type: OS::Heat::SoftwareDeployment\n{after}    properties: {{config: {{get_resource: noop}}, server: b0}}\n"
        ));
    }
    let template = Template::parse(&text, &flue.path(".")).expect("template");
    let given = Default::default();
    let source = Source {
        template: &template,
        given: &given,
    };
    let opts = Options {
        force: false,
        report: Arc::new(|_: &driver::Event| {}),
    };
    let client = flue.client();
    let id = flue_proto::StackId::new("bench").expect("id");
    let t = Instant::now();
    let stack = driver::create(&client, &id, source, &opts)
        .await
        .expect("create");
    let create = t.elapsed();
    assert_eq!(stack.status.to_string(), "CREATE_COMPLETE");
    let t = Instant::now();
    driver::update(&client, &id, source, &opts)
        .await
        .expect("update");
    let update = t.elapsed();
    let per_unit = create.as_secs_f64() * 1e3 / n as f64;
    println!(
        "stack of {n} chained no-op units: create {:.0} ms ({per_unit:.1} ms per unit, {:.1}x a plain deployment's {plain_p50_ms:.1} ms); update with nothing changed {:.0} ms ({:.1} ms per unit)\n",
        create.as_secs_f64() * 1e3,
        per_unit / plain_p50_ms,
        update.as_secs_f64() * 1e3,
        update.as_secs_f64() * 1e3 / n as f64,
    );
}

fn pct(sorted: &[Duration], p: usize) -> f64 {
    let i = ((sorted.len() - 1) * p) / 100;
    sorted[i].as_secs_f64() * 1000.0
}

fn print_latency(what: &str, samples: &[Duration]) {
    println!(
        "{what}\n    p50 {:.3} ms   p99 {:.3} ms   (n={})",
        pct(samples, 50),
        pct(samples, 99),
        samples.len()
    );
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Publish a request into a stream, pull + ack it in a responder, publish a reply into a
/// second stream, pull + ack that: the broker work one Flue deployment needs at least.
async fn raw_round_trip(flue: &Flue, n: usize) -> Vec<Duration> {
    let client = flue.nats.client().await;
    let js = jetstream::new(client);
    for (name, subj) in [("RAWREQ", "raw.req"), ("RAWRESP", "raw.resp")] {
        js.create_stream(stream::Config {
            name: name.into(),
            subjects: vec![subj.into()],
            ..Default::default()
        })
        .await
        .expect("stream");
    }
    let consumer = |stream_name: &'static str| {
        let js = js.clone();
        async move {
            js.get_stream(stream_name)
                .await
                .expect("stream")
                .create_consumer(pull::Config {
                    durable_name: Some(format!("{stream_name}-c")),
                    ..Default::default()
                })
                .await
                .expect("consumer")
        }
    };
    let req_consumer = consumer("RAWREQ").await;
    let resp_consumer = consumer("RAWRESP").await;
    let responder_js = js.clone();
    let responder = tokio::spawn(async move {
        let mut msgs = req_consumer.messages().await.expect("messages");
        while let Some(Ok(m)) = msgs.next().await {
            m.double_ack().await.expect("ack");
            responder_js
                .publish("raw.resp", m.payload.clone())
                .await
                .expect("publish")
                .await
                .expect("puback");
        }
    });
    let mut replies = resp_consumer.messages().await.expect("messages");
    let payload = bytes::Bytes::from(vec![b'x'; 512]);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        js.publish("raw.req", payload.clone())
            .await
            .expect("publish")
            .await
            .expect("puback");
        let m = replies.next().await.expect("reply").expect("reply ok");
        m.ack().await.expect("ack");
        out.push(t.elapsed());
    }
    responder.abort();
    out.sort();
    out
}

async fn hook_spawn(hook: &std::path::Path, n: usize) -> Vec<Duration> {
    use tokio::io::AsyncWriteExt;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let mut child = tokio::process::Command::new(hook)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn hook");
        let mut stdin = child.stdin.take().expect("stdin");
        // A hook may exit without reading its stdin (EPIPE); the agent tolerates that too.
        let _ = stdin.write_all(b"{}").await;
        drop(stdin);
        let output = child.wait_with_output().await.expect("hook");
        let _: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
        out.push(t.elapsed());
    }
    out.sort();
    out
}

fn create(server: &str) -> CreateDeployment {
    serde_json::from_value(json!({"config_id": "noop", "server_id": server})).expect("body")
}

async fn flue_latency(flue: &Flue, n: usize) -> (Vec<Duration>, Vec<Duration>) {
    let client = flue.client();
    let mut stored = Vec::with_capacity(n);
    let mut observed = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let d = client
            .create_deployment(&create("b0"))
            .await
            .expect("create");
        let done = client
            .wait_until_terminal(&d.id, Duration::from_secs(60), |_| {})
            .await
            .expect("finish");
        observed.push(t.elapsed());
        assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
        let gap = done.updated_at - done.created_at;
        stored.push(Duration::from_secs_f64(gap.as_seconds_f64().max(0.0)));
    }
    stored.sort();
    observed.sort();
    (stored, observed)
}

/// POST → the `deployment.completed` event on a core NATS subscription (what any listener
/// on the event subjects sees), one deployment at a time.
async fn event_latency(flue: &Flue, n: usize) -> Vec<Duration> {
    let client = flue.client();
    let nats = flue.nats.client().await;
    let mut completed = nats
        .subscribe("flue.default.evt.deployment.~.b0.completed")
        .await
        .expect("subscribe");
    nats.flush().await.expect("flush");
    let mut heard = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let d = client
            .create_deployment(&create("b0"))
            .await
            .expect("create");
        let id = format!("deployment:{}:completed", d.id);
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(60), completed.next())
                .await
                .expect("the completed event within 60 s")
                .expect("subscription open");
            let event: flue_proto::CloudEvent =
                serde_json::from_slice(&msg.payload).expect("a CloudEvent");
            if event.id == id {
                break;
            }
        }
        heard.push(t.elapsed());
    }
    heard.sort();
    heard
}

/// Creates `n` deployments spread over `servers` (32 requests in flight) and returns
/// deployments per second from the first acceptance to the last stored result.
async fn throughput(flue: &Flue, servers: &[&str], n: usize) -> f64 {
    let client = Arc::new(flue.client());
    let gate = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = Vec::new();
    for i in 0..n {
        let client = client.clone();
        let gate = gate.clone();
        let body = create(servers[i % servers.len()]);
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire().await.expect("semaphore");
            client.create_deployment(&body).await.expect("create")
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.expect("task").id);
    }
    let mut first = None;
    let mut last = None;
    for id in &ids {
        let d = client
            .wait_until_terminal(id, Duration::from_secs(300), |_| {})
            .await
            .expect("finish");
        assert_eq!(d.status, DeploymentStatus::Complete, "{d:?}");
        first = Some(first.map_or(d.created_at, |f: time::OffsetDateTime| f.min(d.created_at)));
        last = Some(last.map_or(d.updated_at, |l: time::OffsetDateTime| l.max(d.updated_at)));
    }
    let span = (last.expect("some") - first.expect("some")).as_seconds_f64();
    n as f64 / span
}
