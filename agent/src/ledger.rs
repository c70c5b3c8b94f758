//! The exactly-once ledger: what this agent has started and finished, durable across crashes.
//!
//! One sled tree keyed by deployment id. A value is JSON, either
//! `{"state":"started","at":…}` (written and flushed *before* a hook runs) or
//! `{"state":"done","result":…}` (written and flushed *before* the answer is published).
//! A redelivered request is therefore answered from the ledger and never runs twice.
//!
//! # Retention
//!
//! [`Ledger::prune_done_before`] removes `done` entries that finished before a cutoff, so the
//! ledger stays bounded instead of growing by one entry per deployment forever. This is safe
//! because the gateway keeps a request in the `FLUE_REQ` stream for at most its
//! `--stream-max-age-secs` (default 7 days): a request cannot be redelivered after that, and
//! it was published before its hook finished, so once a `done` entry is older than the
//! retention (`--ledger-retention-days`, default 30, meant to be at least the stream's max
//! age) no redelivery can ever look it up again. `started` entries are never pruned: they mean a
//! hook may have been interrupted, which must still be reported if the request comes back.
//! Neither are entries that cannot be decoded, since [`Ledger::get`] treats them as `started`.

use std::path::{Path, PathBuf};

use flue_proto::{DeploymentId, DeploymentResult};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// sled keeps a page cache of up to 1 GiB by default; the ledger is tiny and the agent
/// should stay small when idle.
const CACHE_BYTES: u64 = 4 << 20;

/// What the ledger knows about one deployment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Entry {
    /// The hook was (about to be) started and no result was recorded.
    Started {
        /// When it was started; absent only for an entry that could not be read back.
        #[serde(default, with = "time::serde::rfc3339::option")]
        at: Option<OffsetDateTime>,
    },
    /// The final result, exactly as published.
    Done {
        /// The result.
        result: DeploymentResult,
    },
}

/// Why the ledger failed; the agent stops rather than risk running something twice.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// sled could not open the database (another agent holds it, or the disk failed).
    #[error("cannot open the ledger at {path}")]
    Open {
        /// The database directory.
        path: PathBuf,
        /// What sled said.
        source: sled::Error,
    },
    /// A read, write or flush failed.
    #[error("ledger {op} failed for deployment {id}")]
    Io {
        /// `read`, `write` or `flush`.
        op: &'static str,
        /// The deployment concerned.
        id: DeploymentId,
        /// What sled said.
        source: sled::Error,
    },
    /// Scanning or flushing the ledger while pruning failed.
    #[error("ledger {op} failed while pruning")]
    Prune {
        /// `scan`, `remove` or `flush`.
        op: &'static str,
        /// What sled said.
        source: sled::Error,
    },
    /// An entry could not be encoded.
    #[error("cannot encode the ledger entry of deployment {id}")]
    Encode {
        /// The deployment concerned.
        id: DeploymentId,
        /// What serde said.
        source: serde_json::Error,
    },
}

/// Handle on the ledger; cheap to clone.
#[derive(Debug, Clone)]
pub struct Ledger {
    db: sled::Db,
}

impl Ledger {
    /// Opens (or creates) the ledger at `path`.
    pub fn open(path: &Path) -> Result<Self, LedgerError> {
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(CACHE_BYTES)
            // Every write is flushed explicitly; no background flusher needs to wake up.
            .flush_every_ms(None)
            .open()
            .map_err(|source| LedgerError::Open {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self { db })
    }

    /// The entry for `id`, if any.
    ///
    /// An entry that cannot be decoded is returned as [`Entry::Started`] without a time:
    /// the agent then reports the deployment as interrupted instead of running it again.
    pub fn get(&self, id: &DeploymentId) -> Result<Option<Entry>, LedgerError> {
        let raw = self.db.get(id.as_str()).map_err(|source| LedgerError::Io {
            op: "read",
            id: id.clone(),
            source,
        })?;
        Ok(raw.map(|bytes| {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::error!(deployment.id = %id, error = %e, "unreadable ledger entry, treating it as interrupted");
                Entry::Started { at: None }
            })
        }))
    }

    /// Durably records that the hook of `id` is starting now.
    pub async fn record_started(
        &self,
        id: &DeploymentId,
        at: OffsetDateTime,
    ) -> Result<(), LedgerError> {
        self.put(id, &Entry::Started { at: Some(at) }).await
    }

    /// Durably records the final result of `id`.
    pub async fn record_done(
        &self,
        id: &DeploymentId,
        result: &DeploymentResult,
    ) -> Result<(), LedgerError> {
        let entry = Entry::Done {
            result: result.clone(),
        };
        self.put(id, &entry).await
    }

    /// Removes every `done` entry whose result finished before `cutoff` and returns how many
    /// were removed, after flushing. `started` and unreadable entries are always kept (see
    /// the module docs for why this is safe).
    pub async fn prune_done_before(&self, cutoff: OffsetDateTime) -> Result<usize, LedgerError> {
        let err = |op| move |source| LedgerError::Prune { op, source };
        let mut pruned = 0;
        for item in self.db.iter() {
            let (key, value) = item.map_err(err("scan"))?;
            let Ok(Entry::Done { result }) = serde_json::from_slice::<Entry>(&value) else {
                continue;
            };
            if result.finished_at >= cutoff {
                continue;
            }
            // Remove only the value just read: an entry rewritten meanwhile is left alone.
            let swapped = self
                .db
                .compare_and_swap(&key, Some(&value), None::<&[u8]>)
                .map_err(err("remove"))?;
            if swapped.is_ok() {
                pruned += 1;
            }
        }
        self.db.flush_async().await.map_err(err("flush"))?;
        Ok(pruned)
    }

    async fn put(&self, id: &DeploymentId, entry: &Entry) -> Result<(), LedgerError> {
        let value = serde_json::to_vec(entry).map_err(|source| LedgerError::Encode {
            id: id.clone(),
            source,
        })?;
        let io = |op| {
            move |source| LedgerError::Io {
                op,
                id: id.clone(),
                source,
            }
        };
        self.db.insert(id.as_str(), value).map_err(io("write"))?;
        // Durable before the caller takes the next step (run the hook, publish the answer).
        self.db.flush_async().await.map_err(io("flush"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flue_proto::DeploymentStatus;

    fn id(s: &str) -> DeploymentId {
        DeploymentId::new(s).expect("valid id")
    }

    fn result() -> DeploymentResult {
        DeploymentResult {
            status: DeploymentStatus::Complete,
            status_reason: None,
            outputs: [("out".to_owned(), serde_json::json!("v"))].into(),
            deploy_stdout: "hi\n".into(),
            deploy_stderr: String::new(),
            deploy_status_code: Some(0),
            started_at: Some(OffsetDateTime::UNIX_EPOCH),
            finished_at: OffsetDateTime::UNIX_EPOCH,
        }
    }

    #[tokio::test]
    async fn transitions_survive_reopening_the_database() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ledger");
        let at = OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(7);
        {
            let ledger = Ledger::open(&path).expect("open");
            assert_eq!(ledger.get(&id("d1")).expect("get"), None);
            ledger.record_started(&id("d1"), at).await.expect("started");
            ledger.record_started(&id("d2"), at).await.expect("started");
            ledger
                .record_done(&id("d2"), &result())
                .await
                .expect("done");
        }
        let ledger = Ledger::open(&path).expect("reopen");
        assert_eq!(
            ledger.get(&id("d1")).expect("get"),
            Some(Entry::Started { at: Some(at) })
        );
        assert_eq!(
            ledger.get(&id("d2")).expect("get"),
            Some(Entry::Done { result: result() })
        );
        assert_eq!(ledger.get(&id("d3")).expect("get"), None);
    }

    #[test]
    fn entries_have_the_documented_json_shape() {
        let text = serde_json::to_string(&Entry::Started {
            at: Some(OffsetDateTime::UNIX_EPOCH),
        })
        .expect("ser");
        assert_eq!(text, r#"{"state":"started","at":"1970-01-01T00:00:00Z"}"#);
        let text = serde_json::to_string(&Entry::Done { result: result() }).expect("ser");
        assert!(
            text.starts_with(r#"{"state":"done","result":{"status":"COMPLETE""#),
            "{text}"
        );
    }

    /// The cutoff the pruning tests use, and times just before and just after it.
    const CUTOFF: OffsetDateTime =
        OffsetDateTime::UNIX_EPOCH.saturating_add(time::Duration::days(30));
    const BEFORE: OffsetDateTime = CUTOFF.saturating_sub(time::Duration::SECOND);
    const AFTER: OffsetDateTime = CUTOFF.saturating_add(time::Duration::SECOND);

    async fn record_done_at(ledger: &Ledger, name: &str, at: OffsetDateTime) {
        let result = DeploymentResult {
            finished_at: at,
            ..result()
        };
        ledger.record_done(&id(name), &result).await.expect("done");
    }

    #[tokio::test]
    async fn old_done_entries_are_pruned_durably_and_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ledger");
        {
            let ledger = Ledger::open(&path).expect("open");
            for name in ["d1", "d2", "d3"] {
                record_done_at(&ledger, name, BEFORE).await;
            }
            assert_eq!(ledger.prune_done_before(CUTOFF).await.expect("prune"), 3);
            assert_eq!(ledger.prune_done_before(CUTOFF).await.expect("prune"), 0);
        }
        // Reopened: the removal was flushed.
        let ledger = Ledger::open(&path).expect("reopen");
        for name in ["d1", "d2", "d3"] {
            assert_eq!(ledger.get(&id(name)).expect("get"), None, "{name}");
        }
    }

    #[tokio::test]
    async fn recent_done_entries_are_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(&dir.path().join("ledger")).expect("open");
        record_done_at(&ledger, "old", BEFORE).await;
        record_done_at(&ledger, "at_cutoff", CUTOFF).await;
        record_done_at(&ledger, "recent", AFTER).await;
        assert_eq!(ledger.prune_done_before(CUTOFF).await.expect("prune"), 1);
        assert_eq!(ledger.get(&id("old")).expect("get"), None);
        for (name, at) in [("at_cutoff", CUTOFF), ("recent", AFTER)] {
            let Some(Entry::Done { result }) = ledger.get(&id(name)).expect("get") else {
                panic!("{name} was not kept as done");
            };
            assert_eq!(result.finished_at, at, "{name}");
        }
    }

    #[tokio::test]
    async fn started_and_unreadable_entries_are_kept_however_old() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(&dir.path().join("ledger")).expect("open");
        let long_ago = OffsetDateTime::UNIX_EPOCH;
        ledger
            .record_started(&id("s_old"), long_ago)
            .await
            .expect("started");
        ledger
            .record_started(&id("s_recent"), AFTER)
            .await
            .expect("started");
        ledger
            .db
            .insert("unreadable", b"not json".as_slice())
            .expect("insert");
        record_done_at(&ledger, "done_old", BEFORE).await;
        assert_eq!(ledger.prune_done_before(CUTOFF).await.expect("prune"), 1);
        assert_eq!(
            ledger.get(&id("s_old")).expect("get"),
            Some(Entry::Started { at: Some(long_ago) })
        );
        assert_eq!(
            ledger.get(&id("s_recent")).expect("get"),
            Some(Entry::Started { at: Some(AFTER) })
        );
        assert_eq!(
            ledger.get(&id("unreadable")).expect("get"),
            Some(Entry::Started { at: None })
        );
        assert_eq!(ledger.get(&id("done_old")).expect("get"), None);
    }

    #[tokio::test]
    async fn pruning_an_empty_ledger_removes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(&dir.path().join("ledger")).expect("open");
        let now = OffsetDateTime::now_utc();
        assert_eq!(ledger.prune_done_before(now).await.expect("prune"), 0);
    }

    #[tokio::test]
    async fn an_unreadable_entry_counts_as_interrupted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(&dir.path().join("ledger")).expect("open");
        ledger
            .db
            .insert("d1", b"not json".as_slice())
            .expect("insert");
        assert_eq!(
            ledger.get(&id("d1")).expect("get"),
            Some(Entry::Started { at: None })
        );
    }
}
