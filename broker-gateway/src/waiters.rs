//! Long polls share one watch of the deployments bucket and the reads of the records they
//! wait on, fanned out in-process.
//!
//! A KV watch is an ordered consumer on the broker, and a stream allows only so many
//! consumers (1,000 by default): one watch per waiting client would cap the clients that
//! can wait at once. Instead the gateway runs one watch of the whole bucket ([`run`]) and
//! hands each write to the waiters of that key, through one `tokio::sync::watch` channel
//! per key that has waiters (a [`Slot`]). A key's slot exists while it has waiters and goes
//! with the last one ([`Waiter`]'s `Drop`), so the map holds only what is being waited for.
//!
//! Reads are shared too: a slot keeps the newest record known of its key (read, or handed
//! over by the watch), so a waiter joining a key already waited on reads nothing; a key
//! new to the map is queued for one read, and the reader ([`run`]) reads whatever is
//! queued a batch at a time ([`Deployments::last_writes`]: one broker request per batch),
//! two batches at once: keys queued while those are read make the next batch. Polls
//! starting together are never a broker request each, and a key's time in the queue is
//! not spent against the broker deadline, which bounds each call alone (a batch that fails
//! is read once more before its waiters are answered 503).
//!
//! A waiter registers *before* its key is read, so a write landing between the read and
//! the wait still wakes it. Whatever happens while no watch runs (at start, after the
//! watch failed, after the broker connection came back) is unknown, so each time the
//! watch (re)starts every key waited on is read again; a key waited on while no watch
//! runs is read again for each new waiter.

mod tasks;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Notify, watch};
use tracing::warn;

use crate::error::chain;
use crate::record::DeploymentRecord;
use crate::store::{DeploymentChange, StoreError};

pub use tasks::run;

/// A record as a write left it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Its KV revision: a slot keeps the record with the highest one it saw.
    pub revision: u64,
    /// The record, shared by every waiter of the key.
    pub record: Arc<DeploymentRecord>,
}

/// What a slot knows of its key.
#[derive(Debug, Clone)]
enum Known {
    /// Nothing yet: a read is queued or under way.
    Unread,
    /// The newest record read or written.
    Found(Seen),
    /// Read: there is no record.
    Missing,
    /// The read failed; the next waiter of the key queues another.
    Failed(ReadFailed),
}

/// Reading a key the long polls wait on failed; shared by the waiters of that read.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct ReadFailed(Arc<StoreError>);

impl ReadFailed {
    /// Why: a broker call that failed or ran out of time, or a record that cannot be decoded.
    pub fn cause(&self) -> &StoreError {
        &self.0
    }
}

/// The gateway's long-poll waiters, by KV key; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Waiters {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Never held across an `.await`.
    state: Mutex<State>,
    /// Told when a key is queued for the reader.
    queued: Notify,
}

#[derive(Debug, Default)]
struct State {
    slots: HashMap<String, Slot>,
    /// Keys to read, oldest first; a key at most once while its slot lives ([`Slot::queued`]).
    queue: VecDeque<String>,
    /// Whether the bucket watch runs and every slot was queued since it opened: only then
    /// is what a slot knows brought up to date by the watch alone.
    watching: bool,
}

#[derive(Debug)]
struct Slot {
    known: watch::Sender<Known>,
    waiters: usize,
    /// In the queue, or read and not yet answered.
    queued: bool,
}

impl State {
    /// Queues `key` for the reader, unless it is already.
    fn queue(&mut self, key: &str) -> bool {
        let Some(slot) = self.slots.get_mut(key) else {
            return false;
        };
        if slot.queued {
            return false;
        }
        slot.queued = true;
        self.queue.push_back(key.to_owned());
        true
    }
}

impl Waiters {
    /// Registers a waiter for `key` ([`crate::store::deployment_key`]); its record is read
    /// after this call, never before, so that no write is missed ([`Waiter::first`]).
    pub fn wait_for(&self, key: String) -> Waiter {
        let (known, queued) = {
            let mut state = self.lock();
            let slot = state.slots.entry(key.clone()).or_insert_with(|| Slot {
                known: watch::Sender::new(Known::Unread),
                waiters: 0,
                queued: false,
            });
            slot.waiters += 1;
            let known = slot.known.subscribe();
            // A new key, a failed read, or a watch that does not run: what the slot knows
            // may be missing or old, so it is read (again).
            let stale = matches!(*known.borrow(), Known::Unread | Known::Failed(_));
            if matches!(*known.borrow(), Known::Failed(_)) {
                slot.known.send_replace(Known::Unread);
            }
            let queued = (stale || !state.watching) && state.queue(&key);
            (known, queued)
        };
        if queued {
            self.inner.queued.notify_one();
        }
        Waiter {
            key,
            known,
            inner: self.inner.clone(),
        }
    }

    /// How many requests are waiting right now.
    pub fn waiting(&self) -> usize {
        self.lock().slots.values().map(|s| s.waiters).sum()
    }

    /// How many keys have waiters (entries in the map).
    pub fn keys(&self) -> usize {
        self.lock().slots.len()
    }

    /// Hands a write to the waiters of its key; decodes it only if there are any.
    fn deliver(&self, change: &DeploymentChange) {
        if !self.lock().slots.contains_key(&change.key) {
            return;
        }
        match change.record() {
            Ok(record) => self.found(
                &change.key,
                Seen {
                    revision: change.revision,
                    record: Arc::new(record),
                },
            ),
            // The waiters keep what they know; their answer says it when the time is up.
            Err(e) => {
                warn!(error = %chain(&e), key = %change.key, "deployment record written cannot be decoded")
            }
        }
    }

    /// `seen` becomes what the slot of `key` knows, if it is newer: writes and reads
    /// reach a slot in any order.
    fn found(&self, key: &str, seen: Seen) {
        let state = self.lock();
        let Some(slot) = state.slots.get(key) else {
            return;
        };
        slot.known.send_if_modified(|known| match known {
            Known::Found(old) if old.revision >= seen.revision => false,
            _ => {
                *known = Known::Found(seen);
                true
            }
        });
    }

    /// The watch opened: every key waited on is read again, since writes may have been
    /// missed while none ran.
    fn watching(&self) {
        let queued = {
            let mut state = self.lock();
            state.watching = true;
            let keys: Vec<String> = state.slots.keys().cloned().collect();
            keys.iter().filter(|key| state.queue(key)).count()
        };
        if queued > 0 {
            self.inner.queued.notify_one();
        }
    }

    /// The watch stopped: until it opens again, each new waiter has its key read.
    fn not_watching(&self) {
        self.lock().watching = false;
    }

    /// Up to `n` queued keys, oldest first.
    fn take_queued(&self, n: usize) -> Vec<String> {
        let mut state = self.lock();
        let n = n.min(state.queue.len());
        state.queue.drain(..n).collect()
    }

    /// What the read of `keys` found: each slot still there knows it.
    fn read(&self, keys: &[String], read: Result<Vec<Option<DeploymentChange>>, StoreError>) {
        let read = match read {
            Ok(found) => found,
            Err(e) => {
                warn!(error = %chain(&e), keys = keys.len(), "cannot read the deployments long polls wait on");
                let failed = ReadFailed(Arc::new(e));
                let mut state = self.lock();
                for key in keys {
                    if let Some(slot) = state.slots.get_mut(key) {
                        slot.queued = false;
                        // Who already knows the record keeps waiting on it; the watch
                        // has it read again once it is back.
                        slot.known.send_if_modified(|known| match known {
                            Known::Unread => {
                                *known = Known::Failed(failed.clone());
                                true
                            }
                            _ => false,
                        });
                    }
                }
                return;
            }
        };
        for (key, change) in keys.iter().zip(read) {
            let outcome = change.map(|change| {
                change
                    .record()
                    .map(|record| Seen {
                        revision: change.revision,
                        record: Arc::new(record),
                    })
                    .map_err(|e| {
                        warn!(error = %chain(&e), key = %key, "deployment record cannot be decoded");
                        ReadFailed(Arc::new(e))
                    })
            });
            let mut state = self.lock();
            let Some(slot) = state.slots.get_mut(key) else {
                continue;
            };
            slot.queued = false;
            slot.known
                .send_if_modified(|known| match (&*known, outcome) {
                    (Known::Found(old), Some(Ok(seen))) if old.revision >= seen.revision => false,
                    (_, Some(Ok(seen))) => {
                        *known = Known::Found(seen);
                        true
                    }
                    // A record once found is not taken back (records are never deleted).
                    (Known::Found(_), _) => false,
                    (_, None) => {
                        *known = Known::Missing;
                        true
                    }
                    (_, Some(Err(failed))) => {
                        *known = Known::Failed(failed);
                        true
                    }
                });
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The map stays consistent whatever panicked while holding it: counters only.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// One waiting request; unregisters itself when dropped.
#[derive(Debug)]
pub struct Waiter {
    key: String,
    known: watch::Receiver<Known>,
    inner: Arc<Inner>,
}

impl Waiter {
    /// The record as first known to this waiter: the newest its key's slot has, or, for a
    /// key no one waited on, the one read for it after this waiter registered. `None` when
    /// there is no record.
    pub async fn first(&mut self) -> Result<Option<Seen>, ReadFailed> {
        loop {
            match &*self.known.borrow_and_update() {
                Known::Unread => {}
                Known::Found(seen) => return Ok(Some(seen.clone())),
                Known::Missing => return Ok(None),
                Known::Failed(e) => return Err(e.clone()),
            }
            if self.known.changed().await.is_err() {
                // Unreachable while this waiter holds the slot.
                std::future::pending::<()>().await;
            }
        }
    }

    /// The record once the slot knows a newer one (a write, or a read after the watch
    /// restarted); waiting for no more than the caller does.
    pub async fn changed(&mut self) -> Seen {
        loop {
            if self.known.changed().await.is_err() {
                // Unreachable while this waiter holds the slot.
                std::future::pending::<()>().await;
            }
            if let Known::Found(seen) = &*self.known.borrow_and_update() {
                return seen.clone();
            }
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut state = self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = state.slots.get_mut(&self.key) {
            slot.waiters -= 1;
            if slot.waiters == 0 {
                // A read of it still queued finds no slot and is dropped.
                state.slots.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The sharing rules on in-memory buckets; that no write is missed across a broker
    //! restart is `hardening::long_polls`' (a real broker and gateway).

    use flue_proto::DeploymentStatus;

    use std::time::Duration;

    use super::tasks::READ_BATCH;
    use super::*;
    use crate::store::{Deployments, Store, deployment_key};

    const WAIT: Duration = Duration::from_secs(5);

    /// A store holding `t.d1` (QUEUED) and the key of `d1`.
    async fn store() -> (Deployments, String) {
        let deployments = Store::in_memory().deployments;
        let record = crate::record::tests::record();
        assert!(deployments.create(&record).await.expect("create"));
        let key = deployment_key(&record.deployment.tenant, &record.deployment.id);
        (deployments, key)
    }

    /// Reads what is queued as the reader does, once.
    async fn read_once(deployments: &Deployments, waiters: &Waiters) -> usize {
        let keys = waiters.take_queued(READ_BATCH);
        let read = deployments.last_writes(&keys, WAIT).await;
        waiters.read(&keys, read);
        keys.len()
    }

    #[test]
    fn a_key_is_forgotten_when_its_last_waiter_leaves() {
        let waiters = Waiters::default();
        let a = waiters.wait_for("t.d1".into());
        let b = waiters.wait_for("t.d1".into());
        let c = waiters.wait_for("t.d2".into());
        assert_eq!((waiters.waiting(), waiters.keys()), (3, 2));
        drop(a);
        assert_eq!((waiters.waiting(), waiters.keys()), (2, 2));
        drop(b);
        drop(c);
        assert_eq!((waiters.waiting(), waiters.keys()), (0, 0));
    }

    #[tokio::test]
    async fn a_key_is_read_once_however_many_wait_on_it_and_later_waiters_read_nothing() {
        let (deployments, key) = store().await;
        let waiters = Waiters::default();
        waiters.watching();
        let mut early: Vec<Waiter> = (0..100).map(|_| waiters.wait_for(key.clone())).collect();
        let mut other = waiters.wait_for("t.nothing".into());
        assert_eq!(
            read_once(&deployments, &waiters).await,
            2,
            "one read per key"
        );
        for w in &mut early {
            let seen = w.first().await.expect("read").expect("found");
            assert_eq!(seen.record.deployment.status, DeploymentStatus::Queued);
        }
        assert!(other.first().await.expect("read").is_none(), "missing");
        let mut late = waiters.wait_for(key.clone());
        assert!(
            waiters.take_queued(READ_BATCH).is_empty(),
            "nothing to read"
        );
        let seen = late.first().await.expect("known").expect("found");
        assert_eq!(seen.revision, 1);
    }

    #[tokio::test]
    async fn a_restarted_watch_has_every_key_waited_on_read_again_and_wakes_who_it_changed() {
        let (deployments, key) = store().await;
        let waiters = Waiters::default();
        waiters.watching();
        let mut w = waiters.wait_for(key.clone());
        read_once(&deployments, &waiters).await;
        let first = w.first().await.expect("read").expect("found");
        // A write while no watch runs reaches no waiter...
        waiters.not_watching();
        let (tenant, id) = (&first.record.deployment.tenant, &first.record.deployment.id);
        deployments
            .update(tenant, id, |r| {
                r.deployment.status = DeploymentStatus::Complete;
                true
            })
            .await
            .expect("update")
            .expect("exists");
        // ...until the watch opens again and the key is read again.
        waiters.watching();
        assert_eq!(read_once(&deployments, &waiters).await, 1);
        let seen = tokio::time::timeout(WAIT, w.changed())
            .await
            .expect("woken");
        assert_eq!(seen.record.deployment.status, DeploymentStatus::Complete);
        assert!(seen.revision > first.revision);
    }

    #[tokio::test]
    async fn a_write_seen_before_an_older_read_is_kept() {
        let (deployments, key) = store().await;
        let waiters = Waiters::default();
        waiters.watching();
        let mut w = waiters.wait_for(key.clone());
        let keys = waiters.take_queued(READ_BATCH);
        let old = deployments.last_writes(&keys, WAIT).await;
        let record = crate::record::tests::record();
        let (tenant, id) = (&record.deployment.tenant, &record.deployment.id);
        deployments
            .update(tenant, id, |r| {
                r.deployment.status = DeploymentStatus::Failed;
                true
            })
            .await
            .expect("update")
            .expect("exists");
        let written = deployments.last_writes(&keys, WAIT).await.expect("read");
        waiters.deliver(written[0].as_ref().expect("written"));
        waiters.read(&keys, old);
        let seen = w.first().await.expect("known").expect("found");
        assert_eq!(seen.record.deployment.status, DeploymentStatus::Failed);
    }

    #[tokio::test]
    async fn a_failed_read_fails_its_waiters_and_the_next_waiter_reads_again() {
        let (deployments, key) = store().await;
        let waiters = Waiters::default();
        waiters.watching();
        let mut w = waiters.wait_for(key.clone());
        let keys = waiters.take_queued(READ_BATCH);
        let failed = StoreError::Read {
            bucket: "flue_deployments",
            key: key.clone(),
            source: "no answer".into(),
        };
        waiters.read(&keys, Err(failed));
        assert!(matches!(w.first().await, Err(ReadFailed(_))));
        let mut next = waiters.wait_for(key.clone());
        assert_eq!(read_once(&deployments, &waiters).await, 1, "read again");
        assert!(next.first().await.expect("read").is_some());
    }
}
