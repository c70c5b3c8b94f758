//! The deployment records this gateway wrote last (or recovery read at start,
//! [`super::Deployments::get_kept`]), with their KV revisions: a hint that lets
//! [`super::Deployments::update`] go straight to the compare-and-set instead of reading
//! the record first.
//!
//! A deployment in flight is written several times by the gateway that accepted it
//! (created, marked published, then `delivered`, `started` and `finished` applied), and
//! each write used to begin with a read of what the previous one had just written: one
//! broker round trip in four on a deployment's path. The hint is never trusted for what
//! the record *is*: a write built on it names the revision it read, so a record someone
//! else changed meanwhile (another gateway, a concurrent task here) refuses the write
//! and the caller falls back to reading it. Nothing is read from it but by that write,
//! so a stale entry costs one failed write, never a wrong answer.
//!
//! Terminal records are dropped from it (they are seldom written again), which keeps it
//! about as large as the work in flight; past [`MAX_ENTRIES`] or [`MAX_BYTES`] it is
//! emptied, costing only the reads it saved.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::record::DeploymentRecord;

/// Records kept at most (a little more than the deployments a busy gateway has in flight).
const MAX_ENTRIES: usize = 16_384;
/// Encoded bytes kept at most: records run up to the broker's message size.
const MAX_BYTES: usize = 64 << 20;

/// Records this gateway wrote last, by KV key; cheap to clone.
#[derive(Debug, Clone, Default)]
pub(super) struct Recent {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Key → (record as written, its revision, its encoded size).
    records: HashMap<String, (DeploymentRecord, u64, usize)>,
    bytes: usize,
}

impl Recent {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The record last written at `key` by this gateway and its revision, if known.
    pub(super) fn get(&self, key: &str) -> Option<(DeploymentRecord, u64)> {
        self.lock()
            .records
            .get(key)
            .map(|(record, revision, _)| (record.clone(), *revision))
    }

    /// `record` was written at `key` as `revision` (`size`: its encoded length). Kept
    /// unless terminal or older than what is kept (two tasks' writes can report back in
    /// either order).
    pub(super) fn wrote(&self, key: &str, record: &DeploymentRecord, revision: u64, size: usize) {
        let mut inner = self.lock();
        if record.deployment.status.is_terminal() {
            inner.remove(key);
            return;
        }
        if inner
            .records
            .get(key)
            .is_some_and(|(_, kept, _)| *kept >= revision)
        {
            return;
        }
        if inner.records.len() >= MAX_ENTRIES || inner.bytes + size > MAX_BYTES {
            inner.records.clear();
            inner.bytes = 0;
        }
        inner.remove(key);
        inner.bytes += size;
        inner
            .records
            .insert(key.to_owned(), (record.clone(), revision, size));
    }

    /// Forgets `key` (its record changed elsewhere, or could not be written).
    pub(super) fn forget(&self, key: &str) {
        self.lock().remove(key);
    }
}

impl Inner {
    fn remove(&mut self, key: &str) {
        if let Some((_, _, size)) = self.records.remove(key) {
            self.bytes -= size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flue_proto::DeploymentStatus;

    fn record(status: DeploymentStatus) -> DeploymentRecord {
        let mut r = crate::record::tests::record();
        r.deployment.status = status;
        r
    }

    #[test]
    fn a_later_revision_is_kept_and_an_earlier_one_reported_late_is_not() {
        let recent = Recent::default();
        recent.wrote("k", &record(DeploymentStatus::Queued), 7, 10);
        recent.wrote("k", &record(DeploymentStatus::InProgress), 5, 10);
        assert_eq!(recent.get("k").map(|(_, rev)| rev), Some(7));
        recent.wrote("k", &record(DeploymentStatus::InProgress), 9, 10);
        let (kept, rev) = recent.get("k").expect("kept");
        assert_eq!(rev, 9);
        assert_eq!(kept.deployment.status, DeploymentStatus::InProgress);
    }

    #[test]
    fn a_terminal_record_is_dropped_and_forget_drops_any() {
        let recent = Recent::default();
        recent.wrote("k", &record(DeploymentStatus::Queued), 1, 10);
        recent.wrote("k", &record(DeploymentStatus::Complete), 2, 10);
        assert!(recent.get("k").is_none());
        recent.wrote("j", &record(DeploymentStatus::Queued), 1, 10);
        recent.forget("j");
        assert!(recent.get("j").is_none());
        assert_eq!(recent.lock().bytes, 0);
    }

    #[test]
    fn it_is_emptied_rather_than_grow_past_its_byte_bound() {
        let recent = Recent::default();
        recent.wrote("a", &record(DeploymentStatus::Queued), 1, MAX_BYTES - 5);
        recent.wrote("b", &record(DeploymentStatus::Queued), 2, 10);
        assert!(recent.get("a").is_none());
        assert!(recent.get("b").is_some());
        assert_eq!(recent.lock().bytes, 10);
    }
}
