//! Gateway state in JetStream KV buckets, so that several gateways can share one broker.
//!
//! | bucket | key | value |
//! |---|---|---|
//! | `flue_configs` | `<tenant>.<config>` | [`flue_proto::Config`] JSON |
//! | `flue_servers` | `<tenant>.<server>` | [`flue_proto::Server`] JSON |
//! | `flue_deployments` | `<tenant>.<deployment>` | [`DeploymentRecord`] JSON |
//! | `flue_server_deployments` | `<tenant>.<server>.<deployment>` | empty (listing index) |
//! | `flue_stacks` | `<tenant>.<stack>` | [`flue_proto::Stack`] JSON, its head (no units) |
//! | `flue_stack_units` | `<tenant>.<stack>.<unit token>` | [`flue_proto::Unit`] JSON ([`flue_proto::stack::unit_token`]) |
//! | `flue_pending` | `<tenant>.<deployment>` | empty: the deployment is not terminal ([`pending`]) |
//! | `flue_server_order` | `<tenant>.<server>` | empty: servers in registration order ([`paging`]) |
//! | `flue_data` | `<tenant>.<stack>.<key>` | a hook's value (written by agents) |
//!
//! Every bucket keeps one revision per key. Configs, servers and deployments are
//! created with `create` (refused when the key exists; a deregistered server's key can
//! be created again); deployment changes go through
//! [`Store::update_deployment`], a compare-and-set loop on the key's revision; stack
//! changes name the revision they replace ([`Store::update_stack`]). The gateway only
//! creates the data bucket and purges a deleted stack's keys from it.

mod bucket;
mod error;
pub mod paging;
pub mod pending;
mod race;
mod recent;
mod stacks;

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use flue_proto::{Config, ConfigId, DeploymentId, Server, ServerId, TenantId, subject};
use futures_util::{Stream, StreamExt};

pub(crate) use bucket::bucket as open_bucket;
pub use error::StoreError;
pub use stacks::{StackChange, StackWrite, UnitChanges, Written};

use crate::record::DeploymentRecord;
use bucket::{bucket, create, decode, encode, get, keys};
use error::BoxError;
pub use race::{lost_delete_race, lost_race};

// The buckets' names are the wire vocabulary's (`flue_proto::subject`).
pub use flue_proto::subject::{
    CONFIGS_BUCKET, DEPLOYMENTS_BUCKET, PENDING_BUCKET, SERVER_DEPLOYMENTS_BUCKET,
    SERVER_ORDER_BUCKET, SERVERS_BUCKET, STACK_UNITS_BUCKET, STACKS_BUCKET,
};

/// How many times a compare-and-set is retried after losing a race before giving up.
pub(crate) const MAX_CAS_ATTEMPTS: usize = 32;

/// Outcome of a compare-and-set update of a deployment.
#[derive(Debug, Clone)]
pub struct Updated {
    /// The record as stored after the update (or as found, when nothing changed).
    pub record: DeploymentRecord,
    /// True if this call wrote a new revision.
    pub changed: bool,
}

/// Handles on the gateway's KV buckets; cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    configs: kv::Store,
    servers: kv::Store,
    deployments: kv::Store,
    index: kv::Store,
    stacks: kv::Store,
    stack_units: kv::Store,
    data: kv::Store,
    pending: kv::Store,
    server_order: kv::Store,
    builds: kv::Store,
    /// Whether the buckets are replicated (`--replicas` above 1): a read missing a key
    /// then asks the stream's leader again ([`bucket::get`]).
    replicated: bool,
    /// Deployment records this gateway wrote last, so that the next write of one skips
    /// reading it back ([`recent`]).
    recent: recent::Recent,
}

impl Store {
    /// Creates the buckets if they do not exist yet and opens them.
    pub async fn open(js: &jetstream::Context) -> Result<Self, StoreError> {
        Self::open_with(js, 1).await
    }

    /// [`Store::open`], creating missing buckets with `replicas` copies (`--replicas`).
    pub async fn open_with(js: &jetstream::Context, replicas: usize) -> Result<Self, StoreError> {
        // On the heap: ten bucket opens side by side in one future would take a debug-built
        // test thread's whole stack (a `#[tokio::test]` keeps its future there).
        Box::pin(Self::open_buckets(js, replicas)).await
    }

    async fn open_buckets(js: &jetstream::Context, replicas: usize) -> Result<Self, StoreError> {
        Ok(Self {
            configs: bucket(js, CONFIGS_BUCKET, replicas).await?,
            servers: bucket(js, SERVERS_BUCKET, replicas).await?,
            deployments: bucket(js, DEPLOYMENTS_BUCKET, replicas).await?,
            index: bucket(js, SERVER_DEPLOYMENTS_BUCKET, replicas).await?,
            stacks: bucket(js, STACKS_BUCKET, replicas).await?,
            stack_units: bucket(js, STACK_UNITS_BUCKET, replicas).await?,
            // Agents read and write it but never create anything: it must exist first.
            data: bucket(js, subject::DATA_BUCKET, replicas).await?,
            pending: bucket(js, PENDING_BUCKET, replicas).await?,
            server_order: bucket(js, SERVER_ORDER_BUCKET, replicas).await?,
            // Agents read builds but never create anything: it must exist first.
            builds: bucket(js, flue_proto::upgrade::BUILDS_BUCKET, replicas).await?,
            replicated: replicas > 1,
            recent: recent::Recent::default(),
        })
    }

    /// [`get`] on one of this store's buckets: a miss asks the leader again when they
    /// are replicated.
    async fn read<T: serde::de::DeserializeOwned>(
        &self,
        bucket: &kv::Store,
        name: &'static str,
        key: String,
    ) -> Result<Option<(T, u64)>, StoreError> {
        get(bucket, name, key, self.replicated).await
    }

    /// The config `id` of `tenant`, if it exists.
    pub async fn config(
        &self,
        tenant: &TenantId,
        id: &ConfigId,
    ) -> Result<Option<Config>, StoreError> {
        Ok(self
            .read(&self.configs, CONFIGS_BUCKET, key2(tenant, id))
            .await?
            .map(|(c, _)| c))
    }

    /// Stores a new config; returns the stored one instead when the id is taken.
    pub async fn create_config(
        &self,
        tenant: &TenantId,
        config: &Config,
    ) -> Result<Option<Config>, StoreError> {
        let key = key2(tenant, &config.id);
        create(&self.configs, CONFIGS_BUCKET, &key, config, |k| {
            self.config_by_key(k)
        })
        .await
    }

    async fn config_by_key(&self, key: String) -> Result<Option<Config>, StoreError> {
        Ok(self
            .read(&self.configs, CONFIGS_BUCKET, key)
            .await?
            .map(|(c, _)| c))
    }

    /// Stores chunk `n` of the agent build `sha256` of `tenant` (a put: uploading a
    /// chunk again replaces it).
    pub async fn put_build_chunk(
        &self,
        tenant: &TenantId,
        sha256: &str,
        n: u64,
        bytes: bytes::Bytes,
    ) -> Result<(), StoreError> {
        let key = flue_proto::upgrade::chunk_key(tenant, sha256, n);
        match self.builds.put(&key, bytes).await {
            Ok(_) => Ok(()),
            Err(e) => Err(StoreError::Write {
                bucket: flue_proto::upgrade::BUILDS_BUCKET,
                key,
                source: e.into(),
            }),
        }
    }

    /// The server `id` of `tenant`, if registered.
    pub async fn server(
        &self,
        tenant: &TenantId,
        id: &ServerId,
    ) -> Result<Option<Server>, StoreError> {
        self.server_by_key(key2(tenant, id)).await
    }

    async fn server_by_key(&self, key: String) -> Result<Option<Server>, StoreError> {
        Ok(self
            .read(&self.servers, SERVERS_BUCKET, key)
            .await?
            .map(|(s, _)| s))
    }

    /// Stores a new server; returns the stored one instead when it is already registered.
    ///
    /// The server is put in the listing order first, so that a crash in between leaves
    /// at worst an entry without a record, which listings skip.
    pub async fn create_server(&self, server: &Server) -> Result<Option<Server>, StoreError> {
        self.order_server(&server.tenant, &server.id).await?;
        let key = key2(&server.tenant, &server.id);
        create(&self.servers, SERVERS_BUCKET, &key, server, |k| {
            self.server_by_key(k)
        })
        .await
    }

    /// Replaces server `id`'s public keys with `keys` under compare-and-set (a
    /// concurrent registration or rotation is re-read, then overwritten); returns the
    /// stored server, or `None` when it is not registered.
    pub async fn replace_server_keys(
        &self,
        tenant: &TenantId,
        id: &ServerId,
        keys: &flue_proto::ServerKeys,
    ) -> Result<Option<Server>, StoreError> {
        let key = key2(tenant, id);
        for _ in 0..MAX_CAS_ATTEMPTS {
            let Some((mut server, revision)) = self
                .read::<Server>(&self.servers, SERVERS_BUCKET, key.clone())
                .await?
            else {
                return Ok(None);
            };
            server.keys = Some(keys.clone());
            match self.servers.update(&key, encode(&server), revision).await {
                Ok(_) => return Ok(Some(server)),
                Err(e) if crate::store::lost_race(&e) => continue,
                Err(e) => {
                    return Err(StoreError::Write {
                        bucket: SERVERS_BUCKET,
                        key,
                        source: e.into(),
                    });
                }
            }
        }
        Err(StoreError::Contention { key })
    }

    /// Changes server `id`'s record with `change` under compare-and-set (re-read and
    /// changed again after a lost race); `change` returns false to leave it as found.
    /// Returns the stored server, or `None` when it is not registered.
    pub async fn update_server(
        &self,
        tenant: &TenantId,
        id: &ServerId,
        mut change: impl FnMut(&mut Server) -> bool,
    ) -> Result<Option<Server>, StoreError> {
        let key = key2(tenant, id);
        for _ in 0..MAX_CAS_ATTEMPTS {
            let Some((mut server, revision)) = self
                .read::<Server>(&self.servers, SERVERS_BUCKET, key.clone())
                .await?
            else {
                return Ok(None);
            };
            if !change(&mut server) {
                return Ok(Some(server));
            }
            match self.servers.update(&key, encode(&server), revision).await {
                Ok(_) => return Ok(Some(server)),
                Err(e) if crate::store::lost_race(&e) => continue,
                Err(e) => {
                    return Err(StoreError::Write {
                        bucket: SERVERS_BUCKET,
                        key,
                        source: e.into(),
                    });
                }
            }
        }
        Err(StoreError::Contention { key })
    }

    /// Removes server `id`'s record and its entries in the deployment index (the
    /// deployment records stay). The index goes first, so that a removal interrupted
    /// half-way still finds the server and can be repeated.
    pub async fn delete_server(&self, tenant: &TenantId, id: &ServerId) -> Result<(), StoreError> {
        bucket::purge_key(
            &self.index,
            SERVER_DEPLOYMENTS_BUCKET,
            &format!("{tenant}.{id}.*"),
        )
        .await?;
        let key = key2(tenant, id);
        self.servers
            .purge(&key)
            .await
            .map_err(|e| StoreError::Write {
                bucket: SERVERS_BUCKET,
                key,
                source: e.into(),
            })?;
        // After the record: an interrupted removal leaves an entry listings skip.
        self.unorder_server(tenant, id).await
    }

    /// Every server of `tenant`, oldest first.
    pub async fn servers(&self, tenant: &TenantId) -> Result<Vec<Server>, StoreError> {
        let mut servers = Vec::new();
        for key in keys(&self.servers, SERVERS_BUCKET, &format!("{tenant}.*")).await? {
            if let Some(server) = self.server_by_key(key).await? {
                servers.push(server);
            }
        }
        servers.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(servers)
    }

    /// The record of deployment `id` of `tenant`, if it exists.
    pub async fn deployment(
        &self,
        tenant: &TenantId,
        id: &DeploymentId,
    ) -> Result<Option<DeploymentRecord>, StoreError> {
        Ok(self
            .read(&self.deployments, DEPLOYMENTS_BUCKET, key2(tenant, id))
            .await?
            .map(|(r, _)| r))
    }

    /// Stores a new deployment record; false when the id is already used.
    ///
    /// A record that is not terminal is marked pending first, and put in the listing
    /// order: a crash after these writes leaves entries without a record, which
    /// recovery and listings skip; the other way round it would leave a pending
    /// deployment no restart reads. The two entries are independent of each other, so
    /// they are written together (one round trip, not two), both before the record.
    pub async fn create_deployment(&self, record: &DeploymentRecord) -> Result<bool, StoreError> {
        let d = &record.deployment;
        let pending = async {
            match d.status.is_terminal() {
                true => Ok(()),
                false => self.mark_pending(&d.tenant, &d.id).await,
            }
        };
        let listed = self.index_deployment(&d.tenant, &d.server_id, &d.id);
        tokio::try_join!(pending, listed)?;
        let key = key2(&d.tenant, &d.id);
        let value = encode(record);
        let size = value.len();
        match self.deployments.create(&key, value).await {
            Ok(revision) => {
                self.recent.wrote(&key, record, revision, size);
                Ok(true)
            }
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                // A retry of a finished deployment: the entry just written would otherwise
                // stay until the next recovery.
                if !d.status.is_terminal()
                    && let Ok(Some(stored)) = self.deployment(&d.tenant, &d.id).await
                    && stored.deployment.status.is_terminal()
                {
                    self.clear_pending_logged(&d.tenant, &d.id).await;
                }
                Ok(false)
            }
            Err(e) => Err(StoreError::Write {
                bucket: DEPLOYMENTS_BUCKET,
                key,
                source: e.into(),
            }),
        }
    }

    /// Changes deployment `id` with `change` under compare-and-set, retrying on a lost race.
    ///
    /// `change` gets the current record and returns whether it changed it; it may run
    /// several times. `None` when the deployment does not exist.
    pub async fn update_deployment(
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
            match self.deployments.update(&key, value, revision).await {
                Ok(revision) => {
                    self.recent.wrote(&key, &record, revision, size);
                    if record.deployment.status.is_terminal() {
                        self.clear_pending_logged(tenant, id).await;
                    }
                    return Ok(Some(Updated {
                        record,
                        changed: true,
                    }));
                }
                // Changed since: read it, as without the hint.
                Err(e) if crate::store::lost_race(&e) => {
                    self.recent.forget(&key);
                }
                // The write may have landed all the same: the caller's retry must know
                // it handled this before, as without the hint.
                Err(e) => {
                    self.recent.forget(&key);
                    return Err(StoreError::Write {
                        bucket: DEPLOYMENTS_BUCKET,
                        key,
                        source: e.into(),
                    });
                }
            }
        }
        for _ in 0..MAX_CAS_ATTEMPTS {
            let Some((mut record, revision)) = self
                .read::<DeploymentRecord>(&self.deployments, DEPLOYMENTS_BUCKET, key.clone())
                .await?
            else {
                return Ok(None);
            };
            if !change(&mut record) {
                return Ok(Some(Updated {
                    record,
                    changed: false,
                }));
            }
            let value = encode(&record);
            let size = value.len();
            match self.deployments.update(&key, value, revision).await {
                Ok(revision) => {
                    self.recent.wrote(&key, &record, revision, size);
                    if record.deployment.status.is_terminal() {
                        // After the record: a crash in between leaves a pending entry
                        // of a terminal record, which the next recovery removes.
                        self.clear_pending_logged(tenant, id).await;
                    }
                    return Ok(Some(Updated {
                        record,
                        changed: true,
                    }));
                }
                Err(e) if crate::store::lost_race(&e) => continue,
                Err(e) => {
                    return Err(StoreError::Write {
                        bucket: DEPLOYMENTS_BUCKET,
                        key,
                        source: e.into(),
                    });
                }
            }
        }
        Err(StoreError::Contention { key })
    }

    /// Records that deployment `id` runs on `server`, for [`Store::server_deployments`]
    /// and the paginated listing. Written once: a second call keeps the entry where it
    /// is, so the listing order (the index stream's) is the order of acceptance.
    pub async fn index_deployment(
        &self,
        tenant: &TenantId,
        server: &ServerId,
        id: &DeploymentId,
    ) -> Result<(), StoreError> {
        let key = format!("{tenant}.{server}.{id}");
        match self.index.create(&key, Bytes::new()).await {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(StoreError::Write {
                bucket: SERVER_DEPLOYMENTS_BUCKET,
                key,
                source: e.into(),
            }),
        }
    }

    /// Every deployment of `server`, oldest first; undecodable records left out.
    pub async fn server_deployments(
        &self,
        tenant: &TenantId,
        server: &ServerId,
    ) -> Result<Vec<DeploymentRecord>, StoreError> {
        Ok(self.server_deployments_listing(tenant, server).await?.items)
    }

    /// Every deployment of `server`, oldest first, and how many records could not be
    /// decoded: those are logged and left out, so that one bad record never hides the rest.
    pub async fn server_deployments_listing(
        &self,
        tenant: &TenantId,
        server: &ServerId,
    ) -> Result<Listing<DeploymentRecord>, StoreError> {
        self.server_deployments_among(tenant, server, |_| true)
            .await
    }

    /// [`Store::server_deployments_listing`] reading only the records whose id `keep`
    /// accepts (e.g. those in the pending index): the rest cost a key, not a read.
    pub async fn server_deployments_among(
        &self,
        tenant: &TenantId,
        server: &ServerId,
        keep: impl Fn(&DeploymentId) -> bool,
    ) -> Result<Listing<DeploymentRecord>, StoreError> {
        let mut listing = Listing::default();
        for key in keys(
            &self.index,
            SERVER_DEPLOYMENTS_BUCKET,
            &format!("{tenant}.{server}.*"),
        )
        .await?
        {
            let Some(id) = key
                .rsplit('.')
                .next()
                .and_then(|s| DeploymentId::new(s).ok())
                .filter(|id| keep(id))
            else {
                continue;
            };
            match listing.skip_undecodable(self.deployment(tenant, &id).await)? {
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
    pub async fn deployment_ids(&self, tenant: &TenantId) -> Result<Vec<DeploymentId>, StoreError> {
        let keys = keys(
            &self.deployments,
            DEPLOYMENTS_BUCKET,
            &format!("{tenant}.*"),
        )
        .await?;
        Ok(keys
            .iter()
            .filter_map(|k| k.rsplit('.').next().and_then(|s| DeploymentId::new(s).ok()))
            .collect())
    }

    /// The record of deployment `id` of `tenant` and its KV revision, if it exists.
    pub async fn deployment_at(
        &self,
        tenant: &TenantId,
        id: &DeploymentId,
    ) -> Result<Option<(DeploymentRecord, u64)>, StoreError> {
        self.read(&self.deployments, DEPLOYMENTS_BUCKET, key2(tenant, id))
            .await
    }

    /// Every write to the deployments bucket from now on, in stream order: one watch
    /// (one ordered consumer on the broker) however many readers share it.
    pub async fn watch_deployments(
        &self,
    ) -> Result<
        impl Stream<Item = Result<DeploymentChange, StoreError>> + Send + Unpin + use<>,
        StoreError,
    > {
        let watch_err = |source: BoxError| StoreError::Watch {
            bucket: DEPLOYMENTS_BUCKET,
            key: ">".to_owned(),
            source,
        };
        let watch = self
            .deployments
            .watch_all()
            .await
            .map_err(|e| watch_err(e.into()))?;
        Ok(watch
            .filter_map(move |entry| {
                std::future::ready(match entry {
                    Ok(e) if e.operation == kv::Operation::Put => Some(Ok(DeploymentChange {
                        key: e.key,
                        revision: e.revision,
                        value: e.value,
                    })),
                    Ok(_) => None,
                    Err(err) => Some(Err(watch_err(err.into()))),
                })
            })
            .boxed())
    }
}

/// What a listing read: the records, and how many it left out because they cannot be
/// decoded (each logged once per listing).
#[derive(Debug, Clone)]
pub struct Listing<T> {
    /// The records read.
    pub items: Vec<T>,
    /// Records left out as undecodable.
    pub skipped: usize,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            skipped: 0,
        }
    }
}

impl<T> Listing<T> {
    /// The value of a read; `None` (counted and logged) when the stored value cannot be
    /// decoded; any other failure is the listing's.
    pub fn skip_undecodable<R>(
        &mut self,
        read: Result<Option<R>, StoreError>,
    ) -> Result<Option<R>, StoreError> {
        match read {
            Err(StoreError::Decode {
                bucket,
                key,
                source,
            }) => {
                tracing::warn!(bucket, key, error = %source, "stored record cannot be decoded; left out of the listing");
                self.skipped += 1;
                Ok(None)
            }
            other => other,
        }
    }
}

/// The KV key of deployment `id` of `tenant`, as [`DeploymentChange::key`] names it.
pub fn deployment_key(tenant: &TenantId, id: &DeploymentId) -> String {
    key2(tenant, id)
}

/// One write to the deployments bucket, decoded only by whoever wants it.
#[derive(Debug, Clone)]
pub struct DeploymentChange {
    /// The key written ([`deployment_key`]).
    pub key: String,
    /// The KV revision of the write; later writes have larger ones.
    pub revision: u64,
    value: Bytes,
}

impl DeploymentChange {
    /// The record written.
    pub fn record(&self) -> Result<DeploymentRecord, StoreError> {
        decode(DEPLOYMENTS_BUCKET, &self.key, &self.value)
    }
}

/// `<tenant>.<id>`.
fn key2(tenant: &TenantId, id: &impl std::fmt::Display) -> String {
    format!("{tenant}.{id}")
}
