//! An in-memory [`Kv`] for unit tests: a bucket's stream as JetStream keeps it with one
//! revision per key (each key's last write, a value or a marker, at its sequence), so
//! that creates, conditional writes, markers, stream purges and paging behave as they
//! do on the broker. Compiled only for tests; no end-to-end test uses it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use time::OffsetDateTime;
use tokio::sync::broadcast;

use super::error::BoxError;
use super::kv::{BoxFut, Change, Entry, Found, KeyWrite, Kv, KvError};

/// One key's last write.
#[derive(Debug, Clone)]
struct Last {
    value: Option<Bytes>,
    created: OffsetDateTime,
}

#[derive(Debug, Default)]
struct Inner {
    /// Sequence → (key, last write); a key's older writes are gone (history 1).
    messages: BTreeMap<u64, (String, Last)>,
    /// Key → its sequence in `messages`.
    keys: BTreeMap<String, u64>,
    /// The last sequence given.
    seq: u64,
}

impl Inner {
    fn last(&self, key: &str) -> Option<(u64, &Last)> {
        let seq = *self.keys.get(key)?;
        Some((seq, &self.messages.get(&seq)?.1))
    }

    fn value(&self, key: &str) -> Option<Entry> {
        let (revision, last) = self.last(key)?;
        Some(Entry {
            value: last.value.clone()?,
            revision,
            created: last.created,
        })
    }

    fn write(&mut self, key: &str, value: Option<Bytes>) -> u64 {
        if let Some(old) = self.keys.remove(key) {
            self.messages.remove(&old);
        }
        self.seq += 1;
        let last = Last {
            value,
            created: OffsetDateTime::now_utc(),
        };
        self.messages.insert(self.seq, (key.to_owned(), last));
        self.keys.insert(key.to_owned(), self.seq);
        self.seq
    }

    fn expect(&self, key: &str, revision: Option<u64>) -> Result<(), KvError> {
        match revision {
            Some(r) if self.last(key).map(|(seq, _)| seq) != Some(r) => Err(KvError::Conflict),
            _ => Ok(()),
        }
    }
}

/// An in-memory bucket; clones share it.
#[derive(Debug, Clone)]
pub struct Memory {
    name: &'static str,
    inner: Arc<Mutex<Inner>>,
    /// Every write, markers included.
    changes: broadcast::Sender<KeyWrite>,
}

impl Memory {
    /// An empty bucket named `name`.
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            inner: Arc::default(),
            changes: broadcast::channel(1024).0,
        }
    }

    /// Shared, as the aggregates hold it.
    pub fn shared(name: &'static str) -> Arc<dyn Kv> {
        Arc::new(Self::new(name))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wrote(&self, key: &str, revision: u64, value: Option<&Bytes>) {
        let _ = self.changes.send(KeyWrite {
            key: key.to_owned(),
            revision,
            value: value.cloned(),
        });
    }
}

/// Whether subject `key` matches the subject pattern `filter`.
fn matches(filter: &str, key: &str) -> bool {
    let mut keys = key.split('.');
    for token in filter.split('.') {
        match (token, keys.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (t, Some(k)) if t == k => {}
            _ => return false,
        }
    }
    keys.next().is_none()
}

fn ready<'a, T: Send + 'a>(value: T) -> BoxFut<'a, T> {
    Box::pin(std::future::ready(value))
}

impl Kv for Memory {
    fn name(&self) -> &'static str {
        self.name
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFut<'a, Result<Option<Entry>, BoxError>> {
        ready(Ok(self.lock().value(key)))
    }

    fn entry<'a>(&'a self, key: &'a str) -> BoxFut<'a, Result<Option<Entry>, BoxError>> {
        self.get(key)
    }

    fn create<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFut<'a, Result<u64, KvError>> {
        let mut inner = self.lock();
        if inner.value(key).is_some() {
            return ready(Err(KvError::Exists));
        }
        let revision = inner.write(key, Some(value.clone()));
        drop(inner);
        self.wrote(key, revision, Some(&value));
        ready(Ok(revision))
    }

    fn update<'a>(
        &'a self,
        key: &'a str,
        value: Bytes,
        revision: u64,
    ) -> BoxFut<'a, Result<u64, KvError>> {
        let mut inner = self.lock();
        if let Err(e) = inner.expect(key, Some(revision)) {
            return ready(Err(e));
        }
        let revision = inner.write(key, Some(value.clone()));
        drop(inner);
        self.wrote(key, revision, Some(&value));
        ready(Ok(revision))
    }

    fn put<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFut<'a, Result<u64, BoxError>> {
        let revision = self.lock().write(key, Some(value.clone()));
        self.wrote(key, revision, Some(&value));
        ready(Ok(revision))
    }

    fn delete<'a>(
        &'a self,
        key: &'a str,
        revision: Option<u64>,
    ) -> BoxFut<'a, Result<(), KvError>> {
        let mut inner = self.lock();
        let written = inner.expect(key, revision).map(|()| inner.write(key, None));
        drop(inner);
        ready(written.map(|revision| self.wrote(key, revision, None)))
    }

    fn purge<'a>(&'a self, key: &'a str, revision: Option<u64>) -> BoxFut<'a, Result<(), KvError>> {
        self.delete(key, revision)
    }

    fn remove<'a>(&'a self, filter: &'a str) -> BoxFut<'a, Result<u64, BoxError>> {
        let mut inner = self.lock();
        let gone: Vec<String> = inner
            .keys
            .keys()
            .filter(|k| matches(filter, k))
            .cloned()
            .collect();
        for key in &gone {
            if let Some(seq) = inner.keys.remove(key) {
                inner.messages.remove(&seq);
            }
        }
        ready(Ok(gone.len() as u64))
    }

    fn keys<'a>(&'a self, filter: &'a str) -> BoxFut<'a, Result<Vec<String>, BoxError>> {
        let inner = self.lock();
        ready(Ok(inner
            .keys
            .keys()
            .filter(|k| matches(filter, k))
            .cloned()
            .collect()))
    }

    fn next<'a>(
        &'a self,
        filter: &'a str,
        from: u64,
    ) -> BoxFut<'a, Result<Option<Found>, BoxError>> {
        let inner = self.lock();
        ready(Ok(inner
            .messages
            .range(from..)
            .find(|(_, (key, _))| matches(filter, key))
            .map(|(seq, (key, last))| {
                (key.clone(), *seq, last.value.is_some())
            })))
    }

    fn watch(&self) -> BoxFut<'_, Result<BoxStream<'static, Result<Change, BoxError>>, BoxError>> {
        let changes = writes(self.changes.subscribe(), 0, ">".to_owned()).filter_map(|w| {
            std::future::ready(w.value.map(|value| {
                Ok(Change {
                    key: w.key,
                    revision: w.revision,
                    value,
                })
            }))
        });
        ready(Ok(changes.boxed()))
    }

    fn values<'a>(&'a self, filter: &'a str) -> BoxFut<'a, Result<Vec<(String, Bytes)>, BoxError>> {
        let inner = self.lock();
        ready(Ok(inner
            .messages
            .values()
            .filter(|(key, _)| matches(filter, key))
            .filter_map(|(key, last)| Some((key.clone(), last.value.clone()?)))
            .collect()))
    }

    fn follow<'a>(
        &'a self,
        filter: &'a str,
    ) -> BoxFut<'a, Result<BoxStream<'static, Result<KeyWrite, BoxError>>, BoxError>> {
        // Subscribed under the lock, so that every write is either in the snapshot or
        // after it (one in both, sent after the lock was let go, is skipped).
        let inner = self.lock();
        let rx = self.changes.subscribe();
        let now: Vec<Result<KeyWrite, BoxError>> = inner
            .messages
            .iter()
            .filter(|(_, (key, _))| matches(filter, key))
            .map(|(seq, (key, last))| {
                Ok(KeyWrite {
                    key: key.clone(),
                    revision: *seq,
                    value: last.value.clone(),
                })
            })
            .collect();
        let after = inner.seq;
        drop(inner);
        let later = writes(rx, after, filter.to_owned()).map(Ok);
        ready(Ok(futures_util::stream::iter(now).chain(later).boxed()))
    }
}

/// The writes `rx` hears past revision `after` of keys matching `filter`.
fn writes(
    rx: broadcast::Receiver<KeyWrite>,
    after: u64,
    filter: String,
) -> impl futures_util::Stream<Item = KeyWrite> + Send + 'static {
    futures_util::stream::unfold(rx, move |mut rx| {
        let filter = filter.clone();
        async move {
            loop {
                match rx.recv().await {
                    Ok(w) if w.revision > after && matches(&filter, &w.key) => {
                        return Some((w, rx));
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_match_tokens_as_subjects_do() {
        assert!(matches("t.*", "t.a"));
        assert!(!matches("t.*", "t.a.b"));
        assert!(matches("t.>", "t.a.b"));
        assert!(matches("t.*.*", "t.a.b"));
        assert!(!matches("t.a", "t.b"));
        assert!(!matches("t.a.b", "t.a"));
    }

    #[tokio::test]
    async fn a_bucket_refuses_a_second_create_and_a_stale_update_as_jetstream_does() {
        let kv = Memory::new("b");
        let first = kv
            .create("t.a", Bytes::from_static(b"1"))
            .await
            .expect("store");
        assert!(matches!(
            kv.create("t.a", Bytes::from_static(b"2")).await,
            Err(KvError::Exists)
        ));
        let second = kv
            .update("t.a", Bytes::from_static(b"2"), first)
            .await
            .expect("store");
        assert!(matches!(
            kv.update("t.a", Bytes::from_static(b"3"), first).await,
            Err(KvError::Conflict)
        ));
        kv.delete("t.a", Some(second)).await.expect("store");
        assert!(kv.get("t.a").await.expect("store").is_none());
        assert_eq!(kv.keys("t.*").await.expect("store"), vec!["t.a".to_owned()]);
        kv.create("t.a", Bytes::from_static(b"4"))
            .await
            .expect("store");
        assert_eq!(kv.remove("t.>").await.expect("store"), 1);
        assert!(kv.keys("t.*").await.expect("store").is_empty());
    }
}
