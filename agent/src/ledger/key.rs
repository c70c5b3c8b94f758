//! [`LedgerKey`]: which request a ledger entry belongs to.

use std::fmt;

use flue_proto::{DeploymentId, DeploymentRequest, RequestDigest};
use time::OffsetDateTime;

/// The identity of one request in the ledger.
///
/// A deployment id alone is not enough: the gateway keeps ids unique only as long as the
/// broker keeps its state, and the ledger outlives that (a broker store lost on reboot, a
/// state dir reused for another tenant or server), so the same id can come back for a new
/// request. The key is `<tenant>.<server>.<deployment>.<created_at as unix nanoseconds>`:
/// a redelivery of the same request finds its entry, a new request reusing the id does not.
/// Ids cannot contain a `.`, so two different requests never share a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerKey {
    key: String,
    deployment_id: DeploymentId,
    /// When the gateway accepted the request; unknown for an unreadable one.
    created_at: Option<OffsetDateTime>,
}

impl LedgerKey {
    /// The key of `req`.
    pub fn of_request(req: &DeploymentRequest) -> Self {
        let key = format!(
            "{}.{}.{}.{}",
            req.tenant,
            req.server,
            req.deployment_id,
            req.created_at.unix_timestamp_nanos()
        );
        Self {
            key,
            deployment_id: req.deployment_id.clone(),
            created_at: Some(req.created_at),
        }
    }

    /// The key of a request with this identity whose message differs (another digest)
    /// from the one already recorded under this key: a stray or forged copy, or the real
    /// request behind one. Each is kept under its own key, so neither is answered with the
    /// other's result and each runs at most once.
    pub fn with_digest(&self, digest: &RequestDigest) -> Self {
        Self {
            key: format!("{}.{digest}", self.key),
            ..self.clone()
        }
    }

    /// The deployment the request is for.
    pub fn deployment_id(&self) -> &DeploymentId {
        &self.deployment_id
    }

    /// When the gateway accepted the request, if it could be read.
    pub fn created_at(&self) -> Option<OffsetDateTime> {
        self.created_at
    }

    /// The sled key.
    pub fn as_str(&self) -> &str {
        &self.key
    }
}

impl fmt::Display for LedgerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::tests::request;
    use serde_json::json;

    fn req() -> DeploymentRequest {
        request(json!({"group": "script", "config": "true"}), json!({}))
    }

    #[test]
    fn a_request_is_keyed_by_tenant_server_id_and_creation_time() {
        let mut r = req();
        r.created_at = OffsetDateTime::UNIX_EPOCH + time::Duration::nanoseconds(1_500_000_001);
        let key = LedgerKey::of_request(&r);
        assert_eq!(key.as_str(), "acme.web1.d1.1500000001");
        assert_eq!(key.to_string(), key.as_str());
        assert_eq!(key.deployment_id().as_str(), "d1");
        assert_eq!(key.created_at(), Some(r.created_at));
    }

    #[test]
    fn the_same_request_redelivered_has_the_same_key() {
        let r = req();
        let wire = serde_json::to_vec(&r).expect("ser");
        let again: DeploymentRequest = serde_json::from_slice(&wire).expect("de");
        assert_eq!(LedgerKey::of_request(&again), LedgerKey::of_request(&r));
    }

    #[test]
    fn a_new_request_reusing_the_id_has_another_key() {
        let first = req();
        let key = LedgerKey::of_request(&first);
        let later = DeploymentRequest {
            created_at: first.created_at + time::Duration::nanoseconds(1),
            ..first.clone()
        };
        assert_ne!(LedgerKey::of_request(&later), key);
        let elsewhere = DeploymentRequest {
            server: "web2".parse().expect("id"),
            ..first.clone()
        };
        assert_ne!(LedgerKey::of_request(&elsewhere), key);
        let other_tenant = DeploymentRequest {
            tenant: "other".parse().expect("id"),
            ..first
        };
        assert_ne!(LedgerKey::of_request(&other_tenant), key);
    }
}
