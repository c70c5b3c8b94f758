//! A stack's units, each under a key of its own in `flue_stack_units`: reading them
//! (one, some, all of a stack) and writing them, each compare-and-set on the revision
//! read before.

use std::collections::BTreeMap;

use flue_proto::stack::{unit_key_of, unit_token};
use flue_proto::{StackId, TenantId, Unit};
use futures_util::StreamExt;

use super::super::StoreError;
use super::super::bucket::{decode, encode, entry, keys, write_error};
use super::super::kv::KvError;
use super::{Stacks, UNIT_IO_IN_FLIGHT};

/// A unit's key as stored: its value (`None` when absent, deleted or undecodable) and
/// the revision to name when replacing it (`None`: create it).
pub(super) struct StoredUnit {
    pub(super) unit: Option<Unit>,
    pub(super) revision: Option<u64>,
}

impl Stacks {
    /// The keys of stack `id`'s stored units (deleted ones included: they read as absent).
    pub(super) async fn unit_keys(
        &self,
        tenant: &TenantId,
        id: &StackId,
    ) -> Result<Vec<String>, StoreError> {
        Ok(keys(&*self.units, &format!("{tenant}.{id}.*"))
            .await?
            .into_iter()
            .filter_map(|k| k.rsplit('.').next().and_then(unit_key_of))
            .collect())
    }

    /// Every unit stored under a key of its own, by unit key.
    pub(super) async fn all_units(
        &self,
        tenant: &TenantId,
        id: &StackId,
    ) -> Result<BTreeMap<String, Unit>, StoreError> {
        let keys = self.unit_keys(tenant, id).await?;
        let stored = self.stored_units(tenant, id, keys.iter()).await?;
        Ok(stored
            .into_iter()
            .filter_map(|(k, s)| Some((k, s.unit?)))
            .collect())
    }

    /// The stored state of the units `keys`.
    pub(super) async fn stored_units<'k>(
        &self,
        tenant: &TenantId,
        id: &StackId,
        keys: impl Iterator<Item = &'k String>,
    ) -> Result<BTreeMap<String, StoredUnit>, StoreError> {
        let reads: Vec<_> = keys
            .map(|key| async move {
                let stored = self.stored_unit(tenant, id, key).await?;
                Ok::<_, StoreError>((key.clone(), stored))
            })
            .collect();
        let reads: Vec<_> = futures_util::stream::iter(reads)
            .buffer_unordered(UNIT_IO_IN_FLIGHT)
            .collect()
            .await;
        reads.into_iter().collect()
    }

    /// Unit `key` of stack `id` as stored. One that does not decode reads as absent, with
    /// its revision, so that a write replaces it (it affects nothing else).
    pub(super) async fn stored_unit(
        &self,
        tenant: &TenantId,
        id: &StackId,
        key: &str,
    ) -> Result<StoredUnit, StoreError> {
        let kv_key = unit_kv_key(tenant, id, key);
        let bucket = self.units.name();
        Ok(match entry(&*self.units, &kv_key).await? {
            Some(e) => {
                let unit = decode::<Unit>(bucket, &kv_key, &e.value)
                    .inspect_err(|err| {
                        tracing::warn!(error = %err, key = kv_key, "stored unit cannot be decoded; it is replaced by the next write");
                    })
                    .ok();
                StoredUnit {
                    unit,
                    revision: Some(e.revision),
                }
            }
            _ => StoredUnit {
                unit: None,
                revision: None,
            },
        })
    }

    /// Writes `changes` over the units as `before` read them, each compare-and-set;
    /// `false` when one of them was written by someone else meanwhile.
    pub(super) async fn write_units(
        &self,
        tenant: &TenantId,
        id: &StackId,
        before: &BTreeMap<String, StoredUnit>,
        changes: &BTreeMap<String, Option<Unit>>,
    ) -> Result<bool, StoreError> {
        let writes: Vec<_> = changes
            .iter()
            .map(|(key, unit)| {
                let revision = before.get(key).and_then(|s| s.revision);
                self.write_unit(tenant, id, key, unit.as_ref(), revision)
            })
            .collect();
        let writes: Vec<_> = futures_util::stream::iter(writes)
            .buffer_unordered(UNIT_IO_IN_FLIGHT)
            .collect()
            .await;
        let mut all = true;
        for write in writes {
            all &= write?;
        }
        Ok(all)
    }

    /// Stores (or, with `None`, deletes) unit `key` if its revision is still `revision`
    /// (`None`: it does not exist); `false` when it moved.
    pub(super) async fn write_unit(
        &self,
        tenant: &TenantId,
        id: &StackId,
        key: &str,
        unit: Option<&Unit>,
        revision: Option<u64>,
    ) -> Result<bool, StoreError> {
        let kv_key = unit_kv_key(tenant, id, key);
        let written = match (unit, revision) {
            (Some(unit), Some(rev)) => self
                .units
                .update(&kv_key, encode(unit), rev)
                .await
                .map(drop),
            (Some(unit), None) => self.units.create(&kv_key, encode(unit)).await.map(drop),
            (None, Some(rev)) => self.units.delete(&kv_key, Some(rev)).await,
            (None, None) => Ok(()),
        };
        match written {
            Ok(()) => Ok(true),
            Err(KvError::Conflict | KvError::Exists) => Ok(false),
            Err(e) => Err(write_error(self.units.name(), &kv_key, e)),
        }
    }

    /// Copies a legacy head's inline units to keys of their own (those not stored there
    /// yet and not about to be written), before the head is stored without them.
    pub(super) async fn move_out_inline(
        &self,
        tenant: &TenantId,
        id: &StackId,
        legacy: &BTreeMap<String, Unit>,
        touched: &BTreeMap<String, StoredUnit>,
    ) -> Result<(), StoreError> {
        let stored = self.unit_keys(tenant, id).await?;
        let copies: BTreeMap<String, Option<Unit>> = legacy
            .iter()
            .filter(|(k, _)| !touched.contains_key(*k) && !stored.contains(*k))
            .map(|(k, u)| (k.clone(), Some(u.clone())))
            .collect();
        // A copy that finds its key taken lost to another gateway doing the same.
        self.write_units(tenant, id, &BTreeMap::new(), &copies)
            .await
            .map(drop)
    }
}

/// The KV key of unit `key` of stack `id`: `<tenant>.<stack>.<unit token>`.
fn unit_kv_key(tenant: &TenantId, id: &StackId, key: &str) -> String {
    format!("{tenant}.{id}.{}", unit_token(key))
}
