//! Issue 9, hardening: each module reproduces one point against real processes — hooks that
//! outlive their agent, the gateway's HTTP side under load, outages and slow clients, stray
//! requests, the broker's consumer limit, a full store and a cluster without quorum (issue
//! 24, point 5), event fixes, generated hostile requests (real nats-server, real gateway
//! process, real agents, raw sockets where it matters).

mod backpressure;
mod consumer_limit;
mod hook_lifetime;
mod hostile;
mod long_polls;
mod outage;
mod proptest_api;
pub(crate) mod raw;
mod reregister;
mod slow_clients;
mod stray;
mod wire_numbers;

use std::time::Duration;

use flue_proto::Health;

/// `GET /readyz` (or `/livez`): the status code and the health body.
async fn health(http: &flue_tests::Http, base: &str, path: &str) -> (u16, Health) {
    let resp = http
        .get(format!("{base}{path}"))
        .send()
        .await
        .expect("health endpoint answers");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("a health body"))
}

/// Polls `path` every 20 ms until `check` accepts its answer, for at most `limit`.
async fn health_until(
    http: &flue_tests::Http,
    base: &str,
    path: &str,
    what: &str,
    limit: Duration,
    check: impl Fn(u16, &Health) -> bool,
) -> Health {
    let fut = async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tick.tick().await;
            let (status, body) = health(http, base, path).await;
            if check(status, &body) {
                return body;
            }
        }
    };
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out after {limit:?} waiting for {what}"))
}
