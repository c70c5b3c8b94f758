//! `ApiError`: every way a request can fail, mapped to a status and an [`ErrorBody`].

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use flue_proto::{ConfigError, ErrorBody, ErrorDetail};
use tracing::error;

use crate::broker::BrokerError;
use crate::error::chain;
use crate::store::StoreError;

/// What a handler answers when it cannot do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// An id in the path is not a valid subject token.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidId {
        /// Which id (`config id`, `server id`, …).
        what: &'static str,
        /// The refused text.
        value: String,
        /// Why.
        reason: String,
    },
    /// The body is not JSON.
    #[error("{0}")]
    MalformedJson(String),
    /// The body is JSON but not the expected shape (serde's message).
    #[error("{0}")]
    InvalidBody(String),
    /// The body is not declared as JSON.
    #[error("expected a request with `Content-Type: application/json`")]
    UnsupportedMediaType,
    /// The body is larger than the configured limit.
    #[error("request body is larger than the limit of {0} bytes")]
    BodyTooLarge(usize),
    /// A config spec failed validation.
    #[error(transparent)]
    InvalidConfig(#[from] ConfigError),
    /// A value in the body or query is out of bounds.
    #[error("{0}")]
    InvalidInput(String),
    /// A query parameter cannot be read (the message names it).
    #[error("{0}")]
    InvalidQuery(String),
    /// The object (or route) does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The id is taken by a different object.
    #[error("{0}")]
    Conflict(String),
    /// A conditional write named a revision the object is no longer at.
    #[error("{0}")]
    RevisionMismatch(String),
    /// The route exists but not for this method.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The state store failed in a way the client should know about and retry; the
    /// message says what to retry (the cause is logged where it happened).
    #[error("{0}")]
    Unavailable(String),
    /// The state store failed.
    #[error("state store failure")]
    Store(#[from] StoreError),
    /// The broker refused a server's request consumer for its consumer limit (one per
    /// registered server): an operator must raise it. Not `internal`: nothing failed.
    #[error(
        "cannot register another server: the broker's consumer limit{} is reached (one request consumer per server); raise the gateway's --max-servers or the broker account's consumer limit",
        limit.map(|n| format!(" of {n}")).unwrap_or_default()
    )]
    ConsumerLimit {
        /// The limit, as far as the gateway could read it.
        limit: Option<i64>,
    },
    /// The broker failed.
    #[error("broker failure")]
    Broker(#[source] BrokerError),
    /// A task doing the work panicked or was aborted.
    #[error("background task failed")]
    Task(#[from] tokio::task::JoinError),
}

impl From<BrokerError> for ApiError {
    fn from(e: BrokerError) -> Self {
        match e {
            BrokerError::ConsumerLimit { limit } => Self::ConsumerLimit { limit },
            e => Self::Broker(e),
        }
    }
}

impl ApiError {
    /// The HTTP status and stable code of this error.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::InvalidId { .. } => (StatusCode::BAD_REQUEST, "invalid_id"),
            Self::MalformedJson(_) => (StatusCode::BAD_REQUEST, "malformed_json"),
            Self::InvalidBody(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
            Self::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            Self::BodyTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            Self::InvalidConfig(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_config"),
            Self::InvalidInput(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_input"),
            Self::InvalidQuery(_) => (StatusCode::BAD_REQUEST, "invalid_query"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Self::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            Self::RevisionMismatch(_) => (StatusCode::CONFLICT, "revision_mismatch"),
            Self::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            Self::ConsumerLimit { .. } => {
                (StatusCode::INSUFFICIENT_STORAGE, "consumer_limit_reached")
            }
            Self::Store(_) | Self::Broker(_) | Self::Task(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "internal")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        // These say what an operator must do and carry no internals.
        let message = if matches!(self, Self::Unavailable(_) | Self::ConsumerLimit { .. }) {
            self.to_string()
        } else if status.is_server_error() {
            // The cause is for the operator, logged here once; the client gets a generic text.
            error!(error = %chain(&self), "request failed");
            "internal error; see the gateway log".to_owned()
        } else {
            self.to_string()
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message,
            },
        };
        (status, Json(body)).into_response()
    }
}
