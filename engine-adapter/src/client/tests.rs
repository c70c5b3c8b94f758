//! Client tests against a scripted fake gateway on a loopback socket.

use std::time::Duration;

use flue_proto::{ConfigId, DeploymentId, DeploymentStatus};
use serde_json::json;
use tokio::net::TcpListener;

use super::*;
use crate::test_support::{deployment, fake};

#[tokio::test]
async fn error_bodies_become_api_errors() {
    let body = json!({"error": {"code": "not_found", "message": "config \"c9\" not found"}});
    let gw = fake(vec![(404, body.to_string())]).await;
    let client = Client::new(&gw.url).expect("client");
    let err = client
        .get_config(&ConfigId::new("c9").expect("id"))
        .await
        .expect_err("404");
    match &err {
        ClientError::Api {
            status,
            code,
            message,
        } => {
            assert_eq!((*status, code.as_str()), (404, "not_found"));
            assert_eq!(message, "config \"c9\" not found");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.is_not_found());
    assert_eq!(
        gw.seen.lock().expect("lock")[0],
        "GET /v1/configs/c9 HTTP/1.1"
    );
}

#[test]
fn non_json_error_bodies_are_quoted_and_shortened() {
    let err = api_error(502, b"<html>bad gateway</html>");
    assert_eq!(
        err.to_string(),
        "gateway answered 502 unexpected_response: <html>bad gateway</html>"
    );
    let long = "x".repeat(1000);
    let msg = api_error(500, long.as_bytes()).to_string();
    assert!(msg.len() < 300, "{msg}");
    assert!(api_error(500, b"").to_string().ends_with("empty body"));
}

#[tokio::test]
async fn a_closed_port_is_reported_as_unreachable_with_its_url() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let client = Client::new(&format!("http://{addr}")).expect("client");
    let err = client.list_servers().await.expect_err("nothing listens");
    assert!(matches!(err, ClientError::Unreachable { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("cannot reach the gateway at http://{addr}/v1/servers")
    );
}

#[tokio::test]
async fn wait_until_terminal_long_polls_after_the_last_status() {
    let gw = fake(vec![
        (200, deployment("QUEUED")),
        (200, deployment("IN_PROGRESS")),
        (200, deployment("COMPLETE")),
    ])
    .await;
    let client = Client::new(&format!("{}/", gw.url)).expect("client");
    let id = DeploymentId::new("d1").expect("id");
    let mut seen = Vec::new();
    let done = client
        .wait_until_terminal(&id, Duration::from_secs(600), |d| seen.push(d.status))
        .await
        .expect("terminal");
    assert_eq!(done.status, DeploymentStatus::Complete);
    assert_eq!(
        seen,
        [
            DeploymentStatus::Queued,
            DeploymentStatus::InProgress,
            DeploymentStatus::Complete
        ]
    );
    let lines = gw.seen.lock().expect("lock").clone();
    assert_eq!(
        lines,
        [
            "GET /v1/deployments/d1 HTTP/1.1",
            "GET /v1/deployments/d1?wait_secs=60&after_status=QUEUED HTTP/1.1",
            "GET /v1/deployments/d1?wait_secs=60&after_status=IN_PROGRESS HTTP/1.1",
        ]
    );
}

#[tokio::test]
async fn wait_until_terminal_gives_up_at_the_overall_timeout() {
    let gw = fake(vec![(200, deployment("QUEUED"))]).await;
    let client = Client::new(&gw.url).expect("client");
    let id = DeploymentId::new("d1").expect("id");
    let err = client
        .wait_until_terminal(&id, Duration::ZERO, |_| {})
        .await
        .expect_err("timeout");
    assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");
}

#[test]
fn base_urls_keep_their_prefix_and_refuse_other_schemes() {
    let c = Client::new("http://h:1/flue").expect("client");
    assert_eq!(
        c.url("v1/servers").expect("url").as_str(),
        "http://h:1/flue/v1/servers"
    );
    for bad in ["https://h", "h:1", "not a url", "http://h/?q=1"] {
        assert!(
            matches!(Client::new(bad), Err(ClientError::InvalidUrl { .. })),
            "{bad}"
        );
    }
}

#[test]
fn long_poll_waits_round_up_and_clamp() {
    assert_eq!(wait_secs(Duration::from_millis(1)), 1);
    assert_eq!(wait_secs(Duration::from_secs(5)), 5);
    assert_eq!(wait_secs(Duration::from_secs(600)), 60);
    assert_eq!(wait_secs(Duration::ZERO), 0);
}
