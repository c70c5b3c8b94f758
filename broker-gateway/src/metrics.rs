//! The gateway's metrics (`GET /metrics`, `docs/metrics.md`): one [`TenantMetrics`] per
//! tenant runtime, bumped where things happen, and the exposition built at scrape time
//! ([`exposition`]) from them and from gauges read then.
//!
//! Cheap on the hot path: every series is an atomic (a counter, or a histogram's few
//! buckets behind the crate's own short lock), indexed by fixed label values; nothing is
//! allocated, awaited or sent to the broker to count. Label values are bounded: tenant,
//! action (the five standard ones, `CHECK`, every ad-hoc action as `ADHOC`), status, presence,
//! connection kind. No series names a server or a deployment, so the exposition's size
//! does not grow with the fleet.
//!
//! Deployments are counted when their event is stored for the first time (the broker's
//! acknowledgement says whether it was a duplicate), so a fact reported twice, by a
//! retry or by two gateways, counts once across all gateways.

pub mod agents;
pub mod classic;
pub mod http;
pub mod pending;
mod scrape;

use std::sync::Arc;

use flue_proto::operation::OperationKind;
use flue_proto::{CHECK_ACTION, Deployment, DeploymentStatus, EventType};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

pub use agents::AgentTotals;
pub use scrape::{CONTENT_TYPE, Sample, exposition};

/// The text formats `/metrics` answers in (`docs/metrics.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text, the default (what Prometheus prefers).
    OpenMetrics,
    /// The classic Prometheus text format 0.0.4, for scrapers and tools that ask for
    /// `text/plain`.
    Classic,
}

impl Format {
    /// The `Content-Type` of an exposition in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => CONTENT_TYPE,
            Self::Classic => classic::CONTENT_TYPE,
        }
    }

    /// The exposition of `samples` in this format.
    pub fn exposition(self, samples: Vec<Sample>) -> String {
        let openmetrics = exposition(samples);
        match self {
            Self::OpenMetrics => openmetrics,
            Self::Classic => classic::classic(&openmetrics),
        }
    }
}

/// Action label values: the standard actions, `CHECK` (a convergence check), then every
/// ad-hoc action as one.
const ACTIONS: [&str; 7] = [
    "CREATE", "UPDATE", "DELETE", "SUSPEND", "RESUME", "CHECK", "ADHOC",
];
/// Status label values of `flue_deployments_total`, in the order a deployment reaches them;
/// `DRIFTED` is a `CHECK` whose hook answered FAILED: drift found, which is what a check is
/// for, so no failure (a `CHECK` that timed out, with no answer, is `FAILED`).
const STATUSES: [&str; 5] = ["QUEUED", "IN_PROGRESS", "COMPLETE", "FAILED", "DRIFTED"];
/// Final statuses, the label of the latency histogram.
const ENDS: [&str; 3] = ["COMPLETE", "FAILED", "DRIFTED"];
/// Upper bounds of the accept → complete latency buckets, in seconds: a no-op hook
/// takes milliseconds, a package install minutes.
const LATENCY_BUCKETS: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
];
/// Engine operation kinds, as `OperationKind` names them.
const OP_KINDS: [&str; 7] = [
    "create", "update", "delete", "suspend", "resume", "action", "converge",
];
/// Engine operation results (`succeeded`, `failed`: the operation's final state).
const OP_RESULTS: [&str; 2] = ["succeeded", "failed"];

/// One tenant's counters; cheap to clone (one `Arc`).
#[derive(Debug, Clone, Default)]
pub struct TenantMetrics {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    deployments: [[Counter; STATUSES.len()]; ACTIONS.len()],
    latency: [[Histogram; ENDS.len()]; ACTIONS.len()],
    /// Observations in each `latency` histogram, so that an empty one is left out (the
    /// crate reads a histogram's count only in its tests).
    latency_seen: [[Counter; ENDS.len()]; ACTIONS.len()],
    sse_connections: Gauge,
    webhook_deliveries: Counter,
    webhook_failures: Counter,
    webhooks_parked: Counter,
    webhook_backlog: Gauge,
    operations: [[Counter; OP_RESULTS.len()]; OP_KINDS.len()],
    operations_running: Gauge,
    agents: AgentTotals,
    http: http::Requests,
    pending: Arc<pending::PendingSample>,
}

impl Default for Inner {
    fn default() -> Self {
        Self {
            deployments: Default::default(),
            latency: std::array::from_fn(|_| {
                std::array::from_fn(|_| Histogram::new(LATENCY_BUCKETS))
            }),
            latency_seen: Default::default(),
            sse_connections: Gauge::default(),
            webhook_deliveries: Counter::default(),
            webhook_failures: Counter::default(),
            webhooks_parked: Counter::default(),
            webhook_backlog: Gauge::default(),
            operations: Default::default(),
            operations_running: Gauge::default(),
            agents: AgentTotals::default(),
            http: http::Requests::default(),
            pending: Arc::default(),
        }
    }
}

/// The index of `action` in [`ACTIONS`].
fn action_index(action: &str) -> usize {
    ACTIONS[..ACTIONS.len() - 1]
        .iter()
        .position(|a| *a == action)
        .unwrap_or(ACTIONS.len() - 1)
}

impl TenantMetrics {
    /// Counts the fact the event `ty` about `d` reports, stored just now for the first
    /// time: the status it reached and, for an end, its accept → end latency.
    pub fn deployment_reported(&self, d: &Deployment, ty: EventType) {
        let action = action_index(d.action.as_str());
        let drifted = ty == EventType::DeploymentFailed && d.action.as_str() == CHECK_ACTION;
        let status = match ty {
            EventType::DeploymentQueued => 0,
            EventType::DeploymentStarted => 1,
            EventType::DeploymentCompleted => 2,
            EventType::DeploymentFailed if drifted => 4,
            EventType::DeploymentFailed | EventType::DeploymentTimedOut => 3,
            _ => return,
        };
        self.inner.deployments[action][status].inc();
        let end = match d.status {
            DeploymentStatus::Complete => 0,
            DeploymentStatus::Failed if drifted => 2,
            DeploymentStatus::Failed => 1,
            _ => return,
        };
        if status < 2 {
            return;
        }
        if let Some(finished) = d.finished_at {
            let took = (finished - d.created_at).as_seconds_f64().max(0.0);
            self.inner.latency[action][end].observe(took);
            self.inner.latency_seen[action][end].inc();
        }
    }

    /// An SSE connection opened; the gauge goes down when the guard is dropped.
    pub fn sse_opened(&self) -> SseGuard {
        self.inner.sse_connections.inc();
        SseGuard(self.inner.sse_connections.clone())
    }

    /// A webhook delivery attempt succeeded (`true`) or failed.
    pub fn webhook_attempt(&self, delivered: bool) {
        match delivered {
            true => self.inner.webhook_deliveries.inc(),
            false => self.inner.webhook_failures.inc(),
        };
    }

    /// A webhook subscription was parked (gave up after its attempts).
    pub fn webhook_parked(&self) {
        self.inner.webhooks_parked.inc();
    }

    /// Events the webhook consumer last reported still to deliver after the one in hand,
    /// for one subscription: `previous` is what that subscription reported before (the
    /// gauge is the sum over subscriptions).
    pub fn webhook_backlog(&self, previous: u64, now: u64) {
        let delta =
            i64::try_from(now).unwrap_or(i64::MAX) - i64::try_from(previous).unwrap_or(i64::MAX);
        self.inner.webhook_backlog.inc_by(delta);
    }

    /// An engine operation started running here; the gauge goes down when the guard is
    /// dropped.
    pub fn operation_started(&self) -> OperationGuard {
        self.inner.operations_running.inc();
        OperationGuard(self.inner.operations_running.clone())
    }

    /// An engine operation of `kind` ended here, succeeded or not.
    pub fn operation_ended(&self, kind: OperationKind, succeeded: bool) {
        let k = match kind {
            OperationKind::Create => 0,
            OperationKind::Update => 1,
            OperationKind::Delete => 2,
            OperationKind::Suspend => 3,
            OperationKind::Resume => 4,
            OperationKind::Action => 5,
            OperationKind::Converge => 6,
        };
        self.inner.operations[k][usize::from(!succeeded)].inc();
    }

    /// The last sample of pending requests per server ([`pending::run`] writes it).
    pub fn pending(&self) -> &Arc<pending::PendingSample> {
        &self.inner.pending
    }

    /// What agents' heartbeats added up to.
    pub fn agents(&self) -> &AgentTotals {
        &self.inner.agents
    }
}

/// Keeps `flue_sse_connections` up while an SSE stream is open.
#[derive(Debug)]
pub struct SseGuard(Gauge);

impl Drop for SseGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Keeps `flue_engine_operations_running` up while an operation runs.
#[derive(Debug)]
pub struct OperationGuard(Gauge);

impl Drop for OperationGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ad_hoc_actions_share_one_label_value() {
        assert_eq!(ACTIONS[action_index("CREATE")], "CREATE");
        assert_eq!(ACTIONS[action_index("RESUME")], "RESUME");
        assert_eq!(ACTIONS[action_index("backup")], "ADHOC");
        assert_eq!(ACTIONS[action_index("ADHOC")], "ADHOC");
    }
}
