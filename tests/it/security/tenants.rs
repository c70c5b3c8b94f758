//! One gateway, many tenants: each tenant served by its own runtime, the tenant API, and
//! health over every runtime.
//!
//! In development mode (one anonymous broker connection) a gateway serves exactly its
//! default tenant; a second one is refused, since both would share one account's streams.
//! A second runtime on a second nats-server stands in for a second tenant's account here,
//! until the broker's operator mode gives each tenant its own account.

use std::process::Output;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use flue_gateway::testing::{self as connector, Stopped, TenantConnections, TenantError};
use flue_proto::auth::Role;
use flue_proto::{Deployment, DeploymentStatus, RegisterServer, Tenant, TenantId};
use flue_tests::{Flue, Gateway, Nats, WAIT, bin};
use serde_json::{Value, json};
use tower::ServiceExt as _;

use crate::gateway::fixture::{Fixture, code, config_and_server, message};

/// Runs the `flue` CLI against `gateway`.
async fn flue(gateway: &Gateway, args: &[&str]) -> Output {
    let out = tokio::process::Command::new(bin("flue"))
        .arg("--gateway")
        .arg(gateway.url())
        .args(args)
        .env("FLUE_TOKEN", gateway.cli_token(args))
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(WAIT, out)
        .await
        .expect("flue finishes")
        .expect("run flue")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `POST /v1/tenants` over HTTP: the status and the JSON body.
pub(super) async fn post_tenant(gateway: &Gateway, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let resp = gateway
        .http()
        .request(
            reqwest::Method::POST,
            format!("{}/v1/tenants", gateway.url()),
        )
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("gateway answers");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("a JSON body"))
}

async fn stream_names(nats: &Nats) -> Vec<String> {
    use futures_util::StreamExt as _;
    let js = async_nats::jetstream::new(nats.client().await);
    let mut names: Vec<String> = js
        .stream_names()
        .map(|n| n.expect("stream name"))
        .collect()
        .await;
    names.sort();
    names
}

fn tenant(id: &str) -> TenantId {
    TenantId::new(id).expect("valid tenant id")
}

/// Polls `uri` in-process until it answers `want`, for at most [`WAIT`].
async fn status_until(fx: &Fixture, uri: &str, want: StatusCode) -> Value {
    let poll = async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tick.tick().await;
            let (status, body) = fx.call(Method::GET, uri, None).await;
            if status == want {
                return body;
            }
        }
    };
    tokio::time::timeout(WAIT, poll)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {uri} to answer {want}"))
}

#[tokio::test]
async fn a_development_gateway_serves_its_default_tenant_and_lists_only_it() {
    let flue_env = Flue::start_dev_broker(&["--default-tenant", "acme"]).await;
    let gw = flue_env.gateway.url().to_owned();

    let listed = flue_env
        .gateway
        .client_as(Role::Operator)
        .list_tenants()
        .await
        .expect("tenants listed");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, tenant("acme"));
    assert_eq!(listed[0].name, "acme", "named after its id");

    // Its objects are the default tenant's: registration, and the dashboard, name it.
    let registration = flue_env
        .gateway
        .admin_client()
        .register_server(&RegisterServer {
            transport: Default::default(),
            id: "web1".parse().expect("id"),
            name: String::new(),
        })
        .await
        .expect("registered");
    assert_eq!(registration.server.tenant, tenant("acme"));
    assert_eq!(
        registration.agent.as_ref().expect("agent bootstrap").tenant,
        tenant("acme")
    );
    let page = reqwest::get(format!("{gw}/"))
        .await
        .expect("dashboard answers")
        .text()
        .await
        .expect("page");
    assert!(page.contains("acme"), "the dashboard names its tenant");

    // Creating it again returns it unchanged, 200.
    let (status, body) = post_tenant(&flue_env.gateway, r#"{"id":"acme","name":"Other"}"#).await;
    assert_eq!(status, 200, "{body}");
    let again: Tenant = serde_json::from_value(body).expect("a tenant");
    assert_eq!(again, listed[0], "an existing tenant is not renamed");

    let out = flue(&flue_env.gateway, &["tenant", "list"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.starts_with("ID") && table.contains("\nacme  "),
        "{table}"
    );
    let out = flue(&flue_env.gateway, &["tenant", "create", "acme"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown: Tenant = serde_json::from_slice(&out.stdout).expect("the tenant as JSON");
    assert_eq!(shown, listed[0]);
}

#[tokio::test]
async fn a_development_gateway_refuses_a_second_tenant_and_creates_nothing() {
    let flue_env = Flue::start_dev_broker(&[]).await;
    let streams_before = stream_names(&flue_env.nats).await;

    let (status, body) = post_tenant(&flue_env.gateway, r#"{"id":"globex","name":"Globex"}"#).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "conflict", "{body}");
    let said = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        said.contains("development mode") && said.contains("serves only tenant default"),
        "{said}"
    );

    let out = flue(&flue_env.gateway, &["tenant", "create", "globex"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("development mode"),
        "{}",
        text(&out.stderr)
    );

    // Refused before anything was made: no tenant, no record, no stream.
    let listed = flue_env
        .gateway
        .client_as(Role::Operator)
        .list_tenants()
        .await
        .expect("listed");
    let ids: Vec<_> = listed.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["default"]);
    let state = flue_env.gateway.state_dir();
    assert!(state.join("tenants/default.json").exists());
    assert!(!state.join("tenants/globex.json").exists());
    assert_eq!(stream_names(&flue_env.nats).await, streams_before);
}

#[tokio::test]
async fn tenant_bodies_are_validated_like_subject_tokens() {
    let flue_env = Flue::start().await;
    let too_long = "t".repeat(65);
    for id in ["a.b", "a*", "a>", "a b", "", too_long.as_str()] {
        let (status, body) = post_tenant(&flue_env.gateway, json!({ "id": id }).to_string()).await;
        assert_eq!(status, 422, "{id:?}: {body}");
        assert_eq!(body["error"]["code"], "invalid_body", "{id:?}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("id"),
            "the message names the id: {body}"
        );
    }
    let long_name = json!({"id": "acme", "name": "n".repeat(257)}).to_string();
    for (sent, want_status, want_code) in [
        (long_name.as_str(), 422, "invalid_input"),
        (r#"{"id":"acme","owner":"x"}"#, 422, "invalid_body"),
        (r#"{"id":"acme""#, 400, "malformed_json"),
    ] {
        let (status, body) = post_tenant(&flue_env.gateway, sent.to_owned()).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (want_status, Some(want_code)),
            "{sent}: {body}"
        );
    }
    let listed = flue_env
        .gateway
        .client_as(Role::Operator)
        .list_tenants()
        .await
        .expect("listed");
    assert_eq!(listed.len(), 1, "nothing was created: {listed:?}");
}

#[tokio::test]
async fn readyz_is_ready_only_while_every_tenant_runtime_is_connected() {
    let mut fx = Fixture::start().await;
    let mut other = Nats::start().await;
    let gateway = fx.gateway.as_ref().expect("running");
    let connection = connector::connect(
        &other.url(),
        async_nats::ConnectOptions::new(),
        "flue-gateway acme",
    )
    .await
    .expect("second broker reached");
    let connections = TenantConnections {
        tenant: connection,
        events: None,
        users: None,
    };
    gateway
        .tenants()
        .start_runtime(&tenant("acme"), "Acme", connections)
        .await
        .expect("second runtime starts");
    // A tenant is never served twice (its tasks would run twice).
    let again = connector::connect(&other.url(), async_nats::ConnectOptions::new(), "again")
        .await
        .expect("second broker reached");
    let refused = gateway
        .tenants()
        .start_runtime(
            &tenant("acme"),
            "",
            TenantConnections {
                tenant: again.clone(),
                events: None,
                users: None,
            },
        )
        .await
        .expect_err("acme is served already");
    assert!(
        matches!(refused, TenantError::AlreadyServed(_)),
        "{refused}"
    );
    assert!(
        again.is_closed(),
        "the refused runtime's connection is closed"
    );
    let (status, body) = fx.call(Method::GET, "/v1/tenants", None).await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<_> = body
        .as_array()
        .expect("a list")
        .iter()
        .map(|t| t["id"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(ids, ["acme", "default"]);
    status_until(&fx, "/readyz", StatusCode::OK).await;

    // One tenant's broker goes away: the gateway is not ready, the other tenant is served.
    other.kill().await;
    let body = status_until(&fx, "/readyz", StatusCode::SERVICE_UNAVAILABLE).await;
    assert_eq!(body["status"], "unavailable", "{body}");
    assert_eq!(body["broker"], "disconnected", "{body}");
    let (status, _) = fx.call(Method::GET, "/livez", None).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "liveness does not depend on the broker"
    );
    let (status, body) = fx.call(Method::GET, "/v1/servers", None).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the default tenant is still served: {body}"
    );

    other.restart().await;
    let body = status_until(&fx, "/readyz", StatusCode::OK).await;
    assert_eq!(body["broker"], "connected", "{body}");

    let clean = fx.gateway.take().expect("running").shutdown().await;
    assert!(clean, "both runtimes stopped within their grace period");
}

#[tokio::test]
async fn a_stopped_tenant_runtime_ends_its_long_polls_and_its_callers_get_not_found() {
    let fx = Fixture::start().await;
    config_and_server(&fx).await;
    let (status, body) = fx
        .call(
            Method::POST,
            "/v1/deployments",
            Some(json!({"config_id": "c1", "server_id": "web1"})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let queued: Deployment = serde_json::from_value(body).expect("a deployment");

    // A long poll that no agent will ever end.
    let request = Request::builder()
        .uri(format!("/v1/deployments/{}?wait_secs=60", queued.id))
        .header(
            "authorization",
            format!("Bearer {}", fx.tokens.get(Role::Viewer)),
        )
        .body(Body::empty())
        .expect("request");
    let poll = tokio::spawn(fx.app.clone().oneshot(request));
    let poll_waiting = async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tick.tick().await;
            let (_, health) = fx.call(Method::GET, "/readyz", None).await;
            if health["long_polls"] == 1 {
                return;
            }
        }
    };
    tokio::time::timeout(WAIT, poll_waiting)
        .await
        .expect("the long poll waits");

    let tenants = fx.gateway.as_ref().expect("running").tenants().clone();
    let default = tenant("default");
    let runtime = tenants.get(&default).expect("the default tenant runs");
    let stopped = tokio::time::timeout(WAIT, tenants.stop(&default))
        .await
        .expect("stops within the bound");
    assert_eq!(stopped, Some(Stopped::Clean));
    assert!(
        runtime.is_closed(),
        "its broker connection is drained and closed"
    );

    // The long poll ended with the stop, long before its own 60 s.
    let answer = tokio::time::timeout(Duration::from_secs(30), poll)
        .await
        .expect("the long poll ended with its runtime")
        .expect("not panicked")
        .expect("infallible");
    assert_eq!(answer.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX)
        .await
        .expect("body");
    let seen: Deployment = serde_json::from_slice(&bytes).expect("a deployment");
    assert_eq!(seen.status, DeploymentStatus::Queued);

    // Its callers are not served any more; the gateway itself is.
    let (status, body) = fx.call(Method::GET, "/v1/servers", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(code(&body), "not_found");
    assert_eq!(
        message(&body),
        "not found",
        "the same answer as for any other missing object"
    );
    let (status, body) = fx.call(Method::GET, "/v1/tenants", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!([])));
    let (status, _) = fx.call(Method::GET, "/livez", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(tenants.stop(&default).await, None, "stopped once");
}
