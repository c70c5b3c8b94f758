//! Hooks: finding the one for a group, running an external heat-config hook, and
//! turning what a hook did into a [`DeploymentResult`].

use std::collections::BTreeMap;
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use flue_proto::event::OutputStream;
use flue_proto::limits;
use flue_proto::{DeploymentResult, DeploymentStatus, OutputDecl};
use serde_json::Value;
use time::OffsetDateTime;
use tokio::process::Command;

use crate::item::HookItem;
use crate::process::{self, Captured, Launch, StopReason, Tees};
use crate::progress::{Redactor, Sink, as_text};

pub mod env;

pub use env::HookEnv;
pub use flue_proto::output::TRUNCATED_MARKER;

/// `deploy_stdout` and `deploy_stderr` each keep at most their first 1 MiB; the rest is
/// replaced by [`TRUNCATED_MARKER`]. A result travels in one NATS message, whose default
/// size limit is 1 MiB, so the agent may shorten them further when publishing.
pub const MAX_STREAM_BYTES: usize = 1 << 20;
/// Largest JSON response accepted from an external hook: room for both streams and outputs.
pub const MAX_HOOK_RESPONSE_BYTES: usize = 16 << 20;
/// The group handled by the built-in hook when no hook dir provides one.
pub const SCRIPT_GROUP: &str = "script";

/// The hook that applies a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hook {
    /// An executable in a hook dir, speaking the heat-config hook protocol.
    External(PathBuf),
    /// The built-in equivalent of heat-config-script.
    Script,
}

/// Finds the hook for `group`: the first executable `<dir>/<group>` in `dirs`, else the
/// built-in one for `script`. The error is the `status_reason` to report.
pub fn find(dirs: &[PathBuf], group: &str) -> Result<Hook, String> {
    // The gateway validates groups; a path separator must still never reach a file name.
    if group.is_empty() || group == "." || group == ".." || group.contains('/') {
        return Err(format!("invalid group {group:?}"));
    }
    for dir in dirs {
        let path = dir.join(group);
        let executable = std::fs::metadata(&path)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if executable {
            return Ok(Hook::External(path));
        }
    }
    if group == SCRIPT_GROUP {
        return Ok(Hook::Script);
    }
    let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(format!("no hook for group {group:?} in {}", dirs.join(":")))
}

/// What a hook did, before it is judged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// `deploy_stdout`, bounded.
    pub stdout: String,
    /// `deploy_stderr`, bounded.
    pub stderr: String,
    /// `deploy_status_code`; missing counts as 0.
    pub status_code: Option<i64>,
    /// Declared outputs the hook produced.
    pub outputs: BTreeMap<String, Value>,
    /// Set when the hook could not run or answer properly: the `status_reason`.
    pub failure: Option<String>,
}

impl Outcome {
    /// An outcome that failed before any hook ran.
    pub fn failed(reason: impl Into<String>) -> Self {
        Self {
            failure: Some(reason.into()),
            ..Self::default()
        }
    }

    /// The outcome with every value `redactor` hides, and every hidden output's value
    /// (`decls` says which are hidden), replaced by `<hidden>` in its output streams: they
    /// reach API reads, events and a stack's failure reason, which must never show one.
    /// A stream cut at [`MAX_STREAM_BYTES`] does not end with part of a value either.
    pub fn hiding(mut self, redactor: Redactor, decls: &[OutputDecl]) -> Self {
        let outputs = decls
            .iter()
            .filter(|d| d.hidden)
            .filter_map(|d| self.outputs.get(&d.name))
            .map(as_text);
        let redactor = redactor.and(outputs);
        let hide = |s: &str| match s.strip_suffix(TRUNCATED_MARKER) {
            Some(cut) => format!("{}{TRUNCATED_MARKER}", redactor.hide_cut(cut)),
            None => redactor.hide(s),
        };
        self.stdout = hide(&self.stdout);
        self.stderr = hide(&self.stderr);
        self
    }

    /// Judges the outcome: COMPLETE iff it ran, its status code is 0 (or missing) and no
    /// `error_output` output is set.
    pub fn into_result(
        self,
        decls: &[OutputDecl],
        started_at: Option<OffsetDateTime>,
        finished_at: OffsetDateTime,
    ) -> DeploymentResult {
        let error_output = decls
            .iter()
            .find(|d| d.error_output && self.outputs.get(&d.name).is_some_and(truthy));
        let reason = match (&self.failure, self.status_code.unwrap_or(0), error_output) {
            (Some(reason), _, _) => Some(reason.clone()),
            (None, code, _) if code != 0 => Some(format!("hook exited with status {code}")),
            (None, _, Some(d)) => Some(format!("error output {:?} set", d.name)),
            (None, _, None) => None,
        };
        DeploymentResult {
            status: if reason.is_some() {
                DeploymentStatus::Failed
            } else {
                DeploymentStatus::Complete
            },
            status_reason: reason,
            outputs: self.outputs,
            deploy_stdout: self.stdout,
            deploy_stderr: self.stderr,
            deploy_status_code: self.status_code,
            started_at,
            finished_at,
        }
    }
}

/// Python truthiness, which Heat uses to decide whether an error output is set.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Cuts `s` to [`MAX_STREAM_BYTES`] (on a character boundary) and marks it when it was
/// cut here or `already_truncated` says bytes were dropped earlier.
pub fn bound(mut s: String, already_truncated: bool) -> String {
    let cut = s.len() > MAX_STREAM_BYTES;
    if cut {
        let mut end = MAX_STREAM_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    if cut || already_truncated {
        s.push_str(TRUNCATED_MARKER);
    }
    s
}

/// A captured stream as bounded text.
pub fn text(c: &Captured) -> String {
    bound(String::from_utf8_lossy(&c.bytes).into_owned(), c.truncated)
}

/// Runs `hook` for `item` with `env` added to its environment, started as `launch` says;
/// `stop` resolving kills it (see [`process::run`]). Its output lines go to `progress` as they are printed: the
/// built-in script's stdout and stderr, an external hook's stderr only (its stdout is
/// the JSON answer, which may hold hidden outputs).
pub async fn run(
    hook: &Hook,
    item: &HookItem,
    env: &HookEnv,
    work_root: &Path,
    stop: impl Future<Output = StopReason>,
    progress: Option<Sink>,
    launch: Launch,
) -> Outcome {
    match hook {
        Hook::External(path) => {
            let tees = Tees {
                stdout: None,
                stderr: progress.map(|p| p.tee(OutputStream::Stderr)),
            };
            run_external(path, item, env, stop, tees, launch).await
        }
        Hook::Script => {
            let tees = progress.map_or_else(Tees::default, |p| Tees {
                stdout: Some(p.tee(OutputStream::Stdout)),
                stderr: Some(p.tee(OutputStream::Stderr)),
            });
            crate::script::run(item, env, work_root, stop, tees, launch).await
        }
    }
}

async fn run_external(
    path: &Path,
    item: &HookItem,
    env: &HookEnv,
    stop: impl Future<Output = StopReason>,
    tees: Tees,
    launch: Launch,
) -> Outcome {
    let stdin = match serde_json::to_vec(item) {
        Ok(b) => b,
        Err(e) => return Outcome::failed(format!("cannot encode the hook item: {e}")),
    };
    let mut cmd = Command::new(path);
    env.apply(&mut cmd);
    let f = match process::run(
        cmd,
        Some(stdin),
        MAX_HOOK_RESPONSE_BYTES,
        stop,
        tees,
        launch,
    )
    .await
    {
        Ok(f) => f,
        Err(e) => return Outcome::failed(format!("cannot run hook {}: {e}", path.display())),
    };
    let raw = Outcome {
        stdout: text(&f.stdout),
        stderr: text(&f.stderr),
        status_code: f.status_code(),
        ..Outcome::default()
    };
    if let Some(reason) = f.stopped {
        return Outcome {
            failure: Some(reason.status_reason().to_owned()),
            ..raw
        };
    }
    if f.status.is_some_and(|s| !s.success()) {
        let how = match f.status_code() {
            Some(c) if c < 0 => format!("was killed by signal {}", -c),
            Some(c) => format!("exited with status {c}"),
            None => "failed".to_owned(),
        };
        return Outcome {
            failure: Some(format!("hook {} {how}", path.display())),
            ..raw
        };
    }
    if f.stdout.truncated {
        return Outcome {
            failure: Some(format!(
                "hook {} printed more than {MAX_HOOK_RESPONSE_BYTES} bytes",
                path.display()
            )),
            ..raw
        };
    }
    match serde_json::from_slice::<serde_json::Map<String, Value>>(&f.stdout.bytes) {
        Ok(response) => from_response(response, item),
        Err(e) => Outcome {
            failure: Some(format!(
                "hook {} did not print one JSON object: {e}",
                path.display()
            )),
            ..raw
        },
    }
}

/// Reads a heat-config hook response: the three `deploy_*` keys and the declared outputs.
fn from_response(mut r: serde_json::Map<String, Value>, item: &HookItem) -> Outcome {
    let mut stream = |key: &str| match r.remove(key) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => bound(s, false),
        Some(other) => bound(other.to_string(), false),
    };
    let stdout = stream("deploy_stdout");
    let stderr = stream("deploy_stderr");
    let status_code = match r.remove("deploy_status_code") {
        Some(Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Some(Value::String(s)) => s.trim().parse().ok(),
        _ => None,
    };
    let mut outputs = BTreeMap::new();
    let mut failure = None;
    for o in &item.outputs {
        let Some(value) = r.remove(&o.name) else {
            continue;
        };
        // An output nested past the API's limit could not be read back from the answer
        // (nor be another deployment's input): left out, and the deployment fails.
        match limits::check_depth(|| format!("output {}", o.name), &value) {
            Ok(()) => {
                outputs.insert(o.name.clone(), value);
            }
            Err(e) => {
                failure.get_or_insert(e.to_string());
            }
        }
    }
    Outcome {
        stdout,
        stderr,
        status_code,
        outputs,
        failure,
    }
}

#[cfg(test)]
mod tests;
