//! `--cloud-init`: the `#cloud-config` user data that installs a server's agent — its
//! credentials file, its environment file, a hardened systemd unit, the download of the
//! agent (and of the small guard) with an optional sha256 check — and starts it.
//!
//! The user data holds the credentials: it is a secret, printed only once, by the command
//! that minted them (first registration or rotation).

use std::path::{Path, PathBuf};

use clap::Args;
use flue_proto::Registration;

use crate::CliError;

/// Where the user data puts the credentials file (mode 0600).
pub const CREDS_PATH: &str = "/etc/flue/agent.creds";
/// Where it puts the agent's environment file (mode 0600: the broker URL may hold a
/// password).
pub const ENV_PATH: &str = "/etc/flue/agent.env";
/// Where it puts the broker's CA certificate, with `--nats-ca`.
pub const CA_PATH: &str = "/etc/flue/nats-ca.pem";
/// The systemd unit it writes.
pub const UNIT_PATH: &str = "/etc/systemd/system/flue-agent.service";
/// The unit's name.
pub const UNIT_NAME: &str = "flue-agent.service";
/// The state dir systemd makes writable (`StateDirectory=flue-agent`).
pub const STATE_DIR: &str = "/var/lib/flue-agent";

/// Seconds the unit gives the agent to stop: above the agent's default 30 s shutdown grace
/// plus the 5 s it gives a hook between SIGTERM and SIGKILL.
const STOP_TIMEOUT_SECS: u64 = 45;

/// Flags of `--cloud-init`, shared by `server register` and `server rotate-credentials`.
#[derive(Debug, Clone, Args)]
pub struct CloudInitArgs {
    /// Print cloud-init user data (`#cloud-config`) that installs and starts this server's
    /// agent with its new credentials: a secret (see docs/agent.md). Needs --agent-url.
    #[arg(long)]
    pub cloud_init: bool,
    /// Where the server downloads `flue-agent` (https://, or http:// with --agent-sha256).
    #[arg(long, value_name = "URL", requires = "cloud_init")]
    pub agent_url: Option<String>,
    /// The SHA-256 (hex) the downloaded agent must have; the install stops otherwise.
    #[arg(long, value_name = "HEX", requires = "agent_url")]
    pub agent_sha256: Option<String>,
    /// Where the server downloads the small hook guard `flue-hook-guard` (optional).
    #[arg(long, value_name = "URL", requires = "cloud_init")]
    pub guard_url: Option<String>,
    /// The SHA-256 (hex) the downloaded guard must have.
    #[arg(long, value_name = "HEX", requires = "guard_url")]
    pub guard_sha256: Option<String>,
    /// A path the agent and its hooks may write despite `ProtectSystem=strict`
    /// (repeatable; becomes `ReadWritePaths=`); `/` lifts the file-system protection.
    #[arg(long = "writable-path", value_name = "PATH", requires = "cloud_init")]
    pub writable_paths: Vec<PathBuf>,
    /// A hook dir of the agent (repeatable; the agent's default otherwise:
    /// /var/lib/heat-config/hooks).
    #[arg(long = "hook-dir", value_name = "DIR", requires = "cloud_init")]
    pub hook_dirs: Vec<PathBuf>,
    /// The CA certificate (PEM) the broker's certificate chains to; installed as
    /// /etc/flue/nats-ca.pem and given to the agent (the connection must then be TLS).
    #[arg(long = "nats-ca", value_name = "FILE", requires = "cloud_init")]
    pub nats_ca: Option<PathBuf>,
    /// Where the binaries are installed and run from.
    #[arg(long, value_name = "DIR", default_value = "/usr/local/bin")]
    pub bin_dir: PathBuf,
    /// The release public key (`C…`, `flue release keygen`) agent builds must be signed by:
    /// given to the agent (FLUE_RELEASE_KEY), and the bin dir made writable for it, so that
    /// `flue server upgrade` can replace it. Without it the agent refuses upgrades.
    #[arg(long, value_name = "KEY", requires = "cloud_init")]
    pub release_key: Option<String>,
}

/// A download the user data makes: from where, checked against which SHA-256.
struct Download<'a> {
    url: &'a str,
    sha256: Option<&'a str>,
}

impl<'a> Download<'a> {
    /// Checks the URL (http(s), one line; plain http only with a checksum) and the hex.
    fn checked(
        url: &'a str,
        sha256: Option<&'a str>,
        flag: &'static str,
    ) -> Result<Self, CliError> {
        let bad = |why: &str| CliError::Usage(format!("--{flag}-url {url:?}: {why}"));
        if url.chars().any(char::is_control) {
            return Err(bad("it holds a control character"));
        }
        let https = url.starts_with("https://");
        if !https && !url.starts_with("http://") {
            return Err(bad("give an https:// (or http:// with a checksum) URL"));
        }
        if !https && sha256.is_none() {
            return Err(bad(&format!(
                "a plain-http download could be swapped on the way and runs as root; give --{flag}-sha256 HEX or an https:// URL"
            )));
        }
        if let Some(hex) = sha256
            && (hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(CliError::Usage(format!(
                "--{flag}-sha256 {hex:?}: not a SHA-256 (64 hex digits, as `sha256sum` prints it)"
            )));
        }
        Ok(Self { url, sha256 })
    }
}

/// Checks the flags before anything is minted: nothing is handed out for user data that
/// could not be printed.
pub fn check(args: &CloudInitArgs) -> Result<(), CliError> {
    plan(args).map(|_| ())
}

/// The checked downloads and paths of `args`.
struct Plan<'a> {
    agent: Download<'a>,
    guard: Option<Download<'a>>,
    writable: Vec<String>,
    hook_dirs: Vec<String>,
    ca: Option<String>,
    bin_dir: String,
    release_key: Option<&'a str>,
}

fn plan(args: &CloudInitArgs) -> Result<Plan<'_>, CliError> {
    let Some(url) = &args.agent_url else {
        return Err(CliError::Usage(
            "--cloud-init needs --agent-url URL: where the server downloads flue-agent".to_owned(),
        ));
    };
    let agent = Download::checked(url, args.agent_sha256.as_deref(), "agent")?;
    let guard = match &args.guard_url {
        Some(url) => Some(Download::checked(
            url,
            args.guard_sha256.as_deref(),
            "guard",
        )?),
        None => None,
    };
    let writable = args
        .writable_paths
        .iter()
        .map(|p| unit_path(p, "--writable-path"))
        .collect::<Result<Vec<_>, _>>()?;
    let hook_dirs = args
        .hook_dirs
        .iter()
        .map(|p| unit_path(p, "--hook-dir"))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(dir) = hook_dirs.iter().find(|d| d.contains(':')) {
        return Err(CliError::Usage(format!(
            "--hook-dir {dir:?}: a ':' separates hook dirs in FLUE_HOOK_DIRS"
        )));
    }
    let ca = match &args.nats_ca {
        Some(path) => Some(ca_text(path)?),
        None => None,
    };
    let bin_dir = unit_path(&args.bin_dir, "--bin-dir")?;
    let release_key = args.release_key.as_deref().map(str::trim);
    if let Some(key) = release_key {
        flue_proto::upgrade::release_public_key(key)
            .map_err(|e| CliError::Usage(format!("--release-key {key:?}: {e}")))?;
    }
    let mut writable = writable;
    if release_key.is_some() && !writable.contains(&bin_dir) {
        // The agent stages a new build beside itself and renames it over itself.
        writable.push(bin_dir.clone());
    }
    Ok(Plan {
        agent,
        guard,
        writable,
        hook_dirs,
        ca,
        bin_dir,
        release_key,
    })
}

/// An absolute path a unit file, an environment file and `sh` all carry as it is.
fn unit_path(path: &Path, flag: &str) -> Result<String, CliError> {
    let text = path
        .to_str()
        .ok_or_else(|| CliError::Usage(format!("{flag} {}: not UTF-8", path.display())))?;
    if !path.is_absolute() {
        return Err(CliError::Usage(format!(
            "{flag} {text:?}: give an absolute path"
        )));
    }
    // Written as they are into the unit, the environment file and the install commands:
    // only characters none of the three reads specially.
    if let Some(c) = text
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || "/._-+@=,:".contains(c)))
    {
        return Err(CliError::Usage(format!(
            "{flag} {text:?}: {c:?} cannot be written into the unit and the install commands as it is (use letters, digits and / . _ - + @ = , :)"
        )));
    }
    // `/` stays `/`; `/etc/` is `/etc`.
    let trimmed = text.trim_end_matches('/');
    Ok(if trimmed.is_empty() { "/" } else { trimmed }.to_owned())
}

/// The CA file's text, checked to look like PEM certificates.
fn ca_text(path: &Path) -> Result<String, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Read {
        path: path.to_owned(),
        source,
    })?;
    if !text.contains("-----BEGIN CERTIFICATE-----") {
        return Err(CliError::Usage(format!(
            "--nats-ca {}: not a PEM certificate (no BEGIN CERTIFICATE line)",
            path.display()
        )));
    }
    Ok(text)
}

/// The user data for `registration`, whose agent gets `credentials` (the text minted).
pub fn user_data(
    args: &CloudInitArgs,
    registration: &Registration,
    credentials: &str,
) -> Result<String, CliError> {
    let plan = plan(args)?;
    let env = env_file(registration, &plan)?;
    let unit = unit(registration, &plan);
    let server = &registration.server.id;
    let mut out = format!(
        "#cloud-config\n\
         # Installs and starts the Flue agent of server {server}. SECRET: this user data holds\n\
         # the agent's credentials; see docs/agent.md, \"Installing with cloud-init\".\n\
         write_files:\n"
    );
    push_file(&mut out, CREDS_PATH, "0600", credentials);
    push_file(&mut out, ENV_PATH, "0600", &env);
    if let Some(ca) = &plan.ca {
        push_file(&mut out, CA_PATH, "0644", ca);
    }
    push_file(&mut out, UNIT_PATH, "0644", &unit);
    out.push_str("runcmd:\n");
    push_block(&mut out, "  - ", 4, &install_script(&plan));
    Ok(out)
}

/// The agent's environment file: what `--env` prints, plus the paths the user data uses.
fn env_file(registration: &Registration, plan: &Plan<'_>) -> Result<String, CliError> {
    let mut env = crate::render::agent_env(registration);
    if env.is_empty() {
        return Err(CliError::Usage(
            "--cloud-init installs a flue-agent; this server has none (a polling server?)"
                .to_owned(),
        ));
    }
    // systemd reads quotes and backslashes in an environment file: a value holding one
    // would reach the agent changed.
    if env
        .chars()
        .any(|c| matches!(c, '"' | '\'' | '\\' | ' ' | '\t' | '\r'))
    {
        return Err(CliError::Usage(
            "the agent's broker URL (the gateway's --agent-nats-url, else --nats-url) holds a space, quote or backslash, which an environment file cannot carry as it is; the credentials just minted were not shown: change that URL, then run `flue server rotate-credentials ID --cloud-init …`".to_owned(),
        ));
    }
    env.push_str(&format!(
        "FLUE_CREDS={CREDS_PATH}\nFLUE_STATE_DIR={STATE_DIR}\n"
    ));
    if !plan.hook_dirs.is_empty() {
        env.push_str(&format!("FLUE_HOOK_DIRS={}\n", plan.hook_dirs.join(":")));
    }
    if plan.ca.is_some() {
        env.push_str(&format!("FLUE_NATS_CA={CA_PATH}\n"));
    }
    if let Some(key) = plan.release_key {
        env.push_str(&format!("FLUE_RELEASE_KEY={key}\n"));
    }
    Ok(env)
}

/// The hardened unit. Why each setting, and what it costs hooks: docs/agent.md.
fn unit(registration: &Registration, plan: &Plan<'_>) -> String {
    let server = &registration.server.id;
    let mut writable = String::new();
    if !plan.writable.is_empty() {
        // "-": a path missing at start is skipped instead of failing the start.
        let paths: Vec<String> = plan.writable.iter().map(|p| format!("-{p}")).collect();
        writable = format!("ReadWritePaths={}\n", paths.join(" "));
    }
    format!(
        "# The Flue agent of server {server}, written by `flue server register --cloud-init`.\n\
         [Unit]\n\
         Description=Flue agent (server {server})\n\
         Wants=network-online.target\n\
         After=network-online.target\n\
         # Never give up: a server must come back to its queue.\n\
         StartLimitIntervalSec=0\n\
         \n\
         [Service]\n\
         Type=exec\n\
         EnvironmentFile={ENV_PATH}\n\
         ExecStart={bin}/flue-agent run\n\
         Restart=always\n\
         RestartSec=5\n\
         # Only the agent gets SIGTERM; it stops its hook itself after its grace period.\n\
         KillMode=mixed\n\
         TimeoutStopSec={STOP_TIMEOUT_SECS}\n\
         StateDirectory=flue-agent\n\
         StateDirectoryMode=0700\n\
         # The whole file system is read-only for the agent and its hooks but for the\n\
         # state dir and ReadWritePaths (flue server register --writable-path).\n\
         ProtectSystem=strict\n\
         {writable}\
         PrivateTmp=yes\n\
         NoNewPrivileges=yes\n\
         LockPersonality=yes\n\
         RestrictRealtime=yes\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        bin = plan.bin_dir,
    )
}

/// The shell commands run once at first boot: download, check, install, start.
fn install_script(plan: &Plan<'_>) -> String {
    let bin = &plan.bin_dir;
    let mut script = String::from(
        "set -eu\n\
         flue_fetch() {\n\
         \x20 tmp=\"$2.download\"\n\
         \x20 if command -v curl >/dev/null 2>&1; then\n\
         \x20   curl -fsSL --retry 5 --retry-connrefused -o \"$tmp\" \"$1\"\n\
         \x20 else\n\
         \x20   wget -q -O \"$tmp\" \"$1\"\n\
         \x20 fi\n\
         \x20 if [ -n \"$3\" ] && ! printf '%s  %s\\n' \"$3\" \"$tmp\" | sha256sum -c - >/dev/null; then\n\
         \x20   echo \"flue: $1 does not have the expected sha256; not installed\" >&2\n\
         \x20   rm -f \"$tmp\"\n\
         \x20   exit 1\n\
         \x20 fi\n\
         \x20 chmod 0755 \"$tmp\"\n\
         \x20 mv -f \"$tmp\" \"$2\"\n\
         }\n",
    );
    script.push_str(&format!("mkdir -p {bin}\n"));
    let mut fetch = |download: &Download<'_>, name: &str| {
        script.push_str(&format!(
            "flue_fetch {} {bin}/{name} {}\n",
            shell_quote(download.url),
            shell_quote(download.sha256.unwrap_or_default()),
        ));
    };
    fetch(&plan.agent, "flue-agent");
    if let Some(guard) = &plan.guard {
        fetch(guard, "flue-hook-guard");
    }
    script.push_str(&format!(
        "systemctl daemon-reload\nsystemctl enable --now {UNIT_NAME}\n"
    ));
    script
}

/// One `write_files` entry, its content as a YAML literal block kept byte for byte.
fn push_file(out: &mut String, path: &str, mode: &str, content: &str) {
    out.push_str(&format!(
        "  - path: {path}\n    owner: root:root\n    permissions: '{mode}'\n"
    ));
    push_block(out, "    content: ", 6, content);
}

/// `text` as a YAML literal block after `lead`, each line indented `indent` columns: `|+`
/// keeps every trailing newline, `|-` adds none. Every text written here starts with a
/// character that is not a space, so no indentation indicator is needed.
fn push_block(out: &mut String, lead: &str, indent: usize, text: &str) {
    let chomp = if text.ends_with('\n') { "+" } else { "-" };
    out.push_str(&format!("{lead}|{chomp}\n"));
    let pad = " ".repeat(indent);
    for line in text.lines() {
        if line.is_empty() {
            out.push('\n');
        } else {
            out.push_str(&format!("{pad}{line}\n"));
        }
    }
}

/// `text` in single quotes for `sh`.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests;
