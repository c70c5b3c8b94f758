//! One request message, exactly once: the ledger decides whether the hook runs, and the
//! answer is recorded before it is published and published before the request is acked.
//! Every answer names the digest of the message it answers; a message that is not a
//! readable request is reported as rejected, attributed to no deployment.

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use flue_proto::heat;
use flue_proto::nats_url::NatsUrls;
use flue_proto::signing::{Refusal, RefusalCode};
use flue_proto::{
    AgentMessage, DeploymentId, DeploymentRequest, DeploymentResult, PROTOCOL_VERSION,
    RequestDigest,
};
use time::OffsetDateTime;
use tokio::sync::oneshot;
use tracing::{Instrument, info, info_span, warn};

use crate::answer::{self, Prepared};
use crate::data::server::DataServer;
use crate::data::space::DataSpace;
use crate::error::Error;
use crate::guard::Guard;
use crate::hook::{self, HookEnv, Outcome};
use crate::item;
use crate::ledger::{Entry, LedgerKey};
use crate::process::{Launch, Spawned, StopReason};
use crate::progress::{self, Redactor};
use crate::rights;
use crate::sealing;
use crate::worker::Agent;

mod verify;

pub(crate) use verify::stream_seq;
use verify::{replayed, signed_for, verify};

/// How often a running hook's request is touched (`+WPI`) so the broker, whose ack wait
/// the gateway sets to 10 s, does not redeliver it.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(3);

/// Longest wait to queue `delivered` or `started` on the connection (neither is ever
/// waited for longer).
pub const DELIVERED_QUEUE_TIMEOUT: Duration = Duration::from_secs(1);

/// Handles one pulled request. Errors are ledger failures only: the agent must stop.
///
/// Before anything else (before `delivered`, before the ledger records `started`), the
/// message must be signed by the gateway this agent pinned, for this server of this
/// tenant, unexpired ([`verify`]), and must not be a replayed copy of a request already
/// handled. A refused message is answered `rejected` with the reason and terminated.
///
/// Every answer carries the digest of the message's bytes, so the gateway applies it only
/// to the deployment whose recorded request this very message is.
pub async fn handle(agent: &Agent, msg: jetstream::Message) -> Result<(), Error> {
    let digest = RequestDigest::of(&msg.payload);
    if let Err(refusal) = verify(agent, &msg) {
        reject(agent, &msg, digest, refusal).await;
        return Ok(());
    }
    let req: DeploymentRequest = match serde_json::from_slice(&msg.payload) {
        Ok(req) => req,
        Err(e) => {
            let refusal =
                Refusal::new(RefusalCode::Undecodable, format!("unreadable request: {e}"));
            reject(agent, &msg, digest, refusal).await;
            return Ok(());
        }
    };
    let span = info_span!("deployment", deployment.id = %req.deployment_id);
    async {
        if let Err(refusal) = signed_for(agent, &msg, &req) {
            reject(agent, &msg, digest, refusal).await;
            return Ok(());
        }
        // Keyed by the whole request identity, not the id alone: an id can come back for a
        // new request once the broker has lost its state, and that one must run.
        let key = ledger_key(agent, &req, &digest)?;
        let seq = stream_seq(&msg);
        if let Some(refusal) = replayed(agent, &key, &digest, seq)? {
            reject(agent, &msg, digest, refusal).await;
            return Ok(());
        }
        // Before anything runs: the rights of the request's stack, from the signed request.
        if let Some(jwt) = &req.agent_jwt {
            let broker = &agent.broker;
            rights::take(agent.rights.as_ref(), &broker.client, &broker.connects, jwt).await;
        }
        let delivered = Delivery {
            message: AgentMessage::Delivered {
                v: PROTOCOL_VERSION,
                deployment_id: req.deployment_id.clone(),
                at: OffsetDateTime::now_utc(),
                request_digest: Some(digest.clone()),
            },
            announced: None,
        };
        handle_request(agent, &msg, &req, &key, &digest, delivered).await
    }
    .instrument(span)
    .await
}

/// `delivered` for a pulled request, announced unless the request starts its hook at
/// once: then `started`, which follows within milliseconds, stands for both (the gateway
/// reports the `delivered` a `started` went past, see `flue_gateway::responses`), one
/// message less per deployment. Announced at once, as soon as that is known, for every
/// other request (answered from the ledger, refused, with nothing to run, an upgrade).
struct Delivery {
    message: AgentMessage,
    announced: Option<Announcement>,
}

impl Delivery {
    /// Announces `delivered` now (once): the request does not start a hook at once.
    async fn announce(&mut self, agent: &Agent) {
        if self.announced.is_none() {
            let message = self.message.clone();
            self.announced = Some(announce(agent, message, "delivered").await);
        }
    }

    /// [`Announcement::confirmed`] of `delivered` if it was announced; true if not.
    async fn confirmed(self, agent: &Agent) -> bool {
        match self.announced {
            Some(announced) => announced.confirmed(agent).await,
            None => true,
        }
    }
}

/// An announcement (`delivered`, `started`) queued on the connection, whose PubAck a
/// task of its own awaits: see [`Announcement::confirmed`].
struct Announcement {
    message: AgentMessage,
    what: &'static str,
    /// Whether the broker acknowledged the first copy; `None` when it could not even be
    /// queued.
    ack: Option<tokio::task::JoinHandle<bool>>,
}

impl Announcement {
    /// Returns once the broker holds the announcement: its first copy acknowledged, or
    /// else published again with backoff until a copy is (the same message id on every
    /// copy, so the stream keeps one). False only when shutdown came first.
    ///
    /// Awaited before the next message of the request is sent, so the response stream
    /// holds a deployment's messages in their order and none is missing: the gateway
    /// reports a `delivered` only before `started`, and `started` only before the result.
    async fn confirmed(self, agent: &Agent) -> bool {
        if let Some(ack) = self.ack
            && ack.await.unwrap_or(false)
        {
            return true;
        }
        let what = self.what;
        warn!(
            what,
            "announcement not acknowledged by the broker; publishing it again"
        );
        agent
            .responder
            .publish_finished(&self.message, &agent.shutdown)
            .await
    }
}

/// Queues `message` (`delivered` for a request pulled that does not start its hook at
/// once, redeliveries included; `started` once the ledger holds it) and has a task await its PubAck. Same message id
/// on every copy: the broker drops a duplicate within its window, the gateway ignores a
/// later one.
///
/// It costs the deployment no round trip: the message is only queued on the connection,
/// ahead of anything published later for the request, and the next message waits for
/// its confirmation ([`Announcement::confirmed`]), which has normally come by then.
async fn announce(agent: &Agent, message: AgentMessage, what: &'static str) -> Announcement {
    let prepared = agent.responder.prepare(&message);
    queue_announcement(agent, message, prepared, what).await
}

/// [`announce`] for a message [`answer::Responder::prepare`] encoded and signed
/// beforehand.
async fn queue_announcement(
    agent: &Agent,
    message: AgentMessage,
    prepared: Result<Prepared, String>,
    what: &'static str,
) -> Announcement {
    let send = async { agent.responder.send_prepared(prepared?).await };
    let ack = match tokio::time::timeout(DELIVERED_QUEUE_TIMEOUT, send).await {
        Ok(Ok(ack)) => Some(tokio::spawn(
            async move {
                match ack.await {
                    Ok(_) => true,
                    Err(e) => {
                        warn!(error = %e, what, "announcement not acknowledged by the broker");
                        false
                    }
                }
            }
            .in_current_span(),
        )),
        Ok(Err(e)) => {
            warn!(error = %e, what, "publishing an announcement failed");
            None
        }
        Err(_) => {
            warn!(what, "publishing an announcement timed out");
            None
        }
    };
    Announcement { message, what, ack }
}

/// A message this agent does not run (unreadable, unsigned, badly signed, for another
/// server or tenant, expired, replayed): reported as `rejected` (its stream sequence,
/// digest, code and why), never as an answer for whatever deployment id its bytes may
/// name, then terminated so that the queue moves on. Nothing is recorded in the ledger:
/// nothing runs, and a redelivery is rejected again under the same message id.
async fn reject(agent: &Agent, msg: &jetstream::Message, digest: RequestDigest, refusal: Refusal) {
    let stream_seq = stream_seq(msg);
    let reason = refusal.to_string();
    warn!(subject = %msg.subject, stream_seq, code = %refusal.code, reason, "rejecting a message on the request queue");
    agent.counters.rejected();
    let rejected = AgentMessage::Rejected {
        v: PROTOCOL_VERSION,
        stream_seq,
        request_digest: digest,
        reason,
        code: Some(refusal.code),
        at: OffsetDateTime::now_utc(),
    };
    if !agent
        .responder
        .publish_finished(&rejected, &agent.shutdown)
        .await
    {
        warn!("rejection not published before shutdown; the message will come again");
        return;
    }
    if let Err(e) = msg.ack_with(AckKind::Term).await {
        warn!(error = %e, "terminating the rejected message failed");
    }
}

async fn handle_request(
    agent: &Agent,
    msg: &jetstream::Message,
    req: &DeploymentRequest,
    key: &LedgerKey,
    digest: &RequestDigest,
    mut delivered: Delivery,
) -> Result<(), Error> {
    let key = key.clone();
    let seq = Some(stream_seq(msg));
    let entry = agent.ledger.get(&key)?;
    // Only a request that may run its hook now leaves `delivered` to `started`.
    if entry.is_some() || refusal(agent, req).is_some() {
        delivered.announce(agent).await;
    }
    let mut delivered = Some(delivered);
    let result = match entry {
        // An entry without a digest was written by an older agent for this key: it is
        // taken as this request's, as that agent would have.
        Some(Entry::Done { result, .. }) => {
            info!("already finished, answering from the ledger");
            agent.counters.answered_from_ledger();
            result
        }
        // An upgrade request the agent restarted for: answered from the upgrade's marker.
        Some(Entry::Started { .. })
            if let Some(result) = crate::upgrade::outcome(&agent.config, digest) =>
        {
            info!(status = %result.status, "answering the agent upgrade");
            let result = record(agent, &key, digest, seq, result).await?;
            crate::upgrade::answered(&agent.config);
            result
        }
        Some(Entry::Started { at, .. }) => {
            warn!(
                "found started but never finished (agent stopped mid-hook), reporting it interrupted"
            );
            record(agent, &key, digest, seq, failed("interrupted", at)).await?
        }
        None => match refusal(agent, req) {
            Some(reason) => {
                warn!(reason = %reason, "refusing the request");
                agent.counters.rejected();
                record(agent, &key, digest, seq, failed(&reason, None)).await?
            }
            None => match sealing::open_request(agent.credentials.as_deref(), req) {
                Ok(opened) => apply(agent, msg, &opened, &key, digest, &mut delivered).await?,
                Err(refused) => {
                    if let Some(delivered) = &mut delivered {
                        delivered.announce(agent).await;
                    }
                    warn!(reason = %refused, "refusing the request");
                    agent.counters.rejected();
                    record(agent, &key, digest, seq, failed(&refused.to_string(), None)).await?
                }
            },
        },
    };
    // `delivered` is in the stream before the result (when no hook ran, nothing waited
    // for it yet).
    if let Some(delivered) = delivered
        && !delivered.confirmed(agent).await
    {
        warn!("delivered not published before shutdown; the redelivery will announce it again");
        return Ok(());
    }
    answer_and_ack(agent, msg, &req.deployment_id, digest, result).await;
    Ok(())
}

/// The ledger key of `req`: its identity, unless an entry recorded there is for another
/// message with the same identity (a stray or forged copy, or the real request behind
/// one), in which case this message gets a key of its own ([`LedgerKey::with_digest`]).
fn ledger_key(
    agent: &Agent,
    req: &DeploymentRequest,
    digest: &RequestDigest,
) -> Result<LedgerKey, Error> {
    let key = LedgerKey::of_request(req);
    let other = agent
        .ledger
        .get(&key)?
        .is_some_and(|entry| entry.digest().is_some_and(|d| d != digest));
    if other {
        warn!(digest = %digest, "another message with this request's identity was handled before; keeping them apart");
        return Ok(key.with_digest(digest));
    }
    Ok(key)
}

/// Publishes the recorded result, then acks the request; without a PubAck the request
/// stays unacked and its redelivery is answered from the ledger.
async fn answer_and_ack(
    agent: &Agent,
    msg: &jetstream::Message,
    id: &DeploymentId,
    digest: &RequestDigest,
    result: DeploymentResult,
) {
    let answer = answer::finished(id, Some(digest), result);
    if agent
        .responder
        .publish_finished(&answer, &agent.shutdown)
        .await
    {
        answer::ack(msg, &agent.shutdown).await;
    } else {
        warn!(
            "result not published before shutdown; the redelivery will be answered from the ledger"
        );
    }
}

/// Why a request must not run, if it must not.
fn refusal(agent: &Agent, req: &DeploymentRequest) -> Option<String> {
    let cfg = &agent.config;
    if req.v != PROTOCOL_VERSION {
        return Some(format!(
            "protocol version {} not supported (agent speaks {PROTOCOL_VERSION})",
            req.v
        ));
    }
    if req.tenant != cfg.tenant || req.server != cfg.server_id {
        return Some(format!(
            "request for {}/{} reached the agent of {}/{}",
            req.tenant, req.server, cfg.tenant, cfg.server_id
        ));
    }
    if req.expires_at <= OffsetDateTime::now_utc() {
        return Some("expired before it was applied".to_owned());
    }
    None
}

pub(crate) fn failed(reason: &str, started_at: Option<OffsetDateTime>) -> DeploymentResult {
    Outcome::failed(reason).into_result(&[], started_at, OffsetDateTime::now_utc())
}

/// Makes `result` fit in one message, then records it durably for the request `key`
/// (whose message has `digest`); returns what was recorded.
pub(crate) async fn record(
    agent: &Agent,
    key: &LedgerKey,
    digest: &RequestDigest,
    seq: Option<u64>,
    result: DeploymentResult,
) -> Result<DeploymentResult, Error> {
    let budget = answer::result_budget(&agent.broker.client);
    let result = answer::fit(key.deployment_id(), Some(digest), result, budget);
    agent
        .ledger
        .record_done(key, &result, Some(digest), seq)
        .await?;
    Ok(result)
}

/// Spawns the hook's guard, records `started` (with the guard's process group) for the
/// request `key` and announces it, lets the hook run, and records the result.
async fn apply(
    agent: &Agent,
    msg: &jetstream::Message,
    req: &DeploymentRequest,
    key: &LedgerKey,
    digest: &RequestDigest,
    delivered: &mut Option<Delivery>,
) -> Result<DeploymentResult, Error> {
    let seq = Some(stream_seq(msg));
    let item = item::from_request(req);
    let hook = hook::find(&agent.config.hook_dirs, &item.group);
    let runs_now = item.group != crate::upgrade::UPGRADE_GROUP
        && item.group != item::COMPONENT_GROUP
        && hook.is_ok();
    if !runs_now && let Some(delivered) = delivered {
        delivered.announce(agent).await;
    }
    if item.group == crate::upgrade::UPGRADE_GROUP {
        return crate::upgrade::apply(agent, msg, req, key, digest).await;
    }
    if item.group == item::COMPONENT_GROUP {
        info!(action = %req.action, "the component has no config for this action; nothing to run");
        return record(agent, key, digest, seq, hook::nothing_run(None)).await;
    }
    let hook = match hook {
        Ok(hook) => hook,
        // As `55-heat-config`, which skips it; its config is data, not work for a hook.
        Err(reason) if heat::group::is_data_group(&item.group) => {
            info!(group = %item.group, "no hook for the group; skipped");
            let note = format!("{reason}: skipped, as Heat's dispatcher skips it");
            return record(agent, key, digest, seq, hook::nothing_run(Some(note))).await;
        }
        Err(reason) => {
            warn!(group = %item.group, reason = %reason, "no hook");
            return record(agent, key, digest, seq, failed(&reason, None)).await;
        }
    };

    let started_at = OffsetDateTime::now_utc();
    let started = AgentMessage::Started {
        v: PROTOCOL_VERSION,
        deployment_id: req.deployment_id.clone(),
        at: started_at,
        request_digest: Some(digest.clone()),
    };
    info!(group = %item.group, action = %req.action, "running hook");

    // One deployment runs at a time, so one socket path serves them all in turn.
    let socket = agent.config.data_socket_path();
    let env = HookEnv::for_request(req, &socket);
    let broker_credentials = NatsUrls::parse(&agent.config.nats_url).secrets();
    let redactor = Redactor::for_request(req).and(broker_credentials);
    // Progress goes out only once `started` is in the stream, ahead of it.
    let (started_in_stream, after_started) = oneshot::channel();
    let (lines, progress) = progress::start(
        agent.responder.clone(),
        progress::For {
            deployment_id: req.deployment_id.clone(),
            request_digest: digest.clone(),
            server_id: agent.config.server_id.clone(),
        },
        after_started,
        agent.shutdown.clone(),
        redactor.clone(),
    );
    let (launch, spawned) = launch(agent).await;
    let work_root = agent.config.work_root();
    let stop = stop_signal(agent, req);
    let run = hook::run(&hook, &item, &env, &work_root, stop, Some(lines), launch);
    // The guard is spawned first (normally ahead, while the agent waited) and waits;
    // `started`, naming its process group, is recorded with one flush, and only then do
    // the hook's command and the go reach it, and the hook start: durable before the
    // hook runs (exactly-once), and the group known to the next agent should this one die
    // (see `crate::orphans`). A hook that could not even be spawned never ran: nothing
    // is recorded as started, and the result says why.
    let record_started = async {
        let Ok(spawned) = spawned.await else {
            return (Ok(None), None);
        };
        let delivered = delivered.take();
        let write = async {
            match spawned.group {
                Some(group) => {
                    agent
                        .ledger
                        .record_hook(key, started_at, group, Some(digest), seq)
                        .await
                }
                None => {
                    agent
                        .ledger
                        .record_started(key, started_at, Some(digest), seq)
                        .await
                }
            }
        };
        // While the flush is on its way to the disk (on sled's thread), this thread gets
        // ready what the hook needs before its go: its data socket, served from here on,
        // and `started` encoded and signed. Polled after the write has been handed over.
        // So is `delivered` confirmed (normally it is by now), or published again until
        // the broker takes it: it must be in the stream before `started`.
        let ready = async {
            let space = DataSpace::new(&agent.broker, req.tenant.clone(), req.stack_id.clone());
            let data = DataServer::start(&socket, space);
            let in_stream = match delivered {
                Some(delivered) => delivered.confirmed(agent).await,
                None => true,
            };
            (data, agent.responder.prepare(&started), in_stream)
        };
        let (written, (data, prepared, delivered_in_stream)) = tokio::join!(write, ready);
        if let Err(e) = written {
            // No go: the guard ends without running the hook.
            return (Err(Error::from(e)), data);
        }
        if !delivered_in_stream {
            warn!("delivered not published before shutdown; carrying on without it");
        }
        // Durable in the ledger already, which is what exactly-once rests on: the hook
        // does not wait for the broker to confirm `started`. Queued before the go; the
        // progress lines wait for its confirmation (or its copy published again until the
        // broker takes it: a stream leader being elected), so it is in its place.
        let started = queue_announcement(agent, started.clone(), prepared, "started").await;
        // A guard that went away meanwhile ends the run on its own.
        let _ = spawned.go.send(());
        let in_stream = started.confirmed(agent).await;
        let _ = started_in_stream.send(());
        (Ok::<_, Error>(Some(in_stream)), data)
    };
    let (outcome, (recorded, data)) = tokio::join!(touching(msg, run), record_started);
    // `started`, then every progress message, go out before the result.
    if let Ok(Some(false)) = &recorded {
        warn!("started not published before shutdown");
    }
    progress.finish().await;
    if let Some(data) = data {
        data.stop().await;
    }
    recorded?;
    let result = outcome.hiding(redactor, &req.config.outputs).into_result(
        &req.config.outputs,
        Some(started_at),
        OffsetDateTime::now_utc(),
    );
    // Sealed before the ledger sees it: the ledger keeps the answer as published.
    let result = sealing::seal_outputs(agent.credentials.as_deref(), result, &req.config.outputs);
    info!(
        status = %result.status,
        reason = result.status_reason.as_deref().unwrap_or(""),
        code = ?result.deploy_status_code,
        "hook finished"
    );
    let took = (result.finished_at - started_at).unsigned_abs();
    agent.counters.hook_ran(result.status, took);
    record(agent, key, digest, seq, result).await
}

/// How hooks are started: under the guard, which kills the hook's group if the agent
/// dies — the one the agent started ahead when it is ready, else one started now — and
/// telling the receiver which group that is.
async fn launch(agent: &Agent) -> (Launch, oneshot::Receiver<Spawned>) {
    let (tx, rx) = oneshot::channel();
    let launch = Launch {
        guard: Some(Guard::current()),
        ready: agent.guards.take().await,
        started: Some(tx),
    };
    (launch, rx)
}

/// Resolves when a running hook must be stopped: at the deployment's expiry, or once the
/// shutdown grace period is over.
fn stop_signal(agent: &Agent, req: &DeploymentRequest) -> impl Future<Output = StopReason> {
    let until_expiry =
        Duration::try_from(req.expires_at - OffsetDateTime::now_utc()).unwrap_or(Duration::ZERO);
    let grace = agent.config.shutdown_grace;
    let shutdown = agent.shutdown.clone();
    async move {
        tokio::select! {
            _ = tokio::time::sleep(until_expiry) => {
                warn!("deployment expired while its hook was running, stopping it");
                StopReason::TimedOut
            }
            _ = async {
                shutdown.cancelled().await;
                info!(grace_secs = grace.as_secs(), "shutdown requested, letting the running hook finish");
                tokio::time::sleep(grace).await;
                warn!("shutdown grace period over, stopping the hook");
            } => StopReason::ShutDown,
        }
    }
}

/// Drives the running hook `run` to its end, touching the request every
/// [`PROGRESS_INTERVAL`] so that the broker does not redeliver it meanwhile.
async fn touching(msg: &jetstream::Message, run: impl Future<Output = Outcome>) -> Outcome {
    tokio::pin!(run);
    let start = tokio::time::Instant::now() + PROGRESS_INTERVAL;
    let mut progress = tokio::time::interval_at(start, PROGRESS_INTERVAL);
    loop {
        tokio::select! {
            outcome = &mut run => return outcome,
            _ = progress.tick() => {
                if let Err(e) = msg.ack_with(AckKind::Progress).await {
                    warn!(error = %e, "sending progress to the broker failed");
                }
            }
        }
    }
}
