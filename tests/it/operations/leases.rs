//! Leases under attack: a worker stalled (SIGSTOP) past its lease while another takes
//! the operation over, then thawed; an operation whose worker dies on every delivery;
//! a gateway that died between an operation's record and its queued message (or the
//! reverse).

use std::time::Duration;

use flue_proto::operation::{
    OPERATIONS_BUCKET, OperationState, QueuedOperation, StackOperation, operation_subject,
};
use flue_proto::{DeploymentId, StackId};
use flue_tests::auth::default_tenant;
use flue_tests::{Flue, Gateway, WAIT, file_lines, wait_until};
use serde_json::json;
use time::OffsetDateTime;

use super::takeover::{gated_body, worker_pid};
use super::{accepted, ended, group_body, read, submit, until};

const LEASE: &[&str] = &["--engine-lease-secs", "2"];

#[tokio::test]
async fn a_worker_stalled_past_its_lease_neither_overwrites_its_successor_nor_runs_a_unit_twice_when_it_wakes()
 {
    let mut flue = Flue::start_with(LEASE).await;
    let mut other = Gateway::start_like(&flue.gateway, &flue.nats.url(), LEASE).await;
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let (log, gate) = (flue.path("hooks.log"), flue.path("gate"));

    let op = accepted(&other, "stalled", &gated_body(&log, &gate)).await;
    wait_until("the first hook runs", WAIT, || {
        file_lines(&log)
            .contains(&"start first".to_owned())
            .then_some(())
    })
    .await;
    let running = until(&other, "stalled", &op.id, WAIT, |r| {
        r.state == OperationState::Running
    })
    .await;
    let holder = worker_pid(running.worker.as_deref().expect("a worker"));
    let (stalled, survivor) = if flue.gateway.pid() == Some(holder) {
        (&mut flue.gateway, &mut other)
    } else {
        assert_eq!(
            other.pid(),
            Some(holder),
            "one of the two gateways holds it"
        );
        (&mut other, &mut flue.gateway)
    };

    stalled.pause();
    let survivor_pid = survivor.pid();
    until(survivor, "stalled", &op.id, WAIT * 2, |r| {
        r.worker.as_deref().map(worker_pid) == survivor_pid
    })
    .await;
    // Thawed while its successor still runs, the stalled worker finds its lease gone
    // and stops, touching nothing.
    let from = stalled.logs().len();
    stalled.resume();
    stalled
        .logs()
        .wait_for_after(from, "this worker stops", WAIT)
        .await;
    let (_, now) = read(survivor, "stalled", &op.id).await;
    let now: StackOperation = serde_json::from_value(now).expect("an operation");
    assert_eq!(now.state, OperationState::Running, "{now:?}");
    assert_eq!(
        now.worker.as_deref().map(worker_pid),
        survivor_pid,
        "the stalled worker wrote over its successor's record"
    );
    std::fs::write(&gate, "open").expect("open the gate");
    let done = ended(survivor, "stalled", &op.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    assert_eq!(
        done.worker.as_deref().map(worker_pid),
        survivor_pid,
        "{done:?}"
    );
    assert_eq!(
        file_lines(&log),
        ["start first", "end first", "start second", "end second"],
        "each unit ran once, in order"
    );
    let (status, _, body) = submit(survivor, "stalled", &json!({"operation": "delete"})).await;
    assert_eq!(status, 202, "the stack is free: {body}");
}

#[tokio::test]
async fn an_operation_whose_worker_dies_on_every_delivery_ends_failed_saying_so() {
    let mut flue = Flue::start_with(LEASE).await;
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let (log, gate) = (flue.path("hooks.log"), flue.path("gate"));
    let op = accepted(&flue.gateway, "doomed", &gated_body(&log, &gate)).await;

    // The gateway is killed once its worker has started the first unit, then at every
    // takeover as soon as its worker holds the operation; started again, it takes the
    // operation over once the lease runs out.
    let current = &mut flue.gateway;
    let mut taken = 0;
    let failed = loop {
        let pid = current.pid();
        let seen = until(current, "doomed", &op.id, WAIT * 2, |r| {
            r.state == OperationState::Failed
                || (r.attempts > taken && r.worker.as_deref().map(worker_pid) == pid)
        })
        .await;
        if seen.state == OperationState::Failed {
            break seen;
        }
        if taken == 0 {
            // The first holder is let run until the first unit's (gated) hook has started,
            // so that every takeover after it finds a unit running that it must not run
            // again; a kill before that point would leave nothing to run twice.
            wait_until("the first unit's hook started", WAIT, || {
                (file_lines(&log) == ["start first"]).then_some(())
            })
            .await;
        }
        taken = seen.attempts;
        assert!(
            taken <= 5,
            "still running after {taken} deliveries: {seen:?}"
        );
        current.restart().await;
    };
    let reason = failed.reason.as_deref().unwrap_or_default();
    assert!(reason.contains("workers in turn"), "{failed:?}");
    assert_eq!(failed.attempts, 5, "{failed:?}");
    assert_eq!(
        file_lines(&log),
        ["start first"],
        "the first unit ran once, whatever the takeovers"
    );
    // The stack is not left busy: the create submitted again resumes it, each unit
    // still running once.
    std::fs::write(&gate, "open").expect("open the gate");
    let again = accepted(current, "doomed", &gated_body(&log, &gate)).await;
    let resumed = ended(current, "doomed", &again.id).await;
    assert_eq!(resumed.state, OperationState::Succeeded, "{resumed:?}");
    assert_eq!(
        file_lines(&log),
        ["start first", "end first", "start second", "end second"]
    );
}

#[tokio::test]
async fn a_gateway_dead_between_an_operations_record_and_its_message_leaves_nothing_queued_or_busy()
{
    let flue = Flue::start().await;
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let log = flue.path("hooks.log");
    let nats = flue.nats.client().await;
    let js = async_nats::jetstream::new(nats);
    let records = js.get_key_value(OPERATIONS_BUCKET).await.expect("bucket");
    let tenant = default_tenant();

    // Record and claim written, message never queued (the gateway died in between).
    let stack: StackId = "orphan".parse().expect("id");
    let lost = DeploymentId::random().to_string();
    let record = json!({
        "id": lost, "stack": stack, "tenant": tenant, "operation": "create",
        "state": "queued",
        "submitted_at": (OffsetDateTime::now_utc() - Duration::from_secs(3600))
            .format(&time::format_description::well_known::Rfc3339).expect("time"),
    });
    records
        .put(
            format!("{tenant}.{stack}.{lost}"),
            serde_json::to_vec(&record).expect("json").into(),
        )
        .await
        .expect("put record");
    records
        .put(format!("{tenant}.{stack}"), lost.clone().into())
        .await
        .expect("put claim");
    let (status, body) = read(&flue.gateway, "orphan", &lost).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "failed", "{body}");
    assert!(
        body["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("never queued"),
        "{body}"
    );
    let op = accepted(&flue.gateway, "orphan", &group_body("create", 1, &log)).await;
    let done = ended(&flue.gateway, "orphan", &op.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");

    // Message queued and claim written, record never (the reverse order): the message
    // is dropped and the stack stays free.
    let stray: StackId = "stray".parse().expect("id");
    let id = DeploymentId::random().to_string();
    records
        .put(format!("{tenant}.{stray}"), id.clone().into())
        .await
        .expect("put claim");
    let queued = QueuedOperation {
        id: id.clone(),
        stack: stray.clone(),
        body: serde_json::from_value(group_body("create", 1, &log)).expect("body"),
    };
    let from = flue.gateway.logs().len();
    js.publish(
        operation_subject(&tenant, &stray),
        serde_json::to_vec(&queued).expect("json").into(),
    )
    .await
    .expect("publish")
    .await
    .expect("ack");
    flue.gateway
        .logs()
        .wait_for_after(from, "queued operation has no record; dropped", WAIT)
        .await;
    let op = accepted(&flue.gateway, "stray", &group_body("create", 1, &log)).await;
    let done = ended(&flue.gateway, "stray", &op.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
}
