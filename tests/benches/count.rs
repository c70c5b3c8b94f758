//! What the broker does per deployment, counted by the broker itself: messages each
//! connection sent it and got from it (`CONNZ`: `in_msgs` / `out_msgs`) and appends to each
//! stream (`JSZ`: the growth of each stream's last sequence), read through the system
//! account before and after a run of deployments (`throughput.rs`, latency phase: one
//! deployment at a time, one real agent, so nothing else runs meanwhile but presence and
//! the gateway's background passes, which are counted too).
//!
//! A *round trip* is a message a client sends that the broker answers (a JetStream API
//! call, an acknowledged publish, a pull, a double ack): every one of them shows as one
//! message in and one out, so `out_msgs` of a connection that only asks is its round trips
//! plus what it is pushed (watch updates, pulled messages).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// Messages in and out per connection name, appends per stream (`<account>/<stream>`).
#[derive(Debug, Default, Clone)]
pub struct Counts {
    connections: BTreeMap<String, (u64, u64)>,
    streams: BTreeMap<String, u64>,
}

/// A connection of a fresh system-account user of the broker whose keys are in the
/// gateway's `state_dir` (operator mode).
pub async fn system_client(state_dir: &Path, url: &str) -> async_nats::Client {
    let auth = flue_gateway::natsauth::NatsAuth::open(state_dir).expect("initialised state dir");
    let creds = auth.system_creds().expect("system user");
    flue_tests::connect_options(&creds)
        .connect(url)
        .await
        .expect("system user connects")
}

/// The broker's counts now.
pub async fn snapshot(system: &async_nats::Client) -> Counts {
    let connz = ask(system, "$SYS.REQ.SERVER.PING.CONNZ", r#"{"limit": 100000}"#).await;
    let mut counts = Counts::default();
    for c in connz["data"]["connections"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = match c["name"].as_str() {
            Some(n) if !n.is_empty() => n.to_owned(),
            _ => "(unnamed: the bench's own clients)".to_owned(),
        };
        let entry = counts.connections.entry(name).or_default();
        entry.0 += c["in_msgs"].as_u64().unwrap_or(0);
        entry.1 += c["out_msgs"].as_u64().unwrap_or(0);
    }
    let jsz = ask(
        system,
        "$SYS.REQ.SERVER.PING.JSZ",
        r#"{"accounts": true, "streams": true}"#,
    )
    .await;
    for account in jsz["data"]["account_details"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let kind = account_kind(account);
        for s in account["stream_detail"].as_array().into_iter().flatten() {
            let name = format!("{kind}/{}", s["name"].as_str().unwrap_or("?"));
            *counts.streams.entry(name).or_default() +=
                s["state"]["last_seq"].as_u64().unwrap_or(0);
        }
    }
    counts
}

/// Prints `after - before` divided by `n` deployments, per connection and per stream, and
/// the totals.
pub fn print_per_deployment(before: &Counts, after: &Counts, n: usize) {
    let per = |v: u64| v as f64 / n.max(1) as f64;
    println!(
        "broker work per deployment (latency phase, {n} deployments one at a time; CONNZ and JSZ deltas / {n}):"
    );
    let (mut total_in, mut total_out) = (0, 0);
    for (name, (i, o)) in &after.connections {
        let (bi, bo) = before.connections.get(name).copied().unwrap_or_default();
        let (di, dout) = (i.saturating_sub(bi), o.saturating_sub(bo));
        if name.starts_with("flue-gateway system") || di + dout == 0 {
            continue;
        }
        total_in += di;
        total_out += dout;
        println!(
            "  connection {name:<48} messages in {:>6.2}, out {:>6.2}",
            per(di),
            per(dout)
        );
    }
    println!(
        "  all connections but the bench's system user: in {:.2}, out {:.2}",
        per(total_in),
        per(total_out)
    );
    let mut appends = 0;
    for (name, last) in &after.streams {
        let d = last.saturating_sub(before.streams.get(name).copied().unwrap_or(0));
        if d == 0 {
            continue;
        }
        appends += d;
        println!("  stream {name:<48} appends {:>6.2}", per(d));
    }
    println!(
        "  appends, every stream: {:.2} per deployment",
        per(appends)
    );
}

/// The account's role as the bench sees it: its streams say which.
fn account_kind(account: &Value) -> &'static str {
    let names: Vec<&str> = account["stream_detail"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .collect();
    if names.iter().any(|n| n.starts_with("FLUE_EVT")) {
        "events"
    } else if names
        .iter()
        .any(|n| n.starts_with("FLUE_REQ") || n.starts_with("KV_"))
    {
        "tenant"
    } else {
        "other"
    }
}

/// One request to the system account's server API, its JSON answer.
async fn ask(system: &async_nats::Client, subject: &'static str, body: &'static str) -> Value {
    let reply = system
        .request(subject, body.into())
        .await
        .unwrap_or_else(|e| panic!("{subject}: {e}"));
    serde_json::from_slice(&reply.payload).unwrap_or_else(|e| panic!("{subject}: {e}"))
}
