//! `/v1/listener-credentials`: minting NATS credentials for a tenant's event listeners.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use flue_proto::creds::ListenerCredentials;
use flue_proto::event::EVENT_STREAM;
use flue_proto::subject::JETSTREAM_DOMAIN;
use tracing::{info, warn};

use super::error::ApiError;
use crate::service::Service;

/// `POST /v1/listener-credentials` (admin): 201 with a new listener user of the caller's
/// tenant's events account ([`crate::natsauth::perms::listener`]). Each call mints
/// another user; the gateway keeps none of them. 409 with `--insecure-dev-broker`, whose
/// broker checks no user.
#[utoipa::path(
    post,
    operation_id = "create_listener_credentials",
    path = "/v1/listener-credentials",
    tag = "events",
    summary = "Broker credentials for an event listener (admin)",
    responses(
        (status = 201, description = "A new listener user of the tenant's events account, shown once.", body = flue_proto::creds::ListenerCredentials),
        (status = 409, description = "The broker checks no user (`--insecure-dev-broker`).", body = flue_proto::ErrorBody),
    )
)]
pub async fn create(
    State(service): State<Service>,
) -> Result<(StatusCode, Json<ListenerCredentials>), ApiError> {
    let Some(users) = &service.users else {
        return Err(ApiError::Conflict(
            "this gateway runs with --insecure-dev-broker: the broker checks no user, so there are no listener credentials to mint".to_owned(),
        ));
    };
    let creds = users.listener_creds().map_err(|e| {
        warn!(error = %crate::error::chain(&e), "cannot mint listener credentials");
        ApiError::Internal("cannot mint listener credentials".to_owned())
    })?;
    info!(tenant = %service.config.tenant, "listener credentials minted");
    Ok((
        StatusCode::CREATED,
        Json(ListenerCredentials {
            tenant: service.config.tenant.clone(),
            credentials: creds.to_text(),
            js_domain: JETSTREAM_DOMAIN.to_owned(),
            stream: EVENT_STREAM.to_owned(),
        }),
    ))
}
