//! Hooks: finding the one for a group, running an external heat-config hook, and
//! turning what a hook did into a [`DeploymentResult`].

use std::collections::BTreeMap;
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use flue_proto::event::OutputStream;
use flue_proto::{DeploymentResult, DeploymentStatus, OutputDecl};
use flue_proto::{heat, limits};
use serde_json::Value;
use time::OffsetDateTime;
use tokio::process::Command;

use crate::item::HeatItem;
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

/// Finds the hook for `group`: the first executable `<dir>/<name>` in `dirs`, where the
/// name is the group as `55-heat-config` makes it a file name (`Heat::Ungrouped` →
/// `HeatUngrouped`, [`heat::group::hook_name`]), else the built-in one for `script`. The
/// error is the `status_reason` to report.
pub fn find(dirs: &[PathBuf], group: &str) -> Result<Hook, String> {
    // The sanitised name holds no path separator or dot, so it names a file in the dir.
    let name = heat::group::hook_name(group);
    if name.is_empty() {
        return Err(format!("invalid group {group:?}"));
    }
    for dir in dirs {
        let path = dir.join(&name);
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

/// The result of a deployment that completes with no hook run: a component with no
/// config for its action, or a config of a group that expects none
/// ([`heat::group::DATA_GROUPS`]) with none installed; `note` is its `status_reason`.
pub fn nothing_run(note: Option<String>) -> DeploymentResult {
    let now = OffsetDateTime::now_utc();
    DeploymentResult {
        status_reason: note,
        ..Outcome::default().into_result(&[], Some(now), now)
    }
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

    /// Judges the outcome as Heat judges a deployment's signal: COMPLETE iff it ran, its
    /// status code is 0 (or missing) and the answer holds no `error_output` output. An
    /// error output fails it by being there at all, even empty or null (Heat's engine
    /// tests `name in details`, not the value); the reason quotes a visible one's value.
    pub fn into_result(
        self,
        decls: &[OutputDecl],
        started_at: Option<OffsetDateTime>,
        finished_at: OffsetDateTime,
    ) -> DeploymentResult {
        let error_output = decls
            .iter()
            .find(|d| d.error_output && self.outputs.contains_key(&d.name));
        let reason = match (&self.failure, self.status_code.unwrap_or(0), error_output) {
            (Some(reason), _, _) => Some(reason.clone()),
            (None, code, _) if code != 0 => Some(format!("hook exited with status {code}")),
            (None, _, Some(d)) => Some(error_reason(d, self.outputs.get(&d.name))),
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

/// Longest part of an error output's value quoted in a `status_reason`.
const MAX_REASON_VALUE_BYTES: usize = 512;

/// `error output "err": <its value>` (Heat's reason is `err : <value>`); a hidden
/// output's value is never quoted.
fn error_reason(decl: &OutputDecl, value: Option<&Value>) -> String {
    let text = match value {
        _ if decl.hidden => return format!("error output {:?} present (hidden)", decl.name),
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.trim_end().to_owned(),
        Some(other) => other.to_string(),
    };
    if text.is_empty() {
        return format!("error output {:?} present (empty)", decl.name);
    }
    let shown = flue_proto::text::head(&text, MAX_REASON_VALUE_BYTES);
    let more = if shown.len() < text.len() { "…" } else { "" };
    format!("error output {:?}: {shown}{more}", decl.name)
}

/// Cuts `s` to [`MAX_STREAM_BYTES`] (on a character boundary) and marks it when it was
/// cut here or `already_truncated` says bytes were dropped earlier.
pub fn bound(mut s: String, already_truncated: bool) -> String {
    let cut = s.len() > MAX_STREAM_BYTES;
    if cut {
        s.truncate(flue_proto::text::head(&s, MAX_STREAM_BYTES).len());
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
    item: &HeatItem,
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
    item: &HeatItem,
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
    let exited = match f.status_code() {
        Some(c) if c < 0 => {
            return Outcome {
                failure: Some(format!(
                    "hook {} was killed by signal {}",
                    path.display(),
                    -c
                )),
                ..raw
            };
        }
        Some(0) => None,
        Some(c) => Some(format!("hook {} exited with status {c}", path.display())),
        None if f.status.is_some_and(|s| !s.success()) => {
            Some(format!("hook {} failed", path.display()))
        }
        None => None,
    };
    if f.stdout.truncated {
        return Outcome {
            failure: Some(format!(
                "hook {} printed more than {MAX_HOOK_RESPONSE_BYTES} bytes",
                path.display()
            )),
            ..raw
        };
    }
    // As `55-heat-config`: a JSON object on stdout is the answer, whatever the exit
    // status; text is answered with the raw streams and the exit status; nothing from a
    // hook that exits 0 is an empty answer (no status code), so a silent hook succeeds.
    if f.stdout.bytes.is_empty() && exited.is_none() {
        return Outcome {
            status_code: None,
            ..raw
        };
    }
    match serde_json::from_slice::<Value>(&f.stdout.bytes) {
        Ok(Value::Object(response)) => {
            let mut answer = from_response(response, item);
            // Heat would lose the exit status here; a hook that failed and did not say
            // its status has failed.
            if answer.status_code.is_none() && exited.is_some() {
                answer.status_code = raw.status_code;
                answer.failure = answer.failure.or(exited);
            }
            answer
        }
        Ok(_) => Outcome {
            failure: Some(format!(
                "hook {} printed JSON that is not an object",
                path.display()
            )),
            ..raw
        },
        Err(_) => Outcome {
            failure: exited,
            ..raw
        },
    }
}

/// Reads a heat-config hook response: the three `deploy_*` keys and the declared outputs.
fn from_response(mut r: serde_json::Map<String, Value>, item: &HeatItem) -> Outcome {
    let mut stream = |key: &str| match r.remove(key) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => bound(s, false),
        Some(other) => bound(other.to_string(), false),
    };
    let stdout = stream("deploy_stdout");
    let stderr = stream("deploy_stderr");
    let (status_code, mut failure) = match status_code(r.remove("deploy_status_code")) {
        Ok(code) => (code, None),
        Err(reason) => (None, Some(reason)),
    };
    let mut outputs = BTreeMap::new();
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

/// A hook's `deploy_status_code` as Heat's engine reads it: a failure unless it is
/// missing, Python-false (`null`, `false`, `0`, `""`, empty) or reads as `0`
/// (`status_code and str(status_code) != '0'`). A status that is no integer is the
/// failure's reason.
fn status_code(v: Option<Value>) -> Result<Option<i64>, String> {
    let reported = |what: &dyn std::fmt::Display| Err(format!("hook reported status {what}"));
    match v {
        None | Some(Value::Null | Value::Bool(false)) => Ok(None),
        Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(Some(i)),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 1e15 => Ok(Some(f as i64)),
            _ => reported(&n),
        },
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => match s.parse::<i64>() {
            Ok(i) => Ok(Some(i)),
            Err(_) => reported(&format!("{s:?}")),
        },
        Some(Value::Bool(true)) => reported(&"true"),
        Some(Value::Array(a)) if a.is_empty() => Ok(None),
        Some(Value::Object(o)) if o.is_empty() => Ok(None),
        Some(_) => reported(&"that is not a number"),
    }
}

#[cfg(test)]
mod tests;
