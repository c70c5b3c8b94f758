//! Thin typed helpers over one bucket ([`Kv`]): open, get, create, list keys, purge a
//! key, each failure a [`StoreError`] naming the bucket.

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::{BoxError, StoreError};
use super::kv::{Entry, Kv, KvError};

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

/// The value under `key` of `kv` and its revision, `None` if absent or removed.
///
/// A read is answered by any copy of the bucket (JetStream's direct get). On a replicated
/// bucket a follower may not have the newest acknowledged write yet, so a miss there is
/// asked again of the stream's leader ([`Kv::get`]), which has every acknowledged write:
/// what a gateway has just created (a config, a server, a deployment) is never reported
/// missing to the next call. (Seen without it: 29 of a 10,000-member group's deployments
/// refused with "config not found" on the 3-node cluster.) A value found may still be an
/// older revision; every write is a compare-and-set on the revision, so that is a lost
/// race, never a lost write.
pub(super) async fn get<T: DeserializeOwned>(
    kv: &dyn Kv,
    key: &str,
) -> Result<Option<(T, u64)>, StoreError> {
    let bucket = kv.name();
    let entry = kv.get(key).await.map_err(|source| StoreError::Read {
        bucket,
        key: key.to_owned(),
        source,
    })?;
    match entry {
        Some(e) => Ok(Some((decode(bucket, key, &e.value)?, e.revision))),
        None => Ok(None),
    }
}

/// [`Kv::entry`] (no second read from the leader), its failure a [`StoreError::Read`].
pub(super) async fn entry(kv: &dyn Kv, key: &str) -> Result<Option<Entry>, StoreError> {
    kv.entry(key).await.map_err(|source| StoreError::Read {
        bucket: kv.name(),
        key: key.to_owned(),
        source,
    })
}

/// Creates `key`; when it exists, returns what `existing` reads there instead.
pub(super) async fn create<T, F, Fut>(
    kv: &dyn Kv,
    key: &str,
    value: &T,
    existing: F,
) -> Result<Option<T>, StoreError>
where
    T: Serialize,
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<Option<T>, StoreError>>,
{
    let bucket = kv.name();
    match kv.create(key, encode(value)).await {
        Ok(_) => Ok(None),
        Err(KvError::Exists) => match existing(key.to_owned()).await? {
            Some(found) => Ok(Some(found)),
            // Deleted between the two calls: nothing the gateway does, report it as a failed write.
            None => Err(StoreError::Write {
                bucket,
                key: key.to_owned(),
                source: KvError::Exists.into(),
            }),
        },
        Err(e) => Err(write_error(bucket, key, e)),
    }
}

/// Creates the empty entry `key` of an index, unless it is there already (it then keeps
/// its place).
pub(super) async fn create_entry(kv: &dyn Kv, key: &str) -> Result<(), StoreError> {
    match kv.create(key, Bytes::new()).await {
        Ok(_) | Err(KvError::Exists) => Ok(()),
        Err(e) => Err(write_error(kv.name(), key, e)),
    }
}

/// Puts `value` under `key`, whatever is there.
pub(super) async fn put(kv: &dyn Kv, key: &str, value: Bytes) -> Result<(), StoreError> {
    kv.put(key, value)
        .await
        .map(drop)
        .map_err(|source| StoreError::Write {
            bucket: kv.name(),
            key: key.to_owned(),
            source,
        })
}

/// A write's failure as the store reports it.
pub(super) fn write_error(bucket: &'static str, key: &str, e: KvError) -> StoreError {
    StoreError::Write {
        bucket,
        key: key.to_owned(),
        source: match e {
            KvError::Failed(source) => source,
            other => other.into(),
        },
    }
}

/// Keys of `kv` matching the subject pattern `filter` (a key with `*` wildcards).
///
/// Asks the stream for its subjects under the filter, one request per page, rather
/// than replaying every key of the bucket.
pub(super) async fn keys(kv: &dyn Kv, filter: &str) -> Result<Vec<String>, StoreError> {
    kv.keys(filter).await.map_err(|source| StoreError::List {
        bucket: kv.name(),
        source,
    })
}

/// Removes `key` (wildcards allowed) of `kv` with a purge of its subject in the bucket's stream:
/// unlike a KV delete or purge, it leaves no tombstone, so listing the bucket's keys
/// costs only what is left in it (nothing if the key is not there). Returns how many
/// messages went.
pub(super) async fn purge_key(kv: &dyn Kv, key: &str) -> Result<u64, StoreError> {
    kv.remove(key).await.map_err(|source| StoreError::Purge {
        bucket: kv.name(),
        filter: key.to_owned(),
        source,
    })
}
