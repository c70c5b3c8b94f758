//! Deployments waiting for an answer, and the sweeper that fails those whose time ran out.
//!
//! An entry is due at the deployment's [`timeout_deadline`]: `expires_at` while QUEUED,
//! [`crate::record::IN_PROGRESS_GRACE`] later once started, so that the agent's own
//! "timed out" report (with the killed hook's output) wins the race. A due entry whose
//! deployment was started in the meantime is put back with its later deadline.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use flue_proto::{DeploymentId, EventType, TenantId};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::events::Events;
use crate::record::{apply_timeout, timeout_deadline};
use crate::store;

/// Non-terminal deployments of this gateway by expiry time; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct TimeoutSet {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    by_time: BTreeSet<(OffsetDateTime, DeploymentId)>,
    by_id: HashMap<DeploymentId, OffsetDateTime>,
}

impl TimeoutSet {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The critical sections below cannot panic half-way, so a poisoned lock still holds a consistent set.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Watches `id` until `deadline` (replacing an earlier one).
    pub fn insert(&self, id: DeploymentId, deadline: OffsetDateTime) {
        let mut inner = self.lock();
        if let Some(old) = inner.by_id.insert(id.clone(), deadline) {
            inner.by_time.remove(&(old, id.clone()));
        }
        inner.by_time.insert((deadline, id));
    }

    /// Stops watching `id`.
    pub fn remove(&self, id: &DeploymentId) {
        let mut inner = self.lock();
        if let Some(at) = inner.by_id.remove(id) {
            inner.by_time.remove(&(at, id.clone()));
        }
    }

    /// Removes and returns every entry that expired at or before `now`.
    pub fn take_expired(&self, now: OffsetDateTime) -> Vec<(DeploymentId, OffsetDateTime)> {
        let mut inner = self.lock();
        let mut expired = Vec::new();
        while let Some((at, _)) = inner.by_time.first() {
            if *at > now {
                break;
            }
            let (at, id) = inner
                .by_time
                .pop_first()
                .expect("first() just returned an entry");
            inner.by_id.remove(&id);
            expired.push((id, at));
        }
        expired
    }

    /// Whether `id` is watched.
    pub fn contains(&self, id: &DeploymentId) -> bool {
        self.lock().by_id.contains_key(id)
    }

    /// Number of deployments watched.
    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    /// True when no deployment is watched.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the sweeper takes: the watched deployments, their records and the event stream.
#[derive(Debug, Clone)]
pub struct Sweeper {
    /// The tenant whose deployments these are.
    pub tenant: TenantId,
    /// Deployments watched for their timeout.
    pub timeouts: TimeoutSet,
    /// Their records.
    pub deployments: store::Deployments,
    /// Where `deployment.timed_out` goes.
    pub events: Events,
    /// Time between sweeps (`--timeout-sweep-ms`).
    pub every: std::time::Duration,
}

/// Every `every`, fails the deployments whose deadline has passed, until cancelled.
pub async fn sweep(service: Sweeper, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(service.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        sweep_once(&service).await;
    }
}

/// One sweep: every due deployment still past its [`timeout_deadline`] becomes FAILED
/// "timed out" (reported as `deployment.timed_out`); one started since it was watched
/// is watched again until its later deadline.
pub async fn sweep_once(service: &Sweeper) {
    let now = OffsetDateTime::now_utc();
    let tenant = &service.tenant;
    for (id, at) in service.timeouts.take_expired(now) {
        match service
            .deployments
            .update(tenant, &id, |r| apply_timeout(r, now))
            .await
        {
            Ok(Some(u)) if u.changed => {
                info!(deployment.id = %id, server.id = %u.record.deployment.server_id, "deployment timed out");
                service
                    .events
                    .emit_deployment(&u.record, EventType::DeploymentTimedOut)
                    .await;
            }
            Ok(Some(u)) => {
                if let Some(deadline) = timeout_deadline(&u.record.deployment) {
                    service.timeouts.insert(id, deadline);
                }
            }
            Ok(None) => {}
            Err(crate::store::StoreError::Decode { key, source, .. }) => {
                // No sweep can decode it: watching it again would only log this forever.
                warn!(key, error = %source, deployment.id = %id, "deployment record cannot be decoded; no longer watched");
            }
            Err(e) => {
                warn!(error = %crate::error::chain(&e), deployment.id = %id, "cannot record a timeout; retrying at the next sweep");
                service.timeouts.insert(id, at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> DeploymentId {
        DeploymentId::new(s).expect("valid id")
    }

    #[test]
    fn takes_only_what_expired_in_time_order() {
        let set = TimeoutSet::default();
        let t0 = OffsetDateTime::UNIX_EPOCH;
        set.insert(id("late"), t0 + time::Duration::seconds(10));
        set.insert(id("early"), t0 + time::Duration::seconds(1));
        set.insert(id("gone"), t0);
        set.remove(&id("gone"));
        set.insert(id("moved"), t0);
        set.insert(id("moved"), t0 + time::Duration::seconds(20));
        let expired = set.take_expired(t0 + time::Duration::seconds(5));
        assert_eq!(
            expired,
            vec![(id("early"), t0 + time::Duration::seconds(1))]
        );
        assert_eq!(set.len(), 2);
        assert!(set.take_expired(t0).is_empty());
    }
}
