//! What the broker refuses an agent's user: another server's queue and answers, wildcard
//! subscriptions, creating consumers, another stack's data keys. Each refusal is proven on
//! the broker's side (nothing delivered, stored or created), not only by the call failing.

use async_nats::jetstream::consumer;
use bytes::Bytes;
use flue_proto::jsapi::JS_DOMAIN;
use flue_proto::subject::{self, DATA_BUCKET, REQUEST_STREAM, RESPONSE_STREAM};
use flue_tests::broker_has_read;
use futures_util::{FutureExt as _, StreamExt as _};

use super::broker_agent::{server, tenant, world};
use super::wait_for_marker;

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
    // Refused as published, in either spelling (an edge account has no domain mapping).
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
    broker_has_read(&w.gateway, &w.gateway.new_inbox()).await;
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
    // Every subscription above is the broker's (refused or in place) before the gateway
    // publishes: a flush would only have written them to the socket.
    broker_has_read(&w.agent, &w.own_consumer_info()).await;
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
    // The agent is a user of the edge account: what reaches it is published there (the
    // gateway's publishes above, in the state account, never do). A user of the whole
    // edge account publishes the same subjects, then the marker, in order.
    let edge = w
        .secure
        .nats
        .connect(&w.edge_user())
        .await
        .expect("edge user");
    broker_has_read(&w.gateway, &w.gateway.new_inbox()).await;
    for subject in ["flue.acme.req.web2", "_INBOX.someone"] {
        edge.publish(subject, Bytes::from_static(b"x"))
            .await
            .expect("publish");
    }
    edge.publish(marker.clone(), Bytes::from_static(b"m"))
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
        refused.contains("API.CONSUMER.CREATE.FLUE_REQ")
            && refused.contains("Permissions Violation for Publish to \"$JS."),
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
