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
//! ended. Those of one deployment taken from the consumer together are handled together:
//! consecutive answers that move the record with one compare-and-set, their events
//! published in their order and their acknowledgements awaited together, then each
//! message acknowledged. A message naming no deployment (`rejected`) has its server's
//! lane. A message whose effect cannot be stored or reported yet is retried in place (see
//! [`ATTEMPTS`]), never handed back behind later ones. Should one still come after
//! later ones were reported (its ack wait ran out while its gateway was stalled), it is
//! not reported when that would put it out of order: a `delivered` once the deployment
//! started, a `started` or a progress batch once it ended, a progress batch behind a
//! later one. The steps it skipped are reported instead just before the later answer
//! that went past them, from the record ([`Skipped`], kept in the record, so reported
//! again with that answer's redelivery): an agent sends `delivered` before anything else
//! unless it starts the hook at once (then `started` stands for both), and `started`
//! before the result of a hook it ran, so an answer that finds the record without them
//! proves them. Only progress batches are lost rather than reported late; the record,
//! and the final result's full output, are not.

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
    DeploymentRecord, Skipped, answers_request, apply_delivered, apply_finished, apply_started,
    end_event_type, note_skipped,
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

/// An agent message taken from the consumer: its signature checked, its body read.
struct Received {
    message: Message,
    tenant: TenantId,
    server: ServerId,
    parsed: AgentMessage,
    /// Handled before (by a gateway that died, or handed back): it may have had its
    /// effect without its event being published.
    redelivered: bool,
}

/// Handles the messages of one lane (`pull::lane`: one deployment's, in stream order) to
/// their settlement. Consecutive answers that move the record (`delivered`, `started`,
/// `finished`) are applied together ([`settle_answers`]); progress and rejections one at
/// a time, in their place.
async fn handle(service: &Answers, owners: &Owners, messages: Vec<Message>) {
    let mut answers = Vec::new();
    for message in messages {
        let Some(received) = receive(service, message).await else {
            continue;
        };
        match received.parsed {
            AgentMessage::Delivered { .. }
            | AgentMessage::Started { .. }
            | AgentMessage::Finished { .. } => {
                // A lane is one deployment's; should one name another, it goes on its own.
                let id = received.parsed.deployment_id();
                if answers
                    .last()
                    .is_some_and(|last: &Received| last.parsed.deployment_id() != id)
                {
                    settle_answers(service, owners, std::mem::take(&mut answers)).await;
                }
                answers.push(received);
            }
            AgentMessage::Progress { .. } | AgentMessage::Rejected { .. } => {
                settle_answers(service, owners, std::mem::take(&mut answers)).await;
                settle_other(service, owners, received).await;
            }
        }
    }
    settle_answers(service, owners, answers).await;
}

/// `message` authenticated and read; `None` once it is settled for good (refused for its
/// signature, on an unexpected subject, unreadable: terminated).
async fn receive(service: &Answers, message: Message) -> Option<Received> {
    let subject = message.subject.as_str();
    let Some((tenant, server)) = parse_subject(subject) else {
        warn!(subject, "agent message on an unexpected subject; dropped");
        settle(&message, AckKind::Term).await;
        return None;
    };
    let mut delays = ATTEMPT_RETRY.delays();
    loop {
        match authentic(service, (&tenant, &server), &message).await {
            Ok(Ok(())) => break,
            Ok(Err(refusal)) => {
                refuse(service, (&tenant, &server), &message, refusal).await;
                settle(&message, AckKind::Term).await;
                return None;
            }
            Err(e) => {
                debug!(error = %chain(&e), server.id = %server, "cannot read the server's key to check an answer; retrying");
                hold_on(&[&message], &mut delays).await;
            }
        }
    }
    let parsed: AgentMessage = match serde_json::from_slice(&message.payload) {
        Ok(parsed) => parsed,
        Err(e) => {
            warn!(error = %e, subject, "unparseable agent message; dropped");
            settle(&message, AckKind::Term).await;
            return None;
        }
    };
    let redelivered = message.info().map_or(true, |info| info.delivered > 1);
    Some(Received {
        message,
        tenant,
        server,
        parsed,
        redelivered,
    })
}

/// Applies consecutive answers of one deployment (of one lane: same server) with one
/// write of its record, publishes their events together, then acknowledges them.
///
/// Acknowledged only once their effect is in the record and their events in the event
/// stream, with a plain ack (no reply awaited): a lost ack means a redelivery, which is
/// harmless: the record already shows the answers' effect, so nothing is written again,
/// and their events (and the steps they went past, kept in the record) are published
/// again under the same ids, which the broker drops within its duplicate window.
async fn settle_answers(service: &Answers, owners: &Owners, answers: Vec<Received>) {
    let Some(first) = answers.first() else {
        return;
    };
    let messages: Vec<&Message> = answers.iter().map(|r| &r.message).collect();
    let what = Settling {
        deployment: first.parsed.deployment_id(),
        server: &first.server,
        kind: &answers
            .iter()
            .map(|r| kind(&r.parsed))
            .collect::<Vec<_>>()
            .join(","),
    };
    let (answers, who) = (&answers, (&first.tenant, &first.server));
    settle_with(&messages, &what, |attempt| async move {
        // A retried answer may have had its effect in an attempt that failed after.
        let run: Vec<(&AgentMessage, bool)> = answers
            .iter()
            .map(|r| (&r.parsed, r.redelivered || attempt > 1))
            .collect();
        apply_run(service, owners, who, &run, true).await
    })
    .await;
}

/// Handles a progress batch or a rejection to its settlement.
async fn settle_other(service: &Answers, owners: &Owners, received: Received) {
    let Received {
        message,
        tenant,
        server,
        parsed,
        ..
    } = received;
    let what = Settling {
        deployment: parsed.deployment_id(),
        server: &server,
        kind: kind(&parsed),
    };
    let from = Sender {
        tenant: &tenant,
        server: &server,
    };
    let parsed = &parsed;
    settle_with(&[&message], &what, |_| async move {
        match parsed {
            AgentMessage::Progress { .. } => progress(service, owners, from, parsed).await,
            AgentMessage::Rejected { .. } => rejected(service, from, parsed).await,
            _ => Ok(()),
        }
    })
    .await;
}

/// What [`settle_with`] settles, for its logs.
struct Settling<'a> {
    deployment: Option<&'a DeploymentId>,
    server: &'a ServerId,
    /// The messages' kinds, in order.
    kind: &'a str,
}

/// Makes attempts (numbered from 1) at handling `messages` until one succeeds, then
/// acknowledges them. A failure no retry can mend (their deployment's record does not
/// decode) terminates them instead, so that they are never offered again and their lane
/// moves on: they stay in the stream (parked) until their max age, and the broker reports
/// the termination as an advisory. Any other failure may pass (the KV store or the event
/// stream unreachable): the messages are retried in place ([`hold_on`], see
/// [`ATTEMPTS`]), never handed back behind later ones.
async fn settle_with<F, Fut>(messages: &[&Message], what: &Settling<'_>, mut attempt: F)
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<(), HandleError>>,
{
    let mut delays = ATTEMPT_RETRY.delays();
    for n in 1.. {
        let settled = match attempt(n).await {
            Ok(()) => AckKind::Ack,
            Err(HandleError::Store(StoreError::Decode { key, source, .. })) => {
                warn!(key, error = %source, deployment.id = ?what.deployment, server.id = %what.server, kind = what.kind, messages = messages.len(), "agent messages for an undecodable deployment record; parked");
                AckKind::Term
            }
            Err(e) => {
                if n >= ATTEMPTS {
                    warn!(error = %chain(&e), deployment.id = ?what.deployment, server.id = %what.server, kind = what.kind, attempt = n, "cannot store or report agent messages; retrying");
                } else {
                    debug!(error = %chain(&e), deployment.id = ?what.deployment, server.id = %what.server, kind = what.kind, attempt = n, "cannot store or report agent messages; retrying");
                }
                hold_on(messages, &mut delays).await;
                continue;
            }
        };
        for message in messages {
            settle(message, settled).await;
        }
        return;
    }
}

/// Before another attempt at `messages`: tells the broker they are still being handled
/// (so they are not delivered again meanwhile), then pauses for the next of `delays`.
async fn hold_on(messages: &[&Message], delays: &mut Delays) {
    for message in messages {
        settle(message, AckKind::Progress).await;
    }
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

/// Where a message came from, by its subject.
#[derive(Debug, Clone, Copy)]
struct Sender<'a> {
    tenant: &'a TenantId,
    server: &'a ServerId,
}

/// What a polling server did (see [`crate::poll`]): `delivered` when it first read the
/// deployment in its metadata, `finished` for its signal. Applied exactly as the same
/// answer from an agent of `server`: the same transition, record fitting, timeout
/// removal and event (but no step reported as skipped: its answers are applied as they
/// come). Hidden outputs must be sealed to the gateway already (a polling server has no
/// key of its own to seal them with).
pub(crate) async fn apply_polled(
    service: &Answers,
    (tenant, server): (&TenantId, &ServerId),
    message: &AgentMessage,
) -> Result<(), HandleError> {
    apply_run(
        service,
        &Owners::default(),
        (tenant, server),
        &[(message, false)],
        false,
    )
    .await
}

/// Applies `run`, answers of one deployment sent by `server` of `tenant` in stream
/// order (each with whether it was handled before), to the record with one
/// compare-and-set, then reports what the record showed after each, in order, with the
/// steps each went past first when `report_skipped`, as one batch of events.
async fn apply_run(
    service: &Answers,
    owners: &Owners,
    (tenant, server): (&TenantId, &ServerId),
    run: &[(&AgentMessage, bool)],
    report_skipped: bool,
) -> Result<(), HandleError> {
    let Some(id) = run.first().and_then(|(m, _)| m.deployment_id()) else {
        return Ok(());
    };
    let mut received = Vec::with_capacity(run.len());
    for (parsed, _) in run {
        received.push(received_outputs(service, (tenant, server), parsed).await?);
    }
    let answers: Vec<(&AgentMessage, &BTreeSet<String>)> = run
        .iter()
        .zip(&received)
        .map(|((parsed, _), (opened, refused))| (opened.as_ref().unwrap_or(*parsed), refused))
        .collect();
    let kinds = || {
        answers
            .iter()
            .map(|(m, _)| kind(m))
            .collect::<Vec<_>>()
            .join(",")
    };
    let applied = apply_answers(
        &service.deployments,
        (tenant, server),
        id,
        &answers,
        service.broker.payload_limit(),
        OffsetDateTime::now_utc(),
    )
    .await?;
    let (u, steps) = match applied {
        Applied::Unknown => {
            warn!(deployment.id = %id, server.id = %server, kind = %kinds(), "agent message for an unknown deployment; ignored");
            return Ok(());
        }
        Applied::Foreign(u) => {
            warn!(
                deployment.id = %id, server.id = %server, owner = %u.record.deployment.server_id, kind = %kinds(),
                "agent message from a server that does not own the deployment; ignored"
            );
            return Ok(());
        }
        Applied::Done(u, steps) => (u, steps),
    };
    let d = &u.record.deployment;
    owners.remember(&u.record);
    if d.status.is_terminal() && tenant == &service.tenant {
        service.timeouts.remove(id);
    }
    if u.changed {
        info!(deployment.id = %id, server.id = %server, status = %d.status, kind = %kinds(), "deployment status changed");
    }
    let handled_before: Vec<bool> = run.iter().map(|(_, before)| *before).collect();
    for (parsed, step) in answers.iter().zip(&steps) {
        if let Step::Stray = step {
            warn_stray(id, server, kind(parsed.0), parsed.0);
        }
    }
    let messages: Vec<&AgentMessage> = answers.iter().map(|(m, _)| *m).collect();
    let events: Vec<_> = reports(&messages, &handled_before, &steps, report_skipped)
        .into_iter()
        .map(|r| {
            let event = if r.step {
                debug!(deployment.id = %id, server.id = %server, step = %r.ty, "a step without an answer of its own before a later one; reporting the step first");
                r.record.step_event(r.ty)
            } else {
                r.record.event(r.ty)
            };
            (event, &r.record.deployment)
        })
        .collect();
    service.events.publish_deployment_events(&events).await?;
    Ok(())
}

/// One event to publish about an answer applied: its type, whether it reports a step
/// the answer went past ([`DeploymentRecord::step_event`]) rather than the answer itself,
/// and the record as it stood right after the answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Report<'r> {
    pub ty: EventType,
    pub step: bool,
    pub record: &'r DeploymentRecord,
}

/// The events reporting `messages` (each `handled_before` or not) that came to `steps`,
/// in order: for each whose effect the record showed right after it and that is this
/// copy's ([`reported`]), the steps it went past (when `report_skipped`, from the record,
/// so again on a redelivery) that are not reported already, then its own.
pub(crate) fn reports<'r>(
    messages: &[&AgentMessage],
    handled_before: &[bool],
    steps: &'r [Step],
    report_skipped: bool,
) -> Vec<Report<'r>> {
    let mut out: Vec<Report<'r>> = Vec::new();
    for ((message, before), step) in messages.iter().zip(handled_before).zip(steps) {
        let Step::Applied { changed, record } = step else {
            continue;
        };
        let Some(ty) = reported(message, &record.deployment, *changed || *before) else {
            debug!(deployment.id = %record.deployment.id, status = %record.deployment.status, kind = kind(message), "agent message changes nothing; ignored");
            continue;
        };
        if report_skipped {
            for skipped in record.skipped.events() {
                if out.iter().any(|r| r.ty == skipped) {
                    continue;
                }
                out.push(Report {
                    ty: skipped,
                    step: true,
                    record,
                });
            }
        }
        out.push(Report {
            ty,
            step: false,
            record,
        });
    }
    out
}

/// What applying answers to their deployment's record came to.
#[derive(Debug)]
pub(crate) enum Applied {
    /// No such deployment.
    Unknown,
    /// The deployment is another server's (or another tenant's): its record as it is.
    Foreign(Updated),
    /// The record once the answers are applied (`changed`: this call wrote it), and what
    /// each answer, in their order, came to.
    Done(Updated, Vec<Step>),
}

/// What one answer of those applied together came to.
#[derive(Debug)]
pub(crate) enum Step {
    /// Not an answer to the request the record holds (an earlier request's, or a forged
    /// one): nothing applied.
    Stray,
    /// Applied: whether it moved the record (not when the record had gone past it, or
    /// it was applied before), and the record as it stood right after it, with the steps
    /// it went past ([`DeploymentRecord::skipped`]) when it moved it.
    Applied {
        changed: bool,
        record: Box<DeploymentRecord>,
    },
}

/// Applies `answers` (`delivered`, `started` or `finished`, in stream order; each with
/// the sealed outputs that did not open), sent by `server` of `tenant`, to deployment
/// `id`'s record with one compare-and-set, at `now`: only an answer of the server that
/// owns the deployment to the request its record holds changes it, and each step only
/// forward. A finished record is made to fit `payload_limit`.
pub(crate) async fn apply_answers(
    deployments: &store::Deployments,
    (tenant, server): (&TenantId, &ServerId),
    id: &DeploymentId,
    answers: &[(&AgentMessage, &BTreeSet<String>)],
    payload_limit: usize,
    now: OffsetDateTime,
) -> Result<Applied, StoreError> {
    let mut foreign = false;
    let mut steps = Vec::with_capacity(answers.len());
    let updated = deployments
        .update(tenant, id, |record| {
            steps.clear();
            let d = &record.deployment;
            foreign = &d.tenant != tenant || &d.server_id != server;
            if foreign {
                return false;
            }
            // The steps an answer went past are counted from the record as stored: should
            // this write be all that survives of handling them (the gateway died before
            // the events), the answer that moved the record last, handled again, reports
            // every step the write went past, those of the answers before it included.
            let stored = record.clone();
            let mut any = false;
            for (parsed, refused) in answers {
                if !answers_request(record, parsed.request_digest()) {
                    steps.push(Step::Stray);
                    continue;
                }
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
                    note_skipped(record, parsed, Skipped::by(&stored, parsed));
                }
                any |= changed;
                steps.push(Step::Applied {
                    changed,
                    record: Box::new(record.clone()),
                });
            }
            any
        })
        .await?;
    Ok(match updated {
        None => Applied::Unknown,
        Some(u) if foreign => Applied::Foreign(u),
        Some(u) => {
            if !u.changed {
                // Nothing written: no answer moved the record (one that would have on a
                // stale copy did not on the stored one, which is what `u` holds).
                for step in &mut steps {
                    if let Step::Applied { changed, .. } = step {
                        *changed = false;
                    }
                }
            }
            Applied::Done(u, steps)
        }
    })
}
/// A `finished` answer with sealed outputs, as it is stored: each opened from the
/// sender's agent and sealed again to the gateway, with the names that did not open
/// ([`sealing::received_outputs`]). `None` when there is nothing to open.
async fn received_outputs(
    service: &Answers,
    (tenant, server): (&TenantId, &ServerId),
    parsed: &AgentMessage,
) -> Result<(Option<AgentMessage>, BTreeSet<String>), HandleError> {
    let AgentMessage::Finished { result, .. } = parsed else {
        return Ok((None, BTreeSet::new()));
    };
    if !result.outputs.values().any(seal::is_sealed) {
        return Ok((None, BTreeSet::new()));
    }
    let key = match service.servers.get(tenant, server).await? {
        Some(server) => sealing::server_key(&server),
        None => Err(SealFailure::NoServerKey(server.clone())),
    };
    let mut received = parsed.clone();
    let mut refused = BTreeSet::new();
    if let AgentMessage::Finished { result, .. } = &mut received {
        refused = sealing::received_outputs(&mut result.outputs, &service.sealing, &key);
    }
    if !refused.is_empty() {
        warn!(server.id = %server, outputs = ?refused, "sealed outputs that do not open from the server's agent; refused");
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
