//! Failover on the 3-node cluster with two gateways (issue 26, point 2): a group's
//! `batch_create` limits survive a worker's takeover; an agent's announcement the broker
//! did not acknowledge is published again until it is, so the history stays complete and
//! in order; and `flue stack create` given both gateways follows its operation through
//! the one that survives and exits with its real result.

use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::stream::DiscardPolicy;
use flue_proto::operation::OperationState;
use flue_proto::{DeploymentId, DeploymentStatus, subject};
use flue_tests::{Cluster, Gateway, WAIT, file_lines, wait_until};
use serde_json::json;

use super::{REPLICAS, history};
use crate::operations::takeover::{GATED_TEMPLATE, worker_pid};
use crate::operations::{accepted, ended, until};
use crate::stack::run_flue;

/// A short lease, so that the survivor's worker takes the operation over soon.
const LEASE: &[&str] = &["--replicas", "3", "--engine-lease-secs", "3"];

/// Six members on `web1`, created two at a time. Each hook appends `start N` and
/// `end N` to `log`; once two members have ended, a hook first waits for the file `gate`.
const BATCHED: &str = r#"heat_template_version: 2018-08-31
parameters:
  log: {type: string}
  gate: {type: string}
resources:
  config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: log}, {name: gate}]
      config: |
        #!/bin/sh
        echo "start $deploy_resource_name" >> "$log"
        if [ "$(grep -c '^end' "$log")" -ge 2 ]; then
          while [ ! -e "$gate" ]; do sleep 0.1; done
        fi
        echo "end $deploy_resource_name" >> "$log"
  workers:
    type: OS::Heat::ResourceGroup
    update_policy: {batch_create: {max_batch_size: 2}}
    properties:
      count: 6
      resource_def:
        type: OS::Heat::SoftwareDeployment
        properties:
          config: {get_resource: config}
          server: web1
          input_values: {log: {get_param: log}, gate: {get_param: gate}}
"#;

/// The gateway of the two whose process is `pid`, and the other one.
fn holder_and_other<'a>(
    a: &'a mut Gateway,
    b: &'a mut Gateway,
    pid: u32,
) -> (&'a mut Gateway, &'a mut Gateway) {
    if a.pid() == Some(pid) {
        (a, b)
    } else {
        assert_eq!(b.pid(), Some(pid), "the worker is one of the two gateways'");
        (b, a)
    }
}

/// Long polls the gateway serves right now (`/livez`).
async fn long_polls(gateway: &Gateway) -> u64 {
    let body: serde_json::Value = gateway
        .http()
        .get(format!("{}/livez", gateway.url()))
        .send()
        .await
        .expect("gateway answers")
        .json()
        .await
        .expect("a JSON body");
    body["long_polls"].as_u64().expect("long_polls")
}

#[tokio::test]
async fn a_create_taken_over_mid_way_keeps_its_groups_batches_and_their_order() {
    let mut cluster = Cluster::start(3, LEASE).await;
    let mut other = cluster.another_gateway(LEASE).await;
    cluster.flue.register("web1").await;
    let _web1 = cluster.flue.agent("web1", &[]).await;
    let (log, gate) = (cluster.flue.path("hooks.log"), cluster.flue.path("gate"));
    let body = json!({
        "operation": "create",
        "template": BATCHED,
        "parameters": {"log": log.display().to_string(), "gate": gate.display().to_string()},
    });

    let op = accepted(&other, "farm", &body).await;
    // The first batch ended, the second one runs (its first hook waits for the gate).
    wait_until("batch 2 runs", WAIT, || {
        (file_lines(&log)
            .iter()
            .filter(|l| l.starts_with("start"))
            .count()
            == 3)
            .then_some(())
    })
    .await;
    let running = until(&other, "farm", &op.id, WAIT, |r| {
        r.state == OperationState::Running
    })
    .await;
    let holder = worker_pid(running.worker.as_deref().expect("a worker"));
    let (dead, survivor) = holder_and_other(&mut cluster.flue.gateway, &mut other, holder);
    dead.kill().await;

    // The survivor's worker takes the operation over and waits on the deployments the
    // dead one had started (its long polls): it has planned what it runs next.
    until(survivor, "farm", &op.id, WAIT, |r| {
        r.attempts == 2 && r.state == OperationState::Running
    })
    .await;
    let polling = async {
        while long_polls(survivor).await < 2 {
            tokio::time::sleep(Duration::from_millis(100)).await; // poll interval
        }
    };
    tokio::time::timeout(WAIT, polling)
        .await
        .expect("the resumed driver waits on batch 2");
    let stack = survivor
        .client()
        .get_stack(&"farm".parse().expect("id"))
        .await
        .expect("stack");
    for member in ["4", "5"] {
        let unit = &stack.state.units[&format!("workers/{member}")];
        assert!(
            unit.pending.is_none() && unit.current.is_none(),
            "batch 3 was planned while batch 2 runs: {unit:?}"
        );
    }
    std::fs::write(&gate, "open").expect("open the gate");

    let done = ended(survivor, "farm", &op.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    assert_eq!(done.attempts, 2, "a second worker took it: {done:?}");
    // Batches in order, each ended before the next started (one agent runs them one by one).
    let lines = file_lines(&log);
    let starts: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("start "))
        .collect();
    let batch = |name: &str| {
        ["0", "1", "2", "3", "4", "5"]
            .iter()
            .position(|m| name.ends_with(m))
            .map(|i| i / 2)
    };
    let batches: Vec<Option<usize>> = starts.iter().map(|s| batch(s)).collect();
    assert_eq!(
        batches,
        [Some(0), Some(0), Some(1), Some(1), Some(2), Some(2)],
        "{lines:?}"
    );
    // And as the event stream tells it: no member of a batch queued before every member
    // of the one before it completed.
    let stack = survivor
        .client()
        .get_stack(&"farm".parse().expect("id"))
        .await
        .expect("stack");
    let ids: Vec<DeploymentId> = (0..6)
        .map(|m| {
            stack.state.units[&format!("workers/{m}")]
                .baseline
                .clone()
                .expect("completed")
        })
        .collect();
    history::answers_settled(&cluster.others[0].client().await).await;
    let events = history::all_events(&cluster.others[0].events_client().await).await;
    let seq_of = |id: &DeploymentId, ty: flue_proto::event::EventType| {
        events
            .iter()
            .find(|(_, e)| e.deployment.as_ref() == Some(id) && e.ty == ty)
            .map(|(seq, _)| *seq)
            .unwrap_or_else(|| panic!("{id}: no {ty:?}"))
    };
    for b in 1..3 {
        let last_end = (2 * (b - 1)..2 * b)
            .map(|m| seq_of(&ids[m], flue_proto::event::EventType::DeploymentCompleted))
            .max()
            .expect("two members");
        for (m, id) in ids.iter().enumerate().skip(2 * b).take(2) {
            let queued = seq_of(id, flue_proto::event::EventType::DeploymentQueued);
            assert!(
                queued > last_end,
                "member {m} queued (seq {queued}) before batch {b} ended (seq {last_end})"
            );
        }
    }
}

#[tokio::test]
async fn an_announcement_the_broker_did_not_acknowledge_is_sent_again_and_the_history_stays_complete()
 {
    let cluster = Cluster::start(3, REPLICAS).await;
    let _other = cluster.another_gateway(REPLICAS).await;
    let flue = &cluster.flue;
    flue.register("web1").await;
    let web1 = flue.agent("web1", &[]).await;
    let log = flue.path("hooks.log");
    flue.script_config(
        "say",
        "#!/bin/sh\necho \"ran $deploy_resource_name\" >> \"$log\"\necho a line\n",
        &["log"],
        &[],
    )
    .await;
    let warm = flue
        .deploy("say", "web1", &[("log", &log.display().to_string())])
        .await;
    assert_eq!(
        flue.finished(&warm.id).await.status,
        DeploymentStatus::Complete
    );

    // The fault: the response stream takes no new message (its limit reached, new ones
    // refused), so the broker acknowledges none of the agent's answers for a while.
    let js = jetstream::new(flue.nats.client().await);
    let mut stream = js
        .get_stream(subject::RESPONSE_STREAM)
        .await
        .expect("response stream");
    let info = stream.info().await.expect("stream info").clone();
    let before = info.config.clone();
    let mut full = before.clone();
    full.max_messages = i64::try_from(info.state.messages).expect("count");
    full.discard = DiscardPolicy::New;
    js.update_stream(&full).await.expect("refuse new answers");

    let d = flue
        .deploy("say", "web1", &[("log", &log.display().to_string())])
        .await;
    // The agent pulled it, started its hook (`started` durable in its ledger first) and
    // could not get `started`, which stands for `delivered` too, into the stream.
    let refused = async {
        loop {
            let info = stream.info().await.expect("stream info");
            let name = flue_tests::consumers::request_consumer(&js, "default", "web1").await;
            // Looked up by the name it has now (its agent's first heartbeat moves it to
            // its sealed one).
            let consumer = js
                .get_stream(subject::REQUEST_STREAM)
                .await
                .expect("request stream")
                .consumer_info(name)
                .await;
            if let Ok(consumer) = consumer
                && consumer.num_ack_pending == 1
                && info.state.messages == full.max_messages as u64
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await; // poll interval
        }
    };
    tokio::time::timeout(WAIT, refused)
        .await
        .expect("the agent holds the request");
    // It publishes the refused `started` again (an agent that gave up on it would leave
    // the history without it), its progress and result waiting behind it.
    let retrying = web1.logs().wait_for("publishing it again", WAIT).await;
    assert!(retrying.contains("started"), "{retrying}");
    web1.logs()
        .wait_for("publishing an answer failed, retrying", WAIT)
        .await;
    js.update_stream(&before).await.expect("take answers again");

    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    history::answers_settled(&flue.nats.client().await).await;
    let events = history::all_events(&flue.nats.events_client().await).await;
    let problems = history::problems(&events, &[warm.id.clone(), d.id.clone()], true);
    assert!(problems.is_empty(), "{problems:#?}");
    let progress: Vec<_> = events
        .iter()
        .filter(|(_, e)| {
            e.deployment.as_ref() == Some(&d.id)
                && e.ty == flue_proto::event::EventType::DeploymentProgress
        })
        .collect();
    assert_eq!(progress.len(), 1, "its progress line, once: {progress:?}");
    assert_eq!(file_lines(&log).len(), 2, "each hook ran once");
}

#[tokio::test]
async fn the_cli_given_both_gateways_follows_its_operation_through_the_survivor_to_its_real_end() {
    let mut cluster = Cluster::start(3, LEASE).await;
    let mut other = cluster.another_gateway(LEASE).await;
    cluster.flue.register("web1").await;
    let _web1 = cluster.flue.agent("web1", &[]).await;
    let (log, gate) = (cluster.flue.path("hooks.log"), cluster.flue.path("gate"));
    let template = cluster.flue.path("gated.yaml");
    std::fs::write(&template, GATED_TEMPLATE).expect("template");

    let first = cluster.flue.gateway.url().to_owned();
    let gateways = format!("{first},{}", other.url());
    let args: Vec<String> = [
        "stack",
        "create",
        "gated",
        "-t",
        &template.display().to_string(),
        "-P",
        &format!("log={}", log.display()),
        "-P",
        &format!("gate={}", gate.display()),
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    let token = cluster
        .flue
        .gateway
        .cli_token(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let cli = tokio::spawn(run_flue(gateways, Some(token), args));
    wait_until("the first hook runs", WAIT, || {
        file_lines(&log)
            .contains(&"start first".to_owned())
            .then_some(())
    })
    .await;

    // The gateway the CLI submitted to and follows through dies; the operation goes on
    // (taken over by the other gateway's worker if the dead one held it).
    cluster.flue.gateway.kill().await;
    std::fs::write(&gate, "open").expect("open the gate");

    let run = cli.await.expect("join");
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("stack gated: CREATE_COMPLETE"), "{run}");
    assert_eq!(
        file_lines(&log),
        ["start first", "end first", "start second", "end second"],
        "each unit ran once, in order"
    );
    let ops = other
        .client()
        .list_operations_up_to(&"gated".parse().expect("id"), 1)
        .await
        .expect("operations");
    assert_eq!(ops[0].state, OperationState::Succeeded, "{ops:?}");
    other.kill().await;
}
