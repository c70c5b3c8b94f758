//! `flue stack …` (without `--local`): the operation handed to the gateway's engine
//! workers (`POST /v1/stacks/{id}/operations`) and followed to its end, printing the
//! engine's progress lines as the in-process driver prints them, with the same exit
//! codes. The CLI submits and follows; it does not drive: killing it stops nothing.
//!
//! Following reads the operation record every 250 ms rather than the stack's events over
//! SSE: the record carries the engine's own progress lines (the very text `--local`
//! prints), which the events do not, and one small read per quarter second costs the
//! gateway less than an SSE consumer per follower.
//!
//! Given several gateways of one cluster (`--gateway A,B`), it submits to the first that
//! can be reached and follows through whichever answers: a gateway that stops answering
//! (killed, restarting) is left for the next, so the CLI sees the operation to its end
//! (another gateway's worker takes it over once its lease runs out) and exits with its
//! real result.

use std::io::Write;
use std::time::Duration;

use flue_client::{Client, ClientError};
use flue_proto::operation::{OperationState, StackOperation, SubmitOperation};
use flue_proto::retry::Policy;
use flue_proto::{OpStatus, StackId};
use flue_stack::driver::EngineError;

use super::{CliError, Outcome, render};

/// How often the operation is read while it runs.
const FOLLOW_EVERY: Duration = Duration::from_millis(250);
/// How long an operation may stay queued before the CLI says that no worker took it.
const QUEUED_NOTE: Duration = Duration::from_secs(5);
/// Rounds of reads of the operation (one read per gateway given) that may fail in a row
/// (gateways restarting, 503) before the CLI gives up following; the operation itself
/// goes on.
const MAX_READ_RETRIES: u32 = 8;
/// Pauses between two rounds of retried reads: 250 ms doubling up to 4 s.
const READ_RETRY: Policy = Policy::new(FOLLOW_EVERY, Duration::from_secs(4));

/// What the CLI prints once the operation ended well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The stack's outputs (create, update).
    Outputs,
    /// The last action run's results (action).
    ActionResults,
    /// Nothing more (delete, suspend, resume).
    Nothing,
}

/// Submits `body` for stack `name`, follows it and prints as the driver would.
pub async fn run(
    client: &Client,
    name: &StackId,
    body: &SubmitOperation,
    ending: Ending,
    out: &mut impl Write,
) -> Result<Outcome, CliError> {
    let gateways = client.gateways();
    let (mut at, submitted) = submit(&gateways, name, body).await;
    let op = match submitted {
        Ok(op) => op,
        Err(e) if e.status() == Some(409) => match running(&gateways[at], name, body).await? {
            Some(op) => {
                writeln!(
                    out,
                    "stack {name}: {} already {} as operation {}: following it",
                    op.operation, op.state, op.id
                )?;
                op
            }
            // It was another kind of operation: the gateway's refusal says which.
            None => return Err(refusal(e)),
        },
        Err(e) => return Err(refusal(e)),
    };
    let mut seen = 0;
    let since = std::time::Instant::now();
    let mut told_queued = false;
    let done = loop {
        let record = read_retrying(&gateways, &mut at, name, &op.id).await?;
        for line in record.progress_after(seen) {
            out.write_all(line.as_bytes())?;
        }
        seen = record.progress_total();
        if record.state.is_terminal() {
            out.flush()?;
            break record;
        }
        // Waiting without a word for a worker that may not exist would look like a hang.
        if !told_queued && record.state == OperationState::Queued && since.elapsed() >= QUEUED_NOTE
        {
            told_queued = true;
            writeln!(
                out,
                "note: operation {} is still queued: no engine worker has taken it (gateways run none with --engine-workers 0; --local runs the engine in this process)",
                record.id
            )?;
        }
        out.flush()?;
        tokio::time::sleep(FOLLOW_EVERY).await;
    };
    let Some(status) = &done.stack_status else {
        return match done.state {
            // A delete that removed the stack.
            OperationState::Succeeded => Ok(Outcome::Success),
            _ => Err(CliError::Engine(EngineError::Refused(
                done.reason
                    .unwrap_or_else(|| "the operation failed".to_owned()),
            ))),
        };
    };
    if status.status != OpStatus::Complete {
        return Ok(Outcome::Failed);
    }
    let client = &gateways[at];
    match ending {
        Ending::Outputs => {
            let stack = client.get_stack(name).await?;
            if !stack.state.outputs.is_empty() {
                writeln!(out, "outputs:")?;
                for (k, v) in &stack.state.outputs {
                    writeln!(out, "  {k}: {}", render::output_value(v))?;
                }
            }
        }
        Ending::ActionResults => {
            let stack = client.get_stack(name).await?;
            if let Some(run) = stack.state.actions.last() {
                for (unit, r) in &run.results {
                    writeln!(
                        out,
                        "  {unit}: {} (deployment {})",
                        r.status, r.deployment_id
                    )?;
                }
            }
        }
        Ending::Nothing => {}
    }
    Ok(Outcome::Success)
}

/// After a 409 (the stack had an operation queued or running): the stack's newest
/// operation, if it is of the kind `body` asks for, so running the command again while it
/// runs follows it rather than failing. It may have ended between the refusal and this
/// read (the test that kills the CLI saw it under load): it is followed all the same.
async fn running(
    client: &Client,
    name: &StackId,
    body: &SubmitOperation,
) -> Result<Option<StackOperation>, CliError> {
    let newest = client.list_operations_up_to(name, 1).await?;
    // The refusal said an operation was queued or running, so the newest of the same
    // kind is that one, even if it has ended since (then following it prints its end).
    Ok(newest
        .into_iter()
        .next()
        .filter(|op| op.operation == body.operation))
}

/// `flue stack operations NAME`: one line per operation, newest first.
pub fn table(name: &StackId, ops: &[StackOperation]) -> String {
    use std::fmt::Write as _;
    if ops.is_empty() {
        return format!("no operations on stack {name}\n");
    }
    let mut s = format!(
        "{:<32}  {:<8} {:<10} {:<20}  {:<16} WORKER\n",
        "OPERATION", "KIND", "STATE", "SUBMITTED", "STACK STATUS"
    );
    for op in ops {
        let status = op
            .stack_status
            .as_ref()
            .map_or_else(|| "-".to_owned(), ToString::to_string);
        let _ = writeln!(
            s,
            "{:<32}  {:<8} {:<10} {:<20}  {:<16} {}",
            op.id,
            op.operation.to_string(),
            op.state.to_string(),
            // Whole seconds: the column is for a reader, `--json` has the rest.
            render::timestamp(
                op.submitted_at
                    .replace_nanosecond(0)
                    .unwrap_or(op.submitted_at)
            ),
            status,
            op.worker.as_deref().unwrap_or("-"),
        );
        if let Some(cause) = &op.cause {
            let _ = writeln!(s, "    {cause}");
        }
        if let Some(reason) = &op.reason {
            let _ = writeln!(s, "    {}", reason.lines().next().unwrap_or_default());
        }
    }
    s
}

/// A refused submission: the gateway's message is the one to print.
fn refusal(e: ClientError) -> CliError {
    e.into()
}

/// Submits `body` to the first of `gateways` that can be reached: the index of the one
/// that answered (or of the last tried) and its answer. Only a gateway never reached is
/// left for the next: a second submission would be refused (409) while the first runs.
async fn submit(
    gateways: &[Client],
    name: &StackId,
    body: &SubmitOperation,
) -> (usize, Result<StackOperation, ClientError>) {
    let mut at = 0;
    loop {
        let result = gateways[at].submit_operation(name, body).await;
        match result {
            Err(e) if unreached(&e) && at + 1 < gateways.len() => at += 1,
            result => return (at, result),
        }
    }
}

/// Reads the operation through `gateways[*at]`, moving on to the next gateway (round
/// the list) on what another attempt may not meet: no connection, 502/503/504; with
/// backoff after each round, bounded ([`MAX_READ_RETRIES`] rounds).
async fn read_retrying(
    gateways: &[Client],
    at: &mut usize,
    name: &StackId,
    op: &str,
) -> Result<StackOperation, CliError> {
    let mut delays = READ_RETRY.delays();
    let mut failures = 0;
    let mut rounds = 0;
    loop {
        match gateways[*at].get_operation(name, op).await {
            Ok(record) => return Ok(record),
            Err(e) if rounds < MAX_READ_RETRIES && transient(&e) => {
                *at = (*at + 1) % gateways.len();
                failures += 1;
                if failures % gateways.len() == 0 {
                    rounds += 1;
                    tokio::time::sleep(delays.next_delay()).await;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// True when the request never reached a gateway (no connection made).
fn unreached(e: &ClientError) -> bool {
    matches!(e, ClientError::Unreachable { .. })
}

fn transient(e: &ClientError) -> bool {
    matches!(e.status(), None | Some(502..=504))
}
