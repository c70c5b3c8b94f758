//! `GET /metrics`: the gateway's metrics in the OpenMetrics text format, or in the
//! classic Prometheus text format when the `Accept` header prefers `text/plain`
//! ([`crate::metrics`], `docs/metrics.md`).
//!
//! Who reads what: an `operator` token sees every tenant this gateway serves, each series
//! with its `tenant` label; a tenant's `admin` or `viewer` sees only its own tenant's
//! series (the same families, each once); other roles get 403 and no token 401, as on
//! `/v1` ([`crate::auth`]). Under `--insecure-no-auth` it is open, like the rest.

use axum::extract::{Extension, State};
use axum::http::{HeaderMap, header};
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
    summary = "Metrics in the OpenMetrics or the classic Prometheus text format",
    responses(
        (status = 200, description = "Every tenant's series for an operator, the caller's own tenant's otherwise (docs/metrics.md): OpenMetrics text by default, the classic Prometheus text format (0.0.4) when `Accept` prefers `text/plain`.", content(
            (String = "application/openmetrics-text; version=1.0.0; charset=utf-8"),
            (String = "text/plain; version=0.0.4; charset=utf-8"),
        )),
    )
)]
pub async fn scrape(
    State(tenants): State<Tenants>,
    Extension(auth): Extension<Auth>,
    principal: Option<Extension<Principal>>,
    headers: HeaderMap,
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
    let format = negotiate(
        headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok()),
    );
    let body = format.exposition(samples);
    Ok(([(header::CONTENT_TYPE, format.content_type())], body).into_response())
}

/// The format `Accept` prefers: the acceptable media range of highest `q` among
/// `application/openmetrics-text` and `text/plain` (any version: a classic parser reads
/// 0.0.4), OpenMetrics on a tie, without the header, for `*/*` and for anything else.
fn negotiate<'a>(accept: impl Iterator<Item = &'a str>) -> metrics::Format {
    let (mut openmetrics, mut classic) = (None::<f32>, None::<f32>);
    for range in accept.flat_map(|v| v.split(',')) {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .map_or(Some(1.0), |(_, v)| v.trim().parse::<f32>().ok())
            .filter(|q| *q > 0.0);
        let Some(q) = q else { continue };
        let slot = match media.as_str() {
            "application/openmetrics-text" => &mut openmetrics,
            "text/plain" => &mut classic,
            _ => continue,
        };
        *slot = Some(slot.map_or(q, |best| best.max(q)));
    }
    match (openmetrics, classic) {
        (Some(om), Some(c)) if c > om => metrics::Format::Classic,
        (None, Some(_)) => metrics::Format::Classic,
        _ => metrics::Format::OpenMetrics,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics::Format::{Classic, OpenMetrics};

    #[test]
    fn accept_chooses_the_classic_format_only_when_it_prefers_text_plain() {
        for (accept, want) in [
            (None, OpenMetrics),
            (Some("*/*"), OpenMetrics),
            (Some("application/json"), OpenMetrics),
            (Some("text/plain"), Classic),
            (Some("text/plain;version=0.0.4"), Classic),
            (Some("TEXT/PLAIN; version=0.0.4; q=0.9, */*;q=0.1"), Classic),
            (Some("application/openmetrics-text"), OpenMetrics),
            (
                Some("text/plain;q=0, application/openmetrics-text;q=0.1"),
                OpenMetrics,
            ),
            // What Prometheus sends: OpenMetrics first, classic as a fallback.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
                ),
                OpenMetrics,
            ),
            (
                Some("application/openmetrics-text;q=0.2,text/plain;q=0.3"),
                Classic,
            ),
        ] {
            assert_eq!(negotiate(accept.into_iter()), want, "{accept:?}");
        }
    }
}
