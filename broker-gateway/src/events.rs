//! Publishing lifecycle events into the event stream `FLUE_EVT`, and keeping the
//! gateway's own copy of it, `FLUE_EVT_GW`, that its webhook consumers read.
//!
//! Every event goes to its subject ([`CloudEvent::nats_subject`]) with its id as the
//! JetStream message id, so publishing the same fact twice (a retry, a redelivered agent
//! message handled again) leaves one copy in the stream within the duplicate window.
//! Callers that can retry later (the response consumer: it naks the agent message) use
//! [`Events::publish`] and treat an error as "not done"; callers that cannot use
//! [`Events::emit`], which retries a few times and then logs.
//!
//! A deployment's `deployment.queued` goes out at acceptance side by side with its
//! request (on another account's connection: the broker may store them in either order),
//! so an answer may come back before `queued` is stored, or even when its publish
//! failed. The events derived from answers ([`Events::publish_deployment_events`]) are
//! therefore preceded, on the one connection that orders them, by `queued` again
//! (same id: the broker drops the copy) for every deployment whose `queued` this gateway
//! has not seen acknowledged ([`Queued`]): `queued` is in the stream before any later
//! event of its deployment, by construction and not by timing. On one gateway that costs
//! nothing; after a restart, or for a deployment another gateway accepted, one publish
//! the broker drops.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use flue_proto::event::{EVENT_STREAM, EVENT_SUBJECTS, GATEWAY_EVENT_STREAM};
use flue_proto::retry::{Policy, Retryable};
use flue_proto::{CloudEvent, Deployment, DeploymentId, EventType};
use tracing::{debug, info, warn};

use crate::broker::{BrokerError, DUPLICATE_WINDOW};
use crate::metrics::TenantMetrics;
use crate::record::{DeploymentRecord, queued_event};

/// Retries [`Events::emit`] makes before giving up.
const EMIT_RETRIES: usize = 3;
/// Pauses between them: 100 ms, 200 ms, 400 ms.
const EMIT_RETRY: Policy = Policy::new(Duration::from_millis(100), Duration::from_millis(400));

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Retention and consumer limit of the event stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Events older than this are dropped.
    pub max_age: Duration,
    /// Past this many bytes, the oldest events are dropped.
    pub max_bytes: i64,
    /// Consumers the stream allows (`max_consumers`); the broker refuses more.
    pub max_consumers: i32,
    /// The longest a consumer may stay idle before the broker deletes it (the stream's
    /// consumer limit `inactive_threshold`, for `FLUE_EVT` only: listeners' consumers);
    /// zero for none.
    pub listener_idle: Duration,
    /// Copies the broker keeps (`num_replicas`, `--replicas`), given at creation only:
    /// [`crate::replicas::ensure`] changes the count of an existing stream.
    pub replicas: usize,
}

/// Deployments known to this gateway kept at most: past it the set starts again empty,
/// which costs a dropped copy of `queued` per deployment answered later, nothing more.
const QUEUED_KNOWN_MAX: usize = 100_000;

/// The running deployments whose `deployment.queued` this gateway saw acknowledged
/// (published at acceptance, or before an earlier answer's events): their answers' events
/// need no copy of it ahead of them. A deployment leaves it with its last event.
#[derive(Debug, Default)]
struct Queued(Mutex<HashSet<DeploymentId>>);

impl Queued {
    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<DeploymentId>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stored(&self, id: &DeploymentId) {
        let mut known = self.set();
        if known.len() >= QUEUED_KNOWN_MAX {
            known.clear();
        }
        known.insert(id.clone());
    }
}

/// Handle on the event stream; cheap to clone.
#[derive(Debug, Clone)]
pub struct Events {
    js: jetstream::Context,
    metrics: TenantMetrics,
    queued: Arc<Queued>,
}

impl Events {
    /// Creates the event stream and the gateway's copy of it if missing and gives them
    /// `retention` (existing streams created with other limits are updated).
    pub async fn open(js: jetstream::Context, retention: Retention) -> Result<Self, BrokerError> {
        let retention = Retention {
            max_consumers: capped_consumers(&js, retention.max_consumers).await,
            ..retention
        };
        open_event_stream(&js, retention).await?;
        open_gateway_stream(&js, retention).await?;
        Ok(Self {
            js,
            metrics: TenantMetrics::default(),
            queued: Arc::default(),
        })
    }

    /// The same, counting the deployment events it stores into `metrics`.
    pub fn counting(self, metrics: TenantMetrics) -> Self {
        Self { metrics, ..self }
    }

    /// The JetStream context (for listeners' consumers).
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    /// Publishes `event` and waits for the broker's acknowledgement.
    pub async fn publish(&self, event: &CloudEvent) -> Result<(), BrokerError> {
        self.store(event).await.map(drop)
    }

    /// Publishes the event `ty` about `record` as [`Events::publish`] does, and counts it
    /// in the tenant's metrics when the broker stored it for the first time.
    pub async fn publish_deployment(
        &self,
        record: &DeploymentRecord,
        ty: EventType,
    ) -> Result<(), BrokerError> {
        if self.store(&record.event(ty)).await? {
            self.metrics.deployment_reported(&record.deployment, ty);
        }
        Ok(())
    }

    /// [`Events::publish_deployment`] of a step `record` went past before the step's own
    /// answer came: the event as the deployment showed at that step
    /// ([`DeploymentRecord::step_event`]).
    pub async fn publish_deployment_step(
        &self,
        record: &DeploymentRecord,
        ty: EventType,
    ) -> Result<(), BrokerError> {
        if self.store(&record.step_event(ty)).await? {
            self.metrics.deployment_reported(&record.deployment, ty);
        }
        Ok(())
    }

    /// Publishes the `deployment.queued` of `record` and waits for the broker's
    /// acknowledgement ([`Events::publish_deployment`]); from then on its answers' events
    /// go out without a copy of it ahead of them.
    pub async fn publish_queued(&self, record: &DeploymentRecord) -> Result<(), BrokerError> {
        self.publish_deployment(record, EventType::DeploymentQueued)
            .await?;
        self.queued.stored(&record.deployment.id);
        Ok(())
    }

    /// Publishes deployment `events` (each with the deployment it counts as, see
    /// [`Events::publish_deployment`]) as one batch: sent in their order on the one
    /// connection, which is the order the broker appends them in, and their
    /// acknowledgements awaited together rather than one before the next is sent. An error
    /// means some may be stored and some not: the caller publishes the whole batch again
    /// (the broker drops the copies of those it has, by id).
    ///
    /// Each deployment's first event is preceded by its `deployment.queued` unless this
    /// gateway saw that acknowledged ([`Events::publish_queued`]): whatever happened to
    /// the acceptance's publish, `queued` is then in the stream first.
    pub async fn publish_deployment_events(
        &self,
        events: &[(CloudEvent, &Deployment)],
    ) -> Result<(), BrokerError> {
        let batch = self.with_queued(events);
        let mut acks = Vec::with_capacity(batch.len());
        for (event, _) in &batch {
            acks.push(self.send(event).await?);
        }
        let stored = futures_util::future::join_all(acks).await;
        for ((event, d), stored) in batch.iter().zip(stored) {
            if stored? {
                self.metrics.deployment_reported(d, event.ty);
            }
        }
        let mut known = self.queued.set();
        for (_, d) in events {
            // Its last event gone out (or a later answer's events to come): either way
            // `queued` is stored.
            match d.status.is_terminal() {
                true => known.remove(&d.id),
                false => known.insert(d.id.clone()),
            };
        }
        Ok(())
    }

    /// `events`, each deployment's first preceded by its `deployment.queued` unless known
    /// stored (or it is that event).
    fn with_queued<'e, 'd>(
        &self,
        events: &'e [(CloudEvent, &'d Deployment)],
    ) -> Vec<(Cow<'e, CloudEvent>, &'d Deployment)> {
        let known = self.queued.set();
        let mut seen: HashSet<&DeploymentId> = HashSet::new();
        let mut batch = Vec::with_capacity(events.len() + 1);
        for (event, d) in events {
            if seen.insert(&d.id)
                && event.ty != EventType::DeploymentQueued
                && !known.contains(&d.id)
            {
                debug!(deployment.id = %d.id, "queued not known stored; publishing it again ahead of the answer's events");
                batch.push((Cow::Owned(queued_event(d)), *d));
            }
            batch.push((Cow::Borrowed(event), *d));
        }
        batch
    }

    /// [`Events::emit`] of the event `ty` about `record`, counted as
    /// [`Events::publish_deployment`] counts it.
    pub async fn emit_deployment(&self, record: &DeploymentRecord, ty: EventType) {
        if self.emitted(&record.event(ty)).await {
            self.metrics.deployment_reported(&record.deployment, ty);
        }
        if record.deployment.status.is_terminal() {
            self.queued.set().remove(&record.deployment.id);
        }
    }

    /// Publishes `event`; true when the broker stored it, false when it already had it
    /// (the same id within the duplicate window).
    async fn store(&self, event: &CloudEvent) -> Result<bool, BrokerError> {
        self.send(event).await?.await
    }

    /// Sends `event`; the future returned awaits the broker's acknowledgement ([`Events::store`]).
    async fn send(
        &self,
        event: &CloudEvent,
    ) -> Result<impl Future<Output = Result<bool, BrokerError>> + use<>, BrokerError> {
        let id = event.id.clone();
        let err = move |e: BoxError| BrokerError::Event {
            id: id.clone(),
            source: e,
        };
        let payload = serde_json::to_vec(event).expect("an event always serialises");
        let ack = self
            .js
            .send_publish(
                event.nats_subject(),
                jetstream::message::PublishMessage::build()
                    .payload(payload.into())
                    .message_id(event.msg_id()),
            )
            .await
            .map_err(|e| err(e.into()))?;
        let (id, ty) = (event.id.clone(), event.ty);
        Ok(async move {
            let ack = ack.await.map_err(|e| err(e.into()))?;
            debug!(event.id = %id, event.type = %ty, "event published");
            Ok(!ack.duplicate)
        })
    }

    /// Publishes `event`, retrying a few times; logs when it cannot.
    pub async fn emit(&self, event: &CloudEvent) {
        self.emitted(event).await;
    }

    /// [`Events::emit`]; true when the broker stored the event for the first time (a
    /// publish whose acknowledgement was lost and whose retry is a duplicate says false).
    async fn emitted(&self, event: &CloudEvent) -> bool {
        let stored = (|| self.store(event))
            .retry(EMIT_RETRY.retry(Some(EMIT_RETRIES)))
            .await;
        stored.unwrap_or_else(|e| {
            warn!(error = %crate::error::chain(&e), event.id = %event.id, event.type = %event.ty, "cannot publish an event; dropped");
            false
        })
    }

    /// The tenant's metrics this counts into.
    pub fn metrics(&self) -> &TenantMetrics {
        &self.metrics
    }
}

/// `wanted`, or the events account's consumer limit when that is lower: the broker
/// refuses a stream limit above its account's (an account of a broker configured by
/// hand; the accounts Flue signs set none).
async fn capped_consumers(js: &jetstream::Context, wanted: i32) -> i32 {
    match js.query_account().await {
        Ok(account) => match account.limits.max_consumers {
            Some(limit) if limit > 0 && limit < i64::from(wanted) => {
                i32::try_from(limit).unwrap_or(wanted)
            }
            _ => wanted,
        },
        Err(e) => {
            warn!(error = %e, "cannot read the events account's limits");
            wanted
        }
    }
}

/// Creates `FLUE_EVT` if missing, with `retention`; an existing one is given it.
async fn open_event_stream(
    js: &jetstream::Context,
    retention: Retention,
) -> Result<(), BrokerError> {
    let err = |e: BoxError| BrokerError::Stream {
        stream: EVENT_STREAM,
        source: e,
    };
    let config = stream::Config {
        name: EVENT_STREAM.to_owned(),
        subjects: vec![EVENT_SUBJECTS.to_owned()],
        retention: stream::RetentionPolicy::Limits,
        discard: stream::DiscardPolicy::Old,
        storage: stream::StorageType::File,
        duplicate_window: DUPLICATE_WINDOW,
        max_age: retention.max_age,
        max_bytes: retention.max_bytes,
        // Only NATS listeners hold consumers here (the gateway's SSE and webhook
        // consumers are on FLUE_EVT_GW); bounded so that listeners cannot make the broker
        // hold consumers without end, and each deleted once idle for `listener_idle`.
        // The broker's own sourcing consumer (for FLUE_EVT_GW) is not counted.
        max_consumers: retention.max_consumers,
        consumer_limits: consumer_limits(retention.listener_idle),
        num_replicas: retention.replicas,
        ..Default::default()
    };
    let stream = js
        .get_or_create_stream(config)
        .await
        .map_err(|e| err(e.into()))?;
    update_retention(
        js,
        stream.cached_info().config.clone(),
        retention,
        EVENT_STREAM,
    )
    .await
    .map_err(err)
}

/// Creates `FLUE_EVT_GW` if missing: no subjects of its own, every event of `FLUE_EVT`
/// copied in by the broker (a source in the same account), kept as long. Created on a
/// broker whose `FLUE_EVT` already holds events, it copies all of them, so webhook
/// consumers moved to it from `FLUE_EVT` find every event they had not yet had.
async fn open_gateway_stream(
    js: &jetstream::Context,
    retention: Retention,
) -> Result<(), BrokerError> {
    let err = |e: BoxError| BrokerError::Stream {
        stream: GATEWAY_EVENT_STREAM,
        source: e,
    };
    let config = stream::Config {
        name: GATEWAY_EVENT_STREAM.to_owned(),
        sources: Some(vec![stream::Source {
            name: EVENT_STREAM.to_owned(),
            ..Default::default()
        }]),
        retention: stream::RetentionPolicy::Limits,
        discard: stream::DiscardPolicy::Old,
        storage: stream::StorageType::File,
        max_age: retention.max_age,
        max_bytes: gateway_max_bytes(retention.max_bytes),
        // One consumer per webhook subscription, made through the API only.
        max_consumers: -1,
        num_replicas: retention.replicas,
        ..Default::default()
    };
    let stream = js
        .get_or_create_stream(config)
        .await
        .map_err(|e| err(e.into()))?;
    let gateway = Retention {
        max_age: retention.max_age,
        max_bytes: gateway_max_bytes(retention.max_bytes),
        max_consumers: -1,
        listener_idle: Duration::ZERO,
        replicas: retention.replicas,
    };
    update_retention(
        js,
        stream.cached_info().config.clone(),
        gateway,
        GATEWAY_EVENT_STREAM,
    )
    .await
    .map_err(err)
}

/// The size bound of `FLUE_EVT_GW` for a `FLUE_EVT` bounded at `max_bytes`: a quarter
/// more, since every copy carries the source header (some 30 bytes) and must not be
/// dropped before its original.
fn gateway_max_bytes(max_bytes: i64) -> i64 {
    if max_bytes <= 0 {
        return max_bytes;
    }
    max_bytes.saturating_add(max_bytes / 4)
}

/// The consumer limits of a stream whose consumers may stay idle `idle` at most.
fn consumer_limits(idle: Duration) -> Option<stream::ConsumerLimits> {
    (!idle.is_zero()).then(|| stream::ConsumerLimits {
        inactive_threshold: idle,
        ..Default::default()
    })
}

/// Gives stream `name`, found with `found`, the limits of `retention` if it has others
/// (nats-server 2.15 takes a changed `max_consumers` on an existing stream too). The
/// broker refuses a shorter idle limit while a consumer asks for more (one made before
/// the limit, or under a longer one): the other limits are then still given, the idle
/// limit left as it was, with a warning (a listener's consumer must not stop the
/// gateway from starting).
async fn update_retention(
    js: &jetstream::Context,
    found: stream::Config,
    retention: Retention,
    name: &'static str,
) -> Result<(), BoxError> {
    let mut changed = found.clone();
    changed.max_age = retention.max_age;
    changed.max_bytes = retention.max_bytes;
    changed.max_consumers = retention.max_consumers;
    changed.consumer_limits = consumer_limits(retention.listener_idle);
    if changed == found {
        return Ok(());
    }
    if let Err(e) = js.update_stream(&changed).await {
        if changed.consumer_limits == found.consumer_limits {
            return Err(e.into());
        }
        warn!(stream = name, error = %e, listener_idle_secs = retention.listener_idle.as_secs(),
              "cannot change the idle limit of the event stream's consumers (a consumer asks for longer); kept as it was");
        changed.consumer_limits = found.consumer_limits.clone();
        if changed == found {
            return Ok(());
        }
        js.update_stream(&changed).await?;
    }
    info!(
        stream = name,
        max_age_secs = changed.max_age.as_secs(),
        max_bytes = changed.max_bytes,
        max_consumers = changed.max_consumers,
        listener_idle_secs = changed
            .consumer_limits
            .as_ref()
            .map_or(0, |l| l.inactive_threshold.as_secs()),
        "event stream limits changed"
    );
    Ok(())
}
