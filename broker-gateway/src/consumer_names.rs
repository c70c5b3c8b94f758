//! Names of a tenant's durable consumers that only its gateways can compute (issue 22):
//! servers' request consumers, the response consumer, the operations consumer.
//!
//! nats-server lets a leaf node's link give any request a reply subject of
//! `$JS.ACK.<stream>.<consumer>.…` (it refuses such replies to clients only), and the state
//! account's JetStream then answers into that ack subject: an empty answer acks the
//! message in flight, a chosen one naks or terminates it. Whoever can name a consumer can
//! so strip the redelivery from whatever it has in flight. A server's sealed request
//! consumer is named with a tag derived from the tenant's state account seed, which only
//! the gateways hold ([`ConsumerNames::request`]); its agent learns the name from the
//! publish permissions of its own user JWT
//! ([`flue_proto::subject::sealed_request_consumer_in`]), which the gateway signs.
//!
//! Agents of the previous release compute the older, guessable name
//! ([`flue_proto::subject::request_consumer`]) and cannot read it from their JWT, so a
//! server starts on that name and moves to the sealed one once its agent says it pulls
//! the consumer its JWT names ([`flue_proto::Heartbeat::sealed_consumer`],
//! [`crate::broker::Broker::seal_request_consumer`]).

use std::fmt;
use std::sync::Arc;

use data_encoding::HEXLOWER;
use flue_proto::{ServerId, TenantId, subject};
use ring::hmac;

/// Bytes of the tag (hex-encoded in names: 32 characters, 128 bits).
const TAG_BYTES: usize = 16;

/// Computes one tenant's sealed consumer names; none in development mode (no broker
/// keys, an anonymous broker: nothing to seal against). Cheap to clone.
#[derive(Clone)]
pub struct ConsumerNames {
    key: Option<Arc<hmac::Key>>,
}

impl ConsumerNames {
    /// Names keyed by `secret` (the tenant's state account seed: every gateway of the
    /// tenant has it, nothing else does).
    pub fn sealed(secret: &[u8]) -> Self {
        Self {
            key: Some(Arc::new(hmac::Key::new(hmac::HMAC_SHA256, secret))),
        }
    }

    /// No sealed names: every server keeps the [`subject::request_consumer`] name.
    pub fn none() -> Self {
        Self { key: None }
    }

    /// The sealed request consumer of `tenant`'s server `server`, `None` in development
    /// mode.
    pub fn request(&self, tenant: &TenantId, server: &ServerId) -> Option<String> {
        let tag = self.tag(&["flue request consumer", tenant.as_str(), server.as_str()])?;
        Some(subject::sealed_request_consumer(tenant, server, &tag))
    }

    /// The name of the gateways' own durable consumer `base` (the response consumer
    /// [`subject::GATEWAY_RESPONSE_CONSUMER`], the operations consumer): `<base>-<tag>`,
    /// or `base` itself in development mode.
    pub fn gateway(&self, base: &str) -> String {
        match self.tag(&["flue gateway consumer", base]) {
            Some(tag) => format!("{base}-{tag}"),
            None => base.to_owned(),
        }
    }

    /// The tag of `parts` (each ended by a NUL byte), `None` without a key.
    fn tag(&self, parts: &[&str]) -> Option<String> {
        let key = self.key.as_ref()?;
        let mut context = hmac::Context::with_key(key);
        for part in parts {
            context.update(part.as_bytes());
            context.update(&[0]);
        }
        let tag = context.sign();
        Some(HEXLOWER.encode(&tag.as_ref()[..TAG_BYTES]))
    }
}

impl fmt::Debug for ConsumerNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerNames")
            .field("sealed", &self.key.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id<T: std::str::FromStr>(s: &str) -> T
    where
        T::Err: fmt::Debug,
    {
        s.parse().expect("valid id")
    }

    #[test]
    fn a_sealed_name_depends_on_the_secret_tenant_and_server_and_nothing_else() {
        let names = ConsumerNames::sealed(b"seed one");
        let (acme, web1) = (id("acme"), id("web1"));
        let name = names.request(&acme, &web1).expect("sealed");
        assert!(name.starts_with("sreq-4-acme-web1-"), "{name}");
        assert_eq!(name.len(), "sreq-4-acme-web1-".len() + 2 * TAG_BYTES);
        // The same on every gateway holding the secret.
        assert_eq!(
            ConsumerNames::sealed(b"seed one").request(&acme, &web1),
            Some(name.clone())
        );
        for other in [
            ConsumerNames::sealed(b"seed two").request(&acme, &web1),
            names.request(&acme, &id("web2")),
            names.request(&id("other"), &web1),
        ] {
            let other = other.expect("sealed");
            assert_ne!(other[other.len() - 32..], name[name.len() - 32..]);
        }
        assert_eq!(ConsumerNames::none().request(&acme, &web1), None);
        // The gateways' own consumers: the base name and a tag, the base alone unsealed.
        let response = names.gateway("flue-gateway");
        assert!(response.starts_with("flue-gateway-"), "{response}");
        assert_eq!(response.len(), "flue-gateway-".len() + 2 * TAG_BYTES);
        assert_ne!(names.gateway("flue-engine")[13..], response[13..]);
        assert_eq!(
            ConsumerNames::none().gateway("flue-gateway"),
            "flue-gateway"
        );
        assert!(!format!("{names:?}").contains("seed"));
    }
}
