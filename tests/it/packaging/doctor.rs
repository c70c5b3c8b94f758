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
