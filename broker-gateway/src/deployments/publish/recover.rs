//! Recovery at start: the in-memory state (timeouts, deferred publishes) rebuilt from
//! the pending index, and the records it could not read read again in the background.

use flue_proto::DeploymentId;
use futures_util::StreamExt;
use time::OffsetDateTime;
use tracing::{debug, info, warn};

use super::{MISSING_RECORD_GRACE, Publisher};
use crate::error::chain;
use crate::record::{DeploymentRecord, timeout_deadline};
use crate::store::StoreError;

/// Records read at once at start: the broker answers reads side by side, and the start
/// waits for all of them (10,000 pending deployments are 10,000 reads).
const READ_AT_ONCE: usize = 256;

/// What recovery found at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Deployment records read: the pending index's, or every one when it was built.
    pub read: usize,
    /// Index entries removed: of terminal records, or of records never written.
    pub repaired: usize,
    /// Non-terminal deployments now watched for their timeout.
    pub pending: usize,
    /// Requests published again because their first publish was never confirmed.
    pub republished: usize,
    /// Records that cannot be decoded, logged and left alone.
    pub undecodable: usize,
    /// Records that could not be read, retried in the background.
    pub unread: usize,
}

impl Publisher {
    /// Watches a recovered deployment's timeout and defers its request if it was never
    /// confirmed published; false when the deployment is terminal (nothing to do).
    fn watch(&self, record: &DeploymentRecord) -> bool {
        let d = &record.deployment;
        let Some(deadline) = timeout_deadline(d) else {
            return false;
        };
        self.timeouts.insert(d.id.clone(), deadline);
        if !record.request_published {
            self.defer(record);
        }
        true
    }

    /// Rebuilds the in-memory state from the KV buckets: watches every pending
    /// deployment's timeout and republishes every request never confirmed published,
    /// each server's oldest first.
    ///
    /// Reads only the deployments in the pending index ([`crate::store::pending`]), and
    /// repairs it on the way: a terminal record's entry is removed, as is an entry whose
    /// record never appeared within 30 s (`MISSING_RECORD_GRACE`). A store without the index
    /// is indexed here once, by one full scan.
    ///
    /// Only listing the deployments can fail it: an undecodable record is logged and
    /// skipped, one that cannot be read is read again in the background.
    pub async fn recover(&self) -> Result<Recovery, StoreError> {
        let tenant = &self.tenant;
        let indexing = !self.deployments.pending_indexed(tenant).await?;
        let ids = if indexing {
            info!("no pending index yet; reading every deployment once to build it");
            self.deployments.ids(tenant).await?
        } else {
            self.deployments.pending_ids(tenant).await?
        };
        let reads: Vec<(DeploymentId, Result<Option<DeploymentRecord>, StoreError>)> =
            futures_util::stream::iter(ids)
                .map(|id| async move {
                    // Kept as the hint of the record's next write: the answers that wait
                    // for it (a backlog, after a restart) then write it unread.
                    let read = self.deployments.get_kept(tenant, &id).await;
                    (id, read)
                })
                .buffer_unordered(READ_AT_ONCE)
                .collect()
                .await;
        let mut recovery = Recovery {
            read: reads.len(),
            ..Recovery::default()
        };
        for (id, read) in reads {
            match read {
                Ok(Some(record)) => {
                    if self.watch(&record) {
                        recovery.pending += 1;
                        if indexing {
                            self.deployments.mark_pending(tenant, &id).await?;
                        }
                    } else if !indexing {
                        // Finished, but the gateway stopped before removing the entry.
                        self.deployments.clear_pending(tenant, &id).await?;
                        recovery.repaired += 1;
                    }
                }
                Ok(None) if !indexing => {
                    if self.drop_if_never_recorded(&id).await? {
                        recovery.repaired += 1;
                    }
                }
                Ok(None) => {}
                Err(StoreError::Decode { key, source, .. }) => {
                    warn!(key, error = %source, "deployment record cannot be decoded; skipped");
                    recovery.undecodable += 1;
                }
                Err(e) => {
                    warn!(error = %chain(&e), deployment.id = %id, "cannot read deployment record; retrying in the background");
                    if indexing {
                        // Kept in the index until a read tells whether it is terminal.
                        self.deployments.mark_pending(tenant, &id).await?;
                    }
                    self.unread_insert(id);
                    recovery.unread += 1;
                }
            }
        }
        if indexing {
            self.deployments.mark_pending_indexed(tenant).await?;
        }
        if !self.servers.order_indexed(tenant).await? {
            let servers = self.servers.index_order(tenant).await?;
            info!(servers, "servers put in the listing order index");
        }
        // The deferred queues are ordered by `(created_at, id)`, so each server's
        // requests are republished in acceptance order, whatever order they were read in.
        recovery.republished = self.publish_deferred().await;
        info!(
            read = recovery.read,
            pending = recovery.pending,
            republished = recovery.republished,
            still_unpublished = self.deferred.len(),
            repaired = recovery.repaired,
            undecodable = recovery.undecodable,
            unread = recovery.unread,
            indexed = indexing,
            "deployment state recovered"
        );
        Ok(recovery)
    }

    /// Removes pending entry `id` whose record is not there, once it is older than
    /// [`MISSING_RECORD_GRACE`] (before that its creation may still be under way, here
    /// or in another gateway); true when removed.
    async fn drop_if_never_recorded(&self, id: &DeploymentId) -> Result<bool, StoreError> {
        let tenant = &self.tenant;
        let Some(since) = self.deployments.pending_since(tenant, id).await? else {
            return Ok(false);
        };
        if OffsetDateTime::now_utc() < since + MISSING_RECORD_GRACE {
            self.unread_insert(id.clone());
            return Ok(false);
        }
        info!(deployment.id = %id, "pending entry of a deployment never recorded; removed");
        self.deployments.clear_pending(tenant, id).await?;
        Ok(true)
    }

    fn unread_insert(&self, id: DeploymentId) {
        self.unread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id);
    }

    /// Reads again the records recovery could not read, and watches them.
    pub(super) async fn recover_unread(&self) {
        let ids = std::mem::take(&mut *self.unread.lock().unwrap_or_else(|p| p.into_inner()));
        for id in ids {
            match self.deployments.get(&self.tenant, &id).await {
                Ok(Some(record)) => {
                    info!(deployment.id = %id, "deployment record read at last; recovered");
                    if !self.watch(&record) {
                        let cleared = self.deployments.clear_pending(&self.tenant, &id).await;
                        if let Err(e) = cleared {
                            debug!(error = %chain(&e), deployment.id = %id, "cannot remove a finished deployment's pending entry");
                        }
                    }
                }
                Ok(None) => {}
                Err(StoreError::Decode { key, source, .. }) => {
                    warn!(key, error = %source, "deployment record cannot be decoded; skipped");
                }
                Err(e) => {
                    debug!(error = %chain(&e), deployment.id = %id, "cannot read deployment record; retrying");
                    self.unread_insert(id);
                }
            }
        }
    }
}
