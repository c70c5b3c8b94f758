//! `--cloud-init` user data: what its files start, what systemd and cloud-init make of it,
//! what its install commands do, and when it is printed at all.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Stdio;

use flue_proto::DeploymentStatus;
use flue_proto::creds::AgentCredentials;
use flue_tests::{Flue, Logs, WAIT, bin, write_executable};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;

#[tokio::test]
async fn cloud_init_files_start_an_agent_that_deploys_and_passes_doctor() {
    let flue_env = Flue::start().await;
    let hooks = flue_env.path("hooks");
    std::fs::create_dir_all(&hooks).expect("hook dir");
    write_executable(&hooks.join("noop"), "#!/bin/sh\necho '{}'\n");
    let hook_dir = hooks.display().to_string();
    let bin_dir = bin_dir();
    let (_, data) = user_data(
        &flue_env,
        &[
            "server",
            "register",
            "web1",
            "--cloud-init",
            "--agent-url",
            "https://downloads.example/flue-agent",
            "--hook-dir",
            &hook_dir,
            "--bin-dir",
            &bin_dir,
        ],
    )
    .await;
    let creds = &data.file("/etc/flue/agent.creds").content;
    let parsed = AgentCredentials::parse(creds).expect("the credentials file parses");
    assert_eq!(parsed.settings.server.as_str(), "web1");
    let env = unit_env(&data, flue_env.dir.path());
    assert_eq!(env.get("FLUE_HOOK_DIRS"), Some(&hook_dir));

    // The agent started with exactly the unit's environment (and no flag) deploys.
    let mut agent = tokio::process::Command::new(bin("flue-agent"))
        .arg("run")
        .env_clear()
        .envs(pairs(&env))
        // What systemd gives a unit without Environment=PATH.
        .env("PATH", SYSTEMD_PATH)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn flue-agent");
    let logs = Logs::default();
    logs.capture(agent.stderr.take().expect("stderr"));
    logs.wait_for("agent ready", WAIT).await;
    flue_env
        .script_config("hello", "#!/bin/sh\necho hello\n", &[], &[])
        .await;
    let queued = flue_env.deploy("hello", "web1", &[]).await;
    let done = flue_env.finished(&queued.id).await;
    assert_eq!(
        done.status,
        DeploymentStatus::Complete,
        "{done:?}\n{:?}",
        logs.lines()
    );

    // `flue-agent doctor` with the same environment: every check passes, no secret shown.
    let out = run(&bin("flue-agent"), &["doctor"], &pairs(&env)).await;
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}{}", text(&out.stderr));
    for name in [
        "credentials:",
        "state dir:",
        "hook dir:",
        "hook guard:",
        "broker:",
        "request consumer:",
    ] {
        assert!(
            report
                .lines()
                .any(|l| l.starts_with("ok") && l.contains(name)),
            "{name} ok: {report}"
        );
    }
    assert!(
        report.contains("noop"),
        "the hook dir's hooks are listed: {report}"
    );
    assert!(!report.contains("FAIL"), "{report}");
    let seed = &parsed.user.seed;
    assert!(!report.contains(seed.as_str()) && !report.contains(&parsed.settings.xkey_seed));
    assert!(!report.contains(&parsed.user.jwt), "{report}");
}

#[tokio::test]
async fn the_unit_passes_systemd_analyze_verify_and_the_user_data_cloud_init_schema() {
    let flue_env = Flue::start().await;
    let bin_dir = bin_dir();
    let (release_key, _seed) = flue_proto::upgrade::new_release_key();
    let (raw, data) = user_data(
        &flue_env,
        &[
            "server",
            "register",
            "web2",
            "--cloud-init",
            "--agent-url",
            "https://downloads.example/flue-agent",
            "--guard-url",
            "https://downloads.example/flue-hook-guard",
            "--writable-path",
            "/etc",
            "--writable-path",
            "/usr",
            "--bin-dir",
            &bin_dir,
            "--release-key",
            &release_key,
        ],
    )
    .await;
    let unit = &data.file("/etc/systemd/system/flue-agent.service");
    assert_eq!(unit.permissions, "0644");
    for line in [
        "Restart=always",
        "ProtectSystem=strict",
        "StateDirectory=flue-agent",
        // The bin dir too: with a release key, the agent replaces itself there.
        &format!("ReadWritePaths=-/etc -/usr -{bin_dir}"),
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "KillMode=mixed",
        "EnvironmentFile=/etc/flue/agent.env",
        &format!("ExecStart={bin_dir}/flue-agent run"),
    ] {
        assert!(
            unit.content.lines().any(|l| l == line),
            "{line}:\n{}",
            unit.content
        );
    }

    let env = &data.file("/etc/flue/agent.env");
    assert!(
        env.content
            .lines()
            .any(|l| l == format!("FLUE_RELEASE_KEY={release_key}")),
        "{}",
        env.content
    );

    // systemd's own reading of the unit: no error and no warning (an unknown key is only
    // a warning, so the exit status alone would not show it).
    let analyze = which("systemd-analyze", "systemd (apt-get install systemd)");
    let dir = tempfile::tempdir().expect("tempdir");
    let unit_path = dir.path().join("flue-agent.service");
    std::fs::write(&unit_path, &unit.content).expect("write unit");
    let out = run(&analyze, &["verify", &unit_path.display().to_string()], &[]).await;
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {said}\n{}",
        unit.content
    );

    // cloud-init's schema over the whole user data.
    let cloud_init = which("cloud-init", "cloud-init (apt-get install cloud-init)");
    let data_path = dir.path().join("user-data");
    std::fs::write(&data_path, &raw).expect("write user data");
    let out = run(
        &cloud_init,
        &["schema", "--config-file", &data_path.display().to_string()],
        &[],
    )
    .await;
    assert!(
        out.status.success() && text(&out.stdout).contains("Valid cloud-config"),
        "cloud-init schema: {}{}\n{raw}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[tokio::test]
async fn cloud_init_needs_fresh_credentials_and_rotation_prints_new_ones() {
    let flue_env = Flue::start().await;
    let gw = &flue_env.gateway;
    // Bad flags are refused before anything is minted: the server is not registered.
    let out = flue(
        gw,
        &[
            "server",
            "register",
            "web3",
            "--cloud-init",
            "--agent-url",
            "http://dl.example/a",
        ],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--agent-sha256"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let servers = flue_env
        .admin_client()
        .list_servers()
        .await
        .expect("list servers");
    assert!(servers.is_empty(), "nothing registered: {servers:?}");

    let first = flue_env.path("web3.creds").display().to_string();
    let out = flue(gw, &["server", "register", "web3", "--creds", &first]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Registered before: no credentials, so no user data, and the way to get them.
    let url = "https://downloads.example/flue-agent";
    let out = flue(
        gw,
        &[
            "server",
            "register",
            "web3",
            "--cloud-init",
            "--agent-url",
            url,
        ],
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert!(
        stderr.contains("flue server rotate-credentials web3 --cloud-init"),
        "{stderr}"
    );

    let (_, data) = user_data(
        &flue_env,
        &[
            "server",
            "rotate-credentials",
            "web3",
            "--cloud-init",
            "--agent-url",
            url,
        ],
    )
    .await;
    let rotated =
        AgentCredentials::parse(&data.file("/etc/flue/agent.creds").content).expect("parses");
    let old =
        AgentCredentials::parse(&std::fs::read_to_string(&first).expect("read")).expect("parses");
    assert_eq!(rotated.settings.server.as_str(), "web3");
    assert_ne!(rotated.user.seed, old.user.seed, "new credentials");

    // The old file is now refused by the broker, and the doctor says so.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut env = unit_env(&data, dir.path());
    std::fs::copy(&first, &env["FLUE_CREDS"]).expect("old credentials in place");
    env.insert("FLUE_HOOK_DIRS".into(), dir.path().display().to_string());
    let out = run(&bin("flue-agent"), &["doctor"], &pairs(&env)).await;
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("FAIL broker:") && l.contains("refused")),
        "{report}"
    );
}

/// Serves `body` over HTTP on loopback to every request, until dropped.
async fn serve(body: Vec<u8>) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/flue-agent", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (url, task)
}

#[tokio::test]
async fn the_install_script_checks_the_download_installs_it_and_starts_the_unit() {
    let flue_env = Flue::start().await;
    let agent = std::fs::read(bin("flue-agent")).expect("read the built agent");
    let digest = ring::digest::digest(&ring::digest::SHA256, &agent);
    let sha256: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let (url, _server) = serve(agent.clone()).await;
    let install = flue_env.path("bin");
    let install_dir = install.display().to_string();
    // The commands the script runs that need root stand in as a recorder.
    let stubs = flue_env.path("stubs");
    std::fs::create_dir_all(&stubs).expect("stubs");
    let calls = flue_env.path("systemctl.calls");
    write_executable(
        &stubs.join("systemctl"),
        &format!("#!/bin/sh\necho \"$*\" >> '{}'\n", calls.display()),
    );
    let path = format!(
        "{}:{}",
        stubs.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script_of = |data: &UserData| data.runcmd.concat();
    // The download is from loopback: never through a proxy the environment names.
    let shell_env = [
        ("PATH", path.as_str()),
        ("no_proxy", "127.0.0.1"),
        ("NO_PROXY", "127.0.0.1"),
    ];

    // The wrong checksum: nothing installed, nothing started, a clear message.
    let (_, data) = user_data(
        &flue_env,
        &[
            "server",
            "register",
            "web5",
            "--cloud-init",
            "--agent-url",
            &url,
            "--agent-sha256",
            WRONG_SHA256,
            "--bin-dir",
            &install_dir,
        ],
    )
    .await;
    let out = run(Path::new("/bin/sh"), &["-c", &script_of(&data)], &shell_env).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("does not have the expected sha256"),
        "{}",
        text(&out.stderr)
    );
    assert!(!install.join("flue-agent").exists(), "nothing installed");
    assert!(!calls.exists(), "nothing started");

    // The right one: installed executable, byte for byte, and the unit enabled and started.
    let (_, data) = user_data(
        &flue_env,
        &[
            "server",
            "rotate-credentials",
            "web5",
            "--cloud-init",
            "--agent-url",
            &url,
            "--agent-sha256",
            &sha256,
            "--bin-dir",
            &install_dir,
        ],
    )
    .await;
    let out = run(Path::new("/bin/sh"), &["-c", &script_of(&data)], &shell_env).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let installed = install.join("flue-agent");
    assert_eq!(std::fs::read(&installed).expect("installed"), agent);
    let mode = std::fs::metadata(&installed)
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(
        std::fs::read_to_string(&calls).expect("systemctl called"),
        "daemon-reload\nenable --now flue-agent.service\n"
    );
}
