//! The one compare-and-set loop: read a key with its revision, let a change decide,
//! write at that revision (or create the key when it was absent), and on a lost race
//! read again, a bounded number of times.

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::StoreError;
use super::kv::{Kv, KvError};

/// How many times a compare-and-set is tried before giving up
/// ([`StoreError::Contention`]).
pub const MAX_CAS_ATTEMPTS: usize = 32;

/// How a key's value is written and read back.
pub trait Codec<T> {
    /// The bytes stored for `value`.
    fn encode(value: &T) -> Bytes;
    /// The value stored under `key` of `bucket`.
    fn decode(bucket: &'static str, key: &str, bytes: &[u8]) -> Result<T, StoreError>;
}

/// JSON, as every record of the gateway is stored.
#[derive(Debug)]
pub struct Json;

impl<T: Serialize + DeserializeOwned> Codec<T> for Json {
    fn encode(value: &T) -> Bytes {
        super::bucket::encode(value)
    }

    fn decode(bucket: &'static str, key: &str, bytes: &[u8]) -> Result<T, StoreError> {
        super::bucket::decode(bucket, key, bytes)
    }
}

/// Text as it is (a lossy UTF-8 read).
#[derive(Debug)]
pub struct Text;

impl Codec<String> for Text {
    fn encode(value: &String) -> Bytes {
        Bytes::from(value.clone())
    }

    fn decode(_: &'static str, _: &str, bytes: &[u8]) -> Result<String, StoreError> {
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// What happens when the key is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absent {
    /// The change is not asked: the outcome is [`Outcome::Kept`] with `None`.
    Keep,
    /// The change is asked with `None`, and what it writes is created.
    Create,
}

/// How many times to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempts {
    /// At most this many.
    AtMost(usize),
    /// Until the change is written or declined (each lost race is someone else's write
    /// that got through, so the loop ends once the writers do).
    Unbounded,
}

/// What a change decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Change<T> {
    /// Leave the key as it is; the value to report (normally the one given).
    Keep(Option<T>),
    /// Write this value.
    Write(T),
}

/// What a compare-and-set came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<T> {
    /// The change declined: what it reported ([`Change::Keep`]), or `None` for an
    /// absent key with [`Absent::Keep`].
    Kept(Option<T>),
    /// This call wrote `value` at `revision` (`size`: its encoded length).
    Written {
        /// The value stored.
        value: T,
        /// Its revision.
        revision: u64,
        /// Its encoded length.
        size: usize,
    },
}

impl<T> Outcome<T> {
    /// The value as it stands after the call.
    pub fn value(self) -> Option<T> {
        match self {
            Outcome::Kept(value) => value,
            Outcome::Written { value, .. } => Some(value),
        }
    }
}

/// Changes `key` of `kv` with `change` under compare-and-set.
///
/// `change` gets the stored value (`None`: absent, only with [`Absent::Create`]) and
/// decides; it may run several times, on the value as it is each time, and may read
/// other things first (its future). A write refused because the key moved (or, for a
/// create, appeared) is tried again on a fresh read, up to `attempts` times in all
/// ([`StoreError::Contention`] then); any other failure is [`StoreError::Write`].
pub async fn compare_and_set<T, C, E, F, Fut>(
    kv: &dyn Kv,
    key: &str,
    absent: Absent,
    attempts: Attempts,
    mut change: F,
) -> Result<Outcome<T>, E>
where
    C: Codec<T>,
    E: From<StoreError>,
    F: FnMut(Option<T>) -> Fut,
    Fut: Future<Output = Result<Change<T>, E>>,
{
    let bucket = kv.name();
    let mut tried = 0;
    loop {
        if let Attempts::AtMost(max) = attempts
            && tried == max
        {
            return Err(StoreError::Contention {
                key: key.to_owned(),
            }
            .into());
        }
        tried += 1;
        let read = kv.get(key).await.map_err(|source| StoreError::Read {
            bucket,
            key: key.to_owned(),
            source,
        })?;
        let (value, revision) = match read {
            Some(entry) => (
                Some(C::decode(bucket, key, &entry.value)?),
                Some(entry.revision),
            ),
            None if absent == Absent::Keep => return Ok(Outcome::Kept(None)),
            None => (None, None),
        };
        let value = match change(value).await? {
            Change::Keep(value) => return Ok(Outcome::Kept(value)),
            Change::Write(value) => value,
        };
        let bytes = C::encode(&value);
        let size = bytes.len();
        let written = match revision {
            Some(revision) => kv.update(key, bytes, revision).await,
            None => kv.create(key, bytes).await,
        };
        match written {
            Ok(revision) => {
                return Ok(Outcome::Written {
                    value,
                    revision,
                    size,
                });
            }
            Err(KvError::Conflict | KvError::Exists) => continue,
            Err(KvError::Failed(source)) => {
                return Err(StoreError::Write {
                    bucket,
                    key: key.to_owned(),
                    source,
                }
                .into());
            }
        }
    }
}

/// [`compare_and_set`] of an existing key with a change made in place: `change`
/// returns whether it changed the value (false: left as found, and reported so).
/// `None` when the key is absent; [`MAX_CAS_ATTEMPTS`] tries.
pub async fn update<T, C: Codec<T>>(
    kv: &dyn Kv,
    key: &str,
    mut change: impl FnMut(&mut T) -> bool,
) -> Result<Outcome<T>, StoreError> {
    compare_and_set::<T, C, StoreError, _, _>(
        kv,
        key,
        Absent::Keep,
        Attempts::AtMost(MAX_CAS_ATTEMPTS),
        |value| {
            let decided = match value {
                Some(mut value) => match change(&mut value) {
                    true => Change::Write(value),
                    false => Change::Keep(Some(value)),
                },
                None => Change::Keep(None),
            };
            std::future::ready(Ok(decided))
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::Memory;

    async fn bump(kv: &Memory, attempts: usize) -> Result<Outcome<u32>, StoreError> {
        compare_and_set::<u32, Json, StoreError, _, _>(
            kv,
            "k",
            Absent::Keep,
            Attempts::AtMost(attempts),
            |v| std::future::ready(Ok(Change::Write(v.map_or(0, |n| n + 1)))),
        )
        .await
    }

    #[tokio::test]
    async fn a_change_is_written_at_the_revision_it_read() {
        let kv = Memory::new("b");
        kv.create("k", Json::encode(&1u32)).await.expect("store");
        let out = bump(&kv, 3).await.expect("store");
        assert!(matches!(out, Outcome::Written { value: 2, .. }));
        assert_eq!(
            kv.get("k").await.expect("store").expect("value").value,
            Json::encode(&2u32)
        );
    }

    #[tokio::test]
    async fn an_absent_key_is_kept_or_created_as_asked() {
        let kv = Memory::new("b");
        assert_eq!(bump(&kv, 3).await.expect("store"), Outcome::Kept(None));
        assert!(kv.get("k").await.expect("store").is_none());
        let created = compare_and_set::<u32, Json, StoreError, _, _>(
            &kv,
            "k",
            Absent::Create,
            Attempts::AtMost(3),
            |v| std::future::ready(Ok(Change::Write(v.unwrap_or(7)))),
        )
        .await
        .expect("store");
        assert!(matches!(created, Outcome::Written { value: 7, .. }));
    }

    #[tokio::test]
    async fn a_lost_race_is_read_again_and_endless_ones_give_up_with_contention() {
        let kv = Memory::new("b");
        kv.create("k", Json::encode(&0u32)).await.expect("store");
        // Every change is overtaken by another writer's before it is written.
        let mut runs = 0;
        let out = compare_and_set::<u32, Json, StoreError, _, _>(
            &kv,
            "k",
            Absent::Keep,
            Attempts::AtMost(4),
            |_| {
                runs += 1;
                let other = kv.put("k", Json::encode(&(100 + runs)));
                async move {
                    other.await.expect("store");
                    Ok(Change::Write(1))
                }
            },
        )
        .await;
        assert!(matches!(out, Err(StoreError::Contention { .. })));
        assert_eq!(runs, 4);
        // Overtaken once: the second run sees the other writer's value.
        let mut seen = Vec::new();
        let out = compare_and_set::<u32, Json, StoreError, _, _>(
            &kv,
            "k",
            Absent::Keep,
            Attempts::AtMost(4),
            |v| {
                let v = v.expect("value");
                seen.push(v);
                let other = (seen.len() == 1).then(|| kv.put("k", Json::encode(&50u32)));
                async move {
                    if let Some(other) = other {
                        other.await.expect("store");
                    }
                    Ok(Change::Write(v + 1))
                }
            },
        )
        .await
        .expect("store");
        assert_eq!(seen, vec![104, 50]);
        assert!(matches!(out, Outcome::Written { value: 51, .. }));
    }

    #[tokio::test]
    async fn a_declined_change_writes_nothing_and_returns_the_value_found() {
        let kv = Memory::new("b");
        let rev = kv.create("k", Json::encode(&5u32)).await.expect("store");
        let out = update::<u32, Json>(&kv, "k", |_| false)
            .await
            .expect("store");
        assert_eq!(out, Outcome::Kept(Some(5)));
        assert_eq!(
            kv.get("k").await.expect("store").expect("value").revision,
            rev
        );
        let out = update::<u32, Json>(&kv, "k", |n| {
            *n += 1;
            true
        })
        .await
        .expect("store");
        assert!(matches!(out, Outcome::Written { value: 6, .. }));
    }
}
