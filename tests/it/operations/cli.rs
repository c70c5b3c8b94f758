//! `flue stack …`: the CLI hands the operation to the engine workers and follows it,
//! printing what the in-process driver (`--local`) prints, with the same exit codes.

use std::path::Path;

use crate::stack::{Run, flue};
use flue_tests::Flue;

use super::{GROUP_TEMPLATE, RECORD_SH, SECRET, runs};

/// The printed lines with stack names and deployment ids taken out, sorted (members of a
/// group run in parallel, so their lines come in either order). `IN_PROGRESS` lines are left
/// out: both drivers print the states they observe, and a hook that finishes between two
/// observations goes from QUEUED straight to COMPLETE in either of them.
fn shape(run: &Run, stack: &str) -> Vec<String> {
    let mut lines: Vec<String> = run
        .stdout
        .lines()
        .filter(|l| !l.contains(" IN_PROGRESS "))
        .map(|l| {
            let l = l.replace(stack, "STACK");
            match l.find("deployment ") {
                Some(at) => format!("{}deployment ID", &l[..at]),
                None => l,
            }
        })
        .collect();
    lines.sort();
    lines
}

fn write_template(dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("scripts")).expect("template dir");
    std::fs::write(dir.join("scripts/record.sh"), RECORD_SH).expect("hook file");
    let path = dir.join("group.yaml");
    std::fs::write(&path, GROUP_TEMPLATE).expect("template");
    path
}

#[tokio::test]
async fn a_submitted_stack_operation_prints_what_the_local_driver_prints() {
    let env = Flue::start().await;
    env.register("web1").await;
    let _web1 = env.agent("web1", &[]).await;
    let template = write_template(&env.path("tpl"));
    let template = template.display().to_string();
    let log = env.path("hooks.log").display().to_string();
    let log_param = format!("log={log}");
    let secret = format!("secret={SECRET}");
    let create = |name: &'static str, local: bool| {
        let mut args = vec![
            "stack", "create", name, "-t", &template, "-P", "count=2", "-P", &log_param, "-P",
            &secret,
        ];
        if local {
            args.push("--local");
        }
        args
    };

    let local = flue(&env, &create("here", true)).await;
    assert_eq!(local.code, 0, "{local}");
    let submitted = flue(&env, &create("there", false)).await;
    assert_eq!(submitted.code, 0, "{submitted}");
    assert_eq!(
        shape(&submitted, "there"),
        shape(&local, "here"),
        "{local}\n{submitted}"
    );
    assert!(
        submitted.stdout.contains("stack there: CREATE_COMPLETE"),
        "{submitted}"
    );
    assert_eq!(runs(Path::new(&log), "CREATE"), 4);

    let update = flue(
        &env,
        &[
            "stack", "update", "there", "-t", &template, "-P", "count=3", "-P", &secret,
        ],
    )
    .await;
    assert_eq!(update.code, 0, "{update}");
    assert!(update.stdout.contains("unchanged, not run"), "{update}");
    assert_eq!(runs(Path::new(&log), "CREATE"), 5);

    // A failing action ends the same way as locally: exit 1 is for a FAILED stack, the
    // refusal of an unknown action is an error.
    let refused = flue(&env, &["stack", "action", "there", "workers", "nope"]).await;
    let refused_here = flue(
        &env,
        &["stack", "action", "here", "workers", "nope", "--local"],
    )
    .await;
    assert_eq!(refused.code, refused_here.code, "{refused}\n{refused_here}");
    assert_ne!(refused.code, 0, "{refused}");

    // The old spelling still works.
    let deleted = flue(&env, &["stack", "delete", "there", "--submit"]).await;
    assert_eq!(deleted.code, 0, "{deleted}");
    assert!(
        deleted.stdout.contains("stack there: DELETE_COMPLETE"),
        "{deleted}"
    );
    assert!(!deleted.stdout.contains(SECRET) && !update.stdout.contains(SECRET));
}
