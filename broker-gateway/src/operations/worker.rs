//! Engine workers: each takes one operation at a time from the tenant's work queue and
//! runs it with the stack engine ([`flue_stack::submitted::run`]), renewing its lease
//! (in-progress acks) while it runs.
//!
//! The engine drives the stack through the gateway's HTTP API (`flue_client::Client`,
//! with a short-lived engine token the worker mints for itself), exactly as
//! `flue stack …` does. That keeps one path for every engine write (compare-and-set
//! stack records, their events, role checks) and lets workers run against any
//! gateway. A worker that dies leaves the message unacknowledged; once the lease runs
//! out the broker hands it to another worker, whose engine resumes the operation from
//! the stack record (re-using recorded deployment ids, never re-running a finished
//! unit): the same resume `flue stack …` run again performs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::consumer::{PullConsumer, pull};
use async_nats::jetstream::{AckKind, Message};
use flue_client::{Client, ClientError};
use flue_proto::auth::Role;
use flue_proto::operation::{OPERATIONS_STREAM, OperationState, QueuedOperation, StackOperation};
use flue_proto::{OpStatus, Stack, TenantId};
use flue_stack::driver::EngineError;
use flue_stack::submitted;
use futures_util::StreamExt;
use nkeys::XKey;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::submit::opened_body;
use super::{MAX_DELIVERIES, Operations};
use crate::auth::token::{NewToken, mint};
use crate::error::chain;
use crate::store;

/// How long one worker token lives; renewed when half of it is gone.
const TOKEN_TTL: Duration = Duration::from_secs(600);
/// Longest wait for a message in one pull (then the worker pulls again).
const PULL_EXPIRES: Duration = Duration::from_secs(5);
/// Pause after the queue could not be read, before trying again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Longest a progress line waits before it is written to the operation's record.
const PROGRESS_FLUSH: Duration = Duration::from_millis(250);
/// Redelivery delay of an operation given back because the gateway API failed.
const GIVE_BACK_DELAY: Duration = Duration::from_secs(2);

/// What a worker needs: the queue, the stack records (read before a submitted body is
/// checked again), the keys it opens sealed values and mints its token with, and the
/// API it drives stacks through.
#[derive(Clone)]
pub struct WorkerContext {
    /// The tenant's queue and records.
    pub operations: Operations,
    /// The stack records (the one an operation starts from).
    pub stacks: store::Stacks,
    /// Opens the sealed parameter values of queued operations.
    pub sealing: Arc<XKey>,
    /// Signs the worker's own engine tokens.
    pub token_secret: Arc<[u8]>,
    /// Base URL of the gateway API the engine drives stacks through.
    pub api_url: String,
    /// CA certificate of an `https://` API.
    pub api_ca: Option<std::path::PathBuf>,
    /// Where operations running and ended are counted.
    pub metrics: crate::metrics::TenantMetrics,
}

impl std::fmt::Debug for WorkerContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerContext")
            .field("tenant", self.operations.tenant())
            .field("api_url", &self.api_url)
            .finish_non_exhaustive()
    }
}

/// Runs worker number `n` until `shutdown`.
pub async fn run(ctx: WorkerContext, n: u16, shutdown: CancellationToken) {
    let worker = format!("{}/{}/w{n}", host_name(), std::process::id());
    let client = match Client::with_ca(&ctx.api_url, ctx.api_ca.as_deref()) {
        Ok(client) => client.with_token_source(token_source(
            ctx.token_secret.clone(),
            ctx.operations.tenant().clone(),
        )),
        Err(e) => {
            warn!(error = %chain(&e), url = %ctx.api_url, "engine worker cannot reach the engine API; not started");
            return;
        }
    };
    info!(tenant = %ctx.operations.tenant(), worker = %worker, "engine worker started");
    let mut queue = None;
    while !shutdown.is_cancelled() {
        let message = tokio::select! {
            () = shutdown.cancelled() => break,
            next = async {
                if queue.is_none() {
                    queue = Some(consumer(&ctx).await?);
                }
                match &queue {
                    Some(consumer) => next_message(consumer).await,
                    None => Ok(None),
                }
            } => next,
        };
        match message {
            Ok(Some(message)) => handle(&ctx, &client, &worker, message, &shutdown).await,
            Ok(None) => {}
            Err(e) => {
                warn!(error = %e, "engine worker cannot read the operations queue");
                queue = None;
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(RETRY_PAUSE) => {}
                }
            }
        }
    }
}

/// The shared consumer of the operations queue.
async fn consumer(ctx: &WorkerContext) -> Result<PullConsumer, String> {
    ctx.operations
        .jetstream()
        .get_stream(OPERATIONS_STREAM)
        .await
        .map_err(|e| e.to_string())?
        .get_consumer::<pull::Config>(ctx.operations.consumer())
        .await
        .map_err(|e| e.to_string())
}

/// One message from the shared consumer, or `None` when none came within a pull. A
/// waiting pull (`batch`, not the no-wait `fetch`): an idle worker costs the broker one
/// request per [`PULL_EXPIRES`].
async fn next_message(consumer: &PullConsumer) -> Result<Option<Message>, String> {
    let mut batch = consumer
        .batch()
        .max_messages(1)
        .expires(PULL_EXPIRES)
        .messages()
        .await
        .map_err(|e| e.to_string())?;
    match batch.next().await {
        Some(Ok(message)) => Ok(Some(message)),
        Some(Err(e)) => Err(e.to_string()),
        None => Ok(None),
    }
}

/// Runs the operation `message` carries, or settles it when there is nothing to run.
async fn handle(
    ctx: &WorkerContext,
    client: &Client,
    worker: &str,
    message: Message,
    shutdown: &CancellationToken,
) {
    let ops = &ctx.operations;
    let Ok(queued) = serde_json::from_slice::<QueuedOperation>(&message.payload) else {
        warn!("operations queue message is not an operation; dropped");
        settle(&message, AckKind::Term).await;
        return;
    };
    let delivered = message
        .info()
        .map_or(1, |i| u64::try_from(i.delivered).unwrap_or(1));
    let (stack, op) = (queued.stack.clone(), queued.id.clone());
    let (record, revision) = match ops.get_entry(&stack, &op).await {
        Ok(Some(found)) => found,
        Ok(None) => {
            warn!(stack.id = %stack, operation.id = %op, "queued operation has no record; dropped");
            settle(&message, AckKind::Term).await;
            return;
        }
        Err(e) => {
            warn!(error = %chain(&e), "cannot read an operation record; given back");
            settle(&message, AckKind::Nak(Some(GIVE_BACK_DELAY))).await;
            return;
        }
    };
    if record.state.is_terminal() {
        // It ended, but its acknowledgement was lost.
        let _ = ops.release(&stack, &op).await;
        settle(&message, AckKind::Ack).await;
        return;
    }
    if delivered < record.attempts {
        // A delivery older than the one a worker already took (this gateway stalled
        // with it in hand while the lease ran out): that worker holds the operation.
        info!(stack.id = %stack, operation.id = %op, delivered, attempts = record.attempts, "stale delivery of a stack operation held by another worker; this worker stops");
        return;
    }
    let mut held = Held { record, revision };
    if delivered > MAX_DELIVERIES {
        let reason = format!(
            "taken by {} workers in turn, none of which finished it (each died, lost its lease or could not reach the engine API); the stack is left as the last one left it",
            delivered - 1
        );
        if finish(ctx, held, OperationState::Failed, Some(reason), None).await {
            settle(&message, AckKind::Term).await;
        }
        return;
    }
    held.record.state = OperationState::Running;
    held.record.worker = Some(worker.to_owned());
    held.record.attempts = delivered;
    held.record.lease_expires_at = Some(OffsetDateTime::now_utc() + ops.lease());
    match held.write(ops).await {
        Ok(true) => {}
        Ok(false) => {
            // Another delivery of the same message got there first (this one came
            // after a stall): that worker holds it.
            info!(stack.id = %stack, operation.id = %op, "stack operation held by another worker; this one stops");
            return;
        }
        Err(e) => {
            warn!(error = %chain(&e), "cannot record an operation as running; given back");
            settle(&message, AckKind::Nak(Some(GIVE_BACK_DELAY))).await;
            return;
        }
    }
    info!(stack.id = %stack, operation.id = %op, worker, attempt = delivered, "stack operation started");
    let _running = ctx.metrics.operation_started();
    let outcome = tokio::select! {
        () = shutdown.cancelled() => {
            // Another worker takes it over at once; its engine resumes the operation.
            settle(&message, AckKind::Nak(None)).await;
            return;
        }
        outcome = run_renewing(ctx, client, &message, &mut held, queued) => outcome,
    };
    match outcome {
        Ok(stack_after) => {
            let (state, reason, status) = match &stack_after {
                None => (OperationState::Succeeded, None, None),
                Some(s) if s.status.status == OpStatus::Complete => {
                    (OperationState::Succeeded, None, Some(s.status.clone()))
                }
                Some(s) => (
                    OperationState::Failed,
                    s.status.reason.clone(),
                    Some(s.status.clone()),
                ),
            };
            if finish(ctx, held, state, reason, status).await {
                settle(&message, AckKind::Ack).await;
            }
        }
        Err(Failure::Superseded) => {
            // Another worker (or `flue stack … --force`) drives the stack now: it owns
            // the message and the record.
            info!(stack.id = %stack, operation.id = %op, "stack operation taken over; this worker stops");
        }
        Err(Failure::GiveBack(reason)) => {
            warn!(stack.id = %stack, operation.id = %op, reason, "stack operation given back to the queue");
            settle(&message, AckKind::Nak(Some(GIVE_BACK_DELAY))).await;
        }
        Err(Failure::Refused(reason)) => {
            if finish(ctx, held, OperationState::Failed, Some(reason), None).await {
                settle(&message, AckKind::Ack).await;
            }
        }
    }
}

/// An operation's record as this worker last wrote it, with the revision that write
/// made: every later write is a compare-and-set on it.
struct Held {
    record: StackOperation,
    revision: u64,
}

impl Held {
    /// Writes the record; `false` when someone else wrote it since (this worker lost
    /// its lease and must stop, touching nothing more).
    async fn write(
        &mut self,
        ops: &Operations,
    ) -> Result<bool, crate::operations::OperationsError> {
        match ops.update(&self.record, self.revision).await? {
            Some(revision) => {
                self.revision = revision;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Why a run ended without a stack to report.
enum Failure {
    /// Another driver took the operation over.
    Superseded,
    /// The API failed (unreachable, 503…): another delivery resumes it.
    GiveBack(String),
    /// It cannot run: the template, the stack's state, a refusal (the reason).
    Refused(String),
}

/// Runs the operation, renewing the lease (queue and record) meanwhile.
async fn run_renewing(
    ctx: &WorkerContext,
    client: &Client,
    message: &Message,
    held: &mut Held,
    queued: QueuedOperation,
) -> Result<Option<Stack>, Failure> {
    let ops = &ctx.operations;
    let body =
        opened_body(queued.body, &ctx.sealing).map_err(|e| Failure::Refused(e.to_string()))?;
    let previous = ctx
        .stacks
        .get(ops.tenant(), &queued.stack)
        .await
        .map_err(|e| Failure::GiveBack(chain(&e)))?;
    let prepared = submitted::prepare(
        &body,
        &queued.stack,
        ops.tenant().as_str(),
        previous.as_ref().map(|s| &s.state),
    )
    .map_err(|e| Failure::Refused(format!("{}: {}", e.path, e.message)))?;
    drop(body);
    // The engine's progress, in the words `flue stack …` prints, for whoever follows the
    // operation (`GET …/operations/{op}`); written with the record, at most every
    // PROGRESS_FLUSH.
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let stack_id = queued.stack.clone();
    let sink = lines.clone();
    let report: flue_stack::driver::Reporter = Arc::new(move |event| {
        let line = flue_stack::progress::line(&stack_id, event);
        sink.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(line);
    });
    let take = || {
        std::mem::take(
            &mut *lines
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    };
    let run = submitted::run(client, &queued.stack, &prepared, report);
    tokio::pin!(run);
    let period = ops.lease() / 3;
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    let mut flush = tokio::time::interval(PROGRESS_FLUSH);
    let result = loop {
        tokio::select! {
            result = &mut run => break result,
            _ = renew.tick() => {
                held.record.lease_expires_at = Some(OffsetDateTime::now_utc() + ops.lease());
                held.record.add_progress(take());
                // The record first: a worker that stalled past its lease learns here
                // that another one holds the operation, before it renews anything.
                match held.write(ops).await {
                    Ok(true) => settle(message, AckKind::Progress).await,
                    Ok(false) => return Err(Failure::Superseded),
                    Err(e) => {
                        warn!(error = %chain(&e), "cannot renew an operation's lease in its record");
                        settle(message, AckKind::Progress).await;
                    }
                }
            }
            _ = flush.tick() => {
                let new = take();
                if !new.is_empty() {
                    held.record.add_progress(new);
                    match held.write(ops).await {
                        Ok(true) => {}
                        Ok(false) => return Err(Failure::Superseded),
                        Err(e) => warn!(error = %chain(&e), "cannot write an operation's progress"),
                    }
                }
            }
        }
    };
    held.record.add_progress(take());
    result.map_err(|e| match e {
        EngineError::Superseded { .. } => Failure::Superseded,
        EngineError::Client(e) if retriable(&e) => Failure::GiveBack(e.to_string()),
        e => Failure::Refused(e.to_string()),
    })
}

/// A failure another attempt may not meet: the API unreachable or unavailable.
fn retriable(e: &ClientError) -> bool {
    match e.status() {
        None => true,
        Some(status) => status == 503 || status == 502 || status == 504 || status == 401,
    }
}

/// Records how the operation ended and frees the stack for the next one; `false` when
/// another worker wrote the record meanwhile (it holds the operation: nothing is
/// written, freed or acknowledged here).
async fn finish(
    ctx: &WorkerContext,
    mut held: Held,
    state: OperationState,
    reason: Option<String>,
    stack_status: Option<flue_proto::StackStatus>,
) -> bool {
    let ops = &ctx.operations;
    held.record.state = state;
    held.record.reason = reason;
    held.record.stack_status = stack_status;
    held.record.lease_expires_at = None;
    held.record.finished_at = Some(OffsetDateTime::now_utc());
    match held.write(ops).await {
        Ok(true) => {}
        Ok(false) => {
            info!(stack.id = %held.record.stack, operation.id = %held.record.id, "stack operation taken over; this worker stops");
            return false;
        }
        Err(e) => {
            warn!(error = %chain(&e), operation.id = %held.record.id, "cannot record how an operation ended");
        }
    }
    let record = &held.record;
    ctx.metrics
        .operation_ended(record.operation, state == OperationState::Succeeded);
    if let Err(e) = ops.release(&record.stack, &record.id).await {
        warn!(error = %chain(&e), operation.id = %record.id, "cannot free the stack after its operation");
    }
    info!(stack.id = %record.stack, operation.id = %record.id, state = %state, "stack operation ended");
    true
}

async fn settle(message: &Message, kind: AckKind) {
    if let Err(e) = message.ack_with(kind).await {
        warn!(error = %e, "cannot settle an operations queue message");
    }
}

/// Mints the worker's engine tokens: a fresh one when half of the last one's life is gone.
fn token_source(secret: Arc<[u8]>, tenant: TenantId) -> flue_client::TokenSource {
    let cached: Mutex<Option<(String, OffsetDateTime)>> = Mutex::new(None);
    Arc::new(move || {
        let now = OffsetDateTime::now_utc();
        let mut cached = cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((token, renew_at)) = cached.as_ref()
            && now < *renew_at
        {
            return token.clone();
        }
        let new = NewToken {
            name: "engine-worker".to_owned(),
            tenant: Some(tenant.clone()),
            role: Role::Engine,
            ttl: TOKEN_TTL,
        };
        match mint(&secret, &new, now) {
            Ok(minted) => {
                *cached = Some((minted.token.clone(), now + TOKEN_TTL / 2));
                minted.token
            }
            // Not expected (the name, role and lifetime are fixed): the request goes
            // out without a token and is refused, which gives the operation back.
            Err(e) => {
                warn!(error = %e, "engine worker cannot mint its token");
                String::new()
            }
        }
    })
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}
