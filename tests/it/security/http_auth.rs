//! HTTP API authentication against a real gateway: no, malformed, badly signed, expired and
//! revoked tokens are refused, before the body is read, and the refused call had no effect.
//! The helpers here serve `http_roles` and `http_ops` too.

use std::time::{Duration, Instant};

use flue_gateway::auth::token;
use flue_proto::TenantId;
use flue_proto::auth::{Role, TokenClaims};
use flue_tests::{Flue, Gateway, WAIT};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// A config body the tests try to create.
pub(super) fn config(id: &str) -> Value {
    json!({"id": id, "group": "script", "config": "#!/bin/sh\necho hi\n"})
}

/// `method path` with `token` (none: no Authorization header) and an optional JSON body;
/// the status, the `WWW-Authenticate` header and the body.
pub(super) async fn call(
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
pub(super) async fn config_exists(gateway: &Gateway, id: &str) -> bool {
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
pub(super) fn assert_unauthorized(
    answer: &(StatusCode, Option<String>, Value),
    says: &str,
    token: &str,
) {
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
pub(super) fn claims(tenant: &str) -> TokenClaims {
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
async fn a_call_without_a_token_or_of_a_role_not_allowed_is_refused_before_its_body_is_sent() {
    use crate::hardening::raw::{answer, connect, send};
    // A gateway that read the body first would wait this long for it before any answer
    // (408), far past the wait below: only a refusal made on the headers can come back.
    let flue = Flue::start_with(&["--body-timeout-ms", "600000"]).await;
    let viewer = format!(
        "Authorization: Bearer {}\r\n",
        flue.gateway.tokens().get(Role::Viewer)
    );
    for (authorization, status, code) in [
        (String::new(), 401, "unauthorized"),
        (viewer, 403, "forbidden"),
    ] {
        let mut s = connect(flue.gateway.url()).await;
        // The headers of a config create whose 1,000-byte body never comes.
        send(
            &mut s,
            &format!(
                "POST /v1/configs HTTP/1.1\r\nHost: gw\r\n{authorization}\
                 Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            ),
        )
        .await;
        let a = answer(&mut s, WAIT).await;
        assert_eq!(a.status, status, "{a:?}");
        assert_eq!(a.body["error"]["code"], code, "{a:?}");
    }
}
