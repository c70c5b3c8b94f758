//! Issue 24, point 5: backpressure that tells the truth. A broker whose JetStream store is
//! full refuses writes with a 507 `insufficient_storage` naming what is full (nothing
//! accepted), `/readyz` says so, and writes resume by themselves once there is room; a
//! cluster with 2 of 3 nodes stopped makes `/readyz` 503 with the reason on every gateway,
//! and 200 again once they return.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use flue_proto::{DeploymentStatus, ErrorBody, Health, HealthStatus, NotReadyCode};
use flue_tests::{Cluster, Flue, Gateway, WAIT};
use reqwest::StatusCode;
use serde_json::json;

use super::{health, health_until};

/// Each message of the ballast that fills the broker's store.
const BALLAST_MESSAGE: usize = 256 * 1024;

/// A cluster takes seconds to notice a lost metadata leader (raft election timeouts) and
/// the readiness probe runs every 2 s, each call bounded by the 2 s broker deadline.
const CLUSTER_WAIT: Duration = Duration::from_secs(120);

/// Fills the broker's JetStream store with a stream of the test's own (`BALLAST`, in the
/// tenant's account) until the broker refuses a write for its `max_file_store`; returns
/// the stream's name.
async fn fill_the_store(flue: &Flue) -> &'static str {
    let js = jetstream::new(flue.nats.client().await);
    js.create_stream(stream::Config {
        name: "BALLAST".to_owned(),
        subjects: vec!["ballast".to_owned()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .expect("create the ballast stream");
    let payload = bytes::Bytes::from(vec![b'x'; BALLAST_MESSAGE]);
    // At most 1 GiB: the limit is far below.
    for _ in 0..4096 {
        let refused = match js.publish("ballast", payload.clone()).await {
            Ok(ack) => ack.await.err(),
            Err(e) => Some(e),
        };
        if let Some(e) = refused {
            let text = format!("{e:?}");
            assert!(
                text.contains("10023"),
                "the broker refuses for its store limit (10023): {text}"
            );
            return "BALLAST";
        }
    }
    panic!("the broker took 1 GiB past its max_file_store");
}

/// `POST /v1/deployments` of `body`: the status and the JSON answer.
async fn create(flue: &Flue, body: &serde_json::Value) -> (StatusCode, serde_json::Value) {
    let resp = flue
        .http()
        .post(format!("{}/v1/deployments", flue.gateway.url()))
        .json(body)
        .send()
        .await
        .expect("the gateway answers");
    let status = resp.status();
    (status, resp.json().await.expect("a JSON body"))
}

#[tokio::test]
async fn a_full_store_is_a_507_naming_it_readyz_says_so_and_writes_resume_once_there_is_room() {
    // Small event streams, so that their reservations leave room under a small limit.
    let mut flue = Flue::start_with(&["--events-max-bytes", "1048576"]).await;
    flue.limit_file_store("32MB").await;
    let base = flue.gateway.url().to_owned();
    let http = flue.http();
    health_until(
        &http,
        &base,
        "/readyz",
        "ready under the limit",
        WAIT,
        |s, _| s == 200,
    )
    .await;
    flue.script_config("c", "#!/bin/sh\necho done\n", &[], &[])
        .await;
    flue.register("s1").await;
    let _agent = flue.agent("s1", &[]).await;

    let ballast = fill_the_store(&flue).await;

    // A create is refused, not "retry": 507 naming what is full, and nothing accepted.
    let body = json!({"id": "d-full", "config_id": "c", "server_id": "s1", "action": "CREATE"});
    let (status, answer) = create(&flue, &body).await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{answer}");
    let error: ErrorBody = serde_json::from_value(answer).expect("an error body");
    assert_eq!(error.error.code, flue_proto::INSUFFICIENT_STORAGE);
    for said in [
        "max_file_store",
        "bucket flue_",
        "not accepted",
        "which was not made",
    ] {
        assert!(error.error.message.contains(said), "{said:?} in {error:?}");
    }
    let read = http
        .get(format!("{base}/v1/deployments/d-full"))
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(
        read.status(),
        StatusCode::NOT_FOUND,
        "nothing of it was accepted"
    );
    // Any other write is refused the same way, without Retry-After; reads are served.
    let config = http
        .post(format!("{base}/v1/configs"))
        .json(&json!({"id": "c-full", "group": "script", "config": "#!/bin/sh\n"}))
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(config.status(), StatusCode::INSUFFICIENT_STORAGE);
    assert!(config.headers().get(reqwest::header::RETRY_AFTER).is_none());
    let error: ErrorBody = config.json().await.expect("an error body");
    assert!(
        error.error.message.contains("bucket flue_configs"),
        "{error:?}"
    );
    let read = http
        .get(format!("{base}/v1/configs/c"))
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(read.status(), StatusCode::OK, "reads are served while full");

    // /readyz says so, with the reason and no tenant; /livez stays up.
    let not_ready = health_until(
        &http,
        &base,
        "/readyz",
        "readyz to say the store is full",
        WAIT,
        |s, h| {
            s == 503
                && h.reason
                    .as_ref()
                    .is_some_and(|r| r.code == NotReadyCode::StoreFull)
        },
    )
    .await;
    assert_eq!(not_ready.status, HealthStatus::Unavailable);
    let reason = not_ready.reason.expect("a reason");
    assert!(reason.message.contains("max_file_store"), "{reason:?}");
    assert!(
        !serde_json::to_string(&reason)
            .expect("json")
            .contains("default"),
        "no tenant named: {reason:?}"
    );
    let (status, _) = health(&http, &base, "/livez").await;
    assert_eq!(status, 200);

    // Room again (the ballast goes): ready by itself, and the same create is accepted and runs.
    let js = jetstream::new(flue.nats.client().await);
    js.delete_stream(ballast).await.expect("delete the ballast");
    let ready: Health = health_until(
        &http,
        &base,
        "/readyz",
        "readyz 200 once there is room",
        WAIT,
        |s, _| s == 200,
    )
    .await;
    assert_eq!(ready.reason, None);
    // Probed all along, the state streams hold no probe: no deployment record and no
    // request is stored yet (the refused create left none either).
    for stream in ["KV_flue_deployments", flue_proto::subject::REQUEST_STREAM] {
        let mut stream = js.get_stream(stream).await.expect("a state stream");
        let state = stream.info().await.expect("stream info").state.clone();
        assert_eq!(state.messages, 0, "{state:?}");
    }
    let (status, answer) = create(&flue, &body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let done = flue.finished(&"d-full".parse().expect("id")).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
}

/// Waits until `gateway`'s `/readyz` answers as `check` wants.
async fn readyz_until(
    gateway: &Gateway,
    what: &str,
    check: impl Fn(u16, &Health) -> bool,
) -> Health {
    health_until(
        &gateway.http(),
        gateway.url(),
        "/readyz",
        what,
        CLUSTER_WAIT,
        check,
    )
    .await
}

#[tokio::test]
async fn with_two_of_three_nodes_stopped_readyz_is_503_on_both_gateways_with_the_reason_until_they_return()
 {
    let mut cluster = Cluster::start(3, &["--replicas", "3"]).await;
    let other = cluster.another_gateway(&["--replicas", "3"]).await;
    for gateway in [&cluster.flue.gateway, &other] {
        readyz_until(gateway, "both gateways ready", |s, _| s == 200).await;
    }

    cluster.node_mut(1).kill().await;
    cluster.node_mut(2).kill().await;
    for gateway in [&cluster.flue.gateway, &other] {
        let body = readyz_until(gateway, "readyz 503: no quorum", |s, h| {
            s == 503
                && h.reason
                    .as_ref()
                    .is_some_and(|r| r.code == NotReadyCode::NoQuorum)
        })
        .await;
        let reason = body.reason.expect("a reason");
        assert!(reason.message.contains("leader"), "{reason:?}");
        assert!(
            !serde_json::to_string(&reason)
                .expect("json")
                .contains("default"),
            "no tenant named: {reason:?}"
        );
    }
    // Writes are refused meanwhile, to be retried (nothing is full).
    let write = cluster
        .flue
        .http()
        .post(format!("{}/v1/configs", cluster.flue.gateway.url()))
        .json(&json!({"id": "c-down", "group": "script", "config": "#!/bin/sh\n"}))
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(write.status(), StatusCode::SERVICE_UNAVAILABLE);

    cluster.node_mut(1).start_again().await;
    cluster.node_mut(2).start_again().await;
    for gateway in [&cluster.flue.gateway, &other] {
        let body = readyz_until(gateway, "readyz 200 once the nodes are back", |s, _| {
            s == 200
        })
        .await;
        assert_eq!(body.reason, None);
    }
}

/// The disk fills before the broker's `max_file_store`: nats-server fails the write inside
/// ("no space left on device") and answers nothing, so a create is a 503 to retry with the
/// same id. nats-server 2.15.1 keeps that stream's write error: its writes are dropped even
/// once there is room, until it is restarted. `/readyz` says so, from the broker's own
/// health check, naming the stream and not the tenant.
#[tokio::test]
async fn a_broker_whose_disk_filled_is_503_and_readyz_says_it_needs_a_restart_even_once_there_is_room()
 {
    let flue = Flue::start_operator_on_small_disk(&["--events-max-bytes", "1048576"], "48m").await;
    let base = flue.gateway.url().to_owned();
    let http = flue.http();
    flue.script_config("c", "#!/bin/sh\necho done\n", &[], &[])
        .await;
    flue.register("s1").await;
    health_until(
        &http,
        &base,
        "/readyz",
        "ready on an empty disk",
        WAIT,
        |s, _| s == 200,
    )
    .await;

    let js = jetstream::new(flue.nats.client().await);
    js.create_stream(stream::Config {
        name: "BALLAST".to_owned(),
        subjects: vec!["ballast".to_owned()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .expect("create the ballast stream");
    let payload = bytes::Bytes::from(vec![b'x'; BALLAST_MESSAGE]);
    let mut refused = None;
    for _ in 0..4096 {
        let answer = match js.publish("ballast", payload.clone()).await {
            Ok(ack) => ack.await.err(),
            Err(e) => Some(e),
        };
        if answer.is_some() {
            refused = answer;
            break;
        }
    }
    assert!(refused.is_some(), "the disk took 1 GiB");
    flue.nats
        .logs()
        .wait_for("no space left on device", WAIT)
        .await;

    // Creates until one is not stored: a write fails once its stream needs a page the
    // disk no longer has (another stream's may still fit in pages it holds).
    let mut failed = None;
    for n in 0..200 {
        let body = json!({"id": format!("d-disk-{n}"), "config_id": "c", "server_id": "s1"});
        let (status, answer) = create(&flue, &body).await;
        if status == StatusCode::ACCEPTED {
            continue;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
        assert_eq!(answer["error"]["code"], "unavailable", "{answer}");
        failed = Some(body);
        break;
    }
    let body = failed.expect("a create fails on the full disk");
    let needs_restart = |s: u16, h: &Health| {
        s == 503
            && h.reason
                .as_ref()
                .is_some_and(|r| r.code == NotReadyCode::BrokerNeedsRestart)
    };
    let body_seen = health_until(
        &http,
        &base,
        "/readyz",
        "readyz: restart the broker",
        WAIT,
        needs_restart,
    )
    .await;
    let reason = body_seen.reason.expect("a reason");
    assert!(
        ["stream FLUE_", "stream KV_flue_"]
            .iter()
            .any(|named| reason.message.starts_with(named)),
        "names the broken state stream: {reason:?}"
    );
    for said in ["disk was full", "restart nats-server"] {
        assert!(reason.message.contains(said), "{said:?} in {reason:?}");
    }
    assert!(
        !serde_json::to_string(&reason)
            .expect("json")
            .contains("default"),
        "no tenant named: {reason:?}"
    );

    // Room again: the broken stream still drops writes, and /readyz still says why.
    js.delete_stream("BALLAST")
        .await
        .expect("delete the ballast");
    let (status, answer) = create(&flue, &body).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    let (status, after) = health(&http, &base, "/readyz").await;
    assert!(needs_restart(status, &after), "{after:?}");
}
