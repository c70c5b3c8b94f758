//! Extractors whose rejections are [`ApiError`]s: a JSON body and a validated id in the path.

use std::str::FromStr;

use axum::extract::rejection::{BytesRejection, FailedToBufferBody, JsonRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use flue_proto::{ConfigId, DeploymentId, IdError, ServerId, StackId};
use serde::de::DeserializeOwned;

use super::error::ApiError;
use crate::service::Service;

/// A JSON body; every failure becomes the contract's error code.
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Service> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, service: &Service) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, service).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(map_rejection(rejection, service.config.max_body_bytes)),
        }
    }
}

/// Maps axum's JSON rejections to the contract: syntax → 400, data → 422 with serde's
/// message, content type → 415, length → 413.
pub(crate) fn map_rejection(rejection: JsonRejection, limit: usize) -> ApiError {
    match rejection {
        JsonRejection::JsonDataError(e) => ApiError::InvalidBody(inner_text(&e)),
        JsonRejection::JsonSyntaxError(e) => ApiError::MalformedJson(inner_text(&e)),
        JsonRejection::MissingJsonContentType(_) => ApiError::UnsupportedMediaType,
        JsonRejection::BytesRejection(BytesRejection::FailedToBufferBody(
            FailedToBufferBody::LengthLimitError(_),
        )) => ApiError::BodyTooLarge(limit),
        other => ApiError::MalformedJson(format!(
            "cannot read the request body: {}",
            inner_text(&other)
        )),
    }
}

/// The cause under axum's fixed prefix, i.e. serde's own message.
pub(crate) fn inner_text(rejection: &(dyn std::error::Error + 'static)) -> String {
    match rejection.source() {
        Some(cause) => cause.to_string(),
        None => rejection.to_string(),
    }
}

/// An id type that can be read from the path, with the name used in error messages.
pub trait PathIdKind: FromStr<Err = IdError> + Send {
    /// `config id`, `server id`, …
    const WHAT: &'static str;
}

impl PathIdKind for ConfigId {
    const WHAT: &'static str = "config id";
}
impl PathIdKind for ServerId {
    const WHAT: &'static str = "server id";
}
impl PathIdKind for DeploymentId {
    const WHAT: &'static str = "deployment id";
}
impl PathIdKind for StackId {
    const WHAT: &'static str = "stack id";
}

/// The single `{id}` of the path, validated: a bad one is a 400 `invalid_id`.
#[derive(Debug, Clone)]
pub struct PathId<T>(pub T);

impl<S: Send + Sync, T: PathIdKind> FromRequestParts<S> for PathId<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::InvalidId {
                what: T::WHAT,
                value: parts.uri.path().to_owned(),
                reason: inner_text(&e),
            })?;
        match raw.parse::<T>() {
            Ok(id) => Ok(Self(id)),
            Err(e) => Err(ApiError::InvalidId {
                what: T::WHAT,
                value: raw,
                reason: e.to_string(),
            }),
        }
    }
}
