//! `/v1/webhooks`: webhook subscriptions (create, list, read, delete, resume).
//!
//! No answer ever carries a subscription's secret.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use flue_proto::WebhookId;
use flue_proto::webhook::{CreateWebhook, Webhook};

use super::error::ApiError;
use super::extract::{JsonBody, PathId, PathIdKind};
use crate::service::Service;
use crate::webhooks::WebhookError;

impl PathIdKind for WebhookId {
    const WHAT: &'static str = "webhook id";
}

impl From<WebhookError> for ApiError {
    fn from(e: WebhookError) -> Self {
        match e {
            e @ (WebhookError::Url(_)
            | WebhookError::Secret(_)
            | WebhookError::StandardSecret(_)) => ApiError::InvalidInput(e.to_string()),
            WebhookError::Store(e) => ApiError::Store(e),
            WebhookError::Broker(e) => ApiError::Broker(e),
        }
    }
}

fn not_found(id: &WebhookId) -> ApiError {
    ApiError::NotFound(format!("webhook {:?} not found", id.as_str()))
}

/// `POST /v1/webhooks`: 201 with the new subscription; 422 naming the field when the
/// url or the secret is refused.
#[utoipa::path(
    post,
    operation_id = "create_webhook",
    path = "/v1/webhooks",
    tag = "webhooks",
    summary = "Subscribe a URL to events (listener)",
    request_body = flue_proto::webhook::CreateWebhook,
    responses(
        (status = 201, description = "The new subscription.", body = flue_proto::webhook::Webhook),
        (status = 422, description = "The url or the secret is refused (the message names the field).", body = flue_proto::ErrorBody),
    )
)]
pub async fn create(
    State(service): State<Service>,
    JsonBody(body): JsonBody<CreateWebhook>,
) -> Result<(StatusCode, Json<Webhook>), ApiError> {
    let sub = service.webhooks.create(body).await?;
    Ok((StatusCode::CREATED, Json(sub.view())))
}

/// `GET /v1/webhooks`: every subscription, oldest first.
#[utoipa::path(
    get,
    operation_id = "list_webhooks",
    path = "/v1/webhooks",
    tag = "webhooks",
    summary = "Every webhook subscription (listener)",
    responses(
        (status = 200, description = "Oldest first.", body = Vec<flue_proto::webhook::Webhook>),
    )
)]
pub async fn list(State(service): State<Service>) -> Result<Json<Vec<Webhook>>, ApiError> {
    let subs = service.webhooks.list().await?;
    Ok(Json(subs.iter().map(|s| s.view()).collect()))
}

/// `GET /v1/webhooks/{id}`: status, counters and, when parked, why.
#[utoipa::path(
    get,
    operation_id = "get_webhook",
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    summary = "Read a subscription: status, counters, why parked",
    params(("id" = flue_proto::WebhookId, Path, description = "The subscription's id.")),
    responses(
        (status = 200, description = "The subscription.", body = flue_proto::webhook::Webhook),
        (status = 404, description = "No such subscription.", body = flue_proto::ErrorBody),
    )
)]
pub async fn get(
    State(service): State<Service>,
    PathId(id): PathId<WebhookId>,
) -> Result<Json<Webhook>, ApiError> {
    match service.webhooks.get(&id).await? {
        Some(sub) => Ok(Json(sub.view())),
        None => Err(not_found(&id)),
    }
}

/// `DELETE /v1/webhooks/{id}`: 204; stops its delivery and removes its consumer.
#[utoipa::path(
    delete,
    operation_id = "delete_webhook",
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    summary = "Delete a subscription",
    params(("id" = flue_proto::WebhookId, Path, description = "The subscription's id.")),
    responses(
        (status = 204, description = "Its delivery stopped and its consumer is gone."),
        (status = 404, description = "No such subscription.", body = flue_proto::ErrorBody),
    )
)]
pub async fn delete(
    State(service): State<Service>,
    PathId(id): PathId<WebhookId>,
) -> Result<StatusCode, ApiError> {
    if service.webhooks.delete(&id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&id))
    }
}

/// `POST /v1/webhooks/{id}/resume`: a parked subscription becomes active and delivery
/// restarts at the event it could not deliver; an active one is left as it is.
#[utoipa::path(
    post,
    operation_id = "resume_webhook",
    path = "/v1/webhooks/{id}/resume",
    tag = "webhooks",
    summary = "Resume a parked subscription",
    params(("id" = flue_proto::WebhookId, Path, description = "The subscription's id.")),
    responses(
        (status = 200, description = "Active again; delivery restarts at the event it could not deliver.", body = flue_proto::webhook::Webhook),
        (status = 404, description = "No such subscription.", body = flue_proto::ErrorBody),
    )
)]
pub async fn resume(
    State(service): State<Service>,
    PathId(id): PathId<WebhookId>,
) -> Result<Json<Webhook>, ApiError> {
    match service.webhooks.resume(&id).await? {
        Some(sub) => Ok(Json(sub.view())),
        None => Err(not_found(&id)),
    }
}
