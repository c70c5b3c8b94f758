//! The HTTP API: routes, and the JSON answers for unknown routes and methods.

pub mod configs;
pub mod dashboard;
pub mod deployments;
pub mod error;
pub mod events;
pub mod extract;
pub mod guard;
pub mod health;
pub mod listing;
pub mod servers;
pub mod stacks;
pub mod webhooks;

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Extension};
use axum::http::Uri;
use axum::middleware;
use axum::routing::{get, post};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

pub use error::ApiError;

use crate::link::BrokerLink;
use crate::service::Service;
use crate::waiters::Waiters;

/// The whole application, ready to serve or to call with `tower::ServiceExt::oneshot`.
///
/// Every route under `/v1` needs the broker and answers 503 at once while it is away;
/// the dashboard and the health endpoints do not.
pub fn router(service: Service, link: BrokerLink, waiters: Waiters) -> Router {
    let config = &service.config;
    let body = guard::BodyRules {
        max_bytes: config.max_body_bytes,
        timeout: Duration::from_millis(config.body_timeout_ms),
    };
    let request_timeout = Duration::from_secs(config.request_timeout_secs);
    let v1 = Router::new()
        .route("/v1/configs", post(configs::create))
        .route("/v1/configs/{id}", get(configs::get))
        .route("/v1/servers", post(servers::register).get(servers::list))
        .route(
            "/v1/servers/{id}",
            get(servers::get).delete(servers::deregister),
        )
        .route("/v1/servers/{id}/deployments", get(servers::deployments))
        .route(
            "/v1/servers/{id}/credentials",
            post(servers::rotate_credentials),
        )
        .route(
            "/v1/deployments",
            post(deployments::create).get(deployments::list),
        )
        .route("/v1/events", get(events::stream))
        .route("/v1/webhooks", post(webhooks::create).get(webhooks::list))
        .route(
            "/v1/webhooks/{id}",
            get(webhooks::get).delete(webhooks::delete),
        )
        .route("/v1/webhooks/{id}/resume", post(webhooks::resume))
        .route("/v1/deployments/{id}", get(deployments::get))
        .route("/v1/stacks", get(stacks::list))
        .route(
            "/v1/stacks/{id}",
            get(stacks::get).put(stacks::put).delete(stacks::delete),
        )
        .route_layer(middleware::from_fn_with_state(
            link.clone(),
            guard::require_broker,
        ));
    Router::new()
        .route("/", get(dashboard::page))
        .route("/assets/{name}", get(dashboard::asset))
        .route("/livez", get(health::livez))
        .route("/healthz", get(health::livez))
        .route("/readyz", get(health::readyz))
        .merge(v1)
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(body.max_bytes))
        .layer(middleware::from_fn_with_state(
            request_timeout,
            guard::deadline,
        ))
        .layer(middleware::from_fn_with_state(body, guard::read_body))
        .layer(Extension(waiters))
        .layer(Extension(link))
        .layer(CatchPanicLayer::custom(guard::panic_response))
        .layer(TraceLayer::new_for_http())
        .with_state(service)
}

async fn unknown_route(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {}", uri.path()))
}

async fn wrong_method() -> ApiError {
    ApiError::MethodNotAllowed
}
