//! Secrets of a submitted operation: a hidden parameter and a RandomString's value are
//! in no gateway log line, no operation read (progress included), no event, and never
//! in clear in `FLUE_OPS` (read with the tenant's full-rights NATS user while queued).

use flue_proto::event::EventType;
use flue_proto::operation::{OPERATIONS_STREAM, OperationState, operation_subject};
use flue_tests::auth::default_tenant;
use flue_tests::{EventTap, Flue, WAIT, wait_until};
use serde_json::json;

use super::{SECRET, accepted, ended, read};

/// A unit whose hook writes the RandomString's value to `<log>.pw` (so the test learns
/// it) and waits for the file `gate`.
const SECRETS_TEMPLATE: &str = r#"heat_template_version: 2018-08-31
parameters:
  log: {type: string}
  gate: {type: string}
  secret: {type: string, hidden: true}
resources:
  pw:
    type: OS::Heat::RandomString
    properties: {length: 32}
  config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: log}, {name: gate}, {name: secret}, {name: pw}]
      config: |
        #!/bin/sh
        printf '%s' "$secret" > "$log.secret"
        printf '%s' "$pw" > "$log.pw"
        while [ ! -e "$gate" ]; do sleep 0.1; done
  unit:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: config}
      server: web1
      input_values:
        log: {get_param: log}
        gate: {get_param: gate}
        secret: {get_param: secret}
        pw: {get_attr: [pw, value]}
"#;

#[tokio::test]
async fn a_hidden_parameter_and_a_random_string_are_in_no_log_read_event_or_queued_message() {
    let flue = Flue::start().await;
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
    let (log, gate) = (flue.path("hooks.log"), flue.path("gate"));
    let body = json!({
        "operation": "create",
        "template": SECRETS_TEMPLATE,
        "parameters": {
            "log": log.display().to_string(),
            "gate": gate.display().to_string(),
            "secret": SECRET,
        },
    });
    let op = accepted(&flue.gateway, "vault", &body).await;
    // The hook writes the secret before the random string: once the latter is whole,
    // so is the former.
    let pw_file = log.with_extension("log.pw");
    let pw = wait_until("the hook wrote the random string", WAIT, || {
        std::fs::read_to_string(&pw_file)
            .ok()
            .filter(|p| p.len() == 32)
    })
    .await;
    let got = std::fs::read_to_string(log.with_extension("log.secret")).expect("secret");
    assert_eq!(got, SECRET, "the hook got the hidden value");

    // The queued message, still in the work queue while its unit runs.
    let js = async_nats::jetstream::new(flue.nats.client().await);
    let stream = js.get_stream(OPERATIONS_STREAM).await.expect("stream");
    let queued = stream
        .get_last_raw_message_by_subject(&operation_subject(
            &default_tenant(),
            &"vault".parse().expect("id"),
        ))
        .await
        .expect("the operation's message");
    let queued = String::from_utf8_lossy(&queued.payload).into_owned();
    assert!(queued.contains(&op.id), "{queued}");
    assert!(
        !queued.contains(SECRET),
        "the queued body holds the secret: {queued}"
    );

    std::fs::write(&gate, "open").expect("open the gate");
    let done = ended(&flue.gateway, "vault", &op.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    assert!(!done.progress.is_empty(), "{done:?}");
    tap.wait_for("the stack operation completed", WAIT, |e| {
        e.ty == EventType::StackOperationCompleted
    })
    .await;

    let (_, record) = read(&flue.gateway, "vault", &op.id).await;
    let events = serde_json::to_string(&tap.events()).expect("json");
    let logs: Vec<String> = [flue.gateway.logs(), flue.gateway.stdout()]
        .iter()
        .flat_map(|l| l.lines())
        .collect();
    for (name, value) in [("hidden parameter", SECRET), ("random string", pw.as_str())] {
        assert!(
            !record.to_string().contains(value),
            "{name} in the record: {record}"
        );
        assert!(!events.contains(value), "{name} in an event: {events}");
        let logged: Vec<_> = logs.iter().filter(|l| l.contains(value)).collect();
        assert!(logged.is_empty(), "{name} logged: {logged:?}");
    }
}
