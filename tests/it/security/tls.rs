//! TLS everywhere a connection crosses a network: the gateway's API over HTTPS, the
//! gateway's and the agents' broker connections over TLS, each verified against the
//! test's own CA; and what is refused: clients without the CA, plain HTTP on the HTTPS
//! port, handshakes that never finish, plaintext where TLS was asked for.

use std::process::Stdio;

use flue_proto::{DeploymentStatus, ErrorBody, HTTPS_REQUIRED, RegisterServer, ServerId};
use flue_tests::{Flue, Gateway, Nats, TestCa, WAIT, bin};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// `host:port` of a base URL.
fn authority(url: &str) -> &str {
    url.split_once("://")
        .map_or(url, |(_, rest)| rest)
        .trim_end_matches('/')
}

/// Runs the real `flue-gateway` with `args` until it exits (bounded); its exit success
/// and its stderr. It gets a state dir of its own (never the system's default) and, as
/// these tests are about TLS to an anonymous broker, `--insecure-dev-broker`.
pub(super) async fn gateway_exit(args: &[&str]) -> (bool, String) {
    let state = tempfile::tempdir().expect("tempdir");
    let child = tokio::process::Command::new(bin("flue-gateway"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--insecure-dev-broker",
            "--state-dir",
        ])
        // A directory the gateway makes itself, so with its own private mode.
        .arg(state.path().join("gateway"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn flue-gateway");
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("the gateway exits")
        .expect("gateway output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_deployment_runs_end_to_end_over_https_and_a_tls_only_broker() {
    let flue = Flue::start_tls(&[]).await;
    assert!(
        flue.gateway.url().starts_with("https://"),
        "{}",
        flue.gateway.url()
    );
    assert!(flue.nats.url().starts_with("tls://"), "{}", flue.nats.url());
    flue.register("s1").await;
    let _agent = flue.agent("s1", &[]).await;
    flue.script_config(
        "c1",
        "#!/bin/sh\necho \"over tls $greeting\" > \"$heat_outputs_path.said\"\n",
        &["greeting"],
        &["said"],
    )
    .await;
    let d = flue.deploy("c1", "s1", &[("greeting", "hello")]).await;
    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.outputs["said"], "over tls hello\n");
}

#[tokio::test]
async fn a_client_without_the_gateway_ca_is_refused_and_changes_nothing() {
    let flue = Flue::start_tls(&[]).await;
    // The system's roots do not include the test CA.
    let untrusting = flue_client::Client::new(flue.gateway.url()).expect("client");
    let register = RegisterServer {
        transport: Default::default(),
        id: ServerId::new("intruder").expect("id"),
        name: String::new(),
    };
    let refused = untrusting.register_server(&register).await;
    assert!(
        refused.is_err(),
        "registered without trusting the CA: {refused:?}"
    );
    let raw = reqwest::Client::new()
        .get(format!("{}/livez", flue.gateway.url()))
        .send()
        .await;
    assert!(raw.is_err(), "{raw:?}");
    // The same call from a client that trusts the CA shows the first never arrived.
    let servers = flue.client().list_servers().await.expect("list over HTTPS");
    assert!(servers.is_empty(), "{servers:?}");
}

#[tokio::test]
async fn plain_http_to_the_https_port_is_answered_400_https_required() {
    let flue = Flue::start_tls(&[]).await;
    let mut tcp = TcpStream::connect(authority(flue.gateway.url()))
        .await
        .expect("connect");
    tcp.write_all(b"GET /livez HTTP/1.1\r\nhost: flue\r\n\r\n")
        .await
        .expect("send");
    let mut answer = String::new();
    tokio::time::timeout(WAIT, tcp.read_to_string(&mut answer))
        .await
        .expect("the gateway answers and closes")
        .expect("read");
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let body: ErrorBody = serde_json::from_str(body).expect("a JSON error body");
    assert_eq!(body.error.code, HTTPS_REQUIRED);
    assert!(
        body.error.message.contains("https://"),
        "{}",
        body.error.message
    );

    // The typed client sees the same, as an API error rather than a transport failure.
    let plain = flue_client::Client::new(&format!("http://{}", authority(flue.gateway.url())))
        .expect("client");
    match plain.list_servers().await {
        Err(flue_client::ClientError::Api { status, code, .. }) => {
            assert_eq!((status, code.as_str()), (400, HTTPS_REQUIRED));
        }
        other => panic!("expected a 400 https_required, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stalled_tls_handshake_is_cut_at_the_header_timeout() {
    let flue = Flue::start_tls(&["--header-timeout-ms", "300", "--max-connections", "2"]).await;
    // The start of a TLS record announcing a handshake message, then nothing more.
    let mut stalled = TcpStream::connect(authority(flue.gateway.url()))
        .await
        .expect("connect");
    stalled
        .write_all(&[0x16, 0x03, 0x01, 0x00, 0x40])
        .await
        .expect("send");
    let mut buf = [0_u8; 64];
    let read = tokio::time::timeout(WAIT, stalled.read(&mut buf))
        .await
        .expect("the gateway closes the connection");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "the connection must be closed, got {read:?}"
    );
    // A silent client holds its slot no longer either; real clients still get in.
    let mut silent = TcpStream::connect(authority(flue.gateway.url()))
        .await
        .expect("connect");
    let read = tokio::time::timeout(WAIT, silent.read(&mut buf))
        .await
        .expect("the gateway closes the silent connection");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    flue.client()
        .list_servers()
        .await
        .expect("a real client is served");
}

#[tokio::test]
async fn a_gateway_without_the_broker_ca_cannot_connect_to_a_tls_only_broker() {
    let ca = TestCa::new();
    let nats = Nats::start_tls(&ca).await;
    let (ok, stderr) = gateway_exit(&["--nats-url", &nats.url()]).await;
    assert!(!ok, "started against a broker it cannot verify:\n{stderr}");
    assert!(stderr.contains("cannot connect to the broker"), "{stderr}");
    // Nothing was set up in the broker: no stream exists.
    let js = async_nats::jetstream::new(nats.client().await);
    let names: Vec<String> = futures_util::StreamExt::collect::<Vec<_>>(js.stream_names())
        .await
        .into_iter()
        .map(|n| n.expect("stream name"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

#[tokio::test]
async fn a_gateway_given_a_ca_never_falls_back_to_a_plaintext_broker() {
    let ca = TestCa::new();
    let nats = Nats::start().await;
    let ca_file = ca.ca_file().display().to_string();
    let (ok, stderr) = gateway_exit(&["--nats-url", &nats.url(), "--nats-ca", &ca_file]).await;
    assert!(
        !ok,
        "connected to a plaintext broker although TLS was asked for:\n{stderr}"
    );
    assert!(stderr.contains("cannot connect to the broker"), "{stderr}");
    let js = async_nats::jetstream::new(nats.client().await);
    let names: Vec<String> = futures_util::StreamExt::collect::<Vec<_>>(js.stream_names())
        .await
        .into_iter()
        .map(|n| n.expect("stream name"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

#[tokio::test]
async fn unusable_tls_files_stop_the_gateway_and_the_agent_before_they_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing-ca.pem").display().to_string();
    let (ok, stderr) = gateway_exit(&["--nats-ca", &missing]).await;
    assert!(!ok && stderr.contains(&missing), "{stderr}");
    let (ok, stderr) = gateway_exit(&["--tls-cert", &missing, "--tls-key", &missing]).await;
    assert!(
        !ok && stderr.contains("cannot serve HTTPS") && stderr.contains(&missing),
        "{stderr}"
    );

    let out = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(bin("flue-agent"))
            // Without credentials the agent would stop before it looks at TLS: the dev
            // flag lets it get as far as the CA file.
            .args([
                "run",
                "--server-id",
                "s1",
                "--insecure-unsigned-requests",
                "--nats-ca",
                &missing,
                "--state-dir",
            ])
            .arg(dir.path().join("agent"))
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the agent exits")
    .expect("agent output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains(&missing),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_https_gateway_announces_its_https_url() {
    let ca = TestCa::new();
    let nats = Nats::start().await;
    let leaf = ca.leaf("gateway", &[]);
    let cert = leaf.cert.display().to_string();
    let key = leaf.key.display().to_string();
    let gateway = Gateway::start_trusting(
        &nats.url(),
        &["--tls-cert", &cert, "--tls-key", &key],
        Some(&ca.ca_file()),
    )
    .await;
    let line = gateway
        .stdout()
        .wait_for("flue-gateway listening on ", WAIT)
        .await;
    assert!(
        line.starts_with("flue-gateway listening on https://127.0.0.1:"),
        "{line}"
    );
    let health = gateway.client().list_servers().await;
    assert!(health.is_ok(), "{health:?}");
}

#[tokio::test]
async fn an_agent_without_the_broker_ca_never_gets_its_requests() {
    let flue = Flue::start_tls(&[]).await;
    flue.register("s1").await;
    let hooks = flue.path("hooks");
    std::fs::create_dir_all(&hooks).expect("hook dir");
    let ran = flue.path("ran");
    flue_tests::write_executable(
        &hooks.join("marker"),
        &format!("#!/bin/sh\ntouch '{}'\necho '{{}}'\n", ran.display()),
    );
    let config: flue_proto::ConfigSpec = serde_json::from_value(serde_json::json!({
        "id": "c1", "group": "marker", "config": ""
    }))
    .expect("config");
    flue.client().create_config(&config).await.expect("config");
    let d = flue.deploy("c1", "s1", &[]).await;

    // The same agent with its credentials, but trusting only the system's roots.
    let creds = flue.creds_path("s1").display().to_string();
    let agent = flue_tests::Agent::spawn_with(
        &flue.nats.url(),
        "s1",
        &flue.path("agent-s1"),
        std::slice::from_ref(&hooks),
        &["--creds", &creds],
    );
    flue.nats.logs().wait_for("TLS handshake error", WAIT).await;
    let now = flue.client().get_deployment(&d.id).await.expect("read");
    assert_eq!(now.status, DeploymentStatus::Queued, "{now:?}");
    assert!(!ran.exists(), "the hook ran");
    assert!(
        !agent
            .logs()
            .lines()
            .iter()
            .any(|l| l.contains("agent ready")),
        "the agent reached its queue"
    );
}

/// Runs the real `flue` CLI against `gateway` with `FLUE_CA` set to `ca` (or unset).
async fn flue_cli(
    flue: &Flue,
    ca: Option<&std::path::Path>,
    args: &[&str],
) -> std::process::Output {
    let mut command = tokio::process::Command::new(bin("flue"));
    command
        .arg("--gateway")
        .arg(flue.gateway.url())
        .args(args)
        .env("FLUE_TOKEN", flue.gateway.cli_token(args))
        .env_remove("FLUE_CA")
        .kill_on_drop(true);
    if let Some(ca) = ca {
        command.env("FLUE_CA", ca);
    }
    tokio::time::timeout(WAIT, command.output())
        .await
        .expect("flue finishes")
        .expect("run flue")
}

#[tokio::test]
async fn the_flue_cli_speaks_https_when_given_the_ca_and_is_refused_without_it() {
    let flue = Flue::start_tls(&[]).await;
    let ca = flue.ca.as_ref().expect("a CA").ca_file();

    let out = flue_cli(&flue, Some(&ca), &["server", "register", "web1"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = flue_cli(&flue, None, &["server", "register", "web2"]).await;
    assert!(!out.status.success(), "registered without trusting the CA");
    let listed = flue_cli(&flue, Some(&ca), &["server", "list", "--json"]).await;
    assert!(listed.status.success());
    let servers: Vec<flue_proto::Server> =
        serde_json::from_slice(&listed.stdout).expect("servers as JSON");
    let ids: Vec<&str> = servers.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["web1"], "only the call that trusted the CA arrived");
}
