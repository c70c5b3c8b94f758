//! Issue 10 point 9, the proof: Flue across isolated tenant networks made of network
//! namespaces, the secure way. A control-plane namespace holds the NATS hub (operator mode,
//! TLS) and the gateway; each tenant network holds a NATS leaf node linked to the hub over
//! TLS with its tenant's credentials, and agents that reach nothing but it. Tenants kept
//! apart by the broker, and the leaf link's TLS: `netns_tenants`.

use std::net::Ipv4Addr;
use std::time::Duration;

use flue_proto::{Deployment, DeploymentStatus, Stack, TenantId, subject};
use flue_tests::netns::{Reach, at};
use flue_tests::tenant_net::{
    GATEWAY_LISTEN, HUB_CLIENT_PORT, LEAF_PORT, PROBE_LIMIT, TENANTS, TenantNetworks,
};
use serde_json::json;

use crate::stack::example;

/// The gateway's port inside `cp`.
fn gateway_port() -> u16 {
    GATEWAY_LISTEN
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port in GATEWAY_LISTEN")
}

#[tokio::test]
async fn a_tenant_network_reaches_the_control_plane_only_at_the_leaf_node_port() {
    let mut env = TenantNetworks::start().await;
    let t1 = env.add_tenant_network("t1", &["web"]).await;
    let t1 = &env.tenants[t1];
    let cp_addr = t1.link.a;

    // The gateway and the hub's client port do listen, inside cp: what follows is about reach.
    for port in [gateway_port(), HUB_CLIENT_PORT] {
        let reach = env
            .cp
            .probe(at(Ipv4Addr::LOCALHOST, port), PROBE_LIMIT)
            .await;
        assert_eq!(reach, Reach::Connected, "port {port} inside cp");
    }
    // From the tenant network: the leaf-node port, and nothing else, on cp's address.
    let leaf = t1.ns.probe(at(cp_addr, LEAF_PORT), PROBE_LIMIT).await;
    assert_eq!(leaf, Reach::Connected, "the hub's leaf-node port from t1");
    for port in [gateway_port(), HUB_CLIENT_PORT] {
        let reach = t1.ns.probe(at(cp_addr, port), PROBE_LIMIT).await;
        assert_eq!(reach, Reach::Refused, "port {port} of cp from t1");
    }
    // No other address of cp is even routable from t1.
    let other_side = Ipv4Addr::new(10, 250, 99, 1);
    let reach = t1
        .ns
        .probe(at(other_side, gateway_port()), PROBE_LIMIT)
        .await;
    assert_eq!(reach, Reach::Unreachable, "an address outside t1's link");
    // And the whole of cp's exposure: every listening socket is on loopback but the leaf port.
    let listeners = env.cp.tcp_listeners();
    assert!(
        listeners.contains(&GATEWAY_LISTEN.to_owned()),
        "{listeners:?}"
    );
    let exposed: Vec<&String> = listeners
        .iter()
        .filter(|l| !l.starts_with("127.0.0.1:") && !l.starts_with("[::1]:"))
        .collect();
    assert!(
        exposed
            .iter()
            .all(|l| l.ends_with(&format!(":{LEAF_PORT}")))
            && !exposed.is_empty(),
        "cp listens beyond loopback on {exposed:?}"
    );
}

#[tokio::test]
async fn a_two_server_stack_with_data_flowing_between_the_servers_completes_behind_a_leaf_node() {
    let mut env = TenantNetworks::start().await;
    let t1 = env.add_tenant_network("t1", &["db", "web"]).await;
    env.start_agent(t1, "db", &[]).await;
    env.start_agent(t1, "web", &[]).await;

    // Two tiers: web gets db's address and (hidden) password, carried by the gateway.
    let data = env.path("data");
    let data_param = format!("data_dir={}", data.display());
    let run = env
        .flue(&[
            "stack",
            "create",
            "shop",
            "-t",
            &example("two-tier"),
            "-P",
            &data_param,
        ])
        .await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("stack shop: CREATE_COMPLETE"), "{run}");
    let password = std::fs::read_to_string(data.join("db/password")).expect("db password");
    let app_conf = std::fs::read_to_string(data.join("web/app.conf")).expect("app.conf");
    assert!(
        app_conf.contains(&format!(
            "postgres://app:{}@127.0.0.1:5432/app",
            password.trim_end()
        )),
        "{app_conf}"
    );
}

#[tokio::test]
async fn a_data_key_one_server_puts_reaches_the_other_waiting_behind_the_same_leaf_node() {
    let mut env = TenantNetworks::start().await;
    let t1 = env.add_tenant_network("t1", &["db", "web"]).await;
    env.start_agent(t1, "db", &[]).await;
    env.start_agent(t1, "web", &[]).await;

    // The data space through the leaf: db waits for a key, and only once it waits does
    // web put it (its hook holds until the test opens a gate file), so the value must reach
    // a waiting reader across the leaf node, with the rights each agent's credentials give.
    let gate = env.path("gate");
    let template = env.path("handover.yaml");
    std::fs::write(&template, HANDOVER).expect("template");
    let (template, gate_param) = (
        template.display().to_string(),
        format!("gate={}", gate.display()),
    );
    let args = [
        "stack",
        "create",
        "handover",
        "-t",
        &template,
        "-P",
        &gate_param,
    ];
    let create = env.flue(&args);
    let open_gate = async {
        let db = &env.tenants[t1].agents[0];
        db.wait_for("waiting for a data key").await;
        std::fs::write(&gate, "open").expect("open the gate");
    };
    let (run, ()) = tokio::join!(create, open_gate);
    assert_eq!(run.code, 0, "{run}");
    let shown = env.flue(&["stack", "show", "handover", "--json"]).await;
    assert_eq!(shown.code, 0, "{shown}");
    let stack: Stack = serde_json::from_str(&shown.stdout).expect("stack json");
    assert_eq!(stack.state.outputs["db_got"], json!("hello from web"));
}

/// db waits for a key in the stack's data space that web puts once the gate file exists.
const HANDOVER: &str = r#"
heat_template_version: 2018-08-31
parameters:
  gate: {type: string}
resources:
  wait_config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      outputs: [{name: got}]
      config: |
        #!/bin/sh
        set -eu
        flue-agent data get from-web --wait 60s > "$heat_outputs_path.got"
  put_config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: gate}]
      config: |
        #!/bin/sh
        set -eu
        while [ ! -e "$gate" ]; do sleep 0.05; done
        flue-agent data put from-web "hello from $deploy_server_id"
  db_wait:
    type: OS::Heat::SoftwareDeployment
    properties: {config: {get_resource: wait_config}, server: db}
  web_put:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: put_config}
      server: web
      input_values: {gate: {get_param: gate}}
outputs:
  db_got: {value: {get_attr: [db_wait, got]}}
"#;

#[tokio::test]
async fn an_agent_behind_a_leaf_node_acks_on_the_plain_ack_subject_and_round_trips_are_measured() {
    let mut env = TenantNetworks::start().await;
    let t1 = env.add_tenant_network("t1", &["leafed"]).await;
    env.start_agent(t1, "leafed", &[]).await;
    let _direct = env.start_control_plane_agent("direct").await;
    let creds = env.tenant_user_creds(TENANTS[0]);
    let acks = env
        .subject_spy(&env.cp, HUB_CLIENT_PORT, &creds, true, "$JS.ACK.>")
        .await;
    let body = "#!/bin/sh\ntrue\n";
    let run = env
        .flue(&[
            "config", "create", "--id", "noop", "--group", "script", "--config", body,
        ])
        .await;
    assert_eq!(run.code, 0, "{run}");

    // Taken in turns, so both see the same machine load.
    let (mut leafed, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        leafed.push(round_trip(&env, "leafed").await);
        direct.push(round_trip(&env, "direct").await);
    }

    // The ack reaches the hub as JetStream sent it: `$JS.ACK.<stream>.<consumer>.<delivered>.
    // <stream seq>.<consumer seq>.<timestamp>.<pending>`, no domain or account-hash tokens
    // (the longer v2 form), so permissions written as `$JS.ACK.FLUE_REQ.<consumer>.>` hold
    // behind a leaf node too.
    let tenant = TenantId::new(TENANTS[0]).expect("tenant id");
    // Its consumer's sealed name (the agent's first heartbeat had it moved there).
    let consumer = flue_tests::consumers::sealed_prefix(&tenant, &"leafed".parse().expect("id"));
    let prefix = format!("$JS.ACK.{}.{consumer}", subject::REQUEST_STREAM);
    let line = acks.wait_for(&prefix).await;
    let tokens: Vec<&str> = line.split('.').collect();
    assert_eq!(tokens.len(), 9, "{line}");
    assert!(
        tokens[4..].iter().all(|t| t.parse::<u64>().is_ok()),
        "{line}"
    );
    eprintln!("an ack from behind the leaf node, as the hub sees it: {line}");

    eprintln!(
        "deploy round trip, gateway accepts → agent pulls, runs a no-op script hook, answers → \
         gateway records COMPLETE (gateway clock), operator mode, TLS on the hub's ports, 20 runs \
         each:\n  through the leaf node: {}\n  agent on the hub:      {}",
        summary(&mut leafed),
        summary(&mut direct)
    );
}

/// One CREATE of config `noop` on `server`, from acceptance to COMPLETE by the gateway's
/// own timestamps (so the CLI's start-up is not counted).
async fn round_trip(env: &TenantNetworks, server: &str) -> Duration {
    let run = env
        .flue(&[
            "deploy", "--config", "noop", "--server", server, "--wait", "--json",
        ])
        .await;
    assert_eq!(run.code, 0, "{run}");
    let d: Deployment = serde_json::from_str(&run.stdout).expect("deployment json");
    assert_eq!(d.status, DeploymentStatus::Complete, "{run}");
    (d.updated_at - d.created_at).unsigned_abs()
}

/// `min / p50 / max` in milliseconds.
fn summary(samples: &mut [Duration]) -> String {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "min {:.1} ms, p50 {:.1} ms, max {:.1} ms",
        ms(samples[0]),
        ms(samples[samples.len() / 2]),
        ms(samples[samples.len() - 1])
    )
}
