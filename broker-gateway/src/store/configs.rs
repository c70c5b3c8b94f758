//! Configs: immutable once created.

use std::sync::Arc;

use flue_proto::{Config, ConfigId, TenantId};

use super::bucket::{create, get};
use super::kv::Kv;
use super::{StoreError, key2};

/// The configs bucket; cheap to clone.
#[derive(Debug, Clone)]
pub struct Configs {
    kv: Arc<dyn Kv>,
}

impl Configs {
    pub(super) fn new(kv: Arc<dyn Kv>) -> Self {
        Self { kv }
    }

    /// The config `id` of `tenant`, if it exists.
    pub async fn get(
        &self,
        tenant: &TenantId,
        id: &ConfigId,
    ) -> Result<Option<Config>, StoreError> {
        self.by_key(key2(tenant, id)).await
    }

    async fn by_key(&self, key: String) -> Result<Option<Config>, StoreError> {
        Ok(get(&*self.kv, &key).await?.map(|(c, _)| c))
    }

    /// Stores a new config; returns the stored one instead when the id is taken.
    pub async fn create(
        &self,
        tenant: &TenantId,
        config: &Config,
    ) -> Result<Option<Config>, StoreError> {
        let key = key2(tenant, &config.id);
        create(&*self.kv, &key, config, |k| self.by_key(k)).await
    }
}
