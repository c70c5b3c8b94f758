//! An agent's NATS user, as the broker enforces it: its own queue (info, next, ack), its
//! own answers and heartbeats, its own inbox, its own stacks' data keys; revoked at once.
//! What it is refused: `broker_agent_refusals.rs`.

use async_nats::jetstream::{self, consumer, kv};
use base64::Engine as _;
use bytes::Bytes;
use flue_gateway::natsauth::AccountKind;
use flue_proto::creds::UserCreds;
use flue_proto::jsapi::{self, JS_DOMAIN};
use flue_proto::subject::{self, DATA_BUCKET, REQUEST_STREAM};
use flue_proto::{ServerId, StackId, TenantId};
use flue_tests::{SecureNats, WAIT, broker_has_read, wait_until};
use futures_util::StreamExt as _;
use nkeys::KeyPair;

use super::{Refusals, refusals};

/// A secured broker set up by the gateway (streams, both servers' consumers with a
/// request each, the data bucket with a key in each of two stacks), and the agent of
/// `web1`, member of stack `st1` only, connected with its minted user.
pub(super) struct World {
    pub(super) secure: SecureNats,
    pub(super) gateway: async_nats::Client,
    pub(super) gateway_js: jetstream::Context,
    pub(super) data: kv::Store,
    pub(super) agent: async_nats::Client,
    pub(super) agent_js: jetstream::Context,
    pub(super) refused: Refusals,
    pub(super) creds: UserCreds,
    pub(super) key: KeyPair,
}

pub(super) fn tenant() -> TenantId {
    "acme".parse().expect("id")
}
pub(super) fn server(name: &str) -> ServerId {
    name.parse().expect("id")
}

pub(super) async fn world() -> World {
    let secure = SecureNats::start(&["acme"], None).await;
    secure.set_up_by_gateway("acme", &["web1", "web2"]).await;
    let (gateway, _) = secure.gateway("acme").await;
    let gateway_js = jetstream::new(gateway.clone());
    for name in ["web1", "web2"] {
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
        .get_key_value(DATA_BUCKET)
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
    pub(super) fn refused(&self) -> String {
        self.refused.lock().expect("lock").join("\n")
    }

    /// A new user of the whole edge account of `acme` (what a leaf node's link holds),
    /// minted with the account's seed from the state directory.
    pub(super) fn edge_user(&self) -> UserCreds {
        let seed = std::fs::read_to_string(self.secure.state_dir().join("accounts/acme/edge.nk"))
            .expect("the edge account's seed");
        let edge = KeyPair::from_seed(seed.trim()).expect("a seed");
        flue_gateway::natsauth::accounts::mint_user(&edge, "whole edge", Default::default())
            .expect("minted")
    }

    /// The JetStream API subject of web1's own consumer's info: a request the agent may
    /// make and the broker answers ([`broker_has_read`]'s probe).
    pub(super) fn own_consumer_info(&self) -> String {
        let own = subject::request_consumer(&tenant(), &server("web1"));
        let [hub, _] = jsapi::consumer_info(REQUEST_STREAM, &own);
        hub
    }

    pub(super) async fn consumer_info(&self, server_name: &str) -> consumer::Info {
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
    broker_has_read(&w.gateway, &w.gateway.new_inbox()).await;
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
        .revoke_user(&tenant(), AccountKind::Edge, &w.key.public_key(), &system)
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
    // The edge account's JWT on disk carries the revocation, so a restarted broker keeps it.
    let account =
        std::fs::read_to_string(w.secure.state_dir().join("accounts/acme/edge.jwt")).expect("jwt");
    // A JWT's claims are its middle part, base64url JSON: anyone can read them.
    let claims = account.trim().split('.').nth(1).expect("a JWT");
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(claims)
            .expect("base64url"),
    )
    .expect("JSON claims");
    assert!(
        claims["nats"]["revocations"]
            .get(w.key.public_key())
            .is_some(),
        "{claims}"
    );
}

#[tokio::test]
async fn an_agent_of_a_hundred_stacks_still_connects() {
    let w = world().await;
    let stacks: Vec<StackId> = (0..100)
        .map(|i| format!("stack{i}").parse().expect("id"))
        .collect();
    let key = KeyPair::new_user();
    let jwt = w
        .secure
        .auth
        .agent_jwt(&tenant(), &server("web1"), &key.public_key(), &stacks)
        .expect("jwt");
    // Far beyond nats-server's default 4 KiB control line, which refused 10 stacks.
    assert!(jwt.len() > 30_000, "{}", jwt.len());
    let creds = UserCreds {
        jwt,
        seed: key.seed().expect("seed"),
    };
    w.secure
        .nats
        .connect(&creds)
        .await
        .expect("the broker takes a CONNECT carrying the large JWT");
}
