//! Events: cli. `flue events` prints events as JSON lines (filtered, replayed, followed
//! across a dropped connection without a miss or a repeat); `flue watch` shows a
//! server's or a stack's deployments reaching their end and exits with their outcome.

use std::process::Stdio;
use std::sync::{Arc, Mutex};

use flue_proto::{CloudEvent, EventType};
use flue_tests::{EventTap, Flue, WAIT, wait_until, write_executable};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

use crate::stack::flue;

/// A `flue` process whose output is read line by line while it runs.
struct Running {
    child: Child,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Running {
    fn spawn(env: &Flue, gateway: &str, args: &[&str]) -> Running {
        let mut child = Command::new(flue_tests::bin("flue"))
            .env("FLUE_TOKEN", env.gateway.cli_token(args))
            .arg("--gateway")
            .arg(gateway)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn flue");
        let stdout = collect(child.stdout.take().expect("stdout"));
        let stderr = collect(child.stderr.take().expect("stderr"));
        Running {
            child,
            stdout,
            stderr,
        }
    }

    /// Waits until a line of stdout passes `check`; returns it.
    async fn line(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        wait_until(what, WAIT, || {
            self.stdout
                .lock()
                .expect("lock")
                .iter()
                .find(|l| check(l))
                .cloned()
        })
        .await
    }

    /// Waits (bounded) for the exit; returns the code, stdout and stderr.
    async fn exit(self) -> (i32, Vec<String>, Vec<String>) {
        let Running {
            mut child,
            stdout,
            stderr,
        } = self;
        let status = tokio::time::timeout(WAIT, child.wait())
            .await
            .expect("flue exits within the bound")
            .expect("wait");
        // The readers let go of their copies once the pipes close.
        wait_until("the pipes drained", WAIT, || {
            (Arc::strong_count(&stdout) == 1 && Arc::strong_count(&stderr) == 1).then_some(())
        })
        .await;
        let lines = |l: &Arc<Mutex<Vec<String>>>| l.lock().expect("lock").clone();
        (status.code().unwrap_or(-1), lines(&stdout), lines(&stderr))
    }
}

fn collect(pipe: impl tokio::io::AsyncRead + Unpin + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&lines);
    tokio::spawn(async move {
        let mut reader = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            sink.lock().expect("lock").push(line);
        }
    });
    lines
}

/// A TCP proxy in front of the gateway whose connections the test can cut.
struct Proxy {
    url: String,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(gateway: &str) -> Proxy {
        let upstream = gateway
            .strip_prefix("http://")
            .expect("http url")
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let list = Arc::clone(&connections);
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                list.lock().expect("lock").push(task.abort_handle());
            }
        });
        Proxy {
            url,
            connections,
            accept,
        }
    }

    /// Drops every open connection, as a network failure would.
    fn cut(&self) {
        for c in self.connections.lock().expect("lock").drain(..) {
            c.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// A broker, a gateway, server `web1` with an agent, and a config `hello`.
async fn cluster() -> (Flue, flue_tests::Agent) {
    let env = Flue::start().await;
    env.register("web1").await;
    let agent = env.agent("web1", &[]).await;
    env.script_config("hello", "#!/bin/sh\necho hello\n", &[], &[])
        .await;
    (env, agent)
}

fn completed(id: &str) -> impl Fn(&CloudEvent) -> bool + '_ {
    move |e| {
        e.ty == EventType::DeploymentCompleted
            && e.deployment.as_ref().is_some_and(|d| d.as_str() == id)
    }
}

fn parse(line: &str) -> (Option<u64>, CloudEvent) {
    let value: Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    let seq = value.get("seq").and_then(Value::as_u64);
    (seq, serde_json::from_value(value).expect("a CloudEvent"))
}

#[tokio::test]
async fn events_replays_json_lines_and_filters_by_type() {
    let (env, _agent) = cluster().await;
    let d = env.deploy("hello", "web1", &[]).await;
    env.finished(&d.id).await;
    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    tap.wait_for("completed", WAIT, completed(d.id.as_str()))
        .await;

    let all = flue(&env, &["events", "--all", "--with-seq"]).await;
    assert_eq!(all.code, 0, "{all}");
    let printed: Vec<(Option<u64>, CloudEvent)> = all.stdout.lines().map(parse).collect();
    let last = printed.last().expect("events").1.id.clone();
    tap.wait_for("the last printed", WAIT, |e| e.id == last)
        .await;
    let want: Vec<(Option<u64>, String)> = tap.seen()[..printed.len()]
        .iter()
        .map(|(s, e)| (Some(*s), e.id.clone()))
        .collect();
    let got: Vec<(Option<u64>, String)> = printed.iter().map(|(s, e)| (*s, e.id.clone())).collect();
    assert_eq!(got, want, "every kept event, in order, with its sequence");
    assert!(printed.iter().any(|(_, e)| completed(d.id.as_str())(e)));

    // Without --follow and without a start, it is the same replay; lines are pure CloudEvents.
    let plain = flue(&env, &["events", "--type", "deployment.completed"]).await;
    assert_eq!(plain.code, 0, "{plain}");
    let lines: Vec<(Option<u64>, CloudEvent)> = plain.stdout.lines().map(parse).collect();
    assert_eq!(lines.len(), 1, "{plain}");
    assert_eq!(lines[0].0, None, "no seq without --with-seq");
    assert!(completed(d.id.as_str())(&lines[0].1));
    assert!(plain.stderr.is_empty(), "{plain}");

    let none = flue(
        &env,
        &[
            "events",
            "--deployment",
            "other",
            "--type",
            "deployment.started",
        ],
    )
    .await;
    assert_eq!((none.code, none.stdout.as_str()), (0, ""), "{none}");
}

#[tokio::test]
async fn events_reports_errors_clearly() {
    let env = Flue::start().await;
    let bad = flue(&env, &["events", "--type", "deployment.done"]).await;
    assert_eq!(bad.code, 2, "{bad}");
    assert!(bad.stderr.contains("unknown event type"), "{bad}");
    let out = crate::stack::run_flue(
        "http://127.0.0.1:1".into(),
        None,
        vec!["events".into(), "--follow".into()],
    )
    .await;
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("cannot reach the gateway"), "{out}");
}

#[tokio::test]
async fn events_follow_survives_a_dropped_connection_without_a_miss_or_a_repeat() {
    let (env, _agent) = cluster().await;
    let proxy = Proxy::start(env.gateway.url()).await;
    let follow = Running::spawn(
        &env,
        &proxy.url,
        &["events", "--follow", "--all", "--with-seq"],
    );
    let d1 = env.deploy("hello", "web1", &[]).await;
    follow
        .line("d1 completed", |l| completed(d1.id.as_str())(&parse(l).1))
        .await;

    proxy.cut();
    let d2 = env.deploy("hello", "web1", &[]).await;
    env.finished(&d2.id).await;
    follow
        .line("d2 completed", |l| completed(d2.id.as_str())(&parse(l).1))
        .await;

    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    tap.wait_for("d2 completed", WAIT, completed(d2.id.as_str()))
        .await;
    let stderr = follow.stderr.lock().expect("lock").join("\n");
    let (_, lines, _) = {
        let mut follow = follow;
        follow.child.kill().await.expect("kill");
        follow.exit().await
    };
    let got: Vec<(u64, String)> = lines
        .iter()
        .map(|l| parse(l))
        .map(|(s, e)| (s.expect("--with-seq"), e.id))
        .collect();
    let want: Vec<(u64, String)> = tap.seen()[..got.len()]
        .iter()
        .map(|(s, e)| (*s, e.id.clone()))
        .collect();
    assert_eq!(
        got, want,
        "every event once, in order, across the reconnection"
    );
    assert!(stderr.contains("reconnecting"), "{stderr}");
}

#[tokio::test]
async fn watch_shows_a_servers_deployment_reaching_complete_and_exits() {
    let (env, _agent) = cluster().await;
    let release = env.path("release");
    let script = format!(
        "#!/bin/sh\necho working\nwhile [ ! -f {} ]; do sleep 0.05; done\necho done\n",
        release.display()
    );
    env.script_config("gated", &script, &[], &[]).await;
    let d = env.deploy("gated", "web1", &[]).await;

    let watch = Running::spawn(
        &env,
        env.gateway.url(),
        &["watch", "--server", "web1", "--until-complete"],
    );
    let prefix = format!("deployment {} on web1: CREATE ", d.id);
    watch
        .line("the running deployment", |l| l.starts_with(&prefix))
        .await;
    assert!(
        watch.stdout.lock().expect("lock")[0].starts_with("server web1: "),
        "title first"
    );
    write_executable(&release, "");
    let (code, stdout, stderr) = watch.exit().await;
    assert_eq!(code, 0, "{stdout:?} {stderr:?}");
    assert_eq!(
        stdout.last().map(String::as_str),
        Some(format!("{prefix}COMPLETE").as_str()),
        "{stdout:?}"
    );
    assert!(
        !stdout.iter().any(|l| l.contains('\x1b')),
        "no terminal codes in a pipe: {stdout:?}"
    );
}

#[tokio::test]
async fn watch_exits_1_when_a_watched_deployment_fails() {
    let (env, _agent) = cluster().await;
    let release = env.path("release");
    let script = format!(
        "#!/bin/sh\nwhile [ ! -f {} ]; do sleep 0.05; done\nexit 3\n",
        release.display()
    );
    env.script_config("doomed", &script, &[], &[]).await;
    let d = env.deploy("doomed", "web1", &[]).await;
    let watch = Running::spawn(
        &env,
        env.gateway.url(),
        &["watch", "--server", "web1", "--until-complete"],
    );
    watch
        .line("the running deployment", |l| l.contains(d.id.as_str()))
        .await;
    write_executable(&release, "");
    let (code, stdout, _) = watch.exit().await;
    assert_eq!(code, 1, "{stdout:?}");
    let failed = format!("deployment {} on web1: CREATE FAILED", d.id);
    assert!(stdout.iter().any(|l| l.starts_with(&failed)), "{stdout:?}");
}

#[tokio::test]
async fn watch_follows_a_stack_operation_to_its_end() {
    let (env, _agent) = cluster().await;
    let release = env.path("release");
    let template = env.path("stack.yaml");
    std::fs::write(
        &template,
        format!(
            r#"heat_template_version: 2018-08-31
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      config: |
        #!/bin/sh
        while [ ! -f {} ]; do sleep 0.05; done
  app:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {{get_resource: cfg}}
      server: web1
"#,
            release.display()
        ),
    )
    .expect("write template");
    let template = template.display().to_string();
    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    let create =
        crate::stack::flue_in_background(&env, &["stack", "create", "shop", "-t", &template]);
    // Watch once the operation is under way.
    tap.wait_for("the operation started", WAIT, |e| {
        e.ty == EventType::StackOperationStarted
    })
    .await;
    let watch = Running::spawn(
        &env,
        env.gateway.url(),
        &["watch", "--stack", "shop", "--until-complete"],
    );
    watch
        .line("the title", |l| {
            l.starts_with("stack shop: CREATE_IN_PROGRESS")
        })
        .await;
    write_executable(&release, "");
    let (code, stdout, stderr) = watch.exit().await;
    assert_eq!(code, 0, "{stdout:?} {stderr:?}");
    assert!(
        stdout
            .iter()
            .any(|l| l.starts_with("app on web1: CREATE COMPLETE")),
        "{stdout:?}"
    );
    assert_eq!(
        stdout.last().map(String::as_str),
        Some("stack shop: CREATE_COMPLETE"),
        "{stdout:?}"
    );
    let run = create.await.expect("create");
    assert_eq!(run.code, 0, "{run}");
}
