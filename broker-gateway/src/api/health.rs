//! `/livez`, `/healthz` and `/readyz`: liveness and readiness for orchestrators, for the
//! whole gateway (every tenant runtime at once).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use flue_proto::{BrokerState, Health, HealthStatus, NotReady};

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
    let survey = survey(&tenants);
    Json(Health {
        status: HealthStatus::Ok,
        reason: None,
        ..survey
    })
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

/// `GET /readyz`: 200 while every tenant's broker connections are up and its state
/// streams take writes; 503 with the reason otherwise (a connection down, the broker's
/// JetStream store full, a cluster without quorum, JetStream not answering). Whether the
/// streams take writes is the last background probe's answer
/// ([`crate::tenants::readiness`], every 2 s), so a probe request costs the broker nothing.
#[utoipa::path(
    get,
    operation_id = "readyz",
    path = "/readyz",
    tag = "health",
    summary = "Readiness: every tenant's broker link is up and its state streams take writes",
    responses(
        (status = 200, description = "Every tenant's broker connections are up and its state streams take writes.", body = flue_proto::Health),
        (status = 503, description = "Not ready; `reason` says why (`broker_disconnected`, `store_full`, `no_quorum`, `jetstream_unavailable`, `broker_needs_restart`), naming what cannot take writes but no tenant.", body = flue_proto::Health),
    )
)]
pub async fn readyz(State(tenants): State<Tenants>) -> (StatusCode, Json<Health>) {
    let body = survey(&tenants);
    let status = match body.status {
        HealthStatus::Ok => StatusCode::OK,
        HealthStatus::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(body))
}

/// How every runtime is, and the long polls of all of them: the first reason one is not
/// ready, if any. No tenant is named: these endpoints answer anyone.
fn survey(tenants: &Tenants) -> Health {
    let runtimes = tenants.runtimes();
    let connected = runtimes.iter().all(|r| r.is_connected());
    let long_polls = runtimes.iter().map(|r| r.long_polls()).sum();
    let reason: Option<NotReady> = runtimes
        .iter()
        .find_map(|r| r.not_ready())
        .or_else(|| tenants.broker_not_ready());
    Health {
        status: if reason.is_some() {
            HealthStatus::Unavailable
        } else {
            HealthStatus::Ok
        },
        broker: if connected {
            BrokerState::Connected
        } else {
            BrokerState::Disconnected
        },
        long_polls,
        reason,
    }
}
