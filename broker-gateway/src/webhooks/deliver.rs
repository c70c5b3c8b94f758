//! One subscription's delivery task: pull an event, POST it until a 2xx, acknowledge it,
//! pull the next.
//!
//! The consumer hands out one event at a time (max one unacknowledged), so events go
//! out in stream order. A failed attempt (an answer other than 2xx, a connection error,
//! no answer within the timeout) is retried after a pause that doubles each time, up to
//! a bound (the settings' [`flue_proto::retry::Policy`]); the event's acknowledgement deadline is extended meanwhile, so the broker
//! does not hand it to another gateway. After the last allowed attempt the subscription
//! is parked with the reason and the event is handed back unacknowledged, so a resume
//! starts with it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use bytes::Bytes;
use flue_proto::CloudEvent;
use flue_proto::retry::Policy;
use flue_proto::webhook::{
    ATTEMPT_HEADER, EVENT_ID_HEADER, SIGNATURE_HEADER, STANDARD_ID_HEADER,
    STANDARD_SIGNATURE_HEADER, STANDARD_TIMESTAMP_HEADER, TIMESTAMP_HEADER, WEBHOOK_ID_HEADER,
    WebhookSignature, WebhookStatus,
};
use futures_util::StreamExt;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::http::AttemptError;
use super::target::Target;
use super::{ACK_WAIT, Settings, Webhooks, sign};
use crate::error::chain;
use crate::store::Subscription;

/// How long one pull request waits for an event. An event published in the last
/// moments of a shutdown may go to a request nobody reads any more: it is handed out
/// again after the ack wait ([`ACK_WAIT`]), late but not lost.
const PULL_EXPIRES: Duration = Duration::from_secs(10);
/// Pauses before pulling again after the consumer or the broker failed, and between
/// attempts to park a subscription.
const RETRY: Policy = Policy::new(Duration::from_millis(250), Duration::from_secs(10));

/// Why a task ended.
enum Exit {
    /// Cancelled: shutdown, or the subscription was stopped.
    Cancelled,
    /// The subscription is gone.
    Deleted,
    /// The subscription is parked (by this task or before it started).
    Parked,
}

/// What to do after one message.
enum Step {
    Next,
    Stop(Exit),
}

/// Runs the delivery of `sub` until cancelled, parked or deleted; `run` is its number
/// in the registry.
pub async fn run(webhooks: Webhooks, sub: Subscription, run: u64, cancel: CancellationToken) {
    let task = Task {
        settings: webhooks.scope.settings,
        webhooks,
        sub,
        cancel,
        backlog: AtomicU64::new(0),
    };
    let exit = task.deliver().await;
    // What this task last reported leaves the backlog gauge with it.
    task.note_backlog(0);
    let key = task.sub.key();
    task.webhooks.finished(&key, run);
    match exit {
        Exit::Cancelled => debug!(webhook.id = %task.sub.id, "delivery task stopped"),
        Exit::Deleted => debug!(webhook.id = %task.sub.id, "webhook gone; delivery task ended"),
        Exit::Parked => {
            // A resume between parking and leaving the registry found this task still
            // there and started nothing: look again now that it is out.
            if let Ok(Some(now)) = task.records_get().await
                && now.status == WebhookStatus::Active
            {
                task.webhooks.ensure_running(&now);
            }
        }
    }
}

struct Task {
    webhooks: Webhooks,
    settings: Settings,
    sub: Subscription,
    cancel: CancellationToken,
    /// The backlog this task last reported (`flue_webhook_backlog`).
    backlog: AtomicU64,
}

impl Task {
    /// Reports `now` events still to deliver after the one in hand.
    fn note_backlog(&self, now: u64) {
        let previous = self.backlog.swap(now, Ordering::Relaxed);
        self.webhooks.scope.metrics.webhook_backlog(previous, now);
    }

    async fn records_get(&self) -> Result<Option<Subscription>, crate::store::StoreError> {
        self.webhooks
            .records
            .get(&self.sub.tenant, &self.sub.id)
            .await
    }

    /// Sleeps `pause`; false when cancelled first.
    async fn sleep(&self, pause: Duration) -> bool {
        tokio::select! {
            () = self.cancel.cancelled() => false,
            () = tokio::time::sleep(pause) => true,
        }
    }

    async fn deliver(&self) -> Exit {
        let target = match Target::parse(&self.sub.url) {
            Ok(t) => t,
            Err(e) => {
                // Checked at creation: only a record changed behind the API gets here.
                let error = format!("url {e}");
                return self.park(error.clone(), error).await;
            }
        };
        // The first pull after the start or after a delivered event goes at once.
        let mut delays = RETRY.delays();
        let mut failed = false;
        loop {
            if failed && !self.sleep(delays.next_delay()).await {
                return Exit::Cancelled;
            }
            failed = true;
            // The current record: it may have been parked or deleted meanwhile, and it
            // says where a lost consumer starts again.
            let current = match self.records_get().await {
                Ok(Some(s)) => s,
                Ok(None) => return Exit::Deleted,
                Err(e) => {
                    warn!(error = %chain(&e), webhook.id = %self.sub.id, "cannot read webhook; retrying");
                    continue;
                }
            };
            if current.status == WebhookStatus::Parked {
                return Exit::Parked;
            }
            let (consumer, floor) = match self.webhooks.open_consumer(&current).await {
                Ok(Some(opened)) => (opened.consumer, opened.floor),
                Ok(None) => return Exit::Deleted,
                Err(e) => {
                    warn!(error = %chain(&e), webhook.id = %self.sub.id, "cannot open the webhook's consumer; retrying");
                    continue;
                }
            };
            // One pull request per event, never one waiting while an event is handled:
            // an event handed back (parked, shut down) must not go to a request of
            // this task's that nobody reads any more.
            loop {
                let batch = consumer
                    .batch()
                    .max_messages(1)
                    .expires(PULL_EXPIRES)
                    .messages()
                    .await;
                let mut batch = match batch {
                    Ok(b) => b,
                    Err(e) => {
                        warn!(error = %chain(&e), webhook.id = %self.sub.id, "cannot pull the webhook's events; retrying");
                        break;
                    }
                };
                let next = tokio::select! {
                    () = self.cancel.cancelled() => return Exit::Cancelled,
                    next = batch.next() => next,
                };
                drop(batch);
                match next {
                    Some(Ok(msg)) => {
                        delays.reset();
                        failed = false;
                        if let Step::Stop(exit) = self.handle(&target, msg, floor).await {
                            return exit;
                        }
                    }
                    Some(Err(e)) => {
                        warn!(error = %chain(&*e), webhook.id = %self.sub.id, "pulling the webhook's events failed; retrying");
                        break;
                    }
                    // Nothing within the pull's expiry: ask again.
                    None => {}
                }
            }
        }
    }

    /// Delivers one event (or skips it when the filter does not want it, or when its
    /// `FLUE_EVT` sequence is below `floor`: a consumer found made may start earlier than
    /// the record says, see [`super::position`]).
    async fn handle(&self, target: &Target, msg: Message, floor: Option<u64>) -> Step {
        // The FLUE_EVT sequence, which the API shows.
        let info = msg.info().ok();
        let seq = info.as_ref().map(|i| i.stream_sequence);
        if let Some(info) = &info {
            self.note_backlog(info.pending);
        }
        if let (Some(floor), Some(seq)) = (floor, seq)
            && seq < floor
        {
            return self.ack(&msg).await;
        }
        let event: CloudEvent = match serde_json::from_slice(&msg.payload) {
            Ok(e) => e,
            Err(e) => {
                warn!(error = %e, webhook.id = %self.sub.id, seq, "event cannot be decoded; skipped");
                return self.ack(&msg).await;
            }
        };
        if !self.sub.filter.matches(&event) {
            return self.ack(&msg).await;
        }
        let body = msg.payload.clone();
        let mut delays = self.settings.retry.delays();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let sent =
                self.with_progress(&msg, self.attempt(target, &event, attempt, body.clone()));
            let error = match sent.await {
                None => return self.release(&msg, Exit::Cancelled).await,
                Some(Ok(())) => {
                    self.webhooks.scope.metrics.webhook_attempt(true);
                    return self.delivered(&msg, &event, seq).await;
                }
                Some(Err(e)) => chain(&e),
            };
            self.webhooks.scope.metrics.webhook_attempt(false);
            warn!(error, webhook.id = %self.sub.id, event.id = %event.id, attempt, "webhook delivery attempt failed");
            if attempt >= self.settings.max_attempts {
                let reason = format!(
                    "event {}: {attempt} attempts failed, last: {error}",
                    event.id
                );
                let exit = self.park(reason, error).await;
                return self.release(&msg, exit).await;
            }
            if let Step::Stop(exit) = self.note_error(error).await {
                return self.release(&msg, exit).await;
            }
            if self
                .with_progress(&msg, tokio::time::sleep(delays.next_delay()))
                .await
                .is_none()
            {
                return self.release(&msg, Exit::Cancelled).await;
            }
        }
    }

    /// One signed POST of `body`.
    async fn attempt(
        &self,
        target: &Target,
        event: &CloudEvent,
        attempt: u32,
        body: Bytes,
    ) -> Result<(), AttemptError> {
        let timestamp = OffsetDateTime::now_utc().unix_timestamp();
        let mut headers = vec![
            (WEBHOOK_ID_HEADER, self.sub.id.to_string()),
            (EVENT_ID_HEADER, event.id.clone()),
            (ATTEMPT_HEADER, attempt.to_string()),
        ];
        match self.sub.signature {
            WebhookSignature::Standard => {
                // Checked at creation: only a record changed behind the API fails here.
                let key = sign::StandardKey::from_secret(self.sub.secret.expose_text())
                    .map_err(AttemptError::Secret)?;
                // The event's id is the message id: the same on every attempt, so a
                // receiver can drop a redelivery it already handled.
                let signature = sign::standard(&key, &event.id, timestamp, &body);
                headers.extend([
                    (STANDARD_ID_HEADER, event.id.clone()),
                    (STANDARD_TIMESTAMP_HEADER, timestamp.to_string()),
                    (STANDARD_SIGNATURE_HEADER, signature),
                ]);
            }
            WebhookSignature::FlueV1 => {
                let signature = sign::flue_v1(self.sub.secret.expose(), timestamp, &body);
                headers.extend([
                    (TIMESTAMP_HEADER, timestamp.to_string()),
                    (SIGNATURE_HEADER, signature),
                ]);
            }
        }
        let status = self
            .webhooks
            .http
            .post(target, &headers, body, self.settings.timeout)
            .await?;
        debug!(webhook.id = %self.sub.id, event.id = %event.id, attempt, status = status.as_u16(), "webhook delivered");
        Ok(())
    }

    /// Runs `fut`, telling the broker every third of the ack wait that the event is
    /// still being worked on; `None` when cancelled first.
    async fn with_progress<T>(&self, msg: &Message, fut: impl Future<Output = T>) -> Option<T> {
        let every = ACK_WAIT / 3;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let mut fut = std::pin::pin!(fut);
        loop {
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return None,
                value = &mut fut => return Some(value),
                _ = tick.tick() => {
                    if let Err(e) = msg.ack_with(AckKind::Progress).await {
                        debug!(error = %e, webhook.id = %self.sub.id, "cannot extend the event's ack wait");
                    }
                }
            }
        }
    }

    /// Acknowledges a skipped event.
    async fn ack(&self, msg: &Message) -> Step {
        if let Err(e) = msg.double_ack().await {
            // It comes back and is skipped again.
            debug!(error = %e, webhook.id = %self.sub.id, "cannot acknowledge a skipped event");
        }
        Step::Next
    }

    /// Acknowledges a delivered event and counts it.
    async fn delivered(&self, msg: &Message, event: &CloudEvent, seq: Option<u64>) -> Step {
        if let Err(e) = msg.double_ack().await {
            // The broker hands it out again: delivered twice, which at least once allows.
            warn!(error = %e, webhook.id = %self.sub.id, event.id = %event.id, "cannot acknowledge a delivered event; it will be delivered again");
        }
        let updated = self
            .webhooks
            .records
            .delivered(&self.sub.tenant, &self.sub.id, &event.id, seq)
            .await;
        match updated {
            Ok(Some(_)) => Step::Next,
            Ok(None) => Step::Stop(Exit::Deleted),
            Err(e) => {
                warn!(error = %chain(&e), webhook.id = %self.sub.id, "cannot count a delivered event");
                Step::Next
            }
        }
    }

    /// Records the error of a failed attempt (for the API); stops when the
    /// subscription is gone.
    async fn note_error(&self, error: String) -> Step {
        let updated = self
            .webhooks
            .records
            .failed(&self.sub.tenant, &self.sub.id, &error)
            .await;
        match updated {
            Ok(Some(_)) => Step::Next,
            Ok(None) => Step::Stop(Exit::Deleted),
            Err(e) => {
                warn!(error = %chain(&e), webhook.id = %self.sub.id, "cannot record a failed attempt");
                Step::Next
            }
        }
    }

    /// Marks the subscription parked with `reason` and the last attempt's error,
    /// retrying the write until it lands or the task is cancelled.
    async fn park(&self, reason: String, last_error: String) -> Exit {
        let mut delays = RETRY.delays();
        loop {
            let updated = self
                .webhooks
                .records
                .park(&self.sub.tenant, &self.sub.id, &reason, &last_error)
                .await;
            match updated {
                Ok(Some(_)) => {
                    info!(webhook.id = %self.sub.id, reason, "webhook parked");
                    self.webhooks.scope.metrics.webhook_parked();
                    return Exit::Parked;
                }
                Ok(None) => return Exit::Deleted,
                Err(e) => {
                    warn!(error = %chain(&e), webhook.id = %self.sub.id, "cannot park webhook; retrying");
                }
            }
            if !self.sleep(delays.next_delay()).await {
                return Exit::Cancelled;
            }
        }
    }

    /// Hands an undelivered event back to the broker at once, so that whoever pulls
    /// next (a resume, another gateway, this one after a restart) gets it first.
    async fn release(&self, msg: &Message, exit: Exit) -> Step {
        if let Err(e) = msg.ack_with(AckKind::Nak(None)).await {
            debug!(error = %e, webhook.id = %self.sub.id, "cannot hand back an undelivered event; it comes back after the ack wait");
        }
        Step::Stop(exit)
    }
}
