//! A listener's NATS user: it reads and replays its tenant's events (Rust ordered consumer
//! and the README's nats-py listener, each under one of its own consumer names), and can
//! do nothing else.

use std::os::unix::fs::PermissionsExt as _;

use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use flue_gateway::natsauth::creates::Creations;
use flue_proto::event::EVENT_STREAM;
use flue_proto::jsapi::{self, JS_DOMAIN};
use flue_proto::subject::listener_consumer;
use flue_tests::{SecureNats, WAIT, broker_has_read, repo_root};
use futures_util::StreamExt as _;
use tokio_util::sync::CancellationToken;

use super::{refusals, wait_for_marker};

/// Events of `tenant` in its events account: the stream and two events; the gateway's
/// part of its listeners' consumer creations ([`Creations`]) answers them.
async fn tenant_events(secure: &SecureNats, tenant: &str) -> async_nats::Client {
    let (_, events) = secure.gateway(tenant).await;
    let bounds = flue_gateway::natsauth::creates::Bounds {
        max_consumers: 1_000,
        idle: std::time::Duration::from_secs(3_600),
    };
    let creations = Creations::subscribe(events.clone(), tenant.parse().expect("id"), bounds)
        .await
        .expect("subscribed");
    // The broker has the subscription before any listener asks.
    broker_has_read(&events, &jsapi::account_info()[0]).await;
    tokio::spawn(creations.serve(WAIT, CancellationToken::new()));
    let js = jetstream::new(events.clone());
    js.create_stream(stream::Config {
        name: EVENT_STREAM.to_owned(),
        subjects: vec![flue_proto::event::EVENT_SUBJECTS.to_owned()],
        ..Default::default()
    })
    .await
    .expect("event stream");
    for n in 1..=2 {
        js.publish(
            format!("flue.{tenant}.evt.server.~.web1.n{n}"),
            Bytes::from(format!(
                r#"{{"type":"io.flue.test","subject":"{tenant}-{n}","id":"{tenant}:{n}"}}"#
            )),
        )
        .await
        .expect("publish")
        .await
        .expect("event stored");
    }
    events
}

#[tokio::test]
async fn a_listener_replays_its_tenants_events_and_can_do_nothing_else() {
    let secure = SecureNats::start(&["alpha", "beta"], None).await;
    let alpha_events = tenant_events(&secure, "alpha").await;
    let _beta_events = tenant_events(&secure, "beta").await;
    let (alpha_main, _) = secure.gateway("alpha").await;
    let (id, creds) = secure
        .auth
        .listener_creds(&"alpha".parse().expect("id"))
        .expect("listener");
    let (listener, errors) = refusals(&secure, &creds, None).await;
    let js = jetstream::with_domain(listener.clone(), JS_DOMAIN);

    // Replay from the start with an ordered consumer.
    let stream = js
        .get_stream(EVENT_STREAM)
        .await
        .expect("listener reads the stream info");
    let replay = stream
        .create_consumer(consumer::pull::OrderedConfig {
            name: Some(listener_consumer(&id, 1)),
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("listener creates an ordered consumer");
    let mut messages = replay.messages().await.expect("messages");
    let mut payloads = Vec::new();
    while payloads.len() < 2 {
        let msg = tokio::time::timeout(WAIT, messages.next())
            .await
            .expect("replayed in time")
            .expect("a message")
            .expect("no error");
        payloads.push(String::from_utf8_lossy(&msg.payload).into_owned());
    }
    assert!(
        payloads[0].contains("alpha:1") && payloads[1].contains("alpha:2"),
        "alpha's events in order: {payloads:?}"
    );
    // A message get by sequence also works (the gateway's FLUE_EVT has no direct get).
    let first = stream.get_raw_message(1).await.expect("message get");
    assert!(String::from_utf8_lossy(&first.payload).contains("alpha:1"));
    // Done reading: the ordered consumer stops pulling.
    drop(messages);

    // It cannot publish an event, through JetStream or core NATS.
    let forged = js
        .publish(
            "flue.alpha.evt.server.~.web1.forged",
            Bytes::from_static(b"forged"),
        )
        .await;
    if let Ok(ack) = forged {
        assert!(ack.await.is_err(), "a listener's event was stored");
    }
    listener
        .publish(
            "flue.alpha.evt.server.~.web1.forged2",
            Bytes::from_static(b"forged"),
        )
        .await
        .expect("core publish returns ok even when denied");
    // Nor subscribe to the tenant account's subjects (a different account entirely).
    let mut requests = listener
        .subscribe("flue.alpha.req.>")
        .await
        .expect("subscribe call");
    // The marker is an event (the stream's export reaches the listener account; an
    // inbox of the events account does not).
    let marker_subject = "flue.alpha.evt.server.~.web1.marker";
    let mut marker = listener
        .subscribe(marker_subject)
        .await
        .expect("allowed sub");
    // Both subscriptions are the broker's (one refused, one in place) before anything is
    // published; its probe is a request the listener may make.
    let [stream_info, _] = jsapi::stream_info(EVENT_STREAM);
    broker_has_read(&listener, &stream_info).await;
    alpha_main
        .publish("flue.alpha.req.web1", Bytes::from_static(b"a request"))
        .await
        .expect("publish");
    alpha_main.flush().await.expect("flush");
    // A message of the tenant account would have arrived before this later marker.
    alpha_events
        .publish(marker_subject, Bytes::from_static(b"m"))
        .await
        .expect("publish");
    alpha_events.flush().await.expect("flush");
    let _ = wait_for_marker(&mut marker, marker_subject).await;
    assert!(
        futures_util::FutureExt::now_or_never(requests.next()).is_none(),
        "the listener received a tenant-account message"
    );
    let stored = jetstream::new(alpha_events.clone())
        .get_stream(EVENT_STREAM)
        .await
        .expect("stream")
        .info()
        .await
        .expect("info")
        .state
        .messages;
    assert_eq!(
        stored, 3,
        "nothing the listener published was stored (two events, the marker)"
    );
    let errors = errors.lock().expect("lock").join("\n");
    assert!(
        errors.contains(
            "Permissions Violation for Publish to \"flue.alpha.evt.server.~.web1.forged2\""
        ),
        "{errors}"
    );
    assert!(
        errors.contains("Permissions Violation for Subscription to \"flue.alpha.req.>\""),
        "{errors}"
    );
}

#[tokio::test]
async fn a_listener_cannot_delete_the_gateways_consumers() {
    let secure = SecureNats::start(&["alpha"], None).await;
    let events = tenant_events(&secure, "alpha").await;
    let stream = jetstream::new(events)
        .get_stream(EVENT_STREAM)
        .await
        .expect("stream");
    stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some("webhook-1".into()),
            ..Default::default()
        })
        .await
        .expect("the gateway's durable consumer");
    let (_, creds) = secure
        .auth
        .listener_creds(&"alpha".parse().expect("id"))
        .expect("listener");
    let (listener, errors) = refusals(&secure, &creds, None).await;
    let deleted = jetstream::with_domain(listener, JS_DOMAIN)
        .delete_consumer_from_stream("webhook-1", EVENT_STREAM)
        .await;
    assert!(deleted.is_err(), "the listener deleted a consumer");
    let mut names: Vec<String> = stream
        .consumer_names()
        .map(|n| n.expect("name"))
        .collect()
        .await;
    names.sort();
    assert_eq!(names, ["webhook-1"], "the consumer is still there");
    let errors = errors.lock().expect("lock").join("\n");
    assert!(
        errors.contains("CONSUMER.DELETE.FLUE_EVT.webhook-1"),
        "{errors}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_listener_replays_its_tenants_events_with_listener_credentials() {
    let secure = SecureNats::start(&["alpha", "beta"], None).await;
    let _alpha = tenant_events(&secure, "alpha").await;
    let _beta = tenant_events(&secure, "beta").await;
    let (id, creds) = secure
        .auth
        .listener_creds(&"alpha".parse().expect("id"))
        .expect("listener");
    let consumer = listener_consumer(&id, 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("listener.creds");
    std::fs::write(&file, creds.to_text()).expect("write creds");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let run = |tenant: &'static str| {
        tokio::process::Command::new(repo_root().join(".venv/bin/python"))
            .arg(repo_root().join("examples/listeners/flue_events.py"))
            .args([
                &secure.nats.url(),
                tenant,
                "--seq",
                "1",
                "--idle",
                "1",
                "--domain",
                JS_DOMAIN,
            ])
            .arg("--creds")
            .arg(&file)
            .args(["--consumer", consumer.as_str()])
            .output()
    };
    let out = tokio::time::timeout(WAIT, run("alpha"))
        .await
        .expect("in time")
        .expect("python runs");
    assert!(
        out.status.success(),
        "listener failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        lines,
        [
            "1 io.flue.test alpha-1 alpha:1",
            "2 io.flue.test alpha-2 alpha:2"
        ],
        "alpha's two events, replayed in order"
    );
    // Asking for beta's events with alpha's listener finds none: its account has only alpha's.
    let out = tokio::time::timeout(WAIT, run("beta"))
        .await
        .expect("in time")
        .expect("python runs");
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "alpha's listener read beta's events"
    );
}
