//! Thin typed helpers over one KV bucket: open, get, create, list keys, purge a key.

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures_util::TryStreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::{BoxError, StoreError};

/// Opens bucket `name`, creating it (one revision per key, file storage, `replicas`
/// copies) if missing; [`crate::replicas::ensure`] changes the count of an existing one.
pub(crate) async fn bucket(
    js: &jetstream::Context,
    name: &'static str,
    replicas: usize,
) -> Result<kv::Store, StoreError> {
    let open_err = |e: BoxError| StoreError::Open {
        bucket: name,
        source: e,
    };
    match js.get_key_value(name).await {
        Ok(store) => return Ok(store),
        Err(e) if e.kind() == jetstream::context::KeyValueErrorKind::GetBucket => {}
        Err(e) => return Err(open_err(e.into())),
    }
    let created = js
        .create_key_value(kv::Config {
            bucket: name.to_owned(),
            history: 1,
            storage: jetstream::stream::StorageType::File,
            num_replicas: replicas,
            ..Default::default()
        })
        .await;
    match created {
        Ok(store) => Ok(store),
        // Another gateway may have created it in between.
        Err(create_err) => js
            .get_key_value(name)
            .await
            .map_err(|_| open_err(create_err.into())),
    }
}

pub(super) fn encode(value: &impl Serialize) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("gateway state types always serialise"))
}

pub(super) fn decode<T: DeserializeOwned>(
    bucket: &'static str,
    key: &str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|source| StoreError::Decode {
        bucket,
        key: key.to_owned(),
        source,
    })
}

/// The value under `key` and its revision, `None` if absent or deleted.
///
/// A read is answered by any copy of the bucket (JetStream's direct get). On a replicated
/// bucket (`leader_on_miss`) a follower may not have the newest acknowledged write yet, so
/// a miss there is asked again of the stream's leader, which has every acknowledged write:
/// what a gateway has just created (a config, a server, a deployment) is never reported
/// missing to the next call. (Seen without it: 29 of a 10,000-member group's deployments
/// refused with "config not found" on the 3-node cluster.) A value found may still be an
/// older revision; every write is a compare-and-set on the revision, so that is a lost
/// race, never a lost write.
pub(super) async fn get<T: DeserializeOwned>(
    store: &kv::Store,
    bucket: &'static str,
    key: String,
    leader_on_miss: bool,
) -> Result<Option<(T, u64)>, StoreError> {
    let read_err = |e: BoxError| StoreError::Read {
        bucket,
        key: key.clone(),
        source: e,
    };
    let entry = store
        .entry(key.clone())
        .await
        .map_err(|e| read_err(e.into()))?;
    if let Some(e) = entry.as_ref().filter(|e| e.operation == kv::Operation::Put) {
        return Ok(Some((decode(bucket, &key, &e.value)?, e.revision)));
    }
    if !leader_on_miss {
        return Ok(None);
    }
    let subject = format!("{}{key}", store.prefix);
    match store.stream.get_last_raw_message_by_subject(&subject).await {
        Ok(m) if removed(&m.headers) => Ok(None),
        Ok(m) => Ok(Some((decode(bucket, &key, &m.payload)?, m.sequence))),
        Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {
            Ok(None)
        }
        Err(e) => Err(read_err(e.into())),
    }
}

/// Whether a KV stream message is a delete or purge marker (its `KV-Operation` header).
pub(super) fn removed(headers: &async_nats::HeaderMap) -> bool {
    headers
        .get("KV-Operation")
        .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"))
}

/// Creates `key`; when it exists, returns what `existing` reads there instead.
pub(super) async fn create<T, F, Fut>(
    store: &kv::Store,
    bucket: &'static str,
    key: &str,
    value: &T,
    existing: F,
) -> Result<Option<T>, StoreError>
where
    T: Serialize,
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<Option<T>, StoreError>>,
{
    match store.create(key, encode(value)).await {
        Ok(_) => Ok(None),
        Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
            match existing(key.to_owned()).await? {
                Some(found) => Ok(Some(found)),
                // Deleted between the two calls: nothing the gateway does, report it as a failed write.
                None => Err(StoreError::Write {
                    bucket,
                    key: key.to_owned(),
                    source: e.into(),
                }),
            }
        }
        Err(e) => Err(StoreError::Write {
            bucket,
            key: key.to_owned(),
            source: e.into(),
        }),
    }
}

/// Keys of `store` matching the subject pattern `filter` (a key with `*` wildcards).
///
/// Asks the stream for its subjects under the filter, one request per page, rather
/// than replaying every key of the bucket.
pub(super) async fn keys(
    store: &kv::Store,
    bucket: &'static str,
    filter: &str,
) -> Result<Vec<String>, StoreError> {
    let list_err = |e: BoxError| StoreError::List { bucket, source: e };
    let subjects = store
        .stream
        .info_with_subjects(format!("{}{filter}", store.prefix))
        .await
        .map_err(|e| list_err(e.into()))?;
    let subjects: Vec<(String, usize)> = subjects
        .try_collect()
        .await
        .map_err(|e| list_err(e.into()))?;
    Ok(subjects
        .into_iter()
        .filter_map(|(subject, _)| {
            subject
                .strip_prefix(store.prefix.as_str())
                .map(str::to_owned)
        })
        .collect())
}

/// Removes `key` (wildcards allowed) of bucket `name` with a purge of its subject in the bucket's stream:
/// unlike a KV delete or purge, it leaves no tombstone, so listing the bucket's keys
/// costs only what is left in it (nothing if the key is not there).
pub(crate) async fn purge_key(
    kv: &kv::Store,
    name: &'static str,
    key: &str,
) -> Result<(), StoreError> {
    let filter = format!("{}{key}", kv.prefix);
    kv.stream
        .purge()
        .filter(filter.clone())
        .await
        .map(drop)
        .map_err(|e| StoreError::Purge {
            bucket: name,
            filter,
            source: e.into(),
        })
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
