//! HTTP API authentication against a real gateway: no, malformed, badly signed, expired,
//! revoked, wrong-role and other-tenant tokens are refused, and the refused call had no
//! effect; `flue-gateway token`, the operator's tenant token, the CLI's hints,
//! `--insecure-no-auth`, and no token in the logs.

use std::time::{Duration, Instant};

use flue_gateway::auth::token;
use flue_proto::TenantId;
use flue_proto::auth::{Role, TokenClaims};
use flue_tests::{Flue, Gateway, WAIT, bin};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// A config body the tests try to create.
fn config(id: &str) -> Value {
    json!({"id": id, "group": "script", "config": "#!/bin/sh\necho hi\n"})
}

/// `method path` with `token` (none: no Authorization header) and an optional JSON body;
/// the status, the `WWW-Authenticate` header and the body.
async fn call(
    gateway: &Gateway,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Option<String>, Value) {
    let mut request = reqwest::Client::new().request(method, format!("{}{path}", gateway.url()));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("send");
    let status = response.status();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().expect("ascii").to_owned());
    let text = response.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, challenge, body)
}

/// Whether config `id` exists, read with a viewer token.
async fn config_exists(gateway: &Gateway, id: &str) -> bool {
    let viewer = gateway.tokens().get(Role::Viewer);
    let (status, _, _) = call(
        gateway,
        Method::GET,
        &format!("/v1/configs/{id}"),
        Some(viewer),
        None,
    )
    .await;
    match status {
        StatusCode::OK => true,
        StatusCode::NOT_FOUND => false,
        other => panic!("reading config {id}: {other}"),
    }
}

/// Asserts a 401 `unauthorized` with a Bearer challenge whose message contains `says`
/// and never the token.
fn assert_unauthorized(answer: &(StatusCode, Option<String>, Value), says: &str, token: &str) {
    let (status, challenge, body) = answer;
    assert_eq!(*status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        challenge
            .as_deref()
            .is_some_and(|c| c.starts_with("Bearer")),
        "{challenge:?}"
    );
    assert_eq!(body["error"]["code"], "unauthorized", "{body}");
    let message = body["error"]["message"].as_str().expect("message");
    assert!(message.contains(says), "{message:?} should say {says:?}");
    assert!(
        token.is_empty() || !message.contains(token),
        "the token is echoed"
    );
}

/// Claims of an engine token of `tenant`, valid for an hour from now.
fn claims(tenant: &str) -> TokenClaims {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    TokenClaims {
        sub: "test".into(),
        tenant: Some(TenantId::new(tenant).expect("tenant")),
        role: Role::Engine,
        iat: now,
        exp: now + 3600,
        jti: "test-token".into(),
        ticket: false,
    }
}

#[tokio::test]
async fn a_request_without_a_token_is_refused_401_and_creates_nothing() {
    let flue = Flue::start().await;
    let answer = call(
        &flue.gateway,
        Method::POST,
        "/v1/configs",
        None,
        Some(config("c1")),
    )
    .await;
    assert_unauthorized(&answer, "no bearer token", "");
    assert!(
        !config_exists(&flue.gateway, "c1").await,
        "created without a token"
    );
    // Reads too, and an id nobody created looks the same: nothing to learn without a token.
    for path in [
        "/v1/servers",
        "/v1/deployments",
        "/v1/events",
        "/v1/configs/c1",
        "/v1/nowhere",
    ] {
        let answer = call(&flue.gateway, Method::GET, path, None, None).await;
        assert_unauthorized(&answer, "no bearer token", "");
    }
    // The health endpoints and the dashboard page stay open.
    for path in ["/livez", "/healthz", "/readyz", "/"] {
        let (status, _, _) = call(&flue.gateway, Method::GET, path, None, None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
    }
}

#[tokio::test]
async fn malformed_badly_signed_and_expired_tokens_are_refused_each_with_its_reason() {
    let flue = Flue::start().await;
    let secret = flue.gateway.tokens().secret().to_vec();
    let forged = token::sign(b"not the gateway's key, but 32 b!", claims("default"))
        .expect("sign")
        .token;
    let mut old = claims("default");
    old.iat -= 7200;
    old.exp -= 7200;
    let expired = token::sign(&secret, old).expect("sign").token;
    let cases: [(String, &str); 5] = [
        ("not-a-jwt".into(), "malformed"),
        // The signature is checked before anything else is believed.
        (
            "eyJhbGciOiJIUzI1NiJ9.e30.AAAA".into(),
            "signature is not valid",
        ),
        (forged, "signature is not valid"),
        (expired, "expired"),
        (
            // Signed right, but with a body that is not Flue's claims (no role).
            jsonwebtoken::encode(
                &jsonwebtoken::Header::default(),
                &json!({"sub": "x", "exp": 4_000_000_000_i64, "iat": 1, "jti": "j"}),
                &jsonwebtoken::EncodingKey::from_secret(&secret),
            )
            .expect("encode"),
            "malformed",
        ),
    ];
    for (i, (token, says)) in cases.iter().enumerate() {
        let id = format!("c{i}");
        let answer = call(
            &flue.gateway,
            Method::POST,
            "/v1/configs",
            Some(token),
            Some(config(&id)),
        )
        .await;
        assert_unauthorized(&answer, says, token);
        assert!(
            !config_exists(&flue.gateway, &id).await,
            "created with {says} token"
        );
    }
    // An Authorization header of another scheme is refused as such.
    let response = reqwest::Client::new()
        .get(format!("{}/v1/servers", flue.gateway.url()))
        .header("authorization", "Basic YWRtaW46YWRtaW4=")
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let body: Value = response.json().await.expect("json");
    assert!(
        body["error"]["message"]
            .as_str()
            .expect("text")
            .contains("not `Bearer <token>`")
    );
}

#[tokio::test]
async fn a_token_revoked_through_the_api_is_refused_by_a_second_gateway_on_the_same_broker() {
    let flue = Flue::start().await;
    let second = Gateway::start_like(&flue.gateway, &flue.nats.url(), &[]).await;
    let admin = flue.gateway.tokens().get(Role::Admin);
    let (status, _, minted) = call(
        &flue.gateway,
        Method::POST,
        "/v1/tokens",
        Some(admin),
        Some(json!({"role": "engine", "ttl_secs": 3600, "name": "ci"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{minted}");
    let engine = minted["token"].as_str().expect("token").to_owned();
    let id = minted["id"].as_str().expect("id").to_owned();
    let (status, _, _) = call(
        &second,
        Method::POST,
        "/v1/configs",
        Some(&engine),
        Some(config("before")),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the minted token works on the other gateway"
    );

    let (status, _, body) = call(
        &flue.gateway,
        Method::DELETE,
        &format!("/v1/tokens/{id}"),
        Some(admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let revoked_at = Instant::now();
    // The first gateway refuses it at once; the second as soon as its watch delivers.
    let answer = call(
        &flue.gateway,
        Method::GET,
        "/v1/servers",
        Some(&engine),
        None,
    )
    .await;
    assert_unauthorized(&answer, "revoked", &engine);
    let refused = async {
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        loop {
            tick.tick().await;
            let (status, _, _) =
                call(&second, Method::GET, "/v1/servers", Some(&engine), None).await;
            if status == StatusCode::UNAUTHORIZED {
                return;
            }
        }
    };
    tokio::time::timeout(WAIT, refused)
        .await
        .expect("the second gateway refuses the revoked token");
    let seen_after = revoked_at.elapsed();
    eprintln!("second gateway refused the revoked token {seen_after:?} after the revocation");
    let answer = call(
        &second,
        Method::POST,
        "/v1/configs",
        Some(&engine),
        Some(config("after")),
    )
    .await;
    assert_unauthorized(&answer, "revoked", &engine);
    assert!(
        !config_exists(&flue.gateway, "after").await,
        "created with a revoked token"
    );
    // Still refused by a gateway that starts after the revocation.
    let third = Gateway::start_like(&flue.gateway, &flue.nats.url(), &[]).await;
    let answer = call(&third, Method::GET, "/v1/servers", Some(&engine), None).await;
    assert_unauthorized(&answer, "revoked", &engine);
}

#[tokio::test]
async fn each_role_is_refused_403_on_routes_it_may_not_call_and_the_call_does_nothing() {
    let flue = Flue::start().await;
    let gw = &flue.gateway;
    let tokens = gw.tokens();
    let forbidden = |answer: &(StatusCode, Option<String>, Value)| {
        assert_eq!(answer.0, StatusCode::FORBIDDEN, "{}", answer.2);
        assert_eq!(answer.2["error"]["code"], "forbidden");
        assert!(
            answer
                .1
                .as_deref()
                .is_some_and(|c| c.contains("insufficient_scope"))
        );
    };
    // Writes by a role that does not own them: nothing created.
    for role in [Role::Viewer, Role::Listener, Role::Admin, Role::Operator] {
        let id = format!("by-{role}");
        forbidden(
            &call(
                gw,
                Method::POST,
                "/v1/configs",
                Some(tokens.get(role)),
                Some(config(&id)),
            )
            .await,
        );
        assert!(!config_exists(gw, &id).await, "{role} created a config");
    }
    for role in [Role::Engine, Role::Viewer, Role::Listener, Role::Operator] {
        let id = format!("s-{role}");
        forbidden(
            &call(
                gw,
                Method::POST,
                "/v1/servers",
                Some(tokens.get(role)),
                Some(json!({"id": id})),
            )
            .await,
        );
        let (status, _, _) = call(
            gw,
            Method::GET,
            &format!("/v1/servers/{id}"),
            Some(tokens.get(Role::Admin)),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{role} registered a server");
    }
    flue.register("web1").await;
    let (status, _, _) = call(
        gw,
        Method::POST,
        "/v1/configs",
        Some(tokens.get(Role::Engine)),
        Some(config("c")),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    for role in [Role::Admin, Role::Viewer, Role::Listener] {
        forbidden(
            &call(
                gw,
                Method::POST,
                "/v1/deployments",
                Some(tokens.get(role)),
                Some(json!({"config_id": "c", "server_id": "web1"})),
            )
            .await,
        );
    }
    let (_, _, listed) = call(
        gw,
        Method::GET,
        "/v1/servers/web1/deployments",
        Some(tokens.get(Role::Viewer)),
        None,
    )
    .await;
    assert_eq!(listed, json!([]), "a refused deployment was queued");
    // Reads and the rest of each role's limits.
    for (role, method, path) in [
        (Role::Listener, Method::GET, "/v1/deployments"),
        (Role::Listener, Method::GET, "/v1/servers"),
        (Role::Operator, Method::GET, "/v1/servers"),
        (Role::Operator, Method::GET, "/v1/events"),
        (Role::Engine, Method::POST, "/v1/tokens"),
        (Role::Viewer, Method::DELETE, "/v1/tokens/abc"),
        (Role::Engine, Method::DELETE, "/v1/servers/web1"),
        (Role::Engine, Method::GET, "/v1/webhooks"),
        (Role::Viewer, Method::POST, "/v1/webhooks"),
        (Role::Admin, Method::POST, "/v1/tenants/default/tokens"),
        (Role::Viewer, Method::PUT, "/v1/stacks/s"),
    ] {
        forbidden(
            &call(
                gw,
                method.clone(),
                path,
                Some(tokens.get(role)),
                Some(json!({})),
            )
            .await,
        );
    }
    let (status, _, _) = call(
        gw,
        Method::GET,
        "/v1/servers/web1",
        Some(tokens.get(Role::Viewer)),
        None,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the engine's refused DELETE deregistered web1"
    );
}

#[tokio::test]
async fn another_tenants_token_gets_404_and_never_learns_whether_an_object_exists() {
    let flue = Flue::start().await;
    let secret = flue.gateway.tokens().secret().to_vec();
    let (status, _, _) = call(
        &flue.gateway,
        Method::POST,
        "/v1/configs",
        Some(flue.gateway.tokens().get(Role::Engine)),
        Some(config("exists")),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let other = token::sign(&secret, claims("other")).expect("sign").token;
    let (status, _, there) = call(
        &flue.gateway,
        Method::GET,
        "/v1/configs/exists",
        Some(&other),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{there}");
    let (status, _, missing) = call(
        &flue.gateway,
        Method::GET,
        "/v1/configs/missing",
        Some(&other),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        there, missing,
        "the answers tell an existing object from a missing one"
    );
    let (status, _, _) = call(
        &flue.gateway,
        Method::POST,
        "/v1/configs",
        Some(&other),
        Some(config("theirs")),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        !config_exists(&flue.gateway, "theirs").await,
        "another tenant wrote here"
    );
}

#[tokio::test]
async fn flue_gateway_token_mints_offline_and_an_operator_mints_only_a_tenant_admin() {
    let flue = Flue::start().await;
    let state = flue.gateway.state_dir().display().to_string();
    let mint = |role: &str| {
        let out = std::process::Command::new(bin("flue-gateway"))
            .args([
                "token",
                "--state-dir",
                &state,
                "--role",
                role,
                "--ttl",
                "1h",
                "--name",
                "ops",
            ])
            .output()
            .expect("run flue-gateway token");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).expect("utf-8");
        assert_eq!(text.lines().count(), 1, "only the token: {text:?}");
        text.trim().to_owned()
    };
    let operator = mint("operator");
    forbidden_everywhere_but_tenants(&flue.gateway, &operator).await;
    let (status, _, minted) = call(
        &flue.gateway,
        Method::POST,
        "/v1/tenants/default/tokens",
        Some(&operator),
        Some(json!({"role": "admin", "ttl_secs": 600, "name": "first-admin"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{minted}");
    let admin = minted["token"].as_str().expect("token");
    let (status, _, body) = call(
        &flue.gateway,
        Method::POST,
        "/v1/servers",
        Some(admin),
        Some(json!({"id": "s1"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _, _) = call(
        &flue.gateway,
        Method::POST,
        "/v1/tenants/elsewhere/tokens",
        Some(&operator),
        Some(json!({"role": "admin", "ttl_secs": 600, "name": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, body) = call(
        &flue.gateway,
        Method::POST,
        "/v1/tenants/default/tokens",
        Some(&operator),
        Some(json!({"role": "engine", "ttl_secs": 600, "name": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // An offline admin token works as one.
    let offline_admin = mint("admin");
    let (status, _, _) = call(
        &flue.gateway,
        Method::POST,
        "/v1/servers",
        Some(&offline_admin),
        Some(json!({"id": "s2"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
}

async fn forbidden_everywhere_but_tenants(gateway: &Gateway, operator: &str) {
    for (method, path) in [
        (Method::GET, "/v1/servers"),
        (Method::POST, "/v1/configs"),
        (Method::POST, "/v1/tokens"),
    ] {
        let (status, _, body) = call(gateway, method, path, Some(operator), Some(json!({}))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
    }
}

#[tokio::test]
async fn the_cli_says_how_to_authenticate_when_its_token_is_missing_or_lacks_the_role() {
    let flue = Flue::start().await;
    let run = |token: Option<String>| {
        let mut command = tokio::process::Command::new(bin("flue"));
        command.env_remove("FLUE_TOKEN");
        if let Some(token) = token {
            command.env("FLUE_TOKEN", token);
        }
        command
            .args([
                "--gateway",
                flue.gateway.url(),
                "server",
                "register",
                "web1",
            ])
            .kill_on_drop(true)
            .output()
    };
    let out = tokio::time::timeout(WAIT, run(None))
        .await
        .expect("in time")
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("401: set FLUE_TOKEN"), "{stderr}");
    let viewer = flue.gateway.tokens().get(Role::Viewer).to_owned();
    let out = tokio::time::timeout(WAIT, run(Some(viewer.clone())))
        .await
        .expect("in time")
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("403"), "{stderr}");
    assert!(!stderr.contains(&viewer), "the CLI printed its token");
    let (status, _, _) = call(
        &flue.gateway,
        Method::GET,
        "/v1/servers/web1",
        Some(&viewer),
        None,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "registered without the admin role"
    );
}

#[tokio::test]
async fn insecure_no_auth_serves_without_tokens_and_warns_loudly() {
    let flue = Flue::start_with(&["--insecure-no-auth"]).await;
    flue.gateway
        .logs()
        .wait_for(
            "--insecure-no-auth: the HTTP API accepts every request without a token",
            WAIT,
        )
        .await;
    let (status, _, body) = call(
        &flue.gateway,
        Method::POST,
        "/v1/configs",
        None,
        Some(config("open")),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _, body) = call(
        &flue.gateway,
        Method::POST,
        "/v1/servers",
        None,
        Some(json!({"id": "s1"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _, _) = call(
        &flue.gateway,
        Method::GET,
        "/v1/events?from=start&follow=false",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // And a gateway without the flag says nothing of the kind.
    let secure = Flue::start().await;
    let (status, _, _) = call(&secure.gateway, Method::GET, "/v1/servers", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(
        !secure
            .gateway
            .logs()
            .lines()
            .iter()
            .any(|l| l.contains("insecure"))
    );
}

#[tokio::test]
async fn tokens_and_tickets_never_appear_in_the_gateway_logs() {
    let flue = Flue::start().await;
    let gw = &flue.gateway;
    let admin = gw.tokens().get(Role::Admin).to_owned();
    let (_, _, minted) = call(
        gw,
        Method::POST,
        "/v1/tokens",
        Some(&admin),
        Some(json!({"role": "viewer", "ttl_secs": 60, "name": "logged"})),
    )
    .await;
    let viewer = minted["token"].as_str().expect("token").to_owned();
    let (_, _, ticket) = call(gw, Method::POST, "/v1/events/tickets", Some(&viewer), None).await;
    let ticket = ticket["ticket"].as_str().expect("ticket").to_owned();
    let (status, _, _) = call(
        gw,
        Method::GET,
        &format!("/v1/events?from=start&follow=false&ticket={ticket}"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let id = minted["id"].as_str().expect("id");
    call(
        gw,
        Method::DELETE,
        &format!("/v1/tokens/{id}"),
        Some(&admin),
        None,
    )
    .await;
    call(gw, Method::GET, "/v1/servers", Some(&viewer), None).await;
    call(
        gw,
        Method::GET,
        "/v1/servers",
        Some("garbage.token.value"),
        None,
    )
    .await;
    // The revocation is logged (by id), so the log has caught up with the calls above.
    gw.logs().wait_for("token revoked", WAIT).await;
    let logs = gw.logs().lines().join("\n");
    for secret in [&admin, &viewer, &ticket, &"garbage.token.value".to_owned()] {
        assert!(
            !logs.contains(secret.as_str()),
            "a token is in the gateway log"
        );
    }
    let signature = viewer.rsplit('.').next().expect("signature");
    assert!(!logs.contains(signature));
}
