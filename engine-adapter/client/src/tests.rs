//! Client tests against a scripted fake gateway on a loopback socket.

use std::time::Duration;

use flue_proto::{
    ConfigId, CreateDeployment, DeploymentId, DeploymentStatus, OpStatus, PutStack, StackAction,
    StackId, StackState, StackStatus,
};
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
        format!("cannot reach the gateway at http://{addr}/v1/servers?limit=1000")
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
    for bad in ["ftp://h", "h:1", "not a url", "http://h/?q=1"] {
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

fn stack_json(revision: u64) -> String {
    json!({
        "id": "st", "tenant": "default", "revision": revision,
        "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:00:00Z",
        "status": {"action": "CREATE", "status": "IN_PROGRESS"}, "state": {}
    })
    .to_string()
}

#[tokio::test]
async fn stacks_are_read_written_and_deleted_with_revisions() {
    let mismatch = json!({"error": {"code": "revision_mismatch", "message": "stack \"st\" is at revision 3, not 2; read it again"}});
    let gw = fake(vec![
        (200, stack_json(1)),
        (200, format!("[{}]", stack_json(1))),
        (200, stack_json(1)),
        (409, mismatch.to_string()),
        (204, String::new()),
        (204, String::new()),
    ])
    .await;
    let client = Client::new(&gw.url).expect("client");
    let id = StackId::new("st").expect("id");
    let put = PutStack {
        expected_revision: None,
        status: StackStatus {
            action: StackAction::Create,
            status: OpStatus::InProgress,
            reason: None,
        },
        state: StackState::default(),
        changed_units: None,
    };
    let created = client.put_stack(&id, &put).await.expect("put");
    assert_eq!((created.id.as_str(), created.revision), ("st", 1));
    let listed = client.list_stacks().await.expect("list");
    assert_eq!(listed, std::slice::from_ref(&created));
    assert_eq!(client.get_stack(&id).await.expect("get"), created);
    let stale = PutStack {
        expected_revision: Some(2),
        ..put
    };
    let err = client.put_stack(&id, &stale).await.expect_err("409");
    assert_eq!(
        (err.status(), err.code()),
        (Some(409), Some("revision_mismatch"))
    );
    client.delete_stack(&id, Some(3)).await.expect("delete");
    client.delete_stack(&id, None).await.expect("delete");
    let lines = gw.seen.lock().expect("lock").clone();
    assert_eq!(
        lines,
        [
            "PUT /v1/stacks/st HTTP/1.1",
            "GET /v1/stacks?limit=1000 HTTP/1.1",
            "GET /v1/stacks/st HTTP/1.1",
            "PUT /v1/stacks/st HTTP/1.1",
            "DELETE /v1/stacks/st?expected_revision=3 HTTP/1.1",
            "DELETE /v1/stacks/st HTTP/1.1",
        ]
    );
}

#[tokio::test]
async fn an_unchanged_deployment_answered_with_200_is_returned_too() {
    let gw = fake(vec![(200, deployment("COMPLETE"))]).await;
    let client = Client::new(&gw.url).expect("client");
    let body = CreateDeployment {
        id: Some(DeploymentId::new("d2").expect("id")),
        config_id: ConfigId::new("c1").expect("id"),
        server_id: flue_proto::ServerId::new("web").expect("id"),
        action: flue_proto::Action::new("UPDATE").expect("action"),
        input_values: Default::default(),
        name: None,
        timeout_secs: None,
        stack_id: None,
        resource_name: None,
        inputs_from: None,
        skip_if_unchanged_from: Some(DeploymentId::new("d1").expect("id")),
        input_refs: Default::default(),
    };
    let d = client
        .create_deployment(&body)
        .await
        .expect("200 is success");
    assert_eq!(
        (d.id.as_str(), d.status),
        ("d1", DeploymentStatus::Complete)
    );
}

#[test]
fn api_errors_expose_their_code_and_others_none() {
    let err = api_error(404, br#"{"error": {"code": "not_found", "message": "x"}}"#);
    assert_eq!(err.code(), Some("not_found"));
    let other = ClientError::InvalidUrl {
        url: "x".into(),
        reason: "y".into(),
    };
    assert_eq!(other.code(), None);
}
