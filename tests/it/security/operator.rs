//! Operator mode, end to end: the gateway reaches the broker as its tenants' own users,
//! agents as the users their registration minted; revocation at rotation and
//! deregistration; a gateway without broker keys refuses to start.

use std::process::Stdio;

use super::flue_cli;
use super::tenants::post_tenant;
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
    let flue = Flue::start_dev_broker(&[]).await;
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

#[tokio::test]
async fn two_tenants_on_one_gateway_each_run_a_deployment_and_neither_reaches_the_other() {
    use flue_proto::auth::Role;
    use flue_proto::{CreateTenant, RegisterServer, TenantId};
    use flue_tests::{Agent, Tokens};

    // Tenant "default" exists from `flue-gateway init`; "acme" is created through the
    // API while the gateway runs, and is served at once.
    let flue = Flue::start_operator(&[]).await;
    let acme = TenantId::new("acme").expect("id");
    let created = flue
        .gateway
        .client_as(Role::Operator)
        .create_tenant(&CreateTenant {
            id: acme.clone(),
            name: "Acme".to_owned(),
        })
        .await
        .expect("the operator creates a tenant");
    assert_eq!(created.id, acme);
    let acme_tokens = Tokens::for_tenant(&flue.gateway.state_dir(), &acme);
    let acme_as = |role: Role| {
        flue_client::Client::new(flue.gateway.url())
            .expect("client")
            .with_token(acme_tokens.get(role))
    };

    // Tenant default: web1 runs a deployment.
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    flue.script_config(
        "c1",
        "echo -n a > $heat_outputs_path.result",
        &[],
        &["result"],
    )
    .await;
    let a = flue.deploy("c1", "web1", &[]).await;
    assert_eq!(
        flue.finished(&a.id).await.status,
        DeploymentStatus::Complete
    );

    // Tenant acme: b1 runs one too, its agent authenticated as acme's user.
    let registration = acme_as(Role::Admin)
        .register_server(&RegisterServer {
            transport: Default::default(),
            id: ServerId::new("b1").expect("id"),
            name: String::new(),
        })
        .await
        .expect("acme registers b1");
    let b_creds = flue.path("b1.creds");
    std::fs::write(&b_creds, registration.credentials.expect("credentials")).expect("write");
    let b_creds_text = b_creds.display().to_string();
    let b1 = Agent::spawn_with(
        &flue.nats.url(),
        "b1",
        &flue.path("agent-b1"),
        &[],
        &["--creds", &b_creds_text, "--tenant", "acme"],
    );
    b1.ready().await;
    let spec: flue_proto::ConfigSpec = serde_json::from_value(serde_json::json!({
        "id": "c1", "group": "script", "config": "echo -n b > $heat_outputs_path.result",
        "outputs": [{"name": "result"}],
    }))
    .expect("spec");
    acme_as(Role::Engine)
        .create_config(&spec)
        .await
        .expect("acme config");
    let b = acme_as(Role::Engine)
        .create_deployment(&flue_proto::CreateDeployment::new(
            "c1".parse().expect("id"),
            "b1".parse().expect("id"),
        ))
        .await
        .expect("acme deployment");
    let b_done = acme_as(Role::Engine)
        .wait_deployment(&b.id, None, std::time::Duration::from_secs(30))
        .await
        .expect("long poll");
    let b_done = if b_done.status.is_terminal() {
        b_done
    } else {
        acme_as(Role::Engine)
            .wait_deployment(
                &b.id,
                Some(b_done.status),
                std::time::Duration::from_secs(30),
            )
            .await
            .expect("long poll")
    };
    assert_eq!(b_done.status, DeploymentStatus::Complete, "{b_done:?}");
    assert_eq!(b_done.outputs["result"], "b");

    // Over the API, each tenant sees only its own objects.
    let servers = |c: flue_client::Client| async move {
        c.list_servers()
            .await
            .expect("listed")
            .into_iter()
            .map(|s| s.id.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(servers(flue.admin_client()).await, ["web1"]);
    assert_eq!(servers(acme_as(Role::Viewer)).await, ["b1"]);
    let other = acme_as(Role::Viewer).get_deployment(&a.id).await;
    assert!(
        other.is_err_and(|e| e.to_string().contains("404")),
        "acme cannot see default's deployment"
    );

    // At the broker: even a user with every right in default's account finds none of
    // acme's requests, and default's events account holds none of acme's events.
    for (js, stream) in [
        (
            async_nats::jetstream::new(flue.nats.client().await),
            subject::REQUEST_STREAM,
        ),
        (
            async_nats::jetstream::new(flue.nats.events_client().await),
            flue_proto::event::EVENT_STREAM,
        ),
    ] {
        let mut stream = js.get_stream(stream).await.expect("stream");
        let own = subjects(&mut stream, "flue.default.>").await;
        assert!(!own.is_empty(), "default's own messages are there");
        let theirs = subjects(&mut stream, "flue.acme.>").await;
        assert!(
            theirs.is_empty(),
            "acme's messages in default's account: {theirs:?}"
        );
    }

    // default's agent credentials cannot subscribe to acme's subjects.
    let web1 = kept_creds(&flue, "web1");
    let errors = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = errors.clone();
    let client = async_nats::ConnectOptions::with_credentials(&web1.user.to_text())
        .expect("creds")
        .custom_inbox_prefix(subject::agent_inbox_prefix(
            &TenantId::new("default").expect("id"),
            &ServerId::new("web1").expect("id"),
        ))
        .event_callback(move |e| {
            let sink = sink.clone();
            async move { sink.lock().expect("lock").push(e.to_string()) }
        })
        .connect(flue.nats.url())
        .await
        .expect("web1's user connects");
    let _sub = client.subscribe("flue.acme.>").await.expect("sent");
    client.flush().await.expect("flush");
    let refused = async {
        loop {
            if errors
                .lock()
                .expect("lock")
                .iter()
                .any(|e| e.to_lowercase().contains("permissions violation"))
            {
                return;
            }
            client.flush().await.expect("flush");
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(WAIT, refused)
        .await
        .expect("the broker refuses web1 a subscription to acme's subjects");
}

/// The subjects of `stream`'s messages matching `filter`.
async fn subjects(stream: &mut async_nats::jetstream::stream::Stream, filter: &str) -> Vec<String> {
    use futures_util::TryStreamExt as _;
    stream
        .info_with_subjects(filter)
        .await
        .expect("stream info")
        .map_ok(|(subject, _)| subject)
        .try_collect()
        .await
        .expect("subjects")
}

#[tokio::test(flavor = "multi_thread")]
async fn listener_credentials_from_the_cli_let_the_python_listener_replay_its_tenants_events() {
    use std::os::unix::fs::PermissionsExt as _;

    let flue = Flue::start_operator(&[]).await;
    flue.register("web1").await;
    let file = flue.path("listener.creds");
    let path = file.display().to_string();
    let args = ["events", "credentials", "--out", path.as_str()];
    let out = flue_cli(&flue, &args).await;
    assert!(out.status.success(), "{out:?}");
    let consumer = super::consumer_names(&out)[0].clone();
    let mode = std::fs::metadata(&file)
        .expect("written")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let first = std::fs::read_to_string(&file).expect("read");
    assert!(first.contains("BEGIN NATS USER JWT"), "a .creds file");
    // Never over a file without --force.
    let again = flue_cli(&flue, &args).await;
    assert!(!again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("--force"),
        "{again:?}"
    );
    assert_eq!(std::fs::read_to_string(&file).expect("read"), first);

    let python = flue_tests::repo_root().join(".venv/bin/python");
    let listener = tokio::process::Command::new(python)
        .arg(flue_tests::repo_root().join("examples/listeners/flue_events.py"))
        .args([
            flue.nats.url().as_str(),
            "default",
            "--seq",
            "1",
            "--idle",
            "1",
            "--domain",
            subject::JETSTREAM_DOMAIN,
            "--creds",
            path.as_str(),
            "--consumer",
            consumer.as_str(),
        ])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(WAIT, listener)
        .await
        .expect("in time")
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "listener failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("io.flue.server.registered"),
        "the registration event, replayed: {stdout}"
    );
}

#[tokio::test]
async fn a_broker_that_lost_its_resolver_directory_learns_every_account_again_from_the_gateway() {
    use flue_proto::auth::Role;
    use flue_proto::{CreateTenant, TenantId};
    use flue_tests::Tokens;

    let mut flue = Flue::start_operator(&[]).await;
    // Created while serving: its accounts reach the broker only by push (the broker's
    // configuration preloads the tenants that existed at `init`).
    let acme = TenantId::new("acme").expect("id");
    flue.gateway
        .client_as(Role::Operator)
        .create_tenant(&CreateTenant {
            id: acme.clone(),
            name: String::new(),
        })
        .await
        .expect("created");
    let acme_admin = flue_client::Client::new(flue.gateway.url())
        .expect("client")
        .with_token(Tokens::for_tenant(&flue.gateway.state_dir(), &acme).get(Role::Admin));
    acme_admin.list_servers().await.expect("acme is served");

    flue.nats.kill().await;
    let resolver = flue.gateway.state_dir().join("broker/jwt");
    let pushed = std::fs::read_dir(&resolver).expect("resolver dir").count();
    assert!(pushed > 0, "the broker kept pushed accounts there");
    std::fs::remove_dir_all(&resolver).expect("resolver dir removed");
    std::fs::create_dir(&resolver).expect("resolver dir made again");
    flue.nats.start_again().await;

    // The gateway's system connection comes back and pushes every account: acme's
    // gateway users are admitted again and its calls are served.
    flue.gateway
        .logs()
        .wait_for("broker accounts pushed again after a reconnection", WAIT)
        .await;
    let served = async {
        loop {
            if acme_admin.list_servers().await.is_ok() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await; // retry backoff
        }
    };
    tokio::time::timeout(WAIT, served)
        .await
        .expect("acme is served again");
    let server = flue_proto::RegisterServer {
        transport: Default::default(),
        id: ServerId::new("b1").expect("id"),
        name: String::new(),
    };
    acme_admin
        .register_server(&server)
        .await
        .expect("acme registers a server after the broker came back");
}

/// Waits until `GET /readyz` answers 200 (every tenant runtime connected).
async fn ready(flue: &Flue) {
    let poll = async {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
        loop {
            tick.tick().await;
            let url = format!("{}/readyz", flue.gateway.url());
            if let Ok(resp) = flue.gateway.http().get(url).send().await
                && resp.status() == reqwest::StatusCode::OK
            {
                return;
            }
        }
    };
    tokio::time::timeout(WAIT, poll)
        .await
        .expect("the gateway becomes ready");
}

/// The tenants the gateway serves, by id.
async fn served(flue: &Flue) -> Vec<String> {
    let tenants: Vec<flue_proto::Tenant> = flue
        .gateway
        .http()
        .get(format!("{}/v1/tenants", flue.gateway.url()))
        .send()
        .await
        .expect("the gateway answers")
        .json()
        .await
        .expect("the tenants");
    tenants.into_iter().map(|t| t.id.to_string()).collect()
}

/// Sets the broker's JetStream file store limit (`max_file_store`), restarts it with it
/// and waits until the gateway is ready again.
async fn limit_file_store(flue: &mut Flue, limit: &str) {
    flue.limit_file_store(limit).await;
    ready(flue).await;
}

#[tokio::test]
async fn a_tenant_the_broker_has_no_storage_for_is_a_507_and_never_keeps_the_gateway_from_starting()
{
    // Each tenant reserves its event stream's size (1 GiB) of the broker's JetStream
    // storage: 1.5 GiB holds the default tenant only.
    let mut flue = Flue::start_operator(&[]).await;
    limit_file_store(&mut flue, "1536MB").await;

    let (status, body) = post_tenant(&flue.gateway, r#"{"id": "second"}"#).await;
    assert_eq!(status, 507, "{body}");
    assert_eq!(body["error"]["code"], "insufficient_storage", "{body}");
    let message = body["error"]["message"].as_str().expect("a message");
    for said in ["second", "--events-max-bytes", "max_file_store"] {
        assert!(message.contains(said), "{message}");
    }
    assert_eq!(served(&flue).await, ["default"]);

    // The refused tenant does not keep the gateway from starting again: it serves the
    // default tenant, says why the other is left out, and refuses it the same way.
    flue.gateway.restart().await;
    ready(&flue).await;
    assert_eq!(served(&flue).await, ["default"]);
    flue.gateway
        .logs()
        .wait_for("a tenant whose creation failed still cannot start", WAIT)
        .await;
    let (status, body) = post_tenant(&flue.gateway, r#"{"id": "second"}"#).await;
    assert_eq!(status, 507, "{body}");

    // Given room, the same request creates it, and it is served after a restart too.
    limit_file_store(&mut flue, "8GB").await;
    let (status, body) = post_tenant(&flue.gateway, r#"{"id": "second"}"#).await;
    assert_eq!(status, 201, "{body}");
    flue.gateway.restart().await;
    ready(&flue).await;
    assert_eq!(served(&flue).await, ["default", "second"]);
}

/// A token id names its tenant: an admin revoking another tenant's token (or an id no
/// gateway minted) is told no such token exists, and the token keeps working; its own
/// admin revokes it.
#[tokio::test]
async fn an_admin_cannot_revoke_another_tenants_token_and_is_told_none_has_that_id() {
    use flue_proto::auth::Role;
    use serde_json::{Value, json};

    let flue = Flue::start_operator(&[]).await;
    let acme_admin = flue.create_tenant("acme").await.get(Role::Admin).to_owned();
    let default_admin = flue.gateway.tokens().get(Role::Admin).to_owned();
    let url = flue.gateway.url();
    let http = reqwest::Client::new();
    let minted: Value = http
        .post(format!("{url}/v1/tokens"))
        .bearer_auth(&acme_admin)
        .json(&json!({"role": "viewer", "ttl_secs": 600, "name": "acme-dashboard"}))
        .send()
        .await
        .expect("mint")
        .json()
        .await
        .expect("minted token");
    let (id, token) = (
        minted["id"].as_str().expect("id"),
        minted["token"].as_str().expect("token"),
    );
    let servers = |bearer: &str| {
        http.get(format!("{url}/v1/servers"))
            .bearer_auth(bearer.to_owned())
            .send()
    };
    let revoke = |bearer: &str, id: &str| {
        http.delete(format!("{url}/v1/tokens/{id}"))
            .bearer_auth(bearer.to_owned())
            .send()
    };

    for (bearer, id) in [
        (&default_admin, id),
        (&default_admin, "f10123456789abcdef0123456789abcdef"),
        (&acme_admin, "nobody-minted-this"),
    ] {
        let answer = revoke(bearer, id).await.expect("revoke");
        assert_eq!(answer.status(), 404, "{id}");
        let body: Value = answer.json().await.expect("error body");
        assert_eq!(body["error"]["code"], "not_found", "{body}");
    }
    assert_eq!(servers(token).await.expect("read").status(), 200);

    assert_eq!(revoke(&acme_admin, id).await.expect("revoke").status(), 204);
    assert_eq!(servers(token).await.expect("read").status(), 401);
}
