//! Security (issue 10): tenant isolation and every refusal, proven against real processes.

mod broker_agent;
mod broker_agent_refusals;
mod broker_auth;
mod broker_leaf;
mod broker_listener;
mod broker_listener_webhooks;
mod broker_tls;
mod consumer_names;
mod credentials;
mod datakeys;
mod edge_accounts;
mod http_auth;
mod http_ops;
mod http_roles;
mod http_tickets;
mod leaf_link;
mod leaf_repush;
mod listener_accounts;
mod listener_consumers;
mod listener_upgrade;
mod netns;
mod netns_tenants;
mod operator;
mod references;
mod scan;
mod sealing;
mod signing;
mod tenants;
mod tls;
mod webhook_targets;

use std::sync::{Arc, Mutex};

use flue_proto::creds::UserCreds;
use flue_tests::{Flue, SecureNats, WAIT, bin, connect_options};
use futures_util::StreamExt as _;

/// What the broker told a client it refused (`-ERR 'Permissions Violation …'` and others).
pub type Refusals = Arc<Mutex<Vec<String>>>;

/// Connects as `creds` (with `inbox` as its inbox prefix, when given) and collects the
/// errors the broker sends it: a refused publish returns `Ok` and a refused JetStream call
/// only times out, so these are how a test knows the broker, not chance, refused it.
pub async fn refusals(
    secure: &SecureNats,
    creds: &UserCreds,
    inbox: Option<String>,
) -> (async_nats::Client, Refusals) {
    refusals_at(&secure.nats.url(), creds, inbox).await
}

/// [`refusals`] on the broker at `url` (a leaf node).
pub async fn refusals_at(
    url: &str,
    creds: &UserCreds,
    inbox: Option<String>,
) -> (async_nats::Client, Refusals) {
    let errors: Refusals = Arc::default();
    let sink = errors.clone();
    let mut options = connect_options(creds).event_callback(move |event| {
        let sink = sink.clone();
        async move {
            sink.lock().expect("lock").push(event.to_string());
        }
    });
    if let Some(inbox) = inbox {
        options = options.custom_inbox_prefix(inbox);
    }
    let client = options.connect(url).await.expect("minted user connects");
    (client, errors)
}

/// The consumer names `flue events credentials` printed (`… its consumer names: lsn-…-1
/// lsn-…-2 …`).
pub fn consumer_names(out: &std::process::Output) -> Vec<String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let names = stdout
        .split_once("its consumer names: ")
        .unwrap_or_else(|| panic!("no consumer names in {stdout:?}"))
        .1;
    names.split_whitespace().map(str::to_owned).collect()
}

/// The subjects `sub` received up to and including `marker` (bounded by [`WAIT`]). When
/// another connection publishes the marker, `sub` must be the broker's first
/// ([`flue_tests::broker_has_read`]: a flush does not wait for the broker).
pub async fn wait_for_marker(sub: &mut async_nats::Subscriber, marker: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let msg = tokio::time::timeout(WAIT, sub.next())
            .await
            .unwrap_or_else(|_| panic!("no {marker} within {WAIT:?}; saw {seen:?}"))
            .expect("subscription open");
        if msg.subject.as_str() == marker {
            return seen;
        }
        seen.push(msg.subject.to_string());
    }
}

/// Runs `flue ARGS…` against the gateway with a token of the role the command needs.
pub async fn flue_cli(flue: &Flue, args: &[&str]) -> std::process::Output {
    let out = tokio::process::Command::new(bin("flue"))
        .arg("--gateway")
        .arg(flue.gateway.url())
        .args(args)
        .env("FLUE_TOKEN", flue.gateway.cli_token(args))
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(WAIT, out)
        .await
        .expect("flue finishes")
        .expect("run flue")
}
