//! The exposition: every family once, each tenant's series under it with its `tenant`
//! label, encoded by `prometheus-client` in the OpenMetrics text format.
//!
//! The series live per tenant (one [`TenantMetrics`] per runtime) and a scrape may show
//! one tenant or all of them, so they are handed to the encoder by a collector built for
//! the scrape rather than registered once: that keeps each family's `# TYPE` line single
//! whichever tenants are shown.

use std::fmt;

use flue_proto::TenantId;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use super::{ACTIONS, ENDS, OP_KINDS, OP_RESULTS, STATUSES, TenantMetrics};

/// The content type of what [`exposition`] writes: OpenMetrics 1.0 text (counters end in
/// `_total`, the body in `# EOF`), which Prometheus asks for and reads.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Presence label values, in the order of [`Sample::presence`].
const PRESENCE: [&str; 3] = ["online", "offline", "unknown"];

/// What one tenant shows at a scrape: its counters and the gauges read for it now.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The tenant.
    pub tenant: TenantId,
    /// Its counters.
    pub metrics: TenantMetrics,
    /// Servers this gateway tracks, by presence: online, offline, unknown.
    pub presence: [u64; 3],
    /// Long polls waiting now.
    pub long_polls: u64,
    /// Reconnections of each of its broker connections, by kind.
    pub reconnects: Vec<(&'static str, u64)>,
}

/// The OpenMetrics text of `samples` (every family once, `# EOF` at the end).
pub fn exposition(samples: Vec<Sample>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(samples)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String does not fail");
    out
}

#[derive(Debug)]
struct Scrape(Vec<Sample>);

/// One family: its descriptor, then every value `each` gives, as `(labels, value)`.
fn family<V>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    ty: MetricType,
    values: Vec<(Vec<(&str, &str)>, V)>,
    encode: impl Fn(&V, prometheus_client::encoding::MetricEncoder) -> fmt::Result,
) -> fmt::Result {
    let mut family = enc.encode_descriptor(name, help, unit, ty)?;
    for (labels, value) in &values {
        encode(value, family.encode_family(labels)?)?;
    }
    Ok(())
}

/// A counter with two labels besides the tenant: every non-zero `get(sample, i, j)`, the
/// labels `a.0 = a.1[i]` and `b.0 = b.1[j]`, tenant by tenant.
fn grid<'a>(
    tenants: &[Sample],
    names: &'a [String],
    a: (&'a str, &'a [&'a str]),
    b: (&'a str, &'a [&'a str]),
    get: impl Fn(&Sample, usize, usize) -> u64,
) -> Vec<(Vec<(&'a str, &'a str)>, u64)> {
    let mut values = Vec::new();
    for (s, tenant) in tenants.iter().zip(names) {
        for (i, first) in a.1.iter().enumerate() {
            for (j, second) in b.1.iter().enumerate() {
                let v = get(s, i, j);
                if v > 0 {
                    let labels = vec![("tenant", tenant.as_str()), (a.0, *first), (b.0, *second)];
                    values.push((labels, v));
                }
            }
        }
    }
    values
}

fn counter(v: &u64, e: prometheus_client::encoding::MetricEncoder) -> fmt::Result {
    ConstCounter::new(*v).encode(e)
}

fn gauge(v: &i64, e: prometheus_client::encoding::MetricEncoder) -> fmt::Result {
    ConstGauge::new(*v).encode(e)
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let tenants = &self.0;
        let t = |s: &Sample| s.tenant.as_str().to_owned();
        let names: Vec<String> = tenants.iter().map(t).collect();

        let values = grid(
            tenants,
            &names,
            ("action", &ACTIONS),
            ("status", &STATUSES),
            |s, a, st| s.metrics.inner.deployments[a][st].get(),
        );
        family(
            &mut enc,
            "flue_deployments",
            "Deployments that reached each status, by action (ad-hoc actions as ADHOC)",
            None,
            MetricType::Counter,
            values,
            counter,
        )?;

        let mut values = Vec::new();
        for (s, tenant) in tenants.iter().zip(&names) {
            for (a, action) in ACTIONS.iter().enumerate() {
                for (e, end) in ENDS.iter().enumerate() {
                    let h = &s.metrics.inner.latency[a][e];
                    if s.metrics.inner.latency_seen[a][e].get() > 0 {
                        let labels = vec![
                            ("tenant", tenant.as_str()),
                            ("action", *action),
                            ("status", *end),
                        ];
                        values.push((labels, h));
                    }
                }
            }
        }
        family(
            &mut enc,
            "flue_deployment_duration",
            "Time from a deployment's acceptance to its end, by action and final status",
            Some(&Unit::Seconds),
            MetricType::Histogram,
            values,
            |h, e| h.encode(e),
        )?;

        let mut values = Vec::new();
        for (s, tenant) in tenants.iter().zip(&names) {
            for (p, presence) in PRESENCE.iter().enumerate() {
                let labels = vec![("tenant", tenant.as_str()), ("presence", *presence)];
                values.push((labels, i64::try_from(s.presence[p]).unwrap_or(i64::MAX)));
            }
        }
        family(
            &mut enc,
            "flue_servers",
            "Servers the gateway tracks, by presence (unknown: no heartbeat seen yet)",
            None,
            MetricType::Gauge,
            values,
            gauge,
        )?;

        let per_tenant = |f: &dyn Fn(&Sample) -> i64| -> Vec<(Vec<(&str, &str)>, i64)> {
            tenants
                .iter()
                .zip(&names)
                .map(|(s, tenant)| (vec![("tenant", tenant.as_str())], f(s)))
                .collect()
        };
        let mut values = Vec::new();
        for (s, tenant) in tenants.iter().zip(&names) {
            let sample = s.metrics.pending();
            for (b, label) in super::pending::LABELS.iter().enumerate() {
                let n = sample.servers[b].load(std::sync::atomic::Ordering::Relaxed);
                let labels = vec![("tenant", tenant.as_str()), ("pending", *label)];
                values.push((labels, i64::try_from(n).unwrap_or(i64::MAX)));
            }
        }
        family(
            &mut enc,
            "flue_servers_with_pending_requests",
            "Servers by how many deployments wait on them (queued or running), sampled every 15 s",
            None,
            MetricType::Gauge,
            values,
            gauge,
        )?;
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        let as_gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        family(
            &mut enc,
            "flue_pending_requests",
            "Deployments waiting on their servers (queued or running), sampled every 15 s",
            None,
            MetricType::Gauge,
            per_tenant(&|s| as_gauge(s.metrics.pending().total.load(relaxed))),
            gauge,
        )?;
        family(
            &mut enc,
            "flue_pending_requests_longest",
            "The longest queue of one server (deployments waiting on it), sampled every 15 s",
            None,
            MetricType::Gauge,
            per_tenant(&|s| as_gauge(s.metrics.pending().longest.load(relaxed))),
            gauge,
        )?;
        family(
            &mut enc,
            "flue_sse_connections",
            "Event streams (GET /v1/events) open now",
            None,
            MetricType::Gauge,
            per_tenant(&|s| s.metrics.inner.sse_connections.get()),
            gauge,
        )?;
        family(
            &mut enc,
            "flue_long_polls",
            "Long polls (GET /v1/deployments/{id}?wait_secs=N) waiting now",
            None,
            MetricType::Gauge,
            per_tenant(&|s| i64::try_from(s.long_polls).unwrap_or(i64::MAX)),
            gauge,
        )?;
        family(
            &mut enc,
            "flue_webhook_backlog",
            "Events not yet delivered to webhooks, as their consumers last said",
            None,
            MetricType::Gauge,
            per_tenant(&|s| s.metrics.inner.webhook_backlog.get()),
            gauge,
        )?;
        family(
            &mut enc,
            "flue_engine_operations_running",
            "Stack operations this gateway's engine workers run now",
            None,
            MetricType::Gauge,
            per_tenant(&|s| s.metrics.inner.operations_running.get()),
            gauge,
        )?;

        let per_tenant_counter = |f: &dyn Fn(&Sample) -> u64| -> Vec<(Vec<(&str, &str)>, u64)> {
            tenants
                .iter()
                .zip(&names)
                .map(|(s, tenant)| (vec![("tenant", tenant.as_str())], f(s)))
                .collect()
        };
        family(
            &mut enc,
            "flue_webhook_deliveries",
            "Webhook deliveries the target accepted",
            None,
            MetricType::Counter,
            per_tenant_counter(&|s| s.metrics.inner.webhook_deliveries.get()),
            counter,
        )?;
        family(
            &mut enc,
            "flue_webhook_failures",
            "Webhook delivery attempts that failed (each retry counts)",
            None,
            MetricType::Counter,
            per_tenant_counter(&|s| s.metrics.inner.webhook_failures.get()),
            counter,
        )?;
        family(
            &mut enc,
            "flue_webhooks_parked",
            "Webhook subscriptions parked after their last failed attempt",
            None,
            MetricType::Counter,
            per_tenant_counter(&|s| s.metrics.inner.webhooks_parked.get()),
            counter,
        )?;

        let mut values = Vec::new();
        for (s, tenant) in tenants.iter().zip(&names) {
            for (kind, n) in &s.reconnects {
                values.push((vec![("tenant", tenant.as_str()), ("connection", *kind)], *n));
            }
        }
        family(
            &mut enc,
            "flue_broker_reconnects",
            "Reconnections of the gateway's broker connections, by connection",
            None,
            MetricType::Counter,
            values,
            counter,
        )?;

        let values = grid(
            tenants,
            &names,
            ("kind", &OP_KINDS),
            ("result", &OP_RESULTS),
            |s, k, r| s.metrics.inner.operations[k][r].get(),
        );
        family(
            &mut enc,
            "flue_engine_operations",
            "Stack operations this gateway's engine workers ended, by kind and result",
            None,
            MetricType::Counter,
            values,
            counter,
        )?;

        let mut requests = Vec::new();
        for (s, tenant) in tenants.iter().zip(&names) {
            requests.push((tenant.as_str(), s.metrics.inner.http.snapshot()));
        }
        let mut values = Vec::new();
        for (tenant, series) in &requests {
            for ((route, method, class), n) in series {
                let labels = vec![
                    ("tenant", *tenant),
                    ("route", route.as_str()),
                    ("method", *method),
                    ("class", *class),
                ];
                values.push((labels, *n));
            }
        }
        family(
            &mut enc,
            "flue_http_requests",
            "Tenant API requests answered, by route template, method and status class",
            None,
            MetricType::Counter,
            values,
            counter,
        )?;

        agent_families(&mut enc, tenants, &names)
    }
}

/// The families added up from agents' heartbeats.
fn agent_families(
    enc: &mut DescriptorEncoder,
    tenants: &[Sample],
    names: &[String],
) -> fmt::Result {
    let totals: Vec<_> = tenants
        .iter()
        .map(|s| s.metrics.agents().totals())
        .collect();
    let mut values = Vec::new();
    for ((m, _), tenant) in totals.iter().zip(names) {
        for (result, v) in [("complete", m.hooks_completed), ("failed", m.hooks_failed)] {
            values.push((vec![("tenant", tenant.as_str()), ("result", result)], v));
        }
    }
    family(
        enc,
        "flue_agent_hooks",
        "Hooks agents ran, by result, from their heartbeats",
        None,
        MetricType::Counter,
        values,
        counter,
    )?;
    let one = |f: &dyn Fn(&flue_proto::AgentMetrics, u64) -> u64| -> Vec<(Vec<(&str, &str)>, u64)> {
        totals
            .iter()
            .zip(names)
            .map(|((m, beats), tenant)| (vec![("tenant", tenant.as_str())], f(m, *beats)))
            .collect()
    };
    // Milliseconds as seconds: an f64 holds them exactly up to 2^53 ms.
    let seconds = totals
        .iter()
        .zip(names)
        .map(|((m, _), tenant)| {
            #[allow(clippy::cast_precision_loss)]
            let secs = m.hook_millis as f64 / 1000.0;
            (vec![("tenant", tenant.as_str())], secs)
        })
        .collect();
    family(
        enc,
        "flue_agent_hook",
        "Time agents spent running hooks, from their heartbeats",
        Some(&Unit::Seconds),
        MetricType::Counter,
        seconds,
        |v: &f64, e| ConstCounter::new(*v).encode(e),
    )?;
    family(
        enc,
        "flue_agent_requests_rejected",
        "Requests agents refused before running anything, from their heartbeats",
        None,
        MetricType::Counter,
        one(&|m, _| m.requests_rejected),
        counter,
    )?;
    family(
        enc,
        "flue_agent_answered_from_ledger",
        "Requests agents answered from their ledger (redeliveries), from their heartbeats",
        None,
        MetricType::Counter,
        one(&|m, _| m.answered_from_ledger),
        counter,
    )?;
    family(
        enc,
        "flue_agent_broker_reconnects",
        "Reconnections of agents' broker connections, from their heartbeats",
        None,
        MetricType::Counter,
        one(&|m, _| m.broker_reconnects),
        counter,
    )?;
    family(
        enc,
        "flue_agent_heartbeats_with_metrics",
        "Heartbeats that carried an agent's counters (older agents send none)",
        None,
        MetricType::Counter,
        one(&|_, beats| beats),
        counter,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(tenant: &str) -> Sample {
        Sample {
            tenant: tenant.parse().expect("tenant id"),
            metrics: TenantMetrics::default(),
            presence: [2, 1, 0],
            long_polls: 3,
            reconnects: vec![("tenant", 1)],
        }
    }

    #[test]
    fn every_family_is_written_once_with_each_tenants_series_under_it() {
        let (a, b) = (sample("a"), sample("b"));
        a.metrics.inner.deployments[0][0].inc();
        b.metrics.inner.latency[ACTIONS.len() - 1][1].observe(0.3);
        b.metrics.inner.latency_seen[ACTIONS.len() - 1][1].inc();
        let text = exposition(vec![a, b]);
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(
            text.matches("# TYPE flue_servers gauge\n").count(),
            1,
            "{text}"
        );
        for line in [
            "flue_deployments_total{tenant=\"a\",action=\"CREATE\",status=\"QUEUED\"} 1",
            "flue_servers{tenant=\"a\",presence=\"online\"} 2",
            "flue_servers{tenant=\"b\",presence=\"offline\"} 1",
            "flue_long_polls{tenant=\"b\"} 3",
            "flue_broker_reconnects_total{tenant=\"a\",connection=\"tenant\"} 1",
            "# UNIT flue_deployment_duration_seconds seconds",
            "flue_deployment_duration_seconds_count{tenant=\"b\",action=\"ADHOC\",status=\"FAILED\"} 1",
            "flue_deployment_duration_seconds_bucket{le=\"0.5\",tenant=\"b\",action=\"ADHOC\",status=\"FAILED\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        // Histograms and counters never touched are left out, not written as zeros.
        assert!(!text.contains("tenant=\"a\",action=\"ADHOC\""), "{text}");
    }
}
