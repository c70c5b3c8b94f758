//! heat-agents' stock hooks (script, json-file, hiera, ansible) through Flue's agent, with
//! inputs of every declared type.

use flue_proto::DeploymentStatus;
use flue_tests::Flue;
use serde_json::{Value, json};

use super::{config, run, stock_hooks};

/// The variables the environment test reads back, one output each.
const VARS: [&str; 10] = [
    "name",
    "port_text",
    "flag",
    "settings",
    "names",
    "nothing",
    "deploy_server_id",
    "deploy_action",
    "deploy_stack_id",
    "deploy_signal_transport",
];

#[tokio::test]
async fn the_stock_script_hook_and_the_builtin_script_give_a_script_the_same_environment() {
    let flue = Flue::start().await;
    let hooks = stock_hooks(&flue, &["script"]);
    flue.register("stock").await;
    flue.register("builtin").await;
    let _stock = flue.agent("stock", std::slice::from_ref(&hooks)).await;
    let _builtin = flue.agent("builtin", &[]).await;
    let body: String = VARS
        .iter()
        .map(|v| format!("printf '%s' \"${v}\" > \"$heat_outputs_path.{v}\"\n"))
        .collect();
    config(
        &flue,
        json!({
            "id": "env", "group": "script", "config": format!("#!/bin/sh\n{body}"),
            "inputs": [
                {"name": "name"}, {"name": "port_text", "type": "String"},
                {"name": "flag"}, {"name": "settings", "type": "Json"},
                {"name": "names"}, {"name": "nothing"}
            ],
            "outputs": VARS.iter().map(|v| json!({"name": v})).collect::<Vec<_>>(),
        }),
    )
    .await;
    let values = json!({
        "name": "web", "port_text": 8080, "flag": true,
        "settings": {"a": [1, "x"], "b": "é"}, "names": ["a", "b"]
    });

    for server in ["stock", "builtin"] {
        let done = run(&flue, "env", server, values.clone()).await;
        assert_eq!(
            done.status,
            DeploymentStatus::Complete,
            "{server}: {done:?}"
        );
        let want = json!({
            "name": "web",
            // A String input's non-text value as 55-heat-config makes it: str().
            "port_text": "8080",
            "flag": "True",
            // Maps and lists as hook-script.py writes them: json.dumps.
            "settings": r#"{"a": [1, "x"], "b": "\u00e9"}"#,
            "names": r#"["a", "b"]"#,
            // No value: Python's str(None), as 55-heat-config hands it.
            "nothing": "None",
            "deploy_server_id": server,
            "deploy_action": "CREATE",
            "deploy_stack_id": "",
            "deploy_signal_transport": "NO_SIGNAL",
        });
        assert_eq!(
            serde_json::to_value(&done.outputs).expect("outputs"),
            want,
            "{server}"
        );
    }
}

#[tokio::test]
async fn number_and_boolean_inputs_break_the_stock_script_hook_as_in_heat_but_not_the_builtin_one()
{
    let flue = Flue::start().await;
    let hooks = stock_hooks(&flue, &["script"]);
    flue.register("stock").await;
    flue.register("builtin").await;
    let _stock = flue.agent("stock", std::slice::from_ref(&hooks)).await;
    let _builtin = flue.agent("builtin", &[]).await;
    config(
        &flue,
        json!({
            "id": "typed", "group": "script",
            "config": "#!/bin/sh\nprintf '%s %s' \"$port\" \"$enabled\" > \"$heat_outputs_path.seen\"\n",
            "inputs": [{"name": "port", "type": "Number"}, {"name": "enabled", "type": "Boolean"}],
            "outputs": [{"name": "seen"}],
        }),
    )
    .await;
    let values = json!({"port": "8080", "enabled": "yes"});

    // hook-script.py puts a number in os.environ and Python refuses it, as under Heat.
    let stock = run(&flue, "typed", "stock", values.clone()).await;
    assert_eq!(stock.status, DeploymentStatus::Failed, "{stock:?}");
    assert!(
        stock.deploy_stderr.contains("TypeError"),
        "{}",
        stock.deploy_stderr
    );
    assert!(stock.outputs.is_empty(), "the script never ran");

    let builtin = run(&flue, "typed", "builtin", values).await;
    assert_eq!(builtin.status, DeploymentStatus::Complete, "{builtin:?}");
    assert_eq!(builtin.outputs["seen"], json!("8080 true"));
}

#[tokio::test]
async fn the_stock_json_file_hook_writes_typed_values_into_the_files_its_config_names() {
    let flue = Flue::start().await;
    let hooks = stock_hooks(&flue, &["json-file"]);
    flue.register("s1").await;
    let _agent = flue.agent("s1", std::slice::from_ref(&hooks)).await;
    let target = flue.path("etc/app/settings.json");
    config(
        &flue,
        json!({
            "id": "files", "group": "json-file", "substitute_inputs": true,
            "config": {target.display().to_string(): {
                "port": {"get_input": "port"}, "enabled": {"get_input": "enabled"},
                "peers": {"get_input": "peers"}, "server": {"get_input": "deploy_server_id"}
            }},
            "inputs": [
                {"name": "port", "type": "Number"}, {"name": "enabled", "type": "Boolean"},
                {"name": "peers", "type": "CommaDelimitedList"}
            ],
        }),
    )
    .await;

    let done = run(
        &flue,
        "files",
        "s1",
        json!({"port": "8080", "enabled": "true", "peers": "a, b"}),
    )
    .await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.deploy_status_code, Some(0));
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&target).expect("file written"))
            .expect("json");
    assert_eq!(
        written,
        json!({"port": 8080, "enabled": true, "peers": ["a", "b"], "server": "s1"})
    );
}

#[tokio::test]
async fn the_stock_hiera_hook_writes_its_hierarchy_and_datafiles() {
    let flue = Flue::start().await;
    let hooks = stock_hooks(&flue, &["hiera"]);
    flue.register("s1").await;
    let _agent = flue.agent("s1", std::slice::from_ref(&hooks)).await;
    config(
        &flue,
        json!({
            "id": "hiera", "group": "hiera", "substitute_inputs": true,
            "config": {
                "hierarchy": ["nodes/%{::fqdn}", "common"],
                "datafiles": {"common": {
                    "ntp::servers": {"get_input": "ntp_servers"},
                    "app::port": {"get_input": "port"}
                }}
            },
            "inputs": [
                {"name": "ntp_servers", "type": "CommaDelimitedList"},
                {"name": "port", "type": "Number"}
            ],
        }),
    )
    .await;

    let done = run(
        &flue,
        "hiera",
        "s1",
        json!({"ntp_servers": "0.pool.ntp.org,1.pool.ntp.org", "port": 8140}),
    )
    .await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    let hiera = std::fs::read_to_string(flue.path("heat/hiera.yaml")).expect("hiera.yaml");
    assert!(
        hiera.ends_with(":hierarchy:\n  - nodes/%{::fqdn}\n  - common\n"),
        "{hiera}"
    );
    let common: Value = serde_json::from_str(
        &std::fs::read_to_string(flue.path("heat/hieradata/common.json")).expect("datafile"),
    )
    .expect("json");
    assert_eq!(
        common,
        json!({"ntp::servers": ["0.pool.ntp.org", "1.pool.ntp.org"], "app::port": 8140})
    );
}

/// A playbook that computes with a number and branches on a boolean: with the values as
/// text (as Flue used to send them) Ansible fails on both.
const PLAYBOOK: &str = "\
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: next port
      copy:
        content: '{{ app_port + 1 }}'
        dest: '{{ heat_outputs_path }}.next_port'
      when: enabled
";

#[tokio::test]
async fn the_stock_ansible_hook_can_compute_with_numbers_and_branch_on_booleans() {
    let flue = Flue::start().await;
    let hooks = stock_hooks(&flue, &["ansible"]);
    flue.register("s1").await;
    let _agent = flue.agent("s1", std::slice::from_ref(&hooks)).await;
    config(
        &flue,
        json!({
            "id": "play", "group": "ansible", "config": PLAYBOOK,
            "inputs": [{"name": "app_port", "type": "Number"}, {"name": "enabled", "type": "Boolean"}],
            "outputs": [{"name": "next_port"}],
        }),
    )
    .await;

    let on = run(
        &flue,
        "play",
        "s1",
        json!({"app_port": "8080", "enabled": "true"}),
    )
    .await;
    assert_eq!(on.status, DeploymentStatus::Complete, "{on:?}");
    assert_eq!(on.outputs.get("next_port"), Some(&json!("8081")), "{on:?}");

    let off = run(
        &flue,
        "play",
        "s1",
        json!({"app_port": 8080, "enabled": false}),
    )
    .await;
    assert_eq!(off.status, DeploymentStatus::Complete, "{off:?}");
    assert!(off.outputs.is_empty(), "skipped: {off:?}");
    assert!(
        off.deploy_stdout.contains("skipped=1"),
        "{}",
        off.deploy_stdout
    );
}
