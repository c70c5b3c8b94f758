//! Servers: their records, and their registration order ([`super::paging`]).

use std::sync::Arc;

use bytes::Bytes;
use flue_proto::{Server, ServerId, TenantId};

use super::bucket::{create, create_entry, entry, get, keys, purge_key, put};
use super::cas::{self, Json};
use super::kv::Kv;
use super::{StoreError, key2};

/// The servers' buckets; cheap to clone.
#[derive(Debug, Clone)]
pub struct Servers {
    /// `flue_servers`.
    records: Arc<dyn Kv>,
    /// `flue_server_order`.
    pub(super) order: Arc<dyn Kv>,
    /// `flue_server_deployments`, whose entries of a server go with it.
    index: Arc<dyn Kv>,
}

impl Servers {
    pub(super) fn new(records: Arc<dyn Kv>, order: Arc<dyn Kv>, index: Arc<dyn Kv>) -> Self {
        Self {
            records,
            order,
            index,
        }
    }

    /// The server `id` of `tenant`, if registered.
    pub async fn get(
        &self,
        tenant: &TenantId,
        id: &ServerId,
    ) -> Result<Option<Server>, StoreError> {
        self.by_key(key2(tenant, id)).await
    }

    async fn by_key(&self, key: String) -> Result<Option<Server>, StoreError> {
        Ok(get(&*self.records, &key).await?.map(|(s, _)| s))
    }

    /// Stores a new server; returns the stored one instead when it is already registered.
    ///
    /// The server is put in the listing order first, so that a crash in between leaves
    /// at worst an entry without a record, which listings skip.
    pub async fn create(&self, server: &Server) -> Result<Option<Server>, StoreError> {
        self.order(&server.tenant, &server.id).await?;
        let key = key2(&server.tenant, &server.id);
        create(&*self.records, &key, server, |k| self.by_key(k)).await
    }

    /// Replaces server `id`'s public keys with `keys` under compare-and-set (a
    /// concurrent registration or rotation is re-read, then overwritten); returns the
    /// stored server, or `None` when it is not registered.
    pub async fn replace_keys(
        &self,
        tenant: &TenantId,
        id: &ServerId,
        keys: &flue_proto::ServerKeys,
    ) -> Result<Option<Server>, StoreError> {
        self.update(tenant, id, |server| {
            server.keys = Some(keys.clone());
            true
        })
        .await
    }

    /// Changes server `id`'s record with `change` under compare-and-set (re-read and
    /// changed again after a lost race); `change` returns false to leave it as found.
    /// Returns the stored server, or `None` when it is not registered.
    pub async fn update(
        &self,
        tenant: &TenantId,
        id: &ServerId,
        change: impl FnMut(&mut Server) -> bool,
    ) -> Result<Option<Server>, StoreError> {
        let key = key2(tenant, id);
        Ok(cas::update::<Server, Json>(&*self.records, &key, change)
            .await?
            .value())
    }

    /// Removes server `id`'s record and its entries in the deployment index (the
    /// deployment records stay). The index goes first, so that a removal interrupted
    /// half-way still finds the server and can be repeated.
    pub async fn delete(&self, tenant: &TenantId, id: &ServerId) -> Result<(), StoreError> {
        purge_key(&*self.index, &format!("{tenant}.{id}.*")).await?;
        let key = key2(tenant, id);
        self.records
            .purge(&key, None)
            .await
            .map_err(|e| super::bucket::write_error(self.records.name(), &key, e))?;
        // After the record: an interrupted removal leaves an entry listings skip.
        self.unorder(tenant, id).await
    }

    /// Every server of `tenant`, oldest first.
    pub async fn all(&self, tenant: &TenantId) -> Result<Vec<Server>, StoreError> {
        let mut servers = Vec::new();
        for key in keys(&*self.records, &format!("{tenant}.*")).await? {
            if let Some(server) = self.by_key(key).await? {
                servers.push(server);
            }
        }
        servers.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(servers)
    }

    /// Puts server `id` at the end of the listing order, unless it is already in it.
    async fn order(&self, tenant: &TenantId, id: &ServerId) -> Result<(), StoreError> {
        create_entry(&*self.order, &format!("{tenant}.{id}")).await
    }

    /// Removes server `id` from the listing order (a stream purge: no tombstone, so a
    /// registration again puts it at the end).
    async fn unorder(&self, tenant: &TenantId, id: &ServerId) -> Result<(), StoreError> {
        purge_key(&*self.order, &format!("{tenant}.{id}"))
            .await
            .map(drop)
    }

    /// True once `tenant`'s servers registered before the order index existed are in it.
    pub async fn order_indexed(&self, tenant: &TenantId) -> Result<bool, StoreError> {
        let key = format!("{tenant}.meta.indexed");
        Ok(entry(&*self.order, &key).await?.is_some())
    }

    /// Puts every registered server of `tenant` in the listing order, oldest first, then
    /// the marker that makes later starts skip this. One full scan, once per store.
    pub async fn index_order(&self, tenant: &TenantId) -> Result<usize, StoreError> {
        let servers = self.all(tenant).await?;
        for server in &servers {
            self.order(tenant, &server.id).await?;
        }
        put(
            &*self.order,
            &format!("{tenant}.meta.indexed"),
            Bytes::new(),
        )
        .await?;
        Ok(servers.len())
    }
}
