//! Benchmark (not a test): Flue with many servers on one broker and one gateway
//! (issue 11, point 5). Agents are simulated ([`flue_tests::sim`]): N of them in this one
//! process, each with its own authenticated NATS connection, its own request consumer
//! (made by the gateway at registration), signed requests checked and signed no-op
//! answers, presence heartbeats every 3 s; no hook runs. The broker and gateway are the
//! real binaries, the secure way of the harness ([`Flue::start`]: operator mode, tokens,
//! per-server credentials, signing; no TLS).
//!
//! For each N (arguments, default `1000 5000`), on a fresh Flue:
//!
//! - registration of N servers through the API (16 at a time): time and rate;
//! - broker and gateway RSS (`/proc/<pid>/status` VmRSS) before, after registration and
//!   with every agent connected and pulling: per registered server and per connected agent;
//! - idle: CPU seconds of broker, gateway and the load generator over 30 s
//!   (`/proc/<pid>/stat` utime + stime) with every agent connected, and the same with no
//!   server registered yet (the same-run reference: the gateway's own probes, per tenant),
//!   the difference per 1,000 agents printed against issue 24's goal (≤ 2 % of a core);
//! - `GET /v1/servers` with N servers: time and size;
//! - one no-op deployment to every server at once (POSTed 32 at a time): time until all
//!   are accepted, until all results are stored, and accepted → result stored (the
//!   gateway's own `created_at` → `updated_at`) at p50 / p99 / max. A POST answered
//!   503 ("retry later") is sent again with the same id, as a client does (up to 5
//!   times, backing off), and counted;
//! - a stack of one deployment group over all N servers, created the way users do:
//!   `flue stack create` (the real CLI binary, without `--local`) submits it to the
//!   gateway's engine workers and follows it to CREATE_COMPLETE. Reported: the CLI's
//!   time (start → exit), the operation's record (submitted → finished, attempts,
//!   worker), submitted → the last member's result stored, and each member's
//!   deployment created → result stored (gateway clock) at p50 / p99 / max;
//! - broker shutdown (SIGTERM → exit) with every agent connected, then with the agents
//!   stopped its start-up on the same store and its shutdown again; per server, printed
//!   against issue 24's goal (independent of the number of servers).
//!
//! With `--cluster` the same runs on the local 3-node cluster (`flue-gateway
//! cluster-config`, [`Cluster`]) with `--replicas 3`, `--consumers file|memory` picks
//! the gateway's `--request-consumer-storage` and `--consumer-replicas N` its
//! `--request-consumer-replicas` (default: the stream's). Broker figures are then the three nodes'
//! sums (RSS, CPU); the shutdown figures become: one node (not the one the agents use)
//! SIGTERM → exit with every agent connected, its start again until ready, then every
//! node SIGTERMed at once with no agent until all have exited. The group stack runs there
//! too, through the same gateway.
//!
//! With `--idle-only` a size runs registration, the agents, the idle windows and the broker
//! restarts only: the two idle figures of issue 24 (point 7) in a minute or two per size.
//! `--heartbeat-secs S` sets the simulated agents' heartbeat interval (default: the real
//! agent's default, [`flue_agent::config::DEFAULT_HEARTBEAT_INTERVAL`]).
//!
//! With `--stack-only` a size runs registration, the agents and the group stack only
//! (no idle window, no listing, no deployment to every server, no broker restarts): the
//! stack figure in a few minutes at 10,000 rather than a quarter of an hour.
//!
//! Printed as a table with the ratio of the largest N to the smallest. Run with
//! `--no-deployments` skips the deployment to every server (its figures NaN) and measures
//! a second idle window instead.
//!
//! `bash scripts/bench.sh scale [--cluster] [--consumers memory] [--consumer-replicas 1] [--no-deployments] [--idle-only] [--heartbeat-secs S] [N…]` (release build
//! first). Not part of the test suite.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use flue_proto::{CreateDeployment, Deployment, DeploymentId, DeploymentStatus};
use flue_tests::sim::{self, SimAgents, SimOptions};
use flue_tests::{Cluster, Flue};
use futures_util::StreamExt;

#[path = "measure.rs"]
mod measure;
#[path = "scale/report.rs"]
mod report;

use measure::{bounded, cpu_secs, loadavg, rss_kib};
use report::{Run, print_table};

/// Registrations in flight at once.
const REGISTER_AT_ONCE: usize = 16;
/// Simulated agents connecting at once.
const CONNECT_AT_ONCE: usize = 64;
/// Deployments POSTed at once.
const DEPLOY_AT_ONCE: usize = 32;
/// Times a POST answered 503 ("retry later") is sent again, and the first wait (longer
/// each time).
const BUSY_RETRIES: u32 = 5;
const BUSY_BACKOFF: Duration = Duration::from_millis(250);
/// Long polls waiting for results at once.
const WAIT_AT_ONCE: usize = 256;
/// The idle window over which presence costs CPU.
const IDLE_WINDOW: Duration = Duration::from_secs(30);
/// Bound on the stack's creation: past it, the figure is "not within".
const STACK_LIMIT: Duration = Duration::from_secs(600);
/// Member deployments read at once after the stack's creation.
const READ_AT_ONCE: usize = 64;
/// Bound on any phase: a phase that takes longer is a finding, not a hang.
const PHASE_LIMIT: Duration = Duration::from_secs(900);

/// Where one size runs.
#[derive(Debug, Clone)]
struct Setup {
    /// On the local 3-node cluster (replicas 3) rather than one broker.
    cluster: bool,
    /// The gateway's `--request-consumer-storage`.
    consumers: String,
    /// The gateway's `--request-consumer-replicas`, when given.
    consumer_replicas: Option<String>,
    /// Whether the deployment to every server runs (`--no-deployments` skips it, for a
    /// size whose deployments would not end in the time there is).
    deployments: bool,
    /// Registration, agents and the group stack only (`--stack-only`).
    stack_only: bool,
    /// Registration, agents, idle windows and broker restarts only (`--idle-only`).
    idle_only: bool,
    /// The simulated agents' heartbeat interval (`--heartbeat-secs`).
    heartbeat: Duration,
}

impl Setup {
    /// The setup and the sizes the command line asks for: `--cluster`, `--consumers S`,
    /// `--consumer-replicas N`, `--no-deployments`, `--stack-only`, `--idle-only`,
    /// `--heartbeat-secs S`, and the sizes as bare numbers.
    fn parse(args: &[String]) -> (Setup, Vec<usize>) {
        let mut setup = Setup {
            cluster: false,
            consumers: "file".to_owned(),
            consumer_replicas: None,
            deployments: true,
            stack_only: false,
            idle_only: false,
            heartbeat: flue_agent::config::DEFAULT_HEARTBEAT_INTERVAL,
        };
        let mut sizes = Vec::new();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().cloned().expect("a value after the flag");
            match arg.as_str() {
                "--cluster" => setup.cluster = true,
                "--consumers" => setup.consumers = value(),
                "--consumer-replicas" => setup.consumer_replicas = Some(value()),
                "--no-deployments" => setup.deployments = false,
                "--stack-only" => setup.stack_only = true,
                "--idle-only" => setup.idle_only = true,
                "--heartbeat-secs" => {
                    let secs = value().parse().expect("--heartbeat-secs: seconds");
                    setup.heartbeat = Duration::from_secs(secs);
                }
                size => sizes.extend(size.parse::<usize>().ok()),
            }
        }
        (setup, sizes)
    }
}

/// The brokers of one run and the Flue (gateway, clients) over them.
enum Brokers {
    Single(Box<Flue>),
    Cluster(Box<Cluster>),
}

impl Brokers {
    async fn start(setup: &Setup, n: usize) -> Brokers {
        let max_servers = n.max(10_000).to_string();
        let flags = [
            "--max-servers",
            &max_servers,
            "--request-consumer-storage",
            &setup.consumers,
        ];
        if !setup.cluster {
            return Brokers::Single(Box::new(Flue::start_with(&flags).await));
        }
        // Creating a replicated consumer (its own Raft group) can take seconds on a busy
        // machine: the default 2 s bound would answer a registration 503.
        let mut flags = flags.to_vec();
        flags.extend(["--replicas", "3", "--broker-timeout-ms", "30000"]);
        if let Some(replicas) = &setup.consumer_replicas {
            flags.extend(["--request-consumer-replicas", replicas]);
        }
        Brokers::Cluster(Box::new(Cluster::start(3, &flags).await))
    }

    fn flue(&self) -> &Flue {
        match self {
            Brokers::Single(flue) => flue,
            Brokers::Cluster(cluster) => &cluster.flue,
        }
    }

    /// Every broker process (one, or the three nodes).
    fn pids(&self) -> Vec<u32> {
        let node = |n: &flue_tests::Nats| n.pid().expect("broker running");
        match self {
            Brokers::Single(flue) => vec![node(&flue.nats)],
            Brokers::Cluster(c) => std::iter::once(&c.flue.nats)
                .chain(&c.others)
                .map(node)
                .collect(),
        }
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (setup, sizes) = Setup::parse(&args);
    let sizes = if sizes.is_empty() {
        vec![1000, 5000]
    } else {
        sizes
    };
    let brokers = match setup.cluster {
        true => "a 3-node cluster (replicas 3)",
        false => "one broker",
    };
    let consumer_replicas = setup
        .consumer_replicas
        .as_deref()
        .map_or_else(|| "the stream's".to_owned(), |r| format!("R{r}"));
    println!(
        "Flue scale benchmark: N simulated agents (one process, a heartbeat every {:?}) on {brokers} and one gateway, {} request consumers, {consumer_replicas} replicas",
        setup.heartbeat, setup.consumers
    );
    println!("sizes: {sizes:?}; load average at start: {}", loadavg());
    let mut runs = Vec::new();
    for &n in &sizes {
        let run = measure(&setup, n).await;
        runs.push(run);
    }
    print_table(&sizes, &runs);
}

async fn measure(setup: &Setup, n: usize) -> Run {
    let mut run = Run::default();
    let load_before = loadavg();
    println!("\n== N = {n} (load average {load_before})");
    let mut brokers = Brokers::start(setup, n).await;
    let flue = brokers.flue();
    let pids = brokers.pids();
    let broker = |f: fn(u32) -> u64| pids.iter().map(|&p| f(p)).sum::<u64>();
    let broker_cpu = || pids.iter().map(|&p| cpu_secs(p)).sum::<f64>();
    let gateway = flue.gateway.pid().expect("gateway running");
    let admin = flue.admin_client();
    flue.script_config("noop", "true", &[], &[]).await;
    let rss = |pid| rss_kib(pid);
    run.broker_rss_kib[0] = broker(rss_kib);
    run.gateway_rss_kib[0] = rss(gateway);
    let me = std::process::id();
    if setup.stack_only {
        run.empty_cpu_secs = [f64::NAN; 2];
    } else {
        // The same-run reference: what broker and gateway spend with no server at all.
        let before = [broker_cpu(), cpu_secs(gateway)];
        tokio::time::sleep(IDLE_WINDOW).await;
        run.empty_cpu_secs = [broker_cpu() - before[0], cpu_secs(gateway) - before[1]];
        println!(
            "idle {IDLE_WINDOW:?}, no server registered: CPU s broker/gateway {:?}",
            run.empty_cpu_secs
        );
    }

    let t = Instant::now();
    let servers = bounded(
        PHASE_LIMIT,
        sim::register(&admin, "sim", n, REGISTER_AT_ONCE),
        "registration",
    )
    .await;
    run.register_secs = t.elapsed().as_secs_f64();
    run.broker_rss_kib[1] = broker(rss_kib);
    run.gateway_rss_kib[1] = rss(gateway);
    println!(
        "registered {n} servers in {:.1} s ({:.0}/s)",
        run.register_secs,
        n as f64 / run.register_secs
    );

    let ids: Vec<_> = servers.iter().map(|s| s.id.clone()).collect();
    let options = SimOptions {
        nats_url: flue.nats.url(),
        tenant: "default".parse().expect("tenant"),
        heartbeat: setup.heartbeat,
        connecting_at_once: CONNECT_AT_ONCE,
    };
    let t = Instant::now();
    let agents = SimAgents::start(&options, servers);
    agents.wait_ready(PHASE_LIMIT).await;
    run.connect_secs = t.elapsed().as_secs_f64();
    run.broker_rss_kib[2] = broker(rss_kib);
    run.gateway_rss_kib[2] = rss(gateway);
    println!(
        "{n} agents connected and pulling in {:.1} s",
        run.connect_secs
    );

    if setup.stack_only {
        run.stack = stack_group(flue, &ids).await;
        run.load = [load_before, loadavg()];
        agents.stop().await;
        drop(brokers);
        return run;
    }

    // The window is the measurement itself: nothing is waited for here.
    let before = [broker_cpu(), cpu_secs(gateway), cpu_secs(me)];
    tokio::time::sleep(IDLE_WINDOW).await;
    let after = [broker_cpu(), cpu_secs(gateway), cpu_secs(me)];
    for i in 0..3 {
        run.idle_cpu_secs[i] = after[i] - before[i];
    }
    println!(
        "idle {IDLE_WINDOW:?}: CPU s broker/gateway/generator {:?}",
        run.idle_cpu_secs
    );
    if setup.idle_only {
        run.skipped();
        match &mut brokers {
            Brokers::Single(flue) => broker_restarts(&mut run, &mut flue.nats, agents, n).await,
            Brokers::Cluster(cluster) => node_restarts(&mut run, cluster, agents, n).await,
        }
        run.load = [load_before, loadavg()];
        drop(brokers);
        return run;
    }

    let t = Instant::now();
    let listed = flue
        .http()
        .get(format!("{}/v1/servers", flue.gateway.url()))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .expect("GET /v1/servers")
        .bytes()
        .await
        .expect("GET /v1/servers body");
    run.list_servers_ms = t.elapsed().as_secs_f64() * 1000.0;
    run.list_servers_kib = listed.len() as f64 / 1024.0;
    println!(
        "GET /v1/servers: {:.0} ms, {:.0} KiB",
        run.list_servers_ms, run.list_servers_kib
    );

    if setup.deployments {
        let client = flue.client();
        let retried = Arc::new(AtomicUsize::new(0));
        let t = Instant::now();
        // A refused or timed-out POST is a finding (counted as not COMPLETE), not a panic.
        let accepted: Vec<Option<Deployment>> = bounded(
            PHASE_LIMIT,
            futures_util::stream::iter(ids.iter().cloned())
                .map(|id| {
                    let (client, retried) = (client.clone(), retried.clone());
                    async move {
                        // An id of its own, so that a request sent again is the same one.
                        let create = CreateDeployment {
                            id: Some(DeploymentId::random()),
                            ..CreateDeployment::new("noop".parse().expect("config id"), id.clone())
                        };
                        // 503 is the API's "retry later" (a broker call past its deadline):
                        // a client sends the same request again, as the engine does.
                        let mut attempt = 0;
                        loop {
                            match client.create_deployment(&create).await {
                                Ok(d) => break Some(d),
                                Err(e) if e.status() == Some(503) && attempt < BUSY_RETRIES => {
                                    attempt += 1;
                                    retried.fetch_add(1, Ordering::Relaxed);
                                    tokio::time::sleep(BUSY_BACKOFF * attempt).await;
                                }
                                Err(e) => {
                                    println!("deployment to {id} not accepted: {e}");
                                    break None;
                                }
                            }
                        }
                    }
                })
                .buffer_unordered(DEPLOY_AT_ONCE)
                .collect(),
            "deployments accepted",
        )
        .await;
        let accepted: Vec<Deployment> = accepted.into_iter().flatten().collect();
        let not_accepted = n - accepted.len();
        run.accept_all_secs = t.elapsed().as_secs_f64();
        run.retried = retried.load(Ordering::Relaxed);
        let done: Vec<Deployment> = bounded(
            PHASE_LIMIT,
            futures_util::stream::iter(accepted)
                .map(|d| {
                    let client = client.clone();
                    async move { until_terminal(&client, d).await }
                })
                .buffer_unordered(WAIT_AT_ONCE)
                .collect(),
            "results",
        )
        .await;
        run.results_all_secs = t.elapsed().as_secs_f64();
        run.failed = not_accepted
            + done
                .iter()
                .filter(|d| d.status != DeploymentStatus::Complete)
                .count();
        let latencies = stored_ms(&done);
        // Where the time goes: accepted → the agent had it (its clock: same machine), and the
        // agent finished → the gateway stored it.
        let mut to_agent: Vec<f64> = done
            .iter()
            .filter_map(|d| {
                d.delivered_at
                    .map(|at| (at - d.created_at).as_seconds_f64() * 1000.0)
            })
            .collect();
        to_agent.sort_by(f64::total_cmp);
        let mut to_store: Vec<f64> = done
            .iter()
            .filter_map(|d| {
                d.finished_at
                    .map(|at| (d.updated_at - at).as_seconds_f64() * 1000.0)
            })
            .collect();
        to_store.sort_by(f64::total_cmp);
        run.split_ms = [pct(&to_agent, 50), pct(&to_store, 50)];
        println!(
            "p50 accepted → agent has it {:.0} ms, agent finished → stored {:.0} ms",
            run.split_ms[0], run.split_ms[1]
        );
        run.latency_ms = [
            pct(&latencies, 50),
            pct(&latencies, 99),
            pct(&latencies, 100),
        ];
        println!(
            "{n} deployments: all accepted {:.1} s, all results {:.1} s, accepted → result p50 {:.0} ms p99 {:.0} ms max {:.0} ms, {} not COMPLETE, agents answered {}",
            run.accept_all_secs,
            run.results_all_secs,
            run.latency_ms[0],
            run.latency_ms[1],
            run.latency_ms[2],
            run.failed,
            agents.answered()
        );
    } else {
        // Skipped (`--no-deployments`): a second idle window instead, once whatever the
        // gateway still had to do after the agents connected (presence) is further behind.
        run.accept_all_secs = f64::NAN;
        run.results_all_secs = f64::NAN;
        run.latency_ms = [f64::NAN; 3];
        run.split_ms = [f64::NAN; 2];
        let before = [broker_cpu(), cpu_secs(gateway), cpu_secs(me)];
        tokio::time::sleep(IDLE_WINDOW).await;
        let after = [broker_cpu(), cpu_secs(gateway), cpu_secs(me)];
        let again: Vec<f64> = (0..3).map(|i| after[i] - before[i]).collect();
        println!(
            "deployments skipped (--no-deployments); idle again {IDLE_WINDOW:?}: CPU s broker/gateway/generator {again:?}"
        );
    }
    run.stack = stack_group(flue, &ids).await;

    match &mut brokers {
        Brokers::Single(flue) => broker_restarts(&mut run, &mut flue.nats, agents, n).await,
        Brokers::Cluster(cluster) => node_restarts(&mut run, cluster, agents, n).await,
    }
    run.load = [load_before, loadavg()];
    drop(brokers);
    run
}

/// One broker: its shutdown with every agent connected, then without clients its
/// start-up (JetStream restored) and shutdown again, telling what the N durable
/// consumers cost from what the N connections do.
async fn broker_restarts(run: &mut Run, nats: &mut flue_tests::Nats, agents: SimAgents, n: usize) {
    let t = Instant::now();
    nats.terminate_within(PHASE_LIMIT).await;
    run.broker_shutdown_secs = t.elapsed().as_secs_f64();
    println!(
        "broker shutdown (SIGTERM → exit) with {n} agents connected: {:.2} s",
        run.broker_shutdown_secs
    );
    agents.stop().await;
    let t = Instant::now();
    nats.start_again().await;
    run.broker_start_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    nats.terminate_within(PHASE_LIMIT).await;
    run.broker_idle_shutdown_secs = t.elapsed().as_secs_f64();
    println!(
        "broker start-up with {n} servers' consumers, no agents: {:.2} s; shutdown then: {:.2} s",
        run.broker_start_secs, run.broker_idle_shutdown_secs
    );
}

/// The cluster: node 3 (the agents use node 1) stopped with every agent connected and
/// started again, as in a rolling upgrade; then, agents stopped, every node stopped at
/// once, as in a whole-cluster stop.
async fn node_restarts(run: &mut Run, cluster: &mut Cluster, agents: SimAgents, n: usize) {
    let node = cluster.node_mut(2);
    let t = Instant::now();
    node.terminate_within(PHASE_LIMIT).await;
    run.broker_shutdown_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    node.start_again().await;
    run.broker_start_secs = t.elapsed().as_secs_f64();
    println!(
        "one node's shutdown (SIGTERM → exit) with {n} agents connected: {:.2} s; its start until ready: {:.2} s",
        run.broker_shutdown_secs, run.broker_start_secs
    );
    agents.stop().await;
    let t = Instant::now();
    let stops = std::iter::once(&mut cluster.flue.nats)
        .chain(cluster.others.iter_mut())
        .map(|node| node.terminate_within(PHASE_LIMIT));
    futures_util::future::join_all(stops).await;
    run.broker_idle_shutdown_secs = t.elapsed().as_secs_f64();
    println!(
        "every node's shutdown at once, no agents: {:.2} s",
        run.broker_idle_shutdown_secs
    );
}

/// Creates a stack of one `OS::Heat::SoftwareDeploymentGroup` over every server as a
/// user does: `flue stack create` (the CLI binary, no `--local`) submits it to the
/// gateway's engine workers and follows it. Then reads the operation's record and
/// every member's deployment.
async fn stack_group(flue: &Flue, servers: &[flue_proto::ServerId]) -> report::StackRun {
    let mut figures = report::StackRun::default();
    let mut text = String::from(
        "heat_template_version: 2018-08-31\nresources:\n  noop:\n    type: OS::Heat::SoftwareConfig\n    properties: {group: script, config: 'true'}\n  all:\n    type: OS::Heat::SoftwareDeploymentGroup\n    properties:\n      config: {get_resource: noop}\n      servers:\n",
    );
    for (i, id) in servers.iter().enumerate() {
        text.push_str(&format!("        m{i}: {id}\n"));
    }
    let template = flue.path("scale-stack.yaml");
    std::fs::write(&template, &text).expect("template");
    let args = ["stack", "create", "scale", "-t"];
    let token = flue.gateway.cli_token(&args);
    let started = time::OffsetDateTime::now_utc();
    let t = Instant::now();
    // Its lines go straight to this bench's output, as they come: where it stands is
    // visible while it runs.
    let cli = tokio::process::Command::new(flue_tests::bin("flue"))
        .env("FLUE_TOKEN", token)
        .arg("--gateway")
        .arg(flue.gateway.url())
        .args(args)
        .arg(&template)
        .kill_on_drop(true)
        .status();
    let status = match tokio::time::timeout(STACK_LIMIT, cli).await {
        Ok(status) => status.expect("run flue"),
        Err(_) => {
            println!("flue stack create did not end within {STACK_LIMIT:?}");
            return figures;
        }
    };
    let cli_secs = t.elapsed().as_secs_f64();
    println!(
        "flue stack create: exit {:?} after {cli_secs:.1} s",
        status.code()
    );
    figures.cli_secs = if status.success() { cli_secs } else { f64::NAN };

    let client = flue.client();
    let id = flue_proto::StackId::new("scale").expect("id");
    match client.list_operations_up_to(&id, 1).await {
        Ok(ops) => {
            if let Some(op) = ops.first() {
                let took = op
                    .finished_at
                    .map(|f| (f - op.submitted_at).as_seconds_f64());
                println!(
                    "operation {}: {} ({}), attempts {}, worker {}, submitted → finished {}, reason {:?}, {} progress lines ({} dropped)",
                    op.id,
                    op.state,
                    op.stack_status
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                    op.attempts,
                    op.worker.as_deref().unwrap_or("-"),
                    took.map_or("-".to_owned(), |s| format!("{s:.1} s")),
                    op.reason,
                    op.progress_total(),
                    op.progress_dropped,
                );
                figures.op_secs = took.unwrap_or(f64::NAN);
                figures.attempts = op.attempts as f64;
                figures.submitted_at = Some(op.submitted_at);
            }
        }
        Err(e) => println!("operations of the stack not read: {e}"),
    }
    let stack = match client.get_stack(&id).await {
        Ok(stack) => stack,
        Err(e) => {
            println!("stack not read: {e}");
            return figures;
        }
    };
    let ids: Vec<_> = stack
        .state
        .units
        .values()
        .filter_map(|u| u.current.clone())
        .collect();
    let members: Vec<Deployment> = futures_util::stream::iter(ids)
        .map(|d| {
            let client = client.clone();
            async move { client.get_deployment(&d).await.ok() }
        })
        .buffer_unordered(READ_AT_ONCE)
        .filter_map(|d| async move { d })
        .collect()
        .await;
    let complete = members
        .iter()
        .filter(|d| d.status == DeploymentStatus::Complete)
        .count();
    let latencies = stored_ms(&members);
    figures.member_ms = [
        pct(&latencies, 50),
        pct(&latencies, 99),
        pct(&latencies, 100),
    ];
    let from = figures.submitted_at.unwrap_or(started);
    let first = members.iter().map(|d| d.created_at).min();
    let last = members.iter().map(|d| d.updated_at).max();
    if let (Some(first), Some(last)) = (first, last) {
        figures.to_first_secs = (first - from).as_seconds_f64();
        figures.results_secs = (last - from).as_seconds_f64();
    }
    figures.members_complete = complete as f64;
    println!(
        "stack over {} servers: {} units, {complete} member deployments COMPLETE; submitted → first member created {:.1} s, → last result stored {:.1} s; member created → stored p50 {:.0} ms p99 {:.0} ms max {:.0} ms",
        servers.len(),
        stack.state.units.len(),
        figures.to_first_secs,
        figures.results_secs,
        figures.member_ms[0],
        figures.member_ms[1],
        figures.member_ms[2],
    );
    figures
}

/// Long-polls one deployment until it is COMPLETE or FAILED, or a poll fails (then the last seen).
async fn until_terminal(client: &flue_client::Client, mut d: Deployment) -> Deployment {
    while !d.status.is_terminal() {
        match client
            .wait_deployment(&d.id, Some(d.status), Duration::from_secs(20))
            .await
        {
            Ok(next) => d = next,
            Err(e) => {
                println!("waiting for {}: {e}", d.id);
                return d;
            }
        }
    }
    d
}

/// The `p`th percentile of sorted samples.
fn pct(sorted: &[f64], p: usize) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) * p) / 100]
}

/// Each deployment's accepted → result stored (the gateway's own clock), in ms, sorted.
fn stored_ms(deployments: &[Deployment]) -> Vec<f64> {
    let mut ms: Vec<f64> = deployments
        .iter()
        .map(|d| (d.updated_at - d.created_at).as_seconds_f64() * 1000.0)
        .collect();
    ms.sort_by(f64::total_cmp);
    ms
}
