//! A listener's NATS user cannot touch the gateway's webhook consumers: they are on
//! `FLUE_EVT` under names no listener right names (a listener's rights name its own eight
//! consumers), so pulling from, acknowledging on, reading, deleting or listing them is
//! refused, and the webhook's receiver still gets every event; replaying `FLUE_EVT`
//! still works. And listeners at their consumer limit (the gateway's, counting theirs
//! alone) starve neither SSE clients nor webhooks, whose consumers are on that stream.

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use bytes::Bytes;
use flue_proto::creds::UserCreds;
use flue_proto::event::EVENT_STREAM;
use flue_proto::jsapi::{JS_DOMAIN, api};
use flue_proto::webhook::{Webhook, consumer_name};
use flue_proto::{CloudEvent, TenantId};
use flue_tests::{Flue, WAIT};
use futures_util::StreamExt as _;
use serde_json::json;

use super::{Refusals, consumer_names, flue_cli, refusals_at};
use crate::events::webhooks::receiver::{Mode, Receiver};

/// Waits until the broker has told the listener it refused a publish to `subject`.
pub(super) async fn refused(errors: &Refusals, subject: &str) {
    let wanted = format!("Permissions Violation for Publish to \"{subject}\"");
    let wait = async {
        loop {
            if errors
                .lock()
                .expect("lock")
                .iter()
                .any(|e| e.contains(&wanted))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await; // polling interval
        }
    };
    tokio::time::timeout(WAIT, wait).await.unwrap_or_else(|_| {
        panic!(
            "no refusal of {subject}; got {:?}",
            errors.lock().expect("lock")
        )
    });
}

/// The servers `server.registered` event ids (`server:<id>:registered:<ms>`) name.
fn servers(ids: &[String]) -> Vec<String> {
    ids.iter()
        .map(|id| id.split(':').nth(1).unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn a_listener_can_neither_pull_nor_ack_nor_list_the_webhook_consumers_and_the_webhook_gets_every_event()
 {
    let flue = Flue::start_operator(&["--webhook-allow", "127.0.0.1/32"]).await;
    let receiver = Receiver::start(Mode::Ok).await;
    flue.register("s1").await;
    let response = flue
        .http()
        .post(format!("{}/v1/webhooks", flue.gateway.url()))
        .json(
            &json!({"url": receiver.url, "secret": "whsec_Zmx1ZS13ZWJob29rLXRlc3Qta2V5LTAxMjM0NTY3ODk=",
                      "filter": {"types": ["server.registered"]}, "start": "all"}),
        )
        .send()
        .await
        .expect("POST /v1/webhooks");
    assert_eq!(response.status(), 201);
    let webhook: Webhook = response.json().await.expect("webhook");
    let first = receiver.wait_for("the first event", |got| !got.is_empty());
    first.await;
    let first_id = receiver.delivered()[0].clone();
    assert!(first_id.starts_with("server:s1:"), "{first_id}");

    let file = flue.path("listener.creds");
    let path = file.display().to_string();
    let out = flue_cli(&flue, &["events", "credentials", "--out", path.as_str()]).await;
    assert!(out.status.success(), "{out:?}");
    let mine = consumer_names(&out);
    let creds = UserCreds::parse(&std::fs::read_to_string(&file).expect("read")).expect("creds");
    let (listener, errors) = refusals_at(&flue.nats.url(), &creds, None).await;

    // Every way at the webhook's consumer, through the JetStream API.
    let name = consumer_name(&TenantId::new("default").expect("tenant"), &webhook.id);
    let js_api = |rest: &str| api(rest)[0].clone();
    let attacks = [
        js_api(&format!("CONSUMER.INFO.{EVENT_STREAM}.{name}")),
        js_api(&format!("CONSUMER.DELETE.{EVENT_STREAM}.{name}")),
        js_api(&format!("CONSUMER.CREATE.{EVENT_STREAM}.{name}")),
        js_api(&format!("CONSUMER.DURABLE.CREATE.{EVENT_STREAM}.{name}")),
        js_api(&format!("CONSUMER.NAMES.{EVENT_STREAM}")),
        js_api(&format!("CONSUMER.LIST.{EVENT_STREAM}")),
        // Acknowledging the event the consumer would hand out next.
        format!("$JS.ACK.{EVENT_STREAM}.{name}.1.2.2.0.0"),
    ];
    let inbox = listener.new_inbox();
    let mut answers = listener.subscribe(format!("{inbox}.>")).await.expect("sub");
    for (n, subject) in attacks.iter().enumerate() {
        listener
            .publish_with_reply(
                subject.clone(),
                format!("{inbox}.{n}"),
                Bytes::from_static(br#"{"batch":1,"no_wait":true}"#),
            )
            .await
            .expect("a denied publish still returns ok");
    }
    listener.flush().await.expect("flush");
    for subject in &attacks {
        refused(&errors, subject).await;
    }
    assert!(
        futures_util::FutureExt::now_or_never(answers.next()).is_none(),
        "the JetStream API answered a refused request"
    );
    // The client library's own calls fail the same way.
    let mut js = jetstream::with_domain(listener.clone(), JS_DOMAIN);
    js.set_timeout(Duration::from_secs(1));
    let stream = js.get_stream(EVENT_STREAM).await.expect("the event stream");
    assert!(stream.consumer_info(&name).await.is_err());

    // Pulling from the webhook's consumer: a listener may pull only from its own
    // consumers, so this pull is refused.
    let stolen_inbox = listener.new_inbox();
    let mut stolen = listener.subscribe(stolen_inbox.clone()).await.expect("sub");
    listener
        .publish_with_reply(
            js_api(&format!("CONSUMER.MSG.NEXT.{EVENT_STREAM}.{name}")),
            stolen_inbox,
            Bytes::from_static(br#"{"batch":10,"expires":20000000000}"#),
        )
        .await
        .expect("publish");
    listener.flush().await.expect("flush");
    refused(
        &errors,
        &js_api(&format!("CONSUMER.MSG.NEXT.{EVENT_STREAM}.{name}")),
    )
    .await;

    // The webhook still gets every event, each once, in order.
    flue.register("s2").await;
    flue.register("s3").await;
    receiver
        .wait_for("s3's registration", |got| {
            got.iter().any(|r| r.event_id.starts_with("server:s3:"))
        })
        .await;
    let delivered = receiver.delivered();
    assert_eq!(
        servers(&delivered),
        ["s1", "s2", "s3"],
        "none stolen, none twice"
    );

    while let Some(Some(answer)) = futures_util::FutureExt::now_or_never(stolen.next()) {
        assert!(
            answer.payload.is_empty(),
            "the listener pulled an event: {:?}",
            answer.payload
        );
    }

    // Replaying FLUE_EVT with an ordered consumer still works with these credentials.
    let stream = js.get_stream(EVENT_STREAM).await.expect("the event stream");
    let replay = stream
        .create_consumer(consumer::pull::OrderedConfig {
            name: Some(mine[0].clone()),
            filter_subject: "flue.default.evt.server.>".to_owned(),
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("an ordered consumer");
    let mut messages = replay.messages().await.expect("messages");
    let mut replayed = Vec::new();
    while replayed.len() < delivered.len() {
        let message = tokio::time::timeout(WAIT, messages.next())
            .await
            .expect("replayed in time")
            .expect("a message")
            .expect("no error");
        let event: CloudEvent = serde_json::from_slice(&message.payload).expect("event");
        if event.ty.to_string() == "io.flue.server.registered" {
            replayed.push(event.id);
        }
    }
    assert_eq!(replayed, delivered);
}

#[tokio::test]
async fn listeners_at_their_consumer_limit_starve_neither_sse_nor_webhooks() {
    let flue = Flue::start_operator(&[
        "--webhook-allow",
        "127.0.0.1/32",
        "--events-max-consumers",
        "2",
    ])
    .await;
    let receiver = Receiver::start(Mode::Ok).await;
    let response = flue
        .http()
        .post(format!("{}/v1/webhooks", flue.gateway.url()))
        .json(
            &json!({"url": receiver.url, "secret": "whsec_Zmx1ZS13ZWJob29rLXRlc3Qta2V5LTAxMjM0NTY3ODk=",
                      "filter": {"types": ["server.registered"]}}),
        )
        .send()
        .await
        .expect("POST /v1/webhooks");
    assert_eq!(response.status(), 201);

    let file = flue.path("listener.creds");
    let path = file.display().to_string();
    let out = flue_cli(&flue, &["events", "credentials", "--out", path.as_str()]).await;
    assert!(out.status.success(), "{out:?}");
    let mine = consumer_names(&out);
    let creds = UserCreds::parse(&std::fs::read_to_string(&file).expect("read")).expect("creds");
    let (listener, _errors) = refusals_at(&flue.nats.url(), &creds, None).await;
    let js = jetstream::with_domain(listener, JS_DOMAIN);
    let stream = js.get_stream(EVENT_STREAM).await.expect("the event stream");
    let make = |n: usize| {
        stream.create_consumer(consumer::pull::Config {
            name: Some(mine[n].clone()),
            ..Default::default()
        })
    };
    make(0).await.expect("first consumer");
    make(1).await.expect("second consumer");
    let third = make(2).await.expect_err("a third consumer");
    assert!(
        third
            .to_string()
            .contains("maximum consumers limit reached"),
        "{third}"
    );
    // Made again (an update of one of its own): not a new one, so taken.
    make(1).await.expect("the second consumer made again");

    // The limit counts listeners' consumers alone: SSE clients make theirs on the same
    // stream, a client is answered 200 and streams.
    let response = flue
        .http()
        .get(format!(
            "{}/v1/events?type=server.registered",
            flue.gateway.url()
        ))
        .send()
        .await
        .expect("GET /v1/events");
    assert_eq!(
        response.status(),
        200,
        "SSE with the event stream's consumers all taken"
    );
    flue.register("s1").await;
    let mut response = response;
    let streamed = async {
        let mut text = String::new();
        while !text.contains("server:s1:registered") {
            let chunk = response
                .chunk()
                .await
                .expect("a chunk")
                .expect("the stream goes on");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    tokio::time::timeout(WAIT, streamed)
        .await
        .expect("s1's registration streamed over SSE");
    let events = jetstream::new(flue.nats.events_client().await);
    let mut evt = events.get_stream(EVENT_STREAM).await.expect("stream");
    let consumers = evt.info().await.expect("info").state.consumer_count;
    assert!(
        consumers >= 4,
        "two listeners', the webhook's and the SSE client's on FLUE_EVT: {consumers}"
    );

    // The webhook goes on delivering.
    receiver
        .wait_for("s1's registration", |got| {
            got.iter().any(|r| r.event_id.starts_with("server:s1:"))
        })
        .await;
}
