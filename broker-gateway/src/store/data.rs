//! Stacks' data spaces (`flue_data`): written by agents; the gateway reads a stack's
//! keys (export), writes them (adoption) and purges them (deletion).

use std::collections::BTreeMap;
use std::sync::Arc;

use flue_proto::{StackId, TenantId, subject};

use super::StoreError;
use super::bucket::{keys, purge_key, put};
use super::kv::Kv;

/// The data bucket; cheap to clone.
#[derive(Debug, Clone)]
pub struct Data {
    kv: Arc<dyn Kv>,
}

impl Data {
    pub(super) fn new(kv: Arc<dyn Kv>) -> Self {
        Self { kv }
    }

    /// Removes every key of stack `id`'s data space; returns how many messages went.
    ///
    /// A stream purge filtered on the stack's subjects, so it costs one request
    /// whatever the number of keys, and leaves no delete markers behind.
    pub async fn purge_stack(&self, tenant: &TenantId, id: &StackId) -> Result<u64, StoreError> {
        purge_key(&*self.kv, &subject::data_stack_filter(tenant, id)).await
    }

    /// Every key of stack `id`'s data space (the part after `<tenant>.<stack>.`) and its
    /// value: the keys under the stack's filter, then each one's value, removed keys left
    /// out. Costs one request per key.
    pub async fn of_stack(
        &self,
        tenant: &TenantId,
        id: &StackId,
    ) -> Result<BTreeMap<String, bytes::Bytes>, StoreError> {
        let names = keys(&*self.kv, &subject::data_stack_filter(tenant, id)).await?;
        let inside = format!("{tenant}.{id}.");
        let mut data = BTreeMap::new();
        for name in names {
            let Some(key) = name.strip_prefix(&inside) else {
                continue;
            };
            let entry = self
                .kv
                .get(&name)
                .await
                .map_err(|source| StoreError::Read {
                    bucket: subject::DATA_BUCKET,
                    key: name.clone(),
                    source,
                })?;
            if let Some(entry) = entry {
                data.insert(key.to_owned(), entry.value);
            }
        }
        Ok(data)
    }

    /// Writes `key` of stack `id`'s data space (adopting a stack).
    pub async fn put(
        &self,
        tenant: &TenantId,
        id: &StackId,
        key: &str,
        value: bytes::Bytes,
    ) -> Result<(), StoreError> {
        put(&*self.kv, &subject::data_key(tenant, id, key), value).await
    }
}
