//! Pages of a listing read from an index bucket in stream order, O(page) whatever the
//! history.
//!
//! An index key is written once (KV `create`), so its message's stream sequence is its
//! place in the listing: creation order, stable while other keys are written. A page
//! walks the index with direct gets "next message of this subject filter from sequence
//! S", one per entry, and the next page starts after the last sequence read. No key
//! listing (itself O(all keys)) and no consumer is involved.
//!
//! Indexes: `flue_server_deployments` (`<tenant>.<server>.<deployment>`, see
//! [`Store::index_deployment`]) for deployments, `flue_server_order`
//! (`<tenant>.<server>`) for servers. A key removed by a stream purge (a deregistered
//! server) simply drops out of the walk.

use async_nats::jetstream::{kv, stream::DirectGetErrorKind};
use bytes::Bytes;
use flue_proto::{DeploymentId, ServerId, TenantId};

use super::{SERVER_DEPLOYMENTS_BUCKET, SERVER_ORDER_BUCKET, Store, StoreError};

/// One page of index entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexPage<T> {
    /// The entries, in index order.
    pub items: Vec<T>,
    /// The stream sequence the next page starts at; `None` on the last page.
    pub next: Option<u64>,
}

/// A deployment's entry in the listing order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentEntry {
    /// Its server.
    pub server: ServerId,
    /// The deployment.
    pub id: DeploymentId,
}

impl Store {
    /// Puts server `id` at the end of the listing order, unless it is already in it.
    pub(super) async fn order_server(
        &self,
        tenant: &TenantId,
        id: &ServerId,
    ) -> Result<(), StoreError> {
        let key = format!("{tenant}.{id}");
        match self.server_order.create(&key, Bytes::new()).await {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(StoreError::Write {
                bucket: SERVER_ORDER_BUCKET,
                key,
                source: e.into(),
            }),
        }
    }

    /// Removes server `id` from the listing order (a stream purge: no tombstone, so a
    /// registration again puts it at the end).
    pub(super) async fn unorder_server(
        &self,
        tenant: &TenantId,
        id: &ServerId,
    ) -> Result<(), StoreError> {
        super::bucket::purge_key(
            &self.server_order,
            SERVER_ORDER_BUCKET,
            &format!("{tenant}.{id}"),
        )
        .await
    }

    /// True once `tenant`'s servers registered before the order index existed are in it.
    pub async fn server_order_indexed(&self, tenant: &TenantId) -> Result<bool, StoreError> {
        let key = format!("{tenant}.meta.indexed");
        let entry = self
            .server_order
            .entry(&key)
            .await
            .map_err(|e| StoreError::Read {
                bucket: SERVER_ORDER_BUCKET,
                key,
                source: e.into(),
            })?;
        Ok(entry.is_some_and(|e| e.operation == kv::Operation::Put))
    }

    /// Puts every registered server of `tenant` in the listing order, oldest first, then
    /// the marker that makes later starts skip this. One full scan, once per store.
    pub async fn index_server_order(&self, tenant: &TenantId) -> Result<usize, StoreError> {
        let servers = self.servers(tenant).await?;
        for server in &servers {
            self.order_server(tenant, &server.id).await?;
        }
        let key = format!("{tenant}.meta.indexed");
        self.server_order
            .put(&key, Bytes::new())
            .await
            .map_err(|e| StoreError::Write {
                bucket: SERVER_ORDER_BUCKET,
                key,
                source: e.into(),
            })?;
        Ok(servers.len())
    }

    /// A page of at most `limit` servers of `tenant` in registration order, from stream
    /// sequence `from` (1 for the first page).
    pub async fn server_page(
        &self,
        tenant: &TenantId,
        from: u64,
        limit: usize,
    ) -> Result<IndexPage<ServerId>, StoreError> {
        let page = walk(
            &self.server_order,
            SERVER_ORDER_BUCKET,
            &format!("{tenant}.*"),
            from,
            limit,
        )
        .await?;
        Ok(IndexPage {
            items: page
                .items
                .iter()
                .filter_map(|key| key.rsplit('.').next().and_then(|s| ServerId::new(s).ok()))
                .collect(),
            next: page.next,
        })
    }

    /// A page of at most `limit` deployments of `tenant` (only `server`'s, if given) in
    /// creation order, from stream sequence `from` (1 for the first page).
    pub async fn deployment_page(
        &self,
        tenant: &TenantId,
        server: Option<&ServerId>,
        from: u64,
        limit: usize,
    ) -> Result<IndexPage<DeploymentEntry>, StoreError> {
        let filter = match server {
            Some(server) => format!("{tenant}.{server}.*"),
            None => format!("{tenant}.*.*"),
        };
        let page = walk(&self.index, SERVER_DEPLOYMENTS_BUCKET, &filter, from, limit).await?;
        Ok(IndexPage {
            items: page
                .items
                .iter()
                .filter_map(|key| {
                    let mut tokens = key.split('.').skip(1);
                    let server = ServerId::new(tokens.next()?).ok()?;
                    let id = DeploymentId::new(tokens.next()?).ok()?;
                    Some(DeploymentEntry { server, id })
                })
                .collect(),
            next: page.next,
        })
    }
}

/// The keys of at most `limit` index entries matching `filter` from sequence `from`, and
/// where the next page starts (one read further tells whether there is one).
async fn walk(
    store: &kv::Store,
    bucket: &'static str,
    filter: &str,
    from: u64,
    limit: usize,
) -> Result<IndexPage<String>, StoreError> {
    let subject = format!("{}{filter}", store.prefix);
    let mut page = IndexPage::default();
    let mut seq = from.max(1);
    loop {
        let message = match store
            .stream
            .direct_get_next_for_subject(subject.clone(), Some(seq))
            .await
        {
            Ok(m) => m,
            Err(e) if e.kind() == DirectGetErrorKind::NotFound => return Ok(page),
            Err(e) => {
                return Err(StoreError::List {
                    bucket,
                    source: e.into(),
                });
            }
        };
        if page.items.len() == limit {
            page.next = Some(message.sequence);
            return Ok(page);
        }
        seq = message.sequence + 1;
        // Only puts are index entries; the gateway never leaves other markers, but a
        // hand-made delete must not list a ghost.
        let put = message
            .headers
            .get("KV-Operation")
            .is_none_or(|op| op.as_str() == "PUT");
        if put && let Some(key) = message.subject.strip_prefix(store.prefix.as_str()) {
            page.items.push(key.to_owned());
        }
    }
}
