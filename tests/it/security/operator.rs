//! Operator mode, end to end: the gateway reaches the broker as its tenants' own users,
//! agents as the users their registration minted; revocation at rotation and
//! deregistration; a gateway without broker keys refuses to start.

use std::process::Stdio;

use flue_proto::DeploymentStatus;
use flue_proto::creds::AgentCredentials;
use flue_proto::{ServerId, subject};
use flue_tests::{Flue, WAIT, bin};

/// The kept credentials of `server`.
fn kept_creds(flue: &Flue, server: &str) -> AgentCredentials {
    let text = std::fs::read_to_string(flue.creds_path(server)).expect("kept credentials");
    AgentCredentials::parse(&text).expect("a credentials file")
}

/// Connects to `flue`'s broker as the broker user `creds` hold; the broker's refusal.
async fn connect_as(flue: &Flue, creds: &AgentCredentials) -> Result<async_nats::Client, String> {
    async_nats::ConnectOptions::with_credentials(&creds.user.to_text())
        .expect("credentials parse")
        .max_reconnects(Some(1))
        .connect(flue.nats.url())
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_gateway_without_broker_keys_refuses_to_start_and_says_to_run_init() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let out = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(bin("flue-gateway"))
            .args([
                "--listen",
                "127.0.0.1:0",
                "--nats-url",
                "nats://127.0.0.1:1",
            ])
            .arg("--state-dir")
            .arg(&state)
            .env("NO_COLOR", "1")
            .env_remove("FLUE_INSECURE_DEV_BROKER")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the gateway exits")
    .expect("gateway output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let init = format!("flue-gateway init --state-dir {}", state.display());
    assert!(stderr.contains(&init), "{stderr}");
    assert!(stderr.contains("--insecure-dev-broker"), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).is_empty(),
        "it never said it was listening"
    );
}

#[tokio::test]
async fn in_operator_mode_an_agent_authenticates_as_its_own_broker_user_and_runs_a_deployment_to_complete()
 {
    let flue = Flue::start_operator(&[]).await;
    flue.register("web1").await;
    let creds = kept_creds(&flue, "web1");
    assert!(!creds.user.jwt.is_empty(), "the registration minted a user");
    assert_eq!(
        creds.settings.js_domain.as_deref(),
        Some(subject::JETSTREAM_DOMAIN)
    );
    let agent = flue.agent("web1", &[]).await;
    flue.script_config(
        "c1",
        "echo -n done > $heat_outputs_path.result",
        &[],
        &["result"],
    )
    .await;
    let queued = flue.deploy("c1", "web1", &[]).await;
    let done = flue.finished(&queued.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.outputs["result"], "done");
    assert!(
        !agent.logs().lines().iter().any(|l| l.contains("INSECURE")),
        "no development flag was needed"
    );
}

#[tokio::test]
async fn rotation_and_deregistration_revoke_the_agents_broker_user_at_the_broker() {
    let flue = Flue::start_operator(&[]).await;
    flue.register("web1").await;
    let first = kept_creds(&flue, "web1");
    let agent = flue.agent("web1", &[]).await;
    let before = connect_as(&flue, &first)
        .await
        .expect("the current credentials connect");

    let id = ServerId::new("web1").expect("id");
    let rotated = flue
        .admin_client()
        .rotate_server_credentials(&id)
        .await
        .expect("rotated");
    let second =
        AgentCredentials::parse(&rotated.credentials.expect("new credentials")).expect("creds");
    // The broker closes the running agent's connection and refuses the old user.
    agent
        .logs()
        .wait_for("disconnected from the broker", WAIT)
        .await;
    let refused = connect_as(&flue, &first)
        .await
        .expect_err("the old user is revoked");
    assert!(
        refused.to_lowercase().contains("authorization"),
        "{refused}"
    );
    drop(before);
    let current = connect_as(&flue, &second)
        .await
        .expect("the new credentials connect");
    drop(current);

    let gone = flue
        .http()
        .delete(format!("{}/v1/servers/web1", flue.gateway.url()))
        .send()
        .await
        .expect("deregistration sent");
    assert_eq!(gone.status(), 204, "deregistered");
    let refused = connect_as(&flue, &second)
        .await
        .expect_err("a deregistered server's user is revoked");
    assert!(
        refused.to_lowercase().contains("authorization"),
        "{refused}"
    );
}

#[tokio::test]
async fn an_agent_refuses_credentials_without_a_broker_user_unless_given_the_dev_broker_flag() {
    // A gateway on the anonymous development broker mints no broker user.
    let flue = Flue::start().await;
    flue.register("web1").await;
    assert!(kept_creds(&flue, "web1").user.jwt.is_empty());
    let creds = flue.creds_path("web1");
    let out = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(bin("flue-agent"))
            .args(["run", "--server-id", "web1", "--nats-url", &flue.nats.url()])
            .arg("--creds")
            .arg(&creds)
            .arg("--state-dir")
            .arg(flue.path("agent-web1"))
            .env("NO_COLOR", "1")
            .env_remove("FLUE_INSECURE_DEV_BROKER")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the agent exits")
    .expect("agent output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("holds no broker user") && stderr.contains("--insecure-dev-broker"),
        "{stderr}"
    );
    // With the flag (the harness gives it for such a file) it runs, and says it is insecure.
    let agent = flue.agent("web1", &[]).await;
    agent
        .logs()
        .wait_for("INSECURE: --insecure-dev-broker", WAIT)
        .await;
}
