//! Delivery guarantees: offline agents, queue order, exactly-once across crashes,
//! redelivery, timeouts, SIGTERM, agents that never create consumers, and an agent's whole
//! network: one connection out, to the broker.

use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream;
use flue_proto::{AgentMessage, DeploymentId, DeploymentResult, DeploymentStatus, subject};
use flue_tests::{Flue, WAIT, broker_has_read, file_lines, wait_until};
use futures_util::StreamExt;

/// Waits for the agent's `finished` answer for `id` on a core subscription to its
/// response subject.
async fn next_finished(
    answers: &mut async_nats::Subscriber,
    id: &DeploymentId,
    what: &str,
) -> DeploymentResult {
    let wait = async {
        loop {
            let m = answers.next().await.expect("subscription open");
            if let Ok(AgentMessage::Finished {
                deployment_id,
                result,
                ..
            }) = serde_json::from_slice::<AgentMessage>(&m.payload)
                && deployment_id == *id
            {
                return result;
            }
        }
    };
    tokio::time::timeout(WAIT, wait)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// A script that appends `<tag>` to `counter`, so a test can count hook runs.
fn counting_script(counter: &std::path::Path) -> String {
    format!(
        "#!/bin/sh\nprintf '%s\\n' \"$tag\" >> '{}'\n",
        counter.display()
    )
}

/// A broker, gateway and registered server `s1` with config `block` (see
/// [`blocking_script`]); returns the hook's start file and the file that releases it.
async fn blocking_setup(release_name: &str) -> (Flue, PathBuf, PathBuf) {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let started = flue.path("started");
    let release = flue.path(release_name);
    flue.script_config("block", &blocking_script(&started, &release), &[], &[])
        .await;
    (flue, started, release)
}

/// A script that records its start, then blocks until `release` exists.
fn blocking_script(started: &std::path::Path, release: &std::path::Path) -> String {
    format!(
        "#!/bin/sh\necho started >> '{}'\nwhile [ ! -e '{}' ]; do sleep 0.05; done\necho released\n",
        started.display(),
        release.display()
    )
}

#[tokio::test]
async fn deployment_created_while_agent_offline_is_applied_when_it_connects() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let counter = flue.path("counter");
    flue.script_config("c", &counting_script(&counter), &["tag"], &[])
        .await;

    let d = flue.deploy("c", "s1", &[("tag", "one")]).await;
    let unchanged = flue
        .client()
        .wait_deployment(
            &d.id,
            Some(DeploymentStatus::Queued),
            Duration::from_secs(1),
        )
        .await
        .expect("long-poll");
    assert_eq!(
        unchanged.status,
        DeploymentStatus::Queued,
        "no agent, no progress"
    );

    let _agent = flue.agent("s1", &[]).await;
    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(file_lines(&counter), vec!["one"]);
}

/// The writes of deployment `id`'s record in `writes` (a watch of the whole bucket that
/// began before it was created), as JSON, up to and including `last`.
async fn record_writes(
    writes: &mut async_nats::jetstream::kv::Watch,
    id: &DeploymentId,
    last: impl Fn(&serde_json::Value) -> bool,
) -> Vec<serde_json::Value> {
    let key = format!("default.{id}");
    let collect = async {
        let mut seen = Vec::new();
        loop {
            let entry = writes.next().await.expect("watch open").expect("entry");
            if entry.key != key {
                continue;
            }
            let record: serde_json::Value =
                serde_json::from_slice(&entry.value).expect("record json");
            let done = last(&record);
            seen.push(record);
            if done {
                return seen;
            }
        }
    };
    tokio::time::timeout(WAIT, collect)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for the writes of {id}"))
}

#[tokio::test]
async fn a_request_is_marked_published_by_its_agents_first_answer_or_after_a_while_by_the_gateway()
{
    let flue = Flue::start().await;
    flue.register("s1").await;
    flue.script_config("c", "#!/bin/sh\necho ok\n", &[], &[])
        .await;
    let js = jetstream::new(flue.nats.client().await);
    let bucket = js
        .get_key_value(subject::DEPLOYMENTS_BUCKET)
        .await
        .expect("deployments bucket");
    let mut writes = bucket.watch_all().await.expect("watch");

    // No agent: no answer marks it, so the gateway does, in a write of its own.
    let offline = flue.deploy("c", "s1", &[]).await;
    let seen = record_writes(&mut writes, &offline.id, |r| r["request_published"] == true).await;
    assert_eq!(seen.len(), 2, "recorded, then marked: {seen:#?}");
    assert_eq!(seen[1]["deployment"]["status"], "QUEUED");
    assert!(seen[1]["deployment"]["delivered_at"].is_null());

    // With its agent: recorded, then every write is an answer's, the first of which
    // marks it; no write of the mark alone.
    let agent = flue.agent("s1", &[]).await;
    assert_eq!(
        flue.finished(&offline.id).await.status,
        DeploymentStatus::Complete
    );
    let d = flue.deploy("c", "s1", &[]).await;
    let seen = record_writes(&mut writes, &d.id, |r| {
        r["deployment"]["status"] == "COMPLETE"
    })
    .await;
    assert_eq!(seen[0]["request_published"], false, "{seen:#?}");
    for (before, after) in seen.iter().zip(&seen[1..]) {
        let answered = |r: &serde_json::Value| {
            let d = &r["deployment"];
            (
                d["delivered_at"].clone(),
                d["started_at"].clone(),
                d["status"].clone(),
            )
        };
        assert_ne!(
            answered(before),
            answered(after),
            "each write after the first applies an answer: {seen:#?}"
        );
        assert_eq!(after["request_published"], true, "{seen:#?}");
    }
    drop(agent);
}

#[tokio::test]
async fn one_deployment_at_a_time_in_queue_order() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let log = flue.path("log");
    let script = format!(
        "#!/bin/sh\necho \"start $tag\" >> '{0}'\nsleep 0.05\necho \"end $tag\" >> '{0}'\n",
        log.display()
    );
    flue.script_config("c", &script, &["tag"], &[]).await;
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(flue.deploy("c", "s1", &[("tag", &i.to_string())]).await.id);
    }
    let _agent = flue.agent("s1", &[]).await;
    for id in &ids {
        assert_eq!(flue.finished(id).await.status, DeploymentStatus::Complete);
    }
    let expected: Vec<String> = (0..6)
        .flat_map(|i| [format!("start {i}"), format!("end {i}")])
        .collect();
    assert_eq!(
        file_lines(&log),
        expected,
        "runs must not overlap and follow queue order"
    );
}

#[tokio::test]
async fn agent_killed_mid_hook_reports_interrupted_and_never_reruns() {
    let (flue, started, release) = blocking_setup("release").await;
    let mut agent = flue.agent("s1", &[]).await;

    let d = flue.deploy("block", "s1", &[]).await;
    let running = flue.changed_from(&d.id, DeploymentStatus::Queued).await;
    assert_eq!(running.status, DeploymentStatus::InProgress);
    wait_until("hook start", WAIT, || {
        (file_lines(&started).len() == 1).then_some(())
    })
    .await;

    agent.kill9().await;
    // Let the orphaned hook end; whatever it does now can no longer be reported.
    std::fs::write(&release, "").expect("release");
    agent.restart().await;

    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Failed);
    assert_eq!(
        done.status_reason.as_deref(),
        Some("interrupted"),
        "{done:?}"
    );
    assert_eq!(file_lines(&started).len(), 1, "the hook must not run again");

    // The agent is healthy afterwards: the next deployment runs normally.
    let next = flue.deploy("block", "s1", &[]).await;
    assert_eq!(
        flue.finished(&next.id).await.status,
        DeploymentStatus::Complete
    );
    assert_eq!(file_lines(&started).len(), 2);
}

#[tokio::test]
async fn redelivered_request_is_answered_from_the_ledger_not_rerun() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let counter = flue.path("counter");
    flue.script_config(
        "c",
        &format!(
            "{}printf '%s' out > \"$heat_outputs_path.o\"\n",
            counting_script(&counter)
        ),
        &["tag"],
        &["o"],
    )
    .await;
    let agent = flue.agent("s1", &[]).await;
    let d = flue.deploy("c", "s1", &[("tag", "x")]).await;
    let first = flue.finished(&d.id).await;
    assert_eq!(first.status, DeploymentStatus::Complete);

    // Hand the agent the very same message again, as a broker that lost its consumer's
    // state would: the consumer made again delivers the stream from its start. (The same
    // bytes published as a new message are a replay, refused: see security/signing.rs.)
    let client = flue.nats.client().await;
    let js = jetstream::new(client.clone());
    let tenant = "default".parse().expect("tenant");
    let server = "s1".parse().expect("server");
    let mut answers = client
        .subscribe(subject::response(&tenant, &server))
        .await
        .expect("subscribe");
    // Under the name it has now (the agent's first heartbeat moved it to its sealed one).
    let name = flue_tests::consumers::request_consumer(&js, "default", "s1").await;
    js.get_stream(subject::REQUEST_STREAM)
        .await
        .expect("stream")
        .delete_consumer(&name)
        .await
        .expect("delete the consumer");
    flue.register("s1").await;

    let answer = next_finished(&mut answers, &d.id, "the agent answers the redelivery").await;

    assert_eq!(answer.status, DeploymentStatus::Complete);
    assert_eq!(answer.outputs, first.outputs);
    assert_eq!(file_lines(&counter), vec!["x"], "the hook ran exactly once");
    // The agent says where the answer came from (its log is read from a pipe, so the
    // line may trail the answer on the broker).
    agent
        .logs()
        .wait_for("answering from the ledger", WAIT)
        .await;
}

#[tokio::test]
async fn unanswered_deployment_times_out_and_is_never_run_later() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let counter = flue.path("counter");
    flue.script_config("c", &counting_script(&counter), &["tag"], &[])
        .await;

    let d = flue
        .deploy_with("c", "s1", &[("tag", "late")], Some(1))
        .await;
    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Failed);
    assert_eq!(done.status_reason.as_deref(), Some("timed out"));

    // The agent comes up later: it must refuse the expired request, not run it.
    let client = flue.nats.client().await;
    let tenant = "default".parse().expect("tenant");
    let mut answers = client
        .subscribe(subject::response(&tenant, &"s1".parse().expect("server")))
        .await
        .expect("subscribe");
    broker_has_read(&client, &client.new_inbox()).await;
    let _agent = flue.agent("s1", &[]).await;
    let answer = next_finished(&mut answers, &d.id, "the agent answers the expired request").await;
    assert_eq!(answer.status, DeploymentStatus::Failed);
    assert!(
        file_lines(&counter).is_empty(),
        "an expired deployment must not run"
    );
    let after = flue.client().get_deployment(&d.id).await.expect("get");
    assert_eq!(after.status_reason.as_deref(), Some("timed out"));
}

#[tokio::test]
async fn sigterm_lets_a_running_hook_finish_then_exits_cleanly() {
    let (flue, started, release) = blocking_setup("release").await;
    let mut agent = flue.agent("s1", &[]).await;
    let d = flue.deploy("block", "s1", &[]).await;
    wait_until("hook start", WAIT, || {
        (file_lines(&started).len() == 1).then_some(())
    })
    .await;

    agent.sigterm();
    std::fs::write(&release, "").expect("release");
    let status = agent.wait_exit().await;
    assert!(status.success(), "agent exit status {status:?}");
    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.deploy_stdout, "released\n");
}

#[tokio::test]
async fn sigterm_past_the_grace_period_interrupts_the_hook_and_reports_it() {
    let (flue, started, _never) = blocking_setup("never").await;
    let mut agent = flue
        .spawn_agent_with("s1", "agent-s1", &[], &["--shutdown-grace-secs", "1"])
        .await;
    agent.ready().await;
    let d = flue.deploy("block", "s1", &[]).await;
    wait_until("hook start", WAIT, || {
        (file_lines(&started).len() == 1).then_some(())
    })
    .await;

    let status = agent.terminate().await;
    assert!(status.success(), "agent exit status {status:?}");
    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Failed);
    let reason = done.status_reason.unwrap_or_default();
    assert!(reason.contains("interrupted"), "{reason}");
}

#[tokio::test]
async fn idle_agent_exits_cleanly_on_sigterm() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let mut agent = flue.agent("s1", &[]).await;
    let status = agent.terminate().await;
    assert!(status.success(), "agent exit status {status:?}");
}

#[tokio::test]
async fn agent_waits_for_its_consumer_and_never_creates_one() {
    let flue = Flue::start().await;
    // Credentials come with the registration, which also makes the consumer: take the
    // consumer away (the server and its keys stay), as a broker that lost it would.
    flue.register("late").await;
    let js = jetstream::new(flue.nats.client().await);
    let mut stream = js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("stream");
    let consumer = subject::request_consumer(
        &"default".parse().expect("tenant"),
        &"late".parse().expect("server"),
    );
    stream
        .delete_consumer(&consumer)
        .await
        .expect("delete consumer");
    let agent = flue.spawn_agent_as_is("late", "agent-late", &[], &[]);
    agent.logs().wait_for("consumer", WAIT).await;
    let consumers = stream.info().await.expect("info").state.consumer_count;
    assert_eq!(
        consumers, 0,
        "an unregistered agent must not create its consumer"
    );

    flue.register("late").await;
    agent.ready().await;
    flue.script_config("c", "#!/bin/sh\necho ok\n", &[], &[])
        .await;
    let d = flue.deploy("c", "late", &[]).await;
    assert_eq!(
        flue.finished(&d.id).await.status,
        DeploymentStatus::Complete
    );
    let consumers = stream.info().await.expect("info").state.consumer_count;
    assert_eq!(consumers, 1, "only the gateway's consumer exists");
}

/// The sockets process `pid` holds, read from its file descriptors and the `/proc/net`
/// tables of its network namespace.
#[derive(Debug, Default)]
struct Sockets {
    /// TCP sockets (v4 and v6): state (`0A` listening, `01` established), local and
    /// remote port.
    tcp: Vec<(String, u16, u16)>,
    /// UDP and raw sockets (v4 and v6).
    datagram: usize,
    /// Unix sockets accepting connections, by path.
    unix_listening: Vec<String>,
}

fn sockets_of(pid: u32) -> Sockets {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the agent's file descriptors")
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_owned(),
            )
        })
        .collect();
    let table = |name: &str| -> Vec<Vec<String>> {
        std::fs::read_to_string(format!("/proc/{pid}/net/{name}"))
            .unwrap_or_default()
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect()
    };
    let port = |address: &str| {
        let hex = address.rsplit(':').next().expect("address:port");
        u16::from_str_radix(hex, 16).expect("hex port")
    };
    let mut found = Sockets::default();
    for name in ["tcp", "tcp6"] {
        for row in table(name) {
            if inodes.contains(&row[9]) {
                found
                    .tcp
                    .push((row[3].clone(), port(&row[1]), port(&row[2])));
            }
        }
    }
    for name in ["udp", "udp6", "raw", "raw6"] {
        found.datagram += table(name)
            .iter()
            .filter(|row| inodes.contains(&row[9]))
            .count();
    }
    // Num RefCount Protocol Flags Type St Inode Path; flag 0x10000: accepting connections.
    for row in table("unix") {
        let listening = u32::from_str_radix(&row[3], 16).is_ok_and(|f| f & 0x1_0000 != 0);
        if listening && inodes.contains(&row[6]) {
            found
                .unix_listening
                .push(row.get(7).cloned().unwrap_or_default());
        }
    }
    found
}

/// The agent's network is one TCP connection, established, to the broker's port: nothing
/// listening, nothing else.
fn only_the_broker(sockets: &Sockets, broker_port: u16, when: &str) {
    assert_eq!(
        sockets.datagram, 0,
        "{when}: a UDP or raw socket: {sockets:?}"
    );
    let [(state, _, remote)] = sockets.tcp.as_slice() else {
        panic!("{when}: not one TCP connection: {sockets:?}");
    };
    assert_eq!(
        (state.as_str(), *remote),
        ("01", broker_port),
        "{when}: the one TCP socket is not a connection to the broker: {sockets:?}"
    );
}

#[tokio::test]
async fn the_agent_listens_on_no_port_and_its_one_connection_goes_out_to_the_broker() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let agent = flue.agent("s1", &[]).await;
    let pid = agent.pid().expect("the agent runs");
    let broker_port: u16 = flue
        .nats
        .url()
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("the broker's port");
    only_the_broker(&sockets_of(pid), broker_port, "idle");

    // A hook that says where its data socket is and what it holds open, then waits.
    let (started, release, hook_fds) = (
        flue.path("started"),
        flue.path("release"),
        flue.path("hook-fds"),
    );
    let script = format!(
        "#!/bin/sh\n\
         for fd in /proc/$$/fd/*; do readlink \"$fd\"; done > '{fds}'\n\
         echo \"$FLUE_DATA_SOCKET\" > '{started}.part' && mv '{started}.part' '{started}'\n\
         while [ ! -e '{release}' ]; do sleep 0.05; done\n",
        fds = hook_fds.display(),
        started = started.display(),
        release = release.display(),
    );
    flue.script_config("hold", &script, &[], &[]).await;
    let d = flue.deploy("hold", "s1", &[]).await;
    wait_until("the hook to start", WAIT, || started.exists().then_some(())).await;

    let running = sockets_of(pid);
    only_the_broker(&running, broker_port, "while a hook runs");
    let data_socket = std::fs::read_to_string(&started).expect("the hook's note");
    let data_socket = data_socket.trim();
    assert_eq!(
        running.unix_listening,
        vec![data_socket.to_owned()],
        "while its hook runs the agent serves its data socket, nothing else"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(data_socket)
            .expect("the data socket")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the data socket is its owner's only");
    let held = file_lines(&hook_fds);
    assert!(!held.is_empty(), "the hook listed its descriptors");
    assert!(
        held.iter().all(|target| !target.starts_with("socket:")),
        "the hook inherits no socket of the agent's: {held:?}"
    );

    std::fs::write(&release, "").expect("release the hook");
    assert_eq!(
        flue.finished(&d.id).await.status,
        DeploymentStatus::Complete
    );
    let after = sockets_of(pid);
    only_the_broker(&after, broker_port, "after the deployment");
    assert!(
        after.unix_listening.is_empty(),
        "the data socket is gone with its hook: {after:?}"
    );
    assert!(!std::path::Path::new(data_socket).exists());
}
