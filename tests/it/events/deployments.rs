//! Deployment and server events in the event stream: their order, ids, subjects and
//! envelope, hidden outputs, answers handled twice, replay after a listener went away,
//! registration and deregistration.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use flue_proto::event::EVENT_STREAM;
use flue_proto::{
    AgentMessage, CloudEvent, ConfigSpec, Deployment, DeploymentId, DeploymentResult,
    DeploymentStatus, EventType, PROTOCOL_VERSION, RegisterServer, RequestDigest, ServerId,
    TenantId, subject,
};
use flue_tests::{Agent, EventTap, Flue, WAIT, file_lines};
use futures_util::StreamExt;
use serde_json::json;

const SECRET: &str = "S3cr3t-0utput-value";

/// A broker, a gateway, server `web` with its agent, and a tap on the whole stream.
async fn web() -> (Flue, Agent, EventTap) {
    let env = Flue::start().await;
    env.register("web").await;
    let agent = env.agent("web", &[]).await;
    let tap = EventTap::from_start(&env.nats.events_client().await).await;
    (env, agent, tap)
}

/// Creates config `id` running `script`, with the given outputs (`(name, hidden)`).
async fn config(env: &Flue, id: &str, script: &str, outputs: &[(&str, bool)]) {
    let outputs: Vec<_> = outputs
        .iter()
        .map(|(name, hidden)| json!({"name": name, "hidden": hidden}))
        .collect();
    let spec: ConfigSpec = serde_json::from_value(json!({
        "id": id, "group": "script", "config": script,
        "inputs": [{"name": "tag"}], "outputs": outputs,
    }))
    .expect("spec");
    env.client().create_config(&spec).await.expect("config");
}

/// The events about `id` other than progress, in stream order.
fn lifecycle(tap: &EventTap, id: &DeploymentId) -> Vec<CloudEvent> {
    tap.events()
        .into_iter()
        .filter(|e| e.deployment.as_ref() == Some(id) && e.ty != EventType::DeploymentProgress)
        .collect()
}

fn types(events: &[CloudEvent]) -> Vec<EventType> {
    events.iter().map(|e| e.ty).collect()
}

/// Waits for the event of type `ty` about `id`.
async fn wait_event(tap: &mut EventTap, id: &DeploymentId, ty: EventType) -> CloudEvent {
    tap.wait_for(&format!("{} of {id}", ty.short()), WAIT, |e| {
        e.ty == ty && e.deployment.as_ref() == Some(id)
    })
    .await
}

/// Every event id appears once.
fn assert_unique_ids(tap: &EventTap) {
    let mut seen = BTreeMap::new();
    for (seq, e) in tap.seen() {
        if let Some(first) = seen.insert(e.id.clone(), *seq) {
            panic!("event {} twice: at {first} and {seq}", e.id);
        }
    }
}

#[tokio::test]
async fn a_deployment_reports_queued_delivered_started_completed_in_order() {
    let (env, _agent, mut tap) = web().await;
    let script = format!(
        "#!/bin/sh\necho working\nprintf shown > \"$heat_outputs_path.visible\"\nprintf '{SECRET}' > \"$heat_outputs_path.secret\"\n"
    );
    config(
        &env,
        "out",
        &script,
        &[("visible", false), ("secret", true)],
    )
    .await;
    let d = env.deploy("out", "web", &[("tag", "one")]).await;
    wait_event(&mut tap, &d.id, EventType::DeploymentCompleted).await;

    let events = lifecycle(&tap, &d.id);
    use EventType::*;
    assert_eq!(
        types(&events),
        [
            DeploymentQueued,
            DeploymentDelivered,
            DeploymentStarted,
            DeploymentCompleted
        ]
    );
    let statuses: Vec<_> = events.iter().map(|e| e.data["status"].clone()).collect();
    assert_eq!(
        statuses,
        [
            json!("QUEUED"),
            json!("QUEUED"),
            json!("IN_PROGRESS"),
            json!("COMPLETE")
        ]
    );
    let web = ServerId::new("web").expect("id");
    for e in &events {
        assert_eq!(e.id, format!("deployment:{}:{}", d.id, e.ty.name()));
        assert_eq!(e.specversion, "1.0");
        assert_eq!(e.source, "/flue/default");
        assert_eq!(e.subject, format!("deployments/{}", d.id));
        assert_eq!(e.datacontenttype, "application/json");
        assert_eq!(e.tenant, TenantId::new("default").expect("id"));
        assert_eq!(e.server.as_ref(), Some(&web));
        assert_eq!(e.deployment.as_ref(), Some(&d.id));
        assert_eq!(e.stack, None);
        assert!(e.time >= d.created_at - time::Duration::seconds(1), "{e:?}");
        assert_eq!(e.data["deployment_id"], json!(d.id));
        assert_eq!(e.data["config_id"], json!("out"));
        assert_eq!(e.data["action"], json!("CREATE"));
        let wire = serde_json::to_value(e).expect("json");
        assert_eq!(
            wire["type"],
            json!(format!("io.flue.deployment.{}", e.ty.name()))
        );
    }
    let done = &events[3];
    assert_eq!(done.data["outputs"]["visible"], json!("shown"));
    assert_eq!(done.data["outputs"]["secret"], json!("<hidden>"));
    assert_eq!(done.data["deploy_status_code"], json!(0));
    // Whatever the hook printed came between its start and its end.
    let at = |ty| {
        tap.seen()
            .iter()
            .position(|(_, e)| e.ty == ty && e.deployment.as_ref() == Some(&d.id))
    };
    for (i, (_, e)) in tap.seen().iter().enumerate() {
        if e.ty == DeploymentProgress && e.deployment.as_ref() == Some(&d.id) {
            assert!(at(DeploymentStarted) < Some(i) && Some(i) < at(DeploymentCompleted));
        }
    }
    for (_, e) in tap.seen() {
        let text = serde_json::to_string(e).expect("json");
        assert!(!text.contains(SECRET), "hidden output in {text}");
    }
    // Published on the documented subject.
    let stream = jetstream::new(env.nats.events_client().await)
        .get_stream(EVENT_STREAM)
        .await
        .expect("event stream");
    for name in ["queued", "completed"] {
        let message = stream
            .get_last_raw_message_by_subject(&format!("flue.default.evt.deployment.~.web.{name}"))
            .await
            .expect("event on its subject");
        let e: CloudEvent = serde_json::from_slice(&message.payload).expect("event");
        assert_eq!(e.id, format!("deployment:{}:{name}", d.id));
    }
    assert_unique_ids(&tap);
}

/// `queued` goes out side by side with the request: when the event stream refuses it, the
/// deployment runs all the same, and once the stream takes events again its `queued` is
/// still the first of its events (the answers' events are published after a copy of it,
/// `Events::publish_deployment_events`), though the acceptance's own retries stopped when
/// an answer marked the request published.
#[tokio::test]
async fn a_queued_the_event_stream_refused_at_acceptance_still_comes_before_the_answers_events() {
    let (env, _agent, mut tap) = web().await;
    config(&env, "quick", "#!/bin/sh\necho hi\n", &[]).await;
    let js = jetstream::new(env.nats.events_client().await);
    let mut stream = js.get_stream(EVENT_STREAM).await.expect("event stream");
    let info = stream.info().await.expect("stream info");
    let open = info.config.clone();
    let full = jetstream::stream::Config {
        max_messages: i64::try_from(info.state.messages).expect("count"),
        discard: jetstream::stream::DiscardPolicy::New,
        ..open.clone()
    };
    js.update_stream(&full)
        .await
        .expect("stream refusing events");

    let d = env.deploy("quick", "web", &[]).await;
    // The request went out without its `queued`: the agent ran it, and its first answer is
    // applied (which marks the request published: the acceptance's retries stop); its
    // events, and so its later answers, wait for the stream.
    let running = env.changed_from(&d.id, DeploymentStatus::Queued).await;
    assert_eq!(running.status, DeploymentStatus::InProgress);
    assert!(lifecycle(&tap, &d.id).is_empty(), "no event while refused");
    js.update_stream(&open).await.expect("stream taking events");

    wait_event(&mut tap, &d.id, EventType::DeploymentCompleted).await;
    use EventType::*;
    assert_eq!(
        types(&lifecycle(&tap, &d.id)),
        [
            DeploymentQueued,
            DeploymentDelivered,
            DeploymentStarted,
            DeploymentCompleted
        ]
    );
    assert_eq!(lifecycle(&tap, &d.id)[0].data["status"], json!("QUEUED"));
    // A later deployment, its `queued` acknowledged at its acceptance, reports each step once.
    let next = env.deploy("quick", "web", &[]).await;
    wait_event(&mut tap, &next.id, EventType::DeploymentCompleted).await;
    assert_eq!(lifecycle(&tap, &next.id).len(), 4);
    assert_unique_ids(&tap);
}

#[tokio::test]
async fn failed_and_timed_out_deployments_say_how_they_ended() {
    let (env, _agent, mut tap) = web().await;
    env.register("idle").await;
    config(&env, "fail", "#!/bin/sh\necho oops >&2\nexit 3\n", &[]).await;
    config(&env, "slow", "#!/bin/sh\nexec sleep 30\n", &[]).await;
    let failed = env.deploy("fail", "web", &[]).await;
    let killed = env.deploy_with("slow", "web", &[], Some(2)).await;
    let unanswered = env.deploy_with("slow", "idle", &[], Some(1)).await;

    let e = wait_event(&mut tap, &failed.id, EventType::DeploymentFailed).await;
    assert_eq!(e.data["status"], json!("FAILED"));
    assert_eq!(e.data["deploy_status_code"], json!(3));
    // The agent stops the hook at the deadline; nobody answers for `idle`: the gateway's
    // sweeper fails it.
    for d in [&killed, &unanswered] {
        let e = wait_event(&mut tap, &d.id, EventType::DeploymentTimedOut).await;
        assert_eq!(e.data["status"], json!("FAILED"));
        assert_eq!(e.data["status_reason"], json!("timed out"));
    }
    for (d, end) in [
        (&failed, EventType::DeploymentFailed),
        (&killed, EventType::DeploymentTimedOut),
        (&unanswered, EventType::DeploymentTimedOut),
    ] {
        let ends: Vec<EventType> = types(&lifecycle(&tap, &d.id))
            .into_iter()
            .filter(|t| {
                matches!(
                    t,
                    EventType::DeploymentCompleted
                        | EventType::DeploymentFailed
                        | EventType::DeploymentTimedOut
                )
            })
            .collect();
        assert_eq!(ends, [end], "{}", d.id);
    }
    let queued_only = types(&lifecycle(&tap, &unanswered.id));
    assert_eq!(
        queued_only,
        [EventType::DeploymentQueued, EventType::DeploymentTimedOut]
    );
}

/// Publishes `message` on `server`'s response subject as if its agent sent it again,
/// under a message id of its own (so the response stream keeps this copy).
async fn resend(env: &Flue, server: &str, message: &AgentMessage, msg_id: &str) {
    let js = jetstream::new(env.nats.client().await);
    let tenant = TenantId::new("default").expect("id");
    let subject = subject::response(&tenant, &ServerId::new(server).expect("id"));
    let payload = serde_json::to_vec(message).expect("json");
    js.send_publish(
        subject,
        jetstream::message::PublishMessage::build()
            .payload(payload.into())
            .message_id(msg_id),
    )
    .await
    .expect("publish")
    .await
    .expect("acknowledged");
}

/// The digest the gateway recorded for deployment `id`'s request, which the agent's
/// answers to that request carry.
async fn recorded_digest(env: &Flue, id: &DeploymentId) -> Option<RequestDigest> {
    let js = async_nats::jetstream::new(env.nats.client().await);
    let kv = js.get_key_value("flue_deployments").await.expect("bucket");
    let entry = kv.get(format!("default.{id}")).await.expect("read")?;
    let record: serde_json::Value = serde_json::from_slice(&entry).expect("record json");
    serde_json::from_value(record["request_digest"].clone()).ok()
}

/// The agent's three answers about finished deployment `d` (to its request of `digest`),
/// as the record shows them.
fn answers(d: &Deployment, digest: Option<RequestDigest>) -> Vec<AgentMessage> {
    let at = |t: Option<time::OffsetDateTime>| t.expect("recorded");
    vec![
        AgentMessage::Delivered {
            v: PROTOCOL_VERSION,
            deployment_id: d.id.clone(),
            at: at(d.delivered_at),
            request_digest: digest.clone(),
        },
        AgentMessage::Started {
            v: PROTOCOL_VERSION,
            deployment_id: d.id.clone(),
            at: at(d.started_at),
            request_digest: digest.clone(),
        },
        AgentMessage::Finished {
            v: PROTOCOL_VERSION,
            deployment_id: d.id.clone(),
            result: DeploymentResult {
                status: d.status,
                status_reason: d.status_reason.clone(),
                outputs: d.outputs.clone(),
                deploy_stdout: d.deploy_stdout.clone(),
                deploy_stderr: d.deploy_stderr.clone(),
                deploy_status_code: d.deploy_status_code,
                started_at: d.started_at,
                finished_at: at(d.finished_at),
            },
            request_digest: digest,
        },
    ]
}

/// Shrinks the event stream's duplicate window and waits until it is over for every event
/// so far, so that the broker no longer drops a copy of them: only the gateway can.
async fn outlive_duplicate_window(env: &Flue) {
    let js = jetstream::new(env.nats.events_client().await);
    let mut stream = js.get_stream(EVENT_STREAM).await.expect("event stream");
    let mut config = stream.info().await.expect("stream info").config.clone();
    config.duplicate_window = Duration::from_millis(200);
    js.update_stream(&config).await.expect("shorter window");
    // A probe published again and again under one message id is kept again once the
    // window is over (each copy has its own event id, so the stream stays unique by id).
    let probe = async {
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        for n in 0.. {
            tick.tick().await;
            let event = CloudEvent::new(
                EventType::ServerOnline,
                &TenantId::new("probe").expect("id"),
                format!("probe:{n}"),
                "servers/probe".to_owned(),
                &json!({}),
            );
            let ack = js
                .send_publish(
                    event.nats_subject(),
                    jetstream::message::PublishMessage::build()
                        .payload(serde_json::to_vec(&event).expect("json").into())
                        .message_id("probe"),
                )
                .await
                .expect("publish")
                .await
                .expect("acknowledged");
            if n > 0 && !ack.duplicate {
                return;
            }
        }
    };
    tokio::time::timeout(WAIT, probe)
        .await
        .expect("the duplicate window ends");
}

#[tokio::test]
async fn answers_handled_twice_and_a_gateway_restart_report_nothing_twice() {
    let (mut env, _agent, mut tap) = web().await;
    config(&env, "quick", "#!/bin/sh\necho hi\n", &[]).await;
    let first = env.deploy("quick", "web", &[]).await;
    wait_event(&mut tap, &first.id, EventType::DeploymentCompleted).await;
    let first = env.finished(&first.id).await;
    // The agent answering again from its ledger may come long after the first answers.
    outlive_duplicate_window(&env).await;
    let digest = recorded_digest(&env, &first.id).await;
    assert!(digest.is_some(), "the gateway records the request's digest");
    for (n, message) in answers(&first, digest).iter().enumerate() {
        resend(&env, "web", message, &format!("test-copy-{n}")).await;
    }
    // A server's answers are handled in order: once the next deployment's `delivered`
    // (sent after the copies) is reported, the copies were handled.
    let second = env.deploy("quick", "web", &[]).await;
    wait_event(&mut tap, &second.id, EventType::DeploymentCompleted).await;
    // The restart comes once the answers are settled: an answer whose event is out but
    // whose ack is not yet comes again to the next gateway, which reports it again (one
    // event within the duplicate window, which this test outlived; before the pinned
    // consumer the copy came only after the ack wait, after this test looked).
    answers_settled(&env, WAIT, "the answers settled").await;

    env.gateway.restart().await;
    let third = env.deploy("quick", "web", &[]).await;
    wait_event(&mut tap, &third.id, EventType::DeploymentCompleted).await;
    for d in [&first.id, &second.id, &third.id] {
        assert_eq!(
            lifecycle(&tap, d).len(),
            4,
            "{d}: {:?}",
            types(&lifecycle(&tap, d))
        );
    }
    assert_unique_ids(&tap);
}

/// Waits (at most `limit`, else panics with `what`) until the gateway's response consumer
/// has nothing pending and nothing delivered unacknowledged.
async fn answers_settled(env: &Flue, limit: Duration, what: &str) {
    let settled = async {
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        loop {
            tick.tick().await;
            if response_backlog(env).await == (0, 0) {
                return;
            }
        }
    };
    tokio::time::timeout(limit, settled).await.expect(what);
}

/// The pending messages of the gateway's response consumer and those delivered but not
/// acknowledged.
async fn response_backlog(env: &Flue) -> (u64, usize) {
    let js = jetstream::new(env.nats.client().await);
    let name = flue_tests::consumers::response_consumer(&js).await;
    let mut consumer: consumer::PullConsumer = js
        .get_stream(subject::RESPONSE_STREAM)
        .await
        .expect("response stream")
        .get_consumer(&name)
        .await
        .expect("response consumer");
    let info = consumer.info().await.expect("consumer info");
    (info.num_pending, info.num_ack_pending)
}

/// Plays a gateway that pulled a finished deployment's `started` (the agent of `web`
/// answered `started`, which stands for `delivered` too, and the result while no gateway
/// ran) and holds it unacknowledged: returns it.
async fn hold_started(env: &Flue) -> Vec<jetstream::Message> {
    let client = env.nats.client().await;
    let js = jetstream::new(client.clone());
    let stream = js
        .get_stream(subject::RESPONSE_STREAM)
        .await
        .expect("response stream");
    let answers = subject::response(
        &TenantId::new("default").expect("id"),
        &ServerId::new("web").expect("id"),
    );
    let finished = async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tick.tick().await;
            if let Ok(last) = stream.get_last_raw_message_by_subject(&answers).await {
                let message: AgentMessage = serde_json::from_slice(&last.payload).expect("answer");
                if matches!(message, AgentMessage::Finished { .. }) {
                    return;
                }
            }
        }
    };
    tokio::time::timeout(WAIT, finished)
        .await
        .expect("the agent answered");
    // Play a gateway that took `started` and died before acknowledging it: it comes
    // back only after the consumer's ack wait, behind the result.
    let name = flue_tests::consumers::response_consumer(&js).await;
    let consumer: consumer::PullConsumer =
        stream.get_consumer(&name).await.expect("response consumer");
    // A gateway pulls in the consumer's pinned priority group, so does this one.
    let mut pulled = consumer
        .stream()
        .group(subject::GATEWAY_RESPONSE_GROUP)
        .max_messages_per_batch(1)
        .messages()
        .await
        .expect("pull");
    let mut held = Vec::new();
    let next = tokio::time::timeout(WAIT, pulled.next()).await;
    held.push(next.expect("an answer").expect("open").expect("message"));
    drop(pulled);
    let kinds: Vec<&str> = held
        .iter()
        .map(
            |m| match serde_json::from_slice(&m.payload).expect("answer") {
                AgentMessage::Delivered { .. } => "delivered",
                AgentMessage::Started { .. } => "started",
                _ => "other",
            },
        )
        .collect();
    assert_eq!(
        kinds,
        ["started"],
        "a hook that starts at once has no `delivered`"
    );
    held
}

#[tokio::test]
async fn answers_held_by_a_gateway_that_died_never_come_out_of_order() {
    let mut env = Flue::start().await;
    env.register("web").await;
    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    config(&env, "quick", "#!/bin/sh\necho hi\n", &[]).await;
    let d = env.deploy("quick", "web", &[]).await;
    wait_event(&mut tap, &d.id, EventType::DeploymentQueued).await;
    env.gateway.kill().await;
    // The credentials kept at registration: the gateway is down.
    let _agent = env.spawn_agent_as_is("web", "agent-web", &[], &[]);
    _agent.ready().await;
    let held = hold_started(&env).await;

    env.gateway.restart().await;
    wait_event(&mut tap, &d.id, EventType::DeploymentCompleted).await;
    answers_settled(
        &env,
        Duration::from_secs(40),
        "the held answers came back and were handled",
    )
    .await;
    // Events are in stream order: once this one is read, every event about `d` is.
    let after = env.deploy("quick", "web", &[]).await;
    wait_event(&mut tap, &after.id, EventType::DeploymentCompleted).await;
    // The restarted gateway takes the held answers over before the later one (issue 11
    // point 2): the whole history, in order, nothing lost.
    let events = lifecycle(&tap, &d.id);
    assert_eq!(
        types(&events),
        [
            EventType::DeploymentQueued,
            EventType::DeploymentDelivered,
            EventType::DeploymentStarted,
            EventType::DeploymentCompleted
        ],
    );
    drop(held);
    assert_unique_ids(&tap);
}

#[tokio::test]
async fn answers_a_stalled_gateway_holds_past_the_takeover_still_report_every_step_in_order() {
    let mut env = Flue::start().await;
    env.register("web").await;
    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    config(&env, "quick", "#!/bin/sh\necho hi\n", &[]).await;
    let d = env.deploy("quick", "web", &[]).await;
    wait_event(&mut tap, &d.id, EventType::DeploymentQueued).await;
    env.gateway.kill().await;
    let _agent = env.spawn_agent_as_is("web", "agent-web", &[], &[]);
    _agent.ready().await;
    let held = hold_started(&env).await;

    // The holder stalls but lives: it keeps its answers (in-progress acknowledgements,
    // each inside the ack wait) past the wait of the gateway taking over, which then goes
    // on with the result. Only after that are they handed back, behind the result.
    env.gateway.restart().await;
    {
        let completed = wait_event(&mut tap, &d.id, EventType::DeploymentCompleted);
        tokio::pin!(completed);
        let mut keep = tokio::time::interval(Duration::from_secs(2));
        loop {
            tokio::select! {
                _ = &mut completed => break,
                _ = keep.tick() => {
                    for m in &held {
                        m.ack_with(jetstream::AckKind::Progress).await.expect("in progress");
                    }
                }
            }
        }
    }
    for m in &held {
        m.ack_with(jetstream::AckKind::Nak(None))
            .await
            .expect("handed back");
    }
    answers_settled(&env, WAIT, "the held answers were handled").await;
    let after = env.deploy("quick", "web", &[]).await;
    wait_event(&mut tap, &after.id, EventType::DeploymentCompleted).await;
    // The steps the result went past are reported before it, from the record, as the
    // deployment stood at each; their late answers report nothing again.
    let events = lifecycle(&tap, &d.id);
    assert_eq!(
        types(&events),
        [
            EventType::DeploymentQueued,
            EventType::DeploymentDelivered,
            EventType::DeploymentStarted,
            EventType::DeploymentCompleted
        ],
    );
    let statuses: Vec<_> = events.iter().map(|e| e.data["status"].clone()).collect();
    assert_eq!(
        statuses,
        [
            json!("QUEUED"),
            json!("QUEUED"),
            json!("IN_PROGRESS"),
            json!("COMPLETE")
        ]
    );
    assert_unique_ids(&tap);
}

#[tokio::test]
async fn a_listener_resuming_after_its_last_sequence_misses_nothing() {
    let (env, _agent, mut tap) = web().await;
    config(&env, "quick", "#!/bin/sh\necho hi\n", &[]).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let d = env.deploy("quick", "web", &[]).await;
        wait_event(&mut tap, &d.id, EventType::DeploymentCompleted).await;
        ids.push(d.id);
    }
    let before = tap.seen().to_vec();
    let last = before.last().expect("events").0;
    drop(tap);
    // Nobody listens while these run.
    for _ in 0..3 {
        let d = env.deploy("quick", "web", &[]).await;
        env.finished(&d.id).await;
        ids.push(d.id);
    }
    let mut resumed = EventTap::from_seq(&env.nats.events_client().await, last + 1).await;
    let final_id = ids.last().expect("ids").clone();
    wait_event(&mut resumed, &final_id, EventType::DeploymentCompleted).await;
    assert_eq!(resumed.seen()[0].0, last + 1);

    let all: Vec<(u64, CloudEvent)> = before.into_iter().chain(resumed.seen().to_vec()).collect();
    let seqs: Vec<u64> = all.iter().map(|(s, _)| *s).collect();
    let expected: Vec<u64> = (1..=*seqs.last().expect("seq")).collect();
    assert_eq!(seqs, expected, "no gap, nothing twice");
    let got: BTreeSet<&str> = all.iter().map(|(_, e)| e.id.as_str()).collect();
    assert_eq!(got.len(), all.len(), "ids unique");
    for id in &ids {
        for name in ["queued", "delivered", "started", "completed"] {
            let want = format!("deployment:{id}:{name}");
            assert!(got.contains(want.as_str()), "{want} missing");
        }
    }
}

#[tokio::test]
async fn servers_report_registration_and_deregistration() {
    let env = Flue::start().await;
    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    let client = env.admin_client();
    let register = || async {
        client
            .register_server(&RegisterServer {
                transport: Default::default(),
                id: ServerId::new("box").expect("id"),
                name: "the box".into(),
            })
            .await
            .expect("register")
            .server
    };
    let millis = |t: time::OffsetDateTime| t.unix_timestamp_nanos() / 1_000_000;
    let first = register().await;
    let registered = format!("server:box:registered:{}", millis(first.created_at));
    let e = tap
        .wait_for("registered", WAIT, |e| e.id == registered)
        .await;
    assert_eq!(e.ty, EventType::ServerRegistered);
    assert_eq!(e.subject, "servers/box");
    assert_eq!(e.server, Some(first.id.clone()));
    assert_eq!(e.data["server_id"], json!("box"));
    assert_eq!(e.data["name"], json!("the box"));
    assert_eq!(register().await, first, "registering again changes nothing");

    let unknown = client
        .delete_server(&ServerId::new("nobody").expect("id"))
        .await
        .expect_err("unknown server");
    assert_eq!(unknown.status(), Some(404), "{unknown}");
    assert_eq!(unknown.code(), Some("not_found"));

    // One deployment runs; then, with the agent gone, another keeps the server busy
    // until it times out.
    let runs = env.path("runs");
    let script = format!("#!/bin/sh\necho \"$tag\" >> '{}'\n", runs.display());
    config(&env, "count", &script, &[]).await;
    let mut agent = env.agent("box", &[]).await;
    let before = env.deploy("count", "box", &[("tag", "before")]).await;
    env.finished(&before.id).await;
    agent.terminate().await;
    let stale = env
        .deploy_with("count", "box", &[("tag", "stale")], Some(1))
        .await;
    let busy = client
        .delete_server(&first.id)
        .await
        .expect_err("busy server");
    assert_eq!(busy.status(), Some(409), "{busy}");
    assert_eq!(busy.code(), Some("conflict"));
    assert!(
        busy.to_string().contains("1 QUEUED or IN_PROGRESS"),
        "{busy}"
    );
    wait_event(&mut tap, &stale.id, EventType::DeploymentTimedOut).await;

    client.delete_server(&first.id).await.expect("deregister");
    let deregistered = format!("server:box:deregistered:{}", millis(first.created_at));
    let e = tap
        .wait_for("deregistered", WAIT, |e| e.id == deregistered)
        .await;
    assert_eq!(e.ty, EventType::ServerDeregistered);
    assert_eq!(e.subject, "servers/box");
    let gone = client.get_server(&first.id).await.expect_err("gone");
    assert!(gone.is_not_found(), "{gone}");
    let again = client.delete_server(&first.id).await.expect_err("gone");
    assert!(again.is_not_found(), "{again}");
    assert!(
        client.list_servers().await.expect("list").is_empty(),
        "not listed"
    );
    let kept = client.get_deployment(&stale.id).await.expect("kept");
    assert_eq!(kept.status, DeploymentStatus::Failed);

    // Registered again: a new registration with its own event, an empty queue.
    let second = register().await;
    assert!(second.created_at > first.created_at);
    let registered = format!("server:box:registered:{}", millis(second.created_at));
    tap.wait_for("registered again", WAIT, |e| e.id == registered)
        .await;
    let listed = client
        .list_server_deployments(&second.id)
        .await
        .expect("deployments");
    assert!(listed.is_empty(), "{listed:?}");
    // A new agent (fresh state) gets only what is queued from now on: the requests of
    // the first registration, done or expired, are gone with it.
    let _agent = env.agent_in("box", "agent-box-2", &[], &[]).await;
    let fresh = env.deploy("count", "box", &[("tag", "fresh")]).await;
    assert_eq!(
        env.finished(&fresh.id).await.status,
        DeploymentStatus::Complete
    );
    assert_eq!(
        file_lines(&runs),
        ["before", "fresh"],
        "nothing old ran again"
    );
    assert_unique_ids(&tap);
}
