//! Events: live progress. A running hook's lines reach the event stream as
//! `deployment.progress` events, in order, bounded per deployment, cut when too long,
//! with hidden inputs hidden, and all before the deployment's end.

use flue_proto::event::{EventType, OutputStream, ProgressEventData, progress_event_id};
use flue_proto::{
    CloudEvent, ConfigSpec, CreateDeployment, Deployment, DeploymentId, DeploymentStatus,
};
use flue_tests::{EventTap, Flue, WAIT};
use serde_json::json;

/// The agent's documented limits (`flue_agent::progress`).
const MAX_LINE_BYTES: usize = 4 * 1024;
const LINE_TRUNCATED_MARKER: &str = "…[truncated]";
const MAX_PROGRESS_BYTES: usize = 256 * 1024;
const MAX_BATCH_BYTES: usize = 64 * 1024;

/// What the event stream said about one deployment, up to its end.
struct Seen {
    /// Its progress events' data, in stream order.
    progress: Vec<ProgressEventData>,
    /// Every event of the stream up to and including the deployment's end, as JSON.
    raw: Vec<String>,
}

impl Seen {
    /// Every progress line, in order, as (stream, text).
    fn lines(&self) -> Vec<(OutputStream, String)> {
        self.progress
            .iter()
            .flat_map(|p| &p.lines)
            .map(|l| (l.stream, l.text.clone()))
            .collect()
    }
}

fn is_end(e: &CloudEvent, id: &DeploymentId) -> bool {
    e.deployment.as_ref() == Some(id)
        && matches!(
            e.ty,
            EventType::DeploymentCompleted
                | EventType::DeploymentFailed
                | EventType::DeploymentTimedOut
        )
}

/// Waits for the deployment's end on the event stream and returns what came before it.
async fn watch(flue: &Flue, id: &DeploymentId) -> Seen {
    let client = flue.nats.events_client().await;
    let mut tap = EventTap::from_start(&client).await;
    let end = tap
        .wait_for("the deployment's end", WAIT, |e| is_end(e, id))
        .await;
    let events = tap.events();
    let upto = events
        .iter()
        .position(|e| e.id == end.id)
        .expect("the end was seen");
    let progress = events[..upto]
        .iter()
        .filter(|e| e.ty == EventType::DeploymentProgress && e.deployment.as_ref() == Some(id))
        .map(|e| {
            let data: ProgressEventData =
                serde_json::from_value(e.data.clone()).expect("progress data");
            assert_eq!(e.id, progress_event_id(id, data.seq), "stable event id");
            assert_eq!(&data.deployment_id, id);
            data
        })
        .collect();
    let raw = events[..=upto]
        .iter()
        .map(|e| serde_json::to_string(e).expect("json"))
        .collect();
    Seen { progress, raw }
}

/// Checks the progress messages are numbered 1, 2, 3, … in stream order.
fn assert_numbered(seen: &Seen) {
    let seqs: Vec<u64> = seen.progress.iter().map(|p| p.seq).collect();
    assert!(!seqs.is_empty(), "no progress at all");
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

/// Registers `web1`, starts its agent, runs `script` with `inputs`, and returns the
/// finished deployment with what the event stream said about it.
async fn run_script(
    flue: &Flue,
    script: &str,
    spec_inputs: serde_json::Value,
    values: serde_json::Value,
) -> (Deployment, Seen) {
    flue.register("web1").await;
    let _agent = flue.agent("web1", &[]).await;
    let spec: ConfigSpec = serde_json::from_value(json!({
        "id": "live",
        "group": "script",
        "config": script,
        "inputs": spec_inputs,
    }))
    .expect("config spec");
    flue.client().create_config(&spec).await.expect("config");
    let d = flue
        .client()
        .create_deployment(&CreateDeployment {
            input_values: serde_json::from_value(values).expect("values"),
            ..CreateDeployment::new("live".parse().expect("id"), "web1".parse().expect("id"))
        })
        .await
        .expect("create deployment");
    let seen = watch(flue, &d.id).await;
    let done = flue.finished(&d.id).await;
    (done, seen)
}

#[tokio::test]
async fn lines_arrive_in_order_before_the_deployment_completes() {
    let flue = Flue::start().await;
    // Every 25th line goes to stderr; the pauses around it keep the two streams' reads
    // apart, since between streams the agent keeps the order in which it read them.
    let script = "i=1\n\
                  while [ $i -le 200 ]; do\n\
                  if [ $((i % 25)) -eq 0 ]; then sleep 0.1; echo \"line $i\" >&2; sleep 0.1;\n\
                  else echo \"line $i\"; fi\n\
                  i=$((i+1))\n\
                  done\n";
    let (done, seen) = run_script(&flue, script, json!([]), json!({})).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");

    assert_numbered(&seen);
    assert!(
        seen.progress.len() > 1,
        "sent in several batches while it ran"
    );
    let expected: Vec<(OutputStream, String)> = (1..=200)
        .map(|i| {
            let stream = if i % 25 == 0 {
                OutputStream::Stderr
            } else {
                OutputStream::Stdout
            };
            (stream, format!("line {i}"))
        })
        .collect();
    assert_eq!(seen.lines(), expected);
    assert!(
        seen.progress
            .iter()
            .all(|p| !p.truncated && p.dropped_lines == 0)
    );

    let stdout: String = (1..=200)
        .filter(|i| i % 25 != 0)
        .map(|i| format!("line {i}\n"))
        .collect();
    assert_eq!(done.deploy_stdout, stdout);
    assert_eq!(done.deploy_stderr.lines().count(), 8);
}

#[tokio::test]
async fn a_deployment_s_progress_is_bounded_and_its_result_keeps_everything() {
    let flue = Flue::start().await;
    // 6000 numbered lines of 97 bytes: about 570 KiB, over the progress budget and
    // under the result's 1 MiB.
    let script = "pad=$(printf '%090d' 0)\nseq -f \"%06g $pad\" 1 6000\n";
    let (done, seen) = run_script(&flue, script, json!([]), json!({})).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");

    let pad = "0".repeat(90);
    let all: String = (1..=6000).map(|i| format!("{i:06} {pad}\n")).collect();
    assert_eq!(done.deploy_stdout, all, "the result has the whole output");

    assert_numbered(&seen);
    let (last, before) = seen.progress.split_last().expect("some progress");
    assert!(last.truncated, "the last batch says the budget is spent");
    assert!(before.iter().all(|p| !p.truncated));
    let lines = seen.lines();
    let total: usize = lines.iter().map(|(_, t)| t.len() + 1).sum();
    assert!(
        total <= MAX_PROGRESS_BYTES + MAX_BATCH_BYTES,
        "{total} bytes of progress"
    );
    assert!(
        total > MAX_PROGRESS_BYTES / 2,
        "only {total} bytes of progress"
    );
    // Lines may be dropped under pressure (counted), never reordered or altered.
    let numbers: Vec<usize> = lines
        .iter()
        .map(|(s, t)| {
            assert_eq!(*s, OutputStream::Stdout);
            let (n, rest) = t.split_once(' ').expect("numbered line");
            assert_eq!(rest, pad);
            n.parse().expect("number")
        })
        .collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "in order");
    let dropped: u64 = seen.progress.iter().map(|p| p.dropped_lines).sum();
    assert!(numbers.len() as u64 + dropped >= *numbers.last().expect("lines") as u64);
}

#[tokio::test]
async fn the_budget_bounds_what_is_sent_even_for_empty_lines() {
    let flue = Flue::start().await;
    // 20000 empty lines and 2000 of control characters: 22 KB of text, about 700 KB of
    // JSON if every line were sent.
    let script = "yes '' | head -n 20000\n\
                  i=0; while [ $i -lt 2000 ]; do printf '\\001\\002\\003\\n'; i=$((i+1)); done\n";
    let (done, seen) = run_script(&flue, script, json!([]), json!({})).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(
        done.deploy_stdout.len(),
        20000 + 2000 * 4,
        "the result has it all"
    );
    assert_numbered(&seen);
    assert!(
        seen.progress.last().expect("some").truncated,
        "budget spent"
    );
    let sent: usize = seen
        .progress
        .iter()
        .flat_map(|p| &p.lines)
        .map(|l| serde_json::to_string(l).expect("json").len() + 1)
        .sum();
    assert!(sent <= MAX_PROGRESS_BYTES, "{sent} bytes of lines sent");
}

#[tokio::test]
async fn a_very_long_line_is_cut_and_marked() {
    let flue = Flue::start().await;
    let script = "head -c 10000 /dev/zero | tr '\\0' a\necho\necho after\n";
    let (done, seen) = run_script(&flue, script, json!([]), json!({})).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(
        seen.lines(),
        [
            (
                OutputStream::Stdout,
                format!("{}{LINE_TRUNCATED_MARKER}", "a".repeat(MAX_LINE_BYTES))
            ),
            (OutputStream::Stdout, "after".to_owned()),
        ]
    );
    assert_eq!(
        done.deploy_stdout,
        format!("{}\nafter\n", "a".repeat(10000))
    );
}

#[tokio::test]
async fn a_hidden_input_never_appears_in_progress() {
    let flue = Flue::start().await;
    let secret = "correct-horse-battery-staple";
    let script = "echo \"connecting with $db_password\"\n\
                  echo \"$db_password\" >&2\n\
                  echo \"user $db_user\"\n";
    let (done, seen) = run_script(
        &flue,
        script,
        json!([{"name": "db_password", "hidden": true}, {"name": "db_user"}]),
        json!({"db_password": secret, "db_user": "admin"}),
    )
    .await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    let lines = seen.lines();
    assert!(
        lines.contains(&(OutputStream::Stdout, "connecting with <hidden>".to_owned())),
        "{lines:?}"
    );
    assert!(lines.contains(&(OutputStream::Stderr, "<hidden>".to_owned())));
    assert!(lines.contains(&(OutputStream::Stdout, "user admin".to_owned())));
    for event in &seen.raw {
        assert!(!event.contains(secret), "secret in an event: {event}");
    }
}

/// Two tiers: `db` generates a hidden output (written to `<dir>/password` too, for the
/// test), which the gateway hands to `web` as a hidden input; `web` prints it on both
/// streams and fails, so the stack's failure reason quotes its stderr.
const LEAKY_TWO_TIER: &str = r#"
heat_template_version: 2018-08-31
parameters:
  dir: {type: string}
  db_server: {type: string, default: db}
  web_server: {type: string, default: web}
resources:
  db_host:
    type: OS::Flue::Server
    properties: {server_id: {get_param: db_server}}
  web_host:
    type: OS::Flue::Server
    properties: {server_id: {get_param: web_server}}
  db_config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: dir}]
      outputs: [{name: password, hidden: true}]
      config: |
        #!/bin/sh
        pw="gen-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
        printf '%s' "$pw" > "$dir/password"
        printf '%s' "$pw" > "${heat_outputs_path}.password"
  db_deploy:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: db_config}
      server: {get_resource: db_host}
      input_values: {dir: {get_param: dir}}
  web_config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: db_password, hidden: true}]
      config: |
        #!/bin/sh
        echo "connecting with $db_password"
        echo "authentication failed for $db_password" >&2
        exit 7
  web_deploy:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: web_config}
      server: {get_resource: web_host}
      input_values: {db_password: {get_attr: [db_deploy, password]}}
"#;

#[tokio::test]
async fn a_hidden_value_a_failing_hook_prints_is_in_no_event_read_or_log() {
    use crate::stack::{cluster, create_stack};

    let (flue, agents) = cluster(&["db", "web"]).await;
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
    let template = flue.path("leaky.yaml");
    std::fs::write(&template, LEAKY_TWO_TIER).expect("template");
    let dir = flue.path("db");
    std::fs::create_dir_all(&dir).expect("dir");
    let dir_param = format!("dir={}", dir.display());
    let run = create_stack(
        &flue,
        "leaky",
        &template.display().to_string(),
        &[&dir_param],
    )
    .await;
    assert_ne!(run.code, 0, "web fails: {run}");
    let failed = tap
        .wait_for("the stack operation failed", WAIT, |e| {
            e.ty == EventType::StackOperationFailed
        })
        .await;
    let secret = std::fs::read_to_string(dir.join("password")).expect("db wrote it");
    assert!(secret.len() > 10, "{secret:?}");
    let reason = failed.data["reason"].as_str().expect("reason");
    assert!(
        reason.contains("authentication failed for <hidden>"),
        "the reason still quotes stderr: {reason}"
    );

    let web = tap
        .events()
        .into_iter()
        .find(|e| e.ty == EventType::DeploymentFailed)
        .and_then(|e| e.deployment)
        .expect("web's deployment failed");
    let done = flue.finished(&web).await;
    assert_eq!(done.deploy_stdout, "connecting with <hidden>\n");
    assert_eq!(done.deploy_stderr, "authentication failed for <hidden>\n");

    let base = flue.gateway.url();
    let mut reads = vec![
        "/v1/stacks/leaky".to_owned(),
        "/v1/servers/db/deployments".to_owned(),
        "/v1/servers/web/deployments".to_owned(),
        "/v1/deployments".to_owned(),
    ];
    reads.push(format!("/v1/deployments/{web}"));
    for path in reads {
        let body = flue
            .http()
            .get(format!("{base}{path}"))
            .send()
            .await
            .expect("get")
            .text()
            .await
            .expect("body");
        assert!(!body.contains(&secret), "{path}: {body}");
    }
    for event in tap.events() {
        let text = serde_json::to_string(&event).expect("json");
        assert!(!text.contains(&secret), "secret in an event: {text}");
    }
    assert!(
        !run.stdout.contains(&secret) && !run.stderr.contains(&secret),
        "{run}"
    );
    let logs = flue.gateway.logs().lines();
    let agent_logs = agents.iter().flat_map(|a| a.logs().lines());
    for line in logs.into_iter().chain(agent_logs) {
        assert!(!line.contains(&secret), "secret logged: {line}");
    }
}
