//! `flue-agent data put | get | delete`: what a hook runs to use its stack's data space,
//! talking to the agent that runs it over the socket named by `FLUE_DATA_SOCKET`.
//!
//! Exit status: 0 on success; 1 when `get` finds the key not set (or not set within
//! `--wait`); 2 on anything else — usage, no socket, a refused key, the broker.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::wire::{DataRequest, DataResponse};
use super::{MAX_VALUE_BYTES, SOCKET_ENV};

/// Exit status when `get` finds no value.
pub const EXIT_NOT_FOUND: u8 = 1;
/// Exit status for usage, connection and every other error (clap's own usage errors too).
pub const EXIT_ERROR: u8 = 2;
/// How long the agent may take to answer beyond the requested wait.
const ANSWER_MARGIN: Duration = Duration::from_secs(60);
/// Longest response line read: a value of [`MAX_VALUE_BYTES`], every byte escaped.
const MAX_RESPONSE_BYTES: usize = 6 * MAX_VALUE_BYTES + 4096;

/// `flue-agent data`: the running hook's stack data space.
#[derive(Debug, Clone, clap::Args)]
pub struct DataArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: DataCommand,
}

/// One data-space operation.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum DataCommand {
    /// Store VALUE under KEY in the running deployment's stack.
    Put {
        /// Letters, digits and '_', '-', '/', '=', '.' (at most 200 bytes).
        key: String,
        /// UTF-8 text of at most 256 KiB; `-` reads it from stdin.
        #[arg(allow_hyphen_values = true)]
        value: String,
    },
    /// Print KEY's value exactly as stored (no newline added); exit 1 if it is not set.
    Get {
        /// The key.
        key: String,
        /// Wait this long for the key to be put when it is not set yet: `120s`, `2m`,
        /// `500ms`, `1h` or plain seconds.
        #[arg(long, value_parser = parse_wait)]
        wait: Option<Duration>,
    },
    /// Remove KEY (succeeds when it is not set).
    Delete {
        /// The key.
        key: String,
    },
}

/// Parses a wait: a whole number followed by `ms`, `s`, `m`, `h` or nothing (seconds).
pub fn parse_wait(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid wait {s:?}: use 120s, 2m, 500ms or plain seconds");
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "" | "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(n.saturating_mul(3600))),
        _ => Err(bad()),
    }
}

/// Why the command failed, and with which exit status.
#[derive(Debug, PartialEq, Eq)]
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn error(message: impl Into<String>) -> Self {
        Self {
            code: EXIT_ERROR,
            message: message.into(),
        }
    }
}

/// Runs the command: the value of a `get` goes to stdout, a failure to stderr.
pub async fn run(args: DataArgs) -> ExitCode {
    let outcome = match execute(args.command).await {
        Ok(Some(value)) => {
            let mut out = std::io::stdout().lock();
            out.write_all(value.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|e| Failure::error(format!("cannot write the value: {e}")))
        }
        Ok(None) => Ok(()),
        Err(failure) => Err(failure),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("flue-agent data: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

async fn execute(command: DataCommand) -> Result<Option<String>, Failure> {
    let socket = socket_path()?;
    let (request, wait) = match command {
        DataCommand::Put { key, value } => {
            let value = if value == "-" {
                read_stdin().await?
            } else {
                value
            };
            if value.len() > MAX_VALUE_BYTES {
                return Err(Failure::error(format!(
                    "the value is {} bytes, more than the limit of {MAX_VALUE_BYTES}",
                    value.len()
                )));
            }
            (DataRequest::Put { key, value }, Duration::ZERO)
        }
        DataCommand::Get { key, wait } => {
            let wait_ms = wait.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX));
            (DataRequest::Get { key, wait_ms }, wait.unwrap_or_default())
        }
        DataCommand::Delete { key } => (DataRequest::Delete { key }, Duration::ZERO),
    };
    let answer = tokio::time::timeout(
        wait.saturating_add(ANSWER_MARGIN),
        exchange(&socket, &request),
    )
    .await
    .map_err(|_| Failure::error(format!("no answer from the agent on {}", socket.display())))??;
    match answer {
        DataResponse::Ok { value } => Ok(value),
        DataResponse::NotFound { message } => Err(Failure {
            code: EXIT_NOT_FOUND,
            message,
        }),
        DataResponse::Error { message } => Err(Failure::error(message)),
    }
}

/// The socket the agent serves for the running hook.
fn socket_path() -> Result<PathBuf, Failure> {
    match std::env::var_os(SOCKET_ENV) {
        Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
        _ => Err(Failure::error(format!(
            "flue-agent data only works inside a hook run by flue-agent ({SOCKET_ENV} is not set)"
        ))),
    }
}

/// The value to put, from stdin: UTF-8 text of at most [`MAX_VALUE_BYTES`].
async fn read_stdin() -> Result<String, Failure> {
    let mut bytes = Vec::new();
    let limit = (MAX_VALUE_BYTES + 1) as u64;
    tokio::io::stdin()
        .take(limit)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| Failure::error(format!("cannot read the value from stdin: {e}")))?;
    if bytes.len() > MAX_VALUE_BYTES {
        return Err(Failure::error(format!(
            "the value on stdin is longer than the limit of {MAX_VALUE_BYTES} bytes"
        )));
    }
    String::from_utf8(bytes).map_err(|_| Failure::error("the value on stdin is not UTF-8 text"))
}

/// Sends one request line and reads one response line.
async fn exchange(
    socket: &std::path::Path,
    request: &DataRequest,
) -> Result<DataResponse, Failure> {
    let unreachable = |e: std::io::Error| {
        Failure::error(format!(
            "cannot reach the agent's data socket {} ({e}); it is served only while a hook runs",
            socket.display()
        ))
    };
    let mut stream = UnixStream::connect(socket).await.map_err(unreachable)?;
    let mut line = serde_json::to_vec(request)
        .map_err(|e| Failure::error(format!("cannot encode the request: {e}")))?;
    line.push(b'\n');
    stream.write_all(&line).await.map_err(unreachable)?;
    let mut answer = Vec::new();
    let limit = (MAX_RESPONSE_BYTES + 1) as u64;
    BufReader::new(stream)
        .take(limit)
        .read_until(b'\n', &mut answer)
        .await
        .map_err(unreachable)?;
    serde_json::from_slice(&answer).map_err(|e| {
        Failure::error(format!(
            "unreadable answer from the agent on {}: {e}",
            socket.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_take_units_or_plain_seconds() {
        assert_eq!(parse_wait("120s"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_wait("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_wait("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_wait("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_wait("45"), Ok(Duration::from_secs(45)));
        for bad in ["", "s", "1.5s", "-1", "10x", "2 m", "1d"] {
            let err = parse_wait(bad).expect_err(bad);
            assert!(err.contains("invalid wait"), "{err}");
        }
    }

    #[test]
    fn the_wait_reads_back_as_given() {
        assert_eq!(super::super::format_wait(Duration::from_secs(120)), "120s");
        assert_eq!(
            super::super::format_wait(Duration::from_millis(500)),
            "500ms"
        );
    }
}
