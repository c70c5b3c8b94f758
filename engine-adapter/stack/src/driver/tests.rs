use std::collections::BTreeMap;
use std::time::Duration;

use flue_proto::{
    Action, ConfigId, Deployment, DeploymentId, InputMade, InputSource, OpStatus, OutputRead,
    ServerId, StackState, Unit,
};
use serde_json::json;
use tokio::time::Instant;

use super::execute::failure_reason;
use super::plan::{Step, StepKind, removal_step, rerun_step};
use super::schedule::{Batches, Gate};
use super::{INIT, STDERR_TAIL_BYTES};
use crate::units::Batch;
use flue_client::test_support;

/// A step of group `g` in batch `index`, pausing `pause` after the previous batch.
fn member(name: &str, index: usize, pause: Duration) -> Step {
    Step {
        key: format!("g/{name}"),
        after: Default::default(),
        batch: Some(("g".to_owned(), Batch { index, pause })),
        kind: StepKind::Skip,
    }
}

fn single(key: &str) -> Step {
    Step {
        key: key.to_owned(),
        after: Default::default(),
        batch: None,
        kind: StepKind::Skip,
    }
}

const PAUSE: Duration = Duration::from_secs(30);

#[test]
fn a_batch_waits_for_every_earlier_batch() {
    let a = member("a", 0, PAUSE);
    let b = member("b", 0, PAUSE);
    let c = member("c", 1, PAUSE);
    let d = member("d", 2, PAUSE);
    let x = single("x");
    let mut batches = Batches::new([&a, &b, &c, &d, &x].into_iter());
    assert_eq!(batches.gate(&a), Gate::Open);
    assert_eq!(batches.gate(&b), Gate::Open);
    assert_eq!(batches.gate(&c), Gate::Closed);
    assert_eq!(batches.gate(&d), Gate::Closed);
    assert_eq!(batches.gate(&x), Gate::Open);

    batches.finish(&a, false);
    assert_eq!(batches.gate(&c), Gate::Closed, "b is still running");
    batches.finish(&b, false);
    assert_eq!(batches.gate(&c), Gate::Open);
    assert_eq!(batches.gate(&d), Gate::Closed, "c is still running");
    batches.finish(&c, false);
    assert_eq!(batches.gate(&d), Gate::Open);
}

#[test]
fn the_pause_follows_only_a_batch_that_ran_something() {
    let a = member("a", 0, PAUSE);
    let b = member("b", 0, PAUSE);
    let c = member("c", 1, PAUSE);
    let d = member("d", 2, PAUSE);
    let mut batches = Batches::new([&a, &b, &c, &d].into_iter());
    let before = Instant::now();
    batches.finish(&a, false);
    batches.finish(&b, true);
    let after = Instant::now();
    let Gate::At(t) = batches.gate(&c) else {
        panic!("batch 1 pauses after batch 0 ran: {:?}", batches.gate(&c));
    };
    assert!(t >= before + PAUSE && t <= after + PAUSE);
    // Batch 1 ran nothing (its members were done before): batch 2 starts at once,
    // whatever batch 0 did.
    batches.finish(&c, false);
    assert_eq!(batches.gate(&d), Gate::Open);
}

#[test]
fn a_zero_pause_never_waits() {
    let a = member("a", 0, Duration::ZERO);
    let b = member("b", 1, Duration::ZERO);
    let mut batches = Batches::new([&a, &b].into_iter());
    batches.finish(&a, true);
    assert_eq!(batches.gate(&b), Gate::Open);
}

#[test]
fn a_pause_is_announced_once_per_batch() {
    let a = member("a", 0, PAUSE);
    let b = member("b", 1, PAUSE);
    let c = member("c", 2, PAUSE);
    let mut batches = Batches::new([&a, &b, &c].into_iter());
    assert!(batches.announce("g", 1));
    assert!(!batches.announce("g", 1));
    assert!(batches.announce("g", 2));
    assert!(!batches.announce("other", 1));
}

fn failed(extra: serde_json::Value) -> Deployment {
    let text = test_support::deployment_with("FAILED", extra);
    serde_json::from_str(&text).expect("a deployment record")
}

#[test]
fn a_failure_reason_names_the_unit_server_and_cause() {
    let d = failed(json!({"status_reason": "hook exited with 2"}));
    assert_eq!(
        failure_reason("web", &d),
        "web (CREATE on server web) failed: hook exited with 2"
    );
    let d = failed(json!({}));
    assert_eq!(
        failure_reason("web", &d),
        "web (CREATE on server web) failed: failed"
    );
}

#[test]
fn a_failure_reason_quotes_the_end_of_stderr() {
    let d = failed(json!({"status_reason": "boom", "deploy_stderr": "line 1\nline 2\n\n"}));
    assert_eq!(
        failure_reason("web", &d),
        "web (CREATE on server web) failed: boom\nstderr:\nline 1\nline 2"
    );
    let long = format!("{}{}", "x".repeat(100), "y".repeat(STDERR_TAIL_BYTES));
    let d = failed(json!({"status_reason": "boom", "deploy_stderr": long}));
    let reason = failure_reason("web", &d);
    let tail = format!("\nstderr:\n[…]{}", "y".repeat(STDERR_TAIL_BYTES));
    assert!(reason.ends_with(&tail), "{reason}");
    assert!(!reason.contains('x'));
}

#[test]
fn a_failure_reason_cuts_stderr_at_a_char_boundary() {
    // 2001 bytes: the cut at byte 1 would split the first "é".
    let stderr = format!("{}x", "é".repeat(STDERR_TAIL_BYTES / 2));
    assert_eq!(stderr.len(), STDERR_TAIL_BYTES + 1);
    let d = failed(json!({"deploy_stderr": stderr}));
    let reason = failure_reason("web", &d);
    let quoted = reason.split_once("\nstderr:\n[…]").expect("cut").1;
    assert_eq!(
        quoted,
        format!("{}x", "é".repeat(STDERR_TAIL_BYTES / 2 - 1))
    );
    // Three-byte characters: whatever the cut, the text stays whole.
    for pad in 0..3 {
        let stderr = format!("{}{}", "a".repeat(pad), "€".repeat(STDERR_TAIL_BYTES));
        let d = failed(json!({"deploy_stderr": stderr}));
        let reason = failure_reason("web", &d);
        let quoted = reason.split_once("\nstderr:\n[…]").expect("cut").1;
        assert!(quoted.len() <= STDERR_TAIL_BYTES);
        assert!(quoted.chars().all(|c| c == '€'), "{pad}");
    }
}

fn unit(actions: &[&str]) -> Unit {
    Unit {
        resource: "db".into(),
        member: None,
        server_id: ServerId::new("db1").expect("server id"),
        actions: actions.iter().map(|a| (*a).to_owned()).collect(),
        depends_on: Vec::new(),
        baseline: None,
        baseline_config: None,
        last: None,
        last_config: None,
        pending: None,
        current: None,
        op_id: None,
        action: INIT.to_owned(),
        status: OpStatus::Complete,
        status_reason: None,
        inputs_read: BTreeMap::new(),
    }
}

fn id(s: &str) -> DeploymentId {
    DeploymentId::new(s).expect("deployment id")
}

fn config(s: &str) -> ConfigId {
    ConfigId::new(s).expect("config id")
}

#[test]
fn a_removal_deletes_with_the_last_deployment_or_drops_the_unit() {
    let mut u = unit(&["CREATE", "DELETE"]);
    assert_eq!(removal_step(&u), StepKind::Drop, "never deployed");
    u.baseline = Some(id("d1"));
    u.baseline_config = Some(config("c1"));
    u.last = Some(id("d2"));
    u.last_config = Some(config("c2"));
    assert_eq!(
        removal_step(&u),
        StepKind::Reuse {
            action: Action::DELETE.to_owned(),
            config: config("c2"),
            inputs_from: id("d2"),
            removal: true,
        }
    );
    u.actions = vec!["CREATE".into(), "UPDATE".into()];
    assert_eq!(removal_step(&u), StepKind::Drop, "does not run DELETE");
}

#[test]
fn a_rerun_uses_the_completed_deployment_or_skips() {
    let mut u = unit(&["CREATE"]);
    u.last = Some(id("d2"));
    u.last_config = Some(config("c2"));
    assert_eq!(rerun_step(&u, "backup"), StepKind::Skip, "never completed");
    u.baseline = Some(id("d1"));
    u.baseline_config = Some(config("c1"));
    assert_eq!(
        rerun_step(&u, "backup"),
        StepKind::Reuse {
            action: "backup".to_owned(),
            config: config("c1"),
            inputs_from: id("d1"),
            removal: false,
        }
    );
}

#[test]
fn unit_reasons_keep_one_bounded_line() {
    use super::record::{MAX_UNIT_REASON, unit_reason};
    assert_eq!(unit_reason("a failed: x\nstderr:\nboom"), "a failed: x");
    let long = "é".repeat(MAX_UNIT_REASON);
    let cut = unit_reason(&long);
    assert!(
        cut.len() <= MAX_UNIT_REASON + '…'.len_utf8(),
        "{}",
        cut.len()
    );
    assert!(cut.ends_with('…'));
}

/// A completed unit whose inputs read `reads` (input name → unit), each as a value.
fn reading(reads: &[(&str, &str)]) -> Unit {
    let mut u = unit(&["CREATE", "UPDATE"]);
    u.baseline = Some(id("d1"));
    u.baseline_config = Some(config("c1"));
    u.action = Action::CREATE.to_owned();
    for (input, from) in reads {
        let read = OutputRead {
            unit: (*from).to_owned(),
            output: Some("out".to_owned()),
            deployment_id: id("d0"),
        };
        let made = InputMade::Output { path: Vec::new() };
        u.inputs_read.insert(
            (*input).to_owned(),
            InputSource {
                reads: vec![read],
                made,
            },
        );
    }
    u
}

#[test]
fn a_converge_follows_every_unit_reading_what_it_reruns_after_what_it_reads() {
    use super::plan::converge_steps;
    let mut state = StackState::default();
    state.units.insert("db".into(), reading(&[]));
    // web reads db, app reads web (and so db, through it); other reads nothing;
    // cache reads other only, so nothing of this converge reaches it.
    state
        .units
        .insert("web".into(), reading(&[("password", "db")]));
    state.units.insert("app".into(), reading(&[("url", "web")]));
    state.units.insert("other".into(), reading(&[]));
    state
        .units
        .insert("cache".into(), reading(&[("x", "other")]));
    let by_key = |steps: Vec<Step>| -> BTreeMap<String, Step> {
        steps.into_iter().map(|s| (s.key.clone(), s)).collect()
    };
    let after = |keys: &[&str]| keys.iter().map(|k| (*k).to_owned()).collect();

    let steps = by_key(converge_steps(&state, &["db".to_owned()], false));
    assert_eq!(steps["db"].kind, rerun_step(&state.units["db"], "CREATE"));
    assert_eq!(steps["web"].kind, StepKind::Follow { drifted: false });
    assert_eq!(steps["web"].after, after(&["db"]), "after what it reads");
    assert_eq!(steps["app"].kind, StepKind::Follow { drifted: false });
    assert_eq!(steps["app"].after, after(&["web"]));
    assert_eq!(steps["other"].kind, StepKind::Skip);
    assert_eq!(
        steps["cache"].kind,
        StepKind::Skip,
        "reads nothing that runs"
    );

    // A drifted unit that reads others runs with its inputs taken again, drifted.
    let steps = by_key(converge_steps(&state, &["web".to_owned()], false));
    assert_eq!(steps["db"].kind, StepKind::Skip);
    assert_eq!(steps["web"].kind, StepKind::Follow { drifted: true });
    assert_eq!(steps["app"].kind, StepKind::Follow { drifted: false });

    // --no-follow: the readers are only reported; the drifted units run as before.
    let steps = by_key(converge_steps(
        &state,
        &["db".to_owned(), "web".to_owned()],
        true,
    ));
    assert_eq!(steps["web"].kind, rerun_step(&state.units["web"], "CREATE"));
    assert_eq!(steps["app"].kind, StepKind::ReportInputs);
    assert_eq!(steps["cache"].kind, StepKind::Skip);

    // A reader that never completed has nothing to re-run.
    state.units.get_mut("app").expect("app").baseline = None;
    let steps = by_key(converge_steps(&state, &["db".to_owned()], false));
    assert_eq!(steps["app"].kind, StepKind::Skip);
}
