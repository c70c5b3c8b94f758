//! Taking on the work in flight another gateway left: with several gateways, the one
//! that accepted a deployment keeps its timeout and, when the broker did not confirm the
//! request, the retry of its publish in memory ([`crate::deployments::republish`]). When
//! that gateway dies, nothing else would publish the request or time the deployment out:
//! it would stay QUEUED for ever though it was accepted (202).
//!
//! So every gateway reads the pending index ([`crate::store::pending`]) every
//! [`ADOPT_EVERY`], and takes on every pending deployment it does not watch yet that is
//! older than [`GRACE`] (its own gateway publishes within milliseconds, or retries every
//! second): it watches its timeout, and leaves an unpublished request to its own
//! background publisher, each server's in acceptance order. Two gateways publishing the
//! same request publish one message (the deployment id is the JetStream message id), and
//! a timeout is applied once (compare-and-set); so adopting what a live gateway is still
//! handling costs a read, nothing else. A gateway never reads its own deployments (it
//! watches them already), and another's at most twice while pending (once more when it
//! was read younger than the grace), so the cost follows the work in flight, not the
//! history; a single gateway only lists the index.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use flue_proto::{DeploymentId, TenantId};
use futures_util::StreamExt;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::deployments::Publisher;
use crate::error::chain;
use crate::record::timeout_deadline;
use crate::store::{Store, StoreError};

/// How often the pending index is read.
pub const ADOPT_EVERY: Duration = Duration::from_secs(5);
/// How old an unpublished deployment must be before another gateway takes it on.
pub const GRACE: time::Duration = time::Duration::seconds(10);
/// Records read at once.
const CONCURRENCY: usize = 16;

/// Adopts other gateways' pending deployments until cancelled.
pub async fn run(tenant: TenantId, store: Store, publisher: Publisher, cancel: CancellationToken) {
    let mut seen = Seen::default();
    let mut tick = tokio::time::interval(ADOPT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = adopt_once(&tenant, &store, &publisher, &mut seen).await {
            debug!(error = %chain(&e), "cannot read the pending deployments; trying again");
        }
    }
}

/// Pending deployments of other gateways read already.
#[derive(Debug, Default)]
pub struct Seen {
    /// Taken on, or nothing to take on: not read again.
    done: HashSet<DeploymentId>,
    /// Read while younger than [`GRACE`]: read again once this time has passed.
    young: HashMap<DeploymentId, OffsetDateTime>,
}

/// One pass: every pending deployment neither watched here nor `seen`, and older than
/// [`GRACE`], is watched here too (its timeout, and its publish when unconfirmed).
/// Returns how many unpublished ones were taken on.
pub async fn adopt_once(
    tenant: &TenantId,
    store: &Store,
    publisher: &Publisher,
    seen: &mut Seen,
) -> Result<usize, StoreError> {
    let pending: HashSet<DeploymentId> = store.pending_ids(tenant).await?.into_iter().collect();
    // Forget what is no longer pending: the memory follows the work in flight.
    seen.done.retain(|id| pending.contains(id));
    seen.young.retain(|id, _| pending.contains(id));
    let now = OffsetDateTime::now_utc();
    let unseen: Vec<DeploymentId> = pending
        .into_iter()
        .filter(|id| {
            !publisher.timeouts().contains(id)
                && !seen.done.contains(id)
                && seen.young.get(id).is_none_or(|due| *due <= now)
        })
        .collect();
    let reads: Vec<_> = futures_util::stream::iter(unseen)
        .map(|id| async move {
            let read = store.deployment(tenant, &id).await;
            (id, read)
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut adopted = 0;
    for (id, read) in reads {
        let record = match read {
            Ok(Some(record)) => record,
            // Not written yet (the index entry comes first), or gone: look again next time.
            Ok(None) => continue,
            Err(StoreError::Decode { .. }) => {
                // Recovery and the sweeper skip it too; reading it again cannot help.
                seen.done.insert(id);
                continue;
            }
            Err(e) => {
                warn!(error = %chain(&e), deployment.id = %id, "cannot read a pending deployment; trying again");
                continue;
            }
        };
        let d = &record.deployment;
        if now - d.created_at < GRACE {
            // Its own gateway is publishing it: look again once the grace is over.
            seen.young.insert(id, d.created_at + GRACE);
            continue;
        }
        seen.young.remove(&id);
        seen.done.insert(id);
        let Some(deadline) = timeout_deadline(d) else {
            continue;
        };
        publisher.timeouts().insert(d.id.clone(), deadline);
        if !record.request_published {
            publisher.defer(&record);
            adopted += 1;
        }
    }
    if adopted > 0 {
        info!(
            adopted,
            "unpublished deployments found (their gateway gone?); publishing them"
        );
    }
    Ok(adopted)
}
