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
use crate::record::{DeploymentRecord, timeout_deadline};
use crate::store::{Deployments, StoreError};

/// How often the pending index is read.
pub const ADOPT_EVERY: Duration = Duration::from_secs(5);
/// How old an unpublished deployment must be before another gateway takes it on.
pub const GRACE: time::Duration = time::Duration::seconds(10);
/// Records read at once.
const CONCURRENCY: usize = 16;

/// Adopts other gateways' pending deployments until cancelled.
pub async fn run(
    tenant: TenantId,
    deployments: Deployments,
    publisher: Publisher,
    cancel: CancellationToken,
) {
    let mut seen = Seen::default();
    let mut tick = tokio::time::interval(ADOPT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = adopt_once(&tenant, &deployments, &publisher, &mut seen).await {
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
    deployments: &Deployments,
    publisher: &Publisher,
    seen: &mut Seen,
) -> Result<usize, StoreError> {
    let watched = |id: &DeploymentId| publisher.timeouts().contains(id);
    let found = pick(
        tenant,
        deployments,
        watched,
        seen,
        OffsetDateTime::now_utc(),
    )
    .await?;
    let mut adopted = 0;
    for (record, deadline) in found {
        publisher
            .timeouts()
            .insert(record.deployment.id.clone(), deadline);
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

/// What one pass takes on at `now`: every pending deployment neither `watched` nor
/// `seen`, older than [`GRACE`] and not finished, with its timeout's deadline. One
/// younger is read again once the grace is over; one not recorded yet (its index
/// entry comes first) on the next pass.
pub async fn pick(
    tenant: &TenantId,
    deployments: &Deployments,
    watched: impl Fn(&DeploymentId) -> bool,
    seen: &mut Seen,
    now: OffsetDateTime,
) -> Result<Vec<(DeploymentRecord, OffsetDateTime)>, StoreError> {
    let pending: HashSet<DeploymentId> =
        deployments.pending_ids(tenant).await?.into_iter().collect();
    // Forget what is no longer pending: the memory follows the work in flight.
    seen.done.retain(|id| pending.contains(id));
    seen.young.retain(|id, _| pending.contains(id));
    let unseen: Vec<DeploymentId> = pending
        .into_iter()
        .filter(|id| {
            !watched(id)
                && !seen.done.contains(id)
                && seen.young.get(id).is_none_or(|due| *due <= now)
        })
        .collect();
    let reads: Vec<_> = futures_util::stream::iter(unseen)
        .map(|id| async move {
            let read = deployments.get(tenant, &id).await;
            (id, read)
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut found = Vec::new();
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
        if let Some(deadline) = timeout_deadline(d) {
            found.push((record, deadline));
        }
    }
    Ok(found)
}

/// [`pick`] on an in-memory store ([`crate::store::Store::in_memory`]); `now` is given,
/// so the grace is passed without waiting.
#[cfg(test)]
mod tests {
    use flue_proto::DeploymentStatus;

    use super::*;
    use crate::record::tests::record;
    use crate::store::Store;

    fn tenant() -> TenantId {
        TenantId::new("t").expect("id")
    }

    fn id(s: &str) -> DeploymentId {
        DeploymentId::new(s).expect("id")
    }

    /// Deployment `name` (QUEUED, created at the epoch), `published` or not.
    fn deployment(name: &str, published: bool) -> DeploymentRecord {
        let mut r = record();
        r.deployment.id = id(name);
        r.request_published = published;
        r
    }

    fn at(secs: i64) -> OffsetDateTime {
        OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(secs)
    }

    fn ids(found: Vec<(DeploymentRecord, OffsetDateTime)>) -> Vec<String> {
        let mut ids: Vec<String> = found
            .into_iter()
            .map(|(r, _)| r.deployment.id.to_string())
            .collect();
        ids.sort();
        ids
    }

    #[tokio::test]
    async fn a_pending_deployment_past_the_grace_is_taken_on_once_with_its_deadline() {
        let store = Store::in_memory();
        let d = &store.deployments;
        d.create(&deployment("a", false)).await.expect("store");
        d.create(&deployment("b", true)).await.expect("store");
        let mut seen = Seen::default();
        let found = pick(&tenant(), d, |_| false, &mut seen, at(11))
            .await
            .expect("store");
        assert!(
            found
                .iter()
                .all(|(r, deadline)| *deadline == r.deployment.expires_at)
        );
        assert_eq!(ids(found), ["a", "b"]);
        // Taken on: not read again.
        let again = pick(&tenant(), d, |_| false, &mut seen, at(12))
            .await
            .expect("store");
        assert!(again.is_empty());
    }

    #[tokio::test]
    async fn a_deployment_younger_than_the_grace_is_left_to_its_gateway_until_it_is_over() {
        let store = Store::in_memory();
        let d = &store.deployments;
        d.create(&deployment("a", false)).await.expect("store");
        let mut seen = Seen::default();
        assert!(
            pick(&tenant(), d, |_| false, &mut seen, at(3))
                .await
                .expect("store")
                .is_empty()
        );
        // Before its grace is over it is not even read again.
        assert!(
            pick(&tenant(), d, |_| false, &mut seen, at(9))
                .await
                .expect("store")
                .is_empty()
        );
        let found = pick(&tenant(), d, |_| false, &mut seen, at(10))
            .await
            .expect("store");
        assert_eq!(ids(found), ["a"]);
    }

    #[tokio::test]
    async fn what_this_gateway_watches_or_what_ended_is_not_taken_on() {
        let store = Store::in_memory();
        let d = &store.deployments;
        d.create(&deployment("mine", false)).await.expect("store");
        d.create(&deployment("ended", false)).await.expect("store");
        // Terminal, but its pending entry not removed yet (a crash in between).
        d.update(&tenant(), &id("ended"), |r| {
            r.deployment.status = DeploymentStatus::Complete;
            true
        })
        .await
        .expect("store");
        d.mark_pending(&tenant(), &id("ended"))
            .await
            .expect("store");
        let mut seen = Seen::default();
        let watched = |i: &DeploymentId| i.as_str() == "mine";
        let found = pick(&tenant(), d, watched, &mut seen, at(60))
            .await
            .expect("store");
        assert!(found.is_empty(), "{found:?}");
        // The pending entry without a record yet is looked at again: here it comes.
        d.mark_pending(&tenant(), &id("late")).await.expect("store");
        assert!(
            pick(&tenant(), d, watched, &mut seen, at(60))
                .await
                .expect("store")
                .is_empty()
        );
        d.create(&deployment("late", false)).await.expect("store");
        let found = pick(&tenant(), d, watched, &mut seen, at(60))
            .await
            .expect("store");
        assert_eq!(ids(found), ["late"]);
    }
}
