//! `/v1/webhooks`: webhook subscriptions (work in progress).

use axum::extract::State;

use super::error::ApiError;
use crate::service::Service;

/// `POST /v1/webhooks`.
pub async fn create(State(_service): State<Service>) -> Result<(), ApiError> {
    Err(ApiError::NotFound("not yet".into()))
}

/// `GET /v1/webhooks`.
pub async fn list(State(_service): State<Service>) -> Result<(), ApiError> {
    Err(ApiError::NotFound("not yet".into()))
}

/// `GET /v1/webhooks/{id}`.
pub async fn get(State(_service): State<Service>) -> Result<(), ApiError> {
    Err(ApiError::NotFound("not yet".into()))
}

/// `DELETE /v1/webhooks/{id}`.
pub async fn delete(State(_service): State<Service>) -> Result<(), ApiError> {
    Err(ApiError::NotFound("not yet".into()))
}

/// `POST /v1/webhooks/{id}/resume`.
pub async fn resume(State(_service): State<Service>) -> Result<(), ApiError> {
    Err(ApiError::NotFound("not yet".into()))
}
