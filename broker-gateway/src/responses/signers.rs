//! The keys agents' answers are checked against: each server's `Server.keys.signing`
//! (its NATS user's public key), read from `flue_servers` and kept for a moment so that
//! a deployment's many messages cost one read.
//!
//! A key is kept [`FRESH`] at most, and forgotten at once when this gateway registers or
//! rotates the server; an answer that fails against a kept key is checked again against
//! the stored one before it is refused, so a rotation made by another gateway never
//! refuses a good answer. The price: for up to [`FRESH`] after another gateway rotated a
//! server's credentials, this one may still accept an answer signed with the old key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flue_proto::signing::{self, Refusal, RefusalCode};
use flue_proto::{ServerId, TenantId};

use crate::store::{Servers, StoreError};

/// Longest a key read from the store is used without reading it again.
pub const FRESH: Duration = Duration::from_secs(2);

/// Bounds the memory; cleared when it grows past this.
const MAX_KEPT: usize = 4096;

/// A server's key as read (`None`: no key recorded; the key read once, or why the
/// recorded one is no key) and when it was read.
type Kept = HashMap<(TenantId, ServerId), (Option<Key>, Instant)>;

/// A recorded key, read ([`signing::public_key`]), or why it cannot be.
type Key = Result<Arc<nkeys::KeyPair>, Refusal>;

/// Recently read answer-signing keys, by server; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Signers {
    kept: Arc<Mutex<Kept>>,
}

/// A signed message as received: its claims and signature headers and its body.
pub struct SignedMessage<'a> {
    /// The claims header value.
    pub claims: Option<&'a str>,
    /// The signature header value.
    pub signature: Option<&'a str>,
    /// The body.
    pub body: &'a [u8],
}

impl Signers {
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets what is kept of `server` (its keys were just replaced here).
    pub fn forget(&self, tenant: &TenantId, server: &ServerId) {
        self.lock().remove(&(tenant.clone(), server.clone()));
    }

    /// Checks that `message` came from `server` of `tenant`: signed by its current key.
    /// `Err` only when the store could not be read (try again later).
    pub async fn check(
        &self,
        servers: &Servers,
        (tenant, server): (&TenantId, &ServerId),
        message: &SignedMessage<'_>,
    ) -> Result<Result<(), Refusal>, StoreError> {
        let who = (tenant, server);
        let kept = self
            .lock()
            .get(&(tenant.clone(), server.clone()))
            .filter(|(_, at)| at.elapsed() < FRESH)
            .map(|(key, _)| key.clone());
        if let Some(Some(key)) = &kept
            && verify(key, who, message).is_ok()
        {
            return Ok(Ok(()));
        }
        let key = servers
            .get(tenant, server)
            .await?
            .and_then(|s| s.keys)
            .map(|k| signing::public_key(&k.signing).map(Arc::new));
        {
            let mut kept = self.lock();
            if kept.len() >= MAX_KEPT {
                kept.clear();
            }
            kept.insert(
                (tenant.clone(), server.clone()),
                (key.clone(), Instant::now()),
            );
        }
        Ok(match key {
            Some(key) => verify(&key, who, message),
            None => Err(Refusal::new(
                RefusalCode::UnknownServer,
                "no answer-signing key is recorded for this server (not registered, or registered before keys existed: rotate its credentials)",
            )),
        })
    }
}

/// Whether `m` came from the server of `who`, signed with `key`.
fn verify(key: &Key, who: (&TenantId, &ServerId), m: &SignedMessage<'_>) -> Result<(), Refusal> {
    let key = key.as_ref().map_err(Clone::clone)?;
    signing::verify_answer_by(m.claims, m.signature, key, m.body, who).map(|_| ())
}
