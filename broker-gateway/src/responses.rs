//! The response consumer: applies what agents report to the deployment records, and
//! reports each step as a lifecycle event.
//!
//! It pulls the shared durable consumer `flue-gateway` on `FLUE_RESP` and acknowledges a
//! message only once its effect is in the KV bucket and its event in the event stream,
//! so a crash or a broker restart at any point means a redelivery, which the idempotent
//! transitions and the events' stable ids absorb. A redelivered message whose effect
//! the record already shows is reported again: the first report may be what was lost.
//!
//! Messages of one server (one subject) are handled one after the other in stream
//! order, different servers' side by side, so a deployment's events come out in the
//! order its agent reported them: `delivered`, `started`, its progress, then how it
//! ended.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use flue_proto::event::progress_event_id;
use flue_proto::{
    AgentMessage, CloudEvent, Deployment, DeploymentId, EventType, ServerId, StackId, TenantId,
};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::broker::BrokerError;
use crate::error::chain;
use crate::record::{apply_delivered, apply_finished, apply_started, end_event_type};
use crate::service::Service;
use crate::store::StoreError;

mod lanes;

use lanes::Lanes;

/// First pause after the consumer failed; doubled up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Longest pause between two attempts to get the consumer back.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Agent messages one gateway holds at once: being handled, or waiting behind an
/// earlier message of the same server.
const MAX_HELD: usize = 64;
/// Attempts at a message before it is handed back to the broker. Retrying in place
/// keeps the server's order through a short outage; a message handed back comes
/// again later, possibly after the ones that followed it.
const ATTEMPTS: u32 = 4;
/// Pause after the first failed attempt; doubled after each further one.
const ATTEMPT_BACKOFF: Duration = Duration::from_millis(100);
/// Delay before a message whose effect could not be stored is offered again.
const RETRY_DELAY: Duration = Duration::from_secs(1);
/// Deployments whose server and stack are remembered for progress messages; the
/// memory is cleared when it grows past this.
const MAX_OWNERS: usize = 4096;

/// Why a message could not be handled (it is retried).
#[derive(Debug, thiserror::Error)]
enum HandleError {
    /// The record could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The event could not be published.
    #[error(transparent)]
    Event(#[from] BrokerError),
}

/// Consumes agent answers until cancelled, getting the consumer back after any failure.
pub async fn consume(service: Service, cancel: CancellationToken) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let stopped = tokio::select! {
            () = cancel.cancelled() => return,
            stopped = consume_until_error(&service) => stopped,
        };
        match stopped {
            Ok(()) => backoff = MIN_BACKOFF,
            Err(reason) => warn!(error = %reason, "response consumer interrupted; resuming"),
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Pulls the consumer until its message stream fails or ends, holding up to
/// [`MAX_HELD`] messages: one at a time per subject, subjects side by side.
async fn consume_until_error(service: &Service) -> Result<(), String> {
    let consumer = service
        .broker
        .response_consumer()
        .await
        .map_err(|e| chain(&e))?;
    let mut messages = consumer.messages().await.map_err(|e| chain(&e))?;
    debug!("response consumer pulling");
    let owners = Owners::default();
    let mut lanes: Lanes<Message> = Lanes::default();
    let mut running = FuturesUnordered::new();
    let stopped = loop {
        tokio::select! {
            Some(subject) = running.next(), if !running.is_empty() => {
                let subject: String = subject;
                if let Some(next) = lanes.done(&subject) {
                    running.push(handle(service, &owners, next));
                }
            }
            next = messages.next(), if lanes.held() < MAX_HELD => match next {
                Some(Ok(message)) => {
                    let subject = message.subject.to_string();
                    if let Some(now) = lanes.admit(subject, message) {
                        running.push(handle(service, &owners, now));
                    }
                }
                Some(Err(e)) => break Err(chain(&e)),
                None => break Ok(()),
            },
        }
    };
    // Finish what was taken, in order; whatever is not acknowledged comes again anyway.
    while let Some(subject) = running.next().await {
        if let Some(next) = lanes.done(&subject) {
            running.push(handle(service, &owners, next));
        }
    }
    stopped
}

/// The server and stack of recently seen deployments, so that progress messages (many
/// per deployment) are checked without reading the record each time.
#[derive(Debug, Default)]
struct Owners {
    known: Mutex<HashMap<(TenantId, DeploymentId), Owner>>,
}

/// Who a deployment belongs to; never changes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    server: ServerId,
    stack: Option<StackId>,
}

impl Owners {
    fn get(&self, tenant: &TenantId, id: &DeploymentId) -> Option<Owner> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known.get(&(tenant.clone(), id.clone())).cloned()
    }

    fn remember(&self, d: &Deployment) -> Owner {
        let owner = Owner {
            server: d.server_id.clone(),
            stack: d.stack_id.clone(),
        };
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() >= MAX_OWNERS {
            known.clear();
        }
        known.insert((d.tenant.clone(), d.id.clone()), owner.clone());
        owner
    }
}

/// `flue.<tenant>.resp.<server>` → (tenant, server).
pub fn parse_subject(subject: &str) -> Option<(TenantId, ServerId)> {
    let mut parts = subject.split('.');
    let (Some("flue"), Some(tenant), Some("resp"), Some(server), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    Some((TenantId::new(tenant).ok()?, ServerId::new(server).ok()?))
}

/// Handles one message to its settlement; returns its subject (its lane).
async fn handle(service: &Service, owners: &Owners, message: Message) -> String {
    let subject = message.subject.to_string();
    let Some((tenant, server)) = parse_subject(&subject) else {
        warn!(subject, "agent message on an unexpected subject; dropped");
        settle(&message, AckKind::Term).await;
        return subject;
    };
    let parsed: AgentMessage = match serde_json::from_slice(&message.payload) {
        Ok(parsed) => parsed,
        Err(e) => {
            warn!(error = %e, subject, "unparseable agent message; dropped");
            settle(&message, AckKind::Term).await;
            return subject;
        }
    };
    let from = Sender {
        tenant: &tenant,
        server: &server,
    };
    let mut pause = ATTEMPT_BACKOFF;
    for attempt in 1..=ATTEMPTS {
        let applied = match &parsed {
            AgentMessage::Progress { .. } => progress(service, owners, from, &parsed).await,
            _ => apply(service, owners, from, &parsed).await,
        };
        match applied {
            Ok(()) => {
                settle(&message, AckKind::Ack).await;
                return subject;
            }
            Err(e) if attempt == ATTEMPTS => {
                warn!(error = %chain(&e), deployment.id = %parsed.deployment_id(), kind = kind(&parsed), "cannot store or report an agent message; will retry");
            }
            Err(e) => {
                debug!(error = %chain(&e), deployment.id = %parsed.deployment_id(), attempt, "cannot store or report an agent message; retrying");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
        }
    }
    settle(&message, AckKind::Nak(Some(RETRY_DELAY))).await;
    subject
}

/// Where a message came from, by its subject.
#[derive(Debug, Clone, Copy)]
struct Sender<'a> {
    tenant: &'a TenantId,
    server: &'a ServerId,
}

/// Applies `delivered`, `started` or `finished` to the record, then reports what the
/// record shows of it.
async fn apply(
    service: &Service,
    owners: &Owners,
    from: Sender<'_>,
    parsed: &AgentMessage,
) -> Result<(), HandleError> {
    let (tenant, server) = (from.tenant, from.server);
    let id = parsed.deployment_id();
    let kind = kind(parsed);
    let now = OffsetDateTime::now_utc();
    let mut foreign = false;
    let updated = service
        .store
        .update_deployment(tenant, id, |record| {
            let d = &record.deployment;
            if &d.tenant != tenant || &d.server_id != server {
                foreign = true;
                return false;
            }
            match parsed {
                AgentMessage::Delivered { at, .. } => apply_delivered(record, *at),
                AgentMessage::Started { at, .. } => apply_started(record, *at, now),
                AgentMessage::Progress { .. } => false,
                AgentMessage::Finished { result, .. } => apply_finished(record, result, now),
            }
        })
        .await?;
    let Some(u) = updated else {
        warn!(deployment.id = %id, server.id = %server, kind, "agent message for an unknown deployment; ignored");
        return Ok(());
    };
    let d = &u.record.deployment;
    if foreign {
        warn!(
            deployment.id = %id, server.id = %server, owner = %d.server_id, kind,
            "agent message from a server that does not own the deployment; ignored"
        );
        return Ok(());
    }
    owners.remember(d);
    if d.status.is_terminal() && tenant == &service.config.tenant {
        service.timeouts.remove(id);
    }
    if u.changed {
        info!(deployment.id = %id, server.id = %server, status = %d.status, kind, "deployment status changed");
    }
    match reported(parsed, d) {
        Some(ty) => service.events.publish(&u.record.event(ty)).await?,
        None => {
            debug!(deployment.id = %id, status = %d.status, kind, "agent message changes nothing; ignored")
        }
    }
    Ok(())
}

/// The event reporting `message` when the record `d` shows its effect, whether this
/// copy of the message or an earlier one had it (the times tell); `None` when the record
/// shows something else: a `finished` after the gateway timed the deployment out, a
/// late `started`, a `delivered` the agent sent again for a redelivered request.
fn reported(message: &AgentMessage, d: &Deployment) -> Option<EventType> {
    match message {
        AgentMessage::Delivered { at, .. } => {
            (d.delivered_at == Some(*at)).then_some(EventType::DeploymentDelivered)
        }
        AgentMessage::Started { at, .. } => {
            (d.started_at == Some(*at)).then_some(EventType::DeploymentStarted)
        }
        AgentMessage::Progress { .. } => None,
        AgentMessage::Finished { result, .. } => {
            let this_end = d.status == result.status && d.finished_at == Some(result.finished_at);
            this_end.then(|| end_event_type(d)).flatten()
        }
    }
}

/// Reports a batch of lines a running hook printed, once it is sure the deployment is
/// the sending server's; nothing is stored.
async fn progress(
    service: &Service,
    owners: &Owners,
    from: Sender<'_>,
    parsed: &AgentMessage,
) -> Result<(), HandleError> {
    let (tenant, server) = (from.tenant, from.server);
    let AgentMessage::Progress {
        deployment_id: id,
        progress,
        ..
    } = parsed
    else {
        return Ok(());
    };
    if &progress.deployment_id != id || &progress.server_id != server {
        warn!(deployment.id = %id, server.id = %server, "progress message naming another deployment or server; ignored");
        return Ok(());
    }
    let owner = match owners.get(tenant, id) {
        Some(owner) => owner,
        None => match service.store.deployment(tenant, id).await? {
            Some(record) => owners.remember(&record.deployment),
            None => {
                warn!(deployment.id = %id, server.id = %server, "progress for an unknown deployment; ignored");
                return Ok(());
            }
        },
    };
    if &owner.server != server {
        warn!(deployment.id = %id, server.id = %server, owner = %owner.server, "progress from a server that does not own the deployment; ignored");
        return Ok(());
    }
    let event = CloudEvent::new(
        EventType::DeploymentProgress,
        tenant,
        progress_event_id(id, progress.seq),
        format!("deployments/{id}"),
        progress,
    )
    .server(server)
    .stack(owner.stack.as_ref())
    .deployment(id);
    service.events.publish(&event).await?;
    Ok(())
}

/// The message's kind, for logs.
fn kind(message: &AgentMessage) -> &'static str {
    match message {
        AgentMessage::Delivered { .. } => "delivered",
        AgentMessage::Started { .. } => "started",
        AgentMessage::Progress { .. } => "progress",
        AgentMessage::Finished { .. } => "finished",
    }
}

async fn settle(message: &Message, kind: AckKind) {
    if let Err(e) = message.ack_with(kind).await {
        // The broker redelivers after the ack wait; applying again is harmless.
        debug!(error = %e, "cannot acknowledge an agent message");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_response_subjects() {
        let (t, s) = parse_subject("flue.acme.resp.web-1").expect("valid");
        assert_eq!((t.as_str(), s.as_str()), ("acme", "web-1"));
        for bad in [
            "flue.acme.req.web1",
            "flue.acme.resp",
            "flue.acme.resp.a.b",
            "x.acme.resp.w",
        ] {
            assert!(parse_subject(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_message_is_reported_when_the_record_shows_this_copy_of_it() {
        use flue_proto::{DeploymentResult, DeploymentStatus, PROTOCOL_VERSION};
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let at = |s: i64| t0 + time::Duration::seconds(s);
        let mut d: Deployment = serde_json::from_value(serde_json::json!({
            "id": "d1", "tenant": "t", "server_id": "s1", "config_id": "c1", "group": "script",
            "name": "d1", "action": "CREATE", "status": "QUEUED", "timeout_secs": 60,
            "created_at": "1970-01-01T00:00:00Z", "updated_at": "1970-01-01T00:00:00Z",
            "expires_at": "1970-01-01T00:01:00Z"
        }))
        .expect("deployment");
        let id = d.id.clone();
        let delivered = |s| AgentMessage::Delivered {
            v: PROTOCOL_VERSION,
            deployment_id: id.clone(),
            at: at(s),
        };
        let started = AgentMessage::Started {
            v: PROTOCOL_VERSION,
            deployment_id: id.clone(),
            at: at(2),
        };
        let result = DeploymentResult {
            status: DeploymentStatus::Complete,
            status_reason: None,
            outputs: Default::default(),
            deploy_stdout: String::new(),
            deploy_stderr: String::new(),
            deploy_status_code: Some(0),
            started_at: Some(at(2)),
            finished_at: at(3),
        };
        let finished = AgentMessage::Finished {
            v: PROTOCOL_VERSION,
            deployment_id: id.clone(),
            result: result.clone(),
        };
        assert_eq!(reported(&delivered(1), &d), None);
        d.delivered_at = Some(at(1));
        assert_eq!(
            reported(&delivered(1), &d),
            Some(EventType::DeploymentDelivered)
        );
        assert_eq!(reported(&delivered(9), &d), None, "sent again later");
        assert_eq!(reported(&started, &d), None);
        d.started_at = Some(at(2));
        assert_eq!(reported(&started, &d), Some(EventType::DeploymentStarted));
        assert_eq!(reported(&finished, &d), None);
        d.status = DeploymentStatus::Failed;
        d.status_reason = Some(crate::record::TIMED_OUT.into());
        d.finished_at = Some(at(4));
        assert_eq!(reported(&finished, &d), None, "the gateway timed it out");
        d.status = DeploymentStatus::Complete;
        d.status_reason = None;
        d.finished_at = Some(at(3));
        assert_eq!(
            reported(&finished, &d),
            Some(EventType::DeploymentCompleted)
        );
    }
}
