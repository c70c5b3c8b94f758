//! Listener accounts (issue 22): a listener is a user of its tenant's listener account,
//! which holds no stream and reaches the events account only through imports, its
//! consumers made by the gateway (pull only). Proven by attack with a real gateway and
//! broker: every subject a listener's JWT allows with every reply naming a stored subject
//! or a stream's purge or deletion, and push consumers delivering onto such subjects; and
//! the same attack by a listener of the events account (the layout before) deletes an
//! event stream.

use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use flue_gateway::natsauth::{AccountKind, NatsAuth, accounts, jwt, perms};
use flue_proto::creds::UserCreds;
use flue_proto::event::EVENT_STREAM;
use flue_proto::jsapi;
use flue_proto::subject::{listener_consumer, listener_id};
use flue_tests::{Flue, WAIT, broker_has_read};

use super::edge_accounts::{account_key, changes, replies, snapshot, tenant};
use super::refusals_at;

/// Which account the listener is a user of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// The listener account, as the gateway mints listeners now.
    Listen,
    /// The events account, as the gateway minted them before (signed here with the same
    /// rights).
    Events,
}

/// A listener's id and credentials in `layout`.
fn listener_creds(flue: &Flue, layout: Layout) -> (String, UserCreds) {
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

/// A Flue with a few events and a listener of `layout` that has read one.
async fn listener_and_events(layout: Layout) -> (Flue, String, UserCreds) {
    let flue = Flue::start().await;
    flue.register("victim").await;
    flue.register("other").await;
    let (id, creds) = listener_creds(&flue, layout);
    (flue, id, creds)
}

#[tokio::test]
async fn every_subject_a_listener_may_publish_with_every_stored_reply_and_every_push_consumer_changes_no_stream()
 {
    let (flue, id, creds) = listener_and_events(Layout::Listen).await;
    let before = snapshot(&flue).await;
    let mut replies = replies(&flue, &before).await;
    replies.extend(jsapi::api(&format!("STREAM.PURGE.{EVENT_STREAM}")));
    replies.extend(jsapi::api(&format!("STREAM.DELETE.{EVENT_STREAM}")));
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
    // Every record still reads, and the gateway still records events.
    flue.client()
        .list_servers()
        .await
        .expect("every server record reads");
    flue.register("later").await;
    let later = changes(&after, &snapshot(&flue).await);
    assert!(
        later.iter().any(|c| c.contains(".later.registered")),
        "no event recorded: {later:?}"
    );
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
