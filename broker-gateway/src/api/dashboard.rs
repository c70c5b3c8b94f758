//! The web dashboard: one page and its script and style, compiled into the binary.
//!
//! The page reads the API like any client (`GET /v1/servers`, `GET /v1/deployments`) and
//! then follows `GET /v1/events` with the browser's `EventSource`, so it needs nothing
//! but this gateway: no build step, no third-party script, no network beyond it.

use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::tenants::Tenants;

const PAGE: &str = include_str!("../../assets/dashboard.html");
const SCRIPT: &str = include_str!("../../assets/dashboard.js");
const STYLE: &str = include_str!("../../assets/dashboard.css");

/// Where the page may load from: this gateway only, and no inline script or style.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// `GET /`: the dashboard page, naming this gateway's tenant.
#[utoipa::path(
    get,
    operation_id = "dashboard",
    path = "/",
    tag = "dashboard",
    summary = "The web dashboard page",
    responses(
        (status = 200, description = "The page (it reads the API with the token the user gives).", content_type = "text/html", body = String),
    )
)]
pub async fn page(State(tenants): State<Tenants>) -> Response {
    // Served before anyone signs in, so it names the default tenant; the token decides
    // which tenant's data it then reads. A tenant id is `[A-Za-z0-9_-]`, so it needs no
    // escaping in HTML.
    let html = PAGE.replace("{{tenant}}", tenants.default_tenant().as_str());
    let mut response = ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    harden(response)
}

/// `GET /assets/{name}`: `dashboard.js` or `dashboard.css`.
#[utoipa::path(
    get,
    operation_id = "dashboard_asset",
    path = "/assets/{name}",
    tag = "dashboard",
    summary = "The dashboard's script or style",
    params(("name" = String, Path, description = "`dashboard.js` or `dashboard.css`.")),
    responses(
        (status = 200, description = "`dashboard.js` or `dashboard.css`.", content((String = "text/javascript"), (String = "text/css"))),
        (status = 404, description = "No such asset.", body = flue_proto::ErrorBody),
    )
)]
pub async fn asset(Path(name): Path<String>) -> Result<Response, ApiError> {
    let (content_type, body) = match name.as_str() {
        "dashboard.js" => ("text/javascript; charset=utf-8", SCRIPT),
        "dashboard.css" => ("text/css; charset=utf-8", STYLE),
        _ => return Err(ApiError::NotFound(format!("no asset {name:?}"))),
    };
    Ok(harden(
        ([(header::CONTENT_TYPE, content_type)], body).into_response(),
    ))
}

/// Headers every dashboard answer carries: always revalidated (a new gateway serves new
/// assets at the same path), never sniffed, never framed, never sending a referrer.
fn harden(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}
