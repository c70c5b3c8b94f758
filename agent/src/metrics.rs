//! The agent's own counters, sent with every heartbeat ([`flue_proto::AgentMetrics`]).
//!
//! Plain atomics, bumped once per request handled: nothing here waits, locks or talks to
//! the broker. They count from the process's start; the gateway turns them into totals
//! that survive a restart (it adds up each instance's increments).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use flue_proto::{AgentMetrics, DeploymentStatus};

/// What this agent process counted so far; shared by the request handler and the
/// heartbeats.
#[derive(Debug, Default)]
pub struct Counters {
    hooks_completed: AtomicU64,
    hooks_failed: AtomicU64,
    hook_millis: AtomicU64,
    requests_rejected: AtomicU64,
    answered_from_ledger: AtomicU64,
}

impl Counters {
    /// A hook ran for `took` and its deployment ended `status`.
    pub fn hook_ran(&self, status: DeploymentStatus, took: Duration) {
        let counter = match status {
            DeploymentStatus::Complete => &self.hooks_completed,
            _ => &self.hooks_failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let millis = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        self.hook_millis.fetch_add(millis, Ordering::Relaxed);
    }

    /// A request was refused before anything ran.
    pub fn rejected(&self) {
        self.requests_rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// A request was answered from the ledger.
    pub fn answered_from_ledger(&self) {
        self.answered_from_ledger.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now, with `broker_reconnects` as the connection counts them.
    pub fn snapshot(&self, broker_reconnects: u64) -> AgentMetrics {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        AgentMetrics {
            hooks_completed: get(&self.hooks_completed),
            hooks_failed: get(&self.hooks_failed),
            hook_millis: get(&self.hook_millis),
            requests_rejected: get(&self.requests_rejected),
            answered_from_ledger: get(&self.answered_from_ledger),
            broker_reconnects,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_counts_each_outcome_once() {
        let c = Counters::default();
        c.hook_ran(DeploymentStatus::Complete, Duration::from_millis(1500));
        c.hook_ran(DeploymentStatus::Failed, Duration::from_millis(500));
        c.rejected();
        c.answered_from_ledger();
        let m = c.snapshot(2);
        assert_eq!(
            m,
            AgentMetrics {
                hooks_completed: 1,
                hooks_failed: 1,
                hook_millis: 2000,
                requests_rejected: 1,
                answered_from_ledger: 1,
                broker_reconnects: 2,
            }
        );
    }
}
