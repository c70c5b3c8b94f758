//! Signed requests and answers: the claims a message carries in its headers, their ed25519
//! signature (nkeys), and why a message is refused.
//!
//! The gateway signs every request it publishes with its `signing.nk`; an agent pins that
//! key from its credentials file and runs nothing else. An agent signs every answer with
//! its NATS user seed; the gateway checks it against the server's recorded public key.
//!
//! Two headers ride on each message: the claims, compact JSON, and the signature,
//! base64url without padding, over the exact bytes of the claims header value. The claims
//! name the body by its SHA-256, so neither the claims nor the body can be changed alone.

use std::fmt;
use std::time::Duration;

use data_encoding::BASE64URL_NOPAD;
use nkeys::KeyPair;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::deployment::DeploymentRequest;
use crate::digest::RequestDigest;
use crate::ids::{DeploymentId, ServerId, TenantId};

/// Header holding a request's [`RequestClaims`] (compact JSON).
pub const REQUEST_CLAIMS_HEADER: &str = "flue-request-claims";
/// Header holding an answer's [`AnswerClaims`] (compact JSON).
pub const ANSWER_CLAIMS_HEADER: &str = "flue-answer-claims";
/// Header holding the ed25519 signature over the claims header value (base64url, no padding).
pub const SIGNATURE_HEADER: &str = "flue-signature";
/// Version of the claims; a message with another is refused as `bad_signature`.
pub const CLAIMS_VERSION: u32 = 1;
/// Added to a request's own expiry (`expires_at`: accepted + the deployment's timeout) to
/// make its signature's. Between the two the agent still answers the request, FAILED
/// "expired", so the gateway hears about it; past the signature's expiry the request is
/// refused outright. The margin also absorbs clock skew between gateway and agent.
pub const REQUEST_EXPIRY_MARGIN: Duration = Duration::from_secs(300);

/// What the gateway vouches for in a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RequestClaims {
    /// [`CLAIMS_VERSION`].
    pub v: u32,
    /// The tenant of the server.
    pub tenant: TenantId,
    /// The only server that may run it.
    pub server: ServerId,
    /// The deployment.
    pub deployment: DeploymentId,
    /// SHA-256 of the body.
    pub digest: RequestDigest,
    /// When the gateway accepted the deployment.
    #[serde(with = "time::serde::rfc3339")]
    pub created: OffsetDateTime,
    /// After this the request is refused (`expired`).
    #[serde(with = "time::serde::rfc3339")]
    pub expires: OffsetDateTime,
}

impl RequestClaims {
    /// The claims of `request`, whose published bytes have `digest`: created when it was
    /// accepted, expiring [`REQUEST_EXPIRY_MARGIN`] after it does.
    pub fn of(request: &DeploymentRequest, digest: RequestDigest) -> Self {
        Self {
            v: CLAIMS_VERSION,
            tenant: request.tenant.clone(),
            server: request.server.clone(),
            deployment: request.deployment_id.clone(),
            digest,
            created: request.created_at,
            expires: request.expires_at + REQUEST_EXPIRY_MARGIN,
        }
    }
}

/// Header holding a request's [`PublishWindow`] (compact JSON).
pub const PUBLISH_WINDOW_HEADER: &str = "flue-publish-window";
/// Header holding the gateway's signature over the [`PUBLISH_WINDOW_HEADER`] value.
pub const WINDOW_SIGNATURE_HEADER: &str = "flue-window-signature";
/// How long after the gateway signs a request the broker may store it. The request stream
/// remembers message ids for twice as long (the gateway's `DUPLICATE_WINDOW`, 120 s), so
/// a copy of a signed request is either dropped by the broker as a duplicate (its message
/// id) or stored too late for any agent to run it, whatever the agent remembers. The
/// difference absorbs 60 s of clock skew between gateway and broker either way.
pub const PUBLISH_WINDOW: Duration = Duration::from_secs(60);

/// What the gateway vouches for about a request's publication: the message id the broker
/// deduplicates it by, and by when the broker must have stored it. Signed on its own (an
/// agent of the previous release reads only [`RequestClaims`], which it refuses to
/// extend), and tied to the claims by the body's digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PublishWindow {
    /// [`CLAIMS_VERSION`].
    pub v: u32,
    /// SHA-256 of the body (the same as the claims').
    pub digest: RequestDigest,
    /// The message's `Nats-Msg-Id`.
    pub msg_id: String,
    /// The broker must have stored the message by then.
    #[serde(with = "time::serde::rfc3339")]
    pub by: OffsetDateTime,
}

impl PublishWindow {
    /// The window of a request with `digest` published under `msg_id`, signed at `now`.
    pub fn of(digest: RequestDigest, msg_id: String, now: OffsetDateTime) -> Self {
        Self {
            v: CLAIMS_VERSION,
            digest,
            msg_id,
            by: now + PUBLISH_WINDOW,
        }
    }
}

/// What a stored request message carries beside its body, as the agent received it.
#[derive(Debug, Clone, Copy)]
pub struct Stored<'a> {
    /// The [`PUBLISH_WINDOW_HEADER`] value.
    pub window: Option<&'a str>,
    /// The [`WINDOW_SIGNATURE_HEADER`] value.
    pub signature: Option<&'a str>,
    /// The message's `Nats-Msg-Id` header.
    pub msg_id: Option<&'a str>,
    /// When the broker stored it (the stream's own timestamp, not the publisher's).
    pub stored: OffsetDateTime,
}

/// Checks that a request message is the one the gateway published, not a copy published
/// again: its signed window verifies with `gateway_key` for this `body`, its message id is
/// the signed one (so the broker drops a copy within its duplicate window), and the broker
/// stored it before the window closed (so a copy after that runs nowhere, even on an agent
/// that lost its ledger).
pub fn verify_window(stored: Stored<'_>, gateway_key: &str, body: &[u8]) -> Result<(), Refusal> {
    if stored.window.is_none() || stored.signature.is_none() {
        return Err(Refusal::new(
            RefusalCode::Unsigned,
            format!(
                "no signed publish window ({PUBLISH_WINDOW_HEADER}): a gateway older than this \
                 agent, or a copy with the header stripped"
            ),
        ));
    }
    let window: PublishWindow = verified(
        stored.window,
        stored.signature,
        gateway_key,
        body,
        |w: &PublishWindow| &w.digest,
    )?;
    let replayed = |why: String| Refusal::new(RefusalCode::Replayed, why);
    if stored.msg_id != Some(window.msg_id.as_str()) {
        return Err(replayed(format!(
            "published under message id {:?}, signed for {:?}: a copy published again",
            stored.msg_id.unwrap_or(""),
            window.msg_id
        )));
    }
    if stored.stored > window.by {
        return Err(replayed(format!(
            "stored at {}, after its publish window closed at {}: a copy published again",
            stored.stored, window.by
        )));
    }
    Ok(())
}

/// What an agent vouches for in an answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AnswerClaims {
    /// [`CLAIMS_VERSION`].
    pub v: u32,
    /// The agent's tenant.
    pub tenant: TenantId,
    /// The agent's server.
    pub server: ServerId,
    /// SHA-256 of the answer's body.
    pub digest: RequestDigest,
    /// When it was signed.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// The two header values of a signed message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The claims header value.
    pub claims: String,
    /// The signature header value.
    pub signature: String,
}

/// Signs `claims` with `key` (a seed-holding key pair).
pub fn sign(claims: &impl Serialize, key: &KeyPair) -> Result<Signed, Refusal> {
    let claims = serde_json::to_string(claims)
        .map_err(|e| Refusal::new(RefusalCode::Undecodable, e.to_string()))?;
    let signature = key
        .sign(claims.as_bytes())
        .map_err(|e| Refusal::new(RefusalCode::BadSignature, format!("cannot sign: {e}")))?;
    Ok(Signed {
        claims,
        signature: BASE64URL_NOPAD.encode(&signature),
    })
}

/// The claims of a request the agent of `tenant`/`server` may run, checked against the
/// pinned gateway key `gateway_key` and the body bytes `body`, at `now`.
pub fn verify_request(
    claims: Option<&str>,
    signature: Option<&str>,
    gateway_key: &str,
    body: &[u8],
    (tenant, server): (&TenantId, &ServerId),
    now: OffsetDateTime,
) -> Result<RequestClaims, Refusal> {
    let claims: RequestClaims =
        verified(claims, signature, gateway_key, body, |c: &RequestClaims| {
            &c.digest
        })?;
    if &claims.tenant != tenant {
        return Err(Refusal::new(
            RefusalCode::WrongTenant,
            format!("signed for tenant {}", claims.tenant),
        ));
    }
    if &claims.server != server {
        return Err(Refusal::new(
            RefusalCode::WrongServer,
            format!("signed for server {}", claims.server),
        ));
    }
    if claims.expires <= now {
        return Err(Refusal::new(
            RefusalCode::Expired,
            format!("signature expired at {}", claims.expires),
        ));
    }
    Ok(claims)
}

/// The claims of an answer from `tenant`/`server`, checked against its recorded key.
pub fn verify_answer(
    claims: Option<&str>,
    signature: Option<&str>,
    server_key: &str,
    body: &[u8],
    who: (&TenantId, &ServerId),
) -> Result<AnswerClaims, Refusal> {
    verify_answer_by(claims, signature, &public_key(server_key)?, body, who)
}

/// A recorded public key (an nkey), read for [`verify_answer_by`]: reading one costs
/// about as much as a third of a signature check (the curve point is decompressed), so a
/// caller checking many answers of one server reads its key once.
pub fn public_key(key: &str) -> Result<KeyPair, Refusal> {
    KeyPair::from_public_key(key)
        .map_err(|e| Refusal::new(RefusalCode::BadSignature, format!("pinned key: {e}")))
}

/// [`verify_answer`] with the server's key already read ([`public_key`]).
pub fn verify_answer_by(
    claims: Option<&str>,
    signature: Option<&str>,
    server_key: &KeyPair,
    body: &[u8],
    (tenant, server): (&TenantId, &ServerId),
) -> Result<AnswerClaims, Refusal> {
    let claims: AnswerClaims =
        verified_by(claims, signature, server_key, body, |c: &AnswerClaims| {
            &c.digest
        })?;
    if &claims.tenant != tenant {
        return Err(Refusal::new(
            RefusalCode::WrongTenant,
            format!("signed for tenant {}", claims.tenant),
        ));
    }
    if &claims.server != server {
        return Err(Refusal::new(
            RefusalCode::WrongServer,
            format!("signed for server {}", claims.server),
        ));
    }
    Ok(claims)
}

/// Checks the signature over the claims text, then decodes the claims and the body digest
/// they name. A signature is checked before anything in the claims is believed.
fn verified<C: serde::de::DeserializeOwned>(
    claims: Option<&str>,
    signature: Option<&str>,
    key: &str,
    body: &[u8],
    digest: impl Fn(&C) -> &RequestDigest,
) -> Result<C, Refusal> {
    let key = public_key(key)?;
    verified_by(claims, signature, &key, body, digest)
}

/// [`verified`] with the key already read.
fn verified_by<C: serde::de::DeserializeOwned>(
    claims: Option<&str>,
    signature: Option<&str>,
    key: &KeyPair,
    body: &[u8],
    digest: impl Fn(&C) -> &RequestDigest,
) -> Result<C, Refusal> {
    let (Some(claims), Some(signature)) = (claims, signature) else {
        return Err(Refusal::new(
            RefusalCode::Unsigned,
            "no claims or no signature header",
        ));
    };
    let bad = |why: String| Refusal::new(RefusalCode::BadSignature, why);
    let signature = BASE64URL_NOPAD
        .decode(signature.trim().as_bytes())
        .map_err(|_| bad("the signature is not base64url".into()))?;
    key.verify(claims.as_bytes(), &signature)
        .map_err(|_| bad("the signature does not verify with the pinned key".into()))?;
    let version: serde_json::Value = serde_json::from_str(claims)
        .map_err(|e| bad(format!("signed claims not readable: {e}")))?;
    if version.get("v").and_then(serde_json::Value::as_u64) != Some(u64::from(CLAIMS_VERSION)) {
        return Err(bad(format!("claims version is not {CLAIMS_VERSION}")));
    }
    let claims: C = serde_json::from_value(version)
        .map_err(|e| bad(format!("signed claims not readable: {e}")))?;
    if digest(&claims) != &RequestDigest::of(body) {
        return Err(bad("the body is not the one signed".into()));
    }
    Ok(claims)
}

/// Why a request or an answer is refused: the code travels on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RefusalCode {
    /// No claims or no signature.
    Unsigned,
    /// A signature that does not verify with the expected key, or a body that is not the
    /// one signed, or unreadable signed claims.
    BadSignature,
    /// Signed for another server.
    WrongServer,
    /// Signed for another tenant.
    WrongTenant,
    /// Past the signature's expiry.
    Expired,
    /// A copy of a request already handled, arriving as another stream message.
    Replayed,
    /// Not a message this side can read.
    Undecodable,
    /// An answer on the subject of a server the gateway has no key for.
    UnknownServer,
}

impl RefusalCode {
    /// The wire form (`bad_signature`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unsigned => "unsigned",
            Self::BadSignature => "bad_signature",
            Self::WrongServer => "wrong_server",
            Self::WrongTenant => "wrong_tenant",
            Self::Expired => "expired",
            Self::Replayed => "replayed",
            Self::Undecodable => "undecodable",
            Self::UnknownServer => "unknown_server",
        }
    }
}

impl fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal: its code and what exactly was wrong (never a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {detail}")]
pub struct Refusal {
    /// The code.
    pub code: RefusalCode,
    /// What was wrong, for logs and events.
    pub detail: String,
}

impl Refusal {
    /// A refusal with `code`.
    pub fn new(code: RefusalCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod tests;
