//! Pushing account JWTs to a running broker over a system-account connection
//! (`$SYS.REQ.CLAIMS.UPDATE`): how a new tenant or a revocation reaches it without a restart.

use std::time::Duration;

use bytes::Bytes;
use flue_proto::jsapi::CLAIMS_UPDATE;
use serde::Deserialize;

/// Longest wait for the broker's answer to one update.
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the broker did not take an account JWT.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The request could not be sent or was not answered in time.
    #[error("the broker did not answer the account update")]
    NoAnswer(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The broker answered with an error.
    #[error("the broker refused the account update ({code}): {description}")]
    Refused {
        /// The broker's code (HTTP-like).
        code: i64,
        /// The broker's reason.
        description: String,
    },
    /// The answer is not what nats-server sends.
    #[error("the broker's answer to the account update cannot be read")]
    Unreadable(#[source] serde_json::Error),
}

/// nats-server's answer to a claims update: `data` on success, `error` on failure.
#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    error: Option<Failure>,
}

#[derive(Deserialize)]
struct Failure {
    #[serde(default)]
    code: i64,
    #[serde(default)]
    description: String,
}

/// Sends one account JWT to the broker `system` (a system-account user's connection)
/// is connected to and waits until the broker has taken it; its users' connections are
/// checked against it at once (a revoked user's are closed).
pub async fn push(system: &async_nats::Client, jwt: &str) -> Result<(), PushError> {
    let reply = tokio::time::timeout(
        PUSH_TIMEOUT,
        system.request(CLAIMS_UPDATE, Bytes::from(jwt.to_owned())),
    )
    .await
    .map_err(|e| PushError::NoAnswer(e.into()))?
    .map_err(|e| PushError::NoAnswer(e.into()))?;
    let answer: Answer = serde_json::from_slice(&reply.payload).map_err(PushError::Unreadable)?;
    match answer.error {
        None => Ok(()),
        Some(f) => Err(PushError::Refused {
            code: f.code,
            description: f.description,
        }),
    }
}
