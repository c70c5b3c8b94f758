//! `flue watch`'s view: events applied to rows, the lines printed, the table drawn.

use flue_proto::event::{DeploymentEventData, ProgressEventData, StackEventData};
use flue_proto::{
    CloudEvent, DeploymentId, DeploymentStatus, EventType, ServerId, StackId, TenantId,
};
use serde_json::json;

use super::row::{Row, State, Target};
use super::view::View;
use super::{Display, Screen, table};
use crate::Outcome;

fn id(s: &str) -> DeploymentId {
    DeploymentId::new(s).expect("id")
}

fn server() -> ServerId {
    ServerId::new("web1").expect("id")
}

fn event(ty: EventType, data: &impl serde::Serialize) -> CloudEvent {
    CloudEvent::new(
        ty,
        &TenantId::new("default").expect("t"),
        "x".into(),
        "s".into(),
        data,
    )
    .server(&server())
}

fn deployment_event(ty: EventType, d: &str, resource: Option<&str>) -> CloudEvent {
    let status = match ty {
        EventType::DeploymentStarted => DeploymentStatus::InProgress,
        EventType::DeploymentCompleted => DeploymentStatus::Complete,
        EventType::DeploymentFailed | EventType::DeploymentTimedOut => DeploymentStatus::Failed,
        _ => DeploymentStatus::Queued,
    };
    event(
        ty,
        &DeploymentEventData {
            deployment_id: id(d),
            server_id: server(),
            config_id: "c".parse().expect("config id"),
            action: "CREATE".into(),
            status,
            status_reason: (ty == EventType::DeploymentFailed).then(|| "exit 3\nmore".to_owned()),
            stack_id: None,
            resource_name: resource.map(str::to_owned),
            deploy_status_code: None,
            outputs: Default::default(),
        },
    )
}

fn progress(d: &str, seq: u64, texts: &[&str]) -> CloudEvent {
    let data: ProgressEventData = serde_json::from_value(json!({
        "deployment_id": d, "server_id": "web1", "seq": seq,
        "lines": texts.iter().map(|t| json!({"stream": "stdout", "text": t})).collect::<Vec<_>>(),
    }))
    .expect("progress");
    event(EventType::DeploymentProgress, &data)
}

#[test]
fn a_server_view_follows_a_deployment_to_its_end() {
    let mut view = View::new(Target::Server(server()));
    assert_eq!(view.finished(), Some(Outcome::Success), "nothing running");
    let lines = view.apply(&deployment_event(EventType::DeploymentQueued, "d1", None));
    assert_eq!(lines, ["deployment d1 on web1: CREATE QUEUED"]);
    assert_eq!(view.finished(), None);
    view.apply(&deployment_event(EventType::DeploymentStarted, "d1", None));
    let lines = view.apply(&progress("d1", 1, &["one", "two"]));
    assert_eq!(
        lines,
        [
            "deployment d1 on web1 stdout: one",
            "deployment d1 on web1 stdout: two"
        ]
    );
    assert_eq!(view.rows[0].output.as_deref(), Some("two"));
    // A late duplicate of an earlier state changes nothing.
    assert!(
        view.apply(&deployment_event(EventType::DeploymentQueued, "d1", None))
            .is_empty()
    );
    let lines = view.apply(&deployment_event(
        EventType::DeploymentCompleted,
        "d1",
        None,
    ));
    assert_eq!(lines, ["deployment d1 on web1: CREATE COMPLETE"]);
    assert_eq!(view.finished(), Some(Outcome::Success));
    view.apply(&deployment_event(EventType::DeploymentQueued, "d2", None));
    let lines = view.apply(&deployment_event(EventType::DeploymentFailed, "d2", None));
    assert_eq!(lines, ["deployment d2 on web1: CREATE FAILED: exit 3"]);
    assert_eq!(view.finished(), Some(Outcome::DeploymentFailed));
}

#[test]
fn a_stack_view_maps_deployments_to_units_and_ends_with_the_operation() {
    let stack = StackId::new("shop").expect("id");
    let mut view = View::new(Target::Stack(stack.clone()));
    view.rows.push(Row {
        key: "workers/w2".into(),
        deployment: None,
        resource_name: Some("w2".into()),
        server: Some(server()),
        action: "INIT".into(),
        state: State::Complete,
        reason: None,
        output: None,
    });
    let started = StackEventData {
        stack_id: stack.clone(),
        operation_id: "op".into(),
        status: "CREATE_IN_PROGRESS".into(),
        reason: None,
        unit: None,
        unit_status: None,
        deployment_id: None,
    };
    let lines = view.apply(&event(EventType::StackOperationStarted, &started));
    assert_eq!(lines, ["stack shop: CREATE_IN_PROGRESS"]);
    let lines = view.apply(&deployment_event(
        EventType::DeploymentStarted,
        "d9",
        Some("w2"),
    ));
    assert_eq!(lines, ["workers/w2 on web1: CREATE IN_PROGRESS"]);
    let unit = StackEventData {
        unit: Some("db".into()),
        unit_status: Some("CREATE_COMPLETE".into()),
        deployment_id: Some(id("d8")),
        ..started.clone()
    };
    assert_eq!(
        view.apply(&event(EventType::StackOperationProgress, &unit)),
        ["db: CREATE COMPLETE"]
    );
    assert_eq!(view.finished(), None);
    let failed = StackEventData {
        status: "CREATE_FAILED".into(),
        reason: Some("workers/w2 failed".into()),
        ..started
    };
    let lines = view.apply(&event(EventType::StackOperationFailed, &failed));
    assert_eq!(lines, ["stack shop: CREATE_FAILED (workers/w2 failed)"]);
    assert_eq!(view.finished(), Some(Outcome::Failed));
}

#[test]
fn the_terminal_frame_is_a_table_redrawn_in_place() {
    let mut view = View::new(Target::Server(server()));
    view.status = Some("online".into());
    view.apply(&deployment_event(EventType::DeploymentStarted, "d1", None));
    view.apply(&progress("d1", 1, &["installing"]));
    let frame = table(&view);
    assert_eq!(
        frame,
        "server web1: online\n\nDEPLOYMENT  SERVER  ACTION  STATE        OUTPUT\n\
         d1          web1    CREATE  IN_PROGRESS  installing\n"
    );
    let mut out = Vec::new();
    let mut display = Display {
        screen: Screen::Redraw,
        drawn: false,
    };
    display.show(&view, &[], &mut out).expect("draw");
    display.show(&view, &[], &mut out).expect("draw");
    let text = String::from_utf8(out).expect("utf-8");
    assert_eq!(text.matches("\x1b[2J").count(), 1, "cleared once");
    assert_eq!(text.matches("\x1b[H").count(), 2, "homed every frame");
}

#[test]
fn a_hooks_escape_sequences_never_reach_the_terminal() {
    let mut view = View::new(Target::Server(server()));
    view.apply(&deployment_event(EventType::DeploymentStarted, "d1", None));
    let hostile = "\x1b]0;pwned\x07\x1b[31mred\x1b[0m\ttab\r100%";
    let lines = view.apply(&progress("d1", 1, &[hostile]));
    let frame = table(&view);
    assert!(
        frame.contains("\u{fffd}]0;pwned\u{fffd}\u{fffd}[31mred\u{fffd}[0m tab 100%"),
        "{frame:?}"
    );
    for screen in [Screen::Lines, Screen::Redraw] {
        let mut out = Vec::new();
        let mut display = Display {
            screen,
            drawn: false,
        };
        display.show(&view, &lines, &mut out).expect("draw");
        let text = String::from_utf8(out).expect("utf-8");
        // Only the view's own sequences: clear, home, erase (all `ESC [` then a letter).
        let own = ["\x1b[2J", "\x1b[H", "\x1b[K", "\x1b[J"];
        let rest = own.iter().fold(text.clone(), |t, s| t.replace(s, ""));
        assert!(
            !rest.contains(['\x1b', '\x07', '\t', '\r']),
            "{screen:?}: {text:?}"
        );
    }
}

#[test]
fn planned_units_are_pending_and_a_known_state_is_not_repeated() {
    let stack = StackId::new("shop").expect("id");
    let mut view = View::new(Target::Stack(stack.clone()));
    let planned = StackEventData {
        stack_id: stack,
        operation_id: "op".into(),
        status: "CREATE_IN_PROGRESS".into(),
        reason: None,
        unit: Some("web".into()),
        unit_status: Some("INIT_COMPLETE".into()),
        deployment_id: None,
    };
    let lines = view.apply(&event(EventType::StackOperationProgress, &planned));
    assert_eq!(lines, ["web: INIT PENDING"]);
    assert_eq!(view.rows[0].state, State::Pending);
    let running = StackEventData {
        unit_status: Some("CREATE_IN_PROGRESS".into()),
        deployment_id: Some(id("d1")),
        ..planned
    };
    let lines = view.apply(&event(EventType::StackOperationProgress, &running));
    assert_eq!(lines, ["web: CREATE IN_PROGRESS"]);
    // The deployment's own events: queued and started trail the unit's state.
    for ty in [EventType::DeploymentQueued, EventType::DeploymentStarted] {
        let lines = view.apply(&deployment_event(ty, "d1", Some("web")));
        assert!(lines.is_empty(), "{ty:?}: {lines:?}");
    }
    let lines = view.apply(&deployment_event(
        EventType::DeploymentCompleted,
        "d1",
        Some("web"),
    ));
    assert_eq!(
        lines,
        ["web on web1: CREATE COMPLETE"],
        "the server from its events"
    );
}
