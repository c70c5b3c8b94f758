//! Publishing recorded deployments' requests reliably: at acceptance, in the background
//! ([`republish`]) and after a restart ([`Publisher::recover`]).
//!
//! A deployment is recorded (QUEUED, `request_published: false`) before its request is
//! published (its `deployment.queued` event side by side with it: the answer path puts
//! `queued` first in the stream, [`Events::publish_deployment_events`]), and marked
//! published only after the broker acknowledged both (or by an answer, which comes after
//! the request). Whatever fails in between is retried by
//! [`republish`] and, after a restart, by [`Publisher::recover`]; the deployment id
//! doubles as the JetStream message id (and the event's id is derived from it), so a
//! retry that races a lost acknowledgement is dropped by the broker's de-duplication.
//!
//! At acceptance the mark is left to the agent: its first answer marks the record
//! published as it applies (`apply_started`, `apply_finished`), so a separate write
//! would be one append, one round trip and one watch update more per deployment, on the
//! client's path. A request that no answer marks within [`MARK_AFTER`] (its agent is
//! offline or busy) is marked then by [`republish`], and every one still unmarked when
//! the runtime stops. A crash before that leaves the record unmarked, as a crash between
//! the publish and the mark always could: recovery publishes it again, and the broker
//! drops the copy (same message id) within its duplicate window.
//!
//! A server applies its requests in queue order, so retries keep each server's
//! acceptance order: see [`crate::deferred`].

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flue_proto::retry::Policy;
use flue_proto::{
    Config as StoredConfig, ConfigId, DeploymentId, DeploymentRequest, DeploymentStatus, EventType,
    PROTOCOL_VERSION, ServerId, TenantId,
};
use futures_util::StreamExt;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::broker::{Broker, BrokerError};
use crate::deferred::{Deferred, Entry};
use crate::error::chain;
use crate::events::Events;
use crate::record::{DeploymentRecord, apply_published};
use crate::sealing::{self, SealFailure};
use crate::store::{self, StoreError};
use crate::timeouts::TimeoutSet;

mod recover;

/// Attempts made by the API before leaving a publish to the background retry.
const PUBLISH_ATTEMPTS: u32 = 3;
/// Pauses between them: 100 ms, then 200 ms.
const PUBLISH_RETRY: Policy = Policy::new(Duration::from_millis(100), Duration::from_millis(200));
/// Interval of the background retry of unpublished requests.
const REPUBLISH_INTERVAL: Duration = Duration::from_secs(1);
/// How long a request published at acceptance waits for its agent's first answer to
/// mark it published before [`republish`] writes the mark itself: well past a
/// deployment's usual first answer, well short of another gateway's adoption of
/// unpublished deployments (10 s, [`crate::adopt`]).
const MARK_AFTER: Duration = Duration::from_secs(5);
/// Deployments read at once during recovery, and servers whose deferred requests are
/// published at once.
const CONCURRENCY: usize = 32;
/// How long a deferred deployment whose record is not there is waited for.
///
/// Deferred after a failed KV `create` whose write may still land (a timed-out request),
/// it holds back its server's later deployments until then, and is dropped after.
const MISSING_RECORD_GRACE: time::Duration = time::Duration::seconds(30);

/// Why a request could not be published.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The broker refused or did not acknowledge the publish.
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// The deployment's config is gone (configs are never deleted by the gateway).
    #[error("config {0} of the deployment is missing")]
    MissingConfig(ConfigId),
    /// Its hidden values cannot be sealed to its server.
    #[error(transparent)]
    Sealing(#[from] SealFailure),
    /// The request built now is not the one recorded at creation.
    #[error(
        "the server's sealing key changed before the request was published; create the deployment again"
    )]
    Changed,
}

impl PublishError {
    /// Why publishing again can never succeed (the request is larger than the broker
    /// takes, its hidden values cannot be sealed to its server), if that is the case.
    fn permanent(&self) -> Option<String> {
        match self {
            Self::Broker(BrokerError::RequestTooLarge { source, .. }) => Some(source.to_string()),
            Self::Sealing(e) => Some(e.to_string()),
            Self::Changed => Some(self.to_string()),
            _ => None,
        }
    }
}

/// A request published at acceptance, to be marked published unless an answer does.
#[derive(Debug)]
struct Unmarked {
    /// When [`republish`] marks it.
    due: Instant,
    /// Its server and acceptance time: its place in the deferred queue, should the mark fail.
    server: ServerId,
    created_at: OffsetDateTime,
    id: DeploymentId,
}

/// Which unmarked requests [`Publisher::mark_due`] marks.
#[derive(Debug, Clone, Copy)]
enum Due {
    /// Those published [`MARK_AFTER`] ago.
    Now,
    /// Every one (the runtime stops).
    All,
}

/// `mutex` locked, also after a panic elsewhere (the lists it guards stay consistent).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// A deployment read for publishing.
#[derive(Debug)]
enum Unpublished {
    /// Its request is still to publish.
    Due(Box<DeploymentRecord>),
    /// Nothing: published already, or the deployment finished.
    Settled,
    /// There is no such record.
    Missing,
}

/// Publishes recorded deployments' requests, in each server's acceptance order, and
/// retries what did not go out; cheap to clone.
///
/// It takes only what publishing needs: the tenant's configs, servers and deployments,
/// its broker and event stream, the
/// gateway's request-signing and sealing keys, and the deployments watched for their
/// timeout (a deployment that can never be published is failed and no longer watched).
#[derive(Debug, Clone)]
pub struct Publisher {
    tenant: TenantId,
    configs: store::Configs,
    servers: store::Servers,
    deployments: store::Deployments,
    broker: Broker,
    events: Events,
    signing: Arc<nkeys::KeyPair>,
    sealing: Arc<nkeys::XKey>,
    timeouts: TimeoutSet,
    /// Deployments whose request still has to be published, by server.
    deferred: Deferred,
    /// Deployments recovery could not read, read again in the background.
    unread: Arc<Mutex<BTreeSet<DeploymentId>>>,
    /// Requests published at acceptance and not marked yet, oldest first.
    unmarked: Arc<Mutex<VecDeque<Unmarked>>>,
    /// Cancelled when the runtime stops: a publish stops retrying in place.
    shutdown: CancellationToken,
}

/// The handles a [`Publisher`] works with.
#[derive(Debug, Clone)]
pub struct PublisherHandles {
    /// The tenant whose deployments these are.
    pub tenant: TenantId,
    /// The configs requests are built from.
    pub configs: store::Configs,
    /// The servers requests go to (their keys, their registration order).
    pub servers: store::Servers,
    /// The deployment records, their pending index.
    pub deployments: store::Deployments,
    /// Its request stream.
    pub broker: Broker,
    /// Its event stream (`deployment.queued`, `deployment.failed`).
    pub events: Events,
    /// Signs every request.
    pub signing: Arc<nkeys::KeyPair>,
    /// Opens hidden values stored sealed to the gateway, to seal them to the server.
    pub sealing: Arc<nkeys::XKey>,
    /// Deployments watched for their timeout.
    pub timeouts: TimeoutSet,
    /// Cancelled when the runtime stops.
    pub shutdown: CancellationToken,
}

impl Publisher {
    /// A publisher with nothing deferred yet.
    pub fn new(h: PublisherHandles) -> Self {
        Self {
            tenant: h.tenant,
            configs: h.configs,
            servers: h.servers,
            deployments: h.deployments,
            broker: h.broker,
            events: h.events,
            signing: h.signing,
            sealing: h.sealing,
            timeouts: h.timeouts,
            deferred: Deferred::default(),
            unread: Arc::default(),
            unmarked: Arc::default(),
            shutdown: h.shutdown,
        }
    }

    /// The deployments watched for their timeout (shared with the sweeper and the
    /// answer path).
    pub fn timeouts(&self) -> &TimeoutSet {
        &self.timeouts
    }

    /// Publishes a recorded deployment's request, retrying a few times; on failure the
    /// background task takes over, so an accepted deployment is never lost. A request
    /// larger than the broker takes is not retried: its deployment fails at once.
    ///
    /// When an earlier deployment of the same server is still deferred, this one is
    /// deferred behind it at once, so that it cannot overtake it.
    ///
    /// `built` is the request as acceptance built it from `record` (the one whose digest
    /// the record names), published as it is; without it the request is built again.
    pub async fn publish_or_defer(
        &self,
        record: &DeploymentRecord,
        config: &StoredConfig,
        built: Option<&DeploymentRequest>,
    ) {
        let d = &record.deployment;
        if self
            .deferred
            .insert_if_blocked(&d.server_id, d.created_at, &d.id)
        {
            debug!(deployment.id = %d.id, server.id = %d.server_id, "an earlier request of the server is still unpublished; publishing after it");
            return;
        }
        let mut delays = PUBLISH_RETRY.delays();
        for attempt in 1..=PUBLISH_ATTEMPTS {
            match self.publish(record, config, built).await {
                Ok(()) => return,
                Err(e) if e.permanent().is_some() => {
                    // Not recorded as failed (the store failed): the background retry
                    // meets the same refusal and tries again.
                    if !self.fail_unpublishable(&d.id, &e).await {
                        self.defer(record);
                    }
                    return;
                }
                Err(e) => {
                    warn!(error = %chain(&e), deployment.id = %d.id, attempt, "cannot publish deployment request")
                }
            }
            if attempt < PUBLISH_ATTEMPTS {
                tokio::select! {
                    () = self.shutdown.cancelled() => break,
                    () = tokio::time::sleep(delays.next_delay()) => {}
                }
            }
        }
        self.defer(record);
    }

    /// Leaves the publish of `record`'s request to the background retry.
    ///
    /// Harmless when the record was never stored (a failed `create`): the retry waits a
    /// while for it to appear, then drops it.
    pub fn defer(&self, record: &DeploymentRecord) {
        let d = &record.deployment;
        self.deferred.insert(&d.server_id, d.created_at, &d.id);
    }

    /// Reports (`deployment.queued`) and publishes one recorded deployment, and has it
    /// marked published: by its agent's first answer, or after [`MARK_AFTER`]
    /// ([`Publisher::mark_due`]). A polling server's record is marked at once: the mark
    /// is what serves it in the server's metadata.
    ///
    /// The event goes out side by side with the request; what the agent reports is
    /// published after `queued` again unless this gateway saw it stored
    /// ([`Events::publish_deployment_events`]), so that it always comes first in the stream.
    /// Both go out before the mark: whatever fails or crashes in between, the retry
    /// publishes both again and the broker drops the copies (same message ids), so the
    /// event is neither lost nor doubled.
    async fn publish(
        &self,
        record: &DeploymentRecord,
        config: &StoredConfig,
        built: Option<&DeploymentRequest>,
    ) -> Result<(), PublishError> {
        self.send(record, config, built).await?;
        if record.polled {
            return self.mark_published(record).await;
        }
        let d = &record.deployment;
        lock(&self.unmarked).push_back(Unmarked {
            due: Instant::now() + MARK_AFTER,
            server: d.server_id.clone(),
            created_at: d.created_at,
            id: d.id.clone(),
        });
        Ok(())
    }

    /// Marks published the requests published at acceptance [`MARK_AFTER`] ago (`All`:
    /// every one, as the runtime stops) that no answer marked meanwhile; returns how many
    /// it wrote. A deployment no longer watched for its timeout has ended and needs no
    /// mark; one whose record this gateway last wrote marked needs no write. A mark that
    /// fails is left to the deferred queue, which publishes the request again (the
    /// broker drops the copy) and marks it.
    async fn mark_due(&self, which: Due) -> usize {
        let now = Instant::now();
        let due: Vec<Unmarked> = {
            let mut unmarked = lock(&self.unmarked);
            let n = match which {
                Due::All => unmarked.len(),
                Due::Now => unmarked.iter().take_while(|u| u.due <= now).count(),
            };
            unmarked.drain(..n).collect()
        };
        let marks = due
            .into_iter()
            .filter(|u| {
                self.timeouts.contains(&u.id) && !self.deployments.marked_here(&self.tenant, &u.id)
            })
            .map(|u| async move {
                let marked = self
                    .deployments
                    .update(&self.tenant, &u.id, apply_published)
                    .await;
                (u, marked)
            });
        let mut written = 0;
        let mut marks = futures_util::stream::iter(marks).buffer_unordered(CONCURRENCY);
        while let Some((u, marked)) = marks.next().await {
            match marked {
                Ok(Some(updated)) if updated.changed => written += 1,
                Ok(_) => {}
                Err(e) => {
                    debug!(error = %chain(&e), deployment.id = %u.id, server.id = %u.server, "marking a request published failed; publishing it again");
                    self.deferred.insert(&u.server, u.created_at, &u.id);
                }
            }
        }
        written
    }

    /// Reports (`deployment.queued`) and publishes one recorded deployment's request
    /// (`built`, or built again from the record), side by side, both acknowledged by the
    /// broker, without marking it published.
    async fn send(
        &self,
        record: &DeploymentRecord,
        config: &StoredConfig,
        built: Option<&DeploymentRequest>,
    ) -> Result<(), PublishError> {
        // A polling server's request is its record, served in its metadata once marked
        // published (`crate::poll`): nothing goes to the broker's queue. Its listing
        // entry was written with its record (`Deployments::create`).
        let request = match (record.polled, built) {
            (true, _) => None,
            (false, Some(built)) => Some(Cow::Borrowed(built)),
            (false, None) => Some(Cow::Owned(self.sealed_request(record, config).await?)),
        };
        // Side by side (two accounts' connections, a round trip less before the 202): an
        // answer that comes back before `queued` is stored has `queued` published again
        // ahead of its events ([`Events::publish_deployment_events`]).
        let queued = self.events.publish_queued(record);
        match &request {
            Some(request) => {
                let publish = self.broker.publish_request(request, &self.signing);
                let (queued, published) = tokio::join!(queued, publish);
                queued?;
                published?;
            }
            None => queued.await?,
        }
        Ok(())
    }

    /// Marks a sent deployment's request published.
    async fn mark_published(&self, record: &DeploymentRecord) -> Result<(), PublishError> {
        let d = &record.deployment;
        self.deployments
            .update(&d.tenant, &d.id, apply_published)
            .await?;
        debug!(deployment.id = %d.id, server.id = %d.server_id, "deployment request published");
        Ok(())
    }

    /// The request of `record`, its hidden values sealed to its server's current key;
    /// refused when that key is not the one the recorded digest was computed with (the
    /// server's credentials were rotated in between), as the agent's answers would then
    /// name another digest and be ignored.
    async fn sealed_request(
        &self,
        record: &DeploymentRecord,
        config: &StoredConfig,
    ) -> Result<DeploymentRequest, PublishError> {
        let d = &record.deployment;
        let hidden = record
            .hidden_inputs
            .iter()
            .any(|name| d.input_values.contains_key(name));
        if !hidden {
            // Nothing depends on the server's key: the record alone makes the bytes.
            let none = Err(SealFailure::NoServerKey(d.server_id.clone()));
            return Ok(request(record, config, &self.sealing, none)?);
        }
        let server = match self.servers.get(&d.tenant, &d.server_id).await? {
            Some(server) => sealing::server_key(&server),
            None => Err(SealFailure::NoServerKey(d.server_id.clone())),
        };
        let request = request(record, config, &self.sealing, server)?;
        if record
            .request_digest
            .as_ref()
            .is_some_and(|recorded| recorded != &request.digest())
        {
            return Err(PublishError::Changed);
        }
        Ok(request)
    }

    /// Fails a deployment whose request the broker can never take (FAILED with the sizes
    /// as reason, `deployment.failed`), so that its server's later requests go out;
    /// false when that could not be recorded (tried again with the deferred queue).
    async fn fail_unpublishable(&self, id: &DeploymentId, error: &PublishError) -> bool {
        let Some(reason) = error.permanent() else {
            return false;
        };
        let now = OffsetDateTime::now_utc();
        let failed = self
            .deployments
            .update(&self.tenant, id, |record| {
                let d = &mut record.deployment;
                if record.request_published || d.status.is_terminal() {
                    return false;
                }
                d.status = DeploymentStatus::Failed;
                d.status_reason = Some(reason.clone());
                d.finished_at = Some(now);
                d.updated_at = now;
                true
            })
            .await;
        match failed {
            Ok(Some(u)) => {
                self.timeouts.remove(id);
                if u.changed {
                    warn!(deployment.id = %id, server.id = %u.record.deployment.server_id, reason, "deployment request can never be published; deployment failed");
                    self.events
                        .emit_deployment(&u.record, EventType::DeploymentFailed)
                        .await;
                }
                true
            }
            Ok(None) => true,
            Err(e) => {
                warn!(error = %chain(&e), deployment.id = %id, "cannot record that a deployment request is too large; retrying");
                false
            }
        }
    }

    /// Reads a deployment: its record when its request is still to publish.
    async fn unpublished(&self, id: &DeploymentId) -> Result<Unpublished, PublishError> {
        let Some(record) = self.deployments.get(&self.tenant, id).await? else {
            return Ok(Unpublished::Missing);
        };
        if record.request_published || record.deployment.status.is_terminal() {
            return Ok(Unpublished::Settled);
        }
        Ok(Unpublished::Due(Box::new(record)))
    }

    /// The config `record` deploys, from `configs` or read (configs never change).
    async fn config_of(
        &self,
        record: &DeploymentRecord,
        configs: &mut HashMap<ConfigId, Arc<StoredConfig>>,
    ) -> Result<Arc<StoredConfig>, PublishError> {
        let config_id = &record.deployment.config_id;
        if let Some(config) = configs.get(config_id) {
            return Ok(config.clone());
        }
        let config = self
            .configs
            .get(&self.tenant, config_id)
            .await?
            .ok_or_else(|| PublishError::MissingConfig(config_id.clone()))?;
        let config = Arc::new(config);
        configs.insert(config_id.clone(), config.clone());
        Ok(config)
    }

    /// Publishes the deferred requests, servers side by side, each server's oldest first;
    /// returns how many were published.
    async fn publish_deferred(&self) -> usize {
        futures_util::stream::iter(self.deferred.snapshot())
            .map(|(server, queue)| self.publish_queue(server, queue))
            .buffer_unordered(CONCURRENCY)
            .fold(0, |total, n| async move { total + n })
            .await
    }

    /// Publishes one server's deferred requests in order, stopping at the first that fails
    /// so that no later one overtakes it; returns how many were published.
    ///
    /// Only the event and the request of one deployment (side by side, one round trip)
    /// wait for the broker: the next record is read while a request goes out, configs are read once,
    /// and the "published" marks are written side by side at the end. A deployment leaves the queue
    /// once marked; one whose mark failed stays and is published again in the next round
    /// (the broker drops the copy: same message id), after the later ones, which no
    /// longer wait for it: its request went out first.
    async fn publish_queue(&self, server: ServerId, queue: Vec<Entry>) -> usize {
        let mut published = 0;
        let mut configs = HashMap::new();
        let mut marks = Vec::new();
        let mut next = match queue.first() {
            Some((_, id)) => self.unpublished(id).await,
            None => return 0,
        };
        for (at, entry) in queue.iter().enumerate() {
            let (created_at, id) = entry;
            let read_next = async {
                match queue.get(at + 1) {
                    Some((_, id)) => Some(self.unpublished(id).await),
                    None => None,
                }
            };
            let current = std::mem::replace(&mut next, Ok(Unpublished::Settled));
            let outcome = match current {
                Ok(Unpublished::Due(record)) => match self.config_of(&record, &mut configs).await {
                    Ok(config) => {
                        let (sent, read) =
                            futures_util::join!(self.send(&record, &config, None), read_next);
                        if let Some(read) = read {
                            next = read;
                        }
                        match sent {
                            Ok(()) => {
                                published += 1;
                                info!(deployment.id = %id, server.id = %server, "deferred deployment request published");
                                marks.push((entry, record));
                                continue;
                            }
                            Err(e) => Err(e),
                        }
                    }
                    Err(e) => Err(e),
                },
                Ok(Unpublished::Settled) => Ok(()),
                Ok(Unpublished::Missing)
                    if OffsetDateTime::now_utc() < *created_at + MISSING_RECORD_GRACE =>
                {
                    debug!(deployment.id = %id, server.id = %server, "deferred deployment not recorded (yet); waiting for it");
                    break;
                }
                Ok(Unpublished::Missing) => {
                    info!(deployment.id = %id, server.id = %server, "deferred deployment was never recorded; dropped");
                    Ok(())
                }
                Err(e) => Err(e),
            };
            match outcome {
                Ok(()) => {}
                Err(PublishError::Store(StoreError::Decode { key, source, .. })) => {
                    warn!(key, error = %source, "deferred deployment record cannot be decoded; dropped");
                }
                Err(e) if e.permanent().is_some() => {
                    // Later requests of the server must not wait for one that never goes out.
                    if !self.fail_unpublishable(id, &e).await {
                        break;
                    }
                }
                Err(e) => {
                    debug!(error = %chain(&e), deployment.id = %id, server.id = %server, "deferred publish failed again");
                    break;
                }
            }
            self.deferred.remove(&server, entry);
            if matches!(next, Ok(Unpublished::Settled)) {
                // Not read yet (this one needed no publish): read it now.
                if let Some((_, id)) = queue.get(at + 1) {
                    next = self.unpublished(id).await;
                }
            }
        }
        let mut in_flight = futures_util::stream::FuturesUnordered::new();
        let mut marks = marks.into_iter();
        loop {
            while in_flight.len() < CONCURRENCY {
                let Some((entry, record)) = marks.next() else {
                    break;
                };
                in_flight.push(self.mark_entry(entry, record));
            }
            let Some((entry, marked)) = in_flight.next().await else {
                break;
            };
            match marked {
                Ok(()) => self.deferred.remove(&server, entry),
                Err(e) => {
                    debug!(error = %chain(&e), deployment.id = %entry.1, server.id = %server, "marking a deferred request published failed; publishing it again later");
                }
            }
        }
        published
    }

    /// Marks a deferred entry's sent request published.
    async fn mark_entry<'e>(
        &self,
        entry: &'e Entry,
        record: Box<DeploymentRecord>,
    ) -> (&'e Entry, Result<(), PublishError>) {
        (entry, self.mark_published(&record).await)
    }
}

/// The request queued for the agent of a recorded deployment, its hidden values sealed
/// to `server` (the server's public sealing key, needed only when there are any).
///
/// Rebuilding it from the same record and keys gives the same bytes, so the digest
/// recorded at creation names every publish of it.
pub fn request(
    record: &DeploymentRecord,
    config: &StoredConfig,
    gateway: &nkeys::XKey,
    server: Result<nkeys::XKey, SealFailure>,
) -> Result<DeploymentRequest, SealFailure> {
    let d = &record.deployment;
    let (input_values, config) = sealing::for_server(record, config, gateway, server)?;
    Ok(DeploymentRequest {
        v: PROTOCOL_VERSION,
        tenant: d.tenant.clone(),
        server: d.server_id.clone(),
        deployment_id: d.id.clone(),
        name: d.name.clone(),
        action: d.action.clone(),
        config,
        input_values,
        hidden_inputs: record.hidden_inputs.clone(),
        stack_id: d.stack_id.clone(),
        resource_name: d.resource_name.clone(),
        created_at: d.created_at,
        expires_at: d.expires_at,
        agent_jwt: record.agent_jwt.clone(),
    })
}

/// Every second until cancelled: reads the records recovery could not read, publishes
/// the deferred requests, each server's in acceptance order, and marks published the
/// requests no answer marked in time; when cancelled, marks every one still unmarked.
pub async fn republish(publisher: Publisher, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(REPUBLISH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => {
                publisher.mark_due(Due::All).await;
                return;
            }
            _ = tick.tick() => {}
        }
        publisher.recover_unread().await;
        publisher.mark_due(Due::Now).await;
        publisher.publish_deferred().await;
    }
}
