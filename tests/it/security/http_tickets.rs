//! Event-stream tickets (what a browser's `EventSource` sends instead of a header) and
//! the dashboard's sign-in, against a real gateway and headless Chromium.

use flue_gateway::auth::token;
use flue_proto::auth::Role;
use flue_tests::{Browser, Flue, WAIT, chromium_bin};
use reqwest::StatusCode;
use serde_json::Value;

use crate::events::dashboard::sign_in;

/// A ticket for the holder of `token`.
async fn ticket(flue: &Flue, token: &str) -> String {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/events/tickets", flue.gateway.url()))
        .bearer_auth(token)
        .send()
        .await
        .expect("POST /v1/events/tickets");
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.expect("json");
    body["ticket"].as_str().expect("ticket").to_owned()
}

/// `GET path` with no header; the status and the error message, if any.
async fn get(flue: &Flue, path: &str) -> (StatusCode, String) {
    let response = reqwest::get(format!("{}{path}", flue.gateway.url()))
        .await
        .expect("GET");
    let status = response.status();
    let text = if status.is_success() {
        String::new()
    } else {
        let body: Value = response.json().await.expect("an error body");
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    (status, text)
}

#[tokio::test]
async fn an_event_ticket_opens_only_the_event_stream_and_expires() {
    let flue = Flue::start().await;
    let viewer = flue.gateway.tokens().get(Role::Viewer);
    let t = ticket(&flue, viewer).await;
    let (status, _) = get(
        &flue,
        &format!("/v1/events?from=start&follow=false&ticket={t}"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "the ticket opens the stream");
    // Nowhere else: not as a query parameter, not as a bearer token.
    let (status, message) = get(&flue, &format!("/v1/servers?ticket={t}")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(message.contains("no bearer token"), "{message}");
    let response = reqwest::Client::new()
        .get(format!("{}/v1/servers", flue.gateway.url()))
        .bearer_auth(&t)
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    // A bearer token is not a ticket.
    let (status, _) = get(&flue, &format!("/v1/events?follow=false&ticket={viewer}")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // A ticket past its 60 s is refused (made with the gateway's key, already expired).
    let secret = flue.gateway.tokens().secret();
    let mut claims = token::verify_ticket(secret, &t).expect("a valid ticket");
    claims.iat -= 120;
    claims.exp -= 120;
    let expired = token::sign(secret, claims).expect("sign").token;
    let (status, message) = get(&flue, &format!("/v1/events?follow=false&ticket={expired}")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(message.contains("expired"), "{message}");
    // A listener may have tickets too; an operator may not.
    ticket(&flue, flue.gateway.tokens().get(Role::Listener)).await;
    let response = reqwest::Client::new()
        .post(format!("{}/v1/events/tickets", flue.gateway.url()))
        .bearer_auth(flue.gateway.tokens().get(Role::Operator))
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn revoking_a_token_ends_the_tickets_made_from_it() {
    let flue = Flue::start().await;
    let admin = flue.gateway.tokens().get(Role::Admin);
    let http = reqwest::Client::new();
    let minted: Value = http
        .post(format!("{}/v1/tokens", flue.gateway.url()))
        .bearer_auth(admin)
        .json(&serde_json::json!({"role": "viewer", "ttl_secs": 600, "name": "tab"}))
        .send()
        .await
        .expect("POST /v1/tokens")
        .json()
        .await
        .expect("json");
    let t = ticket(&flue, minted["token"].as_str().expect("token")).await;
    let revoked = http
        .delete(format!(
            "{}/v1/tokens/{}",
            flue.gateway.url(),
            minted["id"].as_str().expect("id")
        ))
        .bearer_auth(admin)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    let (status, message) = get(&flue, &format!("/v1/events?follow=false&ticket={t}")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(message.contains("revoked"), "{message}");
}

#[tokio::test]
async fn the_dashboard_asks_for_a_token_keeps_it_for_the_session_and_streams_with_a_ticket() {
    chromium_bin();
    let flue = Flue::start().await;
    flue.register("web1").await;
    let _agent = flue.agent("web1", &[]).await;
    flue.script_config("hello", "#!/bin/sh\necho hello\n", &[], &[])
        .await;
    let mut browser = Browser::launch().await;
    let mut page = browser.open(flue.gateway.url()).await;
    // Nothing is read without a token: the form, and no data.
    page.wait_for(
        "the sign-in form",
        WAIT,
        "document.body.dataset.auth === 'login'",
    )
    .await;
    assert_eq!(
        page.eval("document.getElementById('main').hidden").await,
        Value::Bool(true)
    );
    // A wrong token: the form again, saying why.
    sign_in(&mut page, "not-a-token").await;
    page.wait_for(
        "the refusal on the form",
        WAIT,
        "document.getElementById('login-error').textContent.includes('malformed')",
    )
    .await;
    assert_eq!(
        page.eval("sessionStorage.getItem('flue-token')").await,
        Value::Null
    );

    // Every stream URL the page opens, seen by wrapping EventSource before it connects.
    page.eval(
        "window.__streams = []; const ES = window.EventSource; \
         window.EventSource = class extends ES { \
           constructor(url, opts) { super(url, opts); window.__streams.push(String(url)); } }; true",
    )
    .await;
    let viewer = flue.gateway.tokens().get(Role::Viewer);
    sign_in(&mut page, viewer).await;
    let live = "document.body.dataset.auth === 'ok' \
                && document.body.dataset.loaded === 'true' \
                && document.getElementById('connection').dataset.state === 'live'";
    page.wait_for("a live page", WAIT, live).await;
    let d = flue.deploy("hello", "web1", &[]).await;
    page.wait_for(
        "the deployment COMPLETE from the stream",
        WAIT,
        &format!(
            "document.querySelector('tr[data-deployment-id=\"{}\"] td.state')?.textContent === 'COMPLETE'",
            d.id
        ),
    )
    .await;
    // The stream was opened with a ticket; the token never went into a URL.
    let urls: Vec<String> = serde_json::from_value(
        page.eval(
            "[...window.__streams, ...performance.getEntriesByType('resource').map((e) => e.name)]",
        )
        .await,
    )
    .expect("urls");
    assert!(
        urls.iter()
            .any(|u| u.contains("/v1/events?") && u.contains("ticket=")),
        "{urls:?}"
    );
    assert!(
        !urls.iter().any(|u| u.contains(viewer)),
        "the token is in a URL"
    );
    // Kept for the session: a reload needs no new sign-in.
    page.eval("window.__before_reload = true").await;
    let _ = page.try_eval("location.reload(); true").await;
    page.wait_for(
        "the reloaded page live without the form",
        WAIT,
        &format!("!window.__before_reload && {live}"),
    )
    .await;
}
