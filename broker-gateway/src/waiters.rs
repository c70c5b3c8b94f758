//! Long polls share one watch of the deployments bucket, fanned out in-process.
//!
//! A KV watch is an ordered consumer on the broker, and a stream allows only so many
//! consumers (1,000 by default): one watch per waiting client would cap the clients that
//! can wait at once. Instead the gateway runs one watch of the whole bucket ([`run`]) and
//! hands each write to the waiters of that key, through one `tokio::sync::watch` channel
//! per key that has waiters. A key's channel exists while it has waiters and goes with
//! the last one ([`Waiter`]'s `Drop`), so the map holds only what is being waited for.
//!
//! A waiter registers *before* it reads the record, so a write landing between the read
//! and the wait still wakes it. Whatever happens while no watch runs (at start, after the
//! watch failed, after the broker connection came back) is unknown, so each time the
//! watch (re)starts every waiter is told to read its record again ([`Wake::Reread`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::error::chain;
use crate::record::DeploymentRecord;
use crate::store::{DeploymentChange, Deployments};

/// Pause before opening the watch again after it failed or could not be opened.
const RESTART_PAUSE: Duration = Duration::from_millis(500);

/// A record as a write left it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Its KV revision: a waiter keeps the record with the highest one it saw.
    pub revision: u64,
    /// The record, shared by every waiter of the key.
    pub record: Arc<DeploymentRecord>,
}

/// Why a [`Waiter`] woke up.
#[derive(Debug)]
pub enum Wake {
    /// Its key was written.
    Changed(Seen),
    /// The watch (re)started: writes may have been missed, read the record again.
    Reread,
}

/// The gateway's long-poll waiters, by KV key; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Waiters {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Never held across an `.await`.
    slots: Mutex<HashMap<String, Slot>>,
    /// Bumped each time the bucket watch (re)starts.
    epoch: watch::Sender<u64>,
}

#[derive(Debug)]
struct Slot {
    changes: watch::Sender<Option<Seen>>,
    waiters: usize,
}

impl Waiters {
    /// Registers a waiter for `key` ([`crate::store::deployment_key`]); read the record
    /// after this call, not before, so that no write is missed.
    pub fn wait_for(&self, key: String) -> Waiter {
        let epoch = self.inner.epoch.subscribe();
        let changes = {
            let mut slots = self.lock();
            let slot = slots.entry(key.clone()).or_insert_with(|| Slot {
                changes: watch::Sender::new(None),
                waiters: 0,
            });
            slot.waiters += 1;
            slot.changes.subscribe()
        };
        Waiter {
            key,
            changes,
            epoch,
            inner: self.inner.clone(),
        }
    }

    /// How many requests are waiting right now.
    pub fn waiting(&self) -> usize {
        self.lock().values().map(|s| s.waiters).sum()
    }

    /// How many keys have waiters (entries in the map).
    pub fn keys(&self) -> usize {
        self.lock().len()
    }

    /// Hands a write to the waiters of its key; decodes it only if there are any.
    fn deliver(&self, change: &DeploymentChange) {
        let Some(sender) = self.lock().get(&change.key).map(|s| s.changes.clone()) else {
            return;
        };
        match change.record() {
            Ok(record) => {
                sender.send_replace(Some(Seen {
                    revision: change.revision,
                    record: Arc::new(record),
                }));
            }
            // The waiters read it themselves when their time is up and report the error.
            Err(e) => {
                warn!(error = %chain(&e), key = %change.key, "deployment record written cannot be decoded")
            }
        }
    }

    /// Tells every waiter to read its record again.
    fn reread_all(&self) {
        self.inner.epoch.send_modify(|epoch| *epoch += 1);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        // The map stays consistent whatever panicked while holding it: counters only.
        self.inner
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// One waiting request; unregisters itself when dropped.
#[derive(Debug)]
pub struct Waiter {
    key: String,
    changes: watch::Receiver<Option<Seen>>,
    epoch: watch::Receiver<u64>,
    inner: Arc<Inner>,
}

impl Waiter {
    /// Waits for the next write of the key, or for a reason to read it again.
    pub async fn next(&mut self) -> Wake {
        loop {
            tokio::select! {
                changed = self.changes.changed() => {
                    if changed.is_err() {
                        // Unreachable while this waiter holds the slot; read to be safe.
                        return Wake::Reread;
                    }
                    if let Some(seen) = self.changes.borrow_and_update().clone() {
                        return Wake::Changed(seen);
                    }
                }
                _ = self.epoch.changed() => {
                    self.epoch.borrow_and_update();
                    return Wake::Reread;
                }
            }
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut slots = self
            .inner
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.get_mut(&self.key) {
            slot.waiters -= 1;
            if slot.waiters == 0 {
                slots.remove(&self.key);
            }
        }
    }
}

/// Runs the one watch of the deployments bucket until `shutdown`: opens it, tells every
/// waiter to read again, hands each write to its waiters; opens it again when it fails or
/// when the broker connection comes back (`reconnected` changes).
pub async fn run(
    deployments: Deployments,
    waiters: Waiters,
    mut reconnected: watch::Receiver<u64>,
    shutdown: CancellationToken,
) {
    loop {
        reconnected.borrow_and_update();
        let opened = tokio::select! {
            () = shutdown.cancelled() => return,
            opened = deployments.watch() => opened,
        };
        let mut changes = match opened {
            Ok(changes) => changes,
            Err(e) => {
                warn!(error = %chain(&e), "cannot watch the deployments; retrying");
                pause(&shutdown).await;
                continue;
            }
        };
        debug!("deployment watch open");
        waiters.reread_all();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                // The old watch may have lost writes while the connection was down.
                Ok(()) = reconnected.changed() => {
                    debug!("broker reconnected; opening the deployment watch again");
                    break;
                }
                change = changes.next() => match change {
                    Some(Ok(change)) => waiters.deliver(&change),
                    Some(Err(e)) => {
                        warn!(error = %chain(&e), "deployment watch failed; opening it again");
                        pause(&shutdown).await;
                        break;
                    }
                    None => {
                        warn!("deployment watch ended; opening it again");
                        pause(&shutdown).await;
                        break;
                    }
                },
            }
        }
    }
}

async fn pause(shutdown: &CancellationToken) {
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = tokio::time::sleep(RESTART_PAUSE) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    async fn a_restarted_watch_wakes_every_waiter_to_read_again() {
        let waiters = Waiters::default();
        let mut w = waiters.wait_for("t.d1".into());
        waiters.reread_all();
        let wake = tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .expect("woken");
        assert!(matches!(wake, Wake::Reread), "{wake:?}");
    }
}
