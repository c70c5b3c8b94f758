//! A tenant network's leaf node written by `flue-gateway leaf-config`, on loopback: an
//! agent connected to it reaches its queue on the hub; another tenant's user is refused.

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use bytes::Bytes;
use flue_gateway::broker::Broker;
use flue_proto::creds::UserCreds;
use flue_proto::jsapi::JS_DOMAIN;
use flue_proto::subject::{self, REQUEST_STREAM};
use flue_proto::{ServerId, TenantId};
use flue_tests::{NatsProcess, SecureNats, WAIT, admin, connect_options, free_port};
use futures_util::StreamExt as _;
use nkeys::KeyPair;

/// A hub with tenants `acme` and `other`, `web1`'s queue holding one request, and a leaf
/// node for `acme`'s network connected to it.
async fn hub_and_leaf() -> (SecureNats, NatsProcess, tempfile::TempDir) {
    let secure = SecureNats::start(&["acme", "other"], Some(free_port())).await;
    let (gateway, _) = secure.gateway("acme").await;
    let js = jetstream::new(gateway);
    let broker = Broker::new(js.clone());
    broker.ensure_streams(Duration::from_secs(3600), 100).await.expect("streams");
    let (tenant, server) = ids();
    broker.ensure_request_consumer(&tenant, &server).await.expect("consumer");
    js.publish(subject::request(&tenant, &server), Bytes::from_static(b"request for web1"))
        .await
        .expect("publish")
        .await
        .expect("stored");
    let hub_leaf = secure
        .nats
        .logs()
        .wait_for("Listening for leafnode connections on ", WAIT)
        .await;
    let hub_leaf = hub_leaf.rsplit(' ').next().expect("address").trim().to_owned();
    let out = tempfile::tempdir().expect("tempdir");
    let leaf_dir = out.path().join("leaf");
    admin(&[
        "leaf-config",
        "--state-dir",
        secure.state_dir().to_str().expect("utf-8"),
        "--tenant",
        "acme",
        "--hub",
        &format!("nats-leaf://{hub_leaf}"),
        "--out",
        leaf_dir.to_str().expect("utf-8"),
    ])
    .await;
    let leaf = NatsProcess::start(&leaf_dir.join("leaf.conf")).await;
    leaf.logs().wait_for("Leafnode connection created", WAIT).await;
    (secure, leaf, out)
}

fn ids() -> (TenantId, ServerId) {
    ("acme".parse().expect("id"), "web1".parse().expect("id"))
}

#[tokio::test]
async fn an_agent_behind_a_leaf_node_pulls_and_answers_on_the_hub() {
    let (secure, leaf, _dir) = hub_and_leaf().await;
    let (tenant, server) = ids();
    let key = KeyPair::new_user();
    let jwt = secure.auth.agent_jwt(&tenant, &server, &key.public_key(), &[]).expect("jwt");
    let creds = UserCreds { jwt, seed: key.seed().expect("seed") };
    let agent = connect_options(&creds)
        .custom_inbox_prefix(subject::agent_inbox_prefix(&tenant, &server))
        .connect(leaf.url())
        .await
        .expect("the agent connects to the leaf node");
    let js = jetstream::with_domain(agent, JS_DOMAIN);
    let consumer: consumer::PullConsumer = js
        .get_consumer_from_stream(subject::request_consumer(&tenant, &server), REQUEST_STREAM)
        .await
        .expect("consumer info across the leaf node");
    let mut batch = consumer.fetch().max_messages(1).messages().await.expect("pull");
    let msg = tokio::time::timeout(WAIT, batch.next())
        .await
        .expect("in time")
        .expect("a message")
        .expect("no error");
    assert_eq!(&msg.payload[..], b"request for web1");
    msg.double_ack().await.expect("ack confirmed by the hub");
    js.publish(subject::response(&tenant, &server), Bytes::from_static(b"answer"))
        .await
        .expect("publish")
        .await
        .expect("answer stored on the hub");
}

#[tokio::test]
async fn a_leaf_node_admits_no_other_tenants_user_and_no_anonymous_client() {
    let (secure, leaf, _dir) = hub_and_leaf().await;
    let (other, _) = secure.auth.gateway_creds(&"other".parse().expect("id")).expect("users");
    let e = connect_options(&other).connect(leaf.url()).await.expect_err("refused");
    assert!(e.to_string().to_lowercase().contains("authorization"), "{e}");
    assert!(async_nats::connect(leaf.url()).await.is_err(), "anonymous client refused");
}
