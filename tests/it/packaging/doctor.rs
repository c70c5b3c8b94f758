//! `flue-agent doctor`: each problem named on its own `FAIL` line, exit status 1.

use std::os::unix::fs::PermissionsExt as _;

use flue_tests::{Flue, bin, free_port};

use super::*;

#[tokio::test]
async fn doctor_names_a_wide_creds_file_a_closed_broker_port_a_missing_hook_dir_and_an_unreachable_consumer()
 {
    let flue_env = Flue::start().await;
    let creds = flue_env.creds("web4").await;
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let closed = format!("nats://127.0.0.1:{}", free_port());
    let missing_hooks = flue_env.path("no-such-hooks");
    let state = flue_env.path("state");
    let args = [
        "doctor",
        "--server-id",
        "web4",
        "--creds",
        &creds.display().to_string(),
        "--nats-url",
        &closed,
        "--hook-dir",
        &missing_hooks.display().to_string(),
        "--state-dir",
        &state.display().to_string(),
        "--timeout-secs",
        "2",
    ]
    .map(str::to_owned);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&bin("flue-agent"), &args, &[]).await;
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}{}", text(&out.stderr));
    assert!(failed_in(&report, "credentials", "mode 0644"), "{report}");
    assert!(failed_in(&report, "credentials", "chmod 600"), "{report}");
    assert!(failed_in(&report, "broker", &closed), "{report}");
    assert!(failed_in(&report, "hook dir", "does not exist"), "{report}");
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("ok") && l.contains("state dir:")),
        "a state dir that can be made is fine: {report}"
    );

    // No credentials file at all: named, and the broker is not tried.
    let gone = flue_env.path("gone.creds").display().to_string();
    let mut args = args.clone();
    let at = args.iter().position(|a| *a == "--creds").expect("flag") + 1;
    args[at] = &gone;
    let out = run(&bin("flue-agent"), &args, &[]).await;
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        failed_in(&report, "credentials", "does not exist"),
        "{report}"
    );
    assert!(failed_in(&report, "broker", "not tried"), "{report}");

    // Good credentials and broker, but JetStream addressed through a domain nobody serves:
    // connected, and only the request consumer fails.
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let hooks = flue_env.path("hooks");
    std::fs::create_dir_all(&hooks).expect("hook dir");
    let (nats_url, creds) = (flue_env.nats.url(), creds.display().to_string());
    let (hooks, scratch) = (
        hooks.display().to_string(),
        flue_env.dir.path().display().to_string(),
    );
    let out = run(
        &bin("flue-agent"),
        &[
            "doctor",
            "--server-id",
            "web4",
            "--creds",
            &creds,
            "--nats-url",
            &nats_url,
            "--hook-dir",
            &hooks,
            "--state-dir",
            &scratch,
            "--js-domain",
            "nowhere",
            "--timeout-secs",
            "2",
        ],
        &[],
    )
    .await;
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("ok") && l.contains("broker:")),
        "{report}"
    );
    assert!(
        failed_in(&report, "request consumer", "nowhere"),
        "{report}"
    );
    assert_eq!(report.matches("FAIL").count(), 1, "{report}");
}

#[tokio::test]
async fn doctor_with_another_servers_credentials_says_whose_they_are_and_never_ok_for_the_broker() {
    let flue_env = Flue::start().await;
    flue_env.register("web1").await;
    let theirs = flue_env.creds("web2").await;
    let hooks = flue_env.path("hooks");
    std::fs::create_dir_all(&hooks).expect("hook dir");
    let (nats_url, hooks) = (flue_env.nats.url(), hooks.display().to_string());
    let state = flue_env.path("state").display().to_string();
    let doctor = |creds: String| {
        let (nats_url, hooks, state) = (nats_url.clone(), hooks.clone(), state.clone());
        async move {
            let out = run(
                &bin("flue-agent"),
                &[
                    "doctor",
                    "--server-id",
                    "web1",
                    "--creds",
                    &creds,
                    "--nats-url",
                    &nats_url,
                    "--hook-dir",
                    &hooks,
                    "--state-dir",
                    &state,
                    "--timeout-secs",
                    "5",
                ],
                &[],
            )
            .await;
            (out.status.code(), text(&out.stdout))
        }
    };
    let broker_ok = |report: &str| {
        report
            .lines()
            .any(|l| l.starts_with("ok") && l.contains("broker:"))
    };

    // web2's file as it was handed out, on web1: its settings and its JWT say web2.
    let (code, report) = doctor(theirs.display().to_string()).await;
    assert_eq!(code, Some(1), "{report}");
    assert!(
        failed_in(&report, "credentials", "minted for server web2"),
        "{report}"
    );
    assert!(
        failed_in(&report, "broker", "the broker user of server web2"),
        "{report}"
    );
    assert!(!broker_ok(&report), "{report}");

    // The same file with its settings block edited to name web1: the JWT still says whose
    // broker user it is (the rights the broker enforces), so nothing passes as web1's.
    let mut forged = flue_proto::creds::AgentCredentials::parse(
        &std::fs::read_to_string(&theirs).expect("read"),
    )
    .expect("parse");
    forged.settings.server = "web1".parse().expect("id");
    let path = flue_env.path("forged.creds");
    std::fs::write(&path, forged.to_text()).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let (code, report) = doctor(path.display().to_string()).await;
    assert_eq!(code, Some(1), "{report}");
    assert!(
        failed_in(&report, "credentials", "the broker user of server web2")
            && failed_in(&report, "credentials", "another server's credentials"),
        "{report}"
    );
    assert!(!report.contains("minted for server"), "{report}");
    assert!(
        failed_in(&report, "broker", "not as this server's broker user"),
        "{report}"
    );
    assert!(
        failed_in(&report, "request consumer", "not tried"),
        "{report}"
    );
    assert!(!broker_ok(&report), "{report}");

    // web1's own file passes, as this server's user.
    let own = flue_env.creds("web1").await;
    let (code, report) = doctor(own.display().to_string()).await;
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report.lines().any(|l| l.starts_with("ok")
            && l.contains("broker: connected")
            && l.contains("as this server's broker user")),
        "{report}"
    );
}
