//! Events: webhooks read the event stream `FLUE_EVT`, and `start: {seq}` means one of its
//! sequences, also after a purge; and the webhook consumers an older gateway left on its
//! copy of the stream (`FLUE_EVT_GW`, sequences of its own) move back to `FLUE_EVT` where
//! they had got to, after which the copy is deleted (issue 24).

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use flue_proto::event::{EVENT_STREAM, GATEWAY_EVENT_STREAM, SOURCE_HEADER};
use flue_proto::webhook::{Webhook, consumer_name};
use flue_proto::{CloudEvent, TenantId};
use flue_tests::{Flue, WAIT};
use serde_json::json;

use super::receiver::{Mode, Receiver};
use super::{ALLOW_LOOPBACK, FAST, SECRET, create, setup, wait_counted};

/// The events account's JetStream, as the gateway sees it.
async fn events_js(flue: &Flue) -> jetstream::Context {
    jetstream::new(flue.nats.events_client().await)
}

/// `(FLUE_EVT sequence, event id)` of every `server.registered` event `FLUE_EVT` keeps.
async fn registered(flue: &Flue) -> Vec<(u64, String)> {
    let mut evt = events_js(flue)
        .await
        .get_stream(EVENT_STREAM)
        .await
        .expect("event stream");
    let state = evt.info().await.expect("info").state.clone();
    let mut found = Vec::new();
    for seq in state.first_sequence.max(1)..=state.last_sequence {
        let message = evt.get_raw_message(seq).await.expect("message");
        let event: CloudEvent = serde_json::from_slice(&message.payload).expect("an event");
        if event.ty.to_string() == "io.flue.server.registered" {
            found.push((seq, event.id));
        }
    }
    found
}

fn registered_filter() -> serde_json::Value {
    json!({"types": ["server.registered"]})
}

#[tokio::test]
async fn a_webhook_starting_at_a_sequence_gets_exactly_the_events_from_that_flue_evt_sequence_on() {
    let (flue, _agent) = setup(&[]).await;
    flue.register("s2").await;
    // An install whose event stream has dropped its first events: sequences no longer
    // count events from 1.
    let js = events_js(&flue).await;
    js.get_stream(EVENT_STREAM)
        .await
        .expect("stream")
        .purge()
        .await
        .expect("purged");
    for server in ["s3", "s4", "s5"] {
        flue.register(server).await;
    }
    let events = registered(&flue).await;
    assert_eq!(events.len(), 3, "{events:?}");
    let (s4_seq, _) = events[1];
    assert!(s4_seq > 2, "numbered after the purged events: {events:?}");

    let receiver = Receiver::start(Mode::Ok).await;
    let response = create(
        &flue,
        json!({"url": receiver.url, "secret": SECRET, "filter": registered_filter(),
               "start": {"seq": s4_seq}}),
    )
    .await;
    assert_eq!(response.status(), 201);
    let webhook: Webhook = response.json().await.expect("webhook");
    // From before the oldest kept event: everything kept.
    let everything = Receiver::start(Mode::Ok).await;
    let response = create(
        &flue,
        json!({"url": everything.url, "secret": SECRET, "filter": registered_filter(),
               "start": {"seq": 1}}),
    )
    .await;
    assert_eq!(response.status(), 201);
    let from_one: Webhook = response.json().await.expect("webhook");

    wait_counted(&flue, webhook.id.as_str(), 2).await;
    wait_counted(&flue, from_one.id.as_str(), 3).await;
    flue.register("s6").await;
    let events = registered(&flue).await;
    let ids: Vec<String> = events.iter().map(|(_, id)| id.clone()).collect();
    receiver.wait_delivered(&ids[3]).await;
    everything.wait_delivered(&ids[3]).await;
    assert_eq!(receiver.delivered(), ids[1..], "from s4 on, each once");
    assert_eq!(everything.delivered(), ids, "every kept event, each once");
}

/// Makes `FLUE_EVT_GW` the way gateways before issue 24 did (`events.rs`,
/// `open_gateway_stream`): no subjects, every event of `FLUE_EVT` copied in by the broker;
/// gives `FLUE_EVT` the consumer limits they gave it; and waits until the copy holds
/// every event.
async fn old_layout(js: &jetstream::Context) -> stream::Stream {
    let mut evt = js.get_stream(EVENT_STREAM).await.expect("stream");
    let mut config = evt.info().await.expect("info").config.clone();
    let copy = js
        .create_stream(stream::Config {
            name: GATEWAY_EVENT_STREAM.to_owned(),
            sources: Some(vec![stream::Source {
                name: EVENT_STREAM.to_owned(),
                ..Default::default()
            }]),
            retention: stream::RetentionPolicy::Limits,
            discard: stream::DiscardPolicy::Old,
            storage: stream::StorageType::File,
            max_age: config.max_age,
            max_bytes: config.max_bytes + config.max_bytes / 4,
            max_consumers: -1,
            ..Default::default()
        })
        .await
        .expect("the old copy");
    config.max_consumers = 1_000;
    config.consumer_limits = Some(stream::ConsumerLimits {
        inactive_threshold: Duration::from_secs(3_600),
        ..Default::default()
    });
    js.update_stream(&config).await.expect("the old limits");
    copied(js, &copy).await;
    copy
}

/// Waits until the copy holds the original of `FLUE_EVT`'s last event.
async fn copied(js: &jetstream::Context, copy: &stream::Stream) {
    let mut evt = js.get_stream(EVENT_STREAM).await.expect("stream");
    let last = evt.info().await.expect("info").state.last_sequence;
    let wanted = format!("{EVENT_STREAM} {last} ");
    let caught_up = async {
        loop {
            let state = copy.get_info().await.expect("copy info").state;
            if state.last_sequence > 0 {
                let m = copy
                    .get_raw_message(state.last_sequence)
                    .await
                    .expect("copy");
                let source = m.headers.get(SOURCE_HEADER).expect("source header");
                if source.as_str().starts_with(&wanted) {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await; // polling interval
        }
    };
    tokio::time::timeout(WAIT, caught_up)
        .await
        .expect("the copy caught up");
}

/// Publishes into `FLUE_EVT`, as the gateway would, a copy of the event at `seq` under
/// a new id (an event published while no gateway ran); the new id.
async fn publish_like(js: &jetstream::Context, seq: u64, id: &str) -> String {
    let evt = js.get_stream(EVENT_STREAM).await.expect("stream");
    let message = evt.get_raw_message(seq).await.expect("message");
    let mut event: serde_json::Value = serde_json::from_slice(&message.payload).expect("json");
    event["id"] = json!(id);
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", id);
    js.publish_with_headers(
        message.subject.to_string(),
        headers,
        serde_json::to_vec(&event).expect("json").into(),
    )
    .await
    .expect("publish")
    .await
    .expect("stored");
    id.to_owned()
}

/// Makes the webhook consumer `name` on the copy as an older gateway did, and has it
/// acknowledge every copy up to (and with) the one of `FLUE_EVT` sequence `upto`, as
/// that gateway would have after delivering them.
async fn old_consumer(copy: &stream::Stream, name: &str, upto: Option<u64>) {
    let consumer: consumer::PullConsumer = copy
        .create_consumer(consumer::pull::Config {
            durable_name: Some(name.to_owned()),
            filter_subject: "flue.default.evt.server.>".to_owned(),
            deliver_policy: consumer::DeliverPolicy::All,
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(30),
            max_ack_pending: 1,
            ..Default::default()
        })
        .await
        .expect("the old gateway's consumer");
    let Some(upto) = upto else { return };
    let acked = async {
        loop {
            let mut batch = consumer
                .fetch()
                .max_messages(1)
                .messages()
                .await
                .expect("fetch");
            let Some(message) = futures_util::StreamExt::next(&mut batch).await else {
                continue;
            };
            let message = message.expect("message");
            let source = message.headers.as_ref().and_then(|h| h.get(SOURCE_HEADER));
            let origin: u64 = source
                .expect("source header")
                .as_str()
                .split_whitespace()
                .nth(1)
                .expect("origin")
                .parse()
                .expect("a sequence");
            message.double_ack().await.expect("acknowledged");
            if origin >= upto {
                return;
            }
        }
    };
    tokio::time::timeout(WAIT, acked)
        .await
        .expect("acknowledged up to the last delivered event");
}

#[tokio::test]
async fn webhook_consumers_an_older_gateway_left_on_its_copy_move_to_flue_evt_and_get_exactly_the_events_they_had_not_had()
 {
    let (mut flue, _agent) = setup(FAST).await;
    // A subscription parked on the first event it got.
    let failing = Receiver::start(Mode::Fail).await;
    let response = create(
        &flue,
        json!({"url": failing.url, "secret": SECRET, "filter": registered_filter(),
               "start": "all"}),
    )
    .await;
    assert_eq!(response.status(), 201);
    let parked: Webhook = response.json().await.expect("webhook");
    flue.gateway.logs().wait_for("webhook parked", WAIT).await;

    let receiver = Receiver::start(Mode::Ok).await;
    let response = create(
        &flue,
        json!({"url": receiver.url, "secret": SECRET, "filter": registered_filter(),
               "start": "all"}),
    )
    .await;
    assert_eq!(response.status(), 201);
    let webhook: Webhook = response.json().await.expect("webhook");
    flue.register("s2").await;
    wait_counted(&flue, webhook.id.as_str(), 2).await;
    let before = registered(&flue).await;
    let (s2_seq, _) = before[1];
    flue.gateway.kill().await;

    // What an older gateway left: the copy, FLUE_EVT's old consumer limits, and the
    // webhooks' consumers on the copy (theirs on FLUE_EVT are not there).
    let js = events_js(&flue).await;
    let tenant = TenantId::new("default").expect("tenant");
    let name = consumer_name(&tenant, &webhook.id);
    let parked_name = consumer_name(&tenant, &parked.id);
    let evt = js.get_stream(EVENT_STREAM).await.expect("stream");
    for n in [&name, &parked_name] {
        evt.delete_consumer(n).await.expect("deleted on FLUE_EVT");
    }
    // Published while no gateway ran; the old gateway delivered the first, acknowledged
    // it and was killed before writing it in the subscription's record (which still says
    // s2): it must not come again. The second it never had.
    let had = publish_like(&js, s2_seq, "server:s9:registered:1").await;
    let missed = publish_like(&js, s2_seq, "server:s10:registered:1").await;
    let copy = old_layout(&js).await;
    let had_seq = registered(&flue)
        .await
        .into_iter()
        .find(|(_, id)| *id == had)
        .expect("published")
        .0;
    old_consumer(&copy, &name, Some(had_seq)).await;
    old_consumer(&copy, &parked_name, None).await;

    // Two gateways start at once on that state (then the test's own again, for its URL).
    let url = flue.nats.url();
    let (_second, _third) = tokio::join!(
        flue_tests::Gateway::start_like(&flue.gateway, &url, ALLOW_LOOPBACK),
        flue_tests::Gateway::start_like(&flue.gateway, &url, ALLOW_LOOPBACK),
    );
    flue.gateway.restart().await;
    flue.register("s3").await;
    let ids: Vec<String> = registered(&flue)
        .await
        .into_iter()
        .map(|(_, id)| id)
        .collect();
    let s3 = ids.last().expect("s3").clone();
    receiver.wait_delivered(&s3).await;
    let mut expected: Vec<String> = before.iter().map(|(_, id)| id.clone()).collect();
    expected.extend([missed.clone(), s3.clone()]);
    assert_eq!(
        receiver.delivered(),
        expected,
        "exactly the events it had not had, in order"
    );

    // Both consumers are on FLUE_EVT; the copy is gone, and FLUE_EVT's old limits.
    evt.consumer_info(&name)
        .await
        .expect("the webhook's consumer on FLUE_EVT");
    evt.consumer_info(&parked_name)
        .await
        .expect("the parked webhook's consumer on FLUE_EVT");
    let gone = async {
        while js.get_stream(GATEWAY_EVENT_STREAM).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await; // polling interval
        }
    };
    tokio::time::timeout(WAIT, gone)
        .await
        .expect("the copy deleted");
    let mut evt = js.get_stream(EVENT_STREAM).await.expect("stream");
    let config = evt.info().await.expect("info").config.clone();
    assert!(config.max_consumers <= 0, "{}", config.max_consumers);
    assert!(
        config
            .consumer_limits
            .as_ref()
            .is_none_or(|l| l.inactive_threshold.is_zero()),
        "{:?}",
        config.consumer_limits
    );

    // The parked one resumes from the event it was parked on: everything.
    failing.set_mode(Mode::Ok);
    let resumed = flue
        .http()
        .post(format!(
            "{}/v1/webhooks/{}/resume",
            flue.gateway.url(),
            parked.id
        ))
        .send()
        .await
        .expect("resume");
    assert_eq!(resumed.status(), 200);
    failing.wait_delivered(&s3).await;
    assert_eq!(failing.delivered(), ids, "from the event it was parked on");
}
