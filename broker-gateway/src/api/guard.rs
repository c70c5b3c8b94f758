//! Middleware every request passes through: the whole body read within a bound and a
//! limit, a deadline for the answer to start, a broker check, and panics caught.
//!
//! The body is read here, before any handler, because every route that takes a body
//! takes JSON and reads it whole anyway: reading it up front lets a declared
//! `Content-Length` over the limit be refused before a byte of it is read, and a body
//! that trickles or stalls be answered 408 after `--body-timeout-ms` however slowly it
//! comes, with the API's JSON error bodies.

use std::any::Any;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::error::ApiError;
use crate::link::BrokerLink;

/// How request bodies are read.
#[derive(Debug, Clone, Copy)]
pub struct BodyRules {
    /// Largest body, in bytes.
    pub max_bytes: usize,
    /// Longest time to read a whole body.
    pub timeout: Duration,
}

/// Refuses a declared length over the limit at once (413), reads the whole body within
/// the timeout (408 if it does not come), and hands the handler the body in memory.
pub async fn read_body(
    State(rules): State<BodyRules>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if request.body().size_hint().exact() == Some(0) {
        return Ok(next.run(request).await);
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > rules.max_bytes as u64) {
        return Err(ApiError::BodyTooLarge(rules.max_bytes));
    }
    let (parts, body) = request.into_parts();
    let limited = Limited::new(body, rules.max_bytes);
    let bytes = match tokio::time::timeout(rules.timeout, limited.collect()).await {
        Err(_) => return Err(ApiError::BodyTimeout(millis(rules.timeout))),
        Ok(Err(e)) if e.is::<LengthLimitError>() => {
            return Err(ApiError::BodyTooLarge(rules.max_bytes));
        }
        // The client went away or sent a broken chunked body; it gets what it can.
        Ok(Err(e)) => {
            return Err(ApiError::MalformedJson(format!(
                "cannot read the request body: {e}"
            )));
        }
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    Ok(next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await)
}

/// Answers 503 when the answer has not started within `limit`: a handler stuck on
/// something that never comes. Long polls (at most 60 s) fit under it; an event stream
/// starts at once, and what it streams after is not limited.
pub async fn deadline(
    State(limit): State<Duration>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    tokio::time::timeout(limit, next.run(request))
        .await
        .map_err(|_| ApiError::TookTooLong(limit.as_secs()))
}

/// Answers 503 at once while the broker connection is down, before the handler does
/// anything, so that an outage costs a client no wait and leaves nothing half done.
pub async fn require_broker(
    State(link): State<BrokerLink>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if !link.is_connected() {
        return Err(ApiError::BrokerDown);
    }
    Ok(next.run(request).await)
}

/// The answer to a handler that panicked: a generic JSON 500 (the panic is logged by
/// the runtime's panic hook, not put in the body).
pub fn panic_response(_panic: Box<dyn Any + Send + 'static>) -> Response {
    ApiError::Panic.into_response()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::to_bytes;
    use axum::http::StatusCode;
    use axum::routing::get;
    use flue_proto::ErrorBody;
    use tower::ServiceExt;
    use tower_http::catch_panic::CatchPanicLayer;

    use super::*;

    #[tokio::test]
    async fn a_handler_that_never_answers_gets_503_at_the_deadline() {
        let app = Router::new()
            .route("/stuck", get(std::future::pending::<&'static str>))
            .layer(axum::middleware::from_fn_with_state(
                Duration::from_millis(50),
                deadline,
            ));
        let request = Request::builder()
            .uri("/stuck")
            .body(Body::empty())
            .expect("request");
        let resp = tokio::time::timeout(Duration::from_secs(30), app.oneshot(request))
            .await
            .expect("answered at the deadline")
            .expect("infallible");
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(resp.headers().contains_key(header::RETRY_AFTER));
    }

    async fn explode() -> &'static str {
        panic!("secret internals in a panic message")
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_a_generic_json_500() {
        let app = Router::new()
            .route("/boom", get(explode))
            .layer(CatchPanicLayer::custom(panic_response));
        let request = Request::builder()
            .uri("/boom")
            .body(Body::empty())
            .expect("request");
        let resp = app.oneshot(request).await.expect("infallible");
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let bytes = to_bytes(resp.into_body(), usize::MAX).await.expect("body");
        let body: ErrorBody = serde_json::from_slice(&bytes).expect("an ErrorBody");
        assert_eq!(body.error.code, "internal");
        assert!(!body.error.message.contains("secret"), "{body:?}");
    }
}
