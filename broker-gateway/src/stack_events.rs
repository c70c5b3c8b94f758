//! Stack and group events, derived from two successive versions of a stack.
//!
//! The engine keeps its progress in the stack ([`flue_proto::StackState`]) and writes
//! back the head and the units it changed after every step; the gateway compares what
//! a write replaced with what it stored (the head, and each unit the write touched:
//! the units it did not touch are in neither version) and reports the difference:
//!
//! - `stack.operation_started` when the record names a new operation in progress;
//! - `stack.operation_progress` for each unit whose action or status changed, that
//!   entered the stack, or that left it (`DELETE_COMPLETE`);
//! - `group.member_joined` / `group.member_left` when the live members of a
//!   deployment group changed: a member is live once a CREATE (or UPDATE) of it
//!   completed, until it leaves the stack (or its DELETE completed);
//! - `stack.operation_completed` / `stack.operation_failed` when the operation ended.
//!
//! Ids name the stack, the operation and what changed (see [`stack_events`]), so the
//! same change reported twice is one event.

use std::collections::{BTreeMap, BTreeSet};

use flue_proto::event::{MemberEventData, StackEventData};
use flue_proto::{
    Action, CloudEvent, DeploymentId, EventType, OpStatus, ServerId, Stack, StackAction, StackId,
    TenantId, Unit,
};

/// Operation id used in the ids of group events when the record names no operation.
const NO_OPERATION: &str = "none";

/// The events reporting the change from `old` (absent for a new stack) to `new`, in
/// the order they happened: operation started, unit progress, group membership,
/// operation ended.
///
/// Ids: `stack:<id>:<op>:operation_started|operation_completed|operation_failed`,
/// `stack:<id>:<op>:<unit>:<ACTION>_<STATUS>`,
/// `group:<id>:<group>:<member>:member_joined|member_left:<op>`.
pub fn stack_events(tenant: &TenantId, old: Option<&Stack>, new: &Stack) -> Vec<CloudEvent> {
    let mut events = Vec::new();
    let op = new.state.operation.as_ref();
    let old_op = old.and_then(|s| s.state.operation.as_ref());
    let same_op = op.is_some() && op.map(|o| &o.id) == old_op.map(|o| &o.id);
    if let Some(op) = op {
        if !same_op && new.status.status == OpStatus::InProgress {
            events.push(operation_event(
                tenant,
                new,
                &op.id,
                EventType::StackOperationStarted,
            ));
        }
        events.extend(unit_events(tenant, old, new, &op.id));
    }
    let op_id = op.map_or(NO_OPERATION, |o| o.id.as_str());
    events.extend(member_events(tenant, old, new, op_id));
    if let Some(op) = op {
        let ended = match new.status.status {
            OpStatus::Complete => Some(EventType::StackOperationCompleted),
            OpStatus::Failed => Some(EventType::StackOperationFailed),
            OpStatus::InProgress => None,
        };
        let already = same_op && old.is_some_and(|s| s.status.status == new.status.status);
        if let Some(ty) = ended.filter(|_| !already) {
            events.push(operation_event(tenant, new, &op.id, ty));
        }
    }
    events
}

/// The events reporting that `stack` was removed: its live group members leave, and a
/// delete operation in progress (the engine removes the record as its last step)
/// completes.
pub fn deleted_stack_events(tenant: &TenantId, stack: &Stack) -> Vec<CloudEvent> {
    let op = stack.state.operation.as_ref();
    let op_id = op.map_or(NO_OPERATION, |o| o.id.as_str());
    let mut gone = stack.clone();
    gone.state.units.clear();
    let mut events = member_events(tenant, Some(stack), &gone, op_id);
    let deleting =
        stack.status.action == StackAction::Delete && stack.status.status == OpStatus::InProgress;
    if let Some(op) = op.filter(|_| deleting) {
        gone.status.status = OpStatus::Complete;
        events.push(operation_event(
            tenant,
            &gone,
            &op.id,
            EventType::StackOperationCompleted,
        ));
    }
    events
}

/// `stack.operation_*` other than progress, with the stack's status as `new` has it.
fn operation_event(tenant: &TenantId, new: &Stack, op_id: &str, ty: EventType) -> CloudEvent {
    let data = StackEventData {
        stack_id: new.id.clone(),
        operation_id: op_id.to_owned(),
        status: new.status.to_string(),
        reason: new.status.reason.clone(),
        unit: None,
        unit_status: None,
        deployment_id: None,
    };
    CloudEvent::new(
        ty,
        tenant,
        format!("stack:{}:{op_id}:{}", new.id, ty.name()),
        format!("stacks/{}", new.id),
        &data,
    )
    .stack(Some(&new.id))
}

/// How a unit stands, as progress events show it: its action and status, with the
/// action its planned deployment runs while that is in progress (a new unit reads
/// `CREATE_IN_PROGRESS`, not `INIT_IN_PROGRESS`).
fn unit_state(u: &Unit) -> (String, OpStatus, Option<DeploymentId>) {
    match (&u.pending, u.status) {
        (Some(p), OpStatus::InProgress) => (
            p.action.clone(),
            OpStatus::InProgress,
            Some(p.deployment_id.clone()),
        ),
        _ => (u.action.clone(), u.status, u.current.clone()),
    }
}

/// `stack.operation_progress` for each unit of `new` that is new or whose state
/// changed, then for each unit of `old` that left.
fn unit_events(
    tenant: &TenantId,
    old: Option<&Stack>,
    new: &Stack,
    op_id: &str,
) -> Vec<CloudEvent> {
    let empty = BTreeMap::new();
    let before = old.map_or(&empty, |s| &s.state.units);
    let mut events = Vec::new();
    for (key, unit) in &new.state.units {
        let now = unit_state(unit);
        if before.get(key).map(unit_state).as_ref() == Some(&now) {
            continue;
        }
        let (action, status, deployment) = now;
        events.push(progress_event(
            tenant,
            new,
            op_id,
            (key, &unit.server_id),
            &format!("{action}_{status}"),
            deployment,
        ));
    }
    for (key, unit) in before {
        if new.state.units.contains_key(key) {
            continue;
        }
        let deployment = unit
            .pending
            .as_ref()
            .filter(|p| p.action == Action::DELETE)
            .map(|p| p.deployment_id.clone());
        events.push(progress_event(
            tenant,
            new,
            op_id,
            (key, &unit.server_id),
            "DELETE_COMPLETE",
            deployment,
        ));
    }
    events
}

/// One `stack.operation_progress`: `unit` (its key and server) now stands at `unit_status`.
fn progress_event(
    tenant: &TenantId,
    new: &Stack,
    op_id: &str,
    (key, server): (&str, &ServerId),
    unit_status: &str,
    deployment: Option<DeploymentId>,
) -> CloudEvent {
    let ty = EventType::StackOperationProgress;
    let data = StackEventData {
        stack_id: new.id.clone(),
        operation_id: op_id.to_owned(),
        status: new.status.to_string(),
        reason: None,
        unit: Some(key.to_owned()),
        unit_status: Some(unit_status.to_owned()),
        deployment_id: deployment.clone(),
    };
    let mut event = CloudEvent::new(
        ty,
        tenant,
        format!("stack:{}:{op_id}:{key}:{unit_status}", new.id),
        format!("stacks/{}", new.id),
        &data,
    )
    .server(server)
    .stack(Some(&new.id));
    event.deployment = deployment;
    event
}

/// Live members of each deployment group of `stack`, with their servers.
fn live_members(stack: Option<&Stack>) -> BTreeMap<&str, BTreeMap<&str, &ServerId>> {
    let mut groups: BTreeMap<&str, BTreeMap<&str, &ServerId>> = BTreeMap::new();
    for unit in stack.into_iter().flat_map(|s| s.state.units.values()) {
        let Some(member) = &unit.member else { continue };
        let members = groups.entry(unit.resource.as_str()).or_default();
        let removed = unit.action == Action::DELETE && unit.status == OpStatus::Complete;
        if unit.baseline.is_some() && !removed {
            members.insert(member.as_str(), &unit.server_id);
        }
    }
    groups
}

/// `group.member_joined` for each member live in `new` and not in `old`, then
/// `group.member_left` for each live in `old` and not in `new`.
fn member_events(
    tenant: &TenantId,
    old: Option<&Stack>,
    new: &Stack,
    op_id: &str,
) -> Vec<CloudEvent> {
    let before = live_members(old);
    let after = live_members(Some(new));
    let groups: BTreeSet<&str> = before.keys().chain(after.keys()).copied().collect();
    let none = BTreeMap::new();
    let mut events = Vec::new();
    for group in groups {
        let was = before.get(group).unwrap_or(&none);
        let is = after.get(group).unwrap_or(&none);
        let change = Membership {
            stack: &new.id,
            group,
            op_id,
        };
        for (member, server) in is.iter().filter(|(m, _)| !was.contains_key(*m)) {
            events.push(change.event(tenant, EventType::GroupMemberJoined, member, server));
        }
        for (member, server) in was.iter().filter(|(m, _)| !is.contains_key(*m)) {
            events.push(change.event(tenant, EventType::GroupMemberLeft, member, server));
        }
    }
    events
}

/// A change of one group's membership.
struct Membership<'a> {
    stack: &'a StackId,
    group: &'a str,
    op_id: &'a str,
}

impl Membership<'_> {
    /// `ty` (joined or left) about `member`, on `server`.
    fn event(
        &self,
        tenant: &TenantId,
        ty: EventType,
        member: &str,
        server: &ServerId,
    ) -> CloudEvent {
        let (stack, group) = (self.stack, self.group);
        let data = MemberEventData {
            stack_id: stack.clone(),
            group: group.to_owned(),
            member: member.to_owned(),
            server_id: server.clone(),
            operation_id: self.op_id.to_owned(),
        };
        CloudEvent::new(
            ty,
            tenant,
            format!(
                "group:{stack}:{group}:{member}:{}:{}",
                ty.name(),
                self.op_id
            ),
            format!("stacks/{stack}/groups/{group}/members/{member}"),
            &data,
        )
        .server(server)
        .stack(Some(stack))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flue_proto::{Operation, Pending, StackState, StackStatus};
    use time::OffsetDateTime;

    fn tenant() -> TenantId {
        TenantId::new("t").expect("id")
    }

    fn dep(s: &str) -> DeploymentId {
        DeploymentId::new(s).expect("id")
    }

    fn stack(op: &str, action: StackAction, status: OpStatus, units: &[(&str, Unit)]) -> Stack {
        let now = OffsetDateTime::UNIX_EPOCH;
        Stack {
            id: StackId::new("s").expect("id"),
            tenant: tenant(),
            revision: 1,
            created_at: now,
            updated_at: now,
            status: StackStatus {
                action,
                status,
                reason: (status == OpStatus::Failed).then(|| "web: exit 1".to_owned()),
            },
            state: StackState {
                operation: Some(Operation {
                    id: op.to_owned(),
                    action,
                    name: None,
                    resource: None,
                    started_at: now,
                    finished_at: None,
                    driver: None,
                    seen_at: None,
                    fingerprint: None,
                    units: Vec::new(),
                    no_follow: false,
                }),
                units: units
                    .iter()
                    .map(|(k, u)| ((*k).to_owned(), u.clone()))
                    .collect(),
                ..StackState::default()
            },
        }
    }

    /// A unit of group `g` (`key` `g/<member>`) or a plain one (`member` empty).
    fn unit(member: &str, action: &str, status: OpStatus) -> Unit {
        Unit {
            resource: if member.is_empty() { "web" } else { "g" }.to_owned(),
            member: (!member.is_empty()).then(|| member.to_owned()),
            server_id: ServerId::new(format!(
                "srv-{}",
                if member.is_empty() { "web" } else { member }
            ))
            .expect("id"),
            actions: Vec::new(),
            depends_on: Vec::new(),
            baseline: None,
            baseline_config: None,
            last: None,
            last_config: None,
            pending: None,
            current: None,
            op_id: None,
            action: action.to_owned(),
            status,
            status_reason: None,
            inputs_read: std::collections::BTreeMap::new(),
        }
    }

    /// `unit` with a CREATE that completed (`d-<member>`).
    fn live(member: &str) -> Unit {
        let mut u = unit(member, "CREATE", OpStatus::Complete);
        u.baseline = Some(dep(&format!("d-{member}")));
        u.current = u.baseline.clone();
        u
    }

    /// `unit` with `action` planned (`p-<member>`) and running.
    fn planned(mut u: Unit, action: &str, op: &str) -> Unit {
        u.status = OpStatus::InProgress;
        u.pending = Some(Pending {
            op_id: op.to_owned(),
            action: action.to_owned(),
            deployment_id: dep(&format!("p-{}", u.member.as_deref().unwrap_or("web"))),
            config_id: None,
        });
        u
    }

    fn ids(events: &[CloudEvent]) -> Vec<String> {
        events.iter().map(|e| e.id.clone()).collect()
    }

    #[test]
    fn a_create_starts_runs_its_units_and_completes() {
        use OpStatus::{Complete, InProgress};
        let t = tenant();
        let c = StackAction::Create;
        let v0 = stack("op1", c, InProgress, &[]);
        let started = stack_events(&t, None, &v0);
        assert_eq!(ids(&started), ["stack:s:op1:operation_started"]);
        assert_eq!(started[0].subject, "stacks/s");
        assert_eq!(
            started[0].nats_subject(),
            "flue.t.evt.stack.s.~.operation_started"
        );
        assert_eq!(started[0].data["status"], "CREATE_IN_PROGRESS");

        let v1 = stack("op1", c, InProgress, &[("web", unit("", "INIT", Complete))]);
        assert_eq!(
            ids(&stack_events(&t, Some(&v0), &v1)),
            ["stack:s:op1:web:INIT_COMPLETE"]
        );
        let v2 = stack(
            "op1",
            c,
            InProgress,
            &[("web", planned(unit("", "INIT", Complete), "CREATE", "op1"))],
        );
        let running = stack_events(&t, Some(&v1), &v2);
        assert_eq!(ids(&running), ["stack:s:op1:web:CREATE_IN_PROGRESS"]);
        assert_eq!(running[0].data["unit_status"], "CREATE_IN_PROGRESS");
        assert_eq!(running[0].data["deployment_id"], "p-web");
        assert_eq!(
            running[0].nats_subject(),
            "flue.t.evt.stack.s.srv-web.operation_progress"
        );
        assert_eq!(running[0].deployment, Some(dep("p-web")));
        // A write that only renews the driver's hold reports nothing.
        assert!(stack_events(&t, Some(&v2), &v2).is_empty());

        let v3 = stack("op1", c, Complete, &[("web", live(""))]);
        let ended = stack_events(&t, Some(&v2), &v3);
        assert_eq!(
            ids(&ended),
            [
                "stack:s:op1:web:CREATE_COMPLETE",
                "stack:s:op1:operation_completed"
            ]
        );
        assert_eq!(ended[1].data["status"], "CREATE_COMPLETE");
        assert!(
            stack_events(&t, Some(&v3), &v3).is_empty(),
            "completed once"
        );
    }

    #[test]
    fn a_failed_operation_says_why() {
        let t = tenant();
        let old = stack("op1", StackAction::Update, OpStatus::InProgress, &[]);
        let new = stack("op1", StackAction::Update, OpStatus::Failed, &[]);
        let events = stack_events(&t, Some(&old), &new);
        assert_eq!(ids(&events), ["stack:s:op1:operation_failed"]);
        assert_eq!(events[0].data["status"], "UPDATE_FAILED");
        assert_eq!(events[0].data["reason"], "web: exit 1");
        // A new operation on a failed stack starts afresh.
        let retry = stack("op2", StackAction::Update, OpStatus::InProgress, &[]);
        assert_eq!(
            ids(&stack_events(&t, Some(&new), &retry)),
            ["stack:s:op2:operation_started"]
        );
    }

    #[test]
    fn a_member_joins_once_its_create_completed_and_leaves_with_its_unit() {
        use OpStatus::{Complete, InProgress};
        let t = tenant();
        let u = StackAction::Update;
        let two = [("g/c1", live("c1")), ("g/c2", live("c2"))];
        let v0 = stack("op2", u, InProgress, &two);
        // The new member enters the stack, then its CREATE runs: not a member yet.
        let mut three = two.to_vec();
        three.push(("g/c3", unit("c3", "INIT", Complete)));
        let v1 = stack("op2", u, InProgress, &three);
        assert_eq!(
            ids(&stack_events(&t, Some(&v0), &v1)),
            ["stack:s:op2:g/c3:INIT_COMPLETE"]
        );
        three[2].1 = planned(unit("c3", "INIT", Complete), "CREATE", "op2");
        // Existing members re-run (UPDATE) meanwhile: still members.
        three[0].1 = planned(live("c1"), "UPDATE", "op2");
        let v2 = stack("op2", u, InProgress, &three);
        assert_eq!(
            ids(&stack_events(&t, Some(&v1), &v2)),
            [
                "stack:s:op2:g/c1:UPDATE_IN_PROGRESS",
                "stack:s:op2:g/c3:CREATE_IN_PROGRESS"
            ]
        );
        three[2].1 = live("c3");
        let v3 = stack("op2", u, InProgress, &three);
        let joined = stack_events(&t, Some(&v2), &v3);
        assert_eq!(
            ids(&joined),
            [
                "stack:s:op2:g/c3:CREATE_COMPLETE",
                "group:s:g:c3:member_joined:op2"
            ]
        );
        let j = &joined[1];
        assert_eq!(j.ty, EventType::GroupMemberJoined);
        assert_eq!(j.subject, "stacks/s/groups/g/members/c3");
        assert_eq!(j.nats_subject(), "flue.t.evt.group.s.srv-c3.member_joined");
        assert_eq!(j.data["operation_id"], "op2");

        // Scale in: c2 leaves the stack.
        let v4 = stack("op3", u, InProgress, &[three[0].clone(), three[2].clone()]);
        let left = stack_events(&t, Some(&v3), &v4);
        assert_eq!(
            ids(&left),
            [
                "stack:s:op3:operation_started",
                "stack:s:op3:g/c2:DELETE_COMPLETE",
                "group:s:g:c2:member_left:op3"
            ]
        );
        assert_eq!(left[2].server, Some(ServerId::new("srv-c2").expect("id")));
    }

    #[test]
    fn removing_a_stack_lets_its_members_leave_and_ends_its_delete() {
        let t = tenant();
        let units = [("g/c1", live("c1")), ("web", live(""))];
        let deleting = stack("op9", StackAction::Delete, OpStatus::InProgress, &units);
        let events = deleted_stack_events(&t, &deleting);
        assert_eq!(
            ids(&events),
            [
                "group:s:g:c1:member_left:op9",
                "stack:s:op9:operation_completed"
            ]
        );
        assert_eq!(events[1].data["status"], "DELETE_COMPLETE");
        let complete = stack("op8", StackAction::Create, OpStatus::Complete, &units);
        assert_eq!(
            ids(&deleted_stack_events(&t, &complete)),
            ["group:s:g:c1:member_left:op8"]
        );
    }
}
