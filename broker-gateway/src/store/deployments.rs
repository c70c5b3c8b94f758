//! Deployments: their records, each server's listing index ([`super::paging`]) and the
//! pending index ([`super::pending`]).

use std::sync::Arc;

use flue_proto::{DeploymentId, ServerId, TenantId};
use futures_util::{Stream, StreamExt};

use super::bucket::{create_entry, encode, get, keys, write_error};
use super::cas::{self, Json, Outcome};
use super::kv::{Kv, KvError};
use super::{DeploymentChange, Listing, StoreError, key2, recent};
use crate::record::DeploymentRecord;

/// Outcome of a compare-and-set update of a deployment.
#[derive(Debug, Clone)]
pub struct Updated {
    /// The record as stored after the update (or as found, when nothing changed).
    pub record: DeploymentRecord,
    /// True if this call wrote a new revision.
    pub changed: bool,
}

/// The deployments' buckets; cheap to clone.
#[derive(Debug, Clone)]
pub struct Deployments {
    /// `flue_deployments`.
    records: Arc<dyn Kv>,
    /// `flue_server_deployments`.
    pub(super) index: Arc<dyn Kv>,
    /// `flue_pending`.
    pub(super) pending: Arc<dyn Kv>,
    /// Deployment records this gateway wrote last, so that the next write of one skips
    /// reading it back ([`recent`]).
    recent: recent::Recent,
}

impl Deployments {
    pub(super) fn new(records: Arc<dyn Kv>, index: Arc<dyn Kv>, pending: Arc<dyn Kv>) -> Self {
        Self {
            records,
            index,
            pending,
            recent: recent::Recent::default(),
        }
    }

    /// The record of deployment `id` of `tenant`, if it exists.
    pub async fn get(
        &self,
        tenant: &TenantId,
        id: &DeploymentId,
    ) -> Result<Option<DeploymentRecord>, StoreError> {
        Ok(self.get_at(tenant, id).await?.map(|(r, _)| r))
    }

    /// The record of deployment `id` of `tenant` and its KV revision, if it exists.
    pub async fn get_at(
        &self,
        tenant: &TenantId,
        id: &DeploymentId,
    ) -> Result<Option<(DeploymentRecord, u64)>, StoreError> {
        get(&*self.records, &key2(tenant, id)).await
    }

    /// Stores a new deployment record; false when the id is already used.
    ///
    /// A record that is not terminal is marked pending first, and put in the listing
    /// order: a crash after these writes leaves entries without a record, which
    /// recovery and listings skip; the other way round it would leave a pending
    /// deployment no restart reads. The two entries are independent of each other, so
    /// they are written together (one round trip, not two), both before the record.
    pub async fn create(&self, record: &DeploymentRecord) -> Result<bool, StoreError> {
        let d = &record.deployment;
        let pending = async {
            match d.status.is_terminal() {
                true => Ok(()),
                false => self.mark_pending(&d.tenant, &d.id).await,
            }
        };
        let listed = self.index(&d.tenant, &d.server_id, &d.id);
        tokio::try_join!(pending, listed)?;
        let key = key2(&d.tenant, &d.id);
        let value = encode(record);
        let size = value.len();
        match self.records.create(&key, value).await {
            Ok(revision) => {
                self.recent.wrote(&key, record, revision, size);
                Ok(true)
            }
            Err(KvError::Exists) => {
                // A retry of a finished deployment: the entry just written would otherwise
                // stay until the next recovery.
                if !d.status.is_terminal()
                    && let Ok(Some(stored)) = self.get(&d.tenant, &d.id).await
                    && stored.deployment.status.is_terminal()
                {
                    self.clear_pending_logged(&d.tenant, &d.id).await;
                }
                Ok(false)
            }
            Err(e) => Err(write_error(self.records.name(), &key, e)),
        }
    }

    /// Changes deployment `id` with `change` under compare-and-set, retrying on a lost race.
    ///
    /// `change` gets the current record and returns whether it changed it; it may run
    /// several times. `None` when the deployment does not exist.
    pub async fn update(
        &self,
        tenant: &TenantId,
        id: &DeploymentId,
        mut change: impl FnMut(&mut DeploymentRecord) -> bool,
    ) -> Result<Option<Updated>, StoreError> {
        let key = key2(tenant, id);
        // First on the record this gateway last wrote, unread: the revision it names makes
        // the write fail if the record changed since. A change that would do nothing
        // there is decided on the stored record instead, below, since the caller is then
        // told the record as it is.
        if let Some((mut record, revision)) = self.recent.get(&key)
            && change(&mut record)
        {
            let value = encode(&record);
            let size = value.len();
            match self.records.update(&key, value, revision).await {
                Ok(revision) => {
                    return Ok(Some(
                        self.written(tenant, id, &key, record, revision, size).await,
                    ));
                }
                // Changed since: read it, as without the hint.
                Err(KvError::Conflict | KvError::Exists) => self.recent.forget(&key),
                // The write may have landed all the same: the caller's retry must know
                // it handled this before, as without the hint.
                Err(e) => {
                    self.recent.forget(&key);
                    return Err(write_error(self.records.name(), &key, e));
                }
            }
        }
        let outcome =
            cas::update::<DeploymentRecord, Json>(&*self.records, &key, &mut change).await?;
        Ok(match outcome {
            Outcome::Kept(record) => record.map(|record| Updated {
                record,
                changed: false,
            }),
            Outcome::Written {
                value,
                revision,
                size,
            } => Some(self.written(tenant, id, &key, value, revision, size).await),
        })
    }

    /// After `record` was written at `revision`: kept as the hint, and off the pending
    /// index when terminal.
    async fn written(
        &self,
        tenant: &TenantId,
        id: &DeploymentId,
        key: &str,
        record: DeploymentRecord,
        revision: u64,
        size: usize,
    ) -> Updated {
        self.recent.wrote(key, &record, revision, size);
        if record.deployment.status.is_terminal() {
            // After the record: a crash in between leaves a pending entry of a terminal
            // record, which the next recovery removes.
            self.clear_pending_logged(tenant, id).await;
        }
        Updated {
            record,
            changed: true,
        }
    }

    /// Records that deployment `id` runs on `server`, for [`Deployments::of_server`]
    /// and the paginated listing. Written once: a second call keeps the entry where it
    /// is, so the listing order (the index stream's) is the order of acceptance.
    pub async fn index(
        &self,
        tenant: &TenantId,
        server: &ServerId,
        id: &DeploymentId,
    ) -> Result<(), StoreError> {
        create_entry(&*self.index, &format!("{tenant}.{server}.{id}")).await
    }

    /// Every deployment of `server`, oldest first; undecodable records left out.
    pub async fn of_server(
        &self,
        tenant: &TenantId,
        server: &ServerId,
    ) -> Result<Vec<DeploymentRecord>, StoreError> {
        Ok(self.of_server_listing(tenant, server).await?.items)
    }

    /// Every deployment of `server`, oldest first, and how many records could not be
    /// decoded: those are logged and left out, so that one bad record never hides the rest.
    pub async fn of_server_listing(
        &self,
        tenant: &TenantId,
        server: &ServerId,
    ) -> Result<Listing<DeploymentRecord>, StoreError> {
        self.of_server_among(tenant, server, |_| true).await
    }

    /// [`Deployments::of_server_listing`] reading only the records whose id `keep`
    /// accepts (e.g. those in the pending index): the rest cost a key, not a read.
    pub async fn of_server_among(
        &self,
        tenant: &TenantId,
        server: &ServerId,
        keep: impl Fn(&DeploymentId) -> bool,
    ) -> Result<Listing<DeploymentRecord>, StoreError> {
        let mut listing = Listing::default();
        for key in keys(&*self.index, &format!("{tenant}.{server}.*")).await? {
            let Some(id) = key
                .rsplit('.')
                .next()
                .and_then(|s| DeploymentId::new(s).ok())
                .filter(|id| keep(id))
            else {
                continue;
            };
            match listing.skip_undecodable(self.get(tenant, &id).await)? {
                Some(r) if &r.deployment.server_id == server => listing.items.push(r),
                _ => {}
            }
        }
        listing.items.sort_by(|a, b| {
            (a.deployment.created_at, &a.deployment.id)
                .cmp(&(b.deployment.created_at, &b.deployment.id))
        });
        Ok(listing)
    }

    /// Ids of every deployment of `tenant`, in no particular order.
    pub async fn ids(&self, tenant: &TenantId) -> Result<Vec<DeploymentId>, StoreError> {
        let keys = keys(&*self.records, &format!("{tenant}.*")).await?;
        Ok(keys
            .iter()
            .filter_map(|k| k.rsplit('.').next().and_then(|s| DeploymentId::new(s).ok()))
            .collect())
    }

    /// Every write to the deployments bucket from now on, in stream order: one watch
    /// (one ordered consumer on the broker) however many readers share it.
    pub async fn watch(
        &self,
    ) -> Result<
        impl Stream<Item = Result<DeploymentChange, StoreError>> + Send + Unpin + use<>,
        StoreError,
    > {
        let bucket = self.records.name();
        let watch_err = move |source| StoreError::Watch {
            bucket,
            key: ">".to_owned(),
            source,
        };
        let watch = self.records.watch().await.map_err(watch_err)?;
        Ok(watch.map(move |change| {
            change
                .map(|c| DeploymentChange {
                    key: c.key,
                    revision: c.revision,
                    value: c.value,
                })
                .map_err(watch_err)
        }))
    }
}
