//! `GET /metrics`: the gateway's metrics in the OpenMetrics text format
//! ([`crate::metrics`], `docs/metrics.md`).
//!
//! Who reads what: an `operator` token sees every tenant this gateway serves, each series
//! with its `tenant` label; a tenant's `admin` or `viewer` sees only its own tenant's
//! series (the same families, each once); other roles get 403 and no token 401, as on
//! `/v1` ([`crate::auth`]). Under `--insecure-no-auth` it is open, like the rest.

use axum::extract::{Extension, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use flue_proto::auth::Role;

use super::ApiError;
use crate::auth::{Auth, Principal};
use crate::metrics;
use crate::tenants::Tenants;

/// The path Prometheus scrapes.
pub const PATH: &str = "/metrics";

/// `GET /metrics`: every tenant for an operator (or without authentication), the
/// caller's own tenant otherwise.
#[utoipa::path(
    get,
    operation_id = "metrics",
    path = "/metrics",
    tag = "metrics",
    summary = "Metrics in the OpenMetrics text format",
    responses(
        (status = 200, description = "Every tenant's series for an operator, the caller's own tenant's otherwise (docs/metrics.md).", content_type = "application/openmetrics-text", body = String),
    )
)]
pub async fn scrape(
    State(tenants): State<Tenants>,
    Extension(auth): Extension<Auth>,
    principal: Option<Extension<Principal>>,
) -> Result<Response, ApiError> {
    let Some(Extension(principal)) = principal else {
        // The middleware always puts one; without it, nobody was authenticated.
        return Err(ApiError::Unauthorized("no bearer token".to_owned()));
    };
    let whole = auth.is_insecure() || principal.role == Role::Operator;
    let samples = tenants
        .runtimes()
        .iter()
        .filter(|r| whole || principal.tenant.as_ref() == Some(r.id()))
        .map(|r| r.metrics_sample())
        .collect();
    let body = metrics::exposition(samples);
    Ok(([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], body).into_response())
}
