//! Around the tokens: the CLI's hints, `--insecure-no-auth`, and no token or ticket in the
//! gateway's logs.

use flue_proto::auth::Role;
use flue_tests::{Flue, WAIT, bin};
use reqwest::{Method, StatusCode};
use serde_json::json;

use super::http_auth::{call, config};

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
