//! `/livez`, `/healthz` and `/readyz`: liveness and readiness for orchestrators, for the
//! whole gateway (every tenant runtime at once).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use flue_proto::{BrokerState, Health, HealthStatus};

use crate::tenants::Tenants;

/// `GET /livez` (and its alias `/healthz`): 200 while the process serves HTTP, whatever
/// the broker does; restarting the gateway would not bring the broker back.
#[utoipa::path(
    get,
    operation_id = "livez",
    path = "/livez",
    tag = "health",
    summary = "Liveness: 200 while the process serves HTTP",
    responses(
        (status = 200, description = "The gateway serves HTTP (whatever its broker link does).", body = flue_proto::Health),
    )
)]
pub async fn livez(State(tenants): State<Tenants>) -> Json<Health> {
    let (connected, long_polls) = survey(&tenants);
    Json(health(HealthStatus::Ok, connected, long_polls))
}

/// `GET /healthz`: the same as [`livez`], under the name some probes expect.
#[utoipa::path(
    get,
    operation_id = "healthz",
    path = "/healthz",
    tag = "health",
    summary = "Liveness (alias of /livez)",
    responses(
        (status = 200, description = "The gateway serves HTTP (whatever its broker link does).", body = flue_proto::Health),
    )
)]
pub async fn healthz(state: State<Tenants>) -> Json<Health> {
    livez(state).await
}

/// `GET /readyz`: 200 while every tenant's broker connections are up, 503 while one is
/// not (that tenant's calls that need the broker answer 503 then too).
#[utoipa::path(
    get,
    operation_id = "readyz",
    path = "/readyz",
    tag = "health",
    summary = "Readiness: every tenant's broker link is up",
    responses(
        (status = 200, description = "Every tenant's broker connections are up.", body = flue_proto::Health),
        (status = 503, description = "A tenant's broker connections are down.", body = flue_proto::Health),
    )
)]
pub async fn readyz(State(tenants): State<Tenants>) -> (StatusCode, Json<Health>) {
    let (connected, long_polls) = survey(&tenants);
    if connected {
        let body = health(HealthStatus::Ok, connected, long_polls);
        (StatusCode::OK, Json(body))
    } else {
        let body = health(HealthStatus::Unavailable, connected, long_polls);
        (StatusCode::SERVICE_UNAVAILABLE, Json(body))
    }
}

/// Whether every runtime is connected, and the long polls of all of them. No tenant is
/// named: these endpoints answer anyone.
fn survey(tenants: &Tenants) -> (bool, usize) {
    let runtimes = tenants.runtimes();
    let connected = runtimes.iter().all(|r| r.is_ready());
    let long_polls = runtimes.iter().map(|r| r.long_polls()).sum();
    (connected, long_polls)
}

fn health(status: HealthStatus, connected: bool, long_polls: usize) -> Health {
    Health {
        status,
        broker: if connected {
            BrokerState::Connected
        } else {
            BrokerState::Disconnected
        },
        long_polls,
    }
}
