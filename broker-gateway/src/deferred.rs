//! The deployment requests left to the background publisher, in each server's acceptance order.
//!
//! A server applies its requests in queue order, so a request must never reach the queue
//! before one accepted earlier for the same server. Once a server has a deferred request,
//! every later one for it is deferred too ([`Deferred::insert_if_blocked`]), and the
//! background publisher works through each server's queue oldest first, stopping at the
//! first that still fails.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use flue_proto::{DeploymentId, ServerId};
use time::OffsetDateTime;

/// One deferred request: when its deployment was accepted, and its id.
pub type Entry = (OffsetDateTime, DeploymentId);

/// Deferred requests by server, each server's ordered by `(created_at, id)`; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Deferred {
    inner: Arc<Mutex<BTreeMap<ServerId, BTreeSet<Entry>>>>,
}

impl Deferred {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<ServerId, BTreeSet<Entry>>> {
        // No critical section below can panic half-way, so a poisoned map is still consistent.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Defers deployment `id` of `server`, accepted at `created_at`; a deployment already
    /// deferred keeps its first place.
    pub fn insert(&self, server: &ServerId, created_at: OffsetDateTime, id: &DeploymentId) {
        let mut servers = self.lock();
        let queue = servers.entry(server.clone()).or_default();
        if !queue.iter().any(|(_, queued)| queued == id) {
            queue.insert((created_at, id.clone()));
        }
    }

    /// Defers deployment `id` if `server` has a deferred deployment already (so that it
    /// does not overtake it); true if it did. Check and insert are one step.
    pub fn insert_if_blocked(
        &self,
        server: &ServerId,
        created_at: OffsetDateTime,
        id: &DeploymentId,
    ) -> bool {
        let mut servers = self.lock();
        let Some(queue) = servers.get_mut(server) else {
            return false;
        };
        if !queue.iter().any(|(_, queued)| queued == id) {
            queue.insert((created_at, id.clone()));
        }
        true
    }

    /// Forgets one deferred deployment (published, or nothing left to publish).
    pub fn remove(&self, server: &ServerId, entry: &Entry) {
        let mut servers = self.lock();
        if let Some(queue) = servers.get_mut(server) {
            queue.remove(entry);
            if queue.is_empty() {
                servers.remove(server);
            }
        }
    }

    /// A copy of every server's queue, oldest first.
    pub fn snapshot(&self) -> Vec<(ServerId, Vec<Entry>)> {
        self.lock()
            .iter()
            .map(|(server, queue)| (server.clone(), queue.iter().cloned().collect()))
            .collect()
    }

    /// Number of deferred deployments.
    pub fn len(&self) -> usize {
        self.lock().values().map(BTreeSet::len).sum()
    }

    /// True when nothing is deferred.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> DeploymentId {
        DeploymentId::new(s).expect("valid id")
    }

    fn server(s: &str) -> ServerId {
        ServerId::new(s).expect("valid id")
    }

    #[test]
    fn later_deployments_queue_behind_a_deferred_one_of_their_server() {
        let deferred = Deferred::default();
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let t = |s: i64| t0 + time::Duration::seconds(s);
        let (web, db) = (server("web"), server("db"));

        assert!(!deferred.insert_if_blocked(&web, t(0), &id("first")));
        assert!(deferred.is_empty(), "nothing to wait for: publish at once");

        deferred.insert(&web, t(2), &id("a"));
        assert!(deferred.insert_if_blocked(&web, t(3), &id("b")));
        assert!(!deferred.insert_if_blocked(&db, t(4), &id("other-server")));
        deferred.insert(&web, t(1), &id("older"));
        deferred.insert(&web, t(9), &id("a"));
        assert_eq!(deferred.len(), 3, "a keeps its first place");
        assert_eq!(
            deferred.snapshot(),
            vec![(
                web.clone(),
                vec![(t(1), id("older")), (t(2), id("a")), (t(3), id("b"))]
            )]
        );

        for entry in [(t(1), id("older")), (t(2), id("a"))] {
            deferred.remove(&web, &entry);
        }
        assert!(
            deferred.insert_if_blocked(&web, t(5), &id("c")),
            "b still waits"
        );
        deferred.remove(&web, &(t(3), id("b")));
        deferred.remove(&web, &(t(5), id("c")));
        assert!(deferred.is_empty());
        assert!(!deferred.insert_if_blocked(&web, t(6), &id("d")));
    }
}
