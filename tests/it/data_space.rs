//! The stack data space through `flue-agent data` in real hooks, and what a config's
//! lifecycle hooks, ad-hoc actions and `get_input` substitution hand to the hook.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;

use flue_proto::{Action, CreateDeployment, Deployment, DeploymentStatus, subject};
use flue_tests::{Flue, WAIT, bin, write_executable};
use serde_json::{Value, json};

/// Creates a deployment of `config` on `server`, in `stack` if given, for `action`.
async fn deploy(
    flue: &Flue,
    config: &str,
    server: &str,
    stack: Option<&str>,
    action: &str,
    inputs: &[(&str, &str)],
) -> Deployment {
    let input_values: BTreeMap<String, Value> = inputs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    flue.client()
        .create_deployment(&CreateDeployment {
            action: Action::new(action).expect("action"),
            input_values,
            stack_id: stack.map(|s| s.parse().expect("stack id")),
            ..CreateDeployment::new(
                config.parse().expect("config id"),
                server.parse().expect("server id"),
            )
        })
        .await
        .expect("create deployment")
}

/// Runs `config` on `server` and returns it once finished, asserting it COMPLETE.
async fn run_complete(
    flue: &Flue,
    config: &str,
    server: &str,
    stack: Option<&str>,
    action: &str,
    inputs: &[(&str, &str)],
) -> Deployment {
    let d = deploy(flue, config, server, stack, action, inputs).await;
    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    done
}

/// Consumers on the data space's stream: waiting for a key must never create one.
async fn data_consumers(flue: &Flue) -> usize {
    let js = async_nats::jetstream::new(flue.nats.client().await);
    let mut stream = js
        .get_stream(format!("KV_{}", subject::DATA_BUCKET))
        .await
        .expect("the gateway created the data bucket");
    stream
        .info()
        .await
        .expect("stream info")
        .state
        .consumer_count
}

#[tokio::test]
async fn a_hook_waits_for_a_key_a_hook_on_another_server_puts() {
    let flue = Flue::start().await;
    flue.register("db").await;
    flue.register("web").await;
    let _db = flue.agent("db", &[]).await;
    let web = flue.agent("web", &[]).await;
    flue.script_config(
        "wait-addr",
        "#!/bin/sh\nset -e\n\
         printf '%s|%s|%s|%s' \"$FLUE_STACK_ID\" \"$FLUE_SERVER_ID\" \"$FLUE_DEPLOYMENT_ID\" \"$FLUE_AGENT\" \
           > \"$heat_outputs_path.env\"\n\
         flue-agent data get db/address --wait 60s > \"$heat_outputs_path.address\"\n",
        &[],
        &["address", "env"],
    )
    .await;
    flue.script_config(
        "put-addr",
        "#!/bin/sh\nset -e\nflue-agent data put db/address \"$addr\"\n",
        &["addr"],
        &[],
    )
    .await;

    let waiter = deploy(&flue, "wait-addr", "web", Some("st1"), "CREATE", &[]).await;
    // The key is not there yet: the hook blocks in `get --wait`.
    web.logs().wait_for("waiting for a data key", WAIT).await;
    assert_eq!(data_consumers(&flue).await, 0, "waiting created a consumer");

    run_complete(
        &flue,
        "put-addr",
        "db",
        Some("st1"),
        "CREATE",
        &[("addr", "10.0.0.5")],
    )
    .await;
    let done = flue.finished(&waiter.id).await;

    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.outputs.get("address"), Some(&json!("10.0.0.5")));
    let agent = std::fs::canonicalize(bin("flue-agent")).expect("agent path");
    assert_eq!(
        done.outputs.get("env"),
        Some(&json!(format!("st1|web|{}|{}", waiter.id, agent.display())))
    );
    assert_eq!(data_consumers(&flue).await, 0);
}

/// The data bucket's stream: its last sequence.
async fn data_last_seq(flue: &Flue) -> u64 {
    let js = async_nats::jetstream::new(flue.nats.client().await);
    let mut stream = js
        .get_stream(format!("KV_{}", subject::DATA_BUCKET))
        .await
        .expect("the gateway created the data bucket");
    stream
        .info()
        .await
        .expect("stream info")
        .state
        .last_sequence
}

/// An agent is a user of the edge account, a gateway of the state account: the state
/// account's stream export of the data keys' puts (`natsauth/edge.rs`, `data_puts`) is what
/// lets a waiting hook hear a put made there at once, without its 250 ms re-read. Shown
/// with a put the broker delivers but does not store (a compare-and-set on a sequence the
/// key never had): only the subscription can carry that value to the hook, a re-read never
/// finds it. Then a stored put by the gateway's user reaches a second waiter, an agent's
/// put goes through, and the stream grows by exactly those puts: neither direction echoes
/// a put back through the other (the edge account also service-imports the same subjects).
#[tokio::test]
async fn a_hook_waiting_for_a_key_wakes_on_a_put_made_in_the_state_account() {
    let flue = Flue::start().await;
    flue.register("web").await;
    let web = flue.agent("web", &[]).await;
    flue.script_config(
        "wait-key",
        "#!/bin/sh\nset -e\nflue-agent data get \"$key\" --wait 600s > \"$heat_outputs_path.value\"\n",
        &["key"],
        &["value"],
    )
    .await;
    flue.script_config(
        "put-key",
        "#!/bin/sh\nset -e\nflue-agent data put \"$key\" \"$value\"\n",
        &["key", "value"],
        &[],
    )
    .await;
    let tenant = "default".parse().expect("tenant");
    let stack = "st1".parse().expect("stack");
    let state = async_nats::jetstream::new(flue.nats.client().await);
    // 1. A put delivered, never stored.
    let waiter = deploy(
        &flue,
        "wait-key",
        "web",
        Some("st1"),
        "CREATE",
        &[("key", "unstored")],
    )
    .await;
    web.logs().wait_for("waiting for a data key", WAIT).await;
    let before = data_last_seq(&flue).await;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Expected-Last-Subject-Sequence", "1000000");
    let refused = state
        .publish_with_headers(
            subject::data_key_subject(&tenant, &stack, "unstored"),
            headers,
            "heard, not stored".into(),
        )
        .await
        .expect("published")
        .await;
    assert!(refused.is_err(), "the stream stored the put: {refused:?}");
    let done = flue.finished(&waiter.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.outputs.get("value"), Some(&json!("heard, not stored")));
    assert_eq!(
        data_last_seq(&flue).await,
        before,
        "the refused put was stored"
    );

    // 2. A stored put by the gateway's user, an agent's put, and no echo.
    let from = web.logs().lines().len();
    let waiter = deploy(
        &flue,
        "wait-key",
        "web",
        Some("st1"),
        "CREATE",
        &[("key", "stored")],
    )
    .await;
    web.logs()
        .wait_for_after(from, "waiting for a data key", WAIT)
        .await;
    let ack = state
        .publish(
            subject::data_key_subject(&tenant, &stack, "stored"),
            "from the state account".into(),
        )
        .await
        .expect("published")
        .await
        .expect("stored");
    let done = flue.finished(&waiter.id).await;
    assert_eq!(
        done.outputs.get("value"),
        Some(&json!("from the state account"))
    );
    run_complete(
        &flue,
        "put-key",
        "web",
        Some("st1"),
        "CREATE",
        &[("key", "by-agent"), ("value", "v")],
    )
    .await;
    let marker = state
        .publish(
            subject::data_key_subject(&tenant, &stack, "marker"),
            "last".into(),
        )
        .await
        .expect("published")
        .await
        .expect("stored");
    assert_eq!(
        marker.sequence,
        ack.sequence + 2,
        "the data stream holds more than the gateway's put, the agent's put and the marker"
    );
    assert_eq!(data_consumers(&flue).await, 0, "waiting created a consumer");
}

#[tokio::test]
async fn keys_stay_in_their_stack_and_mistakes_are_explained() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let _agent = flue.agent("s1", &[]).await;
    flue.script_config(
        "round-trip",
        "#!/bin/sh\nset -e\n\
         printf 'line1\\nline2\\n' | flue-agent data put cfg/multi -\n\
         flue-agent data get cfg/multi > \"$heat_outputs_path.multi\"\n\
         flue-agent data delete cfg/multi\n\
         flue-agent data get cfg/multi 2>&1 || echo \"rc=$?\"\n\
         flue-agent data put shared/secret v1\n",
        &[],
        &["multi"],
    )
    .await;
    flue.script_config(
        "probe",
        "#!/bin/sh\nexec 2>&1\n\
         flue-agent data get shared/secret; echo \" rc=$?\"\n\
         flue-agent data get shared/secret --wait 300ms; echo \" rc=$?\"\n\
         flue-agent data put 'bad key' x; echo \" rc=$?\"\n",
        &[],
        &[],
    )
    .await;

    let written = run_complete(&flue, "round-trip", "s1", Some("st1"), "CREATE", &[]).await;
    assert_eq!(
        written.outputs.get("multi"),
        Some(&json!("line1\nline2\n")),
        "stdin stored and printed exactly"
    );
    assert_eq!(
        written.deploy_stdout,
        "flue-agent data: key \"cfg/multi\" is not set\nrc=1\n"
    );

    let bad_key = "flue-agent data: data key \"bad key\" may only hold letters, digits and '_', '-', '/', '=', '.'\n rc=2\n";
    let same = run_complete(&flue, "probe", "s1", Some("st1"), "CREATE", &[]).await;
    assert_eq!(
        same.deploy_stdout,
        format!("v1 rc=0\nv1 rc=0\n{bad_key}"),
        "the value is printed with no newline added"
    );

    let other = run_complete(&flue, "probe", "s1", Some("st2"), "CREATE", &[]).await;
    assert_eq!(
        other.deploy_stdout,
        format!(
            "flue-agent data: key \"shared/secret\" is not set\n rc=1\n\
             flue-agent data: key \"shared/secret\" was not set within 300ms\n rc=1\n\
             {bad_key}"
        )
    );

    let none = run_complete(&flue, "probe", "s1", None, "CREATE", &[]).await;
    let no_stack = "flue-agent data: this deployment is not part of a stack\n rc=2\n";
    assert_eq!(none.deploy_stdout, no_stack.repeat(3));
}

/// Runs `flue-agent data ARGS` as a test process and returns (exit code, stderr).
async fn data_command(args: &[&str], socket: Option<&Path>) -> (Option<i32>, String) {
    let mut cmd = tokio::process::Command::new(bin("flue-agent"));
    cmd.arg("data")
        .args(args)
        .env_remove("FLUE_DATA_SOCKET")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(socket) = socket {
        cmd.env("FLUE_DATA_SOCKET", socket);
    }
    let out = tokio::time::timeout(WAIT, cmd.output())
        .await
        .expect("flue-agent data exits")
        .expect("run flue-agent data");
    assert!(out.stdout.is_empty(), "{out:?}");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn data_commands_outside_a_hook_exit_2_saying_why() {
    let (code, err) = data_command(&["get", "k"], None).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("flue-agent data only works inside a hook run by flue-agent"),
        "{err}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("data.sock");
    let (code, err) = data_command(&["put", "k", "v"], Some(&socket)).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("cannot reach the agent's data socket") && err.contains("data.sock"),
        "{err}"
    );

    let (code, err) = data_command(&["get", "k", "--wait", "5x"], Some(&socket)).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("invalid wait \"5x\""), "{err}");
}

#[tokio::test]
async fn lifecycle_hooks_adhoc_actions_and_substituted_inputs_reach_the_hook() {
    let flue = Flue::start().await;
    let hooks = flue.path("hooks");
    let items = flue.path("items");
    std::fs::create_dir_all(&hooks).expect("hook dir");
    std::fs::create_dir_all(&items).expect("items dir");
    // Keeps each item it gets, by deployment id (which also shows external hooks get it).
    write_executable(
        &hooks.join("dump"),
        &format!(
            "#!/bin/sh\ncat > '{}'/\"$FLUE_DEPLOYMENT_ID\".json\nprintf '{{}}'\n",
            items.display()
        ),
    );
    flue.register("s1").await;
    let _agent = flue.agent("s1", std::slice::from_ref(&hooks)).await;
    let client = flue.client();
    let structured = json!({
        "id": "structured", "group": "dump",
        "config": {
            "listen": {"get_input": "port"},
            "peers": [{"get_input": "deploy_server_id"}],
            "unknown": {"get_input": "nope"}
        },
        "inputs": [{"name": "port", "type": "Number"}, {"name": "target"}],
        "hooks": {"DELETE": {"remove": {"get_input": "port"}}},
        "actions": {"backup": {"config": {"to": {"get_input": "target"}}, "description": "copy"}},
        "substitute_inputs": true
    });
    client
        .create_config(&serde_json::from_value(structured).expect("spec"))
        .await
        .expect("config");
    let script = json!({
        "id": "scripted", "group": "script",
        "config": "#!/bin/sh\necho \"apply $who\"\n",
        "inputs": [{"name": "who"}],
        "hooks": {"DELETE": "#!/bin/sh\necho \"delete $who\"\n"},
        "actions": {"backup": {"config": "#!/bin/sh\necho \"backup $who\"\n"}}
    });
    client
        .create_config(&serde_json::from_value(script).expect("spec"))
        .await
        .expect("config");

    let inputs = [("port", "8080"), ("target", "/backups")];
    let item_config = |d: &Deployment| -> Value {
        let text = std::fs::read_to_string(items.join(format!("{}.json", d.id))).expect("item");
        serde_json::from_str::<Value>(&text).expect("json")["config"].clone()
    };
    let created = run_complete(&flue, "structured", "s1", None, "CREATE", &inputs).await;
    assert_eq!(
        item_config(&created),
        json!({"listen": 8080, "peers": ["s1"], "unknown": null})
    );
    let deleted = run_complete(&flue, "structured", "s1", None, "DELETE", &inputs).await;
    assert_eq!(item_config(&deleted), json!({"remove": 8080}));
    let backed_up = run_complete(&flue, "structured", "s1", None, "backup", &inputs).await;
    assert_eq!(item_config(&backed_up), json!({"to": "/backups"}));

    let who = [("who", "web")];
    for (action, stdout) in [
        ("CREATE", "apply web\n"),
        ("UPDATE", "apply web\n"),
        ("DELETE", "delete web\n"),
        ("backup", "backup web\n"),
    ] {
        let d = run_complete(&flue, "scripted", "s1", None, action, &who).await;
        assert_eq!(d.deploy_stdout, stdout, "{action}");
    }
}
