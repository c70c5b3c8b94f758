//! Benchmark (not a test): the stack engine over one large deployment group (issue 11,
//! point 4). N simulated agents ([`flue_tests::sim`]: their own connections, consumers,
//! signed no-op answers, no hook) on one broker and one gateway, the secure way of the
//! harness ([`Flue::start`]); a stack of one `OS::Heat::SoftwareDeploymentGroup` over all
//! N servers driven by the engine `flue stack create|update|delete` runs
//! ([`flue_stack::driver`]).
//!
//! For each N (arguments, default `1000 3000`), on a fresh Flue: create, update with
//! nothing changed, delete — each one's time, and the messages and bytes written to the
//! stack buckets (`flue_stacks`, the heads; `flue_stack_units`, the units), counted by a
//! subscription to their subjects; and the whole stack's size as `GET /v1/stacks/{id}`
//! returns it, which is what every write cost before units were stored apart (one
//! record rewritten per write).
//!
//! Run with `bash scripts/bench.sh stacks [N…]` (release build), or in a debug build with
//! `cargo build --workspace --bins && cargo test -p flue-tests --bench stacks -- N…`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use flue_stack::driver::{self, Options, Source};
use flue_stack::template::Template;
use flue_tests::sim::{self, SimAgents, SimOptions};
use flue_tests::{Flue, broker_has_read};
use futures_util::StreamExt;

/// Registrations in flight at once.
const REGISTER_AT_ONCE: usize = 16;
/// Simulated agents connecting at once.
const CONNECT_AT_ONCE: usize = 64;
/// Bound on any phase: a phase that takes longer is a finding, not a hang.
const PHASE_LIMIT: Duration = Duration::from_secs(900);

/// Messages and bytes written to the stack buckets, as a subscription saw them.
#[derive(Default)]
struct Written {
    heads: AtomicU64,
    head_bytes: AtomicU64,
    units: AtomicU64,
    unit_bytes: AtomicU64,
}

impl Written {
    fn take(&self) -> [u64; 4] {
        [
            self.heads.swap(0, Ordering::Relaxed),
            self.head_bytes.swap(0, Ordering::Relaxed),
            self.units.swap(0, Ordering::Relaxed),
            self.unit_bytes.swap(0, Ordering::Relaxed),
        ]
    }
}

/// One operation's figures.
struct Op {
    name: &'static str,
    secs: f64,
    written: [u64; 4],
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1000, 3000]
    } else {
        sizes
    };
    println!("Flue stack bench: one group over N simulated servers, one broker, one gateway");
    println!("sizes: {sizes:?}; load average at start: {}", loadavg());
    for n in sizes {
        measure(n).await;
    }
}

async fn measure(n: usize) {
    println!("\n== N = {n} (load average {})", loadavg());
    let flue = Flue::start().await;
    let admin = flue.admin_client();
    let servers = bounded(
        sim::register(&admin, "sim", n, REGISTER_AT_ONCE),
        "registration",
    )
    .await;
    let ids: Vec<_> = servers.iter().map(|s| s.id.clone()).collect();
    let options = SimOptions {
        nats_url: flue.nats.url(),
        tenant: "default".parse().expect("tenant"),
        heartbeat: Duration::from_secs(3),
        connecting_at_once: CONNECT_AT_ONCE,
    };
    let agents = SimAgents::start(&options, servers);
    agents.wait_ready(PHASE_LIMIT).await;
    println!("{n} servers registered, agents pulling");

    let written = Arc::new(Written::default());
    let nats = flue.nats.client().await;
    let mut heads = nats
        .subscribe("$KV.flue_stacks.>")
        .await
        .expect("subscribe");
    let mut units = nats
        .subscribe("$KV.flue_stack_units.>")
        .await
        .expect("subscribe");
    broker_has_read(&nats, &nats.new_inbox()).await;
    let count = written.clone();
    let counter = tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(m) = heads.next() => {
                    count.heads.fetch_add(1, Ordering::Relaxed);
                    count.head_bytes.fetch_add(m.payload.len() as u64, Ordering::Relaxed);
                }
                Some(m) = units.next() => {
                    count.units.fetch_add(1, Ordering::Relaxed);
                    count.unit_bytes.fetch_add(m.payload.len() as u64, Ordering::Relaxed);
                }
                else => break,
            }
        }
    });
    nats.flush().await.expect("flush");

    let mut text = String::from(
        "heat_template_version: 2018-08-31\nresources:\n  noop:\n    type: OS::Heat::SoftwareConfig\n    properties: {group: script, config: 'true'}\n  all:\n    type: OS::Heat::SoftwareDeploymentGroup\n    properties:\n      config: {get_resource: noop}\n      servers:\n",
    );
    for (i, id) in ids.iter().enumerate() {
        text.push_str(&format!("        m{i}: {id}\n"));
    }
    let template = Template::parse(&text, &flue.path(".")).expect("template");
    let given = Default::default();
    let mapped = Default::default();
    let source = || Source {
        template: &template,
        given: &given,
        mapped: &mapped,
        converge: None,
    };
    let opts = Options {
        force: false,
        report: Arc::new(|_: &driver::Event| {}),
    };
    let client = flue.client();
    let id = flue_proto::StackId::new("group").expect("id");
    let mut ops = Vec::new();

    let t = Instant::now();
    let created = bounded(driver::create(&client, &id, source(), &opts), "create").await;
    let secs = t.elapsed().as_secs_f64();
    let status = created.map(|s| s.status.to_string());
    println!("create: {status:?} in {secs:.1} s");
    // Every write the subscription saw is in: a flushed round trip after the last.
    nats.flush().await.expect("flush");
    ops.push(Op {
        name: "create",
        secs,
        written: written.take(),
    });
    let whole = stack_bytes(&flue, "group").await;

    let t = Instant::now();
    let updated = bounded(driver::update(&client, &id, source(), &opts), "update").await;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "update (nothing changed): {:?} in {secs:.1} s",
        updated.map(|s| s.status.to_string())
    );
    nats.flush().await.expect("flush");
    ops.push(Op {
        name: "update, nothing changed",
        secs,
        written: written.take(),
    });

    let t = Instant::now();
    let deleted = bounded(driver::delete(&client, &id, &opts), "delete").await;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "delete: {:?} in {secs:.1} s",
        deleted.map(|s| s.map(|s| s.status.to_string()))
    );
    nats.flush().await.expect("flush");
    ops.push(Op {
        name: "delete",
        secs,
        written: written.take(),
    });
    counter.abort();
    agents.stop().await;

    println!(
        "\nN = {n}: whole stack after create (GET /v1/stacks/{{id}}): {} bytes",
        whole
    );
    println!(
        "| operation | s | head writes | head bytes | unit writes | unit bytes | bytes / unit | one-record design (writes × whole stack) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for op in &ops {
        let [heads, head_bytes, units, unit_bytes] = op.written;
        println!(
            "| {} | {:.1} | {heads} | {} | {units} | {} | {:.0} | ~{} |",
            op.name,
            op.secs,
            mib(head_bytes),
            mib(unit_bytes),
            (head_bytes + unit_bytes) as f64 / n as f64,
            mib(heads * whole),
        );
    }
    println!("load average at end: {}", loadavg());
}

/// The size of stack `id` as one JSON document.
async fn stack_bytes(flue: &Flue, id: &str) -> u64 {
    let stack = flue
        .client()
        .get_stack(&flue_proto::StackId::new(id).expect("id"))
        .await
        .expect("stack");
    serde_json::to_vec(&stack).expect("json").len() as u64
}

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    } else {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    }
}

async fn bounded<T>(fut: impl std::future::Future<Output = T>, phase: &str) -> T {
    tokio::time::timeout(PHASE_LIMIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{phase} not done within {PHASE_LIMIT:?}"))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
