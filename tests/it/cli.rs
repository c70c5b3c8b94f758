//! The `flue` CLI as a user runs it, against a real gateway and agent.

use std::process::Output;

use flue_tests::{Flue, Gateway, Tokens, WAIT, bin};

/// A gateway's URL and the tokens its commands need.
struct Gw<'a> {
    url: String,
    tokens: Option<&'a Tokens>,
}

impl<'a> Gw<'a> {
    fn of(gateway: &'a Gateway) -> Self {
        Gw {
            url: gateway.url().to_owned(),
            tokens: Some(gateway.tokens()),
        }
    }
}

async fn flue(gateway: &Gw<'_>, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(bin("flue"));
    if let Some(tokens) = gateway.tokens {
        command.env("FLUE_TOKEN", tokens.for_cli(args));
    }
    let out = command
        .arg("--gateway")
        .arg(&gateway.url)
        .args(args)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(WAIT, out)
        .await
        .expect("flue finishes")
        .expect("run flue")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn cli_creates_registers_deploys_waits_and_shows() {
    let flue_env = Flue::start().await;
    let gw = Gw::of(&flue_env.gateway);
    let script = flue_env.path("greet.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho \"hi $who\"\nprintf '%s' \"hello-$who\" > \"$heat_outputs_path.greeting\"\n",
    )
    .expect("script");
    let script = script.display().to_string();

    let out = flue(
        &gw,
        &[
            "config",
            "create",
            "--id",
            "greet",
            "--group",
            "script",
            "--config-file",
            &script,
            "--input",
            "who",
            "--output",
            "greeting",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("\"greet\""),
        "{}",
        text(&out.stdout)
    );

    let out = flue(&gw, &["server", "register", "web1", "--env"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("FLUE_SERVER_ID=web1"),
        "{}",
        text(&out.stdout)
    );
    let _agent = flue_env.agent("web1", &[]).await;

    let out = flue(
        &gw,
        &[
            "deploy", "--config", "greet", "--server", "web1", "--input", "who=cli", "--id", "d1",
            "--wait",
        ],
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("COMPLETE"), "{stdout}");
    assert!(stdout.contains("hello-cli"), "{stdout}");

    let out = flue(&gw, &["deployment", "show", "d1", "--output", "greeting"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim_end_matches('\n'), "hello-cli");

    let out = flue(&gw, &["deployment", "show", "d1", "--output", "nope"]).await;
    assert_eq!(out.status.code(), Some(1), "an unknown output name exits 1");
    assert!(text(&out.stderr).contains("nope"), "{}", text(&out.stderr));
}

#[tokio::test]
async fn cli_reports_failures_and_bad_arguments() {
    let flue_env = Flue::start().await;
    let gw = Gw::of(&flue_env.gateway);
    flue_env.register("s1").await;
    let _agent = flue_env.agent("s1", &[]).await;
    flue_env
        .script_config("bad", "#!/bin/sh\necho broken >&2\nexit 4\n", &[], &[])
        .await;

    let out = flue(
        &gw,
        &["deploy", "--config", "bad", "--server", "s1", "--wait"],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "a FAILED deployment exits 1");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("FAILED") && stdout.contains("broken"),
        "{stdout}"
    );

    let out = flue(
        &gw,
        &[
            "deploy", "--config", "bad", "--server", "s1", "--input", "novalue",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--input"),
        "{}",
        text(&out.stderr)
    );

    let out = flue(&gw, &["deploy", "--config", "bad", "--server", "no.pe"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no.pe"), "{}", text(&out.stderr));

    let out = flue(
        &Gw {
            url: "http://127.0.0.1:9".to_owned(),
            tokens: None,
        },
        &["server", "list"],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("127.0.0.1:9"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn server_list_shows_presence_and_deregister_removes_the_server() {
    let env = Flue::start().await;
    let gw = Gw::of(&env.gateway);
    env.register("web1").await;
    env.register("idle").await;
    let _agent = env.agent("web1", &[]).await;
    let online = |stdout: &str| {
        stdout
            .lines()
            .any(|l| l.starts_with("web1") && l.contains("online"))
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let out = flue(&gw, &["server", "list"]).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.starts_with("ID"), "{stdout}");
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("idle") && l.contains("unknown")),
            "{stdout}"
        );
        if online(&stdout) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "web1 never shown online: {stdout}"
        );
        // Polling a read-only listing until the agent's first heartbeat is recorded.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let out = flue(&gw, &["server", "deregister", "idle"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "server idle deregistered\n");
    let out = flue(&gw, &["server", "list"]).await;
    assert!(!text(&out.stdout).contains("idle"), "{}", text(&out.stdout));
    let out = flue(&gw, &["server", "deregister", "idle"]).await;
    assert_eq!(out.status.code(), Some(2), "unknown server: exit 2");
    assert!(
        text(&out.stderr).contains("not found"),
        "{}",
        text(&out.stderr)
    );
}
