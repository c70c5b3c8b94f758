//! `/livez`, `/healthz` and `/readyz`: liveness and readiness for orchestrators.

use axum::Json;
use axum::extract::Extension;
use axum::http::StatusCode;
use flue_proto::{BrokerState, Health, HealthStatus};

use crate::link::BrokerLink;
use crate::waiters::Waiters;

/// `GET /livez` (and its alias `/healthz`): 200 while the process serves HTTP, whatever
/// the broker does; restarting the gateway would not bring the broker back.
pub async fn livez(
    Extension(link): Extension<BrokerLink>,
    Extension(waiters): Extension<Waiters>,
) -> Json<Health> {
    Json(health(&link, &waiters, HealthStatus::Ok))
}

/// `GET /readyz`: 200 while the broker connection is up, 503 while it is not (calls that
/// need it answer 503 then too).
pub async fn readyz(
    Extension(link): Extension<BrokerLink>,
    Extension(waiters): Extension<Waiters>,
) -> (StatusCode, Json<Health>) {
    if link.is_connected() {
        (
            StatusCode::OK,
            Json(health(&link, &waiters, HealthStatus::Ok)),
        )
    } else {
        let body = health(&link, &waiters, HealthStatus::Unavailable);
        (StatusCode::SERVICE_UNAVAILABLE, Json(body))
    }
}

fn health(link: &BrokerLink, waiters: &Waiters, status: HealthStatus) -> Health {
    Health {
        status,
        broker: if link.is_connected() {
            BrokerState::Connected
        } else {
            BrokerState::Disconnected
        },
        long_polls: waiters.waiting(),
    }
}
