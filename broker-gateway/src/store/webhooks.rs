//! Webhook subscriptions (with their secrets) in `flue_webhooks`, and the rules of their
//! records: a delivery counted, a failed attempt noted, a subscription parked or resumed.
//!
//! Key `<tenant>.<id>`, one revision per key. Every change is a compare-and-set
//! ([`cas::update`]), so that a resume and a delivery task writing at the same time
//! never undo each other.

use std::fmt;
use std::sync::Arc;

use flue_proto::webhook::{Webhook, WebhookSignature, WebhookStart, WebhookStatus};
use flue_proto::{EventFilter, TenantId, WebhookId};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::bucket::{decode as decode_as, encode, entry, keys, write_error};
use super::cas::{self, Json, Outcome};
use super::kv::Kv;
use super::{StoreError, key2};

use super::WEBHOOKS_BUCKET;

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
        webhook_key(&self.tenant, &self.id)
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
pub fn webhook_key(tenant: &TenantId, id: &WebhookId) -> String {
    key2(tenant, id)
}

/// One write of the bucket as [`Webhooks::follow`] sees it.
#[derive(Debug)]
pub enum SubscriptionChange {
    /// A subscription written.
    Put(Box<Subscription>),
    /// Subscription `key` deleted.
    Removed(String),
    /// A record under `key` that cannot be decoded.
    Undecodable {
        /// The key.
        key: String,
        /// Why.
        error: StoreError,
    },
}

/// The subscriptions' bucket; cheap to clone.
#[derive(Debug, Clone)]
pub struct Webhooks {
    kv: Arc<dyn Kv>,
}

impl Webhooks {
    pub(super) fn new(kv: Arc<dyn Kv>) -> Self {
        Self { kv }
    }

    /// Stores a new subscription (its id is fresh, so the key is free).
    pub async fn create(&self, sub: &Subscription) -> Result<(), StoreError> {
        let key = sub.key();
        self.kv
            .create(&key, encode(sub))
            .await
            .map(drop)
            .map_err(|e| write_error(WEBHOOKS_BUCKET, &key, e))
    }

    /// Subscription `id` of `tenant`, if it exists.
    pub async fn get(
        &self,
        tenant: &TenantId,
        id: &WebhookId,
    ) -> Result<Option<Subscription>, StoreError> {
        self.by_key(&webhook_key(tenant, id)).await
    }

    async fn by_key(&self, key: &str) -> Result<Option<Subscription>, StoreError> {
        entry(&*self.kv, key)
            .await?
            .map(|e| decode(key, &e.value))
            .transpose()
    }

    /// Every subscription of `tenant`, oldest first.
    pub async fn list(&self, tenant: &TenantId) -> Result<Vec<Subscription>, StoreError> {
        let mut subs = Vec::new();
        for key in keys(&*self.kv, &format!("{tenant}.*")).await? {
            if let Some(sub) = self.by_key(&key).await? {
                subs.push(sub);
            }
        }
        subs.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(subs)
    }

    /// Deletes subscription `id`; deleting a missing one is not an error.
    pub async fn delete(&self, tenant: &TenantId, id: &WebhookId) -> Result<(), StoreError> {
        let key = webhook_key(tenant, id);
        self.kv
            .delete(&key, None)
            .await
            .map_err(|e| write_error(WEBHOOKS_BUCKET, &key, e))
    }

    /// Counts a delivered event: its id, and its `FLUE_EVT` sequence when known (the
    /// position a lost consumer is made again from never goes back to unknown); clears
    /// the last error. `None` when the subscription is gone.
    pub async fn delivered(
        &self,
        tenant: &TenantId,
        id: &WebhookId,
        event_id: &str,
        seq: Option<u64>,
    ) -> Result<Option<Subscription>, StoreError> {
        self.update(tenant, id, |sub| {
            sub.delivered += 1;
            sub.last_event_id = Some(event_id.to_owned());
            if seq.is_some() {
                sub.last_seq = seq;
            }
            sub.last_error = None;
            true
        })
        .await
    }

    /// Notes a failed attempt's error; `None` when the subscription is gone.
    pub async fn failed(
        &self,
        tenant: &TenantId,
        id: &WebhookId,
        error: &str,
    ) -> Result<Option<Subscription>, StoreError> {
        self.update(tenant, id, |sub| {
            sub.last_error = Some(error.to_owned());
            true
        })
        .await
    }

    /// Parks the subscription with `reason` and the last attempt's error; `None` when it
    /// is gone.
    pub async fn park(
        &self,
        tenant: &TenantId,
        id: &WebhookId,
        reason: &str,
        last_error: &str,
    ) -> Result<Option<Subscription>, StoreError> {
        self.update(tenant, id, |sub| {
            sub.status = WebhookStatus::Parked;
            sub.parked_reason = Some(reason.to_owned());
            sub.last_error = Some(last_error.to_owned());
            true
        })
        .await
    }

    /// Makes a parked subscription active again (its reason and error cleared); an
    /// active one is left as it is. `None` when there is no such subscription.
    pub async fn resume(
        &self,
        tenant: &TenantId,
        id: &WebhookId,
    ) -> Result<Option<Subscription>, StoreError> {
        self.update(tenant, id, |sub| {
            if sub.status == WebhookStatus::Active {
                return false;
            }
            sub.status = WebhookStatus::Active;
            sub.parked_reason = None;
            sub.last_error = None;
            true
        })
        .await
    }

    /// Changes subscription `id` with `change` under compare-and-set, again on a lost
    /// race; `None` when it does not exist (any more).
    async fn update(
        &self,
        tenant: &TenantId,
        id: &WebhookId,
        change: impl FnMut(&mut Subscription) -> bool,
    ) -> Result<Option<Subscription>, StoreError> {
        let key = webhook_key(tenant, id);
        let outcome: Outcome<Subscription> =
            cas::update::<Subscription, Json>(&*self.kv, &key, change).await?;
        Ok(outcome.value())
    }

    /// Every subscription of `tenant` as it stands, then every change of one, in order.
    pub async fn follow(
        &self,
        tenant: &TenantId,
    ) -> Result<BoxStream<'static, Result<SubscriptionChange, StoreError>>, StoreError> {
        let filter = format!("{tenant}.*");
        let watch_error = |filter: &str, source| StoreError::Watch {
            bucket: WEBHOOKS_BUCKET,
            key: filter.to_owned(),
            source,
        };
        let writes = self
            .kv
            .follow(&filter)
            .await
            .map_err(|e| watch_error(&filter, e))?;
        Ok(writes
            .map(move |write| {
                let write = write.map_err(|e| watch_error(&filter, e))?;
                Ok(match write.value {
                    None => SubscriptionChange::Removed(write.key),
                    Some(value) => match decode(&write.key, &value) {
                        Ok(sub) => SubscriptionChange::Put(Box::new(sub)),
                        Err(error) => SubscriptionChange::Undecodable {
                            key: write.key,
                            error,
                        },
                    },
                })
            })
            .boxed())
    }
}

/// Decodes a stored subscription.
pub fn decode(key: &str, bytes: &[u8]) -> Result<Subscription, StoreError> {
    decode_as(WEBHOOKS_BUCKET, key, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::Memory;

    fn sub(tenant: &str, id: &str, created: i64) -> Subscription {
        Subscription {
            tenant: TenantId::new(tenant).expect("tenant"),
            id: WebhookId::new(id).expect("id"),
            url: "http://h/".into(),
            secret: Secret::new("s3cret-s3cret-s3cret".into()),
            signature: WebhookSignature::Standard,
            filter: EventFilter::default(),
            start: WebhookStart::New,
            created_at: OffsetDateTime::from_unix_timestamp(created).expect("time"),
            status: WebhookStatus::Active,
            parked_reason: None,
            delivered: 0,
            last_event_id: None,
            last_seq: None,
            last_error: None,
        }
    }

    fn store() -> Webhooks {
        Webhooks::new(Memory::shared(WEBHOOKS_BUCKET))
    }

    #[test]
    fn secrets_never_show_in_debug_or_the_view() {
        let sub = sub("t", "w", 0);
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

    #[tokio::test]
    async fn a_subscription_is_created_once_listed_oldest_first_within_its_tenant_and_deleted() {
        let store = store();
        let (later, earlier, other) = (sub("t", "b", 20), sub("t", "a", 10), sub("u", "c", 0));
        for s in [&later, &earlier, &other] {
            store.create(s).await.expect("create");
        }
        assert!(
            store.create(&later).await.is_err(),
            "a second create of one id"
        );
        let tenant = TenantId::new("t").expect("tenant");
        let listed = store.list(&tenant).await.expect("list");
        assert_eq!(listed, vec![earlier.clone(), later.clone()]);

        store.delete(&tenant, &later.id).await.expect("delete");
        assert_eq!(store.get(&tenant, &later.id).await.expect("get"), None);
        assert_eq!(store.list(&tenant).await.expect("list"), vec![earlier]);
        store
            .delete(&tenant, &later.id)
            .await
            .expect("deleting a missing one");
        assert_eq!(
            store
                .delivered(&tenant, &later.id, "e1", Some(1))
                .await
                .expect("update"),
            None,
            "a deleted subscription counts nothing"
        );
    }

    #[tokio::test]
    async fn a_delivery_is_counted_keeps_the_last_known_position_and_clears_the_error() {
        let store = store();
        let s = sub("t", "w", 0);
        store.create(&s).await.expect("create");
        let failed = store
            .failed(&s.tenant, &s.id, "503")
            .await
            .expect("update")
            .expect("exists");
        assert_eq!(failed.last_error.as_deref(), Some("503"));

        let first = store
            .delivered(&s.tenant, &s.id, "e7", Some(7))
            .await
            .expect("update")
            .expect("exists");
        assert_eq!((first.delivered, first.last_seq), (1, Some(7)));
        assert_eq!(first.last_error, None);
        // A copy whose origin is unknown keeps the last known position.
        let second = store
            .delivered(&s.tenant, &s.id, "e8", None)
            .await
            .expect("update")
            .expect("exists");
        assert_eq!(second.delivered, 2);
        assert_eq!(second.last_event_id.as_deref(), Some("e8"));
        assert_eq!(second.last_seq, Some(7));
        assert_eq!(
            store.get(&s.tenant, &s.id).await.expect("get"),
            Some(second)
        );
    }

    #[tokio::test]
    async fn a_parked_subscription_resumes_cleared_and_an_active_one_is_left_as_it_is() {
        let store = store();
        let s = sub("t", "w", 0);
        store.create(&s).await.expect("create");
        let failing = store
            .failed(&s.tenant, &s.id, "503")
            .await
            .expect("update")
            .expect("exists");
        let active = store.resume(&s.tenant, &s.id).await.expect("resume");
        assert_eq!(active, Some(failing), "an active one is left as it is");

        let parked = store
            .park(&s.tenant, &s.id, "10 failed attempts", "timeout")
            .await
            .expect("park")
            .expect("exists");
        assert_eq!(parked.status, WebhookStatus::Parked);
        assert_eq!(parked.parked_reason.as_deref(), Some("10 failed attempts"));
        let resumed = store
            .resume(&s.tenant, &s.id)
            .await
            .expect("resume")
            .expect("exists");
        assert_eq!(resumed.status, WebhookStatus::Active);
        assert_eq!((resumed.parked_reason, resumed.last_error), (None, None));
        let missing = WebhookId::new("nope").expect("id");
        assert_eq!(
            store.resume(&s.tenant, &missing).await.expect("resume"),
            None
        );
    }

    #[tokio::test]
    async fn following_shows_what_is_there_then_each_change_of_the_tenant_only() {
        let store = store();
        let (a, b, other) = (sub("t", "a", 0), sub("t", "b", 1), sub("u", "c", 2));
        store.create(&a).await.expect("create");
        store.create(&other).await.expect("create");
        let mut follow = store.follow(&a.tenant).await.expect("follow");
        let next = async |f: &mut BoxStream<'static, Result<SubscriptionChange, StoreError>>| {
            tokio::time::timeout(std::time::Duration::from_secs(5), f.next())
                .await
                .expect("a change within 5 s")
                .expect("the stream goes on")
                .expect("readable")
        };
        assert!(matches!(next(&mut follow).await, SubscriptionChange::Put(s) if *s == a));
        store.create(&b).await.expect("create");
        store.delete(&a.tenant, &a.id).await.expect("delete");
        store
            .create(&sub("u", "d", 3))
            .await
            .expect("another tenant's");
        store.park(&b.tenant, &b.id, "r", "e").await.expect("park");
        assert!(matches!(next(&mut follow).await, SubscriptionChange::Put(s) if *s == b));
        assert!(matches!(next(&mut follow).await, SubscriptionChange::Removed(k) if k == "t.a"));
        assert!(matches!(
            next(&mut follow).await,
            SubscriptionChange::Put(s) if s.status == WebhookStatus::Parked
        ));
    }
}
