//! The response consumer: applies what agents report to the deployment records, and
//! reports each step as a lifecycle event.
//!
//! It pulls the shared durable consumer `flue-gateway` on `FLUE_RESP` in its pinned
//! priority group, so that of several gateways one at a time gets the answers (the
//! broker moves the pin when that one stops pulling; [`takeover`] keeps the order across
//! the move; [`pull`] is the loop), and acknowledges a
//! message only once its effect is in the KV bucket and its event in the event stream,
//! so a crash or a broker restart at any point means a redelivery, which the idempotent
//! transitions and the events' stable ids absorb. A redelivered message whose effect
//! the record already shows is reported again: the first report may be what was lost.
//! A *new* message whose effect the record already shows (the agent sent it again,
//! say answering from its ledger) is not: the copy that had the effect is reported,
//! now or when it is redelivered, so no event is doubled even past the event stream's
//! duplicate window.
//!
//! An answer applies only to the request it answers: it names the digest of the request
//! message, and one naming another digest than the deployment's record (the answer to a
//! stray or forged message naming the deployment) is logged as stray and acknowledged,
//! never retried. A message the agent could not read at all comes back as `rejected` and
//! is reported as `server.request_rejected`, attributed to no deployment.
//!
//! Before anything else, a message must be signed by the current key of the server whose
//! subject it came on (`Server.keys.signing`, the agent's NATS user key): one that is
//! unsigned, badly signed or from a server without a key is terminated, logged and
//! reported as `server.answer_rejected`, and nothing of it is applied.
//!
//! Messages of one deployment are handled one after the other in stream order,
//! different deployments' side by side (those of one server too: a backlog of a few
//! servers drains as fast as one of many), so a deployment's events come out in the
//! order its agent reported them: `delivered`, `started`, its progress, then how it
//! ended. A message naming no deployment (`rejected`) has its server's lane. A message
//! whose effect cannot be stored or reported yet is retried in place (see
//! [`ATTEMPTS`]), never handed back behind later ones. Should one still come after
//! later ones were reported (its ack wait ran out while its gateway was stalled), it is
//! not reported when that would put it out of order: a `delivered` once the deployment
//! started, a `started` or a progress batch once it ended, a progress batch behind a
//! later one. The steps it skipped are reported instead just before the later answer
//! that went past them, from the record ([`Skipped`]): an agent sends `delivered`
//! before anything else and `started` before the result of a hook it ran, so an answer
//! that finds the record without them proves them. Only progress batches are lost
//! rather than reported late; the record, and the final result's full output, are not.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use flue_proto::event::{
    AnswerRejectedEventData, RequestRejectedEventData, answer_rejected_event_id, progress_event_id,
    request_rejected_event_id,
};
use flue_proto::retry::{Delays, Policy};
use flue_proto::seal;
use flue_proto::signing::{self, Refusal};
use flue_proto::{
    AgentMessage, CloudEvent, Deployment, DeploymentId, EventType, RequestDigest, ServerId,
    StackId, TenantId,
};
use time::OffsetDateTime;
use tracing::{debug, info, warn};

use crate::broker::BrokerError;
use crate::error::chain;
use crate::fit::fit_record;
use crate::record::{
    DeploymentRecord, answers_request, apply_delivered, apply_finished, apply_started,
    end_event_type,
};
use crate::sealing::{self, SealFailure, settle_hidden_outputs};
use crate::store::{self, StoreError, Updated};

mod answers;
mod lanes;
mod pull;
mod signers;
mod takeover;

pub use answers::Answers;
pub use pull::consume;
pub use signers::{SignedMessage, Signers};

/// Failed attempts at a message after which each further failure is a warning.
///
/// A message is never handed back to the broker for a failure that may pass (the KV
/// store or the event stream unreachable: a NATS node lost, a leader being elected): it
/// would come again after the ones that followed it, and its event would be lost. It is
/// retried in place, kept from redelivery by in-progress acknowledgements, and its
/// deployment's later messages wait behind it.
const ATTEMPTS: u32 = 4;
/// Pauses between two attempts at a message: 100 ms doubling up to 2 s.
const ATTEMPT_RETRY: Policy = Policy::new(Duration::from_millis(100), Duration::from_secs(2));
/// Deployments whose server and stack are remembered for progress messages; the
/// memory is cleared when it grows past this.
const MAX_OWNERS: usize = 4096;

/// Why a message could not be handled (it is retried).
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandleError {
    /// The record could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The event could not be published.
    #[error(transparent)]
    Event(#[from] BrokerError),
}

/// The server and stack of recently seen deployments, so that progress messages (many
/// per deployment) are checked without reading the record each time.
#[derive(Debug, Default)]
struct Owners {
    known: Mutex<HashMap<(TenantId, DeploymentId), Owner>>,
}

/// Who a deployment belongs to (never changes), and how far its reports went.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    server: ServerId,
    stack: Option<StackId>,
    /// The deployment ended: its final event is out, progress would come after it.
    ended: bool,
    /// The highest progress `seq` reported (0: none).
    last_progress: u64,
    /// Digest of the request recorded for it: progress naming another is stray.
    digest: Option<RequestDigest>,
}

impl Owners {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(TenantId, DeploymentId), Owner>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, tenant: &TenantId, id: &DeploymentId) -> Option<Owner> {
        self.lock().get(&(tenant.clone(), id.clone())).cloned()
    }

    /// Remembers `record` as it now stands, keeping what is known of its progress.
    fn remember(&self, record: &DeploymentRecord) -> Owner {
        let d = &record.deployment;
        let mut known = self.lock();
        if known.len() >= MAX_OWNERS {
            known.clear();
        }
        let owner = known
            .entry((d.tenant.clone(), d.id.clone()))
            .or_insert_with(|| Owner {
                server: d.server_id.clone(),
                stack: d.stack_id.clone(),
                ended: false,
                last_progress: 0,
                digest: record.request_digest.clone(),
            });
        owner.ended |= d.status.is_terminal();
        owner.clone()
    }

    /// Progress batch `seq` of `id` was reported.
    fn progressed(&self, tenant: &TenantId, id: &DeploymentId, seq: u64) {
        if let Some(owner) = self.lock().get_mut(&(tenant.clone(), id.clone())) {
            owner.last_progress = owner.last_progress.max(seq);
        }
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

/// Handles one message to its settlement.
async fn handle(service: &Answers, owners: &Owners, message: Message) {
    let subject = message.subject.as_str();
    let Some((tenant, server)) = parse_subject(subject) else {
        warn!(subject, "agent message on an unexpected subject; dropped");
        settle(&message, AckKind::Term).await;
        return;
    };
    let mut delays = ATTEMPT_RETRY.delays();
    loop {
        match authentic(service, (&tenant, &server), &message).await {
            Ok(Ok(())) => break,
            Ok(Err(refusal)) => {
                refuse(service, (&tenant, &server), &message, refusal).await;
                settle(&message, AckKind::Term).await;
                return;
            }
            Err(e) => {
                debug!(error = %chain(&e), server.id = %server, "cannot read the server's key to check an answer; retrying");
                hold_on(&message, &mut delays).await;
            }
        }
    }
    let parsed: AgentMessage = match serde_json::from_slice(&message.payload) {
        Ok(parsed) => parsed,
        Err(e) => {
            warn!(error = %e, subject, "unparseable agent message; dropped");
            settle(&message, AckKind::Term).await;
            return;
        }
    };
    // A message handled before (by a gateway that died, or handed back) may have had its
    // effect without its event being published.
    let redelivered = message.info().map_or(true, |info| info.delivered > 1);
    let mut delays = ATTEMPT_RETRY.delays();
    // What the attempt that changed the record found skipped, for the attempts after it.
    let skipped = Mutex::new(Skipped::default());
    for attempt in 1.. {
        let from = Sender {
            tenant: &tenant,
            server: &server,
            handled_before: redelivered || attempt > 1,
            skipped: Some(&skipped),
        };
        let applied = match &parsed {
            AgentMessage::Progress { .. } => progress(service, owners, from, &parsed).await,
            AgentMessage::Rejected { .. } => rejected(service, from, &parsed).await,
            _ => apply(service, owners, from, &parsed).await,
        };
        match applied {
            Ok(()) => {
                settle(&message, AckKind::Ack).await;
                return;
            }
            Err(HandleError::Store(StoreError::Decode { key, source, .. })) => {
                // No retry can decode it: terminate the message, so that it is never
                // offered again and its lane moves on. It stays in the stream
                // (parked) until its max age; the broker reports the termination as an
                // advisory.
                warn!(key, error = %source, deployment.id = ?parsed.deployment_id(), server.id = %server, kind = kind(&parsed), "agent message for an undecodable deployment record; parked");
                settle(&message, AckKind::Term).await;
                return;
            }
            Err(e) if attempt >= ATTEMPTS => {
                warn!(error = %chain(&e), deployment.id = ?parsed.deployment_id(), kind = kind(&parsed), attempt, "cannot store or report an agent message; retrying");
                hold_on(&message, &mut delays).await;
            }
            Err(e) => {
                debug!(error = %chain(&e), deployment.id = ?parsed.deployment_id(), attempt, "cannot store or report an agent message; retrying");
                hold_on(&message, &mut delays).await;
            }
        }
    }
}

/// Before another attempt at `message`: tells the broker it is still being handled (so it
/// is not delivered again meanwhile), then pauses for the next of `delays`.
async fn hold_on(message: &Message, delays: &mut Delays) {
    settle(message, AckKind::Progress).await;
    tokio::time::sleep(delays.next_delay()).await;
}

/// Whether `message` was signed by the current key of the server whose subject it came
/// on ([`Signers`]); an unsigned one passes only with `--insecure-unsigned-answers`.
async fn authentic(
    service: &Answers,
    who: (&TenantId, &ServerId),
    message: &Message,
) -> Result<Result<(), Refusal>, StoreError> {
    let header = |name: &str| {
        message
            .headers
            .as_ref()
            .and_then(|h| h.get(name))
            .map(|v| v.as_str())
    };
    let signed = SignedMessage {
        claims: header(signing::ANSWER_CLAIMS_HEADER),
        signature: header(signing::SIGNATURE_HEADER),
        body: &message.payload,
    };
    if service.insecure_unsigned_answers && signed.claims.is_none() && signed.signature.is_none() {
        return Ok(Ok(()));
    }
    service.signers.check(&service.servers, who, &signed).await
}

/// Reports an agent message refused for its signature: logged (never its contents) and
/// `server.answer_rejected`; nothing of it is applied.
async fn refuse(
    service: &Answers,
    (tenant, server): (&TenantId, &ServerId),
    message: &Message,
    refusal: Refusal,
) {
    let stream_seq = message.info().map_or(0, |info| info.stream_sequence);
    warn!(server.id = %server, stream_seq, code = %refusal.code, reason = %refusal.detail, "agent message refused: not signed by the server's current key; dropped");
    let data = AnswerRejectedEventData {
        server_id: server.clone(),
        stream_seq,
        code: refusal.code,
        reason: refusal.detail,
    };
    let event = CloudEvent::new(
        EventType::ServerAnswerRejected,
        tenant,
        answer_rejected_event_id(server, stream_seq),
        format!("servers/{server}"),
        &data,
    )
    .server(server);
    service.events.emit(&event).await;
}

/// Where a message came from, by its subject, and whether it was handled before.
#[derive(Debug, Clone, Copy)]
struct Sender<'a> {
    tenant: &'a TenantId,
    server: &'a ServerId,
    /// This very message was handled before (a redelivery, or a retry in place), so its
    /// effect may be recorded without its event being out.
    handled_before: bool,
    /// The steps this message's change of the record went past (kept across attempts
    /// at it); `None` for a polling server, whose answers are applied as they come.
    skipped: Option<&'a Mutex<Skipped>>,
}

/// The steps of a deployment that an agent's answer finds the record without, so that
/// their events are reported, in order, just before this answer's: the agent took them
/// (it sends `delivered` first, and `started` before the result of a hook it ran), but
/// their answers come after this one (a gateway that held them stalled past the ack
/// wait, or died, and they were delivered again behind it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Skipped {
    delivered: bool,
    started: bool,
}

impl Skipped {
    /// What `message` skips on `record` as it was before `message` changed it. A
    /// `delivered` reported already (or reported as skipped by `started`) leaves the
    /// record QUEUED no longer, and a result whose hook never started skips no `started`.
    fn on(record: &DeploymentRecord, message: &AgentMessage) -> Self {
        let d = &record.deployment;
        let queued = d.status == flue_proto::DeploymentStatus::Queued;
        let delivered = queued && d.delivered_at.is_none();
        match message {
            AgentMessage::Started { .. } => Self {
                delivered,
                started: false,
            },
            AgentMessage::Finished { result, .. } => Self {
                delivered,
                started: queued && result.started_at.is_some(),
            },
            _ => Self::default(),
        }
    }

    /// The skipped steps' event types, in their order.
    fn events(self) -> impl Iterator<Item = EventType> {
        [
            (self.delivered, EventType::DeploymentDelivered),
            (self.started, EventType::DeploymentStarted),
        ]
        .into_iter()
        .filter_map(|(skipped, ty)| skipped.then_some(ty))
    }
}

/// Applies `delivered`, `started` or `finished` to the record, then reports what the
/// record shows of it.
async fn apply(
    service: &Answers,
    owners: &Owners,
    from: Sender<'_>,
    parsed: &AgentMessage,
) -> Result<(), HandleError> {
    let Some(id) = parsed.deployment_id() else {
        return Ok(());
    };
    let (received, refused) = received_outputs(service, from, parsed).await?;
    let parsed = received.as_ref().unwrap_or(parsed);
    apply_received(service, owners, from, id, parsed, &refused).await
}

/// What a polling server did (see [`crate::poll`]): `delivered` when it first read the
/// deployment in its metadata, `finished` for its signal. Applied exactly as the same
/// answer from an agent of `server`: the same transition, record fitting, timeout
/// removal and event. Hidden outputs must be sealed to the gateway already (a polling
/// server has no key of its own to seal them with).
pub(crate) async fn apply_polled(
    service: &Answers,
    (tenant, server): (&TenantId, &ServerId),
    message: &AgentMessage,
) -> Result<(), HandleError> {
    let Some(id) = message.deployment_id() else {
        return Ok(());
    };
    let from = Sender {
        tenant,
        server,
        handled_before: false,
        skipped: None,
    };
    apply_received(
        service,
        &Owners::default(),
        from,
        id,
        message,
        &BTreeSet::new(),
    )
    .await
}

/// [`apply`] once the outputs are as they are stored (`refused`: sealed ones that did
/// not open).
async fn apply_received(
    service: &Answers,
    owners: &Owners,
    from: Sender<'_>,
    id: &DeploymentId,
    parsed: &AgentMessage,
    refused: &BTreeSet<String>,
) -> Result<(), HandleError> {
    let (tenant, server) = (from.tenant, from.server);
    let kind = kind(parsed);
    let applied = apply_answer(
        &service.deployments,
        (tenant, server),
        id,
        (parsed, refused),
        service.broker.payload_limit(),
        OffsetDateTime::now_utc(),
    )
    .await?;
    let u = match applied {
        Applied::Unknown => {
            warn!(deployment.id = %id, server.id = %server, kind, "agent message for an unknown deployment; ignored");
            return Ok(());
        }
        Applied::Foreign(u) => {
            warn!(
                deployment.id = %id, server.id = %server, owner = %u.record.deployment.server_id, kind,
                "agent message from a server that does not own the deployment; ignored"
            );
            return Ok(());
        }
        Applied::Stray => {
            warn_stray(id, server, kind, parsed);
            return Ok(());
        }
        Applied::Done(u, skipped) => {
            if u.changed
                && let Some(carried) = from.skipped
            {
                *carried.lock().unwrap_or_else(|p| p.into_inner()) = skipped;
            }
            u
        }
    };
    let d = &u.record.deployment;
    owners.remember(&u.record);
    if d.status.is_terminal() && tenant == &service.tenant {
        service.timeouts.remove(id);
    }
    if u.changed {
        info!(deployment.id = %id, server.id = %server, status = %d.status, kind, "deployment status changed");
    }
    match reported(parsed, d, u.changed || from.handled_before) {
        Some(ty) => {
            let skipped = from
                .skipped
                .map(|carried| *carried.lock().unwrap_or_else(|p| p.into_inner()))
                .unwrap_or_default();
            for step in skipped.events() {
                info!(deployment.id = %id, server.id = %server, kind, step = %step, "a step's answer comes after a later one; reporting the step first");
                service
                    .events
                    .publish_deployment_step(&u.record, step)
                    .await?;
            }
            service.events.publish_deployment(&u.record, ty).await?
        }
        None => {
            debug!(deployment.id = %id, status = %d.status, kind, "agent message changes nothing; ignored")
        }
    }
    Ok(())
}

/// What applying an answer to its deployment's record came to.
#[derive(Debug)]
pub(crate) enum Applied {
    /// No such deployment.
    Unknown,
    /// The deployment is another server's (or another tenant's): its record as it is.
    Foreign(Updated),
    /// The answer is not to the request the record holds (an earlier request's, or a
    /// forged one): the record as it is.
    Stray,
    /// The record once the answer is applied (`changed`: this call wrote it; not when
    /// the record had gone past it, or it was applied before), and the steps this change
    /// went past (none when nothing changed).
    Done(Updated, Skipped),
}

/// Applies `parsed` (`delivered`, `started` or `finished`; `refused`: the sealed outputs
/// that did not open), sent by `server` of `tenant`, to deployment `id`'s record under
/// compare-and-set, at `now`: only an answer of the server that owns the deployment to
/// the request its record holds changes it, and each step only forward. A finished
/// record is made to fit `payload_limit`.
pub(crate) async fn apply_answer(
    deployments: &store::Deployments,
    (tenant, server): (&TenantId, &ServerId),
    id: &DeploymentId,
    (parsed, refused): (&AgentMessage, &BTreeSet<String>),
    payload_limit: usize,
    now: OffsetDateTime,
) -> Result<Applied, StoreError> {
    let mut foreign = false;
    let mut stray = false;
    let mut skipped = Skipped::default();
    let updated = deployments
        .update(tenant, id, |record| {
            skipped = Skipped::default();
            let d = &record.deployment;
            if &d.tenant != tenant || &d.server_id != server {
                foreign = true;
                return false;
            }
            if !answers_request(record, parsed.request_digest()) {
                stray = true;
                return false;
            }
            let past = Skipped::on(record, parsed);
            let changed = match parsed {
                AgentMessage::Delivered { at, .. } => apply_delivered(record, *at),
                AgentMessage::Started { at, .. } => apply_started(record, *at, now),
                AgentMessage::Progress { .. } | AgentMessage::Rejected { .. } => false,
                AgentMessage::Finished { result, .. } => {
                    let changed = apply_finished(record, result, now);
                    if changed {
                        settle_hidden_outputs(record, refused);
                        fit_record(record, payload_limit);
                    }
                    changed
                }
            };
            if changed {
                skipped = past;
            }
            changed
        })
        .await?;
    Ok(match updated {
        None => Applied::Unknown,
        Some(u) if foreign => Applied::Foreign(u),
        Some(_) if stray => Applied::Stray,
        Some(u) => Applied::Done(u, skipped),
    })
}

/// A `finished` answer with sealed outputs, as it is stored: each opened from the
/// sender's agent and sealed again to the gateway, with the names that did not open
/// ([`sealing::received_outputs`]). `None` when there is nothing to open.
async fn received_outputs(
    service: &Answers,
    from: Sender<'_>,
    parsed: &AgentMessage,
) -> Result<(Option<AgentMessage>, BTreeSet<String>), HandleError> {
    let AgentMessage::Finished { result, .. } = parsed else {
        return Ok((None, BTreeSet::new()));
    };
    if !result.outputs.values().any(seal::is_sealed) {
        return Ok((None, BTreeSet::new()));
    }
    let key = match service.servers.get(from.tenant, from.server).await? {
        Some(server) => sealing::server_key(&server),
        None => Err(SealFailure::NoServerKey(from.server.clone())),
    };
    let mut received = parsed.clone();
    let mut refused = BTreeSet::new();
    if let AgentMessage::Finished { result, .. } = &mut received {
        refused = sealing::received_outputs(&mut result.outputs, &service.sealing, &key);
    }
    if !refused.is_empty() {
        warn!(server.id = %from.server, outputs = ?refused, "sealed outputs that do not open from the server's agent; refused");
    }
    Ok((Some(received), refused))
}

/// The event reporting `message` when the record `d` shows its effect (the times tell)
/// and `mine`: this message had the effect now, or may have had it when it was handled
/// before. `None` when the record shows something else (a `finished` after the gateway
/// timed the deployment out, a `delivered` the agent sent again for a redelivered
/// request), when another copy of the message had the effect (that copy is reported),
/// and when the deployment went past the step (a `delivered` once it started, a `started`
/// once it ended): reporting it now would put it after the later events.
fn reported(message: &AgentMessage, d: &Deployment, mine: bool) -> Option<EventType> {
    if !mine {
        return None;
    }
    let ended = d.status.is_terminal();
    match message {
        AgentMessage::Delivered { at, .. } => {
            (d.delivered_at == Some(*at) && d.started_at.is_none() && !ended)
                .then_some(EventType::DeploymentDelivered)
        }
        AgentMessage::Started { at, .. } => {
            (d.started_at == Some(*at) && !ended).then_some(EventType::DeploymentStarted)
        }
        AgentMessage::Progress { .. } | AgentMessage::Rejected { .. } => None,
        AgentMessage::Finished { result, .. } => {
            // The finish time alone says the record ended with this result: its status may
            // differ (a result the record could not hold fails the deployment, see `fit`).
            let this_end = d.status.is_terminal() && d.finished_at == Some(result.finished_at);
            this_end.then(|| end_event_type(d)).flatten()
        }
    }
}

/// Reports a batch of lines a running hook printed, once it is sure the deployment is
/// the sending server's; nothing is stored.
async fn progress(
    service: &Answers,
    owners: &Owners,
    from: Sender<'_>,
    parsed: &AgentMessage,
) -> Result<(), HandleError> {
    let (tenant, server) = (from.tenant, from.server);
    let AgentMessage::Progress {
        deployment_id: id,
        progress,
        request_digest,
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
        None => match service.deployments.get(tenant, id).await? {
            Some(record) => owners.remember(&record),
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
    if owner.digest.is_some() && &owner.digest != request_digest {
        warn_stray(id, server, "progress", parsed);
        return Ok(());
    }
    if owner.ended || progress.seq <= owner.last_progress {
        // Late (redelivered after later messages of the deployment were reported) or
        // reported already: now it would come out of order.
        debug!(deployment.id = %id, seq = progress.seq, last = owner.last_progress, ended = owner.ended, "late progress not reported");
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
    owners.progressed(tenant, id, progress.seq);
    Ok(())
}

/// Reports a message the agent could not read on its request queue as
/// `server.request_rejected`, attributed to no deployment; nothing is stored.
async fn rejected(
    service: &Answers,
    from: Sender<'_>,
    parsed: &AgentMessage,
) -> Result<(), HandleError> {
    let AgentMessage::Rejected {
        stream_seq,
        request_digest,
        reason,
        code,
        ..
    } = parsed
    else {
        return Ok(());
    };
    let server = from.server;
    warn!(server.id = %server, stream_seq, digest = %request_digest, code = code.map_or("", |c| c.as_str()), reason, "agent rejected a message on its request queue");
    let data = RequestRejectedEventData {
        server_id: server.clone(),
        stream_seq: *stream_seq,
        request_digest: request_digest.clone(),
        reason: reason.clone(),
        code: *code,
    };
    let event = CloudEvent::new(
        EventType::ServerRequestRejected,
        from.tenant,
        request_rejected_event_id(server, *stream_seq, request_digest),
        format!("servers/{server}"),
        &data,
    )
    .server(server);
    service.events.publish(&event).await?;
    Ok(())
}

/// Logs an answer that is not about the request recorded for deployment `id`: it answers
/// a stray or forged message naming the deployment (or comes from an agent older than
/// request digests). It is acknowledged and dropped, never retried.
fn warn_stray(id: &DeploymentId, server: &ServerId, kind: &str, parsed: &AgentMessage) {
    warn!(
        deployment.id = %id, server.id = %server, kind,
        digest = parsed.request_digest().map_or("none", |d| d.as_str()),
        "stray agent answer: not about the request recorded for the deployment; ignored"
    );
}

/// The message's kind, for logs.
fn kind(message: &AgentMessage) -> &'static str {
    match message {
        AgentMessage::Delivered { .. } => "delivered",
        AgentMessage::Started { .. } => "started",
        AgentMessage::Progress { .. } => "progress",
        AgentMessage::Finished { .. } => "finished",
        AgentMessage::Rejected { .. } => "rejected",
    }
}

async fn settle(message: &Message, kind: AckKind) {
    if let Err(e) = message.ack_with(kind).await {
        // The broker redelivers after the ack wait; applying again is harmless.
        debug!(error = %e, "cannot acknowledge an agent message");
    }
}

#[cfg(test)]
mod tests;
