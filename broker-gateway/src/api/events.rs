//! `GET /v1/events`: the event stream as Server-Sent Events (work in progress).

use axum::extract::State;

use super::error::ApiError;
use crate::service::Service;

/// `GET /v1/events`.
pub async fn stream(State(_service): State<Service>) -> Result<(), ApiError> {
    Err(ApiError::NotFound("not yet".into()))
}
