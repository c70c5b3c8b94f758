//! Listener accounts (issue 22): a listener is a user of its tenant's listener account,
//! which holds no stream and reaches the events account only through imports, its
//! consumers made by the gateway (pull only). Proven by attack with a real gateway and
//! broker: every subject a listener's JWT allows with every reply naming a stored subject
//! or a stream's purge or deletion or one of the gateway's consumers, and push consumers
//! delivering onto such subjects; what users read is unchanged by it (an SSE replay, one
//! open through the attack, a webhook: the same events, each once, then new ones); and
//! the same attack by a listener of the events account (the layout before) deletes an
//! event stream. The upgrade from that layout is `listener_upgrade`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use flue_gateway::natsauth::{AccountKind, NatsAuth, accounts, jwt, perms};
use flue_proto::creds::UserCreds;
use flue_proto::event::EVENT_STREAM;
use flue_proto::jsapi;
use flue_proto::subject::{LISTENER_CONSUMER_PREFIX, listener_consumer, listener_id};
use flue_proto::webhook::Webhook;
use flue_tests::{Flue, Sse, WAIT, broker_has_read};
use futures_util::StreamExt as _;
use serde_json::json;

use super::edge_accounts::{account_key, changes, replies, snapshot, tenant};
use super::refusals_at;
use crate::events::webhooks::SECRET;
use crate::events::webhooks::receiver::{Mode, Receiver};

/// Which account the listener is a user of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// The listener account, as the gateway mints listeners now.
    Listen,
    /// The events account, as the gateway minted them before (signed here with the same
    /// rights).
    Events,
}

/// A listener's id and credentials in `layout`.
pub(super) fn listener_creds(flue: &Flue, layout: Layout) -> (String, UserCreds) {
    match layout {
        Layout::Listen => NatsAuth::open(&flue.gateway.state_dir())
            .expect("state dir")
            .listener_creds(&tenant())
            .expect("the gateway's listener"),
        Layout::Events => {
            let id = listener_id(0x0123_4567_89ab);
            let key = account_key(&flue.gateway.state_dir(), AccountKind::Events);
            let creds = accounts::mint_user(&key, "old listener", perms::listener(&tenant(), &id))
                .expect("creds");
            (id, creds)
        }
    }
}

/// A consumer creation's body for consumer `name`, with `settings` added to its config.
fn creation(name: &str, settings: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"stream_name":"{EVENT_STREAM}","config":{{"name":"{name}","ack_policy":"none"{settings}}}}}"#
    ))
}

/// Publishes, as the listener `creds`, on every subject its JWT allows (wildcards made
/// concrete) with each of `replies`, each with a body its service answers; returns how
/// many. Waits until the broker has answered a request sent after them all.
async fn attack(flue: &Flue, creds: &UserCreds, replies: &[String]) -> usize {
    let (listener, _refused) = refusals_at(&flue.nats.url(), creds, None).await;
    let claims: jwt::Claims<jwt::User> = jwt::decode(&creds.jwt).expect("the listener's jwt");
    let mut published = 0;
    for allowed in &claims.nats.publish.allow {
        let subject = allowed.replace(".>", ".flue.default.evt.x");
        let name = subject
            .split('.')
            .find(|t| t.starts_with("lsn-"))
            .unwrap_or("none");
        let body = if subject.contains("MSG.NEXT") {
            Bytes::from_static(br#"{"batch":1,"no_wait":true}"#)
        } else if subject.contains("CONSUMER.CREATE") {
            creation(name, "")
        } else if subject.contains("GET") {
            Bytes::from_static(br#"{"seq":1}"#)
        } else {
            Bytes::new()
        };
        for reply in replies {
            listener
                .publish_with_reply(subject.clone(), reply.clone(), body.clone())
                .await
                .expect("publish");
            published += 1;
        }
    }
    let [info, _] = jsapi::stream_info(EVENT_STREAM);
    for _ in 0..2 {
        broker_has_read(&listener, &info).await;
    }
    published
}

/// The answer to a request on `subject`; the gateway may still be making the
/// attack's thousands of creations, so the wait is long.
async fn ask(client: &async_nats::Client, subject: &str, body: Bytes) -> async_nats::Message {
    let request = async_nats::Request::new()
        .payload(body)
        .timeout(Some(Duration::from_secs(180)));
    client
        .send_request(subject.to_owned(), request)
        .await
        .expect("answered")
}

/// A Flue (webhooks may reach loopback) with a few events and a listener of `layout`.
async fn listener_and_events(layout: Layout) -> (Flue, String, UserCreds) {
    let flue = Flue::start_with(&["--webhook-allow", "127.0.0.1/32"]).await;
    flue.register("victim").await;
    flue.register("other").await;
    let (id, creds) = listener_creds(&flue, layout);
    (flue, id, creds)
}

/// The last sequence of `FLUE_EVT`.
async fn last_event(flue: &Flue) -> u64 {
    let js = jetstream::new(flue.nats.events_client().await);
    let mut stream = js.get_stream(EVENT_STREAM).await.expect("the event stream");
    stream.info().await.expect("info").state.last_sequence
}

/// The gateway's own consumers on `FLUE_EVT` (SSE clients' and webhooks': every one but
/// the listeners'), each with its ack floor.
async fn gateway_consumers(flue: &Flue) -> BTreeMap<String, u64> {
    let js = jetstream::new(flue.nats.events_client().await);
    // Gone after an attack that worked: then none is listed.
    let Ok(events) = js.get_stream(EVENT_STREAM).await else {
        return BTreeMap::new();
    };
    let names: Vec<String> = events
        .consumer_names()
        .map(|n| n.expect("name"))
        .filter(|n| std::future::ready(!n.starts_with(LISTENER_CONSUMER_PREFIX)))
        .collect()
        .await;
    let mut floors = BTreeMap::new();
    for name in names {
        let info = events.consumer_info(&name).await.expect("consumer info");
        floors.insert(name, info.ack_floor.stream_sequence);
    }
    floors
}

/// Replies aimed at the gateway's consumers `names` on `FLUE_EVT`: an acknowledgement,
/// a pull and a deletion of each.
fn at_gateway_consumers<'a>(names: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut replies = Vec::new();
    for name in names {
        replies.push(format!(
            "{}1.1.1.1700000000000000000.0",
            jsapi::consumer_acks(EVENT_STREAM, name).trim_end_matches('>')
        ));
        replies.extend(jsapi::consumer_next(EVENT_STREAM, name));
        replies.extend(jsapi::consumer_delete(EVENT_STREAM, name));
    }
    replies
}

/// What users read of the events before an attack: an SSE client that replayed every
/// event and follows, and a webhook receiver every event was delivered to from the start.
struct Readers {
    /// The SSE client, still open.
    following: Sse,
    /// What it read: each event's sequence and id.
    read: Vec<(u64, String)>,
    /// The webhook's receiver.
    receiver: Receiver,
}

/// Subscribes a webhook to every event from the start and opens an SSE replay that
/// follows; returns once both have every event so far and the webhook's count is written
/// (its record changes no more until the next event).
async fn readers(flue: &Flue) -> Readers {
    let receiver = Receiver::start(Mode::Ok).await;
    let response = flue
        .http()
        .post(format!("{}/v1/webhooks", flue.gateway.url()))
        .json(&json!({"url": receiver.url, "secret": SECRET, "start": "all"}))
        .send()
        .await
        .expect("POST /v1/webhooks");
    assert_eq!(response.status(), 201);
    let webhook: Webhook = response.json().await.expect("a webhook");
    let mut following = Sse::open(flue, "from=start", None).await;
    let last = last_event(flue).await;
    let mut read = Vec::new();
    while read.last().is_none_or(|(seq, _)| *seq < last) {
        let (seq, event) = following
            .event()
            .await
            .expect("a following replay never ends");
        read.push((seq, event.id));
    }
    let url = format!("{}/v1/webhooks/{}", flue.gateway.url(), webhook.id);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let now: Webhook = flue
            .http()
            .get(&url)
            .send()
            .await
            .expect("GET webhook")
            .json()
            .await
            .expect("a webhook");
        if now.delivered >= read.len() as u64 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the webhook counted {} of {} events",
            now.delivered,
            read.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // polling interval
    }
    Readers {
        following,
        read,
        receiver,
    }
}

/// Asserts what users read after the attack and the deployment `deployment` (run to its
/// end on `victim`): a new full SSE replay and the open one give the events read before,
/// unchanged, then the deployment's and the victim agent's, each once; the webhook got
/// the same, each once.
async fn users_read_as_before(flue: &Flue, readers: Readers, deployment: &str) {
    let Readers {
        mut following,
        read,
        receiver,
    } = readers;
    let completed = format!("deployment:{deployment}:completed");
    let mut followed = read.clone();
    while followed.last().is_none_or(|(_, id)| *id != completed) {
        let (seq, event) = following
            .event()
            .await
            .expect("a following replay never ends");
        followed.push((seq, event.id));
    }
    // The open replay has it, so the gateway's copy does: a new replay ends after it.
    let replay = Sse::replay(flue).await;
    assert_eq!(
        replay[..read.len()],
        read[..],
        "a replay after the attack starts with the events it gave before"
    );
    assert_eq!(
        replay[..followed.len()],
        followed[..],
        "the replay open through the attack read the same"
    );
    let ids: BTreeSet<&String> = replay.iter().map(|(_, id)| id).collect();
    assert_eq!(ids.len(), replay.len(), "an event twice: {replay:?}");
    let tail: Vec<&String> = replay[read.len()..].iter().map(|(_, id)| id).collect();
    let ours = |id: &&String| {
        id.starts_with(&format!("deployment:{deployment}:")) || id.starts_with("server:victim:")
    };
    assert!(tail.iter().all(ours), "not the deployment's: {tail:?}");
    for phase in ["queued", "started", "completed"] {
        let id = format!("deployment:{deployment}:{phase}");
        assert!(tail.contains(&&id), "no {id} in {tail:?}");
    }
    // The webhook: every event once, in stream order, the deployment's included.
    receiver.wait_delivered(&completed).await;
    let delivered = receiver.delivered();
    let unique: BTreeSet<&String> = delivered.iter().collect();
    assert_eq!(
        unique.len(),
        delivered.len(),
        "delivered twice: {delivered:?}"
    );
    let upto = replay
        .iter()
        .position(|(_, id)| *id == completed)
        .expect("the completion replayed");
    let replayed: Vec<&String> = replay[..=upto].iter().map(|(_, id)| id).collect();
    let got: Vec<&String> = delivered.iter().take(upto + 1).collect();
    assert_eq!(got, replayed, "the webhook got every event, in order");
}

#[tokio::test]
async fn every_subject_a_listener_may_publish_with_every_stored_reply_and_every_push_consumer_changes_no_stream()
 {
    let (flue, id, creds) = listener_and_events(Layout::Listen).await;
    let readers = readers(&flue).await;
    let consumers = gateway_consumers(&flue).await;
    assert!(
        consumers.keys().any(|n| n.starts_with("flue-sse-"))
            && consumers.keys().any(|n| n.starts_with("wh-")),
        "an SSE client's and a webhook's: {consumers:?}"
    );
    let before = snapshot(&flue).await;
    let mut replies = replies(&flue, &before).await;
    replies.extend(jsapi::api(&format!("STREAM.PURGE.{EVENT_STREAM}")));
    replies.extend(jsapi::api(&format!("STREAM.DELETE.{EVENT_STREAM}")));
    replies.extend(at_gateway_consumers(consumers.keys()));
    assert!(
        replies.iter().any(|r| r.starts_with("flue.default.evt.")),
        "{replies:?}"
    );
    let published = attack(&flue, &creds, &replies).await;
    assert!(published >= 40 * 100, "only {published} publishes");

    // Push consumers delivering onto each of those subjects, filters outside the tenant,
    // unbounded limits: each refused by the gateway, none made.
    let (listener, _) = refusals_at(&flue.nats.url(), &creds, None).await;
    let name = listener_consumer(&id, 1);
    let [create, _] = jsapi::api(&format!("CONSUMER.CREATE.{EVENT_STREAM}.{name}"));
    let mut hostile: Vec<String> = replies
        .iter()
        .map(|r| format!(r#","deliver_subject":"{r}""#))
        .collect();
    hostile.extend([
        r#","filter_subject":"flue.other.evt.>""#.to_owned(),
        r#","filter_subject":">""#.to_owned(),
        r#","max_ack_pending":-1"#.to_owned(),
        r#","max_waiting":1000000"#.to_owned(),
        r#","Deliver_Subject":"$JS.API.STREAM.PURGE.FLUE_EVT""#.to_owned(),
    ]);
    for settings in &hostile {
        let answer = ask(&listener, &create, creation(&name, settings)).await;
        let answer: serde_json::Value = serde_json::from_slice(&answer.payload).expect("json");
        assert_eq!(answer["error"]["code"], 400, "{settings}: {answer}");
    }
    let made = ask(&listener, &create, creation(&name, "")).await;
    let made: serde_json::Value = serde_json::from_slice(&made.payload).expect("json");
    assert_eq!(
        made["name"],
        name.as_str(),
        "a pull consumer is made: {made}"
    );

    let after = snapshot(&flue).await;
    let changed = changes(&before, &after);
    assert!(
        changed.is_empty(),
        "{published} publishes changed the streams:\n{}",
        changed.join("\n")
    );
    // The gateway's consumers are those it had, none gone back.
    let consumers_after = gateway_consumers(&flue).await;
    assert_eq!(
        consumers_after.keys().collect::<Vec<_>>(),
        consumers.keys().collect::<Vec<_>>(),
        "the gateway's consumers on {EVENT_STREAM}"
    );
    for (name, floor) in &consumers {
        assert!(
            consumers_after[name] >= *floor,
            "{name}'s ack floor went back: {floor} -> {}",
            consumers_after[name]
        );
    }
    // Every record still reads; users read what they read before, then one deployment.
    flue.client()
        .list_servers()
        .await
        .expect("every server record reads");
    flue.script_config("hello", "#!/bin/sh\necho hello\n", &[], &[])
        .await;
    let _agent = flue.agent("victim", &[]).await;
    let deployment = flue.deploy("hello", "victim", &[]).await.id;
    flue.finished(&deployment).await;
    users_read_as_before(&flue, readers, deployment.as_str()).await;
}

#[tokio::test]
async fn the_same_attack_by_a_listener_of_the_events_account_deletes_an_event_stream() {
    let (flue, _, creds) = listener_and_events(Layout::Events).await;
    let before = snapshot(&flue).await;
    let mut replies = replies(&flue, &before).await;
    replies.extend(jsapi::api(&format!("STREAM.DELETE.{EVENT_STREAM}")));
    attack(&flue, &creds, &replies).await;
    let js = jetstream::new(flue.nats.events_client().await);
    let deadline = tokio::time::Instant::now() + WAIT;
    while js.get_stream(EVENT_STREAM).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the event stream survived the attack by an events account user"
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // polling interval
    }
}
