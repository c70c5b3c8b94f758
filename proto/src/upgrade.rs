//! Agent upgrades: a new agent build travels as an ordinary deployment of the hook group
//! [`UPGRADE_GROUP`], whose config body is an [`AgentBuild`]: version, size, SHA-256,
//! the release key's signature; its chunks are in the KV bucket [`BUILDS_BUCKET`], keys
//! `<tenant>.<sha256>.<n>` ([`chunk_key`]), put there through the gateway
//! (`PUT /v1/agent-builds/{sha256}/chunks/{n}`) and read by agents with direct gets.
//!
//! The release key is an ed25519 nkey made once offline (`flue release keygen`); the
//! gateway never holds its seed. An agent given the public key (`--release-key`) installs
//! only a build whose [`AgentBuild::signed_text`] that key signed and whose bytes match
//! the size and SHA-256 signed, so even a compromised gateway cannot make it run another
//! binary.

use data_encoding::{BASE64URL_NOPAD, HEXLOWER};
use nkeys::{KeyPair, KeyPairType};
use serde::{Deserialize, Serialize};

/// The hook group of an upgrade deployment: the agent handles it itself, no hook runs.
pub const UPGRADE_GROUP: &str = "flue-agent-upgrade";

/// KV bucket (tenant account) holding uploaded builds in chunks.
pub const BUILDS_BUCKET: &str = "flue_builds";

/// Bytes in every chunk but the last: well under the broker's 1 MiB max payload.
pub const CHUNK_SIZE: u64 = 512 * 1024;

/// Longest build accepted (256 MiB): 512 chunks.
pub const MAX_BUILD_SIZE: u64 = 256 * 1024 * 1024;

/// What the release key signs, before the fields: names the scheme and its version.
const SIGNED_PREFIX: &str = "flue-agent-build/1";

/// The body of an upgrade config: one agent build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentBuild {
    /// The version the build reports (`flue-agent version`), e.g. `0.1.0+42`.
    pub version: String,
    /// Its length in bytes.
    pub size: u64,
    /// SHA-256 of its bytes, 64 lower-case hex digits; also names its chunks.
    pub sha256: String,
    /// The release key's ed25519 signature over [`AgentBuild::signed_text`], base64url.
    pub signature: String,
}

/// Why a build is refused before a byte of it is read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// A field is malformed.
    #[error("{field}: {reason}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The signature is not the release key's over this build.
    #[error("signature: not made by release key {key} over this version, size and sha256")]
    Signature {
        /// The release key the agent trusts.
        key: String,
    },
}

impl AgentBuild {
    /// The build of `bytes`, reporting `version`, signed by the release key `seed`.
    pub fn sign(version: &str, bytes: &[u8], seed: &str) -> Result<Self, BuildError> {
        let key = release_key_pair(seed)?;
        let mut build = Self {
            version: version.to_owned(),
            size: bytes.len() as u64,
            sha256: sha256_hex(bytes),
            signature: String::new(),
        };
        build.check_fields()?;
        let signature =
            key.sign(build.signed_text().as_bytes())
                .map_err(|e| BuildError::Field {
                    field: "seed",
                    reason: e.to_string(),
                })?;
        build.signature = BASE64URL_NOPAD.encode(&signature);
        Ok(build)
    }

    /// The exact text the release key signs: the scheme, version, size and SHA-256, one a
    /// line.
    pub fn signed_text(&self) -> String {
        format!(
            "{SIGNED_PREFIX}\n{}\n{}\n{}\n",
            self.version, self.size, self.sha256
        )
    }

    /// Checks the fields and that `release_key` (a public `C…` nkey) signed them.
    pub fn verify(&self, release_key: &str) -> Result<(), BuildError> {
        self.check_fields()?;
        let key = release_public_key(release_key)?;
        let signature = BASE64URL_NOPAD
            .decode(self.signature.as_bytes())
            .map_err(|_| BuildError::Field {
                field: "signature",
                reason: "not base64url".to_owned(),
            })?;
        key.verify(self.signed_text().as_bytes(), &signature)
            .map_err(|_| BuildError::Signature {
                key: release_key.to_owned(),
            })
    }

    /// How many chunks it is stored in.
    pub fn chunks(&self) -> u64 {
        self.size.div_ceil(CHUNK_SIZE)
    }

    fn check_fields(&self) -> Result<(), BuildError> {
        let field = |field, reason: &str| {
            Err(BuildError::Field {
                field,
                reason: reason.to_owned(),
            })
        };
        let version_ok = |c: char| c.is_ascii_alphanumeric() || "+-._".contains(c);
        if self.version.is_empty()
            || self.version.len() > 64
            || !self.version.chars().all(version_ok)
        {
            return field("version", "1 to 64 of [A-Za-z0-9+-._]");
        }
        if self.size == 0 || self.size > MAX_BUILD_SIZE {
            return field("size", "1 byte to 256 MiB");
        }
        if !is_sha256_hex(&self.sha256) {
            return field("sha256", "64 lower-case hex digits");
        }
        Ok(())
    }
}

/// The KV key of chunk `n` of the build whose SHA-256 is `sha256`, uploaded to `tenant`.
pub fn chunk_key(tenant: &crate::TenantId, sha256: &str, n: u64) -> String {
    format!("{tenant}.{sha256}.{n}")
}

/// The keys of every build of `tenant` (an agent's read permission).
pub fn tenant_builds_filter(tenant: &crate::TenantId) -> String {
    format!("{tenant}.>")
}

/// SHA-256 of `bytes` as 64 lower-case hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    HEXLOWER.encode(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
}

/// SHA-256 over bytes given piece by piece (a build read chunk by chunk).
pub struct Sha256(ring::digest::Context);

impl Default for Sha256 {
    fn default() -> Self {
        Self(ring::digest::Context::new(&ring::digest::SHA256))
    }
}

impl Sha256 {
    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The digest as 64 lower-case hex digits.
    pub fn finish_hex(self) -> String {
        HEXLOWER.encode(self.0.finish().as_ref())
    }
}

/// True for 64 lower-case hex digits.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A new release key pair: (public key `C…`, seed `SC…`).
pub fn new_release_key() -> (String, String) {
    let key = KeyPair::new(KeyPairType::Cluster);
    // A freshly made key always has a seed.
    (key.public_key(), key.seed().unwrap_or_default())
}

/// Checks that `key` is a release public key (`C…`).
pub fn release_public_key(key: &str) -> Result<KeyPair, BuildError> {
    let bad = |reason: &str| BuildError::Field {
        field: "release key",
        reason: reason.to_owned(),
    };
    if !key.starts_with('C') {
        return Err(bad(
            "a release public key starts with C (flue release keygen)",
        ));
    }
    KeyPair::from_public_key(key).map_err(|_| bad("not a valid nkey public key"))
}

fn release_key_pair(seed: &str) -> Result<KeyPair, BuildError> {
    let bad = |reason: &str| BuildError::Field {
        field: "seed",
        reason: reason.to_owned(),
    };
    let key = KeyPair::from_seed(seed.trim()).map_err(|_| bad("not a valid nkey seed"))?;
    if !key.public_key().starts_with('C') {
        return Err(bad("a release seed starts with SC (flue release keygen)"));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_build_verifies_with_its_key_only() {
        let (public, seed) = new_release_key();
        let build = AgentBuild::sign("0.1.0+a", b"binary", &seed).expect("signs");
        build.verify(&public).expect("verifies");
        let (other, _) = new_release_key();
        assert!(matches!(
            build.verify(&other),
            Err(BuildError::Signature { .. })
        ));
        for changed in [
            AgentBuild {
                version: "0.1.0+b".into(),
                ..build.clone()
            },
            AgentBuild {
                size: 7,
                ..build.clone()
            },
            AgentBuild {
                sha256: sha256_hex(b"other"),
                ..build.clone()
            },
        ] {
            assert!(matches!(
                changed.verify(&public),
                Err(BuildError::Signature { .. })
            ));
        }
    }

    #[test]
    fn bad_fields_are_named() {
        let (public, seed) = new_release_key();
        let build = AgentBuild::sign("0.1.0", b"x", &seed).expect("signs");
        let bad = AgentBuild {
            sha256: "XYZ".into(),
            ..build.clone()
        };
        assert!(
            bad.verify(&public)
                .expect_err("bad")
                .to_string()
                .starts_with("sha256")
        );
        let bad = AgentBuild {
            version: "a b".into(),
            ..build.clone()
        };
        assert!(
            bad.verify(&public)
                .expect_err("bad")
                .to_string()
                .starts_with("version")
        );
        let err = build.verify("NABC").expect_err("not a release key");
        assert!(err.to_string().starts_with("release key"), "{err}");
        assert!(AgentBuild::sign("0.1.0", b"x", "SUAM").is_err());
    }

    #[test]
    fn chunks_round_up() {
        let (_, seed) = new_release_key();
        let mut build = AgentBuild::sign("v", b"x", &seed).expect("signs");
        assert_eq!(build.chunks(), 1);
        build.size = CHUNK_SIZE + 1;
        assert_eq!(build.chunks(), 2);
    }
}
