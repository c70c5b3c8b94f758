//! Benchmark (not a test): a backlog of answers drained by a gateway that starts (issue
//! 24, point 3: "a restarted gateway with 358 pending deployments took 19 s to become
//! ready"; answers applied at 90–280 a minute while a backlog waited).
//!
//! One Flue the harness's secure way ([`Flue::start`]), S servers registered, then:
//!
//! 1. **the ceilings**, on the same broker in the same run: [`ceiling::raw_throughput`] with
//!    four lifecycle events (the reference `throughput.rs` reads Flue against; measured
//!    again after the drain, and the mean of the two taken, since the machine is shared),
//!    and a raw
//!    *drain* ([`raw_drain`]): N deployments' three answers each waiting in a stream, taken
//!    by one collector that, per answer, writes the record's key, publishes an acknowledged
//!    event and acks (no Flue code: the least a drain of the same backlog costs);
//! 2. N deployments accepted through the API while no agent runs (their requests wait in
//!    the request stream), then the gateway **killed** (SIGKILL);
//! 3. S simulated agents ([`flue_tests::sim`]) answer all N (`started`, standing for
//!    `delivered` too as from a real agent whose hook starts at once, and `finished`,
//!    signed) into the response stream while no gateway runs;
//! 4. the gateway **started** again: the time until it says it listens (*ready*), and
//!    the time until the N `deployment.completed` events are out (*drained*), from the
//!    start; the drain rate (N over the time from ready to drained) and its ratio to
//!    each ceiling; the same from the first `deployment.completed` on (before it, the
//!    broker still keeps the response consumer's pin for the killed gateway: its pin
//!    timeout, a crash's cost, not the rate answers are applied at); the CPU per deployment of the ceiling with events (broker + bench)
//!    over the drain's (broker + gateway), which a loaded machine hardly changes; the
//!    records read back through the API at the end, all COMPLETE.
//!
//! Goals (issue 24): ready within 5 s with 10,000 pending, drained at ≥ 0.8 of the
//! ceiling. Settings (environment): `FLUE_BENCH_N` deployments (default 10,000),
//! `FLUE_BENCH_AGENTS` servers (100), `FLUE_BENCH_SECS` the ceiling's window (10). Run
//! with `bash scripts/bench.sh backlog`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull};
use flue_proto::{ConfigSpec, CreateDeployment, DeploymentStatus, ServerId};
use flue_tests::sim::{self, SimAgents, SimOptions};
use flue_tests::{Flue, Nats, broker_has_read};
use futures_util::StreamExt;
use serde_json::json;

#[path = "ceiling.rs"]
mod ceiling;
#[path = "measure.rs"]
mod measure;

use measure::{bounded, cpu_secs, loadavg, setting};

/// Time to ready the issue allows with 10,000 pending.
const TARGET_READY: Duration = Duration::from_secs(5);
/// Drain rate the issue asks for, as a share of the ceiling.
const TARGET_SHARE: f64 = 0.8;
/// Registrations in flight at once.
const REGISTER_AT_ONCE: usize = 16;
/// Simulated agents connecting at once.
const CONNECT_AT_ONCE: usize = 64;
/// Deployments created at once.
const CREATE_AT_ONCE: usize = 64;
/// The raw collector's answers in hand at once (as the ceiling's collector).
const COLLECTOR_IN_FLIGHT: usize = 256;
/// Bound on any phase: a phase that takes longer is a finding, not a hang.
const PHASE_LIMIT: Duration = Duration::from_secs(900);
/// Answers per deployment a simulated agent sends: `started` (standing for `delivered`
/// too, as from a real agent whose hook starts at once) and the result.
const ANSWERS_PER_DEPLOYMENT: f64 = 2.0;

#[tokio::main]
async fn main() {
    let n = setting("FLUE_BENCH_N", 10_000);
    let servers_n = setting("FLUE_BENCH_AGENTS", 100);
    let window = Duration::from_secs(setting("FLUE_BENCH_SECS", 10) as u64);
    println!("Flue backlog benchmark (issue 24, point 3)");
    println!(
        "deployments {n}; servers (simulated agents) {servers_n}; ceiling window {window:?}; load average at start: {}",
        loadavg()
    );
    let mut flue = Flue::start().await;

    // 1. The ceilings (the one with events again after the drain: the machine is shared).
    let first = with_events_ceiling(&flue.nats, servers_n, window).await;
    let (drain_secs, drain_cpu) = raw_drain(&flue.nats, n, cpu_secs).await;
    let raw_drain_rate = n as f64 / drain_secs;
    println!(
        "ceiling, raw drain of {n} deployments' 3 answers each (per answer: a KV put, an acknowledged event, an ack; {COLLECTOR_IN_FLIGHT} in hand): {drain_secs:.1} s = {raw_drain_rate:.0}/s; broker CPU {:.0} µs per deployment",
        drain_cpu * 1e6 / n as f64
    );
    println!("load average after the ceilings: {}", loadavg());

    // 2. The backlog: N deployments accepted, no agent running; then the gateway killed.
    let servers = bounded(
        PHASE_LIMIT,
        sim::register(&flue.admin_client(), "sim", servers_n, REGISTER_AT_ONCE),
        "registration",
    )
    .await;
    let ids: Arc<Vec<ServerId>> = Arc::new(servers.iter().map(|s| s.id.clone()).collect());
    let noop: ConfigSpec =
        serde_json::from_value(json!({"id": "noop", "group": "noop"})).expect("spec");
    flue.client().create_config(&noop).await.expect("config");
    let t = Instant::now();
    let client = flue.client();
    let created: Vec<_> = bounded(
        PHASE_LIMIT,
        futures_util::stream::iter(0..n)
            .map(|i| {
                let (client, ids) = (&client, &ids);
                async move {
                    let body = CreateDeployment::new(
                        "noop".parse().expect("id"),
                        ids[i % ids.len()].clone(),
                    );
                    client.create_deployment(&body).await.expect("create").id
                }
            })
            .buffer_unordered(CREATE_AT_ONCE)
            .collect(),
        "creating the deployments",
    )
    .await;
    println!(
        "{n} deployments accepted in {:.1} s; the gateway killed",
        t.elapsed().as_secs_f64()
    );
    flue.gateway.kill().await;

    // 3. Every one answered while no gateway runs.
    let options = SimOptions {
        nats_url: flue.nats.url(),
        tenant: "default".parse().expect("tenant"),
        heartbeat: Duration::from_secs(3),
        connecting_at_once: CONNECT_AT_ONCE,
    };
    let t = Instant::now();
    let agents = SimAgents::start(&options, servers);
    agents.wait_ready(PHASE_LIMIT).await;
    let want = n as u64;
    bounded(
        PHASE_LIMIT,
        flue_tests::wait_until("every request answered", PHASE_LIMIT, || {
            (agents.answered() >= want).then_some(())
        }),
        "the agents answering",
    )
    .await;
    println!(
        "{n} answered by the agents ({} refused) in {:.1} s with no gateway running",
        agents.rejected(),
        t.elapsed().as_secs_f64()
    );
    agents.stop().await;

    // 4. The gateway starts: ready, then drained.
    let completed = Arc::new(AtomicU64::new(0));
    let first_completed = Arc::new(std::sync::OnceLock::new());
    let listening = listen_completed(&flue.nats, completed.clone(), first_completed.clone()).await;
    let broker = flue.nats.pid().expect("broker running");
    let cpu_before = cpu_secs(broker);
    let load_before = loadavg();
    let t = Instant::now();
    flue.gateway.restart().await;
    let ready = t.elapsed();
    let gateway = flue.gateway.pid().expect("gateway running");
    // What the start spent its time on, as the gateway logged it.
    let start_log: Vec<String> = flue
        .gateway
        .logs()
        .lines()
        .into_iter()
        .filter(|l| l.contains("deployment state recovered") || l.contains("runtime started"))
        .collect();
    for line in &start_log[start_log.len().saturating_sub(2)..] {
        println!("  gateway (this start): {line}");
    }
    let gateway_cpu_before = cpu_secs(gateway);
    bounded(
        PHASE_LIMIT,
        flue_tests::wait_until("every deployment.completed out", PHASE_LIMIT, || {
            (completed.load(Ordering::Relaxed) >= want).then_some(())
        }),
        "the drain",
    )
    .await;
    let drained = t.elapsed();
    let broker_cpu = cpu_secs(broker) - cpu_before;
    let gateway_cpu = cpu_secs(gateway) - gateway_cpu_before;
    let load_after = loadavg();
    listening.abort();
    let draining = (drained - ready).as_secs_f64();
    let rate = n as f64 / draining;
    // The killed gateway kept the response consumer's pin: the broker hands it on only
    // once it has not pulled for the pin timeout (10 s after the kill), which a real crash
    // costs too, but which is no part of how fast answers are applied.
    let first_done = first_completed
        .get()
        .map_or(drained, |at: &Instant| at.duration_since(t));
    let applying = (drained - first_done).as_secs_f64();
    let applying_rate = (n.saturating_sub(1)) as f64 / applying;
    let second = with_events_ceiling(&flue.nats, servers_n, window).await;
    let ceiling_rate = (first.0 + second.0) / 2.0;
    let ceiling_cpu = (first.1 + second.1) / 2.0;
    let drain_cpu = (broker_cpu + gateway_cpu) * 1e6 / n as f64;
    println!("gateway start with {n} pending (load average {load_before} → {load_after}):");
    println!(
        "  ready (listening) after {:.2} s (target ≤ {:.0} s)",
        ready.as_secs_f64(),
        TARGET_READY.as_secs_f64()
    );
    println!(
        "  drained (every deployment.completed out) {:.1} s after the start: {rate:.0} deployments/s ({:.0} answers/s) from ready",
        drained.as_secs_f64(),
        rate * ANSWERS_PER_DEPLOYMENT
    );
    println!(
        "  first deployment.completed {:.1} s after the start (the killed gateway's pin timing out); from it to the last: {applying_rate:.0} deployments/s = {:.3} of the ceiling with events",
        first_done.as_secs_f64(),
        applying_rate / ceiling_rate
    );
    println!(
        "  CPU per deployment: broker {:.0} µs, gateway {:.0} µs",
        broker_cpu * 1e6 / n as f64,
        gateway_cpu * 1e6 / n as f64
    );
    println!(
        "  drain rate / ceiling with events ({ceiling_rate:.0}/s, the mean of the runs before and after): {:.3} (target ≥ {TARGET_SHARE})",
        rate / ceiling_rate
    );
    println!(
        "  CPU per deployment, ceiling with events (broker + bench, {ceiling_cpu:.0} µs) / drain (broker + gateway, {drain_cpu:.0} µs): {:.3} (what the drain could reach on cores of its own)",
        ceiling_cpu / drain_cpu
    );
    println!(
        "  drain rate / raw drain ({raw_drain_rate:.0}/s): {:.3}",
        rate / raw_drain_rate
    );

    // Every record as the API reads it.
    let client = flue.client();
    let statuses: Vec<DeploymentStatus> = bounded(
        PHASE_LIMIT,
        futures_util::stream::iter(created)
            .map(|id| {
                let client = &client;
                async move { client.get_deployment(&id).await.expect("read").status }
            })
            .buffer_unordered(CREATE_AT_ONCE)
            .collect(),
        "reading back",
    )
    .await;
    let complete = statuses
        .iter()
        .filter(|s| **s == DeploymentStatus::Complete)
        .count();
    println!("  records read back: {complete} of {n} COMPLETE");
}

/// [`ceiling::raw_throughput`] with four lifecycle events, printed: its rate (every
/// accepted one answered) and its CPU (broker + bench) per deployment, in µs.
async fn with_events_ceiling(nats: &Nats, agents: usize, window: Duration) -> (f64, f64) {
    let c = ceiling::raw_throughput(nats, agents, 64, 1, window, true, cpu_secs).await;
    let rate = c.accepted as f64 / c.drained_secs;
    let per = |cpu: f64| cpu * 1e6 / c.accepted.max(1) as f64;
    println!(
        "ceiling, raw JetStream deployments with 4 lifecycle events ({agents} agents, 64 producers): {} accepted in {:.1} s, all answered in {:.1} s = {rate:.0}/s; CPU per deployment: broker {:.0} µs, bench {:.0} µs (load average {})",
        c.accepted,
        c.window_secs,
        c.drained_secs,
        per(c.broker_cpu),
        per(c.bench_cpu),
        loadavg(),
    );
    (rate, per(c.broker_cpu) + per(c.bench_cpu))
}

/// The least a drain costs: `n` deployments' records and their three answers each
/// (`delivered`, `started`, `finished`, 512 bytes) written first, then one collector
/// (`COLLECTOR_IN_FLIGHT` in hand) that per answer puts the record's key, publishes an
/// event and waits for its acknowledgement, and acks the answer. Returns the seconds
/// from the collector's start until every answer is acked, and the broker's CPU seconds
/// over them.
async fn raw_drain(nats: &Nats, n: usize, cpu: fn(u32) -> f64) -> (f64, f64) {
    let js = jetstream::new(nats.client().await);
    let records = ceiling::raw_storage(
        &js,
        &[("RAWBRESP", "rawb.resp.*"), ("RAWBEVT", "rawb.evt.>")],
        "RAWBREC",
    )
    .await;
    futures_util::stream::iter(0..n)
        .for_each_concurrent(COLLECTOR_IN_FLIGHT, |i| {
            let (js, records) = (&js, &records);
            async move {
                let id = format!("d{i:015}");
                let mut body = vec![b'a'; 512];
                body[..16].copy_from_slice(id.as_bytes());
                let body = bytes::Bytes::from(body);
                records.put(&id, body.clone()).await.expect("record");
                for _ in 0..3 {
                    ceiling::acked(js, format!("rawb.resp.{}", i % 100), body.clone()).await;
                }
            }
        })
        .await;
    let consumer = js
        .get_stream("RAWBRESP")
        .await
        .expect("answer stream")
        .create_consumer(pull::Config {
            durable_name: Some("collector".into()),
            max_ack_pending: 100_000,
            ..Default::default()
        })
        .await
        .expect("collector consumer");
    let broker = nats.pid().expect("broker running");
    let cpu_before = cpu(broker);
    let t = Instant::now();
    let answered = AtomicU64::new(0);
    let want = 3 * n as u64;
    let answers = consumer.messages().await.expect("collector pull");
    answers
        .take(3 * n)
        .for_each_concurrent(COLLECTOR_IN_FLIGHT, |m| {
            let (js, records, answered) = (&js, &records, &answered);
            async move {
                let m = m.expect("answer");
                let id = String::from_utf8_lossy(&m.payload[..16]).into_owned();
                records
                    .put(&id, m.payload.clone())
                    .await
                    .expect("store answer");
                let seq = m.info().map_or(0, |i| i.stream_sequence);
                ceiling::acked(js, format!("rawb.evt.{id}.{seq}"), m.payload.clone()).await;
                m.ack().await.expect("collector ack");
                answered.fetch_add(1, Ordering::Relaxed);
            }
        })
        .await;
    assert_eq!(
        answered.load(Ordering::Relaxed),
        want,
        "every answer applied"
    );
    let figures = (t.elapsed().as_secs_f64(), cpu(broker) - cpu_before);
    for name in ["RAWBRESP", "RAWBEVT"] {
        let _ = js.delete_stream(name).await;
    }
    let _ = js.delete_key_value("RAWBREC").await;
    figures
}

/// Counts `deployment.completed` events on the tenant's event subjects (the gateway
/// publishes one once a result is stored) into `count`; aborted by the caller.
async fn listen_completed(
    nats: &Nats,
    count: Arc<AtomicU64>,
    first: Arc<std::sync::OnceLock<Instant>>,
) -> tokio::task::JoinHandle<()> {
    let client = nats.events_client().await;
    let mut sub = client
        .subscribe("flue.default.evt.deployment.*.*.completed")
        .await
        .expect("subscribe");
    broker_has_read(&client, &client.new_inbox()).await;
    tokio::spawn(async move {
        let _client = client;
        while sub.next().await.is_some() {
            first.get_or_init(Instant::now);
            count.fetch_add(1, Ordering::Relaxed);
        }
    })
}
