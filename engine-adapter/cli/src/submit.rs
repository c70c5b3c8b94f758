//! `flue stack … --submit`: the operation handed to the gateway's engine workers
//! (`POST /v1/stacks/{id}/operations`) and followed to its end, printing the engine's
//! progress lines as the in-process driver prints them, with the same exit codes.

use std::io::Write;
use std::time::Duration;

use flue_client::{Client, ClientError};
use flue_proto::operation::{OperationState, StackOperation, SubmitOperation};
use flue_proto::{OpStatus, StackId};
use flue_stack::driver::EngineError;

use super::{CliError, Outcome, render};

/// How often the operation is read while it runs.
const FOLLOW_EVERY: Duration = Duration::from_millis(250);
/// Reads of the operation that may fail in a row (gateway restarting, 503) before the
/// CLI gives up following; the operation itself goes on.
const MAX_READ_RETRIES: u32 = 8;
/// The longest pause between two retried reads.
const MAX_BACKOFF: Duration = Duration::from_secs(4);

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
    // Not retried: a second submission would be refused (409) while the first runs.
    let op = client.submit_operation(name, body).await.map_err(refusal)?;
    let mut seen = 0;
    let done = loop {
        let record = read_retrying(client, name, &op.id).await?;
        for line in record.progress_after(seen) {
            out.write_all(line.as_bytes())?;
        }
        out.flush()?;
        seen = record.progress_total();
        if record.state.is_terminal() {
            break record;
        }
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

/// A refused submission: the gateway's message is the one to print.
fn refusal(e: ClientError) -> CliError {
    e.into()
}

/// Reads the operation, retrying (with backoff, bounded) what another attempt may not
/// meet: no connection, 502/503/504.
async fn read_retrying(
    client: &Client,
    name: &StackId,
    op: &str,
) -> Result<StackOperation, CliError> {
    let mut pause = FOLLOW_EVERY;
    let mut failures = 0;
    loop {
        match client.get_operation(name, op).await {
            Ok(record) => return Ok(record),
            Err(e) if failures < MAX_READ_RETRIES && transient(&e) => {
                failures += 1;
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_BACKOFF);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn transient(e: &ClientError) -> bool {
    matches!(e.status(), None | Some(502..=504))
}
