//! Whether the broker itself holds a Flue stream broken until it is restarted: nats-server's
//! own health check (`$SYS.REQ.SERVER.PING.HEALTHZ`, over the operator's system-account
//! connection), every [`PROBE_INTERVAL`] × [`STREAMS_EVERY`] (10 s) while it finds none,
//! every [`PROBE_INTERVAL`] while it does, for `/readyz`. (On a cluster each node's answer
//! walks its every stream and consumer: at idle, the rarer the better.)
//!
//! Why the tenant runtimes' probe ([`super::readiness`]) cannot see it: a stream whose write
//! failed inside nats-server (its disk full: "no space left on device") keeps that error
//! (nats-server 2.15.1's file store never clears it) and drops every later write without an
//! answer, while refusals before the store (the probe's) are still answered. Writes then
//! answer 503 until nats-server is restarted, even once the disk has room; the broker's
//! health check is the one place that says so ("JetStream stream '…' write error").

use std::time::Duration;

use flue_proto::subject::is_flue_stream;
use flue_proto::{NotReady, NotReadyCode};
use futures_util::StreamExt;
use serde::Deserialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::readiness::{PROBE_INTERVAL, STREAMS_EVERY};

/// Every server of the broker answers it (one for a single server, each node of a cluster).
const HEALTHZ: &str = flue_proto::jsapi::SERVER_HEALTHZ;

/// How long the answers of every server are gathered.
const GATHER: Duration = Duration::from_millis(500);

/// One server's answer.
#[derive(Debug, Deserialize)]
struct Answer {
    data: Option<Healthz>,
}

/// Its health (nats-server's `HealthStatus`).
#[derive(Debug, Default, Deserialize)]
struct Healthz {
    #[serde(default)]
    errors: Vec<HealthzError>,
}

/// One thing it found wrong (nats-server's `HealthzError`).
#[derive(Debug, Deserialize)]
struct HealthzError {
    #[serde(default)]
    stream: String,
    #[serde(default)]
    error: String,
}

/// The verdict of one round of answers: a Flue stream with a write error, if any. Its
/// account (a tenant's) and the broker's file paths are not repeated.
fn verdict(answers: &[Healthz]) -> Option<NotReady> {
    let broken = answers
        .iter()
        .flat_map(|a| &a.errors)
        .find(|e| is_flue_stream(&e.stream) && e.error.contains("write error"))?;
    let cause = if broken.error.contains("no space left") {
        " (its disk was full)"
    } else {
        ""
    };
    Some(NotReady {
        code: NotReadyCode::BrokerNeedsRestart,
        message: format!(
            "stream {} has a write error on the broker{cause}: nats-server drops its writes until it \
             is restarted, even once there is room; give the broker's disk room, then restart nats-server",
            broken.stream
        ),
    })
}

/// Asks every server of the broker for its health, with details, and judges the answers
/// gathered within [`GATHER`]. No answer (a broker down, one too old) is no verdict.
async fn probe(system: &async_nats::Client) -> Option<NotReady> {
    let inbox = system.new_inbox();
    let mut answers = system.subscribe(inbox.clone()).await.ok()?;
    system
        .publish_with_reply(HEALTHZ, inbox, r#"{"details":true}"#.into())
        .await
        .ok()?;
    let mut found = Vec::new();
    let until = tokio::time::sleep(GATHER);
    tokio::pin!(until);
    loop {
        tokio::select! {
            () = &mut until => break,
            answer = answers.next() => match answer {
                Some(m) => {
                    if let Ok(Answer { data: Some(health) }) = serde_json::from_slice(&m.payload) {
                        found.push(health);
                    }
                }
                None => break,
            },
        }
    }
    verdict(&found)
}

/// Asks over `system` (the operator's system-account connection) every [`PROBE_INTERVAL`]
/// while a broken stream is found, every [`STREAMS_EVERY`] of them otherwise, keeping
/// `found` current and logging each change, until `shutdown`.
pub async fn run(
    system: async_nats::Client,
    found: watch::Sender<Option<NotReady>>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(PROBE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut since = STREAMS_EVERY;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if found.borrow().is_none() && since < STREAMS_EVERY {
            since += 1;
            continue;
        }
        since = 1;
        let verdict = tokio::select! {
            () = shutdown.cancelled() => return,
            verdict = probe(&system) => verdict,
        };
        let changed = found.borrow().as_ref().map(|r| r.message.clone())
            != verdict.as_ref().map(|r| r.message.clone());
        if changed {
            match &verdict {
                Some(reason) => {
                    warn!(reason = %reason.message, "the broker holds a Flue stream broken until it is restarted; /readyz answers 503");
                }
                None => info!("the broker reports no broken Flue stream"),
            }
        }
        found.send_replace(verdict);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flue_stream_with_a_write_error_asks_for_a_restart_without_naming_the_account() {
        // nats-server 2.15.1's answer, as it arrives (paths shortened).
        let answer: Answer = serde_json::from_value(serde_json::json!({
            "server": {"name": "n1"},
            "data": {
                "status": "unavailable",
                "status_code": 503,
                "errors": [
                    {"type": 3, "account": "AAK7Y7", "stream": "BALLAST",
                     "error": "JetStream stream 'AAK7Y7 > BALLAST' write error: write /tmp/x/1.blk: no space left on device"},
                    {"type": 3, "account": "AAK7Y7", "stream": "KV_flue_deployments",
                     "error": "JetStream stream 'AAK7Y7 > KV_flue_deployments' write error: write /tmp/x/1.blk: no space left on device"}
                ]
            }
        }))
        .expect("an answer");
        let reason = verdict(&[answer.data.expect("data")]).expect("a verdict");
        assert_eq!(reason.code, NotReadyCode::BrokerNeedsRestart);
        for said in [
            "KV_flue_deployments",
            "disk was full",
            "restart nats-server",
        ] {
            assert!(reason.message.contains(said), "{said:?} in {reason:?}");
        }
        for never in ["AAK7Y7", "/tmp", "BALLAST"] {
            assert!(!reason.message.contains(never), "{never:?} in {reason:?}");
        }
        assert_eq!(verdict(&[Healthz::default()]), None);
    }
}
