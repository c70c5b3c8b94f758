//! The HTTP API: routes, and the JSON answers for unknown routes and methods.

pub mod configs;
pub mod dashboard;
pub mod deployments;
pub mod error;
pub mod events;
pub mod extract;
pub mod guard;
pub mod health;
pub mod listeners;
pub mod listing;
pub mod metrics;
pub mod operations;
pub mod poll;
pub mod servers;
pub mod stacks;
pub mod tenants;
pub mod transfer;
pub mod webhooks;

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Extension};
use axum::http::{Request, Uri};
use axum::middleware;
use axum::routing::{delete, get, post, put};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

pub use error::ApiError;

use crate::auth::{self, Auth};
use crate::link::BrokerLink;
use crate::service::Service;
use crate::tenants::Tenants;
use crate::waiters::Waiters;

/// The whole application, ready to serve or to call with `tower::ServiceExt::oneshot`:
/// the health endpoints (every tenant at once), the tenant API, and everything else
/// handed to the runtime of the caller's tenant ([`tenant_router`]).
///
/// Every `/v1` request needs a token (401 / 403 from [`crate::auth`], before the body is
/// read), whose tenant picks the runtime; every request's body is read within its bounds
/// here, and its answer must start within the request timeout, whichever tenant it is
/// for. The dashboard page and the health endpoints need no token.
pub fn router(tenants: Tenants, auth: Auth) -> Router {
    let config = tenants.config();
    let body = guard::BodyRules {
        max_bytes: config.max_body_bytes,
        timeout: Duration::from_millis(config.body_timeout_ms),
    };
    let request_timeout = Duration::from_secs(config.request_timeout_secs);
    Router::new()
        .route("/livez", get(health::livez))
        .route("/healthz", get(health::livez))
        .route("/readyz", get(health::readyz))
        // The same for every tenant, and loaded before anyone signs in.
        .route("/", get(dashboard::page))
        .route("/assets/{name}", get(dashboard::asset))
        .route("/v1/tenants", post(tenants::create).get(tenants::list))
        .route("/v1/tenants/{tenant}/tokens", post(auth::api::tenant_token))
        .route(metrics::PATH, get(metrics::scrape))
        .fallback(tenants::dispatch)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(body.max_bytes))
        .layer(middleware::from_fn_with_state(
            request_timeout,
            guard::deadline,
        ))
        .layer(middleware::from_fn_with_state(body, guard::read_body))
        .layer(middleware::from_fn_with_state(
            auth.clone(),
            auth::authenticate,
        ))
        .layer(Extension(auth))
        .layer(CatchPanicLayer::custom(guard::panic_response))
        // The span names the path only (a query may carry an event-stream ticket), and a
        // secret URL's path without its secret.
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &Request<Body>| {
                let path = flue_proto::poll::redact_path(request.uri().path());
                tracing::debug_span!("request", method = %request.method(), path = %path)
            }),
        )
        .with_state(tenants)
}

/// One tenant's routes: its `/v1` API (the dashboard page and its assets are served by
/// [`router`]).
///
/// Every route under `/v1` needs the tenant's broker connections and answers 503 at once
/// while they are away; the dashboard does not.
pub fn tenant_router(service: Service, link: BrokerLink, waiters: Waiters) -> Router {
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
        .route("/v1/events/tickets", post(auth::api::create_ticket))
        .route("/v1/listener-credentials", post(listeners::create))
        .route("/v1/tokens", post(auth::api::create_token))
        .route("/v1/tokens/{id}", delete(auth::api::revoke_token))
        .route("/v1/webhooks", post(webhooks::create).get(webhooks::list))
        .route(
            "/v1/webhooks/{id}",
            get(webhooks::get).delete(webhooks::delete),
        )
        .route("/v1/webhooks/{id}/resume", post(webhooks::resume))
        .route("/v1/deployments/{id}", get(deployments::get))
        .route("/v1/stacks", get(stacks::list))
        .route(
            "/heat/{tenant}/servers/{id}/metadata/{secret}",
            get(poll::metadata),
        )
        .route(
            "/heat/{tenant}/deployments/{id}/signal/{secret}",
            put(poll::signal).post(poll::signal),
        )
        .route(
            "/v1/stacks/{id}",
            get(stacks::get).put(stacks::put).delete(stacks::delete),
        )
        .route(
            "/v1/stacks/{id}/operations",
            post(operations::submit).get(operations::list),
        )
        .route("/v1/stacks/{id}/operations/{op}", get(operations::get))
        .route("/v1/stacks/{id}/units", get(stacks::units))
        .route("/v1/stacks/{id}/export", get(transfer::export))
        .route("/v1/stacks/{id}/abandon", post(transfer::abandon))
        .route("/v1/stacks/{id}/adopt", post(transfer::adopt))
        .route_layer(middleware::from_fn_with_state(
            link.clone(),
            guard::require_broker,
        ))
        // Outermost, so that the 503s of a broker away are counted too.
        .route_layer(middleware::from_fn_with_state(
            service.events.metrics().clone(),
            crate::metrics::http::count,
        ));
    Router::new()
        .merge(v1)
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(Extension(waiters))
        .with_state(service)
}

pub(crate) async fn unknown_route(uri: Uri) -> ApiError {
    // A secret URL gone wrong may still carry its secret: never quoted.
    if uri.path().starts_with(flue_proto::poll::PATH_PREFIX) {
        return ApiError::NotFound("not found".to_owned());
    }
    ApiError::NotFound(format!("no route for {}", uri.path()))
}

async fn wrong_method() -> ApiError {
    ApiError::MethodNotAllowed
}
