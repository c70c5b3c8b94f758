//! Events: webhooks read the gateway's copy of the event stream (`FLUE_EVT_GW`), whose
//! sequences are its own, yet `start: {seq}` means a `FLUE_EVT` sequence; and a webhook
//! consumer an older gateway left on `FLUE_EVT` is moved to the copy, resuming where it
//! was.

use async_nats::jetstream::{self, consumer, stream};
use flue_proto::event::{EVENT_STREAM, GATEWAY_EVENT_STREAM, SOURCE_HEADER};
use flue_proto::webhook::{Webhook, consumer_name};
use flue_proto::{CloudEvent, TenantId};
use flue_tests::{Flue, WAIT};
use serde_json::json;

use super::receiver::{Mode, Receiver};
use super::{FAST, SECRET, create, setup, wait_counted};

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

/// Waits until the copy holds the original of `seq`; its own sequence for it.
async fn copied(flue: &Flue, seq: u64) -> u64 {
    let copy = events_js(flue)
        .await
        .get_stream(GATEWAY_EVENT_STREAM)
        .await
        .expect("the gateway's copy");
    let wanted = format!("{EVENT_STREAM} {seq} ");
    let search = async {
        let mut own = 1;
        loop {
            match copy.get_raw_message(own).await {
                Ok(m) => {
                    let source = m.headers.get(SOURCE_HEADER).expect("source header");
                    if source.as_str().starts_with(&wanted) {
                        return own;
                    }
                    own += 1;
                }
                // Not copied yet.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await, // polling interval
            }
        }
    };
    tokio::time::timeout(WAIT, search)
        .await
        .unwrap_or_else(|_| panic!("FLUE_EVT {seq} never reached the copy"))
}

fn registered_filter() -> serde_json::Value {
    json!({"types": ["server.registered"]})
}

#[tokio::test]
async fn a_webhook_starting_at_a_sequence_gets_exactly_the_events_from_that_flue_evt_sequence_on() {
    let (mut flue, _agent) = setup(&[]).await;
    flue.register("s2").await;
    // An install whose event stream has dropped its first events when the copy is made:
    // the copy numbers from 1 what FLUE_EVT numbers from far later.
    let js = events_js(&flue).await;
    js.get_stream(EVENT_STREAM)
        .await
        .expect("stream")
        .purge()
        .await
        .expect("purged");
    js.delete_stream(GATEWAY_EVENT_STREAM)
        .await
        .expect("copy deleted");
    flue.gateway.restart().await;
    for server in ["s3", "s4", "s5"] {
        flue.register(server).await;
    }
    let events = registered(&flue).await;
    assert_eq!(events.len(), 3, "{events:?}");
    let (s4_seq, _) = events[1];
    let s4_own = copied(&flue, s4_seq).await;
    assert_ne!(s4_own, s4_seq, "the two streams number apart");

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

#[tokio::test]
async fn webhook_consumers_left_on_flue_evt_by_an_older_gateway_move_to_the_copy_and_resume() {
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
    let delivered_up_to = before[1].0;

    // What an older gateway left: no copy, and the webhook's consumer on FLUE_EVT,
    // acknowledged up to the last event delivered.
    let js = events_js(&flue).await;
    let tenant = TenantId::new("default").expect("tenant");
    let name = consumer_name(&tenant, &webhook.id);
    let evt = js.get_stream(EVENT_STREAM).await.expect("stream");
    evt.create_consumer(consumer::pull::Config {
        durable_name: Some(name.clone()),
        deliver_policy: consumer::DeliverPolicy::ByStartSequence {
            start_sequence: delivered_up_to + 1,
        },
        ack_policy: consumer::AckPolicy::Explicit,
        max_ack_pending: 1,
        ..Default::default()
    })
    .await
    .expect("the old gateway's consumer");
    let parked_name = consumer_name(&tenant, &parked.id);
    evt.create_consumer(consumer::pull::Config {
        durable_name: Some(parked_name.clone()),
        ack_policy: consumer::AckPolicy::Explicit,
        max_ack_pending: 1,
        ..Default::default()
    })
    .await
    .expect("the old gateway's consumer of the parked webhook");
    js.delete_stream(GATEWAY_EVENT_STREAM)
        .await
        .expect("copy deleted");
    // Published while no gateway copies anything: the moved consumer must still get it.
    flue.register("s3").await;
    flue.gateway.restart().await;
    flue.register("s4").await;

    let ids: Vec<String> = registered(&flue)
        .await
        .into_iter()
        .map(|(_, id)| id)
        .collect();
    receiver.wait_delivered(&ids[3]).await;
    assert_eq!(receiver.delivered(), ids, "none lost, none twice, in order");
    let consumer_left = evt.consumer_info(&name).await;
    assert!(consumer_left.is_err(), "the consumer on FLUE_EVT is gone");
    let mut copy: stream::Stream = js
        .get_stream(GATEWAY_EVENT_STREAM)
        .await
        .expect("the copy made again");
    copy.consumer_info(&name)
        .await
        .expect("the webhook's consumer on the copy");
    assert!(copy.info().await.expect("info").state.messages >= 4);

    // The parked one moved at start, before anything resumed it.
    let moved = async {
        while evt.consumer_info(&parked_name).await.is_ok() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await; // polling interval
        }
    };
    tokio::time::timeout(WAIT, moved)
        .await
        .expect("the parked webhook's consumer left FLUE_EVT");
    copy.consumer_info(&parked_name)
        .await
        .expect("the parked webhook's consumer on the copy");
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
    failing.wait_delivered(&ids[3]).await;
    assert_eq!(failing.delivered(), ids, "from the event it was parked on");
}
