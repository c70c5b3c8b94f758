//! Publishing lifecycle events into the event stream `FLUE_EVT`, which the gateway's
//! SSE and webhook consumers and NATS listeners' consumers all read.
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
use flue_proto::event::{EVENT_STREAM, EVENT_SUBJECTS};
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

/// Retention of the event stream, and the bounds on NATS listeners' consumers on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Events older than this are dropped.
    pub max_age: Duration,
    /// Past this many bytes, the oldest events are dropped.
    pub max_bytes: i64,
    /// NATS listeners' consumers the tenant may have at once (`--events-max-consumers`):
    /// applied by the gateway to listeners' creations ([`crate::natsauth::creates`]), not
    /// a stream limit, so that listeners never use up the consumers SSE clients and
    /// webhooks need.
    pub max_consumers: i32,
    /// The longest a listener's consumer may stay idle before the broker deletes it
    /// (`--listener-idle-secs`, given by the gateway to every listener's consumer as its
    /// `inactive_threshold`); zero for none.
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
    /// Creates the event stream if missing and gives it `retention` (an existing stream
    /// created with other limits is updated; one an older gateway gave a consumer limit
    /// loses it).
    pub async fn open(js: jetstream::Context, retention: Retention) -> Result<Self, BrokerError> {
        open_event_stream(&js, retention).await?;
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

/// The listeners' consumer bound for `wanted` (`--events-max-consumers`) in an events
/// account whose own JetStream consumer limit is `account` (`None` or `<= 0`: none; the
/// accounts Flue signs set none, an account of a broker configured by hand may): at most
/// half of it, so that listeners at their bound leave the other half to the gateway's
/// SSE and webhook consumers, which that limit counts as well.
pub fn listener_bound(wanted: i32, account: Option<i64>) -> i32 {
    match account {
        Some(limit) if limit > 0 && limit / 2 < i64::from(wanted) => {
            i32::try_from(limit / 2).unwrap_or(wanted)
        }
        _ => wanted,
    }
}

/// [`listener_bound`] for the events account `js` is a context of, read from the
/// broker; `wanted` when its limits cannot be read (warned).
pub async fn capped_listener_bound(js: &jetstream::Context, wanted: i32) -> i32 {
    match js.query_account().await {
        Ok(account) => {
            let bound = listener_bound(wanted, account.limits.max_consumers);
            if bound < wanted {
                warn!(
                    account_max_consumers = account.limits.max_consumers,
                    events_max_consumers = wanted,
                    listener_bound = bound,
                    "the events account allows few consumers: listeners get half of them"
                );
            }
            bound
        }
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
        // No consumer limit of the stream's: it would count the gateway's SSE and webhook
        // consumers with the listeners'. Listeners' consumers are bounded (how many, how
        // long idle) by the gateway, which makes them ([`crate::natsauth::creates`]).
        max_consumers: -1,
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

/// Gives stream `name`, found with `found`, the limits of `retention` if it has others,
/// and takes away the consumer limits an older gateway gave it (`max_consumers`, the
/// consumer limit `inactive_threshold`: nats-server 2.15 takes both changed on an
/// existing stream, and lifting a limit is never refused).
async fn update_retention(
    js: &jetstream::Context,
    found: stream::Config,
    retention: Retention,
    name: &'static str,
) -> Result<(), BoxError> {
    let mut changed = found.clone();
    changed.max_age = retention.max_age;
    changed.max_bytes = retention.max_bytes;
    if found.max_consumers > 0 {
        changed.max_consumers = -1;
    }
    if found
        .consumer_limits
        .as_ref()
        .is_some_and(|l| l != &stream::ConsumerLimits::default())
    {
        changed.consumer_limits = None;
    }
    if changed == found {
        return Ok(());
    }
    js.update_stream(&changed).await?;
    info!(
        stream = name,
        max_age_secs = changed.max_age.as_secs(),
        max_bytes = changed.max_bytes,
        from_max_consumers = found.max_consumers,
        from_listener_idle_secs = found
            .consumer_limits
            .as_ref()
            .map_or(0, |l| l.inactive_threshold.as_secs()),
        "event stream limits changed"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_get_at_most_half_the_events_accounts_own_consumer_limit() {
        assert_eq!(listener_bound(1_000, None), 1_000);
        assert_eq!(listener_bound(1_000, Some(-1)), 1_000);
        assert_eq!(listener_bound(1_000, Some(0)), 1_000);
        assert_eq!(listener_bound(1_000, Some(10_000)), 1_000);
        assert_eq!(listener_bound(1_000, Some(2_000)), 1_000);
        assert_eq!(listener_bound(1_000, Some(1_000)), 500);
        assert_eq!(listener_bound(1_000, Some(1)), 0);
    }
}
