//! Heat's dispatcher as the oracle (issue 25): every item shape of [`cases::cases`] runs
//! through heat-agents' own `55-heat-config` and through Flue's agent, and the test asserts
//! that the hook got the same input (its stdin JSON; for `script`, the environment the
//! script saw) and that the deployment was judged the same (complete or failed, status
//! code, outputs), or, where Flue differs on purpose (each difference and its reason is in
//! docs/heat.md), that it differs exactly so.
//!
//! Heat's side is the item Heat's engine puts in the server's metadata for the deployment
//! ([`heat_item`]: Heat's `_build_derived_inputs`, with the ids Flue's deployment has),
//! handed by `55-heat-config` to the same hooks, and its signal judged as Heat's engine
//! judges one ([`heat_judges`]). Every hook is behind a recorder that keeps its stdin.

mod cases;
mod verdict;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use flue_proto::{Deployment, DeploymentStatus};
use flue_tests::{Flue, WAIT, write_executable};
use serde_json::{Value, json};

use super::{config, heat_agents, python, run, stock_hooks_in};
use cases::{Case, ENV_OUTPUT};

/// What one side did with a case.
#[derive(Debug)]
pub(super) struct Side {
    /// What the hook got: its stdin JSON (for `script`, the script's environment as a
    /// map); `None` when no hook ran.
    pub input: Option<Value>,
    /// The judged result; `None` when nothing was signalled (Heat's side only).
    pub judged: Option<Judged>,
    /// The dispatcher's log (Heat) or the deployment's `status_reason` (Flue).
    pub note: String,
}

/// A deployment's result as Heat's engine judges it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Judged {
    pub complete: bool,
    /// `deploy_status_code`, null when absent.
    pub status_code: Value,
    /// The declared outputs the answer holds.
    pub outputs: BTreeMap<String, Value>,
}

/// What `55-heat-config` did with one item.
pub(super) struct Dispatched {
    /// The signal data it handed `heat-config-notify`; `None` when it signalled nothing.
    pub signal: Option<Value>,
    /// Its log.
    pub stderr: String,
}

/// Runs `55-heat-config` on the one item `item` with the hooks in `hooks`, its deployed
/// state in `<scratch>/deployed-<tag>`.
pub(super) async fn dispatch(flue: &Flue, hooks: &Path, item: &Value, tag: &str) -> Dispatched {
    let conf = flue.path(&format!("heat-config-{tag}.json"));
    std::fs::write(&conf, serde_json::to_vec(&json!([item])).expect("ser")).expect("conf");
    let signal = flue.path(&format!("signal-{tag}.json"));
    let notify = flue.path("notify");
    write_executable(&notify, "#!/bin/sh\ncat > \"$SIGNAL_FILE\"\n");
    let dispatcher = heat_agents().join("heat-config/os-refresh-config/configure.d/55-heat-config");
    let out = tokio::process::Command::new(python())
        .arg(&dispatcher)
        .env("HEAT_SHELL_CONFIG", &conf)
        .env(
            "HEAT_CONFIG_DEPLOYED",
            flue.path(&format!("deployed-{tag}")),
        )
        .env("HEAT_CONFIG_HOOKS", hooks)
        .env("HEAT_CONFIG_NOTIFY", &notify)
        .env("SIGNAL_FILE", &signal)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(WAIT, out)
        .await
        .expect("55-heat-config finishes")
        .expect("run 55-heat-config");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let signal = std::fs::read_to_string(&signal)
        .ok()
        .map(|text| serde_json::from_str(&text).expect("signal json"));
    Dispatched { signal, stderr }
}

/// The item Heat's engine derives for `case` deployed as `done` (Heat's
/// `_build_derived_inputs` and `software_config_io`): declared inputs with their type,
/// description and default, and the given value, else the default, else null; extra
/// values as `String`; Heat's derived inputs with their descriptions.
fn heat_item(case: &Case, done: &Deployment, scratch: &str) -> Value {
    let mut values = case.values.as_object().cloned().unwrap_or_default();
    let mut inputs: Vec<Value> = Vec::new();
    for decl in case.inputs.as_array().into_iter().flatten() {
        let name = decl["name"].as_str().expect("input name");
        let mut input = json!({"name": name, "type": decl.get("type").unwrap_or(&json!("String"))});
        for key in ["description", "default"] {
            if let Some(v) = decl.get(key) {
                input[key] = v.clone();
            }
        }
        input["value"] = values
            .remove(name)
            .or_else(|| decl.get("default").cloned())
            .unwrap_or(Value::Null);
        inputs.push(input);
    }
    inputs.extend(
        values
            .into_iter()
            .map(|(name, value)| json!({"name": name, "type": "String", "value": value})),
    );
    let resource = done
        .resource_name
        .clone()
        .unwrap_or_else(|| done.name.clone());
    let derived = [
        (
            "deploy_server_id",
            done.server_id.to_string(),
            "ID of the server being deployed to",
        ),
        (
            "deploy_action",
            done.action.to_string(),
            "Name of the current action being deployed",
        ),
        (
            "deploy_stack_id",
            String::new(),
            "ID of the stack this deployment belongs to",
        ),
        (
            "deploy_resource_name",
            resource,
            "Name of this deployment resource in the stack",
        ),
        (
            "deploy_signal_transport",
            "NO_SIGNAL".to_owned(),
            "How the server should signal to heat with the deployment output values.",
        ),
    ];
    inputs.extend(derived.into_iter().map(|(name, value, about)| {
        json!({"name": name, "type": "String", "value": value, "description": about})
    }));
    let outputs: Vec<Value> = case
        .outputs()
        .into_iter()
        .map(|mut o| {
            o["type"] = o.get("type").cloned().unwrap_or(json!("String"));
            o["error_output"] = o.get("error_output").cloned().unwrap_or(json!(false));
            o
        })
        .collect();
    json!({
        "id": done.id, "name": done.name, "group": case.group,
        "creation_time": "2026-01-01T00:00:00Z", "config": case.body(scratch),
        "options": {}, "inputs": inputs, "outputs": outputs,
    })
}

/// A signal judged as Heat's engine judges it (`signal_software_deployment`): failed when
/// `deploy_status_code` is set and not `0`, or when a declared `error_output` is in it.
fn heat_judges(case: &Case, signal: &Value) -> Judged {
    let code = match signal.get("deploy_status_code") {
        None | Some(Value::Null) => Value::Null,
        Some(Value::String(s)) if s.is_empty() => Value::Null,
        Some(Value::String(s)) => s.parse::<i64>().map_or(json!(s), Value::from),
        Some(other) => other.clone(),
    };
    let failed_code = !(code.is_null() || code == json!(0) || code == json!(false));
    let outputs = declared_in(case, signal.as_object().cloned().unwrap_or_default());
    let failed_output = case.outputs().iter().any(|o| {
        o["error_output"] == json!(true) && outputs.contains_key(o["name"].as_str().unwrap_or(""))
    });
    Judged {
        complete: !(failed_code || failed_output),
        status_code: code,
        outputs,
    }
}

/// The declared outputs (but the recorded environment) among `answer`'s keys.
fn declared_in(case: &Case, answer: serde_json::Map<String, Value>) -> BTreeMap<String, Value> {
    let names: Vec<Value> = case.outputs().iter().map(|o| o["name"].clone()).collect();
    answer
        .into_iter()
        .filter(|(k, _)| k != ENV_OUTPUT && names.contains(&json!(k)))
        .collect()
}

/// What the hook got: the recorded stdin, or for `script` the environment the script
/// wrote into its [`ENV_OUTPUT`] (`NAME=value` lines).
fn hook_input(case: &Case, stdin: Option<Value>, outputs: Option<&Value>) -> Option<Value> {
    if case.group != "script" {
        return stdin.map(|mut item| {
            // When it was made is not an input; its format is Heat's or Flue's own.
            item.as_object_mut().map(|o| o.remove("creation_time"));
            item
        });
    }
    let text = outputs?.get(ENV_OUTPUT)?.as_str()?.to_owned();
    let vars: serde_json::Map<String, Value> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), json!(v)))
        .collect();
    Some(Value::Object(vars))
}

/// The recorded stdin at `file`, taken (so the next case starts with none).
fn take_stdin(file: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(file).ok()?;
    std::fs::remove_file(file).expect("remove recorded stdin");
    Some(serde_json::from_str(&text).expect("recorded stdin is JSON"))
}

/// A hook dir `<scratch>/<side>-hooks` where every hook of [`cases::hooks`] (and the stock
/// json-file, hiera, ansible and, for Heat, script hooks) keeps its stdin in
/// `<scratch>/<side>-stdin.json` before running; returns the dir and that file.
fn recording_hooks(flue: &Flue, side: &str) -> (PathBuf, PathBuf) {
    let stock_groups: &[&str] = if side == "heat" {
        &["json-file", "hiera", "ansible", "script"]
    } else {
        &["json-file", "hiera", "ansible"]
    };
    let stock = stock_hooks_in(
        flue,
        &format!("{side}-stock"),
        &format!("{side}-work"),
        stock_groups,
    );
    let own = flue.path("own-hooks");
    std::fs::create_dir_all(&own).expect("own hook dir");
    let hooks = flue.path(&format!("{side}-hooks"));
    std::fs::create_dir_all(&hooks).expect("hook dir");
    let stdin = flue.path(&format!("{side}-stdin.json"));
    let mut inner: Vec<(String, PathBuf)> = stock_groups
        .iter()
        .map(|g| ((*g).to_owned(), stock.join(g)))
        .collect();
    for (name, text) in cases::hooks() {
        write_executable(&own.join(name), text);
        inner.push((name.to_owned(), own.join(name)));
    }
    for (name, path) in inner {
        write_executable(
            &hooks.join(&name),
            &format!(
                "#!/bin/sh\ncat > '{s}'\nexec '{}' < '{s}'\n",
                path.display(),
                s = stdin.display()
            ),
        );
    }
    (hooks, stdin)
}

#[tokio::test]
async fn heats_own_dispatcher_and_flue_give_every_item_shape_the_same_hook_input_and_verdict() {
    let flue = Flue::start().await;
    let (heat_hooks, heat_stdin) = recording_hooks(&flue, "heat");
    let (flue_hooks, flue_stdin) = recording_hooks(&flue, "flue");
    flue.register("s1").await;
    let _agent = flue.agent("s1", std::slice::from_ref(&flue_hooks)).await;

    let scratch = flue.path("files").display().to_string();
    for case in &cases::cases() {
        config(&flue, case.config_spec(&scratch)).await;
        let done = run(&flue, case.id(), "s1", case.values.clone()).await;
        let flue_side = Side {
            input: hook_input(
                case,
                take_stdin(&flue_stdin),
                Some(&serde_json::to_value(&done.outputs).expect("outputs")),
            ),
            judged: Some(Judged {
                complete: done.status == DeploymentStatus::Complete,
                status_code: json!(done.deploy_status_code),
                outputs: declared_in(case, done.outputs.clone().into_iter().collect()),
            }),
            note: done.status_reason.clone().unwrap_or_default(),
        };

        let item = heat_item(case, &done, &scratch);
        let dispatched = dispatch(&flue, &heat_hooks, &item, case.name).await;
        let heat_side = Side {
            input: hook_input(case, take_stdin(&heat_stdin), dispatched.signal.as_ref()),
            judged: dispatched.signal.as_ref().map(|s| heat_judges(case, s)),
            note: dispatched.stderr,
        };
        case.verdict.check(case.name, &heat_side, &flue_side);
    }
}
