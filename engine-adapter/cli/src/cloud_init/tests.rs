//! The user data's shape and the checks of its flags, without a gateway.

use clap::Parser;

use super::*;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: CloudInitArgs,
}

fn args(argv: &[&str]) -> CloudInitArgs {
    let argv = std::iter::once("flue")
        .chain(["--cloud-init"])
        .chain(argv.iter().copied());
    Cli::try_parse_from(argv).expect("flags parse").args
}

fn registration() -> Registration {
    serde_json::from_value(serde_json::json!({
        "server": {"id": "web1", "tenant": "acme", "created_at": "2026-01-01T00:00:00Z"},
        "agent": {
            "nats_url": "nats://broker.example:4222",
            "tenant": "acme",
            "server_id": "web1",
            "request_stream": "FLUE_REQ",
            "request_consumer": "req-acme-web1",
            "response_subject": "flue.acme.resp.web1",
            "inbox_prefix": "_INBOX_acme_web1",
        },
    }))
    .expect("registration")
}

fn usage_error(argv: &[&str]) -> String {
    match check(&args(argv)) {
        Err(CliError::Usage(text)) => text,
        other => panic!("expected a usage error for {argv:?}, got {other:?}"),
    }
}

const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

#[test]
fn bad_flags_are_refused_naming_the_flag() {
    assert!(usage_error(&[]).contains("--agent-url"));
    let text = usage_error(&["--agent-url", "http://example.com/flue-agent"]);
    assert!(
        text.contains("--agent-url") && text.contains("--agent-sha256"),
        "{text}"
    );
    let text = usage_error(&["--agent-url", "ftp://example.com/a"]);
    assert!(text.contains("--agent-url"), "{text}");
    let text = usage_error(&["--agent-url", "https://e.com/a", "--agent-sha256", "abc"]);
    assert!(text.contains("--agent-sha256"), "{text}");
    let text = usage_error(&["--agent-url", "https://e.com/a", "--writable-path", "etc"]);
    assert!(text.contains("--writable-path"), "{text}");
    let text = usage_error(&["--agent-url", "https://e.com/a", "--hook-dir", "/a b"]);
    assert!(text.contains("--hook-dir"), "{text}");
    // Nothing the install commands' shell would read as more than a path.
    let text = usage_error(&[
        "--agent-url",
        "https://e.com/a",
        "--bin-dir",
        "/opt/bin;reboot",
    ]);
    assert!(text.contains("--bin-dir"), "{text}");
    let text = usage_error(&[
        "--agent-url",
        "https://e.com/a",
        "--guard-url",
        "http://e.com/g",
    ]);
    assert!(text.contains("--guard-url"), "{text}");
    // A plain-http download with a checksum is allowed.
    let ok = args(&[
        "--agent-url",
        "http://mirror.lan/flue-agent",
        "--agent-sha256",
        SHA,
    ]);
    assert!(check(&ok).is_ok());
}

#[test]
fn user_data_writes_the_files_and_installs_with_checked_downloads() {
    let a = args(&[
        "--agent-url",
        "https://dl.example/it's/flue-agent",
        "--agent-sha256",
        SHA,
        "--guard-url",
        "https://dl.example/flue-hook-guard",
        "--writable-path",
        "/etc/",
        "--writable-path",
        "/opt",
        "--hook-dir",
        "/var/lib/heat-config/hooks",
    ]);
    let creds = "-----BEGIN NATS USER JWT-----\nJWT\n------END NATS USER JWT------\n\nmore\n";
    let text = user_data(&a, &registration(), creds).expect("user data");
    assert!(text.starts_with("#cloud-config\n"), "{text}");
    // The credentials, indented as one literal block, kept byte for byte (`|+`).
    assert!(
        text.contains(
            "    content: |+\n      -----BEGIN NATS USER JWT-----\n      JWT\n      ------END NATS USER JWT------\n\n      more\n"
        ),
        "{text}"
    );
    assert!(text.contains("FLUE_SERVER_ID=web1\n"), "{text}");
    assert!(
        text.contains("FLUE_CREDS=/etc/flue/agent.creds\n"),
        "{text}"
    );
    assert!(
        text.contains("FLUE_HOOK_DIRS=/var/lib/heat-config/hooks\n"),
        "{text}"
    );
    assert!(text.contains("ReadWritePaths=-/etc -/opt\n"), "{text}");
    assert!(
        text.contains("ExecStart=/usr/local/bin/flue-agent run\n"),
        "{text}"
    );
    // The URL is quoted for sh, a quote in it included.
    assert!(
        text.contains(&format!(
            "flue_fetch 'https://dl.example/it'\\''s/flue-agent' /usr/local/bin/flue-agent '{SHA}'"
        )),
        "{text}"
    );
    assert!(
        text.contains(
            "flue_fetch 'https://dl.example/flue-hook-guard' /usr/local/bin/flue-hook-guard ''"
        ),
        "{text}"
    );
    assert!(
        text.ends_with("    systemctl enable --now flue-agent.service\n"),
        "{text}"
    );
}

#[test]
fn a_release_key_reaches_the_agent_and_makes_its_bin_dir_writable_for_upgrades() {
    let (key, _seed) = flue_proto::upgrade::new_release_key();
    let a = args(&[
        "--agent-url",
        "https://dl.example/flue-agent",
        "--release-key",
        &key,
    ]);
    let text = user_data(&a, &registration(), "creds").expect("user data");
    assert!(
        text.contains(&format!("FLUE_RELEASE_KEY={key}\n")),
        "{text}"
    );
    assert!(text.contains("ReadWritePaths=-/usr/local/bin\n"), "{text}");
    let without = args(&["--agent-url", "https://dl.example/flue-agent"]);
    let text = user_data(&without, &registration(), "creds").expect("user data");
    assert!(!text.contains("FLUE_RELEASE_KEY"), "{text}");
    assert!(!text.contains("ReadWritePaths="), "{text}");
    let user = "UAHJ6BGQZQSCZ3LDMVBB5BNKNUQXMMHZXKKHE55IA2QXFBS6VKDORBXO";
    let e = usage_error(&[
        "--agent-url",
        "https://dl.example/flue-agent",
        "--release-key",
        user,
    ]);
    assert!(
        e.contains("--release-key") && e.contains("starts with C"),
        "{e}"
    );
}
