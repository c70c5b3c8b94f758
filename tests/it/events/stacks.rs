//! Stack and group events, from stacks the `flue` CLI drives against a real broker,
//! gateway and agents: an operation's start, its units' progress and its end; members
//! joining and leaving a deployment group when it is scaled.

use std::collections::BTreeSet;

use flue_proto::{CloudEvent, DeploymentId, EventType, ServerId, StackId};
use flue_tests::{EventTap, Flue, WAIT};
use serde_json::json;

use crate::stack::{cluster, create_stack, example, flue, stack};

/// Waits for the end (completed or failed) of an operation of stack `id` not in
/// `known`, adds it there and returns the event.
async fn next_end(tap: &mut EventTap, id: &str, known: &mut Vec<String>) -> CloudEvent {
    let stack = StackId::new(id).expect("id");
    let end = tap
        .wait_for(
            &format!("operation {} of {id} ended", known.len() + 1),
            WAIT,
            |e| {
                e.stack.as_ref() == Some(&stack)
                    && matches!(
                        e.ty,
                        EventType::StackOperationCompleted | EventType::StackOperationFailed
                    )
                    && !known.iter().any(|k| e.data["operation_id"] == json!(k))
            },
        )
        .await;
    known.push(op_of(&end));
    end
}

fn op_of(e: &CloudEvent) -> String {
    e.data["operation_id"]
        .as_str()
        .expect("operation id")
        .to_owned()
}

/// Every stack and group event of operation `op`, in stream order.
fn of_op(tap: &EventTap, op: &str) -> Vec<CloudEvent> {
    tap.events()
        .into_iter()
        .filter(|e| e.data.get("operation_id") == Some(&json!(op)))
        .collect()
}

fn only(events: &[CloudEvent], ty: EventType) -> Vec<CloudEvent> {
    events.iter().filter(|e| e.ty == ty).cloned().collect()
}

/// `unit_status` of each progress event about `unit`, in order.
fn unit_states(events: &[CloudEvent], unit: &str) -> Vec<String> {
    only(events, EventType::StackOperationProgress)
        .iter()
        .filter(|e| e.data["unit"] == json!(unit))
        .map(|e| e.data["unit_status"].as_str().expect("status").to_owned())
        .collect()
}

/// The members of group `compute` of `stack`, read page by page from its units.
async fn group_members(env: &Flue, stack: &str) -> Vec<String> {
    let id = StackId::new(stack).expect("id");
    let mut members = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = env
            .client()
            .stack_units_page(&id, 2, cursor.as_deref())
            .await
            .expect("units page");
        members.extend(
            page.items
                .into_iter()
                .filter(|u| u.unit.resource == "compute")
                .filter_map(|u| u.unit.member),
        );
        match page.next {
            Some(next) => cursor = Some(next),
            None => return members,
        }
    }
}

fn member(e: &CloudEvent) -> &str {
    e.data["member"].as_str().expect("member")
}

#[tokio::test]
async fn scaling_a_group_from_two_to_three_members_reports_one_join_and_back_one_leave() {
    let (env, _agents) = cluster(&["head", "compute1", "compute2", "compute3"]).await;
    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    let state = env.path("cluster");
    let state_param = format!("state_dir={}", state.display());
    let run = create_stack(&env, "hpc", &example("cluster"), &[&state_param]).await;
    assert_eq!(run.code, 0, "{run}");
    let mut ops = Vec::new();
    let created = next_end(&mut tap, "hpc", &mut ops).await;
    assert_eq!(created.ty, EventType::StackOperationCompleted);
    let joined = only(&of_op(&tap, &ops[0]), EventType::GroupMemberJoined);
    let names: BTreeSet<&str> = joined.iter().map(member).collect();
    assert_eq!(names, BTreeSet::from(["c1", "c2"]));

    let update = |servers: &'static str| {
        let template = example("cluster");
        let env = &env;
        async move {
            let run = flue(
                env,
                &["stack", "update", "hpc", "-t", &template, "-P", servers],
            )
            .await;
            assert_eq!(run.code, 0, "{run}");
        }
    };
    update(r#"compute_servers={"c1": "compute1", "c2": "compute2", "c3": "compute3"}"#).await;
    let scaled = next_end(&mut tap, "hpc", &mut ops).await;
    assert_eq!(scaled.data["status"], json!("UPDATE_COMPLETE"));
    let events = of_op(&tap, &ops[1]);
    let joined = only(&events, EventType::GroupMemberJoined);
    assert_eq!(joined.len(), 1, "{joined:#?}");
    let j = &joined[0];
    assert_eq!(
        j.id,
        format!("group:hpc:compute:c3:member_joined:{}", ops[1])
    );
    assert_eq!(j.subject, "stacks/hpc/groups/compute/members/c3");
    assert_eq!(j.server, Some(ServerId::new("compute3").expect("id")));
    assert_eq!(j.stack, Some(StackId::new("hpc").expect("id")));
    assert_eq!(j.data["group"], json!("compute"));
    // The membership is read from the stack's units, not carried by every event.
    assert!(j.data.get("members").is_none(), "{j:#?}");
    assert_eq!(group_members(&env, "hpc").await, ["c1", "c2", "c3"]);
    assert!(only(&events, EventType::GroupMemberLeft).is_empty());
    // Nothing else in the whole stream says a member joined during the update.
    let started = tap
        .seen()
        .iter()
        .position(|(_, e)| e.id == format!("stack:hpc:{}:operation_started", ops[1]))
        .expect("update started");
    let all_joins = tap.seen()[started..]
        .iter()
        .filter(|(_, e)| e.ty == EventType::GroupMemberJoined)
        .count();
    assert_eq!(all_joins, 1);

    update(r#"compute_servers={"c1": "compute1", "c3": "compute3"}"#).await;
    next_end(&mut tap, "hpc", &mut ops).await;
    let events = of_op(&tap, &ops[2]);
    let left = only(&events, EventType::GroupMemberLeft);
    assert_eq!(left.len(), 1, "{left:#?}");
    assert_eq!(member(&left[0]), "c2");
    assert_eq!(group_members(&env, "hpc").await, ["c1", "c3"]);
    assert_eq!(left[0].server, Some(ServerId::new("compute2").expect("id")));
    assert!(only(&events, EventType::GroupMemberJoined).is_empty());
    assert_eq!(unit_states(&events, "compute/c2"), ["DELETE_COMPLETE"]);
}

const PAIR: &str = r#"heat_template_version: 2018-08-31
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      config: |
        #!/bin/sh
        echo "running $deploy_resource_name"
  first:
    type: OS::Heat::SoftwareDeployment
    properties: {config: {get_resource: cfg}, server: solo}
  second:
    type: OS::Heat::SoftwareDeployment
    depends_on: first
    properties: {config: {get_resource: cfg}, server: solo}
"#;

#[tokio::test]
async fn a_stack_create_and_delete_report_their_operations_and_units_in_order() {
    let (env, _agents) = cluster(&["solo"]).await;
    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    let template = env.path("pair.yaml");
    std::fs::write(&template, PAIR).expect("template");
    let run = create_stack(&env, "pair", &template.display().to_string(), &[]).await;
    assert_eq!(run.code, 0, "{run}");
    let mut ops = Vec::new();
    next_end(&mut tap, "pair", &mut ops).await;
    let op = &ops[0];
    let events = of_op(&tap, op);
    let first = &events[0];
    assert_eq!(first.ty, EventType::StackOperationStarted);
    assert_eq!(first.id, format!("stack:pair:{op}:operation_started"));
    assert_eq!(first.subject, "stacks/pair");
    assert_eq!(first.data["status"], json!("CREATE_IN_PROGRESS"));
    let last = events.last().expect("events");
    assert_eq!(last.ty, EventType::StackOperationCompleted);
    assert_eq!(last.id, format!("stack:pair:{op}:operation_completed"));
    assert_eq!(last.data["status"], json!("CREATE_COMPLETE"));
    assert!(
        events[1..events.len() - 1]
            .iter()
            .all(|e| e.ty == EventType::StackOperationProgress),
        "{events:#?}"
    );
    for unit in ["first", "second"] {
        let states = unit_states(&events, unit);
        assert_eq!(
            states[states.len() - 2..],
            ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"],
            "{unit}: {states:?}"
        );
    }
    // `second` depends on `first`: it starts once `first` completed.
    let at = |unit: &str, status: &str| {
        events
            .iter()
            .position(|e| e.data["unit"] == json!(unit) && e.data["unit_status"] == json!(status))
            .expect("progress event")
    };
    assert!(at("first", "CREATE_COMPLETE") < at("second", "CREATE_IN_PROGRESS"));
    // A unit's progress names its deployment, whose own events name the stack.
    let record = stack(&env, "pair").await;
    let deployment: DeploymentId = record.state.units["first"]
        .current
        .clone()
        .expect("deployed");
    let done = &events[at("first", "CREATE_COMPLETE")];
    assert_eq!(done.id, format!("stack:pair:{op}:first:CREATE_COMPLETE"));
    assert_eq!(done.deployment, Some(deployment.clone()));
    assert_eq!(done.server, Some(ServerId::new("solo").expect("id")));
    let completed = tap
        .wait_for("the deployment's completed event", WAIT, |e| {
            e.ty == EventType::DeploymentCompleted && e.deployment.as_ref() == Some(&deployment)
        })
        .await;
    assert_eq!(completed.stack, Some(StackId::new("pair").expect("id")));
    assert_eq!(completed.data["resource_name"], json!("first"));

    let run = flue(&env, &["stack", "delete", "pair"]).await;
    assert_eq!(run.code, 0, "{run}");
    let deleted = next_end(&mut tap, "pair", &mut ops).await;
    assert_eq!(deleted.ty, EventType::StackOperationCompleted);
    assert_eq!(deleted.data["status"], json!("DELETE_COMPLETE"));
    let events = of_op(&tap, &ops[1]);
    assert_eq!(events[0].ty, EventType::StackOperationStarted);
    for unit in ["first", "second"] {
        assert_eq!(unit_states(&events, unit), ["DELETE_COMPLETE"], "{unit}");
    }
    let ids: BTreeSet<&str> = tap.seen().iter().map(|(_, e)| e.id.as_str()).collect();
    assert_eq!(ids.len(), tap.seen().len(), "ids unique");
}

#[tokio::test]
async fn a_failed_unit_fails_the_operation() {
    let (env, _agents) = cluster(&["solo"]).await;
    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    let template = env.path("broken.yaml");
    std::fs::write(
        &template,
        r#"heat_template_version: 2018-08-31
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      config: |
        #!/bin/sh
        echo "disk full" >&2
        exit 1
  broken:
    type: OS::Heat::SoftwareDeployment
    properties: {config: {get_resource: cfg}, server: solo}
"#,
    )
    .expect("template");
    let run = create_stack(&env, "bad", &template.display().to_string(), &[]).await;
    assert_ne!(run.code, 0, "{run}");
    let mut ops = Vec::new();
    let end = next_end(&mut tap, "bad", &mut ops).await;
    assert_eq!(end.ty, EventType::StackOperationFailed);
    assert_eq!(end.id, format!("stack:bad:{}:operation_failed", ops[0]));
    assert_eq!(end.data["status"], json!("CREATE_FAILED"));
    let reason = end.data["reason"].as_str().expect("reason");
    assert!(reason.contains("broken"), "{reason}");
    let events = of_op(&tap, &ops[0]);
    assert_eq!(
        unit_states(&events, "broken").last().map(String::as_str),
        Some("CREATE_FAILED")
    );
    assert!(only(&events, EventType::StackOperationCompleted).is_empty());
}
