//! Servers that poll (stock os-collect-config) instead of running a flue-agent.
//!
//! A polling server's deployments never go to the broker's request queue: the record in
//! KV `flue_deployments` (published = recorded, see `deployments::publish`) is the request,
//! served as Heat metadata at the server's secret metadata URL (`api::poll`),
//! and its result comes back as a signal that takes the agents' answer path
//! (`responses::apply_signal`). Nothing is kept in memory, so any gateway
//! sharing the broker serves any polling server.
//!
//! The secrets: a metadata URL's is 256 random bits, stored only as its SHA-256 in the
//! server record; a signal URL's is derived (HMAC-SHA256 under the gateway's token key,
//! domain-separated) from the tenant and the deployment id, so it is stored nowhere and
//! stays valid while the server's metadata URL is rotated.

pub mod item;
pub mod signal;

use data_encoding::{BASE64URL_NOPAD, HEXLOWER};
use flue_proto::{DeploymentId, TenantId};
use ring::rand::SecureRandom;
use ring::{digest, hmac};

/// Domain of the signal secrets' HMAC: nothing else the token key signs starts so.
const SIGNAL_DOMAIN: &[u8] = b"flue poll signal v1\0";

/// A new metadata URL secret: 256 random bits, base64url.
pub fn new_secret() -> Result<String, ring::error::Unspecified> {
    let mut bytes = [0u8; flue_proto::poll::SECRET_BYTES];
    ring::rand::SystemRandom::new().fill(&mut bytes)?;
    Ok(BASE64URL_NOPAD.encode(&bytes))
}

/// SHA-256 of a secret, lower-case hex: what the server record keeps.
pub fn secret_hash(secret: &str) -> String {
    HEXLOWER.encode(digest::digest(&digest::SHA256, secret.as_bytes()).as_ref())
}

/// Whether `secret` is the one whose hash `stored` is.
///
/// Comparing hashes leaks nothing useful through timing: learning a prefix of the hash
/// does not help finding a secret that has it.
pub fn secret_matches(stored: Option<&str>, secret: &str) -> bool {
    stored.is_some_and(|stored| stored == secret_hash(secret))
}

fn signal_message(tenant: &TenantId, deployment: &DeploymentId) -> Vec<u8> {
    let mut message = SIGNAL_DOMAIN.to_vec();
    message.extend_from_slice(tenant.as_str().as_bytes());
    message.push(0);
    message.extend_from_slice(deployment.as_str().as_bytes());
    message
}

/// The secret of deployment `deployment`'s signal URL.
pub fn signal_secret(key: &[u8], tenant: &TenantId, deployment: &DeploymentId) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    BASE64URL_NOPAD.encode(hmac::sign(&key, &signal_message(tenant, deployment)).as_ref())
}

/// Whether `secret` is deployment `deployment`'s signal secret (constant time).
pub fn signal_matches(
    key: &[u8],
    tenant: &TenantId,
    deployment: &DeploymentId,
    secret: &str,
) -> bool {
    let Ok(tag) = BASE64URL_NOPAD.decode(secret.as_bytes()) else {
        return false;
    };
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    hmac::verify(&key, &signal_message(tenant, deployment), &tag).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_256_random_bits_and_only_its_own_hash_matches() {
        let a = new_secret().expect("random");
        let b = new_secret().expect("random");
        assert_ne!(a, b);
        assert_eq!(BASE64URL_NOPAD.decode(a.as_bytes()).expect("b64").len(), 32);
        assert!(secret_matches(Some(&secret_hash(&a)), &a));
        assert!(!secret_matches(Some(&secret_hash(&a)), &b));
        assert!(!secret_matches(None, &a));
    }

    #[test]
    fn a_signal_secret_opens_only_its_own_deployment_of_its_own_tenant() {
        let key = b"k".repeat(32);
        let (t1, t2): (TenantId, TenantId) = ("t1".parse().expect("id"), "t2".parse().expect("id"));
        let (d1, d2): (DeploymentId, DeploymentId) =
            ("d1".parse().expect("id"), "d2".parse().expect("id"));
        let s = signal_secret(&key, &t1, &d1);
        assert!(signal_matches(&key, &t1, &d1, &s));
        assert!(!signal_matches(&key, &t1, &d2, &s));
        assert!(!signal_matches(&key, &t2, &d1, &s));
        assert!(!signal_matches(b"other", &t1, &d1, &s));
        assert!(!signal_matches(&key, &t1, &d1, "not base64!"));
    }
}
