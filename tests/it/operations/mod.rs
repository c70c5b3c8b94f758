//! Stack operations as a service: `POST /v1/stacks/{id}/operations` with plain HTTP
//! (no CLI), run by the gateways' engine workers from the work queue; bad bodies refused
//! before anything is queued; one operation per stack; a worker SIGKILLed mid-way
//! replaced by another gateway's, which resumes without running any unit twice; and a
//! second tenant that neither sees nor reaches the first's operations.

mod cli;
mod follow;
mod hostile;
mod leases;
mod queue_rights;
mod refusals;
mod secrets;
pub mod takeover;
mod waves;

use std::path::Path;
use std::time::Duration;

use flue_proto::operation::{OperationState, StackOperation};
use flue_tests::{Flue, Gateway, WAIT, file_lines};
use serde_json::{Value, json};

/// A stack whose group `workers` has `count` members on `web1`, each appending
/// `<action> <member>` to `log` when its hook runs (create, update and delete); member
/// `gate`d ones first wait for the file `gate` to exist.
pub const GROUP_TEMPLATE: &str = r#"heat_template_version: 2018-08-31
parameters:
  count: {type: number, default: 2}
  log: {type: string}
  secret: {type: string, hidden: true}
resources:
  config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: log}, {name: secret}]
      config: {get_file: scripts/record.sh}
  workers:
    type: OS::Heat::ResourceGroup
    properties:
      count: {get_param: count}
      resource_def:
        type: OS::Heat::SoftwareDeployment
        properties:
          config: {get_resource: config}
          server: web1
          actions: [CREATE, UPDATE, DELETE]
          input_values:
            log: {get_param: log}
            secret: {get_param: secret}
"#;

/// The hook of [`GROUP_TEMPLATE`], sent as the file `get_file` reads.
pub const RECORD_SH: &str =
    "#!/bin/sh\necho \"$deploy_action $deploy_resource_name\" >> \"$log\"\n";

/// A hidden value no read, log or record may show.
pub const SECRET: &str = "hunter2-op-secret";

/// The body of an operation on [`GROUP_TEMPLATE`] with `count` members.
pub fn group_body(operation: &str, count: u32, log: &Path) -> Value {
    json!({
        "operation": operation,
        "template": GROUP_TEMPLATE,
        "files": {"scripts/record.sh": RECORD_SH},
        "parameters": {"count": count, "log": log.display().to_string(), "secret": SECRET},
    })
}

/// `POST /v1/stacks/{stack}/operations` on `gateway`: status, `Location`, body.
pub async fn submit(gateway: &Gateway, stack: &str, body: &Value) -> (u16, Option<String>, Value) {
    let resp = gateway
        .http()
        .post(format!("{}/v1/stacks/{stack}/operations", gateway.url()))
        .json(body)
        .send()
        .await
        .expect("gateway answers");
    let status = resp.status().as_u16();
    let location = resp
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, location, resp.json().await.expect("a JSON body"))
}

/// Submits and expects 202; the operation as queued.
pub async fn accepted(gateway: &Gateway, stack: &str, body: &Value) -> StackOperation {
    let (status, location, body) = submit(gateway, stack, body).await;
    assert_eq!(status, 202, "{body}");
    let op: StackOperation = serde_json::from_value(body).expect("an operation");
    assert_eq!(op.state, OperationState::Queued);
    assert_eq!(
        location.as_deref(),
        Some(format!("/v1/stacks/{stack}/operations/{}", op.id).as_str())
    );
    op
}

/// `GET /v1/stacks/{stack}/operations/{op}` on `gateway`.
pub async fn read(gateway: &Gateway, stack: &str, op: &str) -> (u16, Value) {
    let resp = gateway
        .http()
        .get(format!(
            "{}/v1/stacks/{stack}/operations/{op}",
            gateway.url()
        ))
        .send()
        .await
        .expect("gateway answers");
    (
        resp.status().as_u16(),
        resp.json().await.expect("a JSON body"),
    )
}

/// Reads the operation until `done` holds for it (bounded by `limit`).
pub async fn until(
    gateway: &Gateway,
    stack: &str,
    op: &str,
    limit: Duration,
    done: impl Fn(&StackOperation) -> bool,
) -> StackOperation {
    let reads = async {
        loop {
            let (status, body) = read(gateway, stack, op).await;
            assert_eq!(status, 200, "{body}");
            let record: StackOperation = serde_json::from_value(body).expect("an operation");
            if done(&record) {
                return record;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(limit, reads)
        .await
        .unwrap_or_else(|_| panic!("operation {op} of {stack} did not get there in {limit:?}"))
}

/// Reads the operation until it ended.
pub async fn ended(gateway: &Gateway, stack: &str, op: &str) -> StackOperation {
    until(gateway, stack, op, WAIT * 2, |r| r.state.is_terminal()).await
}

/// The hook log's lines starting with `action`.
pub fn runs(log: &Path, action: &str) -> usize {
    file_lines(log)
        .iter()
        .filter(|l| l.starts_with(&format!("{action} ")))
        .count()
}

#[tokio::test]
async fn a_stack_is_created_scaled_and_deleted_with_plain_http_calls() {
    let flue = Flue::start().await;
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let log = flue.path("hooks.log");

    let created = accepted(&flue.gateway, "farm", &group_body("create", 2, &log)).await;
    let done = ended(&flue.gateway, "farm", &created.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    assert_eq!(done.attempts, 1, "one worker ran it");
    assert_eq!(runs(&log, "CREATE"), 2);
    let stack = flue
        .client()
        .get_stack(&"farm".parse().expect("id"))
        .await
        .expect("stack");
    assert_eq!(stack.status.to_string(), "CREATE_COMPLETE");
    assert_eq!(stack.state.units.len(), 2);

    // Scale out: only the new member runs.
    let grown = accepted(&flue.gateway, "farm", &group_body("update", 3, &log)).await;
    let done = ended(&flue.gateway, "farm", &grown.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    assert_eq!(runs(&log, "CREATE"), 3);
    assert_eq!(runs(&log, "UPDATE"), 0, "unchanged members did not run");

    // Scale in: the last two members run their delete hooks.
    let shrunk = accepted(&flue.gateway, "farm", &group_body("update", 1, &log)).await;
    let done = ended(&flue.gateway, "farm", &shrunk.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    assert_eq!(runs(&log, "DELETE"), 2);
    let stack = flue
        .client()
        .get_stack(&"farm".parse().expect("id"))
        .await
        .expect("stack");
    assert_eq!(stack.state.units.len(), 1);

    let deleted = accepted(&flue.gateway, "farm", &json!({"operation": "delete"})).await;
    let done = ended(&flue.gateway, "farm", &deleted.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    assert_eq!(runs(&log, "DELETE"), 3);
    let gone = flue.client().get_stack(&"farm".parse().expect("id")).await;
    assert!(gone.is_err_and(|e| e.is_not_found()), "the stack is gone");

    // The hidden parameter was never in a read or a log line.
    let (_, record) = read(&flue.gateway, "farm", &created.id).await;
    assert!(!record.to_string().contains(SECRET), "{record}");
    let logged = [flue.gateway.logs(), flue.gateway.stdout()]
        .iter()
        .flat_map(|l| l.lines())
        .any(|l| l.contains(SECRET));
    assert!(!logged, "the gateway logged the hidden value");
}
