//! The HTTP API: routes, and the JSON answers for unknown routes and methods.

pub mod configs;
pub mod dashboard;
pub mod deployments;
pub mod error;
pub mod events;
pub mod extract;
pub mod listing;
pub mod servers;
pub mod stacks;
pub mod webhooks;

use axum::extract::DefaultBodyLimit;
use axum::http::Uri;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use tower_http::trace::TraceLayer;

pub use error::ApiError;

use crate::service::Service;

/// The whole application, ready to serve or to call with `tower::ServiceExt::oneshot`.
pub fn router(service: Service) -> Router {
    let body_limit = service.config.max_body_bytes;
    Router::new()
        .route("/", get(dashboard::page))
        .route("/assets/{name}", get(dashboard::asset))
        .route("/healthz", get(healthz))
        .route("/v1/configs", post(configs::create))
        .route("/v1/configs/{id}", get(configs::get))
        .route("/v1/servers", post(servers::register).get(servers::list))
        .route(
            "/v1/servers/{id}",
            get(servers::get).delete(servers::deregister),
        )
        .route("/v1/servers/{id}/deployments", get(servers::deployments))
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
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(TraceLayer::new_for_http())
        .with_state(service)
}

/// `GET /healthz`.
async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn unknown_route(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {}", uri.path()))
}

async fn wrong_method() -> ApiError {
    ApiError::MethodNotAllowed
}
