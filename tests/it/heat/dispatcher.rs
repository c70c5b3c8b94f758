//! Flue against Heat's own dispatcher: the same config and values run through heat-agents'
//! `55-heat-config` (with the stock script hook, signalling to a notifier that keeps what
//! it would send to Heat) and through Flue's agent give the script the same values.

use std::collections::BTreeMap;

use flue_proto::DeploymentStatus;
use flue_tests::{Flue, WAIT, write_executable};
use serde_json::{Value, json};

use super::{config, heat_agents, python, run, stock_hooks};

const NAMES: [&str; 6] = ["name", "port_text", "flag", "ratio", "big", "deploy_action"];

/// A script writing each of [`NAMES`] into its output.
fn script() -> String {
    let lines: String = NAMES
        .iter()
        .map(|v| format!("printf '%s' \"${v}\" > \"$heat_outputs_path.{v}\"\n"))
        .collect();
    format!("#!/bin/sh\n{lines}")
}

/// Runs `55-heat-config` on the one item `item` with the stock hooks in `hooks`; returns
/// the signal data it hands `heat-config-notify`.
async fn dispatch(flue: &Flue, hooks: &std::path::Path, item: &Value) -> Value {
    let conf = flue.path("heat-config.json");
    std::fs::write(&conf, serde_json::to_vec(&json!([item])).expect("ser")).expect("conf");
    let signal = flue.path("signal.json");
    let notify = flue.path("notify");
    write_executable(
        &notify,
        &format!("#!/bin/sh\ncat > '{}'\n", signal.display()),
    );
    let dispatcher = heat_agents().join("heat-config/os-refresh-config/configure.d/55-heat-config");
    let out = tokio::process::Command::new(python())
        .arg(&dispatcher)
        .env("HEAT_SHELL_CONFIG", &conf)
        .env("HEAT_CONFIG_DEPLOYED", flue.path("deployed"))
        .env("HEAT_CONFIG_HOOKS", hooks)
        .env("HEAT_CONFIG_NOTIFY", &notify)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(WAIT, out)
        .await
        .expect("55-heat-config finishes")
        .expect("run 55-heat-config");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&signal)
        .unwrap_or_else(|e| panic!("no signal ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    serde_json::from_str(&text).expect("signal json")
}

#[tokio::test]
async fn heats_own_dispatcher_and_flue_hand_a_stock_script_the_same_values() {
    let flue = Flue::start().await;
    let hooks = stock_hooks(&flue, &["script"]);
    flue.register("s1").await;
    let _agent = flue.agent("s1", std::slice::from_ref(&hooks)).await;
    // Values as Heat's engine passes them on: of the template's types, in String inputs.
    let values = json!({"name": "web", "port_text": 8080, "flag": true, "ratio": 1.5, "big": 1e16});
    let declared: Vec<Value> = NAMES[..5]
        .iter()
        .map(|n| json!({"name": n, "type": "String"}))
        .collect();
    let outputs: Vec<Value> = NAMES
        .iter()
        .map(|n| json!({"name": n, "type": "String"}))
        .collect();

    // The item Heat's engine would put in the server's metadata.
    let mut inputs: Vec<Value> = NAMES[..5]
        .iter()
        .map(|n| json!({"name": n, "type": "String", "value": values[n]}))
        .collect();
    inputs.push(json!({"name": "deploy_action", "type": "String", "value": "CREATE"}));
    let item = json!({
        "id": "heat-1", "name": "cfg", "group": "script", "creation_time": "2026-01-01T00:00:00Z",
        "config": script(), "options": {}, "inputs": inputs, "outputs": outputs,
    });
    let signal = dispatch(&flue, &hooks, &item).await;
    assert_eq!(signal["deploy_status_code"], json!(0), "{signal}");

    config(
        &flue,
        json!({"id": "cfg", "group": "script", "config": script(),
               "inputs": declared, "outputs": outputs}),
    )
    .await;
    let done = run(&flue, "cfg", "s1", values).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");

    let heat: BTreeMap<&str, Value> = NAMES.iter().map(|n| (*n, signal[n].clone())).collect();
    let flue_got: BTreeMap<&str, Value> = NAMES
        .iter()
        .map(|n| (*n, done.outputs.get(*n).cloned().unwrap_or(Value::Null)))
        .collect();
    assert_eq!(flue_got, heat);
    // What they are: Python's str() of each value.
    assert_eq!(heat["flag"], json!("True"));
    assert_eq!(heat["big"], json!("1e+16"));
}

#[tokio::test]
async fn heats_own_dispatcher_and_flue_judge_a_silent_hook_and_a_json_answer_with_a_failed_exit_alike()
 {
    let flue = Flue::start().await;
    let hooks = flue.path("hooks");
    std::fs::create_dir_all(&hooks).expect("hook dir");
    write_executable(&hooks.join("quiet"), "#!/bin/sh\ncat > /dev/null\n");
    write_executable(
        &hooks.join("answers"),
        "#!/bin/sh\ncat > /dev/null\necho '{\"deploy_status_code\": 0, \"result\": \"r\"}'\nexit 1\n",
    );
    flue.register("s1").await;
    let _agent = flue.agent("s1", std::slice::from_ref(&hooks)).await;
    let outputs = json!([{"name": "result", "type": "String"}]);

    for group in ["quiet", "answers"] {
        let item = json!({
            "id": format!("heat-{group}"), "name": group, "group": group,
            "creation_time": "2026-01-01T00:00:00Z", "config": "", "options": {},
            "inputs": [], "outputs": outputs,
        });
        let signal = dispatch(&flue, &hooks, &item).await;
        config(
            &flue,
            json!({"id": group, "group": group, "outputs": outputs}),
        )
        .await;
        let done = run(&flue, group, "s1", json!({})).await;
        // Heat's engine fails a signal only for a non-zero status code or an error output.
        let code = &signal["deploy_status_code"];
        let heat_failed = !(code.is_null() || *code == json!(0));
        assert!(!heat_failed, "{group}: {signal}");
        assert_eq!(done.status, DeploymentStatus::Complete, "{group}: {done:?}");
        assert_eq!(
            done.outputs.get("result"),
            signal.get("result"),
            "{group}: the same outputs"
        );
    }
}
