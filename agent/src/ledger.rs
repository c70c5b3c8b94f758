//! The exactly-once ledger: what this agent has started and finished, durable across crashes.
//!
//! One sled tree keyed by deployment id. A value is JSON, either
//! `{"state":"started","at":…}` (written and flushed *before* a hook runs) or
//! `{"state":"done","result":…}` (written and flushed *before* the answer is published).
//! A redelivered request is therefore answered from the ledger and never runs twice.

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
