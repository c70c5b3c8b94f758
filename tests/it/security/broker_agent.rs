//! An agent's NATS user, as the broker enforces it: its own queue (info, next, ack), its
//! own answers and heartbeats, its own inbox, its own stacks' data keys, nothing else; and
//! revoked at once.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv, stream};
use bytes::Bytes;
use flue_gateway::broker::Broker;
use flue_gateway::natsauth::AccountKind;
use flue_proto::creds::UserCreds;
use flue_proto::jsapi::JS_DOMAIN;
use flue_proto::subject::{self, DATA_BUCKET, REQUEST_STREAM, RESPONSE_STREAM};
use flue_proto::{ServerId, StackId, TenantId};
use flue_tests::{SecureNats, WAIT, wait_until};
use futures_util::{FutureExt as _, StreamExt as _};
use nkeys::KeyPair;

use super::{Refusals, refusals, wait_for_marker};

/// A secured broker set up as the gateway does it (streams, both servers' consumers with a
/// request each, the data bucket with a key in each of two stacks), and the agent of
/// `web1`, member of stack `st1` only, connected with its minted user.
struct World {
    secure: SecureNats,
    gateway: async_nats::Client,
    gateway_js: jetstream::Context,
    data: kv::Store,
    agent: async_nats::Client,
    agent_js: jetstream::Context,
    refused: Refusals,
    creds: UserCreds,
    key: KeyPair,
}

fn tenant() -> TenantId {
    "acme".parse().expect("id")
}
fn server(name: &str) -> ServerId {
    name.parse().expect("id")
}

async fn world() -> World {
    let secure = SecureNats::start(&["acme"], None).await;
    let (gateway, _) = secure.gateway("acme").await;
    let gateway_js = jetstream::new(gateway.clone());
    let broker = Broker::new(gateway_js.clone());
    broker
        .ensure_streams(Duration::from_secs(3600), 100)
        .await
        .expect("streams");
    for name in ["web1", "web2"] {
        broker
            .ensure_request_consumer(&tenant(), &server(name))
            .await
            .expect("consumer");
        gateway_js
            .publish(
                subject::request(&tenant(), &server(name)),
                Bytes::from(format!("request for {name}")),
            )
            .await
            .expect("publish")
            .await
            .expect("stored");
    }
    let data = gateway_js
        .create_key_value(kv::Config {
            bucket: DATA_BUCKET.to_owned(),
            history: 1,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .expect("data bucket");
    data.put("acme.st1.shared", Bytes::from_static(b"mine"))
        .await
        .expect("put");
    data.put("acme.st2.secret", Bytes::from_static(b"theirs"))
        .await
        .expect("put");

    let key = KeyPair::new_user();
    let stacks: [StackId; 1] = ["st1".parse().expect("id")];
    let jwt = secure
        .auth
        .agent_jwt(&tenant(), &server("web1"), &key.public_key(), &stacks)
        .expect("agent jwt");
    let creds = UserCreds {
        jwt,
        seed: key.seed().expect("seed"),
    };
    let inbox = subject::agent_inbox_prefix(&tenant(), &server("web1"));
    let (agent, refused) = refusals(&secure, &creds, Some(inbox)).await;
    let agent_js = jetstream::with_domain(agent.clone(), JS_DOMAIN);
    World {
        secure,
        gateway,
        gateway_js,
        data,
        agent,
        agent_js,
        refused,
        creds,
        key,
    }
}

impl World {
    fn refused(&self) -> String {
        self.refused.lock().expect("lock").join("\n")
    }

    async fn consumer_info(&self, server_name: &str) -> consumer::Info {
        let name = subject::request_consumer(&tenant(), &server(server_name));
        let mut consumer: consumer::PullConsumer = self
            .gateway_js
            .get_consumer_from_stream(name, REQUEST_STREAM)
            .await
            .expect("gateway reads the consumer");
        consumer.info().await.expect("info").clone()
    }
}

#[tokio::test]
async fn an_agent_pulls_acks_and_answers_on_its_own_queue_and_its_stacks_data() {
    let w = world().await;
    let own = subject::request_consumer(&tenant(), &server("web1"));
    // Both API spellings: on the hub directly and through the domain.
    let _: consumer::PullConsumer = jetstream::new(w.agent.clone())
        .get_consumer_from_stream(&own, REQUEST_STREAM)
        .await
        .expect("consumer info without the domain");
    let consumer: consumer::PullConsumer = w
        .agent_js
        .get_consumer_from_stream(&own, REQUEST_STREAM)
        .await
        .expect("consumer info through the domain");
    let mut batch = consumer
        .fetch()
        .max_messages(1)
        .messages()
        .await
        .expect("pull");
    let msg = tokio::time::timeout(WAIT, batch.next())
        .await
        .expect("in time")
        .expect("a message")
        .expect("no error");
    assert_eq!(&msg.payload[..], b"request for web1");
    msg.double_ack().await.expect("ack confirmed");
    assert_eq!(w.consumer_info("web1").await.num_ack_pending, 0);
    assert_eq!(w.consumer_info("web1").await.ack_floor.stream_sequence, 1);

    let mut heartbeats = w
        .gateway
        .subscribe("flue.acme.hb.*")
        .await
        .expect("subscribe");
    w.gateway.flush().await.expect("flush");
    w.agent_js
        .publish(
            subject::response(&tenant(), &server("web1")),
            Bytes::from_static(b"answer"),
        )
        .await
        .expect("publish")
        .await
        .expect("answer stored");
    w.agent
        .publish(
            subject::heartbeat(&tenant(), &server("web1")),
            Bytes::from_static(b"hb"),
        )
        .await
        .expect("publish");
    let hb = tokio::time::timeout(WAIT, heartbeats.next())
        .await
        .expect("heartbeat")
        .expect("open");
    assert_eq!(hb.subject.as_str(), "flue.acme.hb.web1");

    let store = w
        .agent_js
        .get_key_value(DATA_BUCKET)
        .await
        .expect("bucket info");
    store
        .put("acme.st1.written", Bytes::from_static(b"by web1"))
        .await
        .expect("put own key");
    let own_key = store.get("acme.st1.shared").await.expect("get own key");
    assert_eq!(own_key.as_deref(), Some(&b"mine"[..]));
    let written = w.data.get("acme.st1.written").await.expect("gateway reads");
    assert_eq!(written.as_deref(), Some(&b"by web1"[..]));
    let refused = w.refused();
    assert!(
        !refused.contains("Violation"),
        "something was refused: {refused}"
    );
}

#[tokio::test]
async fn an_agent_cannot_read_another_servers_queue() {
    let w = world().await;
    let other = subject::request_consumer(&tenant(), &server("web2"));
    let info = w
        .agent_js
        .get_consumer_from_stream::<consumer::pull::Config, _, _>(&other, REQUEST_STREAM)
        .await;
    assert!(info.is_err(), "web1 read web2's consumer info");
    // Pulling without looking it up first.
    let next = format!("$JS.{JS_DOMAIN}.API.CONSUMER.MSG.NEXT.{REQUEST_STREAM}.{other}");
    let pulled = w
        .agent
        .request(next.clone(), Bytes::from_static(b"{\"batch\":1}"))
        .await;
    assert!(pulled.is_err(), "web1 pulled from web2's queue");
    let web2 = w.consumer_info("web2").await;
    assert_eq!(
        web2.delivered.consumer_sequence, 0,
        "nothing of web2's queue was delivered"
    );
    assert_eq!(web2.num_pending, 1);
    // The hub checks the subject after mapping its domain to `$JS.API`.
    let refused = w.refused();
    assert!(
        refused.contains(&format!("CONSUMER.INFO.{REQUEST_STREAM}.{other}\"")),
        "{refused}"
    );
    assert!(
        refused.contains(&format!("CONSUMER.MSG.NEXT.{REQUEST_STREAM}.{other}\"")),
        "{refused}"
    );
}

#[tokio::test]
async fn an_agent_cannot_publish_another_servers_answer_or_heartbeat() {
    let w = world().await;
    let mut heartbeats = w
        .gateway
        .subscribe("flue.acme.hb.*")
        .await
        .expect("subscribe");
    w.gateway.flush().await.expect("flush");
    let forged = w
        .agent_js
        .publish(
            subject::response(&tenant(), &server("web2")),
            Bytes::from_static(b"forged"),
        )
        .await;
    if let Ok(ack) = forged {
        assert!(ack.await.is_err(), "web2's answer from web1 was stored");
    }
    w.agent
        .publish(
            subject::heartbeat(&tenant(), &server("web2")),
            Bytes::from_static(b"forged"),
        )
        .await
        .expect("a refused core publish still returns ok");
    // web1's own answer and heartbeat, sent after the forged ones, arrive.
    w.agent_js
        .publish(
            subject::response(&tenant(), &server("web1")),
            Bytes::from_static(b"real"),
        )
        .await
        .expect("publish")
        .await
        .expect("own answer stored");
    w.agent
        .publish(
            subject::heartbeat(&tenant(), &server("web1")),
            Bytes::from_static(b"hb"),
        )
        .await
        .expect("publish");
    let seen = wait_for_marker(&mut heartbeats, "flue.acme.hb.web1").await;
    assert!(seen.is_empty(), "forged heartbeats arrived: {seen:?}");
    let responses = w
        .gateway_js
        .get_stream(RESPONSE_STREAM)
        .await
        .expect("stream");
    assert_eq!(
        responses.cached_info().state.messages,
        1,
        "only web1's own answer is stored"
    );
    let forged = responses
        .get_last_raw_message_by_subject(&subject::response(&tenant(), &server("web2")))
        .await;
    assert!(forged.is_err(), "an answer for web2 is in the stream");
    let refused = w.refused();
    assert!(
        refused.contains("Permissions Violation for Publish to \"flue.acme.resp.web2\""),
        "{refused}"
    );
    assert!(
        refused.contains("Permissions Violation for Publish to \"flue.acme.hb.web2\""),
        "{refused}"
    );
}

#[tokio::test]
async fn an_agent_cannot_subscribe_beyond_its_inbox_and_its_stacks_keys() {
    let w = world().await;
    let mut wildcards = Vec::new();
    for subject in [
        ">",
        "flue.acme.>",
        "flue.acme.req.web2",
        "_INBOX.>",
        "$KV.flue_data.acme.st2.>",
    ] {
        wildcards.push((
            subject,
            w.agent.subscribe(subject).await.expect("subscribe call"),
        ));
    }
    let marker = format!(
        "{}.marker",
        subject::agent_inbox_prefix(&tenant(), &server("web1"))
    );
    let mut own = w.agent.subscribe(marker.clone()).await.expect("own inbox");
    w.agent.flush().await.expect("flush");
    w.gateway
        .publish("flue.acme.req.web2", Bytes::from_static(b"x"))
        .await
        .expect("publish");
    w.gateway
        .publish("_INBOX.someone", Bytes::from_static(b"x"))
        .await
        .expect("publish");
    w.data
        .put("acme.st2.secret", Bytes::from_static(b"changed"))
        .await
        .expect("put");
    w.gateway
        .publish(marker.clone(), Bytes::from_static(b"m"))
        .await
        .expect("publish");
    let _ = wait_for_marker(&mut own, &marker).await;
    for (subject, sub) in &mut wildcards {
        assert!(
            sub.next().now_or_never().is_none(),
            "a subscription to {subject} received a message"
        );
    }
    let refused = w.refused();
    for subject in [">", "flue.acme.>", "_INBOX.>", "$KV.flue_data.acme.st2.>"] {
        assert!(
            refused.contains(&format!(
                "Permissions Violation for Subscription to \"{subject}\""
            )),
            "{subject}: {refused}"
        );
    }
}

#[tokio::test]
async fn an_agent_cannot_create_a_consumer() {
    let w = world().await;
    let durable = consumer::pull::Config {
        durable_name: Some("web1-own".into()),
        filter_subject: "flue.acme.req.web2".into(),
        ..Default::default()
    };
    assert!(
        w.agent_js
            .create_consumer_on_stream(durable, REQUEST_STREAM)
            .await
            .is_err()
    );
    let push = consumer::push::Config {
        deliver_subject: format!(
            "{}.steal",
            subject::agent_inbox_prefix(&tenant(), &server("web1"))
        ),
        filter_subject: "flue.acme.req.web2".into(),
        ..Default::default()
    };
    assert!(
        w.agent_js
            .create_consumer_on_stream(push, REQUEST_STREAM)
            .await
            .is_err()
    );
    let stream = w
        .gateway_js
        .get_stream(REQUEST_STREAM)
        .await
        .expect("stream");
    let mut names: Vec<String> = stream
        .consumer_names()
        .map(|n| n.expect("name"))
        .collect()
        .await;
    names.sort();
    assert_eq!(
        names,
        ["req-4-acme-web1", "req-4-acme-web2"],
        "no consumer was created"
    );
    let refused = w.refused();
    assert!(
        refused.contains("Permissions Violation for Publish to \"$JS.API.CONSUMER.CREATE.FLUE_REQ"),
        "{refused}"
    );
}

#[tokio::test]
async fn an_agent_cannot_read_or_write_another_stacks_data_keys() {
    let w = world().await;
    let store = w
        .agent_js
        .get_key_value(DATA_BUCKET)
        .await
        .expect("bucket info");
    assert!(
        store.get("acme.st2.secret").await.is_err(),
        "web1 read stack st2's key"
    );
    assert!(
        store
            .put("acme.st2.secret", Bytes::from_static(b"overwritten"))
            .await
            .is_err()
    );
    // Reading by sequence (not naming the key) is refused too.
    let bucket = w
        .agent_js
        .get_stream(flue_proto::jsapi::kv_stream(DATA_BUCKET))
        .await;
    if let Ok(bucket) = bucket {
        assert!(
            bucket.direct_get(2).await.is_err(),
            "direct get by sequence"
        );
        assert!(
            bucket.get_raw_message(2).await.is_err(),
            "message get by sequence"
        );
    }
    let value = w.data.get("acme.st2.secret").await.expect("gateway reads");
    assert_eq!(
        value.as_deref(),
        Some(&b"theirs"[..]),
        "st2's key is unchanged"
    );
    let refused = w.refused();
    assert!(
        refused.contains("DIRECT.GET.KV_flue_data.$KV.flue_data.acme.st2.secret"),
        "{refused}"
    );
}

#[tokio::test]
async fn a_revoked_agent_is_disconnected_at_once_and_cannot_reconnect() {
    let w = world().await;
    let own = subject::request_consumer(&tenant(), &server("web1"));
    let _: consumer::PullConsumer = w
        .agent_js
        .get_consumer_from_stream(&own, REQUEST_STREAM)
        .await
        .expect("works before the revocation");
    let system = w.secure.system().await;
    w.secure
        .auth
        .revoke_user(&tenant(), AccountKind::Tenant, &w.key.public_key(), &system)
        .await
        .expect("revoked and pushed");
    let refused = w.refused.clone();
    wait_until(
        "the broker closes the revoked user's connection",
        WAIT,
        || {
            let events = refused.lock().expect("lock").join("\n");
            events.contains("disconnected").then_some(())
        },
    )
    .await;
    let again = w.secure.nats.connect(&w.creds).await;
    let e = again.expect_err("a revoked user cannot connect");
    assert!(
        e.to_lowercase().contains("authorization") || e.contains("revoked"),
        "{e}"
    );
    // The account JWT on disk carries the revocation, so a restarted broker keeps it.
    let account = std::fs::read_to_string(w.secure.state_dir().join("accounts/acme/account.jwt"))
        .expect("jwt");
    assert!(
        flue_gateway::natsauth::jwt::decode::<flue_gateway::natsauth::jwt::Account>(&account)
            .expect("decodes")
            .nats
            .revocations
            .contains_key(&w.key.public_key())
    );
}
