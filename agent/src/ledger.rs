//! The exactly-once ledger: what this agent has started and finished, durable across crashes.
//!
//! One sled tree keyed by request ([`LedgerKey`]: tenant, server, deployment id and the time
//! the gateway accepted the request), not by deployment id alone, since an id can come back
//! for a new request once the broker has lost its state. A value is JSON, either
//! `{"state":"started","at":…,"hook":{"pid":…,"start_time":…,"boot_id":…}}` (written and
//! flushed *before* a hook runs, naming its process group so that the next agent can kill
//! what is left of it, see [`crate::orphans`]) or `{"state":"done","result":…}` (written
//! and flushed *before* the answer is published). A redelivered request is therefore
//! answered from the ledger and never runs twice.
//!
//! # One flush before a hook
//!
//! `started` and the hook's process group are one write and one flush: the agent spawns
//! the hook's [guard](crate::guard) first, which leads the new group and waits for a go
//! byte on its stdin; the agent records the entry with the guard's identity, and only then
//! sends the go, and the guard starts the hook. A crash at any point leaves one of:
//!
//! - no entry, guard spawned or not: the hook never ran (the guard had no go; it ends at
//!   end of file on its stdin, or is killed with the agent's death as always). The request
//!   is redelivered and runs, which is right: nothing of it ran.
//! - the entry, go not sent yet: the hook never ran, but the next agent reports it
//!   `interrupted` (it cannot tell), as it did when the agent died between the flush and the
//!   spawn. Never run twice, at worst not run once: the same trade as before.
//! - the entry, hook running: the guard kills the group when the agent dies, and the next
//!   agent kills whatever the entry's group still holds before reporting `interrupted`.
//!
//! Before, `started` was flushed before the spawn and the group in a second flush after
//! it, with a window (between the spawn and the second flush) in which a running hook was
//! named nowhere; there is none now. An entry without `hook` is still written when the
//! guard's `/proc` entry cannot be read, and read from older agents.
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
//! Pruning decodes values only, so it works whatever the keys look like.

mod key;

use std::path::{Path, PathBuf};

use flue_proto::{DeploymentResult, RequestDigest};

use crate::process::HookProcess;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

pub use key::LedgerKey;

/// sled keeps a page cache of up to 1 GiB by default; the ledger is tiny and the agent
/// should stay small when idle.
const CACHE_BYTES: u64 = 4 << 20;
/// Key of the ledger's creation time in its `meta` tree.
const CREATED_AT: &str = "created_at";

/// What the ledger knows about one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Entry {
    /// The hook was (about to be) started and no result was recorded.
    Started {
        /// When it was started; absent only for an entry that could not be read back.
        #[serde(default, with = "time::serde::rfc3339::option")]
        at: Option<OffsetDateTime>,
        /// The hook's process group once it runs; absent before that, and in entries
        /// written by agents that did not record it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hook: Option<HookProcess>,
        /// Digest of the request message; absent in entries of agents older than it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        digest: Option<RequestDigest>,
        /// Sequence of the request message in the request stream: a signed copy of the
        /// request arriving as another message is a replay. Absent in older entries.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream_seq: Option<u64>,
    },
    /// The final result, exactly as published.
    Done {
        /// The result.
        result: DeploymentResult,
        /// Digest of the request message; absent in entries of agents older than it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        digest: Option<RequestDigest>,
        /// Sequence of the request message in the request stream: a signed copy of the
        /// request arriving as another message is a replay. Absent in older entries.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream_seq: Option<u64>,
    },
}

impl Entry {
    /// Digest of the request the entry was recorded for, if known.
    pub fn digest(&self) -> Option<&RequestDigest> {
        match self {
            Self::Started { digest, .. } | Self::Done { digest, .. } => digest.as_ref(),
        }
    }

    /// Stream sequence of the request message the entry was recorded for, if known.
    pub fn stream_seq(&self) -> Option<u64> {
        match self {
            Self::Started { stream_seq, .. } | Self::Done { stream_seq, .. } => *stream_seq,
        }
    }
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
    #[error("ledger {op} failed for request {key}")]
    Io {
        /// `read`, `write` or `flush`.
        op: &'static str,
        /// The request concerned.
        key: LedgerKey,
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
    /// Reading or recording the ledger's creation time failed.
    #[error("ledger {op} of its creation time failed")]
    Meta {
        /// `read` or `write`.
        op: &'static str,
        /// What sled said.
        source: sled::Error,
    },
    /// Scanning the ledger for unfinished hooks failed.
    #[error("ledger scan for unfinished hooks failed")]
    Scan {
        /// What sled said.
        source: sled::Error,
    },
    /// An entry could not be encoded.
    #[error("cannot encode the ledger entry of request {key}")]
    Encode {
        /// The request concerned.
        key: LedgerKey,
        /// What serde said.
        source: serde_json::Error,
    },
}

/// Handle on the ledger; cheap to clone.
#[derive(Debug, Clone)]
pub struct Ledger {
    db: sled::Db,
}

/// How long [`Ledger::open`] waits for the ledger's file lock.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Ledger {
    /// Opens (or creates) the ledger at `path`.
    ///
    /// sled locks the ledger's files; a handle just closed (or an agent process still
    /// exiting) may hold the lock a moment longer, so a lock conflict is retried for up
    /// to [`LOCK_WAIT`] before it is an error.
    pub fn open(path: &Path) -> Result<Self, LedgerError> {
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        loop {
            let opened = sled::Config::new()
                .path(path)
                .cache_capacity(CACHE_BYTES)
                // Every write is flushed explicitly; no background flusher needs to wake up.
                .flush_every_ms(None)
                .open();
            match opened {
                Ok(db) => return Ok(Self { db }),
                Err(sled::Error::Io(e))
                    if e.to_string().contains("could not acquire lock")
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(source) => {
                    return Err(LedgerError::Open {
                        path: path.to_owned(),
                        source,
                    });
                }
            }
        }
    }

    /// When this ledger was created: recorded by the first agent that opened it empty
    /// (in a tree of its own, `meta`); `None` for a ledger an older agent filled before
    /// this was recorded. A server rebuilt under the same id starts an empty ledger, so
    /// a later time than the gateway knew tells it the server's state is gone.
    pub fn created_at(&self) -> Result<Option<OffsetDateTime>, LedgerError> {
        let read = |source| LedgerError::Meta { op: "read", source };
        let write = |source| LedgerError::Meta {
            op: "write",
            source,
        };
        let meta = self.db.open_tree("meta").map_err(read)?;
        if let Some(v) = meta.get(CREATED_AT).map_err(read)? {
            return Ok(std::str::from_utf8(&v)
                .ok()
                .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok()));
        }
        if !self.db.is_empty() {
            return Ok(None);
        }
        let now = OffsetDateTime::now_utc();
        let text = now
            .format(&Rfc3339)
            .map_err(|_| write(sled::Error::Unsupported("an unwritable time".into())))?;
        meta.insert(CREATED_AT, text.as_bytes()).map_err(write)?;
        meta.flush().map_err(write)?;
        Ok(Some(now))
    }

    /// The entry of the request `key`, if any.
    ///
    /// An entry that cannot be decoded is returned as [`Entry::Started`] without a time:
    /// the agent then reports the deployment as interrupted instead of running it again.
    pub fn get(&self, key: &LedgerKey) -> Result<Option<Entry>, LedgerError> {
        self.read(key, key.as_str())
    }

    /// Durably records that the hook of the request `key` (whose message has `digest`, at `stream_seq` in the stream)
    /// is starting now.
    pub async fn record_started(
        &self,
        key: &LedgerKey,
        at: OffsetDateTime,
        digest: Option<&RequestDigest>,
        stream_seq: Option<u64>,
    ) -> Result<(), LedgerError> {
        let entry = Entry::Started {
            at: Some(at),
            hook: None,
            digest: digest.cloned(),
            stream_seq,
        };
        self.put(key, &entry).await
    }

    /// Durably records that the hook of the request `key` (whose message has `digest`, at `stream_seq` in the stream),
    /// started at `at`, runs as `hook`.
    pub async fn record_hook(
        &self,
        key: &LedgerKey,
        at: OffsetDateTime,
        hook: HookProcess,
        digest: Option<&RequestDigest>,
        stream_seq: Option<u64>,
    ) -> Result<(), LedgerError> {
        let entry = Entry::Started {
            at: Some(at),
            hook: Some(hook),
            digest: digest.cloned(),
            stream_seq,
        };
        self.put(key, &entry).await
    }

    /// The hook processes of every request that was started and never finished, with the
    /// raw key of its entry: what a dead agent may have left running.
    pub fn unfinished_hooks(&self) -> Result<Vec<(String, HookProcess)>, LedgerError> {
        let mut found = Vec::new();
        for item in self.db.iter() {
            let (key, value) = item.map_err(|source| LedgerError::Scan { source })?;
            if let Ok(Entry::Started {
                hook: Some(hook), ..
            }) = serde_json::from_slice::<Entry>(&value)
            {
                found.push((String::from_utf8_lossy(&key).into_owned(), hook));
            }
        }
        Ok(found)
    }

    /// Durably records the final result of the request `key` (whose message has `digest`, at `stream_seq` in the stream).
    pub async fn record_done(
        &self,
        key: &LedgerKey,
        result: &DeploymentResult,
        digest: Option<&RequestDigest>,
        stream_seq: Option<u64>,
    ) -> Result<(), LedgerError> {
        let entry = Entry::Done {
            result: result.clone(),
            digest: digest.cloned(),
            stream_seq,
        };
        self.put(key, &entry).await
    }

    /// Removes every `done` entry whose result finished before `cutoff` and returns how many
    /// were removed, after flushing. `started` and unreadable entries are always kept (see
    /// the module docs for why this is safe).
    pub async fn prune_done_before(&self, cutoff: OffsetDateTime) -> Result<usize, LedgerError> {
        let err = |op| move |source| LedgerError::Prune { op, source };
        let mut pruned = 0;
        for item in self.db.iter() {
            let (key, value) = item.map_err(err("scan"))?;
            let Ok(Entry::Done { result, .. }) = serde_json::from_slice::<Entry>(&value) else {
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

    /// Reads and decodes the entry stored under `raw_key` on behalf of the request `key`.
    fn read(&self, key: &LedgerKey, raw_key: &str) -> Result<Option<Entry>, LedgerError> {
        let raw = self.db.get(raw_key).map_err(|source| LedgerError::Io {
            op: "read",
            key: key.clone(),
            source,
        })?;
        Ok(raw.map(|bytes| {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::error!(ledger.key = %raw_key, error = %e, "unreadable ledger entry, treating it as interrupted");
                Entry::Started {
                    at: None,
                    hook: None,
                    digest: None,
                    stream_seq: None,
                }
            })
        }))
    }

    async fn put(&self, key: &LedgerKey, entry: &Entry) -> Result<(), LedgerError> {
        let value = serde_json::to_vec(entry).map_err(|source| LedgerError::Encode {
            key: key.clone(),
            source,
        })?;
        let io = |op| {
            move |source| LedgerError::Io {
                op,
                key: key.clone(),
                source,
            }
        };
        self.db.insert(key.as_str(), value).map_err(io("write"))?;
        // Durable before the caller takes the next step (run the hook, publish the answer).
        self.db.flush_async().await.map_err(io("flush"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
