//! Benchmark (not a test): Flue's throughput and latency against its targets (issue 11,
//! point 6): at least 5,000 deployments/s accepted and answered through one gateway on
//! one broker, and a no-op deployment within 1.5× the physical floor.
//!
//! One Flue the harness's secure way without TLS ([`Flue::start`]: operator-mode broker,
//! tokens, per-server credentials, signed requests and answers), then, in this order:
//!
//! 1. **the floor**, on the same broker in the same run ([`floor`]): a raw JetStream round
//!    trip (publish acked → pull → ack → reply publish acked → pull → ack) and one
//!    `fork/exec` of the no-op hook (spawn, stdin, JSON read back);
//! 2. **latency**: one real `flue-agent` process running the real no-op hook (under its
//!    hook guard, as always), one deployment at a time, each measured two ways: the
//!    record's own timestamps (`created_at`, taken when the gateway accepted it, →
//!    `updated_at`, when the result was stored) and as a client sees it (POST sent →
//!    the long poll returns COMPLETE); p50 / p99 and the ratio of each p50 to the floor's
//!    (raw round trip p50 + hook spawn p50). Around them, what the broker did per
//!    deployment ([`count`]): messages each connection sent it and got from it, and
//!    appends to each stream, asked of the broker itself;
//! 3. **the ceiling** ([`ceiling`]): the least JetStream work of a durable deployment, with
//!    no Flue code, pipelined by as many agents and producers as the throughput phase
//!    uses, for the same window: bare, then with four lifecycle events; its rate and its
//!    CPU per deployment, and what that CPU allows on this machine's cores;
//! 4. **throughput**: N simulated agents ([`flue_tests::sim`]: each its own connection and
//!    consumer, signed no-op answers, no hook) and C HTTP clients in this process, each
//!    POSTing no-op deployments one after another for a fixed window, to the servers in
//!    turn. Accepted: 202s received in the window. Answered: `deployment.completed`
//!    events (published once the result is stored) heard on the event subjects in the
//!    window. Both per second and as a ratio to 5,000/s; then the drain until every
//!    accepted deployment is answered. CPU seconds of the broker, the gateway and this
//!    process (simulated agents + clients) over the window, from `/proc`.
//!
//! Beside the floor, the cost of one durable write where the agent keeps its ledger
//! ([`floor::durable_write`]: 4 KiB appended and fsynced) and the *durable floor*, floor +
//! that write: what an agent keeping exactly-once across an OS crash must pay at least
//! (its `started` entry durable before the hook runs). Each latency p50 is also divided by it.
//!
//! The last lines are issue 24's targets, each against its reference of the same run:
//! answered overall / the ceiling with events (≥ 0.8), broker CPU per deployment / the
//! ceiling's with events (≤ 1.2×), latency p50 / the floor (≤ 2×).
//!
//! Settings (environment): `FLUE_BENCH_N` latency samples (default 200),
//! `FLUE_BENCH_AGENTS` simulated agents (200), `FLUE_BENCH_CLIENTS` HTTP clients (64),
//! `FLUE_BENCH_SECS` window (20; 0 measures the floor and latency only). With `perf` installed, the user-space instructions of
//! each process over the window are counted too (`perf stat`): per deployment, the one
//! figure a busy shared machine hardly changes. `FLUE_BENCH_PERF=<file>` records a CPU profile of the
//! broker, the gateway and this process over the window with `perf record`. Run with
//! `bash scripts/bench.sh throughput`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use flue_proto::{ConfigSpec, CreateDeployment, DeploymentStatus, ServerId};
use flue_tests::sim::{self, SimAgents, SimOptions};
use flue_tests::{Flue, broker_has_read};
use futures_util::StreamExt;
use serde_json::json;

#[path = "ceiling.rs"]
mod ceiling;
#[path = "count.rs"]
mod count;
#[path = "floor.rs"]
mod floor;
#[path = "measure.rs"]
mod measure;

use measure::{bounded, cores, cpu_secs, loadavg, ms, pct, setting};

/// Deployments per second the issue asks for.
const TARGET_PER_SEC: f64 = 5000.0;
/// Latency the issue allows, as a multiple of the floor.
const TARGET_RATIO: f64 = 1.5;
/// Issue 24: latency p50 at most this multiple of the floor.
const TARGET_LATENCY: f64 = 2.0;
/// Issue 24: answered overall at least this share of the ceiling with events.
const TARGET_SHARE: f64 = 0.8;
/// Issue 24: broker CPU per deployment at most this multiple of the ceiling's with events.
const TARGET_BROKER_CPU: f64 = 1.2;
/// Registrations in flight at once.
const REGISTER_AT_ONCE: usize = 16;
/// Simulated agents connecting at once.
const CONNECT_AT_ONCE: usize = 64;
/// Bound on any phase: a phase that takes longer is a finding, not a hang.
const PHASE_LIMIT: Duration = Duration::from_secs(300);

#[tokio::main]
async fn main() {
    let samples = setting("FLUE_BENCH_N", 200);
    let agents_n = setting("FLUE_BENCH_AGENTS", 200);
    let clients_n = setting("FLUE_BENCH_CLIENTS", 64);
    let window = Duration::from_secs(setting("FLUE_BENCH_SECS", 20) as u64);
    println!("Flue throughput and latency benchmark (issue 11, point 6)");
    println!(
        "latency samples {samples}; simulated agents {agents_n}; HTTP clients {clients_n}; window {window:?}; load average at start: {}",
        loadavg()
    );
    let flue = Flue::start().await;

    // 1. The floor.
    let mut raw = floor::raw_round_trip(&flue.nats, samples).await;
    raw.sort();
    let hooks = flue.path("hooks");
    std::fs::create_dir_all(&hooks).expect("hooks dir");
    flue_tests::write_executable(
        &hooks.join("noop"),
        "#!/bin/sh\necho '{\"deploy_status_code\": 0}'\n",
    );
    let spawn = floor::hook_spawn(&hooks.join("noop"), samples).await;
    let floor_ms = ms(pct(&raw, 50)) + ms(pct(&spawn, 50));
    println!(
        "floor: raw JetStream round trip p50 {:.3} ms p99 {:.3} ms; no-op hook spawn p50 {:.3} ms p99 {:.3} ms; floor (sum of p50s) {floor_ms:.3} ms",
        ms(pct(&raw, 50)),
        ms(pct(&raw, 99)),
        ms(pct(&spawn, 50)),
        ms(pct(&spawn, 99)),
    );
    // The scratch dir holds the agents' state dirs (`agent-<server>`): the ledger's disk.
    let fsync = floor::durable_write(&hooks, samples);
    let durable_floor_ms = floor_ms + ms(pct(&fsync, 50));
    println!(
        "durable write (4 KiB append + fsync, agent state dir's filesystem): p50 {:.3} ms p99 {:.3} ms; durable floor (floor + one durable write) {durable_floor_ms:.3} ms",
        ms(pct(&fsync, 50)),
        ms(pct(&fsync, 99)),
    );

    // 2. Latency with a real agent and hook.
    let client = flue.client();
    let noop: ConfigSpec =
        serde_json::from_value(json!({"id": "noop", "group": "noop"})).expect("spec");
    client.create_config(&noop).await.expect("config");
    flue.register("lat").await;
    let agent = flue.agent("lat", std::slice::from_ref(&hooks)).await;
    let lat = ServerId::new("lat").expect("id");
    let mut stored = Vec::with_capacity(samples);
    let mut observed = Vec::with_capacity(samples);
    let mut segments: [Vec<Duration>; 4] = Default::default();
    let system = count::system_client(&flue.gateway.state_dir(), &flue.nats.url()).await;
    let counted_before = count::snapshot(&system).await;
    for _ in 0..samples {
        let t = Instant::now();
        let d = client
            .create_deployment(&CreateDeployment::new(
                "noop".parse().expect("id"),
                lat.clone(),
            ))
            .await
            .expect("create");
        let done = client
            .wait_until_terminal(&d.id, Duration::from_secs(60), |_| {})
            .await
            .expect("finish");
        observed.push(t.elapsed());
        assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
        let gap = |from: time::OffsetDateTime, to: time::OffsetDateTime| {
            Duration::from_secs_f64((to - from).as_seconds_f64().max(0.0))
        };
        stored.push(gap(done.created_at, done.updated_at));
        // The agent's clock is the same machine's: the segments add up.
        if let (Some(delivered), Some(started), Some(finished)) =
            (done.delivered_at, done.started_at, done.finished_at)
        {
            segments[0].push(gap(done.created_at, delivered));
            segments[1].push(gap(delivered, started));
            segments[2].push(gap(started, finished));
            segments[3].push(gap(finished, done.updated_at));
        }
    }
    let counted_after = count::snapshot(&system).await;
    drop(agent);
    count::print_per_deployment(&counted_before, &counted_after, samples);
    stored.sort();
    observed.sort();
    let latency = [
        ("accepted → result stored (record timestamps)", &stored),
        ("POST sent → client sees COMPLETE", &observed),
    ];
    let names = [
        "accepted → agent has it (gateway writes, request publish, pull)",
        "agent has it → started (verify, ledger read)",
        "started → hook finished (guard spawned, ledger `started` with its group flushed, `started` queued, go, hook)",
        "hook finished → result stored (ledger `done` flushed, `finished` published, gateway applies)",
    ];
    for (name, s) in names.iter().zip(&mut segments) {
        s.sort();
        if !s.is_empty() {
            println!("  of which {name}: p50 {:.3} ms", ms(pct(s, 50)));
        }
    }
    for (what, s) in latency {
        println!(
            "no-op deployment, {what}: p50 {:.3} ms p99 {:.3} ms; p50 / floor {:.2}× (target ≤ {TARGET_RATIO}×); p50 / durable floor {:.2}×",
            ms(pct(s, 50)),
            ms(pct(s, 99)),
            ms(pct(s, 50)) / floor_ms,
            ms(pct(s, 50)) / durable_floor_ms,
        );
    }
    println!("load average after the latency runs: {}", loadavg());
    let latency_target = format!(
        "target: latency p50 (accepted → stored) / floor = {:.2}× (≤ {TARGET_LATENCY}×); POST → COMPLETE {:.2}×",
        ms(pct(&stored, 50)) / floor_ms,
        ms(pct(&observed, 50)) / floor_ms,
    );
    if window.is_zero() {
        println!("FLUE_BENCH_SECS=0: throughput not measured");
        println!("{latency_target}");
        return;
    }

    // 3. The broker's ceiling: raw deployments with no Flue code, bare and with events.
    let mut ceilings = Vec::new();
    for (events, in_flight) in [(false, 1), (false, 16), (true, 1)] {
        let c = ceiling::raw_throughput(
            &flue.nats, agents_n, clients_n, in_flight, window, events, cpu_secs,
        )
        .await;
        let what = match (events, in_flight) {
            (true, _) => "with 4 lifecycle events (2 KV puts, 2 stream appends, 4 event appends)",
            (false, 1) => "bare (2 KV puts, 2 stream appends)",
            (false, _) => "bare, 16 in flight per producer",
        };
        let per = |v: f64| v * 1e6 / c.accepted.max(1) as f64;
        let cpu_per = per(c.broker_cpu) + per(c.bench_cpu);
        let overall = c.accepted as f64 / c.drained_secs;
        println!(
            "ceiling, raw JetStream deployments {what}, {agents_n} agents, {clients_n} producers: accepted {:.0}/s over {:.1} s, every one answered {:.1} s after the start ({overall:.0}/s, {:.3} of {TARGET_PER_SEC}/s); CPU per deployment: broker {:.0} µs, bench {:.0} µs; {} cores at that CPU: at most {:.0}/s",
            c.accepted as f64 / c.window_secs,
            c.window_secs,
            c.drained_secs,
            overall / TARGET_PER_SEC,
            per(c.broker_cpu),
            per(c.bench_cpu),
            cores(),
            cores() as f64 * 1e6 / cpu_per,
        );
        ceilings.push((overall, per(c.broker_cpu)));
    }
    println!("load average after the ceiling: {}", loadavg());

    // 4. Throughput with simulated agents.
    let servers = bounded(
        PHASE_LIMIT,
        sim::register(&flue.admin_client(), "sim", agents_n, REGISTER_AT_ONCE),
        "registration",
    )
    .await;
    let ids: Arc<Vec<ServerId>> = Arc::new(servers.iter().map(|s| s.id.clone()).collect());
    let options = SimOptions {
        nats_url: flue.nats.url(),
        tenant: "default".parse().expect("tenant"),
        heartbeat: Duration::from_secs(3),
        connecting_at_once: CONNECT_AT_ONCE,
    };
    let agents = SimAgents::start(&options, servers);
    agents.wait_ready(PHASE_LIMIT).await;
    let completed = Arc::new(AtomicU64::new(0));
    let listening = listen_completed(&flue, completed.clone()).await;

    let broker = flue.nats.pid().expect("broker running");
    let gateway = flue.gateway.pid().expect("gateway running");
    let me = std::process::id();
    let load_before = loadavg();
    let cpu_before = [cpu_secs(broker), cpu_secs(gateway), cpu_secs(me)];
    let answered_before = completed.load(Ordering::Relaxed);
    let accepted = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let deadline = tokio::time::Instant::now() + window;
    let mut posting = tokio::task::JoinSet::new();
    for c in 0..clients_n {
        let (client, ids, accepted) = (flue.client(), ids.clone(), accepted.clone());
        posting.spawn(async move {
            let mut i = c;
            while tokio::time::Instant::now() < deadline {
                let body =
                    CreateDeployment::new("noop".parse().expect("id"), ids[i % ids.len()].clone());
                client.create_deployment(&body).await.expect("create");
                accepted.fetch_add(1, Ordering::Relaxed);
                i += clients_n;
            }
        });
    }
    // A CPU profile of the three processes over the window, when asked for.
    let profiling = std::env::var("FLUE_BENCH_PERF").ok().map(|out| {
        std::process::Command::new("perf")
            .args(["record", "-F", "499", "-g", "-o", &out, "-p"])
            .arg(format!("{broker},{gateway},{me}"))
            .args(["--", "sleep"])
            .arg(window.as_secs().to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("perf record")
    });
    // Instructions each process runs over the window: unlike CPU time, hardly changed by
    // what else the machine runs (it is shared), so the figure to compare builds by.
    let counting: Vec<_> = [broker, gateway, me]
        .iter()
        .map(|pid| {
            let out = std::env::temp_dir().join(format!("flue-bench-{me}-{pid}.perfstat"));
            let child = std::process::Command::new("perf")
                .args(["stat", "-x", ",", "-e", "instructions:u", "-o"])
                .arg(&out)
                .args(["-p", &pid.to_string(), "--", "sleep"])
                .arg(window.as_secs().to_string())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .ok();
            (child, out)
        })
        .collect();
    tokio::time::sleep_until(deadline).await;
    let in_window = t.elapsed().as_secs_f64();
    let accepted_in_window = accepted.load(Ordering::Relaxed);
    let answered_in_window = completed.load(Ordering::Relaxed) - answered_before;
    let cpu_after = [cpu_secs(broker), cpu_secs(gateway), cpu_secs(me)];
    let load_after = loadavg();
    while posting.join_next().await.is_some() {}
    let instructions: Vec<Option<f64>> = counting
        .into_iter()
        .map(|(child, out)| {
            let _ = child?.wait();
            let text = std::fs::read_to_string(&out).ok()?;
            let _ = std::fs::remove_file(&out);
            text.lines()
                .find(|l| l.contains("instructions"))
                .and_then(|l| l.split(',').next())
                .and_then(|n| n.trim().parse().ok())
        })
        .collect();
    if let Some(mut perf) = profiling {
        // `perf` ends with its `sleep`, which ended with the window.
        let _ = perf.wait();
    }
    let total = accepted.load(Ordering::Relaxed);
    bounded(
        PHASE_LIMIT,
        until_answered(completed.clone(), answered_before + total),
        "every accepted deployment answered",
    )
    .await;
    let drained = t.elapsed().as_secs_f64();
    listening.abort();
    let accepted_rate = accepted_in_window as f64 / in_window;
    let answered_rate = answered_in_window as f64 / in_window;
    println!(
        "throughput over {in_window:.1} s ({agents_n} simulated agents, {clients_n} clients; load average {load_before} → {load_after}):"
    );
    println!(
        "  accepted {accepted_in_window} = {accepted_rate:.0}/s ({:.3} of {TARGET_PER_SEC}/s)",
        accepted_rate / TARGET_PER_SEC
    );
    println!(
        "  answered (deployment.completed) {answered_in_window} = {answered_rate:.0}/s ({:.3} of {TARGET_PER_SEC}/s)",
        answered_rate / TARGET_PER_SEC
    );
    println!(
        "  all {total} accepted answered {drained:.1} s after the first POST ({:.0}/s overall); agents answered {}, rejected {}",
        total as f64 / drained,
        agents.answered(),
        agents.rejected()
    );
    let (raw, raw_broker_us) = *ceilings.last().expect("the ceiling with events ran");
    let share = total as f64 / drained / raw;
    println!("  answered overall / the ceiling with events ({raw:.0}/s overall): {share:.3}");
    let names = ["broker", "gateway", "bench (simulated agents + clients)"];
    for (i, name) in names.iter().enumerate() {
        let used = cpu_after[i] - cpu_before[i];
        let per = |v: f64| v / accepted_in_window.max(1) as f64;
        let counted = instructions[i].map_or(String::new(), |n| {
            format!(
                "; {:.2} M instructions (user) per accepted deployment",
                per(n) / 1e6
            )
        });
        println!(
            "  CPU {name}: {used:.1} s = {:.2} cores; {:.0} µs per accepted deployment{counted}",
            used / in_window,
            per(used * 1e6)
        );
    }
    agents.stop().await;
    let broker_us = (cpu_after[0] - cpu_before[0]) * 1e6 / accepted_in_window.max(1) as f64;
    println!(
        "target: throughput (answered overall) / ceiling with events = {share:.3} (≥ {TARGET_SHARE})"
    );
    println!(
        "target: broker CPU per deployment / ceiling with events = {:.2}× ({broker_us:.0} / {raw_broker_us:.0} µs; ≤ {TARGET_BROKER_CPU}×)",
        broker_us / raw_broker_us
    );
    println!("{latency_target}");
}

/// Counts `deployment.completed` events on the tenant's event subjects (the gateway
/// publishes one once a result is stored) into `count`; aborted by the caller.
async fn listen_completed(flue: &Flue, count: Arc<AtomicU64>) -> tokio::task::JoinHandle<()> {
    let client = flue.nats.events_client().await;
    let mut sub = client
        .subscribe("flue.default.evt.deployment.*.*.completed")
        .await
        .expect("subscribe");
    broker_has_read(&client, &client.new_inbox()).await;
    tokio::spawn(async move {
        let _client = client;
        while sub.next().await.is_some() {
            count.fetch_add(1, Ordering::Relaxed);
        }
    })
}

/// Resolves once `count` reaches `target` (polled: the counter is the event).
async fn until_answered(count: Arc<AtomicU64>, target: u64) {
    flue_tests::wait_until(
        "every accepted deployment answered",
        PHASE_LIMIT,
        move || (count.load(Ordering::Relaxed) >= target).then_some(()),
    )
    .await;
}
