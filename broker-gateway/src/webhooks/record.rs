//! The stored subscription (with its secret) and its bucket `flue_webhooks`.
//!
//! Key `<tenant>.<id>`, one revision per key. Delivery counters and the status change
//! through [`Records::update`], a compare-and-set loop, so that a resume and a delivery
//! task writing at the same time never undo each other.

use std::fmt;

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use flue_proto::webhook::{Webhook, WebhookSignature, WebhookStart, WebhookStatus};
use flue_proto::{EventFilter, TenantId, WebhookId};
use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::store::cas::{self, Json};
use crate::store::{Bucket, StoreError};

pub use flue_proto::subject::WEBHOOKS_BUCKET;

/// A signing secret; its `Debug` form never shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret (checked by the caller).
    pub fn new(secret: String) -> Self {
        Self(secret)
    }

    /// The bytes to sign with (`flue-v1`).
    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The text as given, to read a Standard Webhooks key from.
    pub fn expose_text(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<hidden>")
    }
}

/// A subscription as stored: the API view plus the secret, the start and the position.
///
/// The secret is stored in the broker because the gateways that deliver need it: the
/// broker is trusted (see ARCHITECTURE.md, invariants). It leaves the gateway only as
/// the key of each delivery's signature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subscription {
    /// Tenant.
    pub tenant: TenantId,
    /// Id.
    pub id: WebhookId,
    /// Target URL (checked at creation).
    pub url: String,
    /// Signing secret.
    pub secret: Secret,
    /// How deliveries are signed; records from before the choice existed signed with
    /// `flue-v1`, and keep doing so after an upgrade.
    #[serde(default = "WebhookSignature::legacy")]
    pub signature: WebhookSignature,
    /// Which events.
    pub filter: EventFilter,
    /// Where the subscription started in the event stream.
    pub start: WebhookStart,
    /// Created at.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// Active or parked.
    pub status: WebhookStatus,
    /// Why it was parked.
    #[serde(default)]
    pub parked_reason: Option<String>,
    /// Events delivered so far.
    #[serde(default)]
    pub delivered: u64,
    /// Id of the last event delivered.
    #[serde(default)]
    pub last_event_id: Option<String>,
    /// Stream sequence of the last event delivered (skipped ones are not written, to
    /// spare a write per event): a lost consumer is created again just after it, and
    /// skips again what it skipped before.
    #[serde(default)]
    pub last_seq: Option<u64>,
    /// Error of the last failed attempt, cleared by a delivery.
    #[serde(default)]
    pub last_error: Option<String>,
}

impl Subscription {
    /// Its KV key.
    pub fn key(&self) -> String {
        key(&self.tenant, &self.id)
    }

    /// What the API shows: everything but the secret and the position.
    pub fn view(&self) -> Webhook {
        Webhook {
            id: self.id.clone(),
            url: self.url.clone(),
            signature: self.signature,
            filter: self.filter.clone(),
            created_at: self.created_at,
            status: self.status,
            parked_reason: self.parked_reason.clone(),
            delivered: self.delivered,
            last_event_id: self.last_event_id.clone(),
            last_error: self.last_error.clone(),
        }
    }
}

/// `<tenant>.<id>`.
pub fn key(tenant: &TenantId, id: &WebhookId) -> String {
    format!("{tenant}.{id}")
}

/// Handle on the bucket; cheap to clone.
#[derive(Debug, Clone)]
pub struct Records {
    kv: kv::Store,
    /// The same bucket, for the compare-and-set ([`cas::compare_and_set`]).
    bucket: Bucket,
}

impl Records {
    /// Creates the bucket (`replicas` copies) if it does not exist yet and opens it.
    pub async fn open(js: &jetstream::Context, replicas: usize) -> Result<Self, StoreError> {
        let kv = crate::store::open_bucket(js, WEBHOOKS_BUCKET, replicas).await?;
        Ok(Self {
            bucket: Bucket::new(kv.clone(), WEBHOOKS_BUCKET, false),
            kv,
        })
    }

    /// The underlying bucket (for watching it).
    pub fn kv(&self) -> &kv::Store {
        &self.kv
    }

    /// Stores a new subscription (its id is fresh, so the key is free).
    pub async fn create(&self, sub: &Subscription) -> Result<(), StoreError> {
        let key = sub.key();
        self.kv
            .create(&key, encode(sub))
            .await
            .map(|_| ())
            .map_err(|e| StoreError::Write {
                bucket: WEBHOOKS_BUCKET,
                key,
                source: e.into(),
            })
    }

    /// The subscription under `key`, with its revision.
    async fn get_key(&self, key: &str) -> Result<Option<(Subscription, u64)>, StoreError> {
        let entry = self.kv.entry(key).await.map_err(|e| StoreError::Read {
            bucket: WEBHOOKS_BUCKET,
            key: key.to_owned(),
            source: e.into(),
        })?;
        match entry {
            Some(e) if e.operation == kv::Operation::Put => {
                Ok(Some((decode(key, &e.value)?, e.revision)))
            }
            _ => Ok(None),
        }
    }

    /// Subscription `id` of `tenant`, if it exists.
    pub async fn get(
        &self,
        tenant: &TenantId,
        id: &WebhookId,
    ) -> Result<Option<Subscription>, StoreError> {
        Ok(self.get_key(&key(tenant, id)).await?.map(|(s, _)| s))
    }

    /// Every subscription of `tenant`, oldest first.
    pub async fn list(&self, tenant: &TenantId) -> Result<Vec<Subscription>, StoreError> {
        let list_err = |e: Box<dyn std::error::Error + Send + Sync>| StoreError::List {
            bucket: WEBHOOKS_BUCKET,
            source: e,
        };
        let subjects = self
            .kv
            .stream
            .info_with_subjects(format!("{}{tenant}.*", self.kv.prefix))
            .await
            .map_err(|e| list_err(e.into()))?;
        let subjects: Vec<(String, usize)> = subjects
            .try_collect()
            .await
            .map_err(|e| list_err(e.into()))?;
        let mut subs = Vec::new();
        for (subject, _) in subjects {
            let Some(key) = subject.strip_prefix(self.kv.prefix.as_str()) else {
                continue;
            };
            if let Some((sub, _)) = self.get_key(key).await? {
                subs.push(sub);
            }
        }
        subs.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(subs)
    }

    /// Changes subscription `id` with `change` under compare-and-set, retrying on a lost
    /// race; `change` returns whether it changed anything and may run several times.
    /// `None` when the subscription does not exist (any more).
    pub async fn update(
        &self,
        tenant: &TenantId,
        id: &WebhookId,
        change: impl FnMut(&mut Subscription) -> bool,
    ) -> Result<Option<Subscription>, StoreError> {
        let key = key(tenant, id);
        Ok(
            cas::update::<Subscription, Json>(&self.bucket, &key, change)
                .await?
                .value(),
        )
    }

    /// Deletes subscription `id`; deleting a missing one is not an error.
    pub async fn delete(&self, tenant: &TenantId, id: &WebhookId) -> Result<(), StoreError> {
        let key = key(tenant, id);
        self.kv.delete(&key).await.map_err(|e| StoreError::Write {
            bucket: WEBHOOKS_BUCKET,
            key,
            source: e.into(),
        })
    }
}

fn encode(sub: &Subscription) -> Bytes {
    Bytes::from(serde_json::to_vec(sub).expect("a subscription always serialises"))
}

/// Decodes a stored subscription.
pub fn decode(key: &str, bytes: &[u8]) -> Result<Subscription, StoreError> {
    serde_json::from_slice(bytes).map_err(|source| StoreError::Decode {
        bucket: WEBHOOKS_BUCKET,
        key: key.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_show_in_debug_or_the_view() {
        let sub = Subscription {
            tenant: TenantId::new("t").expect("tenant"),
            id: WebhookId::new("w").expect("id"),
            url: "http://h/".into(),
            secret: Secret::new("s3cret-s3cret-s3cret".into()),
            signature: WebhookSignature::Standard,
            filter: EventFilter::default(),
            start: WebhookStart::New,
            created_at: OffsetDateTime::UNIX_EPOCH,
            status: WebhookStatus::Active,
            parked_reason: None,
            delivered: 0,
            last_event_id: None,
            last_seq: None,
            last_error: None,
        };
        assert!(!format!("{sub:?}").contains("s3cret"));
        let view = serde_json::to_string(&sub.view()).expect("view");
        assert!(!view.contains("s3cret"), "{view}");
        let stored = encode(&sub);
        assert_eq!(decode("t.w", &stored).expect("round trip"), sub);
    }

    #[test]
    fn records_stored_before_the_signature_option_keep_signing_with_flue_v1() {
        let old = br#"{"tenant":"t","id":"w","url":"http://h/","secret":"s3cret-s3cret-s3cret",
            "filter":{},"start":"new","created_at":"2026-01-01T00:00:00Z","status":"active"}"#;
        let sub = decode("t.w", old).expect("an old record");
        assert_eq!(sub.signature, WebhookSignature::FlueV1);
        assert_eq!(sub.view().signature, WebhookSignature::FlueV1);
    }
}
