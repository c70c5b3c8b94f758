//! `/v1/configs`: immutable software configs.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use flue_proto::{Config, ConfigId, ConfigSpec};
use time::OffsetDateTime;
use tracing::info;

use super::error::ApiError;
use super::extract::{JsonBody, PathId};
use crate::configs::{self, Created};
use crate::record::redacted_config;
use crate::service::Service;

/// `POST /v1/configs`: 201 with the new config; 200 with the stored one when the same
/// body was already accepted under that id; 409 when the id holds another config; 413
/// `too_large` when the stored config would not fit in one broker message.
///
/// A stored config with a hidden default always answers 409: comparing bodies would let
/// anyone confirm a guessed secret by the 200.
#[utoipa::path(
    post,
    operation_id = "create_config",
    path = "/v1/configs",
    tag = "configs",
    summary = "Store an immutable software config (engine)",
    request_body = flue_proto::ConfigSpec,
    responses(
        (status = 201, description = "The new config (hidden defaults redacted).", body = flue_proto::Config),
        (status = 200, description = "The same body was already accepted under this id: the stored config.", body = flue_proto::Config),
        (status = 409, description = "The id holds another config (or one with hidden defaults, which are never compared).", body = flue_proto::ErrorBody),
        (status = 413, description = "The stored config would not fit in one broker message.", body = flue_proto::ErrorBody),
        (status = 422, description = "The config is refused (the message names the field).", body = flue_proto::ErrorBody),
    )
)]
pub async fn create(
    State(service): State<Service>,
    JsonBody(spec): JsonBody<ConfigSpec>,
) -> Result<(StatusCode, Json<Config>), ApiError> {
    spec.validate()?;
    let id = spec.id.clone().unwrap_or_else(ConfigId::random);
    let config = spec.into_config(id, OffsetDateTime::now_utc());
    let created = configs::create(
        &service.store.configs,
        &service.broker,
        &service.keys.sealing,
        &service.config.tenant,
        config,
    )
    .await?;
    Ok(match created {
        Created::New(config) => {
            info!(config.id = %config.id, group = %config.group, "config created");
            (StatusCode::CREATED, Json(redacted_config(config)))
        }
        Created::Same(stored) => (StatusCode::OK, Json(redacted_config(stored))),
    })
}

/// `GET /v1/configs/{id}`.
#[utoipa::path(
    get,
    operation_id = "get_config",
    path = "/v1/configs/{id}",
    tag = "configs",
    summary = "Read a config",
    params(("id" = flue_proto::ConfigId, Path, description = "The config's id.")),
    responses(
        (status = 200, description = "The config (hidden defaults redacted).", body = flue_proto::Config),
        (status = 404, description = "No such config.", body = flue_proto::ErrorBody),
    )
)]
pub async fn get(
    State(service): State<Service>,
    PathId(id): PathId<ConfigId>,
) -> Result<Json<Config>, ApiError> {
    service
        .store
        .configs
        .get(&service.config.tenant, &id)
        .await?
        .map(|c| Json(redacted_config(c)))
        .ok_or_else(|| ApiError::NotFound(format!("config {:?} not found", id.as_str())))
}
