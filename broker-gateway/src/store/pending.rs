//! The pending index: one empty key per deployment that is not terminal, so that start-up
//! and recovery read the work in flight, not every deployment ever recorded.
//!
//! Crash safety comes from the order of the writes, not from a transaction: the key is
//! written *before* a deployment's record is created and removed *after* its record
//! became terminal. A crash in between leaves a key too many (no record yet, or a
//! terminal record), never one too few; recovery removes the extra ones, in O(pending).
//!
//! A key is removed with a stream purge of its subject, not a KV delete, so that it
//! leaves no tombstone: listing the keys then costs what is pending, however long the
//! history. A store written before the index existed is indexed once at start (one full
//! scan), after which the tenant's marker key says never again.

use bytes::Bytes;
use flue_proto::{DeploymentId, TenantId};
use time::OffsetDateTime;

use super::bucket::{entry, keys, purge_key, put};
use super::{Deployments, StoreError};

/// The marker key of `tenant`: three tokens, so the `<tenant>.*` listing never sees it.
fn marker_key(tenant: &TenantId) -> String {
    format!("{tenant}.meta.indexed")
}

impl Deployments {
    /// Marks deployment `id` pending (idempotent).
    pub async fn mark_pending(
        &self,
        tenant: &TenantId,
        id: &DeploymentId,
    ) -> Result<(), StoreError> {
        put(&*self.pending, &format!("{tenant}.{id}"), Bytes::new()).await
    }

    /// Removes deployment `id` from the pending index (nothing if it is not there).
    pub async fn clear_pending(
        &self,
        tenant: &TenantId,
        id: &DeploymentId,
    ) -> Result<(), StoreError> {
        purge_key(&*self.pending, &format!("{tenant}.{id}"))
            .await
            .map(drop)
    }

    /// [`Deployments::clear_pending`] after the terminal write of a record: a failure is
    /// logged, not returned (the write it follows did happen); the next recovery
    /// removes the key.
    pub(super) async fn clear_pending_logged(&self, tenant: &TenantId, id: &DeploymentId) {
        if let Err(e) = self.clear_pending(tenant, id).await {
            tracing::warn!(error = &e as &(dyn std::error::Error + 'static), deployment.id = %id, "terminal deployment left in the pending index; the next recovery removes it");
        }
    }

    /// Ids of `tenant`'s pending deployments, in no particular order.
    pub async fn pending_ids(&self, tenant: &TenantId) -> Result<Vec<DeploymentId>, StoreError> {
        let keys = keys(&*self.pending, &format!("{tenant}.*")).await?;
        Ok(keys
            .iter()
            .filter_map(|k| k.rsplit('.').next().and_then(|s| DeploymentId::new(s).ok()))
            .collect())
    }

    /// When deployment `id` was marked pending, if it is.
    pub async fn pending_since(
        &self,
        tenant: &TenantId,
        id: &DeploymentId,
    ) -> Result<Option<OffsetDateTime>, StoreError> {
        let key = format!("{tenant}.{id}");
        Ok(entry(&*self.pending, &key).await?.map(|e| e.created))
    }

    /// True once `tenant`'s deployments were indexed ([`Deployments::mark_pending_indexed`]).
    pub async fn pending_indexed(&self, tenant: &TenantId) -> Result<bool, StoreError> {
        Ok(entry(&*self.pending, &marker_key(tenant)).await?.is_some())
    }

    /// Records that every pending deployment of `tenant` is in the index: later starts
    /// read the index only.
    pub async fn mark_pending_indexed(&self, tenant: &TenantId) -> Result<(), StoreError> {
        put(&*self.pending, &marker_key(tenant), Bytes::new()).await
    }
}
