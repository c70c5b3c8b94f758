//! `flue` commands run end to end against the scripted fake gateway.

use clap::Parser;
use serde_json::json;

use super::*;
use flue_client::test_support::{deployment, deployment_with, fake};

async fn flue(gateway: &str, args: &[&str]) -> (Result<Outcome, CliError>, String) {
    let argv = ["flue", "--gateway", gateway]
        .into_iter()
        .chain(args.iter().copied());
    let cli = Cli::try_parse_from(argv).expect("arguments parse");
    let mut out = Vec::new();
    let result = run(cli, &mut out).await;
    (result, String::from_utf8(out).expect("utf-8 output"))
}

#[tokio::test]
async fn deploy_wait_prints_each_status_then_the_result() {
    let finished = json!({
        "outputs": {"url": "http://127.0.0.1:8080/"},
        "deploy_status_code": 0,
        "deploy_stdout": "wrote app.conf\n",
    });
    let gw = fake(vec![
        (202, deployment("QUEUED")),
        (200, deployment("QUEUED")),
        (200, deployment("IN_PROGRESS")),
        (200, deployment_with("COMPLETE", finished)),
    ])
    .await;
    let args = [
        "deploy", "--config", "c1", "--server", "web", "--input", "a=b", "--wait",
    ];
    let (result, out) = flue(&gw.url, &args).await;
    assert_eq!(result.expect("ran"), Outcome::Success);
    assert_eq!(
        out,
        "deployment d1 on web: QUEUED\n\
         deployment d1 on web: IN_PROGRESS\n\
         deployment d1 on web: COMPLETE\n  \
         status code: 0\n  \
         output url = http://127.0.0.1:8080/\n  \
         stdout:\n    \
         wrote app.conf\n"
    );
    assert_eq!(
        gw.seen.lock().expect("lock")[0],
        "POST /v1/deployments HTTP/1.1"
    );
}

#[tokio::test]
async fn a_failed_deployment_gives_its_own_outcome_and_json_prints_only_the_record() {
    let failed = json!({"status_reason": "hook exited with status 2"});
    let gw = fake(vec![
        (202, deployment("QUEUED")),
        (200, deployment_with("FAILED", failed)),
    ])
    .await;
    let args = [
        "deploy", "--config", "c1", "--server", "web", "--wait", "--json",
    ];
    let (result, out) = flue(&gw.url, &args).await;
    let outcome = result.expect("ran");
    assert_eq!(
        (outcome, outcome.exit_code()),
        (Outcome::DeploymentFailed, 1)
    );
    let record: serde_json::Value = serde_json::from_str(&out).expect("only JSON");
    assert_eq!(record["status"], "FAILED");
}

#[tokio::test]
async fn deployment_show_prints_one_output_raw_or_names_the_available_ones() {
    let outputs = json!({"outputs": {"address": "127.0.0.1:5432", "port": 5432}});
    let gw = fake(vec![
        (200, deployment_with("COMPLETE", outputs.clone())),
        (200, deployment_with("COMPLETE", outputs.clone())),
        (200, deployment_with("COMPLETE", outputs)),
    ])
    .await;
    let show = |name: &'static str| ["deployment", "show", "d1", "--output", name];
    let (result, out) = flue(&gw.url, &show("address")).await;
    result.expect("address");
    assert_eq!(out, "127.0.0.1:5432\n");
    let (result, out) = flue(&gw.url, &show("port")).await;
    result.expect("port");
    assert_eq!(out, "5432\n");
    let (result, out) = flue(&gw.url, &show("url")).await;
    let err = result.expect_err("no such output");
    assert_eq!(err.exit_code(), 1);
    assert_eq!(
        err.to_string(),
        "deployment d1 has no output \"url\" (available: address, port)"
    );
    assert!(out.is_empty());
}

#[tokio::test]
async fn api_errors_come_back_with_exit_code_2() {
    let body = json!({"error": {"code": "not_found", "message": "server \"nope\" not found"}});
    let gw = fake(vec![(404, body.to_string())]).await;
    let (result, _) = flue(&gw.url, &["server", "show", "nope"]).await;
    let err = result.expect_err("404");
    assert_eq!(err.exit_code(), 2);
    assert_eq!(
        error_message(&err),
        "error: gateway answered 404 not_found: server \"nope\" not found"
    );
}

#[tokio::test]
async fn register_env_prints_the_agent_environment() {
    let registration = json!({
        "server": {"id": "db", "tenant": "default", "name": "", "created_at": "2025-01-01T00:00:00Z"},
        "agent": {
            "nats_url": "nats://127.0.0.1:4222", "tenant": "default", "server_id": "db",
            "request_stream": "FLUE_REQ", "request_consumer": "req-7-default-db",
            "response_subject": "flue.default.resp.db", "inbox_prefix": "_INBOX_flue.default.db"
        }
    });
    let gw = fake(vec![(201, registration.to_string())]).await;
    let (result, out) = flue(&gw.url, &["server", "register", "db", "--env"]).await;
    result.expect("registered");
    assert_eq!(
        out,
        "FLUE_NATS_URL=nats://127.0.0.1:4222\nFLUE_TENANT=default\nFLUE_SERVER_ID=db\n"
    );
}

#[test]
fn stack_commands_submit_unless_local_and_the_old_submit_flag_is_still_accepted() {
    let parse = |args: &[&str]| Cli::try_parse_from(["flue"].iter().chain(args));
    for args in [
        &["stack", "delete", "s"][..],
        &["stack", "delete", "s", "--submit"],
        &["stack", "resume", "s", "--local"],
        &["stack", "action", "s", "db", "backup", "--local"],
        &["stack", "create", "s", "-t", "t.yaml", "--local"],
        &["stack", "operations", "s", "--limit", "5", "--json"],
    ] {
        parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    }
    let both = parse(&["stack", "delete", "s", "--local", "--submit"]).expect_err("conflict");
    assert!(both.to_string().contains("--local"), "{both}");
    let zero = parse(&["stack", "operations", "s", "--limit", "0"]).expect_err("limit 0");
    assert!(zero.to_string().contains("--limit"), "{zero}");
}
