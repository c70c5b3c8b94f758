//! Webhook subscriptions and their delivery.
//!
//! A subscription is a record in KV `flue_webhooks` ([`crate::store::Webhooks`]) and a durable pull
//! consumer (`wh-<len>-<tenant>-<id>`, max one unacknowledged message), both made by the
//! gateway at creation. The consumer reads the event stream `FLUE_EVT`; listeners cannot
//! pull from it or acknowledge on it (their rights name their own consumers only, made by
//! the gateway, [`crate::natsauth::creates`]), nor use up the consumers it needs (the
//! gateway bounds listeners' consumers alone). Consumers an older gateway left on its copy
//! of the stream, `FLUE_EVT_GW`, are moved at start ([`Webhooks::retire_copy`],
//! [`position`]). A delivery task per active
//! subscription ([`deliver`]) pulls one event at a time and POSTs it, signed
//! ([`sign`]), over [`http`]; it acknowledges the event only after a 2xx, so delivery
//! is at least once and in stream order.
//!
//! Which tasks run follows the bucket: [`run`] watches it (from its current content,
//! so subscriptions survive a restart) and starts a task for every active subscription
//! and stops the tasks of parked and deleted ones. The API handlers start and stop
//! tasks directly as well, so a change is acted on before the watch sees it.
//!
//! Targets on non-public addresses (loopback, private, link-local…) are refused unless
//! the operator's allow list names them ([`address`]): at creation when the URL holds an
//! address, and on every resolved address at delivery.

pub(crate) mod address;
pub(crate) mod deliver;
pub(crate) mod http;
pub(crate) mod position;
pub(crate) mod sign;
pub mod target;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use flue_proto::event::{EVENT_STREAM, GATEWAY_EVENT_STREAM};
use flue_proto::retry::Policy;
use flue_proto::webhook::{
    CreateWebhook, MAX_SECRET_BYTES, MIN_SECRET_BYTES, WebhookSignature, WebhookStatus,
    consumer_name,
};
use flue_proto::{TenantId, WebhookId};
use futures_util::StreamExt;
use time::OffsetDateTime;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::broker::BrokerError;
use crate::error::chain;
use crate::store::{Secret, StoreError, Subscription, SubscriptionChange, webhook_key};
use target::{Target, TargetError};

/// How long the broker waits for the acknowledgement of an event handed to a delivery
/// task before handing it out again; a task busy with it extends that every third of it.
pub const ACK_WAIT: Duration = Duration::from_secs(30);
/// Longest wait for a stopped delivery task when its subscription is deleted.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// Pauses between attempts to follow the bucket again after losing the watch.
const WATCH_RETRY: Policy = Policy::new(Duration::from_millis(250), Duration::from_secs(10));

/// Why a subscription could not be created or changed.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The target URL is refused.
    #[error("url {0}")]
    Url(#[from] TargetError),
    /// The secret is too short or too long.
    #[error("secret is {0} bytes long; it must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes")]
    Secret(usize),
    /// The secret of a `standard` subscription is no Standard Webhooks secret.
    #[error(
        "secret {0}: standard signatures need a Standard Webhooks secret, whsec_ and the base64 of a 24- to 64-byte random key (or \"signature\": \"flue-v1\")"
    )]
    StandardSecret(#[from] sign::StandardSecretError),
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The broker failed (the subscription's consumer).
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// Delivery settings from the gateway's flags (`Config::webhook_settings`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Longest attempt.
    pub timeout: Duration,
    /// Pauses between the attempts of one event: `--webhook-backoff-ms` doubling up to
    /// `--webhook-backoff-max-ms`.
    pub retry: Policy,
    /// Failed attempts of one event after which the subscription is parked.
    pub max_attempts: u32,
}

/// A delivery task in the registry.
#[derive(Debug)]
struct Running {
    /// Tells this task apart from a later one of the same subscription.
    run: u64,
    cancel: CancellationToken,
    /// Set right after spawning.
    handle: Option<JoinHandle<()>>,
}

/// What a tenant's delivery tasks run under: its tenant, the delivery settings, and the
/// runtime's shutdown token and task tracker (every task is a child of the one and
/// tracked by the other).
#[derive(Debug, Clone)]
pub struct Scope {
    /// The tenant whose subscriptions these are.
    pub tenant: TenantId,
    /// Delivery settings from the gateway's flags.
    pub settings: Settings,
    /// Cancelled when the runtime stops; each task gets a child of it.
    pub shutdown: CancellationToken,
    /// Where delivery tasks are spawned, so that a shutdown waits for them.
    pub tasks: TaskTracker,
    /// Where deliveries, failures, parkings and the backlog are counted.
    pub metrics: crate::metrics::TenantMetrics,
}

/// Webhook subscriptions and the registry of their delivery tasks; cheap to clone.
#[derive(Debug, Clone)]
pub struct Webhooks {
    scope: Scope,
    /// The subscriptions' records (`flue_webhooks`, in the tenant account: they hold the
    /// webhooks' secrets).
    records: crate::store::Webhooks,
    /// The events account's context: the event stream and the delivery consumers.
    js: jetstream::Context,
    http: http::HttpClient,
    running: Arc<Mutex<HashMap<String, Running>>>,
    next_run: Arc<AtomicU64>,
}

impl Webhooks {
    /// The subscriptions in `records` (the tenant's store's); their consumers are made on
    /// the event stream through `events_js`, the tenant's events account.
    /// Deliveries follow `policy` (which addresses they may reach) and run under
    /// `scope`.
    pub fn new(
        records: crate::store::Webhooks,
        events_js: &jetstream::Context,
        policy: address::AddressPolicy,
        scope: Scope,
    ) -> Self {
        Self {
            scope,
            records,
            js: events_js.clone(),
            http: http::HttpClient::new(policy),
            running: Arc::default(),
            next_run: Arc::default(),
        }
    }

    /// Checks `body`, creates the subscription's consumer and record, and starts
    /// delivering.
    pub async fn create(&self, body: CreateWebhook) -> Result<Subscription, WebhookError> {
        let target = Target::parse(&body.url)?;
        if let Some(ip) = target.literal_ip() {
            self.http.policy().check(ip).map_err(TargetError::from)?;
        }
        let len = body.secret.len();
        if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&len) {
            return Err(WebhookError::Secret(len));
        }
        if body.signature == WebhookSignature::Standard {
            sign::StandardKey::from_secret(&body.secret)?;
        }
        let sub = Subscription {
            tenant: self.scope.tenant.clone(),
            id: WebhookId::random(),
            url: body.url,
            secret: Secret::new(body.secret),
            signature: body.signature,
            filter: body.filter,
            start: body.start,
            created_at: OffsetDateTime::now_utc(),
            status: WebhookStatus::Active,
            parked_reason: None,
            delivered: 0,
            last_event_id: None,
            last_seq: None,
            last_error: None,
        };
        // The consumer first: with `start: new` it marks where delivery begins.
        self.consumer(&sub).await?;
        if let Err(e) = self.records.create(&sub).await {
            if let Err(e) = self.delete_consumer(&sub.tenant, &sub.id).await {
                warn!(error = %chain(&e), webhook.id = %sub.id, "cannot remove the consumer of a subscription that was not stored");
            }
            return Err(e.into());
        }
        // Only where it goes: a path or query may carry a token (Slack-style URLs).
        let target = target::Target::parse(&sub.url)
            .map(|t| format!("{}://{}", if t.tls { "https" } else { "http" }, t.authority))
            .unwrap_or_default();
        info!(webhook.id = %sub.id, target = %target, "webhook created");
        self.ensure_running(&sub);
        Ok(sub)
    }

    /// Every subscription of the tenant, oldest first.
    pub async fn list(&self) -> Result<Vec<Subscription>, StoreError> {
        self.records.list(&self.scope.tenant).await
    }

    /// Subscription `id` of the tenant, if it exists.
    pub async fn get(&self, id: &WebhookId) -> Result<Option<Subscription>, StoreError> {
        self.records.get(&self.scope.tenant, id).await
    }

    /// Stops the subscription's task, then deletes its record and its consumer; false
    /// when there is no such subscription.
    ///
    /// The record goes first: a delivery task (of this gateway, restarted by the watch
    /// from a write the stopped task made last, or of another gateway) makes the
    /// consumer only for a record it has just read, and reads it again afterwards
    /// ([`Webhooks::open_consumer`]), so once the record is gone no task can leave a
    /// consumer behind. The consumer is deleted even when the record is missing, so a
    /// delete that failed between the two is finished by a retry (which answers 404).
    pub async fn delete(&self, id: &WebhookId) -> Result<bool, WebhookError> {
        let tenant = &self.scope.tenant;
        let exists = self.records.get(tenant, id).await?.is_some();
        if exists {
            if let Some(handle) = self.stop(&webhook_key(tenant, id))
                && tokio::time::timeout(STOP_WAIT, handle).await.is_err()
            {
                warn!(webhook.id = %id, "delivery task still running after being stopped");
            }
            self.records.delete(tenant, id).await?;
        }
        self.delete_consumer(tenant, id).await?;
        if exists {
            info!(webhook.id = %id, "webhook deleted");
        }
        Ok(exists)
    }

    /// Makes a parked subscription active again and restarts its delivery at the event
    /// that was not delivered; for an active one, only makes sure it is delivering.
    pub async fn resume(&self, id: &WebhookId) -> Result<Option<Subscription>, StoreError> {
        let updated = self.records.resume(&self.scope.tenant, id).await?;
        if let Some(sub) = &updated {
            info!(webhook.id = %sub.id, "webhook resumed");
            self.ensure_running(sub);
        }
        Ok(updated)
    }

    /// Starts the delivery task of `sub` unless one is running.
    fn ensure_running(&self, sub: &Subscription) {
        let key = sub.key();
        let run = self.next_run.fetch_add(1, Ordering::Relaxed);
        let cancel = self.scope.shutdown.child_token();
        {
            let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(r) = running.get(&key)
                && !r.handle.as_ref().is_some_and(JoinHandle::is_finished)
            {
                return;
            }
            running.insert(
                key.clone(),
                Running {
                    run,
                    cancel: cancel.clone(),
                    handle: None,
                },
            );
        }
        debug!(webhook.id = %sub.id, "delivery task starting");
        let handle = self
            .scope
            .tasks
            .spawn(deliver::run(self.clone(), sub.clone(), run, cancel));
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = running.get_mut(&key)
            && r.run == run
        {
            r.handle = Some(handle);
        }
    }

    /// Cancels the task of subscription `key`, if any; its handle to wait for it.
    fn stop(&self, key: &str) -> Option<JoinHandle<()>> {
        let removed = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key)?;
        removed.cancel.cancel();
        removed.handle
    }

    /// Takes task `run` of `key` out of the registry (it is ending by itself).
    fn finished(&self, key: &str, run: u64) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if running.get(key).is_some_and(|r| r.run == run) {
            running.remove(key);
        }
    }

    /// The subscription's consumer, created if missing: from just after the last event
    /// it acknowledged if it has one (a consumer lost with a broker's disk), else from
    /// where the subscription asked to start. A consumer an older gateway left on
    /// `FLUE_EVT_GW` is moved: the new one starts where the old one got to (or where the
    /// record says, if later), then the old one is deleted. Also the first `FLUE_EVT`
    /// sequence it may deliver, when known.
    async fn consumer(&self, sub: &Subscription) -> Result<Opened, BrokerError> {
        let name = consumer_name(&sub.tenant, &sub.id);
        let err = |e: Box<dyn std::error::Error + Send + Sync>| BrokerError::Consumer {
            stream: EVENT_STREAM,
            consumer: name.clone(),
            source: e,
        };
        let stream = self.event_stream().await.map_err(err)?;
        let floor = position::floor(sub);
        match stream.consumer_info(&name).await {
            Ok(_) => {
                let consumer = stream.get_consumer(&name).await.map_err(err)?;
                return Ok(Opened { consumer, floor });
            }
            Err(e) if position::is_consumer_not_found(&e) => {}
            Err(e) => return Err(err(e.into())),
        }
        let moved = position::copy_floor(&self.js, &name).await.map_err(err)?;
        let (floor, deliver_policy) = match moved {
            position::Moved::Absent => (floor, position::deliver_policy(floor, sub.start)),
            position::Moved::From(seq) => {
                let floor = floor.max(Some(seq));
                (floor, position::deliver_policy(floor, sub.start))
            }
            // Never skip an event: with no position known but the record's, from the
            // oldest kept (at least once).
            position::Moved::Unknown => (
                floor,
                match floor {
                    Some(_) => position::deliver_policy(floor, sub.start),
                    None => consumer::DeliverPolicy::All,
                },
            ),
        };
        let consumer = stream
            .get_or_create_consumer(
                &name,
                consumer::pull::Config {
                    durable_name: Some(name.clone()),
                    description: Some(format!("webhook {}", sub.id)),
                    filter_subject: sub.filter.subject_filter(&sub.tenant),
                    deliver_policy,
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: ACK_WAIT,
                    max_deliver: -1,
                    // One event in flight: the next is handed out only after this one
                    // is acknowledged, which keeps the order.
                    max_ack_pending: 1,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| err(e.into()))?;
        if moved != position::Moved::Absent {
            position::delete_on_copy(&self.js, &name)
                .await
                .map_err(err)?;
            info!(webhook.id = %sub.id, from_seq = floor, from_stream = GATEWAY_EVENT_STREAM, "webhook consumer moved off the gateway's old copy of the event stream");
        }
        Ok(Opened { consumer, floor })
    }

    /// Retires `FLUE_EVT_GW`, the copy of the event stream gateways before issue 24 kept
    /// (run at start, before any delivery task): every subscription's consumer there is
    /// made on `FLUE_EVT` where it got to ([`Webhooks::consumer`]) and deleted on the
    /// copy; a consumer there with no subscription is deleted; once the copy holds no
    /// consumer, it is deleted. Each step can be done again (a start after a crash
    /// anywhere, two gateways at once): a consumer is deleted on the copy only once its
    /// successor is on `FLUE_EVT`, made from the copy's consumer's position, which
    /// nothing moves meanwhile, and the copy only once no consumer is left on it.
    pub async fn retire_copy(&self) -> Result<(), BrokerError> {
        match self.retire_copy_once().await {
            Ok(()) => Ok(()),
            // Another gateway's start finished it meanwhile (a read of the copy or of one
            // of its consumers found it gone): every consumer was moved before it went.
            Err(e) => match self.copy_exists().await {
                Ok(false) => {
                    debug!(error = %chain(&e), "the old copy of the event stream was retired meanwhile");
                    Ok(())
                }
                _ => Err(e),
            },
        }
    }

    async fn retire_copy_once(&self) -> Result<(), BrokerError> {
        let err = |e: Box<dyn std::error::Error + Send + Sync>| BrokerError::Stream {
            stream: GATEWAY_EVENT_STREAM,
            source: e,
        };
        let copy = match self.js.get_stream(GATEWAY_EVENT_STREAM).await {
            Ok(copy) => copy,
            Err(e) if stream_not_found(e.kind()) => return Ok(()),
            Err(e) => return Err(err(e.into())),
        };
        let mut names = Vec::new();
        let mut listed = copy.consumer_names();
        while let Some(name) = listed.next().await {
            match name {
                Ok(name) => names.push(name),
                // Deleted meanwhile by another gateway's start.
                Err(_) if !self.copy_exists().await.map_err(err)? => return Ok(()),
                Err(e) => return Err(err(e.into())),
            }
        }
        let subs = self
            .records
            .list(&self.scope.tenant)
            .await
            .map_err(|e| err(e.into()))?;
        let mut moved = 0;
        for sub in &subs {
            let name = consumer_name(&sub.tenant, &sub.id);
            if names.contains(&name) {
                // Made on FLUE_EVT from the copy's position unless already there (a
                // start that stopped between the two), then deleted on the copy.
                self.consumer(sub).await?;
                position::delete_on_copy(&self.js, &name)
                    .await
                    .map_err(err)?;
                moved += 1;
            }
        }
        for name in &names {
            if !subs
                .iter()
                .any(|s| &consumer_name(&s.tenant, &s.id) == name)
            {
                position::delete_on_copy(&self.js, name)
                    .await
                    .map_err(err)?;
            }
        }
        let left = match self.js.get_stream(GATEWAY_EVENT_STREAM).await {
            Ok(mut copy) => {
                copy.info()
                    .await
                    .map_err(|e| err(e.into()))?
                    .state
                    .consumer_count
            }
            Err(e) if stream_not_found(e.kind()) => return Ok(()),
            Err(e) => return Err(err(e.into())),
        };
        if left > 0 {
            warn!(
                stream = GATEWAY_EVENT_STREAM,
                consumers = left,
                "the old copy of the event stream still holds consumers (an older gateway still running?); kept"
            );
            return Ok(());
        }
        match self.js.delete_stream(GATEWAY_EVENT_STREAM).await {
            Ok(_) => {
                info!(
                    stream = GATEWAY_EVENT_STREAM,
                    webhooks_moved = moved,
                    "the gateway's old copy of the event stream deleted"
                );
                Ok(())
            }
            Err(e) if !self.copy_exists().await.map_err(err)? => {
                debug!(error = %e, "the old copy of the event stream was deleted meanwhile");
                Ok(())
            }
            Err(e) => Err(err(e.into())),
        }
    }

    /// Whether `FLUE_EVT_GW` is still there.
    async fn copy_exists(&self) -> Result<bool, Box<dyn std::error::Error + Send + Sync>> {
        match self.js.get_stream(GATEWAY_EVENT_STREAM).await {
            Ok(_) => Ok(true),
            Err(e) if stream_not_found(e.kind()) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The consumer of `sub` for its delivery task: made if missing, then checked
    /// against the record, which a delete removes before the consumer. `None` when the
    /// subscription is gone; a consumer made for it meanwhile is deleted again.
    async fn open_consumer(&self, sub: &Subscription) -> Result<Option<Opened>, WebhookError> {
        let opened = self.consumer(sub).await?;
        if self.records.get(&sub.tenant, &sub.id).await?.is_some() {
            return Ok(Some(opened));
        }
        self.delete_consumer(&sub.tenant, &sub.id).await?;
        Ok(None)
    }

    async fn delete_consumer(&self, tenant: &TenantId, id: &WebhookId) -> Result<(), BrokerError> {
        let name = consumer_name(tenant, id);
        let err = |e: Box<dyn std::error::Error + Send + Sync>| BrokerError::Consumer {
            stream: EVENT_STREAM,
            consumer: name.clone(),
            source: e,
        };
        let stream = self.event_stream().await.map_err(err)?;
        match stream.delete_consumer(&name).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(err(e.into())),
        }
        // One an older gateway made on FLUE_EVT_GW and no start has moved yet.
        position::delete_on_copy(&self.js, &name).await.map_err(err)
    }

    async fn event_stream(
        &self,
    ) -> Result<stream::Stream, Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.js.get_stream(EVENT_STREAM).await?)
    }

    /// Makes sure parked subscription `sub` has its consumer on `FLUE_EVT` (one an older
    /// gateway left on `FLUE_EVT_GW` that the start did not move is moved now), rather
    /// than at the resume. Nothing is delivered.
    fn move_parked(&self, sub: Subscription) {
        let webhooks = self.clone();
        self.scope.tasks.spawn(async move {
            if let Err(e) = webhooks.open_consumer(&sub).await {
                warn!(error = %chain(&e), webhook.id = %sub.id, "cannot check the consumer of a parked webhook");
            }
        });
    }

    /// Acts on one change of the bucket: start active subscriptions, stop the others.
    fn apply(&self, change: SubscriptionChange) {
        match change {
            SubscriptionChange::Put(sub) if sub.status == WebhookStatus::Active => {
                self.ensure_running(&sub);
            }
            SubscriptionChange::Put(sub) => {
                self.stop(&sub.key());
                self.move_parked(*sub);
            }
            SubscriptionChange::Undecodable { key, error } => {
                warn!(error = %chain(&error), key = %key, "webhook record cannot be decoded; not delivered");
            }
            SubscriptionChange::Removed(key) => {
                self.stop(&key);
            }
        }
    }
}

/// A subscription's consumer and the first `FLUE_EVT` sequence it may deliver (an
/// earlier one is skipped); `None` when any will do (`new`, `all`).
struct Opened {
    consumer: consumer::PullConsumer,
    floor: Option<u64>,
}

/// Whether `kind` says the stream does not exist.
fn stream_not_found(kind: jetstream::context::GetStreamErrorKind) -> bool {
    matches!(kind, jetstream::context::GetStreamErrorKind::JetStream(j)
        if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
}

/// Whether `e` says the consumer (or its stream) does not exist.
fn is_not_found(e: &stream::ConsumerError) -> bool {
    matches!(e.kind(), stream::ConsumerErrorKind::JetStream(j)
        if j.error_code() == jetstream::ErrorCode::CONSUMER_NOT_FOUND
            || j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
}

/// Follows the subscriptions' bucket until cancelled, from its current content on, and
/// keeps one delivery task running per active subscription.
pub async fn run(webhooks: Webhooks, cancel: CancellationToken) {
    let mut delays = WATCH_RETRY.delays();
    loop {
        match webhooks.records.follow(&webhooks.scope.tenant).await {
            Ok(mut watch) => loop {
                let next = tokio::select! {
                    () = cancel.cancelled() => return,
                    next = watch.next() => next,
                };
                match next {
                    Some(Ok(change)) => {
                        delays.reset();
                        webhooks.apply(change);
                    }
                    Some(Err(e)) => {
                        warn!(error = %chain(&e), "lost the watch on webhook subscriptions; following them again");
                        break;
                    }
                    None => break,
                }
            },
            Err(e) => {
                warn!(error = %chain(&e), "cannot watch webhook subscriptions; retrying");
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(delays.next_delay()) => {}
        }
    }
}
