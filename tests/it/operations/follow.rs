//! The CLI submits and follows; it does not drive: killing `flue` stops nothing, the same
//! command run again follows the operation still running, and `flue stack operations`
//! (`GET /v1/stacks/{id}/operations`) lists a stack's operations newest first, page by page.

use flue_proto::operation::{OperationKind, OperationState, StackOperation};
use flue_tests::Flue;

use crate::stack::{WAITING, flue, flue_in_background, kill_cli_once, lines, put_data};

/// `GET /v1/stacks/{stack}/operations?QUERY`: status, next cursor, body.
async fn list(env: &Flue, stack: &str, query: &str) -> (u16, Option<String>, serde_json::Value) {
    let resp = env
        .gateway
        .http()
        .get(format!(
            "{}/v1/stacks/{stack}/operations?{query}",
            env.gateway.url()
        ))
        .send()
        .await
        .expect("gateway answers");
    let status = resp.status().as_u16();
    let next = resp
        .headers()
        .get(flue_proto::NEXT_CURSOR_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, next, resp.json().await.expect("a JSON body"))
}

fn operations(body: serde_json::Value) -> Vec<StackOperation> {
    serde_json::from_value(body).expect("a list of operations")
}

#[tokio::test]
async fn killing_the_cli_stops_nothing_and_the_same_command_again_follows_the_operation() {
    let env = Flue::start().await;
    env.register("s1").await;
    let _s1 = env.agent("s1", &[]).await;
    let record = env.path("record.log");
    let t = env.path("t.yaml");
    std::fs::write(&t, WAITING).expect("template");
    let t = t.display().to_string();
    let p = format!("record={}", record.display());
    let create = ["stack", "create", "k", "-t", &t, "-P", &p];
    kill_cli_once(&env, &create, &record, "start a").await;

    // The worker goes on without the CLI.
    let (status, _, body) = list(&env, "k", "").await;
    assert_eq!(status, 200, "{body}");
    let ops = operations(body);
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0].operation, OperationKind::Create);
    assert_eq!(ops[0].state, OperationState::Running, "{ops:?}");
    let shown = flue(&env, &["stack", "operations", "k"]).await;
    assert_eq!(shown.code, 0, "{shown}");
    assert!(shown.stdout.contains(&ops[0].id), "{shown}");
    assert!(shown.stdout.contains(" create   running "), "{shown}");

    // Another kind of operation is refused, naming the one that runs.
    let other = flue(&env, &["stack", "delete", "k"]).await;
    assert_eq!(other.code, 2, "{other}");
    assert!(other.stderr.contains(&ops[0].id), "{other}");

    // The same command again follows it to its end, from its first line.
    let again = flue_in_background(&env, &create);
    put_data(&env, "k", "go", "now").await;
    let again = again.await.expect("join");
    assert_eq!(again.code, 0, "{again}");
    assert!(
        again.stdout.contains(&format!(
            "stack k: create already running as operation {}: following it",
            ops[0].id
        )),
        "{again}"
    );
    assert!(again.stdout.contains("stack k: CREATE_COMPLETE"), "{again}");
    assert_eq!(lines(&record), ["start a", "end a"], "{again}");

    let deleted = flue(&env, &["stack", "delete", "k"]).await;
    assert_eq!(deleted.code, 0, "{deleted}");

    // Newest first, page by page; the cursor of the last page is absent.
    let (status, next, body) = list(&env, "k", "limit=1").await;
    assert_eq!(status, 200, "{body}");
    let first = operations(body);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].operation, OperationKind::Delete);
    assert_eq!(first[0].state, OperationState::Succeeded);
    let next = next.expect("a cursor to the second page");
    let (status, last, body) = list(&env, "k", &format!("limit=1&cursor={next}")).await;
    assert_eq!(status, 200, "{body}");
    let second = operations(body);
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].id, ops[0].id);
    assert_eq!(second[0].state, OperationState::Succeeded);
    assert_eq!(last, None);

    // Bad paging is a 400 naming the parameter.
    for (query, named) in [("limit=0", "limit"), ("cursor=zz", "cursor")] {
        let (status, _, body) = list(&env, "k", query).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.to_string().contains(named), "{query}: {body}");
    }
}

#[tokio::test]
async fn with_no_engine_worker_the_cli_says_the_operation_waits_and_local_runs_the_stack() {
    use tokio::io::AsyncBufReadExt;

    let env = Flue::start_with(&["--engine-workers", "0"]).await;
    env.register("s1").await;
    let _s1 = env.agent("s1", &[]).await;
    let record = env.path("record.log");
    let t = env.path("t.yaml");
    std::fs::write(&t, WAITING).expect("template");
    let t = t.display().to_string();
    let p = format!("record={}", record.display());
    let create = ["stack", "create", "q", "-t", &t, "-P", &p];
    let mut waiting = tokio::process::Command::new(flue_tests::bin("flue"))
        .env("FLUE_TOKEN", env.gateway.cli_token(&create))
        .arg("--gateway")
        .arg(env.gateway.url())
        .args(create)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn flue");
    let mut lines_out = tokio::io::BufReader::new(waiting.stdout.take().expect("stdout")).lines();
    let note = tokio::time::timeout(flue_tests::WAIT, async {
        while let Some(line) = lines_out.next_line().await.expect("read stdout") {
            if line.starts_with("note: operation") {
                return line;
            }
        }
        panic!("flue ended without the note");
    })
    .await
    .expect("the note within the bound");
    assert!(note.contains("no engine worker has taken it"), "{note}");
    assert!(note.contains("--local"), "{note}");
    waiting.kill().await.expect("kill the waiting CLI");
    assert!(lines(&record).is_empty(), "nothing ran");

    put_data(&env, "q", "go", "now").await;
    let local = flue(
        &env,
        &["stack", "create", "q", "-t", &t, "-P", &p, "--local"],
    )
    .await;
    assert_eq!(local.code, 0, "{local}");
    assert!(local.stdout.contains("stack q: CREATE_COMPLETE"), "{local}");
    assert_eq!(lines(&record), ["start a", "end a"]);
}
