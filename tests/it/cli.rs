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

/// `flue ARGS` with no gateway settings from the environment.
async fn flue_bare(args: &[&str]) -> Output {
    let out = tokio::process::Command::new(bin("flue"))
        .env_remove("FLUE_GATEWAY_URL")
        .env_remove("FLUE_TOKEN")
        .env_remove("FLUE_CA")
        .args(args)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(WAIT, out)
        .await
        .expect("flue finishes")
        .expect("run flue")
}

#[tokio::test]
async fn flue_help_lists_the_exit_codes_the_code_returns_and_every_stack_verb() {
    use flue_cli::{CliError, Outcome, exit};
    let out = flue_bare(&["--help"]).await;
    assert_eq!(out.status.code(), Some(i32::from(exit::SUCCESS)));
    let help = text(&out.stdout);

    // The "Exit codes:" section: one line per code, as the constants say.
    let section = help
        .split_once("\nExit codes:\n")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no Exit codes section: {help}"));
    let listed: Vec<(u8, String)> = section
        .lines()
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let (code, meaning) = l.trim().split_once("  ").expect("code  meaning");
            (code.parse().expect("a code"), meaning.to_owned())
        })
        .collect();
    let constants: Vec<(u8, String)> = exit::CODES
        .iter()
        .map(|(c, m)| (*c, (*m).to_owned()))
        .collect();
    assert_eq!(listed, constants, "{help}");
    let codes: Vec<u8> = listed.iter().map(|(c, _)| *c).collect();
    // Every code the program returns is listed: each outcome, each kind of error, clap's
    // own usage error (the real binary's).
    // (An outcome added later does not compile here until it is listed.)
    let outcome = |o: Outcome| match o {
        Outcome::Success | Outcome::DeploymentFailed | Outcome::Failed => o.exit_code(),
    };
    let returned = [
        outcome(Outcome::Success),
        outcome(Outcome::DeploymentFailed),
        outcome(Outcome::Failed),
        CliError::Usage("x".into()).exit_code(),
        CliError::UnknownOutput {
            id: "d".parse().expect("id"),
            name: "x".into(),
            available: Vec::new(),
        }
        .exit_code(),
    ];
    for code in returned {
        assert!(codes.contains(&code), "{code} is not listed: {help}");
    }
    let usage = flue_bare(&["stack", "create"]).await;
    assert_eq!(
        usage.status.code(),
        Some(i32::from(exit::ERROR)),
        "{}",
        text(&usage.stderr)
    );

    // The `stack` line names every verb `flue stack` has.
    let stack_line = help
        .lines()
        .find(|l| l.trim_start().starts_with("stack "))
        .unwrap_or_else(|| panic!("no stack command: {help}"));
    let words: Vec<&str> = stack_line
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '-')
        .collect();
    let cli = flue_cli::command();
    let stack = cli.find_subcommand("stack").expect("stack");
    let verbs: Vec<&str> = stack
        .get_subcommands()
        .map(|c| c.get_name())
        .filter(|n| *n != "help")
        .collect();
    assert!(verbs.len() >= 14, "{verbs:?}");
    let missing: Vec<&&str> = verbs.iter().filter(|v| !words.contains(v)).collect();
    assert!(missing.is_empty(), "{missing:?} not in: {stack_line}");
}

#[tokio::test]
async fn no_usage_line_requires_gateway_or_token_and_a_missing_one_is_named_with_its_variable() {
    // Every command's usage line, from the real binary: the gateway flags are options
    // (under their own heading), never required.
    let mut paths: Vec<Vec<String>> = Vec::new();
    let mut todo = vec![(Vec::new(), flue_cli::command())];
    while let Some((above, command)) = todo.pop() {
        for sub in command.get_subcommands().filter(|c| c.get_name() != "help") {
            let mut path: Vec<String> = above.clone();
            path.push(sub.get_name().to_owned());
            paths.push(path.clone());
            todo.push((path, sub.clone()));
        }
    }
    assert!(paths.len() > 25, "{paths:?}");
    for path in &paths {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = flue_bare(&args).await;
        let help = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{path:?}: {}",
            text(&out.stderr)
        );
        let usage = help
            .lines()
            .find(|l| l.starts_with("Usage:"))
            .unwrap_or_else(|| panic!("{path:?}: no usage line: {help}"));
        assert!(
            !usage.contains("--gateway") && !usage.contains("--token"),
            "{path:?}: {usage}"
        );
        assert!(
            help.contains(flue_cli::GATEWAY_OPTIONS) && help.contains("[env: FLUE_TOKEN]"),
            "{path:?}: {help}"
        );
    }

    // No gateway there: the error names the flag and its variable.
    let nowhere = format!("http://127.0.0.1:{}", flue_tests::free_port());
    let out = flue_bare(&["--gateway", &nowhere, "stack", "list"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--gateway") && stderr.contains("FLUE_GATEWAY_URL"),
        "{stderr}"
    );
    // A gateway that wants a token, and none given.
    let flue_env = Flue::start().await;
    let out = flue_bare(&["--gateway", flue_env.gateway.url(), "stack", "list"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--token") && stderr.contains("FLUE_TOKEN"),
        "{stderr}"
    );
}
