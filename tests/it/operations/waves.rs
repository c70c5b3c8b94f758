//! A large group through the engine workers: members planned and recorded a wave per
//! write (not one write each), a write split when the gateway finds it too large, and a
//! deployment call the gateway answers 503 tried again by the engine itself, so the
//! operation neither stops nor goes back to the queue.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flue_proto::operation::OperationState;
use flue_tests::{Flue, broker_has_read, install_crypto_provider};
use futures_util::StreamExt;
use serde_json::json;

use super::{accepted, ended, group_body, runs};

/// An HTTP proxy in front of a real gateway that answers the first `refuse`
/// `POST /v1/deployments` itself with 503, as a gateway whose broker is slower than its
/// deadline does, and forwards everything else.
#[derive(Clone)]
struct Busy {
    target: Arc<OnceLock<String>>,
    refuse: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    http: reqwest::Client,
}

impl Busy {
    /// Listens on a free loopback port; forwards once [`Busy::target`] is set.
    async fn start(refuse: usize) -> (Busy, String) {
        install_crypto_provider();
        let busy = Busy {
            target: Arc::default(),
            refuse: Arc::new(AtomicUsize::new(refuse)),
            refused: Arc::default(),
            http: reqwest::Client::new(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(busy.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (busy, url)
    }
}

async fn forward(State(busy): State<Busy>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if parts.method == Method::POST
        && parts.uri.path() == "/v1/deployments"
        && busy
            .refuse
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    {
        busy.refused.fetch_add(1, Ordering::SeqCst);
        let body = json!({"error": {"code": "unavailable", "message": "the broker did not answer in time"}});
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            axum::Json(body),
        )
            .into_response();
    }
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .expect("request body");
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let target = busy.target.get().expect("target set before use");
    let mut out = busy
        .http
        .request(parts.method, format!("{target}{path}"))
        .body(body);
    for (name, value) in &parts.headers {
        if name != header::HOST && name != header::CONTENT_LENGTH {
            out = out.header(name, value);
        }
    }
    let answer = out.send().await.expect("the gateway answers");
    let status = answer.status();
    let mut headers = answer.headers().clone();
    headers.remove(header::TRANSFER_ENCODING);
    headers.remove(header::CONNECTION);
    let bytes = answer.bytes().await.expect("answer body");
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// Counts the writes of stack heads (`flue_stacks`) from now on.
async fn count_head_writes(flue: &Flue) -> Arc<AtomicUsize> {
    let nats = flue.nats.client().await;
    let mut heads = nats
        .subscribe("$KV.flue_stacks.>")
        .await
        .expect("subscribe");
    broker_has_read(&nats, &nats.new_inbox()).await;
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        let _nats = nats;
        while heads.next().await.is_some() {
            seen.fetch_add(1, Ordering::SeqCst);
        }
    });
    count
}

#[tokio::test]
async fn a_deployment_call_answered_503_is_tried_again_and_the_stack_completes_each_hook_once() {
    let (busy, proxy) = Busy::start(2).await;
    let flue = Flue::start_with(&["--engine-api-url", &proxy]).await;
    busy.target
        .set(flue.gateway.url().to_owned())
        .expect("set once");
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let log = flue.path("hooks.log");

    let op = accepted(&flue.gateway, "busy", &group_body("create", 3, &log)).await;
    let done = ended(&flue.gateway, "busy", &op.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    assert_eq!(
        busy.refused.load(Ordering::SeqCst),
        2,
        "two creates refused"
    );
    assert_eq!(
        done.attempts, 1,
        "the engine tried the refused calls again itself; the operation was not given back"
    );
    assert_eq!(runs(&log, "CREATE"), 3, "each member's hook ran once");
}

#[tokio::test]
async fn a_groups_members_are_planned_and_recorded_a_wave_per_write() {
    const MEMBERS: usize = 20;
    let flue = Flue::start().await;
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let log = flue.path("hooks.log");
    let heads = count_head_writes(&flue).await;

    let op = accepted(&flue.gateway, "wave", &group_body("create", 20, &log)).await;
    let done = ended(&flue.gateway, "wave", &op.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    assert_eq!(runs(&log, "CREATE"), MEMBERS);
    // One write per member to plan it and one to record its end would be 40 and more;
    // planned in one wave, the members cost the ends (the one agent runs its hooks one
    // after another, so they end apart) plus a few writes of the operation itself.
    let writes = heads.load(Ordering::SeqCst);
    assert!(
        writes < 2 * MEMBERS,
        "{writes} stack writes for {MEMBERS} members"
    );
}

#[tokio::test]
async fn a_write_larger_than_the_gateway_takes_is_sent_in_parts_and_the_stack_completes() {
    const MEMBERS: usize = 20;
    // The group's plan (20 units) is larger than one request may be here.
    let flue = Flue::start_with(&["--max-body-bytes", "4096"]).await;
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let log = flue.path("hooks.log");

    let op = accepted(&flue.gateway, "parts", &group_body("create", 20, &log)).await;
    let done = ended(&flue.gateway, "parts", &op.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    assert_eq!(runs(&log, "CREATE"), MEMBERS, "each member's hook ran once");
    let stack = flue
        .client()
        .get_stack(&"parts".parse().expect("id"))
        .await
        .expect("stack");
    assert_eq!(stack.status.to_string(), "CREATE_COMPLETE");
    assert_eq!(stack.state.units.len(), MEMBERS);
}
