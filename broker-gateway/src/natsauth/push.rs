//! Pushing account JWTs to a running broker over a system-account connection
//! (`$SYS.REQ.ACCOUNT.<account>.CLAIMS.UPDATE`): how a new tenant or a revocation reaches
//! the hub, and every tenant leaf node of that account, without a restart.

use std::time::Duration;

use bytes::Bytes;
use flue_proto::jsapi::{CLAIMS_UPDATE, account_claims_update};
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
/// checked against it at once (a revoked user's are closed), on the hub and on the leaf
/// nodes of that account's tenant networks (they subscribe to the account's own subject).
pub async fn push(system: &async_nats::Client, jwt: &str) -> Result<(), PushError> {
    // What is not an account JWT goes to the generic subject: the broker refuses it there
    // and says why.
    let subject = match super::jwt::decode::<serde_json::Value>(jwt) {
        Ok(claims) if is_account_key(&claims.sub) => account_claims_update(&claims.sub),
        _ => CLAIMS_UPDATE.to_owned(),
    };
    let reply = tokio::time::timeout(
        PUSH_TIMEOUT,
        system.request(subject, Bytes::from(jwt.to_owned())),
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

/// True for an account public key (`A…`), the only thing that may be spelled into a subject.
fn is_account_key(key: &str) -> bool {
    matches!(
        nkeys::KeyPair::from_public_key(key).map(|k| k.key_pair_type()),
        Ok(nkeys::KeyPairType::Account)
    )
}
