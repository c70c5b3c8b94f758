//! `ApiError`: every way a request can fail, mapped to a status and an [`ErrorBody`].

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use flue_proto::auth;
use flue_proto::limits::LimitError;
use flue_proto::{ConfigError, ErrorBody, ErrorDetail, INSUFFICIENT_STORAGE, PutStackError};
use tracing::{error, warn};

use crate::broker::{BrokerError, StorageRefusal, TooLarge};
use crate::configs::CreateConfigError;
use crate::error::chain;
use crate::operations::OperationsError;
use crate::operations::submit::SubmitError;
use crate::sealing::SealFailure;
use crate::stacks::StackError;
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
    /// A value is nested too deeply, or cannot be passed to its hook ([`flue_proto::limits`]).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// What would be stored or published is larger than the broker's max payload.
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
    /// A value in the body or query is out of bounds.
    #[error("{0}")]
    InvalidInput(String),
    /// A query parameter cannot be read (the message names it).
    #[error("{0}")]
    InvalidQuery(String),
    /// No token, or one that is malformed, badly signed, expired or revoked (the message
    /// says which, never quoting the token): 401 with `WWW-Authenticate: Bearer`.
    #[error("{0}")]
    Unauthorized(String),
    /// The token's role may not call the route: 403.
    #[error("{0}")]
    Forbidden(String),
    /// Something the gateway itself should have done failed (the text is logged, not sent).
    #[error("{0}")]
    Internal(String),
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
    /// message, written for the client, says what to retry (the cause is logged where it
    /// happened, never put here).
    #[error("{0}")]
    Unavailable(String),
    /// The broker connection is down: nothing was done, retry later.
    #[error("the broker is not reachable; retry later")]
    BrokerDown,
    /// The request took longer than the request timeout (the work may go on).
    #[error("the request took longer than {0} s; retry later")]
    TookTooLong(u64),
    /// The client did not send the whole body within the body timeout.
    #[error("the request body did not arrive within {0} ms")]
    BodyTimeout(u64),
    /// The state store failed: 503 (a broker call failed or ran out of time) unless the
    /// stored value cannot be decoded (500) or the broker refused the write for lack of
    /// JetStream storage (507 `insufficient_storage`, [`StorageRefusal`]).
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
    /// The broker has no JetStream storage left for what was asked (the message says what
    /// to change): 507, since retrying cannot help. Not `internal`: nothing failed.
    #[error("{0}")]
    OutOfStorage(String),
    /// The broker failed: 503, retry later; 507 `insufficient_storage` when it refused
    /// for lack of JetStream storage ([`StorageRefusal`]).
    #[error("broker failure")]
    Broker(#[source] BrokerError),
    /// A task doing the work panicked or was aborted.
    #[error("background task failed")]
    Task(#[from] tokio::task::JoinError),
    /// A handler panicked (caught by the router's panic layer).
    #[error("handler panicked")]
    Panic,
}

/// Seconds a client is told to wait (`Retry-After`) before retrying a 503.
pub const RETRY_AFTER_SECS: u64 = 2;

impl From<BrokerError> for ApiError {
    fn from(e: BrokerError) -> Self {
        match e {
            BrokerError::ConsumerLimit { limit } => Self::ConsumerLimit { limit },
            e => Self::Broker(e),
        }
    }
}

// The domain's errors, as the API answers them: each domain module says why it failed,
// only here is that made a status and a body.

impl From<CreateConfigError> for ApiError {
    fn from(e: CreateConfigError) -> Self {
        match e {
            CreateConfigError::HiddenDefaults(_) | CreateConfigError::Different(_) => {
                ApiError::Conflict(e.to_string())
            }
            CreateConfigError::Seal(e) => e.into(),
            CreateConfigError::TooLarge(e) => e.into(),
            CreateConfigError::Store(e) => e.into(),
        }
    }
}

impl From<SealFailure> for ApiError {
    fn from(e: SealFailure) -> Self {
        match e {
            // The client can act on these: rotate the server's credentials; give a value
            // again that was stored under a sealing key the gateway no longer has.
            SealFailure::NoServerKey(_) | SealFailure::AtRest { .. } => {
                ApiError::Conflict(e.to_string())
            }
            // The gateway's own state is at fault: logged, answered 500 without a cause.
            e => ApiError::Internal(chain(&e)),
        }
    }
}

impl From<OperationsError> for ApiError {
    fn from(e: OperationsError) -> Self {
        match e {
            OperationsError::Store(e) => ApiError::Store(e),
            e => {
                error!(error = %chain(&e), "operations queue failed");
                ApiError::Unavailable("the operations queue is not reachable; retry later".into())
            }
        }
    }
}

impl From<StackError> for ApiError {
    fn from(e: StackError) -> Self {
        match e {
            StackError::Invalid(PutStackError::Limit(limit)) => ApiError::Limit(limit),
            StackError::Invalid(_) | StackError::Refused(_) => {
                ApiError::InvalidInput(e.to_string())
            }
            StackError::NotFound(_) => ApiError::NotFound(e.to_string()),
            StackError::Exists(_) | StackError::Conflict(_) => ApiError::Conflict(e.to_string()),
            StackError::Mismatch { .. } => ApiError::RevisionMismatch(e.to_string()),
            StackError::Seal(e) => e.into(),
            StackError::TooLarge(e) => e.into(),
            StackError::Store(e) => e.into(),
            StackError::Internal(text) => ApiError::Internal(text),
        }
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::Invalid { .. } => ApiError::InvalidInput(e.to_string()),
            SubmitError::NotFound(_) => ApiError::NotFound(e.to_string()),
            SubmitError::Busy { .. } => ApiError::Conflict(e.to_string()),
            SubmitError::Seal(e) => e.into(),
            SubmitError::TooLarge(e) => e.into(),
            SubmitError::Operations(e) => e.into(),
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
            Self::InvalidInput(_) | Self::Limit(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "invalid_input")
            }
            Self::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            Self::InvalidQuery(_) => (StatusCode::BAD_REQUEST, "invalid_query"),
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, auth::UNAUTHORIZED),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, auth::FORBIDDEN),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Self::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            Self::RevisionMismatch(_) => (StatusCode::CONFLICT, "revision_mismatch"),
            Self::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::BodyTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            Self::ConsumerLimit { .. } => {
                (StatusCode::INSUFFICIENT_STORAGE, "consumer_limit_reached")
            }
            Self::OutOfStorage(_) => (StatusCode::INSUFFICIENT_STORAGE, INSUFFICIENT_STORAGE),
            _ if self.storage_refusal().is_some() => {
                (StatusCode::INSUFFICIENT_STORAGE, INSUFFICIENT_STORAGE)
            }
            Self::Store(StoreError::Decode { .. })
            | Self::Task(_)
            | Self::Panic
            | Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            Self::Unavailable(_)
            | Self::BrokerDown
            | Self::TookTooLong(_)
            | Self::Store(_)
            | Self::Broker(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        }
    }

    /// The text the client gets: what it sent wrong for a 4xx, what to do for a 503, and
    /// never a cause for a 5xx (the cause is logged here, once).
    fn client_message(&self) -> String {
        match self {
            Self::Store(StoreError::Decode { .. })
            | Self::Task(_)
            | Self::Panic
            | Self::Internal(_) => {
                error!(error = %chain(self), "request failed");
                "internal error; see the gateway log".to_owned()
            }
            Self::Store(_) | Self::Broker(_) if self.storage_refusal().is_some() => {
                warn!(error = %chain(self), "the broker refused a write for lack of storage; answering 507");
                self.storage_message()
            }
            Self::Store(_) | Self::Broker(_) => {
                warn!(error = %chain(self), "broker call failed; answering 503");
                "the broker did not complete the call; retry later".to_owned()
            }
            // Written for the client by the code that fails; no cause in them.
            _ => self.to_string(),
        }
    }
}

impl ApiError {
    /// The broker's refusal for lack of storage behind a store or broker failure: the
    /// call was refused, not lost, so it is a 507 naming what is full, not a 503.
    fn storage_refusal(&self) -> Option<StorageRefusal> {
        match self {
            Self::Store(e) => StorageRefusal::of(e),
            Self::Broker(e) => StorageRefusal::of(e),
            _ => None,
        }
    }

    /// A 507's message: what refused the write, that nothing of this request was
    /// accepted, and what gives the broker room. The bucket or stream is named (the
    /// operator must know what is full); the cause's text is not.
    fn storage_message(&self) -> String {
        let (refusal, what) = match self {
            Self::Store(e) => (
                StorageRefusal::of(e),
                e.bucket().map(|b| format!("bucket {b}")),
            ),
            Self::Broker(e) => (
                StorageRefusal::of(e),
                e.stream().map(|s| format!("stream {s}")),
            ),
            _ => (None, None),
        };
        let refusal = refusal.map_or_else(
            || "the broker has no JetStream storage left".to_owned(),
            |r| r.to_string(),
        );
        let what = what.unwrap_or_else(|| "the broker's JetStream store".to_owned());
        format!(
            "{refusal}: {what} refused the write, which was not made, and this request was not accepted; \
             send it again once the broker has room (free JetStream storage, or raise the broker's \
             max_file_store or the account's storage limit)"
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let body = ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message: self.client_message(),
            },
        };
        if status == StatusCode::UNAUTHORIZED {
            let challenge = [(header::WWW_AUTHENTICATE, "Bearer realm=\"flue\"")];
            return (status, challenge, Json(body)).into_response();
        }
        if status == StatusCode::FORBIDDEN {
            let challenge = [(
                header::WWW_AUTHENTICATE,
                "Bearer realm=\"flue\", error=\"insufficient_scope\"",
            )];
            return (status, challenge, Json(body)).into_response();
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            let retry = [(header::RETRY_AFTER, RETRY_AFTER_SECS.to_string())];
            return (status, retry, Json(body)).into_response();
        }
        (status, Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use axum::body::to_bytes;

    use super::*;

    /// The status, `Retry-After` and body of an error's answer.
    async fn answer(e: ApiError) -> (StatusCode, Option<String>, ErrorBody) {
        let resp = e.into_response();
        let status = resp.status();
        let retry = resp
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().expect("ascii").to_owned());
        let bytes = to_bytes(resp.into_body(), usize::MAX).await.expect("body");
        (
            status,
            retry,
            serde_json::from_slice(&bytes).expect("an ErrorBody"),
        )
    }

    fn read_failure() -> StoreError {
        StoreError::Read {
            bucket: "flue_deployments",
            key: "default.secret-key".to_owned(),
            source: "nats: timed out at 127.0.0.1:4222".into(),
        }
    }

    #[tokio::test]
    async fn broker_failures_answer_503_with_retry_after_and_no_cause() {
        for e in [ApiError::Store(read_failure()), ApiError::BrokerDown] {
            let (status, retry, body) = answer(e).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(retry.as_deref(), Some("2"));
            assert_eq!(body.error.code, "unavailable");
            for inside in ["flue_deployments", "secret-key", "127.0.0.1", "timed out"] {
                assert!(!body.error.message.contains(inside), "{body:?}");
            }
        }
    }

    /// The broker's answer to a write it refuses for lack of storage, as it arrives.
    fn refusal(err_code: u64, description: &str) -> async_nats::jetstream::Error {
        serde_json::from_value(serde_json::json!({
            "code": 503,
            "err_code": err_code,
            "description": description
        }))
        .expect("a JetStream error")
    }

    #[tokio::test]
    async fn a_write_the_broker_refuses_for_storage_is_a_507_naming_what_is_full_and_not_accepted()
    {
        use async_nats::jetstream::context::{PublishError, PublishErrorKind};
        let full = |err_code, description| StoreError::Write {
            bucket: "flue_deployments",
            key: "default.secret-key".to_owned(),
            source: PublishError::with_source(
                PublishErrorKind::Other,
                refusal(err_code, description),
            )
            .into(),
        };
        for (e, said) in [
            (
                full(10023, "insufficient resources"),
                "JetStream store is full",
            ),
            (
                full(10002, "resource limits exceeded for account"),
                "account's JetStream storage limit",
            ),
        ] {
            let (status, retry, body) = answer(ApiError::Store(e)).await;
            assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE);
            assert_eq!(retry, None, "retrying cannot help until there is room");
            assert_eq!(body.error.code, "insufficient_storage");
            let message = &body.error.message;
            for inside in [
                said,
                "bucket flue_deployments",
                "not accepted",
                "which was not made",
            ] {
                assert!(message.contains(inside), "{inside:?} not in {message:?}");
            }
            assert!(!message.contains("secret-key"), "{message}");
        }
        // Any other broker answer is still a 503 to retry.
        let other = StoreError::Write {
            bucket: "flue_deployments",
            key: "default.d1".to_owned(),
            source: PublishError::with_source(
                PublishErrorKind::Other,
                refusal(10008, "JetStream system temporarily unavailable"),
            )
            .into(),
        };
        let (status, _, body) = answer(ApiError::Store(other)).await;
        assert_eq!(
            (status, body.error.code.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
        );
    }

    #[tokio::test]
    async fn internal_failures_answer_500_with_a_generic_message() {
        let undecodable = StoreError::Decode {
            bucket: "flue_deployments",
            key: "default.secret-key".to_owned(),
            source: serde_json::from_str::<u8>("\"x\"").expect_err("not a number"),
        };
        for e in [ApiError::Store(undecodable), ApiError::Panic] {
            let (status, retry, body) = answer(e).await;
            assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
            assert_eq!(retry, None);
            assert_eq!(body.error.code, "internal");
            assert_eq!(body.error.message, "internal error; see the gateway log");
        }
    }
}
