//! The response consumer: applies what agents report to the deployment records.
//!
//! It pulls the shared durable consumer `flue-gateway` on `FLUE_RESP` and acknowledges a
//! message only once its effect is in the KV bucket, so a crash or a broker restart
//! at any point means a redelivery, which the idempotent transitions absorb.

use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use flue_proto::{AgentMessage, ServerId, TenantId};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::error::chain;
use crate::record::{apply_delivered, apply_finished, apply_started};
use crate::service::Service;

/// First pause after the consumer failed; doubled up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Longest pause between two attempts to get the consumer back.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Agent messages applied concurrently by one gateway.
const MAX_IN_FLIGHT: usize = 64;
/// Delay before a message whose effect could not be stored is offered again.
const RETRY_DELAY: Duration = Duration::from_secs(1);

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

/// Pulls the consumer until its message stream fails or ends, applying up to
/// [`MAX_IN_FLIGHT`] messages at once.
///
/// Order does not matter for correctness: every transition is a compare-and-set, a
/// terminal status never changes, and `started` after `finished` changes nothing.
async fn consume_until_error(service: &Service) -> Result<(), String> {
    let consumer = service
        .broker
        .response_consumer()
        .await
        .map_err(|e| chain(&e))?;
    let mut messages = consumer.messages().await.map_err(|e| chain(&e))?;
    debug!("response consumer pulling");
    let mut in_flight = FuturesUnordered::new();
    loop {
        tokio::select! {
            Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
            next = messages.next(), if in_flight.len() < MAX_IN_FLIGHT => match next {
                Some(Ok(message)) => in_flight.push(handle(service, message)),
                Some(Err(e)) => {
                    // Finish what was started; unacked messages are redelivered anyway.
                    while in_flight.next().await.is_some() {}
                    return Err(chain(&e));
                }
                None => break,
            },
        }
    }
    while in_flight.next().await.is_some() {}
    Ok(())
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

async fn handle(service: &Service, message: Message) {
    let message = &message;
    let subject = message.subject.as_str();
    let Some((tenant, server)) = parse_subject(subject) else {
        warn!(subject, "agent message on an unexpected subject; dropped");
        settle(message, AckKind::Term).await;
        return;
    };
    let parsed: AgentMessage = match serde_json::from_slice(&message.payload) {
        Ok(parsed) => parsed,
        Err(e) => {
            warn!(error = %e, subject, "unparseable agent message; dropped");
            settle(message, AckKind::Term).await;
            return;
        }
    };
    let id = parsed.deployment_id().clone();
    let now = OffsetDateTime::now_utc();
    let mut foreign = false;
    let updated = service
        .store
        .update_deployment(&tenant, &id, |record| {
            let d = &record.deployment;
            if d.tenant != tenant || d.server_id != server {
                foreign = true;
                return false;
            }
            match &parsed {
                AgentMessage::Delivered { at, .. } => apply_delivered(record, *at),
                AgentMessage::Started { at, .. } => apply_started(record, *at, now),
                AgentMessage::Progress { .. } => false,
                AgentMessage::Finished { result, .. } => apply_finished(record, result, now),
            }
        })
        .await;
    let kind = match &parsed {
        AgentMessage::Delivered { .. } => "delivered",
        AgentMessage::Started { .. } => "started",
        AgentMessage::Progress { .. } => "progress",
        AgentMessage::Finished { .. } => "finished",
    };
    match updated {
        Ok(None) => {
            warn!(deployment.id = %id, server.id = %server, kind, "agent message for an unknown deployment; ignored")
        }
        Ok(Some(u)) if foreign => warn!(
            deployment.id = %id, server.id = %server, owner = %u.record.deployment.server_id, kind,
            "agent message from a server that does not own the deployment; ignored"
        ),
        Ok(Some(u)) => {
            let d = &u.record.deployment;
            if d.status.is_terminal() && tenant == service.config.tenant {
                service.timeouts.remove(&id);
            }
            if u.changed {
                info!(deployment.id = %id, server.id = %server, status = %d.status, "deployment status changed");
            } else {
                debug!(deployment.id = %id, status = %d.status, kind, "agent message changes nothing; ignored");
            }
        }
        Err(e) => {
            warn!(error = %chain(&e), deployment.id = %id, kind, "cannot store an agent message; will retry");
            settle(message, AckKind::Nak(Some(RETRY_DELAY))).await;
            return;
        }
    }
    settle(message, AckKind::Ack).await;
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
}
