//! The README's non-Rust listener: `examples/listeners/flue_events.py` (nats-py) replays
//! a deployment's events from a sequence and from a time, with no Flue code involved.

use std::process::Command;

use flue_proto::DeploymentStatus;
use flue_tests::{EventTap, Flue, WAIT, repo_root};

/// The venv's Python, which `scripts/test.sh` gives nats-py.
fn python() -> std::path::PathBuf {
    let python = repo_root().join(".venv/bin/python");
    let ok = Command::new(&python)
        .args(["-c", "import nats"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import nats: run `bash scripts/test.sh` (it installs nats-py into .venv)",
        python.display()
    );
    python
}

/// Runs the listener until the stream has been quiet for a second; its stdout lines.
fn listen(url: &str, flags: &[String], start: &[&str]) -> Vec<String> {
    let script = repo_root().join("examples/listeners/flue_events.py");
    let out = Command::new(python())
        .arg(script)
        .args([url, "default"])
        .args(flags)
        .args(start)
        .args(["--idle", "1"])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "listener failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_listener_replays_from_a_sequence_and_from_a_time() {
    let env = Flue::start().await;
    env.register("web1").await;
    let _agent = env.agent("web1", &[]).await;
    env.script_config("hello", "echo hello from the hook", &[], &[])
        .await;
    let before = time::OffsetDateTime::now_utc();
    let d = env.deploy("hello", "web1", &[]).await;
    assert_eq!(env.finished(&d.id).await.status, DeploymentStatus::Complete);
    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    let completed = format!("deployment:{}:completed", d.id);
    tap.wait_for("the completed event", WAIT, |e| e.id == completed)
        .await;
    let expected: Vec<String> = tap
        .seen()
        .iter()
        .map(|(seq, e)| format!("{seq} {} {} {}", e.ty, e.subject, e.id))
        .collect();

    let url = env.nats.url();
    let flags = env.listener_flags().await;
    let from_one = tokio::task::spawn_blocking({
        let url = url.clone();
        let flags = flags.clone();
        move || listen(&url, &flags, &["--seq", "1"])
    })
    .await
    .expect("join");
    assert_eq!(
        from_one, expected,
        "replay from sequence 1 is the whole stream"
    );

    let since = before
        .format(&time::format_description::well_known::Rfc3339)
        .expect("rfc3339");
    let from_time = tokio::task::spawn_blocking(move || listen(&url, &flags, &["--since", &since]))
        .await
        .expect("join");
    let deployment_lines: Vec<&String> = expected
        .iter()
        .filter(|l| l.contains(&format!("deployments/{}", d.id)))
        .collect();
    assert!(
        deployment_lines.len() >= 4,
        "queued, delivered, started, completed at least: {expected:#?}"
    );
    for line in deployment_lines {
        assert!(
            from_time.contains(line),
            "{line} missing from {from_time:#?}"
        );
    }
}

/// Runs the listener with `args` (and a quiet second to stop); its exit success, stdout
/// and stderr.
fn listen_with(args: &[&str]) -> (bool, String, String) {
    let script = repo_root().join("examples/listeners/flue_events.py");
    let out = Command::new(python())
        .arg(script)
        .args(args)
        .args(["--idle", "1"])
        .output()
        .expect("python runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_listener_reads_a_tls_broker_only_when_given_its_ca() {
    let env = Flue::start_tls(&[]).await;
    env.register("web1").await;
    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    tap.wait_for("the registration", WAIT, |e| e.id.contains("web1"))
        .await;
    let url = env.nats.url();
    let ca = env
        .nats
        .ca_file()
        .expect("a TLS broker")
        .display()
        .to_string();

    let flags = env.listener_flags().await;
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let with = |extra: &[&str]| {
        let mut args = vec![url.as_str(), "default", "--seq", "1"];
        args.extend_from_slice(&flags);
        args.extend_from_slice(extra);
        listen_with(&args)
    };
    let (ok, out, err) = with(&["--ca", &ca]);
    assert!(ok, "listener failed: {err}");
    assert!(
        out.lines().any(|l| l.contains("server.registered")),
        "{out}"
    );

    // Without the CA the broker's certificate cannot be verified: no event is read.
    let (ok, out, _) = with(&[]);
    assert!(!ok, "read a TLS broker without trusting its CA: {out}");
    assert!(out.is_empty(), "{out}");
}
