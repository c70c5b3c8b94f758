//! Agent packaging: `flue server register --cloud-init` user data (`cloud_init`: its files
//! start a real agent that deploys; its unit passes `systemd-analyze verify`, the whole
//! passes `cloud-init schema`; its install commands download, check and install) and
//! `flue-agent doctor` (`doctor`: every problem named). Shared here: running the binaries and
//! reading the user data.

mod cloud_init;
mod doctor;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use flue_tests::{Flue, Gateway, WAIT, bin, write_secret};
use serde::Deserialize;

/// The PATH systemd gives a service.
const SYSTEMD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A SHA-256 that no download has.
const WRONG_SHA256: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The parts of cloud-config the user data uses.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserData {
    write_files: Vec<WrittenFile>,
    runcmd: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WrittenFile {
    path: String,
    owner: String,
    permissions: String,
    content: String,
}

impl UserData {
    fn parse(text: &str) -> UserData {
        assert!(text.starts_with("#cloud-config\n"), "{text}");
        serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("user data is YAML: {e}\n{text}"))
    }

    fn file(&self, path: &str) -> &WrittenFile {
        self.write_files
            .iter()
            .find(|f| f.path == path)
            .unwrap_or_else(|| panic!("user data writes {path}: {self:?}"))
    }
}

async fn run(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let out = tokio::process::Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(WAIT, out)
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} finishes", program.display()))
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()))
}

/// `flue --gateway URL ARGS…` with a token allowed to run them.
async fn flue(gateway: &Gateway, args: &[&str]) -> Output {
    let token = gateway.tokens().for_cli(args);
    let mut all = vec!["--gateway", gateway.url()];
    all.extend_from_slice(args);
    run(&bin("flue"), &all, &[("FLUE_TOKEN", token)]).await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Where the built binaries are: the unit's ExecStart must name a file that exists for
/// `systemd-analyze verify`.
fn bin_dir() -> String {
    bin("flue-agent")
        .parent()
        .expect("target dir")
        .display()
        .to_string()
}

/// `flue server register SERVER --cloud-init …` (or rotate) succeeded: its user data.
async fn user_data(flue_env: &Flue, args: &[&str]) -> (String, UserData) {
    let out = flue(&flue_env.gateway, args).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    assert!(
        stderr.contains("a secret"),
        "the secret is announced: {stderr}"
    );
    let stdout = text(&out.stdout);
    let parsed = UserData::parse(&stdout);
    (stdout, parsed)
}

/// The environment file's `NAME=value` lines.
fn env_lines(content: &str) -> BTreeMap<String, String> {
    content
        .lines()
        .map(|line| {
            let (name, value) = line.split_once('=').expect("NAME=value");
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

/// The environment of the unit, with the credentials and state dir moved into `dir`
/// (a test cannot write /etc/flue or /var/lib/flue-agent).
fn unit_env(user_data: &UserData, dir: &Path) -> BTreeMap<String, String> {
    let creds = user_data.file("/etc/flue/agent.creds");
    assert_eq!(
        (creds.owner.as_str(), creds.permissions.as_str()),
        ("root:root", "0600")
    );
    let env_file = user_data.file("/etc/flue/agent.env");
    assert_eq!(
        env_file.permissions, "0600",
        "the broker URL may hold a password"
    );
    let mut env = env_lines(&env_file.content);
    assert_eq!(
        env.get("FLUE_CREDS").map(String::as_str),
        Some("/etc/flue/agent.creds")
    );
    assert_eq!(
        env.get("FLUE_STATE_DIR").map(String::as_str),
        Some("/var/lib/flue-agent")
    );
    let creds_path = dir.join("agent.creds");
    write_secret(&creds_path, &creds.content);
    env.insert("FLUE_CREDS".into(), creds_path.display().to_string());
    env.insert(
        "FLUE_STATE_DIR".into(),
        dir.join("state").display().to_string(),
    );
    env
}

fn pairs(env: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The tool, or a failure saying what to install: a missing tool never passes silently.
fn which(tool: &str, install: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{tool} is not installed: install {install} (scripts/test.sh does when run as root)"
            )
        })
}

/// True when `report` has a `FAIL <name>:` line containing `needle`.
fn failed_in(report: &str, name: &str, needle: &str) -> bool {
    report
        .lines()
        .any(|l| l.starts_with(&format!("FAIL {name}:")) && l.contains(needle))
}
