//! Benchmark (not a test): what Flue's security costs. Two Flues run side by side on the
//! same machine and every figure is taken on both, the latency samples in alternating
//! rounds so that a busy moment of the machine falls on both alike:
//!
//! - **off**: the anonymous broker (`scripts/nats-server.conf`), the gateway with
//!   `--insecure-dev-broker --insecure-no-auth --insecure-unsigned-answers`, agents with
//!   `--insecure-dev-broker --insecure-unsigned-requests` and no credentials, no TLS;
//! - **on**: the harness's secure way over TLS ([`Flue::start_tls`]): the broker
//!   in operator mode (the gateway and every agent authenticated as their own NATS users,
//!   one account per tenant), bearer tokens on every API call, requests signed by the
//!   gateway and answers by the agents, hidden values sealed, TLS on every broker
//!   connection and HTTPS on the API.
//!
//! Printed as a table (figure | off | on | on/off): deployment latency (no-op hook, as
//! stored by the gateway and as seen by a client), a listener's latency, a deployment with
//! a hidden input and a hidden output (sealing; the "off" run sends the same values
//! visible, since an agent without credentials refuses hidden values), throughput with 1
//! and 50 agents, a stack chain, and an agent's RSS. A raw JetStream round trip on each
//! broker and a no-op hook process alone are the floors.
//!
//! Run with `bash scripts/bench.sh` (builds the release binaries first).
//! `FLUE_BENCH_N` sets the number of latency samples per mode (default 300).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flue_client::Client;
use flue_proto::{ConfigSpec, CreateDeployment, DeploymentStatus, RegisterServer, ServerId};
use flue_tests::{Agent, Flue, Gateway, Nats, broker_has_read, write_executable};
use futures_util::StreamExt;
use serde_json::json;
use tempfile::TempDir;

#[path = "floor.rs"]
mod floor;
#[path = "measure.rs"]
mod measure;

use floor::{hook_spawn, raw_round_trip};
use measure::{deploy_once, rss_kib};

/// The gateway flags of the "off" run: every security feature the gateway can turn off.
const OFF_GATEWAY_FLAGS: &[&str] = &[
    "--insecure-dev-broker",
    "--insecure-no-auth",
    "--insecure-unsigned-answers",
];
/// The agent flags of the "off" run (and no `--creds`).
const OFF_AGENT_FLAGS: &[&str] = &["--insecure-dev-broker", "--insecure-unsigned-requests"];
/// Latency samples are taken in rounds of this many, alternating between the two runs.
const ROUND: usize = 25;
/// Servers of the throughput run with many agents.
const MANY: usize = 50;

#[tokio::main]
async fn main() {
    let samples: usize = std::env::var("FLUE_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    println!("Flue benchmark: security off against on, one machine, agents as processes");
    println!("  off: {}", Setup::OFF_DESCRIPTION);
    println!("  on:  {}", Setup::ON_DESCRIPTION);
    println!("samples per latency figure and mode: {samples}\n");

    let setups = [Setup::off().await, Setup::on().await];
    let mut table = Table::default();

    let raw = [
        raw_round_trip(setups[0].nats(), samples).await,
        raw_round_trip(setups[1].nats(), samples).await,
    ];
    table.latency(
        "raw JetStream round trip (publish → pull → ack → reply)",
        &raw,
    );

    let hooks = write_hooks(setups[0].path("hooks"));
    let spawn = hook_spawn(&hooks.join("noop"), samples.min(200)).await;
    println!(
        "a no-op hook process alone (spawn, stdin, read JSON): p50 {:.3} ms, p99 {:.3} ms (the same in both modes)\n",
        pct(&spawn, 50),
        pct(&spawn, 99)
    );

    let mut b0 = Vec::new();
    for setup in &setups {
        setup.configs().await;
        setup.register("b0").await;
        b0.push(setup.agent("b0", &hooks).await);
    }
    let idle = [
        rss_kib(b0[0].pid().expect("agent running")),
        rss_kib(b0[1].pid().expect("agent running")),
    ];

    let mut listeners = Vec::new();
    for setup in &setups {
        listeners.push(Listener::new(setup.nats(), "b0").await);
    }
    let mut stored = [Vec::new(), Vec::new()];
    let mut observed = [Vec::new(), Vec::new()];
    let mut heard = [Vec::new(), Vec::new()];
    let mut sealed = [Vec::new(), Vec::new()];
    for round in rounds(samples) {
        for (i, setup) in setups.iter().enumerate() {
            let client = setup.client();
            for _ in 0..round {
                let (s, o) = deploy_once(&client, &noop("b0")).await;
                stored[i].push(s);
                observed[i].push(o);
            }
            for _ in 0..round {
                heard[i].push(listeners[i].latency(&client).await);
            }
            for _ in 0..round {
                sealed[i].push(deploy_once(&client, &secret("b0")).await.1);
            }
        }
    }
    table.latency(
        "no-op deployment, accepted → result stored (gateway clock)",
        &stored,
    );
    table.latency(
        "no-op deployment, POST sent → client sees COMPLETE",
        &observed,
    );
    table.latency(
        "no-op deployment, POST sent → NATS listener gets deployment.completed",
        &heard,
    );
    table.latency(
        "hidden input + hidden output deployment, POST → COMPLETE (off: same values visible)",
        &sealed,
    );

    let mut chain = Vec::new();
    for setup in &setups {
        chain.push(stack_chain(setup, 20).await);
    }
    table.row(
        "stack of 20 chained no-op units, create, per unit",
        "ms",
        [chain[0].0, chain[1].0],
    );
    table.row(
        "same stack, update with nothing changed, per unit",
        "ms",
        [chain[0].1, chain[1].1],
    );

    let mut one = Vec::new();
    for setup in &setups {
        one.push(throughput(&setup.client(), &["b0"], 300).await);
    }
    table.row(
        "throughput, 1 agent (300 no-op deployments, 32 in flight)",
        "deployments/s",
        [one[0], one[1]],
    );
    let busy = [
        rss_kib(b0[0].pid().expect("agent running")),
        rss_kib(b0[1].pid().expect("agent running")),
    ];

    let names: Vec<String> = (1..=MANY).map(|i| format!("m{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut many = Vec::new();
    for setup in &setups {
        // One mode's agents at a time: 50 idle agents of the other run would take the
        // machine's CPU on heartbeats and reconnects, not the run being measured.
        let mut agents = Vec::new();
        for n in &names {
            setup.register(n).await;
            agents.push(setup.spawn_agent(n, &hooks).await);
        }
        for a in &agents {
            a.ready().await;
        }
        many.push(throughput(&setup.client(), &refs, 1000).await);
        drop(agents);
    }
    table.row(
        &format!("throughput, {MANY} agents (1000 no-op deployments, 32 in flight)"),
        "deployments/s",
        [many[0], many[1]],
    );
    table.row(
        "agent RSS, idle after start",
        "MiB",
        [idle[0] as f64 / 1024.0, idle[1] as f64 / 1024.0],
    );
    table.row(
        "agent RSS, after ~1,000 deployments",
        "MiB",
        [busy[0] as f64 / 1024.0, busy[1] as f64 / 1024.0],
    );
    table.print();
    drop(b0);
}

/// One of the two Flues the bench compares.
enum Setup {
    /// Every security feature turned off by its dev flag.
    Off(Box<Insecure>),
    /// The harness's secure way, over TLS.
    On(Box<Flue>),
}

/// The "off" Flue: an anonymous broker, a gateway with its dev flags, scratch space.
struct Insecure {
    nats: Nats,
    gateway: Gateway,
    dir: TempDir,
}

impl Setup {
    const OFF_DESCRIPTION: &str = "anonymous broker, gateway --insecure-dev-broker --insecure-no-auth --insecure-unsigned-answers, agents --insecure-dev-broker --insecure-unsigned-requests without credentials, no TLS";
    const ON_DESCRIPTION: &str = "broker in operator mode (every client its own NATS user, one account per tenant), bearer tokens, agent credentials, signed requests and answers, sealed hidden values, TLS to the broker and HTTPS to the API";

    async fn off() -> Setup {
        let nats = Nats::start().await;
        let gateway = Gateway::start(&nats.url(), OFF_GATEWAY_FLAGS).await;
        Setup::Off(Box::new(Insecure {
            nats,
            gateway,
            dir: tempfile::tempdir().expect("tempdir"),
        }))
    }

    async fn on() -> Setup {
        Setup::On(Box::new(Flue::start_tls(&[]).await))
    }

    fn nats(&self) -> &Nats {
        match self {
            Setup::Off(off) => &off.nats,
            Setup::On(flue) => &flue.nats,
        }
    }

    fn gateway(&self) -> &Gateway {
        match self {
            Setup::Off(off) => &off.gateway,
            Setup::On(flue) => &flue.gateway,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        match self {
            Setup::Off(off) => off.dir.path().join(name),
            Setup::On(flue) => flue.path(name),
        }
    }

    fn hides(&self) -> bool {
        matches!(self, Setup::On(_))
    }

    /// An engine client (under `--insecure-no-auth` its token is ignored).
    fn client(&self) -> Client {
        self.gateway().client()
    }

    /// The configs every figure deploys: `noop`, and `secret` with one input and one
    /// output, hidden when this run seals.
    async fn configs(&self) {
        let client = self.client();
        let noop: ConfigSpec =
            serde_json::from_value(json!({"id": "noop", "group": "noop"})).expect("spec");
        client.create_config(&noop).await.expect("config");
        let hidden = self.hides();
        let secret: ConfigSpec = serde_json::from_value(json!({
            "id": "secret",
            "group": "secret",
            "inputs": [{"name": "password", "hidden": hidden}],
            "outputs": [{"name": "token", "hidden": hidden}],
        }))
        .expect("spec");
        client.create_config(&secret).await.expect("config");
    }

    async fn register(&self, server: &str) {
        match self {
            Setup::Off(off) => {
                off.gateway
                    .admin_client()
                    .register_server(&RegisterServer {
                        transport: Default::default(),
                        id: ServerId::new(server).expect("server id"),
                        name: String::new(),
                    })
                    .await
                    .expect("register");
            }
            Setup::On(flue) => flue.register(server).await,
        }
    }

    async fn spawn_agent(&self, server: &str, hooks: &std::path::Path) -> Agent {
        let state = format!("agent-{server}");
        let hooks = [hooks.to_owned()];
        match self {
            Setup::Off(off) => Agent::spawn_with(
                &off.nats.url(),
                server,
                &off.dir.path().join(state),
                &hooks,
                OFF_AGENT_FLAGS,
            ),
            Setup::On(flue) => flue.spawn_agent_with(server, &state, &hooks, &[]).await,
        }
    }

    async fn agent(&self, server: &str, hooks: &std::path::Path) -> Agent {
        let agent = self.spawn_agent(server, hooks).await;
        agent.ready().await;
        agent
    }
}

/// The hooks: `noop` prints success, `secret` reads its item and prints a `token` output.
fn write_hooks(dir: PathBuf) -> PathBuf {
    std::fs::create_dir_all(&dir).expect("hooks dir");
    write_executable(
        &dir.join("noop"),
        "#!/bin/sh\necho '{\"deploy_status_code\": 0}'\n",
    );
    write_executable(
        &dir.join("secret"),
        "#!/bin/sh\ncat >/dev/null\necho '{\"deploy_status_code\": 0, \"token\": \"t0ken-value\"}'\n",
    );
    dir
}

/// `samples` split into rounds of at most [`ROUND`].
fn rounds(samples: usize) -> Vec<usize> {
    let mut left = samples;
    let mut out = Vec::new();
    while left > 0 {
        let n = left.min(ROUND);
        out.push(n);
        left -= n;
    }
    out
}

/// The printed comparison: figure | off | on | on/off.
#[derive(Default)]
struct Table {
    rows: Vec<(String, String, [f64; 2])>,
}

impl Table {
    fn row(&mut self, figure: &str, unit: &str, values: [f64; 2]) {
        self.rows.push((figure.to_owned(), unit.to_owned(), values));
    }

    /// Two rows, p50 and p99, of sorted-on-the-way samples per mode.
    fn latency(&mut self, figure: &str, samples: &[Vec<Duration>; 2]) {
        let mut sorted = samples.clone();
        for s in &mut sorted {
            s.sort();
        }
        for p in [50, 99] {
            self.row(
                &format!("{figure}, p{p}"),
                "ms",
                [pct(&sorted[0], p), pct(&sorted[1], p)],
            );
        }
    }

    fn print(&self) {
        println!("| figure | unit | off | on | on/off |");
        println!("|---|---|---|---|---|");
        for (figure, unit, [off, on]) in &self.rows {
            println!(
                "| {figure} | {unit} | {} | {} | {:.2}× |",
                fmt(*off),
                fmt(*on),
                on / off
            );
        }
    }
}

fn fmt(v: f64) -> String {
    match v {
        v if v >= 100.0 => format!("{v:.0}"),
        v if v >= 10.0 => format!("{v:.1}"),
        v => format!("{v:.2}"),
    }
}

fn pct(sorted: &[Duration], p: usize) -> f64 {
    let i = ((sorted.len() - 1) * p) / 100;
    sorted[i].as_secs_f64() * 1000.0
}

fn noop(server: &str) -> CreateDeployment {
    serde_json::from_value(json!({"config_id": "noop", "server_id": server})).expect("body")
}

fn secret(server: &str) -> CreateDeployment {
    serde_json::from_value(json!({
        "config_id": "secret",
        "server_id": server,
        "input_values": {"password": "s3cret-value"},
    }))
    .expect("body")
}

/// A core NATS subscription to one server's `deployment.completed` events: what any
/// listener on the event subjects sees (in operator mode, a user of the tenant's events
/// account).
struct Listener {
    completed: async_nats::Subscriber,
    // Keeps the connection open as long as the subscription.
    _nats: async_nats::Client,
}

impl Listener {
    async fn new(nats: &Nats, server: &str) -> Listener {
        let client = nats.events_client().await;
        let completed = client
            .subscribe(format!("flue.default.evt.deployment.~.{server}.completed"))
            .await
            .expect("subscribe");
        broker_has_read(&client, &client.new_inbox()).await;
        Listener {
            completed,
            _nats: client,
        }
    }

    /// POST a no-op deployment → its `deployment.completed` event arrives.
    async fn latency(&mut self, client: &Client) -> Duration {
        let t = Instant::now();
        let d = client.create_deployment(&noop("b0")).await.expect("create");
        let id = format!("deployment:{}:completed", d.id);
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(60), self.completed.next())
                .await
                .expect("the completed event within 60 s")
                .expect("subscription open");
            let event: flue_proto::CloudEvent =
                serde_json::from_slice(&msg.payload).expect("a CloudEvent");
            if event.id == id {
                return t.elapsed();
            }
        }
    }
}

/// A stack of `n` no-op deployments on `b0`, each depending on the one before: the create
/// and an update that changes nothing, in ms per unit.
async fn stack_chain(setup: &Setup, n: usize) -> (f64, f64) {
    use flue_stack::driver::{self, Options, Source};
    use flue_stack::template::Template;
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
    let template = Template::parse(&text, &setup.path(".")).expect("template");
    let given = Default::default();
    let source = Source {
        template: &template,
        given: &given,
        mapped: &Default::default(),
        converge: None,
    };
    let opts = Options {
        force: false,
        report: Arc::new(|_: &driver::Event| {}),
    };
    let client = setup.client();
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
    let per_unit = |d: Duration| d.as_secs_f64() * 1e3 / n as f64;
    (per_unit(create), per_unit(update))
}

/// Creates `n` deployments spread over `servers` (32 requests in flight) and returns
/// deployments per second from the first acceptance to the last stored result.
async fn throughput(client: &Client, servers: &[&str], n: usize) -> f64 {
    let client = Arc::new(client.clone());
    let gate = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = Vec::new();
    for i in 0..n {
        let client = client.clone();
        let gate = gate.clone();
        let body = noop(servers[i % servers.len()]);
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
