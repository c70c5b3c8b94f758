//! Benchmark (not a test): what the edge layout costs (issue 22, point 7). Agents are users
//! of their tenant's *edge* account, which has no JetStream and reaches the state account
//! through service imports (`broker-gateway/src/natsauth/edge.rs`); before, they were users
//! of the *state* account itself. Both kinds of agent run side by side on one broker and
//! one gateway (the harness's secure way without TLS, [`Flue::start`]: operator mode as in
//! production, signed requests and answers): an agent of the old layout is the same user
//! key with the same per-server rights, its JWT signed by the state account instead
//! ([`Flue::in_state_account`]), as a gateway minted it before the edge account.
//!
//! The same deployments go through both, in rounds that take turns (A B, then B A, …: a
//! drift of the shared machine over the run weighs on both layouts alike):
//!
//! 1. **latency**: one real `flue-agent` per layout running the real no-op hook, one
//!    deployment at a time, each measured as `throughput.rs` measures it (the record's
//!    `created_at` → `updated_at`, accepted → result stored; POST sent → the long poll
//!    returns COMPLETE), and the broker's and the gateway's CPU per deployment (`/proc`);
//! 2. **messages**: per layout, what the broker counted per deployment ([`count`]: messages
//!    in and out per connection from `CONNZ`, appends per stream from `JSZ`) and its own
//!    totals (`VARZ` `in_msgs` / `out_msgs`, which count messages routed inside the broker
//!    too, such as the answers a service import maps back through its `_R_` reply);
//! 3. **throughput**: N simulated agents per layout ([`flue_tests::sim`], built from the
//!    agent's own modules), C HTTP clients POSTing no-op deployments to one layout's
//!    servers for a window, then until every one is answered (`deployment.completed`
//!    heard); deployments/s over that time, broker and gateway CPU per deployment.
//!
//! Each figure per layout, and the ratio edge / old. Settings (environment):
//! `FLUE_BENCH_N` latency samples per layout (default 200), `FLUE_BENCH_ROUNDS` rounds
//! (4), `FLUE_BENCH_COUNTED` deployments counted per layout (100), `FLUE_BENCH_AGENTS`
//! simulated agents per layout (100), `FLUE_BENCH_CLIENTS` HTTP clients (32),
//! `FLUE_BENCH_SECS` window of each throughput round (5; 0 skips throughput). With `perf`
//! installed, the broker's user-space instructions over each throughput window are counted
//! too (`perf stat`), the figure a busy shared machine hardly changes (where the VM has the
//! counter); `FLUE_BENCH_PERF=<prefix>` records the broker's CPU profile over each window
//! (`perf record`), one file per layout and round. Run with
//! `bash scripts/bench.sh layout`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use flue_gateway::natsauth::{AccountKind, NatsAuth, jwt};
use flue_proto::creds::AgentCredentials;
use flue_proto::{ConfigSpec, CreateDeployment, ServerId, TenantId};
use flue_tests::sim::{self, SimAgents, SimOptions};
use flue_tests::{Flue, broker_has_read};
use futures_util::StreamExt;
use serde_json::{Value, json};

#[path = "count.rs"]
mod count;
#[path = "measure.rs"]
mod measure;

use measure::{bounded, cpu_secs, deploy_once, loadavg, ms, pct, setting};

/// Registrations in flight at once.
const REGISTER_AT_ONCE: usize = 16;
/// Simulated agents connecting at once.
const CONNECT_AT_ONCE: usize = 64;
/// Bound on any phase: a phase that takes longer is a finding, not a hang.
const PHASE_LIMIT: Duration = Duration::from_secs(300);

/// Where an agent is a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// The edge account (today's layout).
    Edge,
    /// The state account (the layout before the edge account).
    Old,
}

impl Layout {
    const BOTH: [Layout; 2] = [Layout::Edge, Layout::Old];

    fn name(self) -> &'static str {
        match self {
            Layout::Edge => "edge",
            Layout::Old => "old",
        }
    }

    fn index(self) -> usize {
        match self {
            Layout::Edge => 0,
            Layout::Old => 1,
        }
    }

    /// The layouts in round `round`'s order: A B, B A, A B, …
    fn in_round(round: usize) -> [Layout; 2] {
        match round % 2 {
            0 => [Layout::Edge, Layout::Old],
            _ => [Layout::Old, Layout::Edge],
        }
    }
}

/// What one layout's latency blocks measured.
#[derive(Debug, Default)]
struct Latency {
    stored: Vec<Duration>,
    observed: Vec<Duration>,
    /// p50 of `stored` of each round.
    round_p50: Vec<Duration>,
    broker_cpu: f64,
    gateway_cpu: f64,
}

/// What one layout's throughput rounds measured.
#[derive(Debug, Default)]
struct Throughput {
    accepted: u64,
    /// Seconds from each round's first POST until its last deployment was answered.
    secs: f64,
    /// Deployments/s of each round.
    round_rate: Vec<f64>,
    broker_cpu: f64,
    gateway_cpu: f64,
    /// The broker's user-space instructions over the windows, and the deployments accepted
    /// in them, when `perf` counted them.
    instructions: Option<(f64, u64)>,
}

#[tokio::main]
async fn main() {
    let samples = setting("FLUE_BENCH_N", 200);
    let rounds = setting("FLUE_BENCH_ROUNDS", 4).max(1);
    let counted = setting("FLUE_BENCH_COUNTED", 100);
    let agents_n = setting("FLUE_BENCH_AGENTS", 100);
    let clients_n = setting("FLUE_BENCH_CLIENTS", 32);
    let window = Duration::from_secs(setting("FLUE_BENCH_SECS", 5) as u64);
    println!(
        "Flue layout benchmark (issue 22, point 7): agents in the edge account against the state account"
    );
    println!(
        "latency samples {samples} per layout in {rounds} rounds; counted {counted} per layout; simulated agents {agents_n} per layout; HTTP clients {clients_n}; throughput window {window:?} per round; load average at start: {}",
        loadavg()
    );
    let flue = Flue::start().await;
    let hooks = flue.path("hooks");
    std::fs::create_dir_all(&hooks).expect("hooks dir");
    flue_tests::write_executable(
        &hooks.join("noop"),
        "#!/bin/sh\necho '{\"deploy_status_code\": 0}'\n",
    );
    let client = flue.client();
    let noop: ConfigSpec =
        serde_json::from_value(json!({"id": "noop", "group": "noop"})).expect("spec");
    client.create_config(&noop).await.expect("config");

    // One real agent per layout.
    let tenant: TenantId = "default".parse().expect("tenant");
    let auth = NatsAuth::open(&flue.gateway.state_dir()).expect("state dir");
    let mut agents = Vec::new();
    let mut servers = Vec::new();
    for layout in Layout::BOTH {
        let server = format!("lat-{}", layout.name());
        flue.register(&server).await;
        let path = flue.creds_path(&server);
        if layout == Layout::Old {
            let text = std::fs::read_to_string(&path).expect("credentials");
            std::fs::write(&path, flue.in_state_account(&text)).expect("write credentials");
        }
        let kind = match layout {
            Layout::Edge => AccountKind::Edge,
            Layout::Old => AccountKind::Tenant,
        };
        let text = std::fs::read_to_string(&path).expect("credentials");
        assert_eq!(
            issuer(&text),
            auth.account_public_key(&tenant, kind).expect("account"),
            "the {} agent's account",
            layout.name()
        );
        agents.push(flue.agent(&server, std::slice::from_ref(&hooks)).await);
        servers.push(ServerId::new(server).expect("id"));
    }

    // 1. Latency, in rounds.
    let broker = flue.nats.pid().expect("broker running");
    let gateway = flue.gateway.pid().expect("gateway running");
    let mut latency: [Latency; 2] = Default::default();
    let per_round = (samples / rounds).max(1);
    for round in 0..rounds {
        for layout in Layout::in_round(round) {
            let l = &mut latency[layout.index()];
            let cpu = [cpu_secs(broker), cpu_secs(gateway)];
            let mut block = Vec::with_capacity(per_round);
            for _ in 0..per_round {
                let (stored, observed) =
                    deploy_once(&client, &noop_for(&servers[layout.index()])).await;
                block.push(stored);
                l.observed.push(observed);
            }
            l.broker_cpu += cpu_secs(broker) - cpu[0];
            l.gateway_cpu += cpu_secs(gateway) - cpu[1];
            l.stored.extend_from_slice(&block);
            block.sort();
            l.round_p50.push(pct(&block, 50));
        }
    }
    println!(
        "latency ({} no-op deployments per layout, one at a time, one real agent each; load average after: {}):",
        per_round * rounds,
        loadavg()
    );
    for l in &mut latency {
        l.stored.sort();
        l.observed.sort();
    }
    let n = (per_round * rounds) as f64;
    for layout in Layout::BOTH {
        let l = &latency[layout.index()];
        println!(
            "  {:<4} accepted → stored p50 {:.3} ms p99 {:.3} ms; POST → COMPLETE p50 {:.3} ms p99 {:.3} ms; CPU per deployment: broker {:.0} µs, gateway {:.0} µs",
            layout.name(),
            ms(pct(&l.stored, 50)),
            ms(pct(&l.stored, 99)),
            ms(pct(&l.observed, 50)),
            ms(pct(&l.observed, 99)),
            l.broker_cpu * 1e6 / n,
            l.gateway_cpu * 1e6 / n,
        );
    }
    let [edge, old] = &latency;
    let round_ratios: Vec<String> = edge
        .round_p50
        .iter()
        .zip(&old.round_p50)
        .map(|(e, o)| format!("{:.2}", ms(*e) / ms(*o)))
        .collect();
    println!(
        "  edge / old: accepted → stored p50 {:.2}× p99 {:.2}×; POST → COMPLETE p50 {:.2}× p99 {:.2}×; broker CPU {:.2}×, gateway CPU {:.2}×; accepted → stored p50 per round {}",
        ratio_of(ms(pct(&edge.stored, 50)), ms(pct(&old.stored, 50))),
        ratio_of(ms(pct(&edge.stored, 99)), ms(pct(&old.stored, 99))),
        ratio_of(ms(pct(&edge.observed, 50)), ms(pct(&old.observed, 50))),
        ratio_of(ms(pct(&edge.observed, 99)), ms(pct(&old.observed, 99))),
        ratio_of(edge.broker_cpu, old.broker_cpu),
        ratio_of(edge.gateway_cpu, old.gateway_cpu),
        round_ratios.join(" "),
    );

    // 2. Messages per deployment, as the broker counts them.
    let system = count::system_client(&flue.gateway.state_dir(), &flue.nats.url()).await;
    let mut totals = [(0.0, 0.0); 2];
    for layout in Layout::BOTH {
        println!("messages, {} layout:", layout.name());
        let before = count::snapshot(&system).await;
        let varz_before = varz_msgs(&system).await;
        for _ in 0..counted {
            deploy_once(&client, &noop_for(&servers[layout.index()])).await;
        }
        let varz_after = varz_msgs(&system).await;
        let after = count::snapshot(&system).await;
        count::print_per_deployment(&before, &after, counted);
        let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / counted.max(1) as f64;
        totals[layout.index()] = (
            per(varz_after.0, varz_before.0),
            per(varz_after.1, varz_before.1),
        );
        println!(
            "  the broker's own totals (VARZ, with its internal routing and this count's requests): in {:.2}, out {:.2} per deployment",
            totals[layout.index()].0,
            totals[layout.index()].1,
        );
    }
    println!(
        "  edge / old, VARZ messages per deployment: in {:.2}×, out {:.2}×",
        ratio_of(totals[0].0, totals[1].0),
        ratio_of(totals[0].1, totals[1].1),
    );
    drop(agents);
    if window.is_zero() {
        println!("FLUE_BENCH_SECS=0: throughput not measured");
        return;
    }

    // 3. Throughput with simulated agents, in rounds.
    let mut ids = Vec::new();
    let mut sims = Vec::new();
    let options = SimOptions {
        nats_url: flue.nats.url(),
        tenant: tenant.clone(),
        heartbeat: Duration::from_secs(3),
        connecting_at_once: CONNECT_AT_ONCE,
    };
    for layout in Layout::BOTH {
        let mut registered = bounded(
            PHASE_LIMIT,
            sim::register(
                &flue.admin_client(),
                layout.name(),
                agents_n,
                REGISTER_AT_ONCE,
            ),
            "registration",
        )
        .await;
        if layout == Layout::Old {
            for s in &mut registered {
                s.credentials = flue.in_state_account(&s.credentials);
            }
        }
        ids.push(Arc::new(
            registered.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
        ));
        let agents = SimAgents::start(&options, registered);
        agents.wait_ready(PHASE_LIMIT).await;
        sims.push(agents);
    }
    let completed = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let listening = listen_completed(&flue, completed.clone()).await;
    let mut throughput: [Throughput; 2] = Default::default();
    let load_before = loadavg();
    for round in 0..rounds {
        for layout in Layout::in_round(round) {
            let i = layout.index();
            let t = &mut throughput[i];
            let answered_before = completed[i].load(Ordering::Relaxed);
            let cpu = [cpu_secs(broker), cpu_secs(gateway)];
            let counting = perf_stat(broker, window);
            let profiling = profile(broker, window, layout, round);
            let start = Instant::now();
            let accepted = post_for(&flue, ids[i].clone(), clients_n, window).await;
            let counted_instructions = counting.and_then(PerfStat::read);
            if let Some(mut perf) = profiling {
                // `perf` ends with its `sleep`, which ended with the window.
                let _ = perf.wait();
            }
            let target = answered_before + accepted;
            let answered = completed[i].clone();
            flue_tests::wait_until(
                "every accepted deployment answered",
                PHASE_LIMIT,
                move || (answered.load(Ordering::Relaxed) >= target).then_some(()),
            )
            .await;
            let secs = start.elapsed().as_secs_f64();
            t.broker_cpu += cpu_secs(broker) - cpu[0];
            t.gateway_cpu += cpu_secs(gateway) - cpu[1];
            t.accepted += accepted;
            t.secs += secs;
            t.round_rate.push(accepted as f64 / secs);
            if let Some(n) = counted_instructions {
                let (sum, deployments) = t.instructions.get_or_insert((0.0, 0));
                *sum += n;
                *deployments += accepted;
            }
        }
    }
    listening.abort();
    println!(
        "throughput ({agents_n} simulated agents per layout, {clients_n} clients, {rounds} rounds of {window:?} each per layout, each until every deployment is answered; load average {load_before} → {}):",
        loadavg()
    );
    for layout in Layout::BOTH {
        let t = &throughput[layout.index()];
        let per = |v: f64| v * 1e6 / t.accepted.max(1) as f64;
        let instructions = t.instructions.map_or(String::new(), |(sum, d)| {
            format!(
                "; broker {:.3} M instructions (user) per deployment",
                sum / d.max(1) as f64 / 1e6
            )
        });
        let rates: Vec<String> = t.round_rate.iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "  {:<4} {} deployments in {:.1} s = {:.0}/s (rounds: {}/s); CPU per deployment: broker {:.0} µs, gateway {:.0} µs{instructions}",
            layout.name(),
            t.accepted,
            t.secs,
            t.accepted as f64 / t.secs,
            rates.join(", "),
            per(t.broker_cpu),
            per(t.gateway_cpu),
        );
    }
    let [edge, old] = &throughput;
    let rate = |t: &Throughput| t.accepted as f64 / t.secs;
    let cpu = |t: &Throughput, v: f64| v / t.accepted.max(1) as f64;
    let instructions = match (edge.instructions, old.instructions) {
        (Some((e, ed)), Some((o, od))) => format!(
            ", broker instructions {:.2}×",
            ratio_of(e / ed.max(1) as f64, o / od.max(1) as f64)
        ),
        _ => String::new(),
    };
    println!(
        "  edge / old: throughput {:.2}×; CPU per deployment: broker {:.2}×, gateway {:.2}×{instructions}",
        ratio_of(rate(edge), rate(old)),
        ratio_of(cpu(edge, edge.broker_cpu), cpu(old, old.broker_cpu)),
        ratio_of(cpu(edge, edge.gateway_cpu), cpu(old, old.gateway_cpu)),
    );
    for agents in sims {
        agents.stop().await;
    }
}

/// `clients_n` clients POSTing no-op deployments to `ids` in turn until `window` passed;
/// how many were accepted.
async fn post_for(flue: &Flue, ids: Arc<Vec<ServerId>>, clients_n: usize, window: Duration) -> u64 {
    let accepted = Arc::new(AtomicU64::new(0));
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
    while posting.join_next().await.is_some() {}
    accepted.load(Ordering::Relaxed)
}

/// Counts `deployment.completed` events per layout (the server id's prefix, as
/// [`sim::register`] names them) into `counts`; aborted by the caller.
async fn listen_completed(flue: &Flue, counts: [Arc<AtomicU64>; 2]) -> tokio::task::JoinHandle<()> {
    let client = flue.nats.events_client().await;
    let mut sub = client
        .subscribe("flue.default.evt.deployment.*.*.completed")
        .await
        .expect("subscribe");
    broker_has_read(&client, &client.new_inbox()).await;
    tokio::spawn(async move {
        let _client = client;
        while let Some(msg) = sub.next().await {
            // flue.<tenant>.evt.deployment.<stack>.<server>.completed
            let server = msg.subject.split('.').nth(5).unwrap_or_default();
            for layout in Layout::BOTH {
                if server.starts_with(&format!("{}-", layout.name())) {
                    counts[layout.index()].fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    })
}

/// The broker's message totals (`VARZ`: `in_msgs`, `out_msgs`).
async fn varz_msgs(system: &async_nats::Client) -> (u64, u64) {
    let reply = system
        .request("$SYS.REQ.SERVER.PING.VARZ", "{}".into())
        .await
        .expect("VARZ");
    let varz: Value = serde_json::from_slice(&reply.payload).expect("VARZ json");
    let count = |name: &str| varz["data"][name].as_u64().unwrap_or(0);
    (count("in_msgs"), count("out_msgs"))
}

/// The account that signed the user JWT of an agent's credentials file.
fn issuer(text: &str) -> String {
    let creds = AgentCredentials::parse(text).expect("agent credentials");
    jwt::decode::<jwt::User>(&creds.user.jwt)
        .expect("user claims")
        .iss
}

/// With `FLUE_BENCH_PERF=<prefix>`, a CPU profile of the broker over one throughput window
/// (`perf record`, software clock) into `<prefix>-<layout>-<round>.data`: where the broker's
/// time goes with one layout and with the other (`perf report -i …`).
fn profile(
    pid: u32,
    window: Duration,
    layout: Layout,
    round: usize,
) -> Option<std::process::Child> {
    let prefix = std::env::var("FLUE_BENCH_PERF").ok()?;
    std::process::Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-F", "499", "-g", "-o"])
        .arg(format!("{prefix}-{}-{round}.data", layout.name()))
        .args(["-p", &pid.to_string(), "--", "sleep"])
        .arg(format!("{:.3}", window.as_secs_f64()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()
}

/// `perf stat` counting a process's user-space instructions for a while.
struct PerfStat {
    child: std::process::Child,
    out: std::path::PathBuf,
}

/// Starts counting `pid`'s instructions for `window`; none when `perf` cannot.
fn perf_stat(pid: u32, window: Duration) -> Option<PerfStat> {
    let out = std::env::temp_dir().join(format!(
        "flue-bench-layout-{}-{pid}.perfstat",
        std::process::id()
    ));
    let child = std::process::Command::new("perf")
        .args(["stat", "-x", ",", "-e", "instructions:u", "-o"])
        .arg(&out)
        .args(["-p", &pid.to_string(), "--", "sleep"])
        .arg(format!("{:.3}", window.as_secs_f64()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    Some(PerfStat { child, out })
}

impl PerfStat {
    /// The instructions counted, once `perf` ended (with its `sleep`).
    fn read(mut self) -> Option<f64> {
        let _ = self.child.wait();
        let text = std::fs::read_to_string(&self.out).ok()?;
        let _ = std::fs::remove_file(&self.out);
        text.lines()
            .find(|l| l.contains("instructions"))
            .and_then(|l| l.split(',').next())
            .and_then(|n| n.trim().parse().ok())
    }
}

/// `new / old`.
fn ratio_of(new: f64, old: f64) -> f64 {
    new / old
}

/// A no-op deployment's body for `server`.
fn noop_for(server: &ServerId) -> CreateDeployment {
    CreateDeployment::new("noop".parse().expect("id"), server.clone())
}
