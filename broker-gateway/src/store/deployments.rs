//! Deployments: their records, each server's listing index ([`super::paging`]) and the
//! pending index ([`super::pending`]).

use std::sync::Arc;
use std::time::Duration;

use flue_proto::{DeploymentId, ServerId, TenantId};
use futures_util::{Stream, StreamExt};

use super::bucket::{create_entry, decode, encode, get, keys, write_error};
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

    /// The last write of each of `keys` ([`super::deployment_key`]), in their order, `None`
    /// for a key without a record: one request of the bucket per
    /// [`super::kv::GET_MANY_BATCH`] keys, however many there are (the long polls' reads,
    /// [`crate::waiters`]), failed past `deadline`. Decoded by whoever wants them.
    pub async fn last_writes(
        &self,
        keys: &[String],
        deadline: Duration,
    ) -> Result<Vec<Option<DeploymentChange>>, StoreError> {
        let read = tokio::time::timeout(deadline, self.records.get_many(keys))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {deadline:?}").into()));
        let entries = read.map_err(|source| StoreError::Read {
            bucket: self.records.name(),
            key: match keys {
                [one] => one.clone(),
                [first, rest @ ..] => format!("{first} and {} more", rest.len()),
                [] => String::new(),
            },
            source,
        })?;
        Ok(keys
            .iter()
            .zip(entries)
            .map(|(key, entry)| {
                entry.map(|e| DeploymentChange {
                    key: key.clone(),
                    revision: e.revision,
                    value: e.value,
                })
            })
            .collect())
    }

    /// [`Deployments::get`] that keeps the record read, with its revision, as the hint of
    /// its next write ([`recent`]): recovery reads every pending record at start, and the
    /// answers waiting for them then go straight to their compare-and-set, unread.
    pub async fn get_kept(
        &self,
        tenant: &TenantId,
        id: &DeploymentId,
    ) -> Result<Option<DeploymentRecord>, StoreError> {
        let key = key2(tenant, id);
        let bucket = self.records.name();
        let found = self
            .records
            .get(&key)
            .await
            .map_err(|source| StoreError::Read {
                bucket,
                key: key.clone(),
                source,
            })?;
        let Some(entry) = found else {
            return Ok(None);
        };
        let record: DeploymentRecord = decode(bucket, &key, &entry.value)?;
        self.recent
            .wrote(&key, &record, entry.revision, entry.value.len());
        Ok(Some(record))
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

    /// Whether the record of deployment `id` this gateway wrote last is marked published
    /// (an answer applied here marks it): then a mark needs no write. False when this
    /// gateway keeps no such record (it ended, or was written elsewhere).
    pub fn marked_here(&self, tenant: &TenantId, id: &DeploymentId) -> bool {
        self.recent
            .get(&key2(tenant, id))
            .is_some_and(|(record, _)| record.request_published)
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

#[cfg(test)]
mod tests {
    //! The deployments' compare-and-set on in-memory buckets whose every call first
    //! yields to the runtime, so that concurrent writers interleave between their read
    //! and their write as they do on a broker.

    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use flue_proto::subject;
    use futures_util::FutureExt as _;
    use futures_util::stream::BoxStream;

    use super::*;
    use crate::store::error::BoxError;
    use crate::store::kv::{BoxFut, Change, Entry, Found, KeyWrite};
    use crate::store::memory::Memory;

    /// A bucket that yields before every call, counting its reads in `.1`.
    #[derive(Debug)]
    struct Yielding(Memory, Arc<AtomicUsize>);

    impl Yielding {
        fn shared(name: &'static str) -> Arc<dyn Kv> {
            Self::counted(name, Arc::default())
        }

        fn counted(name: &'static str, reads: Arc<AtomicUsize>) -> Arc<dyn Kv> {
            Arc::new(Self(Memory::new(name), reads))
        }
    }

    /// `call` after one yield to the runtime.
    fn after_yield<'a, T: Send + 'a>(call: BoxFut<'a, T>) -> BoxFut<'a, T> {
        tokio::task::yield_now().then(|()| call).boxed()
    }

    impl Kv for Yielding {
        fn name(&self) -> &'static str {
            self.0.name()
        }
        fn get<'a>(&'a self, key: &'a str) -> BoxFut<'a, Result<Option<Entry>, BoxError>> {
            self.1.fetch_add(1, Ordering::Relaxed);
            after_yield(self.0.get(key))
        }
        fn entry<'a>(&'a self, key: &'a str) -> BoxFut<'a, Result<Option<Entry>, BoxError>> {
            self.1.fetch_add(1, Ordering::Relaxed);
            after_yield(self.0.entry(key))
        }
        fn create<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFut<'a, Result<u64, KvError>> {
            after_yield(self.0.create(key, value))
        }
        fn update<'a>(
            &'a self,
            key: &'a str,
            value: Bytes,
            revision: u64,
        ) -> BoxFut<'a, Result<u64, KvError>> {
            after_yield(self.0.update(key, value, revision))
        }
        fn put<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFut<'a, Result<u64, BoxError>> {
            after_yield(self.0.put(key, value))
        }
        fn delete<'a>(
            &'a self,
            key: &'a str,
            revision: Option<u64>,
        ) -> BoxFut<'a, Result<(), KvError>> {
            after_yield(self.0.delete(key, revision))
        }
        fn purge<'a>(
            &'a self,
            key: &'a str,
            revision: Option<u64>,
        ) -> BoxFut<'a, Result<(), KvError>> {
            after_yield(self.0.purge(key, revision))
        }
        fn remove<'a>(&'a self, filter: &'a str) -> BoxFut<'a, Result<u64, BoxError>> {
            after_yield(self.0.remove(filter))
        }
        fn keys<'a>(&'a self, filter: &'a str) -> BoxFut<'a, Result<Vec<String>, BoxError>> {
            after_yield(self.0.keys(filter))
        }
        fn next<'a>(
            &'a self,
            filter: &'a str,
            from: u64,
        ) -> BoxFut<'a, Result<Option<Found>, BoxError>> {
            after_yield(self.0.next(filter, from))
        }
        fn watch(
            &self,
        ) -> BoxFut<'_, Result<BoxStream<'static, Result<Change, BoxError>>, BoxError>> {
            after_yield(self.0.watch())
        }
        fn values<'a>(
            &'a self,
            filter: &'a str,
        ) -> BoxFut<'a, Result<Vec<(String, Bytes)>, BoxError>> {
            after_yield(self.0.values(filter))
        }
        fn follow<'a>(
            &'a self,
            filter: &'a str,
        ) -> BoxFut<'a, Result<BoxStream<'static, Result<KeyWrite, BoxError>>, BoxError>> {
            after_yield(self.0.follow(filter))
        }
    }

    /// The buckets of one broker: each store over them is one gateway.
    struct Broker {
        records: Arc<dyn Kv>,
        /// Reads of `records` so far.
        reads: Arc<AtomicUsize>,
        index: Arc<dyn Kv>,
        pending: Arc<dyn Kv>,
    }

    impl Broker {
        fn new() -> Self {
            let reads = Arc::<AtomicUsize>::default();
            Self {
                records: Yielding::counted(subject::DEPLOYMENTS_BUCKET, reads.clone()),
                reads,
                index: Yielding::shared(subject::SERVER_DEPLOYMENTS_BUCKET),
                pending: Yielding::shared(subject::PENDING_BUCKET),
            }
        }

        /// A gateway's deployments store on these buckets.
        fn gateway(&self) -> Deployments {
            Deployments::new(
                self.records.clone(),
                self.index.clone(),
                self.pending.clone(),
            )
        }
    }

    fn record(id: &str, server: &str) -> DeploymentRecord {
        let mut r = crate::record::tests::record();
        r.deployment.id = DeploymentId::new(id).expect("id");
        r.deployment.server_id = ServerId::new(server).expect("id");
        r.deployment.deploy_stdout.clear();
        r
    }

    #[tokio::test]
    async fn concurrent_updates_are_all_kept_and_ids_are_listed_per_server() {
        let store = Broker::new().gateway();
        let r = record("d1", "s1");
        assert!(store.create(&r).await.expect("create"));
        assert!(!store.create(&r).await.expect("second create"));

        let (tenant, id) = (&r.deployment.tenant, &r.deployment.id);
        let writers = (0..16).map(|i| {
            let store = store.clone();
            async move {
                store
                    .update(tenant, id, |rec| {
                        rec.deployment.deploy_stdout.push_str(&format!("{i:02}."));
                        true
                    })
                    .await
                    .expect("update")
                    .expect("exists")
            }
        });
        futures_util::future::join_all(writers).await;
        let stored = store.get(tenant, id).await.expect("read").expect("exists");
        let mut parts: Vec<&str> = stored
            .deployment
            .deploy_stdout
            .split_terminator('.')
            .collect();
        parts.sort_unstable();
        let expected: Vec<String> = (0..16).map(|i| format!("{i:02}")).collect();
        assert_eq!(parts, expected, "every concurrent change survived");

        let other = record("d2", "s2");
        assert!(store.create(&other).await.expect("create"));
        let listed = store
            .of_server(tenant, &r.deployment.server_id)
            .await
            .expect("list");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].deployment.id, *id);
        let mut all = store.ids(tenant).await.expect("ids");
        all.sort();
        assert_eq!(all, vec![id.clone(), other.deployment.id.clone()]);
        let t2 = TenantId::new("t2").expect("id");
        assert!(store.ids(&t2).await.expect("ids").is_empty());
    }

    #[tokio::test]
    async fn a_change_another_gateway_made_is_kept_when_this_one_writes_the_record_again() {
        // Two stores on one broker are two gateways: each remembers what it wrote last and
        // writes on it unread; the other's change in between must make that write read first.
        let broker = Broker::new();
        let (mine, theirs) = (broker.gateway(), broker.gateway());
        let r = record("d1", "s1");
        let (tenant, id) = (&r.deployment.tenant, &r.deployment.id);
        assert!(mine.create(&r).await.expect("create"));
        let append = async |store: &Deployments, part: &str| {
            store
                .update(tenant, id, |rec| {
                    rec.deployment.deploy_stdout.push_str(part);
                    true
                })
                .await
                .expect("update")
                .expect("exists")
        };
        append(&mine, "a.").await;
        append(&theirs, "b.").await;
        let updated = append(&mine, "c.").await;
        assert_eq!(updated.record.deployment.deploy_stdout, "a.b.c.");
        let stored = theirs.get(tenant, id).await.expect("read").expect("exists");
        assert_eq!(stored.deployment.deploy_stdout, "a.b.c.", "no change lost");

        // A change that does nothing on what this gateway wrote last is decided on the
        // record as stored: the caller is told the other gateway's change.
        append(&theirs, "d.").await;
        let unchanged = mine
            .update(tenant, id, |rec| rec.deployment.deploy_stdout.is_empty())
            .await
            .expect("update")
            .expect("exists");
        assert!(!unchanged.changed);
        assert_eq!(unchanged.record.deployment.deploy_stdout, "a.b.c.d.");
    }

    #[tokio::test]
    async fn a_record_recovery_read_is_written_next_on_its_revision_unread_and_a_change_since_is_kept()
     {
        let broker = Broker::new();
        let r = record("d1", "s1");
        let (tenant, id) = (&r.deployment.tenant, &r.deployment.id);
        assert!(broker.gateway().create(&r).await.expect("create"));
        // A restarted gateway: nothing of its own in memory but what recovery read.
        let restarted = broker.gateway();
        restarted
            .get_kept(tenant, id)
            .await
            .expect("read")
            .expect("exists");
        let append = async |store: &Deployments, part: &str| {
            store
                .update(tenant, id, |rec| {
                    rec.deployment.deploy_stdout.push_str(part);
                    true
                })
                .await
                .expect("update")
                .expect("exists")
        };
        let reads = broker.reads.load(Ordering::Relaxed);
        assert!(append(&restarted, "a.").await.changed);
        assert_eq!(
            broker.reads.load(Ordering::Relaxed),
            reads,
            "written on the revision recovery read, not read again"
        );
        // Another gateway's write since: the kept revision is refused, the record read.
        append(&broker.gateway(), "b.").await;
        let updated = append(&restarted, "c.").await;
        assert_eq!(
            updated.record.deployment.deploy_stdout, "a.b.c.",
            "no change lost"
        );
    }

    #[tokio::test]
    async fn a_record_turned_terminal_leaves_the_pending_index_and_a_retry_of_it_adds_nothing() {
        let store = Broker::new().gateway();
        let r = record("d1", "s1");
        let (tenant, id) = (&r.deployment.tenant, &r.deployment.id);
        assert!(store.create(&r).await.expect("create"));
        assert_eq!(
            store.pending_ids(tenant).await.expect("pending"),
            std::slice::from_ref(id)
        );
        store
            .update(tenant, id, |rec| {
                rec.deployment.status = flue_proto::DeploymentStatus::Failed;
                true
            })
            .await
            .expect("update")
            .expect("exists");
        assert!(store.pending_ids(tenant).await.expect("pending").is_empty());
        // A retry of the finished one (same id, queued again): refused, no entry left.
        assert!(!store.create(&r).await.expect("retry"));
        assert!(store.pending_ids(tenant).await.expect("pending").is_empty());
    }
}
