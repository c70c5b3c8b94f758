//! The middleware in front of every `/v1` route (and `/metrics`): who is calling (401), may that role call
//! this route (403); then [`Principal`] for the handler, whose tenant picks the runtime
//! that serves it (another tenant's objects: 404).
//!
//! It runs before the body is read, so a caller without a valid token costs the gateway
//! its headers only.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use flue_proto::auth::{Role, TICKET_PARAM, TokenClaims};

use super::ApiError;
use crate::auth::token::{self, TokenError};
use crate::auth::{Auth, INSECURE_TOKEN_ID, Principal, roles};

/// Authenticates and authorises a `/v1` request; other paths pass untouched.
pub async fn authenticate(
    State(auth): State<Auth>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let path = request.uri().path();
    if path != "/v1" && !path.starts_with("/v1/") && path != super::metrics::PATH {
        return Ok(next.run(request).await);
    }
    if auth.is_insecure() {
        request.extensions_mut().insert(Principal {
            tenant: Some(auth.tenant().clone()),
            role: Role::Admin,
            token_id: INSECURE_TOKEN_ID.to_owned(),
        });
        return Ok(next.run(request).await);
    }
    let claims = claims(&auth, &request)?;
    let method = request.method();
    if !roles::permits(claims.role, method, path) && !roles::allowed(method, path).is_empty() {
        return Err(ApiError::Forbidden(format!(
            "role {} may not call {method} {path}",
            claims.role
        )));
    }
    // Another tenant's objects are simply not in the runtime the request goes to
    // (`tenants::dispatch`), so the answer never says whether they exist.
    request.extensions_mut().insert(Principal {
        tenant: claims.tenant.clone(),
        role: claims.role,
        token_id: claims.jti.clone(),
    });
    request.extensions_mut().insert(Verified(claims));
    Ok(next.run(request).await)
}

/// The verified claims behind the request's [`Principal`] (the ticket endpoint copies
/// them); absent under `--insecure-no-auth`.
#[derive(Debug, Clone)]
pub struct Verified(pub TokenClaims);

/// The claims of the request's bearer token, or of its ticket on the event stream.
fn claims(auth: &Auth, request: &Request) -> Result<TokenClaims, ApiError> {
    let claims = match bearer(request.headers())? {
        Some(token) => token::verify_bearer(auth.secret(), token),
        None => match ticket(request) {
            Some(ticket) => token::verify_ticket(auth.secret(), ticket),
            None => {
                return Err(ApiError::Unauthorized(
                    "no bearer token: send `Authorization: Bearer <token>`".to_owned(),
                ));
            }
        },
    }
    .map_err(|e| ApiError::Unauthorized(e.to_string()))?;
    if auth.is_revoked(claims.tenant.as_ref(), &claims.jti) {
        return Err(ApiError::Unauthorized(TokenError::Revoked.to_string()));
    }
    Ok(claims)
}

/// The token of an `Authorization: Bearer` header; an Authorization header of another
/// shape is a 401 of its own (the header is never quoted).
fn bearer(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let malformed =
        || ApiError::Unauthorized("the Authorization header is not `Bearer <token>`".to_owned());
    let value = value.to_str().map_err(|_| malformed())?;
    let (scheme, token) = value.trim().split_once(' ').ok_or_else(malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(malformed());
    }
    Ok(Some(token))
}

/// A `?ticket=` on `GET /v1/events`, the one place a ticket is accepted.
fn ticket(request: &Request) -> Option<&str> {
    if request.method() != Method::GET || request.uri().path() != "/v1/events" {
        return None;
    }
    request.uri().query()?.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        // A ticket is base64url and dots: nothing in it is percent-encoded.
        (name == TICKET_PARAM).then_some(value)
    })
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::HeaderValue;

    use super::*;

    fn request(method: Method, uri: &str) -> Request {
        Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .expect("request")
    }

    #[test]
    fn only_a_bearer_header_gives_a_token() {
        let mut headers = HeaderMap::new();
        assert!(matches!(bearer(&headers), Ok(None)));
        for (value, token) in [("Bearer abc", "abc"), ("bearer  abc ", "abc")] {
            headers.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
            assert_eq!(bearer(&headers).ok().flatten(), Some(token), "{value}");
        }
        for value in ["Basic abc", "Bearer", "Bearer   ", "abc"] {
            headers.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
            let e = bearer(&headers).expect_err(value);
            assert!(!e.to_string().contains("abc"), "the header is quoted: {e}");
        }
    }

    #[test]
    fn a_ticket_is_read_only_on_the_event_stream() {
        let on = request(Method::GET, "/v1/events?after=3&ticket=t.k.n");
        assert_eq!(ticket(&on), Some("t.k.n"));
        for (method, uri) in [
            (Method::GET, "/v1/servers?ticket=t.k.n"),
            (Method::POST, "/v1/events?ticket=t.k.n"),
            (Method::GET, "/v1/events/tickets?ticket=t.k.n"),
        ] {
            assert_eq!(ticket(&request(method, uri)), None, "{uri}");
        }
    }
}
