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
//! [`super::Deployments::index`]) for deployments, `flue_server_order`
//! (`<tenant>.<server>`) for servers. A key removed by a stream purge (a deregistered
//! server) simply drops out of the walk.

use flue_proto::{DeploymentId, ServerId, TenantId};

use super::kv::Kv;
use super::{Deployments, Servers, StoreError};

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

impl Servers {
    /// A page of at most `limit` servers of `tenant` in registration order, from stream
    /// sequence `from` (1 for the first page).
    pub async fn page(
        &self,
        tenant: &TenantId,
        from: u64,
        limit: usize,
    ) -> Result<IndexPage<ServerId>, StoreError> {
        let page = walk(&*self.order, &format!("{tenant}.*"), from, limit).await?;
        Ok(IndexPage {
            items: page
                .items
                .iter()
                .filter_map(|key| key.rsplit('.').next().and_then(|s| ServerId::new(s).ok()))
                .collect(),
            next: page.next,
        })
    }
}

impl Deployments {
    /// A page of at most `limit` deployments of `tenant` (only `server`'s, if given) in
    /// creation order, from stream sequence `from` (1 for the first page).
    pub async fn page(
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
        let page = walk(&*self.index, &filter, from, limit).await?;
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
    kv: &dyn Kv,
    filter: &str,
    from: u64,
    limit: usize,
) -> Result<IndexPage<String>, StoreError> {
    let mut page = IndexPage::default();
    let mut seq = from.max(1);
    loop {
        let next = kv
            .next(filter, seq)
            .await
            .map_err(|source| StoreError::List {
                bucket: kv.name(),
                source,
            })?;
        let Some((key, sequence, put)) = next else {
            return Ok(page);
        };
        if page.items.len() == limit {
            page.next = Some(sequence);
            return Ok(page);
        }
        seq = sequence + 1;
        // Only puts are index entries; the gateway never leaves other markers, but a
        // hand-made delete must not list a ghost.
        if put {
            page.items.push(key);
        }
    }
}
