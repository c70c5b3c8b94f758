//! Events: webhook signature schemes. A receiver written with the official Standard
//! Webhooks package verifies every delivery of a default subscription; a subscription
//! created with `"signature": "flue-v1"` keeps Flue's older headers and signature.

use std::process::Stdio;

use flue_proto::webhook::{Webhook, WebhookSignature};
use flue_tests::{WAIT, repo_root};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use super::receiver::{Mode, Receiver, assert_flue_v1_signed};
use super::{SECRET, create, deploy, filter, setup, wait_counted};

/// `standard_receiver.py` running under the venv's Python: its URL and its output lines.
struct PythonReceiver {
    url: String,
    lines: Lines<BufReader<ChildStdout>>,
    _child: Child,
}

impl PythonReceiver {
    /// Starts the receiver verifying with `secret` and waits for its port.
    async fn start(secret: &str) -> Self {
        let python = repo_root().join(".venv/bin/python");
        let script = repo_root().join("tests/it/events/webhooks/standard_receiver.py");
        let mut child = Command::new(&python)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", python.display()));
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(format!("{secret}\n").as_bytes())
            .await
            .expect("secret to the receiver");
        drop(stdin);
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = Self::line(&mut lines).await;
        let port = first.strip_prefix("listening ").unwrap_or_else(|| {
            panic!(
                "receiver said {first:?}; does .venv have standardwebhooks? run `bash scripts/test.sh`"
            )
        });
        Self {
            url: format!("http://127.0.0.1:{port}/hook"),
            lines,
            _child: child,
        }
    }

    /// The next output line, within [`WAIT`].
    async fn line(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
        tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("the receiver said nothing in time")
            .expect("the receiver's output")
            .expect("the receiver exited")
    }
}

#[tokio::test]
async fn the_official_standard_webhooks_package_verifies_every_delivery() {
    let (flue, _agent) = setup(&[]).await;
    let mut receiver = PythonReceiver::start(SECRET).await;
    let response = create(
        &flue,
        json!({"url": receiver.url, "secret": SECRET, "filter": filter()}),
    )
    .await;
    assert_eq!(response.status(), 201);
    let webhook: Webhook = response.json().await.expect("webhook body");
    assert_eq!(webhook.signature, WebhookSignature::Standard);

    let (id, last) = deploy(&flue).await;
    let want = [format!("deployment:{id}:queued"), last];
    for event in &want {
        let line = PythonReceiver::line(&mut receiver.lines).await;
        // The message id is the event's id.
        assert_eq!(line, format!("verified {event} {event}"));
    }
    // Counted once each: the receiver's 204s were the only answers.
    let counted = wait_counted(&flue, webhook.id.as_str(), 2).await;
    assert_eq!(counted.last_error, None);
}

#[tokio::test]
async fn a_flue_v1_subscription_keeps_the_old_headers_and_signature() {
    // Any text of 16 bytes or more, as before the standard scheme existed.
    const OLD_SECRET: &str = "webhook-test-secret-0123456789";
    let (flue, _agent) = setup(&[]).await;
    let receiver = Receiver::start(Mode::Ok).await;
    let response = create(
        &flue,
        json!({"url": receiver.url, "secret": OLD_SECRET, "filter": filter(),
               "signature": "flue-v1"}),
    )
    .await;
    assert_eq!(response.status(), 201);
    let webhook: Webhook = response.json().await.expect("webhook body");
    assert_eq!(webhook.signature, WebhookSignature::FlueV1);

    let (_, last) = deploy(&flue).await;
    receiver.wait_delivered(&last).await;
    let got = receiver.received();
    assert_eq!(got.len(), 2, "queued and completed, once each");
    for r in &got {
        assert!(r.flue_v1_headers, "flue-timestamp and flue-signature");
        assert_flue_v1_signed(r, OLD_SECRET);
    }
    let read = wait_counted(&flue, webhook.id.as_str(), 2).await;
    assert_eq!(read.signature, WebhookSignature::FlueV1, "shown in reads");
}
