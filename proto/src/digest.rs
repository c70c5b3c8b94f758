//! [`RequestDigest`]: which exact request an agent's answer is about.
//!
//! The gateway records the SHA-256 of the bytes of the request it publishes before it
//! publishes them; the agent puts the digest of the bytes it pulled into every answer.
//! An answer applies to a deployment only when the two match, so a message that merely
//! names a deployment (a stray, a forgery, a request of another gateway) cannot decide it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Length of the hex form (SHA-256: 32 bytes).
pub const DIGEST_HEX_LEN: usize = 64;

/// The SHA-256 of a request's bytes as published, in lower-case hex.
///
/// Only constructible from bytes ([`RequestDigest::of`]) or from 64 lower-case hex
/// digits, also when deserialised.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[0-9a-f]{64}$"))]
#[serde(try_from = "String", into = "String")]
pub struct RequestDigest(String);

/// A string that is not 64 lower-case hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a request digest is {DIGEST_HEX_LEN} lower-case hex digits, not {0:?}")]
pub struct DigestError(String);

impl RequestDigest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        let sum = ring::digest::digest(&ring::digest::SHA256, bytes);
        let mut hex = String::with_capacity(DIGEST_HEX_LEN);
        for b in sum.as_ref() {
            hex.push_str(&format!("{b:02x}"));
        }
        Self(hex)
    }

    /// The hex form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for RequestDigest {
    type Error = DigestError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
        if s.len() == DIGEST_HEX_LEN && s.chars().all(hex) {
            Ok(Self(s))
        } else {
            Err(DigestError(s))
        }
    }
}

impl From<RequestDigest> for String {
    fn from(d: RequestDigest) -> String {
        d.0
    }
}

impl fmt::Display for RequestDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_in_lower_case_hex() {
        assert_eq!(
            RequestDigest::of(b"abc").as_str(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let json = serde_json::to_string(&RequestDigest::of(b"")).expect("ser");
        let back: RequestDigest = serde_json::from_str(&json).expect("de");
        assert_eq!(back, RequestDigest::of(b""));
        for bad in [
            "\"abc\"",
            &format!("\"{}\"", "A".repeat(64)),
            &format!("\"{}\"", "g".repeat(64)),
        ] {
            assert!(serde_json::from_str::<RequestDigest>(bad).is_err(), "{bad}");
        }
    }
}
