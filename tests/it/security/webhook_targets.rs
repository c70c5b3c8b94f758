//! Webhook targets: without the operator's allow list the gateway never connects to a
//! loopback (or otherwise non-public) address, whether the URL names the address or a
//! host name that resolves to it; with the list, it does.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::time::Duration;

use flue_proto::ErrorBody;
use flue_proto::webhook::{Webhook, WebhookStatus};
use flue_tests::{Flue, WAIT};
use serde_json::{Value, json};

const SECRET: &str = "whsec_Zmx1ZS13ZWJob29rLXRlc3Qta2V5LTAxMjM0NTY3ODk=";
/// Small retry settings so that parking comes quickly.
const FAST: &[&str] = &["--webhook-max-attempts", "2", "--webhook-backoff-ms", "50"];

/// A listener on loopback that nothing should ever connect to; `accept` does not block.
fn trap() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    (listener, port)
}

/// Asserts that no connection ever reached `listener` (one made would be waiting in
/// its backlog).
fn assert_never_connected(listener: &TcpListener) {
    let accepted = listener.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == ErrorKind::WouldBlock),
        "the gateway connected to the refused target: {accepted:?}"
    );
}

async fn create(flue: &Flue, url: &str) -> reqwest::Response {
    flue.gateway
        .http()
        .request(
            reqwest::Method::POST,
            format!("{}/v1/webhooks", flue.gateway.url()),
        )
        .json(&json!({"url": url, "secret": SECRET, "start": "all"}))
        .send()
        .await
        .expect("POST /v1/webhooks")
}

async fn list(flue: &Flue) -> Vec<Webhook> {
    flue.gateway
        .http()
        .request(
            reqwest::Method::GET,
            format!("{}/v1/webhooks", flue.gateway.url()),
        )
        .send()
        .await
        .expect("GET /v1/webhooks")
        .json()
        .await
        .expect("webhooks")
}

/// Polls the subscription until it is parked (bounded).
async fn parked(flue: &Flue, id: &str) -> Webhook {
    let fut = async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tick.tick().await;
            let webhook: Webhook = flue
                .gateway
                .http()
                .request(
                    reqwest::Method::GET,
                    format!("{}/v1/webhooks/{id}", flue.gateway.url()),
                )
                .send()
                .await
                .expect("GET webhook")
                .json()
                .await
                .expect("webhook");
            if webhook.status == WebhookStatus::Parked {
                return webhook;
            }
        }
    };
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("webhook {id} was never parked"))
}

#[tokio::test]
async fn a_webhook_to_a_loopback_address_is_refused_without_the_allow_list() {
    let flue = Flue::start_with(FAST).await;
    let (listener, port) = trap();

    // An address in the URL: refused at creation, naming the address; nothing stored.
    // (Only loopback addresses here: a test sends nothing anywhere else, even by mistake.
    // The other ranges are the unit tests' of `webhooks::address`.)
    // The old numeric forms resolvers read as 127.0.0.1 are addresses too.
    for url in [
        format!("http://127.0.0.1:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        format!("http://[::1]:{port}/hook"),
        format!("http://2130706433:{port}/hook"),
        format!("http://0x7f000001:{port}/hook"),
        format!("http://0177.0.0.1:{port}/hook"),
        format!("http://127.1:{port}/hook"),
    ] {
        let response = create(&flue, &url).await;
        assert_eq!(response.status(), 422, "{url}");
        let body: ErrorBody = response.json().await.expect("error body");
        assert_eq!(body.error.code, "invalid_input");
        assert!(
            body.error
                .message
                .contains("webhooks to it need --webhook-allow"),
            "{url}: {}",
            body.error.message
        );
    }
    let refused = create(&flue, &format!("http://127.0.0.1:{port}/hook")).await;
    let body: Value = refused.json().await.expect("error body");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("127.0.0.1 is a loopback address")),
        "{body}"
    );
    assert!(list(&flue).await.is_empty());

    // A host name is checked where it leads, at delivery: every attempt fails without
    // connecting, and the subscription is parked saying why, but not what the name
    // resolved to (no resolver oracle for internal names).
    let response = create(&flue, &format!("http://localhost:{port}/hook")).await;
    assert_eq!(response.status(), 201);
    let webhook: Webhook = response.json().await.expect("webhook");
    flue.register("s1").await; // an event to deliver
    let webhook = parked(&flue, webhook.id.as_str()).await;
    let error = webhook.last_error.expect("the attempt's error");
    assert!(
        error.contains("has no address webhooks may reach"),
        "{error}"
    );
    assert!(
        !error.contains("127.") && !error.contains("loopback"),
        "the error tells how the name resolved: {error}"
    );
    assert_eq!(webhook.delivered, 0);
    flue.gateway
        .logs()
        .wait_for("webhook delivery attempt failed", WAIT)
        .await;
    assert_never_connected(&listener);
}

#[tokio::test]
async fn the_allow_list_lets_a_named_range_through() {
    let flue = Flue::start_with(&["--webhook-allow", "127.0.0.1/32"]).await;
    let (_listener, port) = trap();
    let response = create(&flue, &format!("http://127.0.0.1:{port}/hook")).await;
    assert_eq!(response.status(), 201);
    // Outside the allowed range the rule still holds.
    let response = create(&flue, &format!("http://127.0.0.2:{port}/hook")).await;
    assert_eq!(response.status(), 422);
    assert_eq!(list(&flue).await.len(), 1);
}
