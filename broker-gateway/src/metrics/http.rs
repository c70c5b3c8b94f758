//! HTTP requests of a tenant's API counted by route template, method and status class.
//!
//! The route is the router's template (`/v1/deployments/{id}`), never the path asked for,
//! so the series are bounded by the routes the gateway has; a request no route matched is
//! not counted. One read lock and a map lookup per request, no await under it; the write
//! lock is taken once per new (route, method, class).

use std::collections::HashMap;
use std::sync::RwLock;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::metrics::counter::Counter;

use super::TenantMetrics;

/// One series: route template, method, status class.
pub(super) type Key = (String, &'static str, &'static str);

/// The requests counted so far.
#[derive(Debug, Default)]
pub(super) struct Requests {
    by_key: RwLock<HashMap<Key, Counter>>,
}

impl Requests {
    fn count(&self, key: Key) {
        if let Some(c) = self.read().get(&key) {
            c.inc();
            return;
        }
        let mut map = self.by_key.write().unwrap_or_else(|p| p.into_inner());
        map.entry(key).or_default().inc();
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Key, Counter>> {
        self.by_key.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Every series with its count, sorted (a stable exposition).
    pub(super) fn snapshot(&self) -> Vec<(Key, u64)> {
        let mut all: Vec<(Key, u64)> = self
            .read()
            .iter()
            .map(|(k, c)| (k.clone(), c.get()))
            .collect();
        all.sort();
        all
    }
}

/// A method as a label value: the standard ones by name, any other as `other`.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// A status as its class.
fn class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// Middleware (a route layer of the tenant's router): counts the request once its answer
/// is ready (a stream's answer counts when its headers go, not when it ends).
pub async fn count(State(metrics): State<TenantMetrics>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let method = method_label(request.method());
    let response = next.run(request).await;
    if let Some(route) = route {
        let status = class(response.status().as_u16());
        metrics.inner.http.count((route, method, status));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_route_method_and_class_is_one_series() {
        let r = Requests::default();
        for status in [200, 202, 404, 503] {
            r.count(("/v1/deployments/{id}".to_owned(), "GET", class(status)));
        }
        r.count((
            "/v1/deployments/{id}".to_owned(),
            method_label(&Method::from_bytes(b"BREW").expect("method")),
            "4xx",
        ));
        let got: Vec<(Key, u64)> = r.snapshot();
        let key = |m, c| ("/v1/deployments/{id}".to_owned(), m, c);
        assert_eq!(
            got,
            vec![
                (key("GET", "2xx"), 2),
                (key("GET", "4xx"), 1),
                (key("GET", "5xx"), 1),
                (key("other", "4xx"), 1),
            ]
        );
    }
}
