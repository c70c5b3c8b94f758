//! One stored record that cannot be decoded (garbage a hostile broker client wrote into
//! the bucket) never breaks a listing, never blocks its server, never loops hot.

use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use flue_proto::creds::AgentCredentials;
use flue_proto::signing;
use flue_proto::{
    AgentMessage, DeploymentId, DeploymentStatus, PROTOCOL_VERSION, RequestDigest,
    SKIPPED_RECORDS_HEADER, ServerId, TenantId, subject,
};
use flue_tests::{Flue, WAIT};
use reqwest::StatusCode;
use serde_json::Value;
use time::OffsetDateTime;

#[tokio::test]
async fn an_undecodable_deployment_record_is_skipped_by_listings_and_its_answers_are_parked() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let _agent = flue.agent("s1", &[]).await;
    flue.script_config("c", "#!/bin/sh\necho ok\n", &[], &[])
        .await;
    let first = flue.deploy("c", "s1", &[]).await;
    assert_eq!(
        flue.finished(&first.id).await.status,
        DeploymentStatus::Complete
    );

    let js = jetstream::new(flue.nats.client().await);
    let garbage = Bytes::from_static(b"{\"deployment\": [not json");
    js.get_key_value("flue_deployments")
        .await
        .expect("bucket")
        .put("default.bad", garbage)
        .await
        .expect("put garbage");
    js.get_key_value("flue_server_deployments")
        .await
        .expect("bucket")
        .put("default.s1.bad", Bytes::new())
        .await
        .expect("put index");
    // An answer about the undecodable deployment, as its agent could send.
    let (tenant, server) = (
        TenantId::new("default").expect("id"),
        ServerId::new("s1").expect("id"),
    );
    let started = AgentMessage::Started {
        v: PROTOCOL_VERSION,
        deployment_id: DeploymentId::new("bad").expect("id"),
        at: OffsetDateTime::now_utc(),
        request_digest: None,
    };
    // Signed with the agent's key, as its agent would: it reaches the record.
    let body = serde_json::to_vec(&started).expect("ser");
    let creds = std::fs::read_to_string(flue.creds_path("s1")).expect("credentials");
    let creds = AgentCredentials::parse(&creds).expect("credentials");
    let claims = signing::AnswerClaims {
        v: signing::CLAIMS_VERSION,
        tenant: tenant.clone(),
        server: server.clone(),
        digest: RequestDigest::of(&body),
        at: OffsetDateTime::now_utc(),
    };
    let key = nkeys::KeyPair::from_seed(&creds.user.seed).expect("seed");
    let signed = signing::sign(&claims, &key).expect("signs");
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(signing::ANSWER_CLAIMS_HEADER, signed.claims.as_str());
    headers.insert(signing::SIGNATURE_HEADER, signed.signature.as_str());
    js.publish_with_headers(subject::response(&tenant, &server), headers, body.into())
        .await
        .expect("publish")
        .await
        .expect("ack");

    let base = flue.gateway.url().to_owned();
    let http = flue.http();
    for path in ["/v1/deployments", "/v1/servers/s1/deployments"] {
        let resp = http
            .get(format!("{base}{path}"))
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        assert_eq!(
            resp.headers()
                .get(SKIPPED_RECORDS_HEADER)
                .and_then(|v| v.to_str().ok()),
            Some("1"),
            "{path}"
        );
        let listed: Vec<Value> = resp.json().await.expect("list");
        assert_eq!(listed.len(), 1, "{path}: {listed:?}");
    }

    // The server's lane moves on: its next deployment completes.
    let next = flue.deploy("c", "s1", &[]).await;
    let done = flue
        .finished_within(&next.id, Duration::from_secs(30))
        .await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");

    // The answer is settled for good (terminated), not offered again and again.
    let response_consumer = flue_tests::consumers::response_consumer(&js).await;
    let consumer_settled = async {
        let mut consumer: jetstream::consumer::PullConsumer = js
            .get_stream(subject::RESPONSE_STREAM)
            .await
            .expect("stream")
            .get_consumer(&response_consumer)
            .await
            .expect("consumer");
        // The broker has no event for "settled": poll its counts.
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            let info = consumer.info().await.expect("consumer info");
            if info.num_pending == 0 && info.num_ack_pending == 0 {
                return;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), consumer_settled)
        .await
        .expect("the answer about the undecodable record was settled");
    let parked = flue
        .gateway
        .logs()
        .wait_for("undecodable deployment record; parked", WAIT)
        .await;
    assert!(parked.contains("bad"), "{parked}");
    let count = flue
        .gateway
        .logs()
        .lines()
        .iter()
        .filter(|l| l.contains("undecodable deployment record; parked"))
        .count();
    assert_eq!(count, 1, "reported once");
}

#[tokio::test]
async fn a_watched_deployment_whose_record_turns_undecodable_is_dropped_by_the_timeout_sweeper_once()
 {
    let flue = Flue::start().await;
    flue.register("s1").await;
    flue.script_config("c", "#!/bin/sh\necho ok\n", &[], &[])
        .await;
    // No agent: the deployment stays QUEUED until its deadline.
    let d = flue.deploy_with("c", "s1", &[], Some(1)).await;
    let js = jetstream::new(flue.nats.client().await);
    js.get_key_value("flue_deployments")
        .await
        .expect("bucket")
        .put(format!("default.{}", d.id), Bytes::from_static(b"garbage"))
        .await
        .expect("put garbage");

    let logs = flue.gateway.logs();
    let dropped = logs
        .wait_for("cannot be decoded; no longer watched", WAIT)
        .await;
    assert!(dropped.contains(d.id.as_str()), "{dropped}");
    let retried = logs
        .lines()
        .iter()
        .filter(|l| l.contains("cannot record a timeout"))
        .count();
    assert_eq!(
        retried, 0,
        "an undecodable record is not retried every sweep"
    );
}
