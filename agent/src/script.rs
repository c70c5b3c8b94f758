//! The built-in `script` hook, equivalent to heat-agents' `heat-config-script`.
//!
//! The config body is written to an executable file in a per-deployment work dir and run
//! (with `/bin/sh` unless it starts with `#!`). Each input becomes an environment
//! variable as `hook-script.py` sets it (text as it is, a list or map as the JSON Python's
//! `json.dumps` writes, `{"a": [1, 2]}`; a number or boolean as JSON, `8080`, `true`,
//! where `hook-script.py` would stop with a `TypeError`; null as an empty string),
//! `heat_outputs_path` tells the script where to write outputs, and each
//! declared output is read back from `${heat_outputs_path}.<name>`, as-is. An output file
//! larger than [`MAX_OUTPUT_FILE_BYTES`] fails the deployment instead of being read whole.

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use flue_proto::config::{is_input_name, is_plain_name};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::hook::{HookEnv, MAX_STREAM_BYTES, Outcome, text};
use crate::item::{self, HeatItem};
use crate::process::{self, Launch, StopReason, Tees};

/// Largest output file read back, the same 1 MiB as `deploy_stdout` and `deploy_stderr`: a
/// result travels in one broker message, and a script must not be able to make the agent
/// read gigabytes into memory.
pub const MAX_OUTPUT_FILE_BYTES: usize = MAX_STREAM_BYTES;

/// Runs `item`'s config as a script in `<work_root>/<deployment id>/`, removed afterwards,
/// started as `launch` says; its stdout and stderr also go to `tees` as they are read.
pub async fn run(
    item: &HeatItem,
    env: &HookEnv,
    work_root: &Path,
    stop: impl Future<Output = StopReason>,
    tees: Tees,
    launch: Launch,
) -> Outcome {
    let dir = work_root.join(&item.id);
    let outcome = match prepare(&dir, item).await {
        Ok(script) => run_in(&dir, &script, item, env, stop, tees, launch).await,
        Err(e) => Outcome::failed(format!("cannot prepare work dir {}: {e}", dir.display())),
    };
    if let Err(e) = tokio::fs::remove_dir_all(&dir).await
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot remove work dir");
    }
    outcome
}

/// Creates a fresh work dir (a crash may have left an old one) holding the script.
async fn prepare(dir: &Path, item: &HeatItem) -> std::io::Result<PathBuf> {
    match tokio::fs::remove_dir_all(dir).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    tokio::fs::create_dir_all(dir).await?;
    tokio::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).await?;
    let script = dir.join(&item.id);
    tokio::fs::write(&script, item::config_text(item)).await?;
    tokio::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).await?;
    Ok(script)
}

async fn run_in(
    dir: &Path,
    script: &Path,
    item: &HeatItem,
    env: &HookEnv,
    stop: impl Future<Output = StopReason>,
    tees: Tees,
    launch: Launch,
) -> Outcome {
    let outputs_path = dir.join("outputs");
    let mut cmd = if item::config_text(item).starts_with("#!") {
        Command::new(script)
    } else {
        let mut sh = Command::new("/bin/sh");
        sh.arg(script);
        sh
    };
    cmd.current_dir(dir);
    for input in &item.inputs {
        // As hook-script.py, any name goes (`pkg-redhat` too); an environment entry's
        // name cannot hold '=' or NUL, so such an input stays out.
        if !is_input_name(&input.name) {
            tracing::warn!(input = %input.name, "input name is not a valid variable name, not exported");
            continue;
        }
        // As hook-script.py: text as it is, lists and maps as Python's json.dumps.
        cmd.env(&input.name, flue_proto::heat::env_text(&input.value));
    }
    // After the inputs: the agent's own variables win over a same-named input.
    env.apply(&mut cmd);
    cmd.env("heat_outputs_path", &outputs_path);

    let f = match process::run(cmd, None, MAX_STREAM_BYTES, stop, tees, launch).await {
        Ok(f) => f,
        Err(e) => return Outcome::failed(format!("cannot run the script: {e}")),
    };
    let mut outputs = std::collections::BTreeMap::new();
    let mut failure = f.stopped.map(|r| r.status_reason().to_owned());
    for o in item.outputs.iter().filter(|o| is_plain_name(&o.name)) {
        let mut file = outputs_path.clone().into_os_string();
        file.push(format!(".{}", o.name));
        match read_output(Path::new(&file)).await {
            OutputFile::Missing => {}
            OutputFile::Read(bytes) => {
                let value = String::from_utf8_lossy(&bytes).into_owned();
                outputs.insert(o.name.clone(), Value::String(value));
            }
            OutputFile::TooLarge => {
                tracing::warn!(output = %o.name, limit = MAX_OUTPUT_FILE_BYTES, "output file too large");
                failure.get_or_insert_with(|| {
                    format!(
                        "output {:?} is larger than the limit of {MAX_OUTPUT_FILE_BYTES} bytes",
                        o.name
                    )
                });
            }
        }
    }
    Outcome {
        stdout: text(&f.stdout),
        stderr: text(&f.stderr),
        status_code: f.status_code(),
        outputs,
        failure,
    }
}

/// What reading back one output file gave.
#[derive(Debug, PartialEq, Eq)]
enum OutputFile {
    /// Not written (or unreadable): the output is absent, as in `heat-config-script`.
    Missing,
    /// Its contents.
    Read(Vec<u8>),
    /// Longer than [`MAX_OUTPUT_FILE_BYTES`]; not kept.
    TooLarge,
}

/// Reads at most [`MAX_OUTPUT_FILE_BYTES`] (plus one byte, to tell a file of exactly the
/// limit from a longer one) of `path`, so that neither a huge file nor a link to an endless
/// one such as `/dev/zero` can exhaust memory.
async fn read_output(path: &Path) -> OutputFile {
    let Ok(file) = tokio::fs::File::open(path).await else {
        return OutputFile::Missing;
    };
    let limit = MAX_OUTPUT_FILE_BYTES as u64;
    let mut bytes = Vec::new();
    if file.take(limit + 1).read_to_end(&mut bytes).await.is_err() {
        return OutputFile::Missing;
    }
    if bytes.len() > MAX_OUTPUT_FILE_BYTES {
        return OutputFile::TooLarge;
    }
    OutputFile::Read(bytes)
}
