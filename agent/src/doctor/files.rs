//! The doctor's local checks: the credentials file, the state dir, the hook dirs and the
//! small guard.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use flue_proto::creds::{AgentCredentials, UserJwtClaims};

use super::Check;
use crate::config::Config;

/// Mode bits a credentials file must not have: any right for the group or others.
const WIDER_THAN_OWNER: u32 = 0o077;

/// The credentials file: present, readable, mode 0600 or narrower, parses, names this
/// server and tenant, its JWT (when it holds one) verifies, is for its seed and has not
/// expired, and its seeds and keys are well formed. The parsed file comes back when the
/// broker can be tried with it, even if its mode is too wide.
pub(super) fn credentials(config: &Config) -> (Check, Option<AgentCredentials>) {
    const NAME: &str = "credentials";
    let Some(path) = &config.creds_file else {
        if config.insecure_unsigned_requests {
            let note = "none (--insecure-unsigned-requests: INSECURE, development only)";
            return (Check::pass(NAME, note), None);
        }
        let fix = "no credentials file: set FLUE_CREDS or give --creds FILE (the file `flue server register ID --creds FILE` or `--cloud-init` wrote)";
        return (Check::fail(NAME, fix), None);
    };
    let shown = path.display();
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => return (Check::fail(NAME, format!("{shown}: {}", io_hint(&e))), None),
    };
    let mode = meta.permissions().mode() & 0o7777;
    let mut problems = Vec::new();
    if mode & WIDER_THAN_OWNER != 0 {
        problems.push(format!(
            "mode {mode:04o} lets others read it: `chmod 600 {shown}` (and rotate the credentials if someone may have read them)"
        ));
    }
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            problems.push(io_hint(&e));
            return (
                Check::fail(NAME, format!("{shown}: {}", problems.join("; "))),
                None,
            );
        }
    };
    // The parse error names the missing block; it never quotes the file.
    let creds = match AgentCredentials::parse(&text) {
        Ok(creds) => creds,
        Err(e) => {
            problems.push(format!("{e}: write the file `flue server register` or `rotate-credentials` handed out, unchanged"));
            return (
                Check::fail(NAME, format!("{shown}: {}", problems.join("; "))),
                None,
            );
        }
    };
    problems.extend(content_problems(config, &creds));
    let check = if problems.is_empty() {
        Check::pass(
            NAME,
            format!(
                "{shown} (server {} of tenant {}, mode {mode:04o})",
                config.server_id, config.tenant
            ),
        )
    } else {
        Check::fail(NAME, format!("{shown}: {}", problems.join("; ")))
    };
    (check, Some(creds))
}

/// What is wrong inside a credentials file that parses.
fn content_problems(config: &Config, creds: &AgentCredentials) -> Vec<String> {
    let mut problems = Vec::new();
    let settings = &creds.settings;
    if settings.server != config.server_id || settings.tenant != config.tenant {
        problems.push(format!(
            "it was minted for server {} of tenant {}, not server {} of tenant {} (FLUE_SERVER_ID / FLUE_TENANT)",
            settings.server, settings.tenant, config.server_id, config.tenant
        ));
    }
    let user_key = nkeys::KeyPair::from_seed(&creds.user.seed).ok();
    if user_key.is_none() {
        problems.push("its user nkey seed is not valid".to_owned());
    }
    if flue_proto::seal::seed_key(&settings.xkey_seed).is_err() {
        problems.push("its sealing seed (xkey_seed) is not valid".to_owned());
    }
    if nkeys::KeyPair::from_public_key(&settings.gateway_key).is_err() {
        problems.push("its gateway signing key is not a valid public nkey".to_owned());
    }
    if flue_proto::seal::public_key(&settings.gateway_xkey).is_err() {
        problems.push("its gateway sealing key is not a valid public xkey".to_owned());
    }
    if creds.user.jwt.is_empty() {
        if !config.insecure_dev_broker {
            problems.push("it holds no broker user (minted by a gateway run with --insecure-dev-broker); register the server with a gateway in operator mode".to_owned());
        }
        return problems;
    }
    match UserJwtClaims::verified(&creds.user.jwt) {
        Err(e) => problems.push(format!("its user JWT: {e}")),
        Ok(claims) => {
            if user_key.is_some_and(|k| k.public_key() != claims.subject) {
                problems.push("its user JWT is not for its user nkey seed".to_owned());
            }
            problems.extend(not_this_servers_user(config, &claims));
            let now = time::OffsetDateTime::now_utc().unix_timestamp();
            if let Some(exp) = claims.expires_at.filter(|&exp| exp <= now) {
                problems.push(format!(
                    "its user JWT expired at {} (unix time {exp}): get new credentials with `flue server rotate-credentials {}`",
                    timestamp(exp),
                    config.server_id
                ));
            }
        }
    }
    problems
}

/// What is wrong when the user JWT `claims` is not this server's broker user (`None` when
/// it is): the broker must let it publish this server's answers, the right only this
/// server's agent user holds. Otherwise these are another server's credentials, misplaced
/// or taken: the agent would pull that server's requests, or nothing.
pub(super) fn not_this_servers_user(config: &Config, claims: &UserJwtClaims) -> Option<String> {
    if claims.is_agent_of(&config.tenant, &config.server_id) {
        return None;
    }
    let whose = match claims.agent_of() {
        Some((tenant, server)) => format!("the broker user of server {server} of tenant {tenant}"),
        None => "no agent's broker user".to_owned(),
    };
    Some(format!(
        "its user JWT (named {:?}) is {whose}, not this server's (server {} of tenant {}, FLUE_SERVER_ID / FLUE_TENANT): these are another server's credentials; put this server's own file here (`flue server rotate-credentials {} --creds FILE`), and rotate the other server's if this copy should not exist",
        claims.name, config.server_id, config.tenant, config.server_id
    ))
}

/// The state dir: writable by this user (one temporary file made and removed), or, when
/// it does not exist yet, a parent the agent can make it in; and short enough for the
/// data socket's path.
pub(super) fn state_dir(config: &Config) -> Check {
    const NAME: &str = "state dir";
    let dir = &config.state_dir;
    let shown = dir.display();
    let socket = config.data_socket_path();
    if socket.as_os_str().len() >= crate::data::server::SUN_PATH_LEN {
        return Check::fail(
            NAME,
            format!(
                "{shown}: the data socket's path ({}) is longer than a unix socket allows ({} bytes), so hooks would get no data space; use a shorter FLUE_STATE_DIR / --state-dir",
                socket.display(),
                crate::data::server::SUN_PATH_LEN - 1
            ),
        );
    }
    let probe = |at: &Path| {
        tempfile::Builder::new()
            .prefix(".flue-doctor-")
            .tempfile_in(at)
    };
    match std::fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => Check::fail(NAME, format!("{shown} is not a directory")),
        Ok(_) => match probe(dir) {
            Ok(_) => Check::pass(NAME, format!("{shown} is writable")),
            Err(e) => Check::fail(
                NAME,
                format!(
                    "{shown} is not writable by this user: {e}; run as the agent's user (root under the shipped unit), and under systemd keep StateDirectory= (it makes the dir writable under ProtectSystem=strict)"
                ),
            ),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = dir.parent().filter(|p| p.is_dir());
            match parent.map(|p| (p, probe(p))) {
                Some((_, Ok(_))) => Check::pass(
                    NAME,
                    format!("{shown} does not exist yet; the agent makes it at start"),
                ),
                _ => Check::fail(
                    NAME,
                    format!(
                        "{shown} does not exist and cannot be made here: `mkdir -p -m 700 {shown}` (under systemd, StateDirectory= makes it)"
                    ),
                ),
            }
        }
        Err(e) => Check::fail(NAME, format!("{shown}: {}", io_hint(&e))),
    }
}

/// Each hook dir: it exists, can be listed, and every regular file in it is executable (the
/// agent skips a hook without an execute bit, and the group then has no hook).
pub(super) fn hook_dirs(config: &Config) -> Vec<Check> {
    const NAME: &str = "hook dir";
    if config.hook_dirs.is_empty() {
        return vec![Check::pass(
            NAME,
            "none given: only the built-in `script` group runs",
        )];
    }
    config
        .hook_dirs
        .iter()
        .map(|dir| {
            let shown = dir.display();
            let entries = match std::fs::read_dir(dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Check::fail(
                        NAME,
                        format!(
                            "{shown} does not exist: install the hooks there (`mkdir -p {shown}`, one executable per group), or name the right dirs in FLUE_HOOK_DIRS / --hook-dir"
                        ),
                    );
                }
                Err(e) => return Check::fail(NAME, format!("{shown}: {}", io_hint(&e))),
            };
            let mut hooks = Vec::new();
            let mut not_executable = Vec::new();
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                match std::fs::metadata(entry.path()) {
                    Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => hooks.push(name),
                    Ok(m) if m.is_file() => not_executable.push(name),
                    Ok(_) => {}
                    Err(_) => not_executable.push(format!("{name} (a broken link)")),
                }
            }
            hooks.sort();
            not_executable.sort();
            if !not_executable.is_empty() {
                return Check::fail(
                    NAME,
                    format!(
                        "{shown}: not executable, so the agent skips them and their groups have no hook: {} (`chmod 755` each)",
                        not_executable.join(", ")
                    ),
                );
            }
            if hooks.is_empty() {
                return Check::pass(
                    NAME,
                    format!("{shown} holds no hook (only the built-in `script` group runs from it)"),
                );
            }
            Check::pass(NAME, format!("{shown}: hooks for {}", hooks.join(", ")))
        })
        .collect()
}

/// The small guard next to this executable. Without it hooks still run, under
/// `flue-agent hook-guard`; a guard that is there but not executable is a mistake.
pub(super) fn guard() -> Check {
    const NAME: &str = "hook guard";
    let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_owned))
    else {
        return Check::pass(
            NAME,
            "cannot tell where this executable lives; hooks start under `flue-agent hook-guard`",
        );
    };
    let path = dir.join(crate::guard::BINARY);
    let shown = path.display();
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => {
            Check::pass(NAME, path.display().to_string())
        }
        Ok(_) => Check::fail(
            NAME,
            format!(
                "{shown} is there but not an executable file: `chmod 755 {shown}` (or remove it)"
            ),
        ),
        Err(_) => Check::pass(
            NAME,
            format!(
                "{shown} is not installed: hooks start under `flue-agent hook-guard` (the same protection, about 1 ms slower per hook); install flue-hook-guard next to flue-agent to save it"
            ),
        ),
    }
}

/// An I/O error with what to do about it.
fn io_hint(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist".to_owned(),
        std::io::ErrorKind::PermissionDenied => {
            "cannot be read by this user: run as the agent's user (root under the shipped unit)"
                .to_owned()
        }
        _ => e.to_string(),
    }
}

/// `unix` seconds as RFC 3339, or the number when it is out of range.
fn timestamp(unix: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| unix.to_string())
}
