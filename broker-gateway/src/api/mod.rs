//! The HTTP API: routes, and the JSON answers for unknown routes and methods.

pub(crate) mod authenticate;
pub(crate) mod builds;
pub(crate) mod configs;
pub(crate) mod dashboard;
pub mod deployments;
pub(crate) mod error;
pub mod events;
pub(crate) mod extract;
pub(crate) mod guard;
pub(crate) mod health;
pub(crate) mod listeners;
pub(crate) mod listing;
pub(crate) mod metrics;
pub mod openapi;
pub(crate) mod operations;
pub(crate) mod poll;
pub(crate) mod servers;
pub mod stacks;
pub(crate) mod tenants;
pub(crate) mod tokens;
pub(crate) mod transfer;
pub(crate) mod webhooks;

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Extension};
use axum::http::{Request, Uri};
use axum::middleware;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use error::ApiError;

use crate::auth::Auth;
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
    let (shared, _) = shared_routes().split_for_parts();
    shared
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
            authenticate::authenticate,
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

/// The routes every tenant shares: health, the dashboard (the same for every tenant, and
/// loaded before anyone signs in), this document, the tenant API and the metrics.
pub(crate) fn shared_routes() -> OpenApiRouter<Tenants> {
    OpenApiRouter::new()
        .routes(routes!(health::livez))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(dashboard::page))
        .routes(routes!(dashboard::asset))
        .routes(routes!(openapi::serve))
        .routes(routes!(tenants::create, tenants::list))
        .routes(routes!(tokens::tenant_token))
        .routes(routes!(metrics::scrape))
}

/// One tenant's `/v1` routes (and its Heat polling servers' secret URLs), documented.
pub(crate) fn tenant_routes() -> OpenApiRouter<Service> {
    OpenApiRouter::new()
        .routes(routes!(configs::create))
        .routes(routes!(configs::get))
        .routes(routes!(servers::register, servers::list))
        .routes(routes!(servers::get, servers::deregister))
        .routes(routes!(servers::deployments))
        .routes(routes!(servers::rotate_credentials))
        .routes(routes!(builds::put_chunk))
        .routes(routes!(deployments::create, deployments::list))
        .routes(routes!(deployments::get))
        .routes(routes!(events::stream))
        .routes(routes!(tokens::create_ticket))
        .routes(routes!(listeners::create))
        .routes(routes!(listeners::list_consumers))
        .routes(routes!(listeners::delete_consumer))
        .routes(routes!(tokens::create_token))
        .routes(routes!(tokens::revoke_token))
        .routes(routes!(webhooks::create, webhooks::list))
        .routes(routes!(webhooks::get, webhooks::delete))
        .routes(routes!(webhooks::resume))
        .routes(routes!(stacks::list))
        .routes(routes!(poll::metadata))
        .routes(routes!(poll::signal))
        .routes(routes!(stacks::get, stacks::put, stacks::delete))
        .routes(routes!(operations::submit, operations::list))
        .routes(routes!(operations::get))
        .routes(routes!(stacks::units))
        .routes(routes!(transfer::export))
        .routes(routes!(transfer::abandon))
        .routes(routes!(transfer::adopt))
}

/// One tenant's routes: its `/v1` API (the dashboard page and its assets are served by
/// [`router`]).
///
/// Every route under `/v1` needs the tenant's broker connections and answers 503 at once
/// while they are away; the dashboard does not.
pub fn tenant_router(service: Service, link: BrokerLink, waiters: Waiters) -> Router {
    let (v1, _) = tenant_routes().split_for_parts();
    let v1 = v1
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
