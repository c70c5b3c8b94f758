//! The seam under every aggregate store: [`Kv`], a key-value bucket with one revision per
//! key, as the gateway uses JetStream KV. [`Bucket`] is the JetStream one; the unit
//! tests' in-memory double is [`super::memory::Memory`].
//!
//! Object-safe (every call returns a boxed future), so that an aggregate holds an
//! `Arc<dyn Kv>` whatever the bucket is: a handle is one pointer, and the future of a
//! call on it one allocation, however large the JetStream client's handle and its
//! futures are.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use flue_proto::jsapi;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use time::OffsetDateTime;

use super::error::BoxError;
use super::race::{lost_delete_race, lost_race};

/// A boxed future of a [`Kv`] call.
pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A write found by [`Kv::next`]: its key, its revision, and whether it is a value (not
/// a marker).
pub type Found = (String, u64, bool);

/// A key's value and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The value.
    pub value: Bytes,
    /// Its revision (the bucket stream's sequence of the write).
    pub revision: u64,
    /// When it was written.
    pub created: OffsetDateTime,
}

/// Why a conditional write was not made.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// A create found the key there.
    #[error("the key exists")]
    Exists,
    /// An update or conditional delete found the key at another revision.
    #[error("the key is at another revision")]
    Conflict,
    /// The bucket failed (the write may or may not have happened).
    #[error(transparent)]
    Failed(BoxError),
}

/// One write to a bucket, as a watch sees it.
#[derive(Debug, Clone)]
pub struct Change {
    /// The key written.
    pub key: String,
    /// The revision of the write.
    pub revision: u64,
    /// The value written.
    pub value: Bytes,
}

/// One write of a key as [`Kv::follow`] sees it: a value, or `None` for a delete or
/// purge marker.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyWrite {
    /// The key written.
    pub key: String,
    /// The revision of the write.
    pub revision: u64,
    /// The value written; `None` when the key was removed.
    pub value: Option<Bytes>,
}

/// How long [`Kv::values`] may take before it counts as failed.
const VALUES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Most keys [`Kv::get_many`] names in one batch direct get (nats-server answers up to
/// 1,024 subjects in one).
pub const GET_MANY_BATCH: usize = 256;

/// How long one batch direct get may take before it counts as failed (callers bound it
/// further: the long polls' reader by the broker deadline).
const GET_MANY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A key-value bucket with one revision per key; keys are NATS subject tokens, and
/// filters subject patterns (`*` one token, `>` the rest).
pub trait Kv: Debug + Send + Sync {
    /// The bucket's name (for errors and logs).
    fn name(&self) -> &'static str;

    /// The value under `key`, `None` if absent or removed. On a replicated bucket a miss
    /// is asked again of the stream's leader ([`Bucket`]), so that what was just written
    /// is never reported missing.
    fn get<'a>(&'a self, key: &'a str) -> BoxFut<'a, Result<Option<Entry>, BoxError>>;

    /// [`Kv::get`] of each of `keys`, in their order, in as few requests as the bucket
    /// allows (JetStream: one batch direct get per [`GET_MANY_BATCH`] keys).
    fn get_many<'a>(
        &'a self,
        keys: &'a [String],
    ) -> BoxFut<'a, Result<Vec<Option<Entry>>, BoxError>> {
        Box::pin(futures_util::future::try_join_all(
            keys.iter().map(|key| self.get(key)),
        ))
    }

    /// [`Kv::get`] without asking the leader again on a miss.
    fn entry<'a>(&'a self, key: &'a str) -> BoxFut<'a, Result<Option<Entry>, BoxError>>;

    /// Creates `key`; [`KvError::Exists`] when it has a value. Returns the revision.
    fn create<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFut<'a, Result<u64, KvError>>;

    /// Writes `key` if its revision is still `revision`; [`KvError::Conflict`] if not.
    fn update<'a>(
        &'a self,
        key: &'a str,
        value: Bytes,
        revision: u64,
    ) -> BoxFut<'a, Result<u64, KvError>>;

    /// Writes `key` whatever is there.
    fn put<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFut<'a, Result<u64, BoxError>>;

    /// Removes `key`, leaving a delete marker (with `revision`: only if it is still
    /// that one, else [`KvError::Conflict`]).
    fn delete<'a>(&'a self, key: &'a str, revision: Option<u64>)
    -> BoxFut<'a, Result<(), KvError>>;

    /// Removes `key` and its history, leaving a purge marker (with `revision`: only if it
    /// is still that one, else [`KvError::Conflict`]).
    fn purge<'a>(&'a self, key: &'a str, revision: Option<u64>) -> BoxFut<'a, Result<(), KvError>>;

    /// Removes every key matching `filter` with no marker left (a stream purge); returns
    /// how many messages went.
    fn remove<'a>(&'a self, filter: &'a str) -> BoxFut<'a, Result<u64, BoxError>>;

    /// The keys matching `filter` (removed ones with a marker included: they read as absent).
    fn keys<'a>(&'a self, filter: &'a str) -> BoxFut<'a, Result<Vec<String>, BoxError>>;

    /// The first write of a key matching `filter` at revision `from` or later; `None`
    /// past the last.
    fn next<'a>(
        &'a self,
        filter: &'a str,
        from: u64,
    ) -> BoxFut<'a, Result<Option<Found>, BoxError>>;

    /// Every value written from now on (markers left out), in revision order.
    fn watch(&self) -> BoxFut<'_, Result<BoxStream<'static, Result<Change, BoxError>>, BoxError>>;

    /// The value of every key matching `filter` (removed ones left out), in one read of
    /// the keys under the filter: its cost is theirs, never the bucket's.
    fn values<'a>(&'a self, filter: &'a str) -> BoxFut<'a, Result<Vec<(String, Bytes)>, BoxError>>;

    /// The last write of every key matching `filter` (a removed key's marker included),
    /// then every write of one from now on, in revision order.
    fn follow<'a>(
        &'a self,
        filter: &'a str,
    ) -> BoxFut<'a, Result<BoxStream<'static, Result<KeyWrite, BoxError>>, BoxError>>;
}

/// A JetStream KV bucket; cheap to clone.
#[derive(Debug, Clone)]
pub struct Bucket {
    store: kv::Store,
    /// The connection the store's context uses, for the batch direct get ([`Kv::get_many`]).
    client: async_nats::Client,
    name: &'static str,
    /// Whether a miss is asked again of the leader ([`Kv::get`]).
    replicated: bool,
}

impl Bucket {
    /// `store` over `client` (its context's), named `name`; `replicated` when it has more
    /// than one copy.
    pub fn new(
        store: kv::Store,
        client: async_nats::Client,
        name: &'static str,
        replicated: bool,
    ) -> Self {
        Self {
            store,
            client,
            name,
            replicated,
        }
    }

    /// Shared, as the aggregates hold it.
    pub fn shared(self) -> Arc<dyn Kv> {
        Arc::new(self)
    }

    /// The last message of `key`'s subject, from the stream's leader.
    async fn read_leader(&self, key: &str) -> Result<Option<Entry>, BoxError> {
        let subject = format!("{}{key}", self.store.prefix);
        match self
            .store
            .stream
            .get_last_raw_message_by_subject(&subject)
            .await
        {
            Ok(m) if removed(&m.headers) => Ok(None),
            Ok(m) => Ok(Some(Entry {
                value: m.payload,
                revision: m.sequence,
                created: m.time,
            })),
            Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn read(&self, key: &str) -> Result<Option<Entry>, BoxError> {
        let entry = self.store.entry(key).await?;
        Ok(entry
            .filter(|e| e.operation == kv::Operation::Put)
            .map(|e| Entry {
                value: e.value,
                revision: e.revision,
                created: e.created,
            }))
    }
}

fn updated(e: kv::UpdateError) -> KvError {
    if lost_race(&e) {
        KvError::Conflict
    } else {
        KvError::Failed(e.into())
    }
}

fn deleted(e: kv::DeleteError) -> KvError {
    if lost_delete_race(&e) {
        KvError::Conflict
    } else {
        KvError::Failed(e.into())
    }
}

impl Kv for Bucket {
    fn name(&self) -> &'static str {
        self.name
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFut<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            match self.read(key).await? {
                Some(entry) => Ok(Some(entry)),
                None if self.replicated => self.read_leader(key).await,
                None => Ok(None),
            }
        })
    }

    fn get_many<'a>(
        &'a self,
        keys: &'a [String],
    ) -> BoxFut<'a, Result<Vec<Option<Entry>>, BoxError>> {
        Box::pin(async move {
            let mut found = HashMap::with_capacity(keys.len());
            for batch in keys.chunks(GET_MANY_BATCH) {
                tokio::time::timeout(GET_MANY_TIMEOUT, self.last_of(batch, &mut found))
                    .await
                    .map_err(|_| "the batch direct get timed out")??;
            }
            let mut entries = Vec::with_capacity(keys.len());
            for key in keys {
                entries.push(match found.remove(key.as_str()) {
                    Some(entry) => entry,
                    // Not in the answer: a key never written, or one the batch left out;
                    // asked alone, as a get would (the leader too on a replicated bucket).
                    None => self.get(key).await?,
                });
            }
            Ok(entries)
        })
    }

    fn entry<'a>(&'a self, key: &'a str) -> BoxFut<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(self.read(key))
    }

    fn create<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFut<'a, Result<u64, KvError>> {
        Box::pin(async move {
            self.store.create(key, value).await.map_err(|e| {
                if e.kind() == kv::CreateErrorKind::AlreadyExists {
                    KvError::Exists
                } else {
                    KvError::Failed(e.into())
                }
            })
        })
    }

    fn update<'a>(
        &'a self,
        key: &'a str,
        value: Bytes,
        revision: u64,
    ) -> BoxFut<'a, Result<u64, KvError>> {
        Box::pin(async move {
            self.store
                .update(key, value, revision)
                .await
                .map_err(updated)
        })
    }

    fn put<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFut<'a, Result<u64, BoxError>> {
        Box::pin(async move { Ok(self.store.put(key, value).await?) })
    }

    fn delete<'a>(
        &'a self,
        key: &'a str,
        revision: Option<u64>,
    ) -> BoxFut<'a, Result<(), KvError>> {
        Box::pin(async move {
            self.store
                .delete_expect_revision(key, revision)
                .await
                .map_err(deleted)
        })
    }

    fn purge<'a>(&'a self, key: &'a str, revision: Option<u64>) -> BoxFut<'a, Result<(), KvError>> {
        Box::pin(async move {
            self.store
                .purge_expect_revision(key, revision)
                .await
                .map_err(deleted)
        })
    }

    fn remove<'a>(&'a self, filter: &'a str) -> BoxFut<'a, Result<u64, BoxError>> {
        Box::pin(async move {
            let filter = format!("{}{filter}", self.store.prefix);
            Ok(self.store.stream.purge().filter(filter).await?.purged)
        })
    }

    fn keys<'a>(&'a self, filter: &'a str) -> BoxFut<'a, Result<Vec<String>, BoxError>> {
        Box::pin(async move {
            // The stream's subjects under the filter, one request per page, rather than
            // replaying every key of the bucket.
            let subjects = self
                .store
                .stream
                .info_with_subjects(format!("{}{filter}", self.store.prefix))
                .await?;
            let subjects: Vec<(String, usize)> = subjects.try_collect().await?;
            Ok(subjects
                .into_iter()
                .filter_map(|(subject, _)| {
                    subject
                        .strip_prefix(self.store.prefix.as_str())
                        .map(str::to_owned)
                })
                .collect())
        })
    }

    fn next<'a>(
        &'a self,
        filter: &'a str,
        from: u64,
    ) -> BoxFut<'a, Result<Option<Found>, BoxError>> {
        Box::pin(async move {
            let subject = format!("{}{filter}", self.store.prefix);
            let message = match self
                .store
                .stream
                .direct_get_next_for_subject(subject, Some(from))
                .await
            {
                Ok(m) => m,
                Err(e) if e.kind() == jetstream::stream::DirectGetErrorKind::NotFound => {
                    return Ok(None);
                }
                Err(e) => return Err(e.into()),
            };
            let put = message
                .headers
                .get("KV-Operation")
                .is_none_or(|op| op.as_str() == "PUT");
            let key = message
                .subject
                .strip_prefix(self.store.prefix.as_str())
                .unwrap_or_default()
                .to_owned();
            let put = put && !key.is_empty();
            Ok(Some((key, message.sequence, put)))
        })
    }

    fn watch(&self) -> BoxFut<'_, Result<BoxStream<'static, Result<Change, BoxError>>, BoxError>> {
        Box::pin(async move {
            let watch = self.store.watch_all().await?;
            Ok(watch
                .filter_map(|entry| {
                    std::future::ready(match entry {
                        Ok(e) if e.operation == kv::Operation::Put => Some(Ok(Change {
                            key: e.key,
                            revision: e.revision,
                            value: e.value,
                        })),
                        Ok(_) => None,
                        Err(err) => Some(Err(err.into())),
                    })
                })
                .boxed())
        })
    }

    fn values<'a>(&'a self, filter: &'a str) -> BoxFut<'a, Result<Vec<(String, Bytes)>, BoxError>> {
        Box::pin(self.last_values(filter))
    }

    fn follow<'a>(
        &'a self,
        filter: &'a str,
    ) -> BoxFut<'a, Result<BoxStream<'static, Result<KeyWrite, BoxError>>, BoxError>> {
        Box::pin(async move {
            let watch = self.store.watch_with_history(filter).await?;
            Ok(watch
                .map(|entry| {
                    let e = entry?;
                    Ok(KeyWrite {
                        key: e.key,
                        revision: e.revision,
                        value: (e.operation == kv::Operation::Put).then_some(e.value),
                    })
                })
                .boxed())
        })
    }
}

impl Bucket {
    /// The last write of each of `keys` (at most [`GET_MANY_BATCH`]) in one batch direct
    /// get (`multi_last`, nats-server 2.11 and later), into `found` by key: `None` for a
    /// removed key; a key without any write is not answered. The answers come as one
    /// message each on an inbox of their own, then an end-of-batch status (204).
    async fn last_of(
        &self,
        keys: &[String],
        found: &mut HashMap<String, Option<Entry>>,
    ) -> Result<(), BoxError> {
        let subjects: Vec<String> = keys
            .iter()
            .map(|key| format!("{}{key}", self.store.prefix))
            .collect();
        let body = serde_json::to_vec(&serde_json::json!({ "multi_last": subjects }))?;
        let inbox = self.client.new_inbox();
        // On this connection the subscription reaches the broker before the request does.
        let mut answers = self.client.subscribe(inbox.clone()).await?;
        // The gateway's contexts have no JetStream domain (`tenants/runtime.rs`): the
        // `$JS.API` spelling, the first.
        let [request, _] = jsapi::api(&format!("DIRECT.GET.{}", self.store.stream_name));
        self.client
            .publish_with_reply(request, inbox, body.into())
            .await?;
        while let Some(message) = answers.next().await {
            match message.status {
                None => {}
                // End of the batch, or none of the keys has a write.
                Some(s) if s.as_u16() == 204 || s == async_nats::StatusCode::NOT_FOUND => {
                    return Ok(());
                }
                Some(s) => {
                    return Err(format!(
                        "batch direct get answered {s}: {}",
                        message.description.as_deref().unwrap_or_default()
                    )
                    .into());
                }
            }
            let message = jetstream::message::StreamMessage::try_from(message)?;
            let Some(key) = message.subject.strip_prefix(self.store.prefix.as_str()) else {
                continue;
            };
            let entry = (!removed(&message.headers)).then(|| Entry {
                value: message.payload,
                revision: message.sequence,
                created: message.time,
            });
            found.insert(key.to_owned(), entry);
        }
        Err("the batch direct get's inbox closed".into())
    }

    /// [`Kv::values`]: one ordered consumer filtered to the keys, the last message of each.
    async fn last_values(&self, filter: &str) -> Result<Vec<(String, Bytes)>, BoxError> {
        use jetstream::consumer::{DeliverPolicy, pull::OrderedConfig};
        let consumer = self
            .store
            .stream
            .create_consumer(OrderedConfig {
                filter_subject: format!("{}{filter}", self.store.prefix),
                // A key may have been rewritten: only its last value counts.
                deliver_policy: DeliverPolicy::LastPerSubject,
                ..Default::default()
            })
            .await?;
        let mut pending = consumer.cached_info().num_pending;
        let mut values = Vec::new();
        if pending == 0 {
            return Ok(values);
        }
        let mut messages = consumer.messages().await?;
        while pending > 0 {
            let message = tokio::time::timeout(VALUES_TIMEOUT, messages.next())
                .await?
                .ok_or("the consumer ended early")??;
            pending = message.info()?.pending;
            // Purged or deleted keys carry an empty payload and a marker: nothing to list.
            if message.payload.is_empty() || message.headers.as_ref().is_some_and(removed) {
                continue;
            }
            let Some(key) = message.subject.strip_prefix(self.store.prefix.as_str()) else {
                continue;
            };
            values.push((key.to_owned(), message.payload.clone()));
        }
        Ok(values)
    }
}

/// Whether a KV stream message is a delete or purge marker (its `KV-Operation` header).
pub(super) fn removed(headers: &async_nats::HeaderMap) -> bool {
    headers
        .get("KV-Operation")
        .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_and_purge_markers_are_removed_values() {
        let marker = |op: &str| {
            let mut h = async_nats::HeaderMap::new();
            h.insert("KV-Operation", op);
            h
        };
        assert!(removed(&marker("DEL")));
        assert!(removed(&marker("PURGE")));
        assert!(!removed(&async_nats::HeaderMap::new()));
        assert!(!removed(&marker("PUT")));
    }
}
