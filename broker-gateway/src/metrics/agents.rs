//! Agents' own counters, from their heartbeats, added up per tenant.
//!
//! An agent counts from its process's start ([`AgentMetrics`]), so its counts fall back
//! to zero when it restarts. The gateway keeps each server's last heartbeat counts with
//! the agent instance that sent them (in the presence tracker, next to the server's
//! presence) and adds only the increments: all of a new instance's counts, the
//! difference for a known one. The totals therefore never go backwards, and no series
//! names a server. (What an instance counted after its last heartbeat this gateway saw is
//! lost with it; a gateway that starts counts each agent's whole history once.)

use std::sync::atomic::{AtomicU64, Ordering};

use flue_proto::AgentMetrics;

/// The sum of every agent's increments, for one tenant.
#[derive(Debug, Default)]
pub struct AgentTotals {
    hooks_completed: AtomicU64,
    hooks_failed: AtomicU64,
    hook_millis: AtomicU64,
    requests_rejected: AtomicU64,
    answered_from_ledger: AtomicU64,
    broker_reconnects: AtomicU64,
    heartbeats_with_metrics: AtomicU64,
}

/// What `now`, the counts of `instance`, adds to `before`, the last counts seen of that
/// server (with their instance): everything for a new instance, the growth for the same
/// one (a count that went down counts nothing: an instance never does that).
pub fn increments(
    before: Option<&(String, AgentMetrics)>,
    instance: &str,
    now: &AgentMetrics,
) -> AgentMetrics {
    let Some((_, was)) = before.filter(|(i, _)| i == instance) else {
        return *now;
    };
    AgentMetrics {
        hooks_completed: now.hooks_completed.saturating_sub(was.hooks_completed),
        hooks_failed: now.hooks_failed.saturating_sub(was.hooks_failed),
        hook_millis: now.hook_millis.saturating_sub(was.hook_millis),
        requests_rejected: now.requests_rejected.saturating_sub(was.requests_rejected),
        answered_from_ledger: now
            .answered_from_ledger
            .saturating_sub(was.answered_from_ledger),
        broker_reconnects: now.broker_reconnects.saturating_sub(was.broker_reconnects),
    }
}

/// Adds `v` to `c` without wrapping (an agent may send any number).
fn add(c: &AtomicU64, v: u64) {
    if v == 0 {
        return;
    }
    let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| {
        Some(x.saturating_add(v))
    });
}

impl AgentTotals {
    /// Adds one heartbeat's increments.
    pub fn add(&self, inc: &AgentMetrics) {
        add(&self.hooks_completed, inc.hooks_completed);
        add(&self.hooks_failed, inc.hooks_failed);
        add(&self.hook_millis, inc.hook_millis);
        add(&self.requests_rejected, inc.requests_rejected);
        add(&self.answered_from_ledger, inc.answered_from_ledger);
        add(&self.broker_reconnects, inc.broker_reconnects);
        add(&self.heartbeats_with_metrics, 1);
    }

    /// The totals now.
    pub fn totals(&self) -> (AgentMetrics, u64) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let m = AgentMetrics {
            hooks_completed: get(&self.hooks_completed),
            hooks_failed: get(&self.hooks_failed),
            hook_millis: get(&self.hook_millis),
            requests_rejected: get(&self.requests_rejected),
            answered_from_ledger: get(&self.answered_from_ledger),
            broker_reconnects: get(&self.broker_reconnects),
        };
        (m, get(&self.heartbeats_with_metrics))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hooks(completed: u64) -> AgentMetrics {
        AgentMetrics {
            hooks_completed: completed,
            ..AgentMetrics::default()
        }
    }

    #[test]
    fn totals_never_go_backwards_across_an_agent_restart() {
        let totals = AgentTotals::default();
        let mut last: Option<(String, AgentMetrics)> = None;
        for (instance, completed) in [("a", 2), ("a", 5), ("a", 5), ("b", 1), ("b", 3)] {
            let now = hooks(completed);
            totals.add(&increments(last.as_ref(), instance, &now));
            last = Some((instance.to_owned(), now));
        }
        // a counted 5, then b (a restart, from zero) counted 3.
        assert_eq!(totals.totals().0.hooks_completed, 8);
        assert_eq!(totals.totals().1, 5);
    }

    #[test]
    fn a_count_going_down_within_an_instance_adds_nothing_and_huge_ones_saturate() {
        let last = Some(("a".to_owned(), hooks(5)));
        assert_eq!(increments(last.as_ref(), "a", &hooks(3)), hooks(0));
        let totals = AgentTotals::default();
        totals.add(&hooks(u64::MAX));
        totals.add(&hooks(7));
        assert_eq!(totals.totals().0.hooks_completed, u64::MAX);
    }
}
