//! Pending requests per server, as a histogram of queue lengths: how many servers have
//! 1, 2–5, 6–20, 21–100 or more than 100 deployments waiting (queued or running), the
//! total, and the longest queue. Never one series per server.
//!
//! Sampled every [`SAMPLE_EVERY`] from the pending index ([`crate::store::pending`]):
//! one listing of its keys, and one record read per deployment the first time it is seen
//! pending (its server never changes; the map keeps only what is still pending). So a
//! pass costs a listing plus the deployments accepted since the last one, whatever the
//! fleet's size.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use flue_proto::{DeploymentId, ServerId, TenantId};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::error::chain;
use crate::store::Deployments;

/// How often the pending index is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(15);

/// Upper bounds of the queue-length buckets (the last bucket is everything above).
pub const BOUNDS: [u64; 4] = [1, 5, 20, 100];
/// Their label values, the last for "more".
pub const LABELS: [&str; 5] = ["1", "2-5", "6-20", "21-100", "101+"];

/// The last sample (all zero before the first).
#[derive(Debug, Default)]
pub struct PendingSample {
    /// Servers by queue length, bucket by bucket.
    pub servers: [AtomicU64; 5],
    /// Deployments pending in all.
    pub total: AtomicU64,
    /// The longest queue.
    pub longest: AtomicU64,
    /// Whether a sample was taken.
    pub sampled: AtomicU64,
}

impl PendingSample {
    /// Stores the queue lengths of one pass.
    pub fn record(&self, lengths: impl IntoIterator<Item = u64>) {
        let mut buckets = [0u64; 5];
        let (mut total, mut longest) = (0, 0);
        for n in lengths.into_iter().filter(|n| *n > 0) {
            let b = BOUNDS.iter().position(|bound| n <= *bound).unwrap_or(4);
            buckets[b] += 1;
            total += n;
            longest = longest.max(n);
        }
        for (slot, n) in self.servers.iter().zip(buckets) {
            slot.store(n, Ordering::Relaxed);
        }
        self.total.store(total, Ordering::Relaxed);
        self.longest.store(longest, Ordering::Relaxed);
        self.sampled.store(1, Ordering::Relaxed);
    }
}

/// Samples `tenant`'s pending deployments into `sample` until cancelled.
pub async fn run(
    tenant: TenantId,
    deployments: Deployments,
    sample: std::sync::Arc<PendingSample>,
    cancel: CancellationToken,
) {
    let mut servers: HashMap<DeploymentId, ServerId> = HashMap::new();
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        match pass(&tenant, &deployments, &mut servers).await {
            Ok(lengths) => sample.record(lengths),
            Err(e) => debug!(error = %e, "cannot sample the pending deployments; trying again"),
        }
    }
}

/// One pass: each server's number of pending deployments.
async fn pass(
    tenant: &TenantId,
    deployments: &Deployments,
    servers: &mut HashMap<DeploymentId, ServerId>,
) -> Result<Vec<u64>, String> {
    let pending = deployments
        .pending_ids(tenant)
        .await
        .map_err(|e| chain(&e))?;
    let still: std::collections::HashSet<&DeploymentId> = pending.iter().collect();
    servers.retain(|id, _| still.contains(id));
    for id in &pending {
        if servers.contains_key(id) {
            continue;
        }
        // A record not there (yet, or any more) is counted at the next pass.
        if let Some(record) = deployments.get(tenant, id).await.map_err(|e| chain(&e))?
            && !record.deployment.status.is_terminal()
        {
            servers.insert(id.clone(), record.deployment.server_id);
        }
    }
    let mut lengths: HashMap<&ServerId, u64> = HashMap::new();
    for server in servers.values() {
        *lengths.entry(server).or_default() += 1;
    }
    Ok(lengths.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_lengths_fall_into_their_buckets() {
        let sample = PendingSample::default();
        sample.record([1, 1, 2, 5, 6, 100, 101, 0]);
        let got: Vec<u64> = sample
            .servers
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .collect();
        assert_eq!(got, [2, 2, 1, 1, 1]);
        assert_eq!(sample.total.load(Ordering::Relaxed), 216);
        assert_eq!(sample.longest.load(Ordering::Relaxed), 101);
    }
}
