//! A worker SIGKILLed while its operation runs: another gateway's worker takes the
//! operation once the lease runs out and resumes it, running no unit twice.

use std::path::Path;

use flue_proto::operation::OperationState;
use flue_tests::{Flue, Gateway, WAIT, file_lines, wait_until};
use serde_json::{Value, json};

use super::{accepted, ended, until};

/// `first`, then `second` (it depends on `first`), on `web1`; each hook appends
/// `start NAME`, waits for the file `gate`, then appends `end NAME` to `log`.
pub const GATED_TEMPLATE: &str = r#"heat_template_version: 2018-08-31
parameters:
  log: {type: string}
  gate: {type: string}
resources:
  config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: log}, {name: gate}]
      config: |
        #!/bin/sh
        echo "start $deploy_resource_name" >> "$log"
        while [ ! -e "$gate" ]; do sleep 0.1; done
        echo "end $deploy_resource_name" >> "$log"
  first:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: config}
      server: web1
      input_values: {log: {get_param: log}, gate: {get_param: gate}}
  second:
    type: OS::Heat::SoftwareDeployment
    depends_on: first
    properties:
      config: {get_resource: config}
      server: web1
      input_values: {log: {get_param: log}, gate: {get_param: gate}}
"#;

/// A create of [`GATED_TEMPLATE`].
pub fn gated_body(log: &Path, gate: &Path) -> Value {
    json!({
        "operation": "create",
        "template": GATED_TEMPLATE,
        "parameters": {"log": log.display().to_string(), "gate": gate.display().to_string()},
    })
}

/// The pid in a worker name (`host/pid/wN`).
pub fn worker_pid(worker: &str) -> u32 {
    worker
        .split('/')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("worker {worker:?} names no pid"))
}

#[tokio::test]
async fn an_operation_whose_worker_is_killed_finishes_on_another_gateway_running_each_unit_once() {
    const LEASE: &[&str] = &["--engine-lease-secs", "3"];
    let mut flue = Flue::start_with(LEASE).await;
    let mut other = Gateway::start_like(&flue.gateway, &flue.nats.url(), LEASE).await;
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let (log, gate) = (flue.path("hooks.log"), flue.path("gate"));

    let op = accepted(&other, "gated", &gated_body(&log, &gate)).await;
    wait_until("the first hook runs", WAIT, || {
        file_lines(&log)
            .contains(&"start first".to_owned())
            .then_some(())
    })
    .await;
    let running = until(&other, "gated", &op.id, WAIT, |r| {
        r.state == OperationState::Running
    })
    .await;
    assert!(running.lease_expires_at.is_some(), "{running:?}");
    let holder = worker_pid(running.worker.as_deref().expect("a worker"));

    // SIGKILL the gateway whose worker holds the operation; the other one stays.
    let survivor = if flue.gateway.pid() == Some(holder) {
        flue.gateway.kill().await;
        &other
    } else {
        assert_eq!(
            other.pid(),
            Some(holder),
            "the worker is one of the two gateways'"
        );
        other.kill().await;
        &flue.gateway
    };
    std::fs::write(&gate, "open").expect("open the gate");

    let done = ended(survivor, "gated", &op.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    assert_eq!(done.attempts, 2, "a second worker took it: {done:?}");
    assert_eq!(
        file_lines(&log),
        ["start first", "end first", "start second", "end second"],
        "each unit ran once, in order"
    );
    let stack = survivor
        .client()
        .get_stack(&"gated".parse().expect("id"))
        .await
        .expect("stack");
    assert_eq!(stack.status.to_string(), "CREATE_COMPLETE");
}
