//! Which role may call which route: the one table every `/v1` request is checked against.
//!
//! Reads (`GET`) are open to `admin`, `engine` and `viewer`; writes belong to the role
//! that owns the object; events belong to every tenant role (the dashboard and the
//! engine follow them too); webhooks to `listener`; tenants to `operator`, who can do
//! nothing inside a tenant but read the metrics (`/metrics`: every tenant for the
//! operator, its own for a tenant's admin or viewer).

use axum::http::Method;
use flue_proto::auth::Role;

const OPERATOR: &[Role] = &[Role::Operator];
const ADMIN: &[Role] = &[Role::Admin];
const ENGINE: &[Role] = &[Role::Engine];
const ENGINE_OR_ADMIN: &[Role] = &[Role::Engine, Role::Admin];
const LISTENER: &[Role] = &[Role::Listener];
const READERS: &[Role] = &[Role::Admin, Role::Engine, Role::Viewer];
const EVENT_READERS: &[Role] = &[Role::Admin, Role::Engine, Role::Listener, Role::Viewer];
/// `/metrics`: the operator sees every tenant, a tenant's admin and viewer their own.
const METRICS_READERS: &[Role] = &[Role::Operator, Role::Admin, Role::Viewer];

/// The roles that may call `method path` (empty: no `/v1` route is known by that shape,
/// so the router answers it).
pub fn allowed(method: &Method, path: &str) -> &'static [Role] {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let get = method == Method::GET || method == Method::HEAD;
    match (method.as_str(), segments.as_slice()) {
        (_, ["metrics"]) if get => METRICS_READERS,
        (_, ["v1", "tenants", ..]) => OPERATOR,
        ("POST", ["v1", "tokens"]) | ("DELETE", ["v1", "tokens", _]) => ADMIN,
        ("POST", ["v1", "servers"]) | ("DELETE", ["v1", "servers", _]) => ADMIN,
        // Credentials (server rotation, listener credentials) are the admin's.
        ("POST", ["v1", "servers", _, "credentials"]) => ADMIN,
        (_, ["v1", "listener-credentials"]) => ADMIN,
        // Listeners' consumers on the event stream: listed and deleted by the admin.
        (_, ["v1", "listener-consumers", ..]) => ADMIN,
        // Agent builds are signed offline; uploading one changes nothing by itself.
        ("PUT", ["v1", "agent-builds", _, "chunks", _]) => ENGINE_OR_ADMIN,
        ("POST", ["v1", "configs"]) | ("POST", ["v1", "deployments"]) => ENGINE,
        ("PUT" | "DELETE", ["v1", "stacks", _]) => ENGINE,
        // A PaaS layer may run stacks with an admin token, as an engine may.
        ("POST", ["v1", "stacks", _, "operations"]) => ENGINE_OR_ADMIN,
        // An export holds hidden values (sealed): not for viewers.
        ("GET", ["v1", "stacks", _, "export"])
        | ("POST", ["v1", "stacks", _, "abandon" | "adopt"]) => ENGINE_OR_ADMIN,
        ("GET", ["v1", "events"]) | ("POST", ["v1", "events", "tickets"]) => EVENT_READERS,
        (_, ["v1", "webhooks", ..]) => LISTENER,
        (_, ["v1", ..]) if get => READERS,
        _ => &[],
    }
}

/// Whether `role` may call `method path`.
pub fn permits(role: Role, method: &Method, path: &str) -> bool {
    allowed(method, path).contains(&role)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_reaches_only_its_routes() {
        let cases: &[(Method, &str, &[Role])] = &[
            (Method::POST, "/v1/tenants", &[Role::Operator]),
            (Method::POST, "/v1/tenants/t1/tokens", &[Role::Operator]),
            (Method::POST, "/v1/tokens", &[Role::Admin]),
            (Method::DELETE, "/v1/tokens/abc", &[Role::Admin]),
            (Method::POST, "/v1/servers", &[Role::Admin]),
            (Method::DELETE, "/v1/servers/web1", &[Role::Admin]),
            (Method::POST, "/v1/configs", &[Role::Engine]),
            (
                Method::PUT,
                "/v1/agent-builds/abc/chunks/0",
                &[Role::Engine, Role::Admin],
            ),
            (Method::POST, "/v1/deployments", &[Role::Engine]),
            (Method::PUT, "/v1/stacks/s", &[Role::Engine]),
            (Method::DELETE, "/v1/stacks/s", &[Role::Engine]),
            (
                Method::POST,
                "/v1/stacks/s/operations",
                &[Role::Admin, Role::Engine],
            ),
            (
                Method::GET,
                "/v1/stacks/s/export",
                &[Role::Admin, Role::Engine],
            ),
            (
                Method::POST,
                "/v1/stacks/s/abandon",
                &[Role::Admin, Role::Engine],
            ),
            (
                Method::POST,
                "/v1/stacks/s/adopt",
                &[Role::Admin, Role::Engine],
            ),
            (
                Method::GET,
                "/v1/deployments/d",
                &[Role::Admin, Role::Engine, Role::Viewer],
            ),
            (
                Method::GET,
                "/v1/events",
                &[Role::Admin, Role::Engine, Role::Listener, Role::Viewer],
            ),
            (Method::POST, "/v1/webhooks", &[Role::Listener]),
            (Method::GET, "/v1/listener-consumers", &[Role::Admin]),
            (Method::DELETE, "/v1/listener-consumers/c", &[Role::Admin]),
            (Method::GET, "/v1/webhooks/w", &[Role::Listener]),
            (
                Method::GET,
                "/metrics",
                &[Role::Operator, Role::Admin, Role::Viewer],
            ),
        ];
        for (method, path, roles) in cases {
            for role in Role::ALL {
                assert_eq!(
                    permits(role, method, path),
                    roles.contains(&role),
                    "{role} {method} {path}"
                );
            }
        }
    }
}
