//! The environment variables the agent adds for every hook it runs, script or external:
//! where the data socket is, which deployment runs, and how to find `flue-agent` itself.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use flue_proto::DeploymentRequest;
use tokio::process::Command;

use crate::data::SOCKET_ENV;

/// The running deployment's stack id (empty when it has none).
pub const STACK_ENV: &str = "FLUE_STACK_ID";
/// The server the hook runs on.
pub const SERVER_ENV: &str = "FLUE_SERVER_ID";
/// The running deployment's id.
pub const DEPLOYMENT_ENV: &str = "FLUE_DEPLOYMENT_ID";
/// Path of the running `flue-agent` executable.
pub const AGENT_ENV: &str = "FLUE_AGENT";
/// Used as the search path when the agent itself has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Variables set on a hook's process on top of the agent's own environment; they win
/// over a same-named input of the `script` group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookEnv {
    vars: Vec<(&'static str, OsString)>,
}

impl HookEnv {
    /// The variables for `req`'s hook, which reaches the data space at `socket`.
    ///
    /// `PATH` gets the agent executable's directory *appended*, so that `flue-agent data`
    /// works in a hook even when the agent is not installed on the search path, while
    /// anything the search path already provides still comes first.
    pub fn for_request(req: &DeploymentRequest, socket: &Path) -> Self {
        let stack = req.stack_id.as_ref().map_or("", |s| s.as_str());
        let mut vars = vec![
            (SOCKET_ENV, socket.as_os_str().to_owned()),
            (STACK_ENV, stack.into()),
            (SERVER_ENV, req.server.as_str().into()),
            (DEPLOYMENT_ENV, req.deployment_id.as_str().into()),
        ];
        match std::env::current_exe() {
            Ok(exe) => {
                if let Some(path) = exe
                    .parent()
                    .and_then(|dir| path_with(std::env::var_os("PATH"), dir))
                {
                    vars.push(("PATH", path));
                }
                vars.push((AGENT_ENV, exe.into_os_string()));
            }
            Err(e) => tracing::warn!(error = %e, "cannot tell where the agent executable is"),
        }
        Self { vars }
    }

    /// Sets the variables on `cmd`, and removes the agent's own broker URL, which may hold
    /// its credentials: a hook talks to the broker only through the agent.
    pub fn apply(&self, cmd: &mut Command) {
        cmd.env_remove(NATS_URL_ENV);
        for (name, value) in &self.vars {
            cmd.env(name, value);
        }
    }

    /// The variables, in the order they are set.
    #[cfg(test)]
    pub(crate) fn vars(&self) -> &[(&'static str, OsString)] {
        &self.vars
    }
}

/// The agent's broker URL variable (its `--nats-url`), never handed to hooks.
const NATS_URL_ENV: &str = "FLUE_NATS_URL";
/// `path` (or a default when unset) with `dir` appended, unless it is already there;
/// `None` when `dir` cannot be part of a search path (it holds a `:`).
fn path_with(path: Option<OsString>, dir: &Path) -> Option<OsString> {
    let path = path.unwrap_or_else(|| DEFAULT_PATH.into());
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    if dirs.iter().any(|d| d == dir) {
        return Some(path);
    }
    dirs.push(dir.to_owned());
    std::env::join_paths(dirs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::tests::request;
    use serde_json::json;

    #[test]
    fn the_agent_directory_is_appended_to_the_search_path() {
        let dir = Path::new("/opt/flue/bin");
        assert_eq!(
            path_with(Some("/usr/bin:/bin".into()), dir),
            Some("/usr/bin:/bin:/opt/flue/bin".into())
        );
        assert_eq!(
            path_with(Some("/opt/flue/bin:/bin".into()), dir),
            Some("/opt/flue/bin:/bin".into()),
            "already there: unchanged"
        );
        assert_eq!(
            path_with(None, dir),
            Some(format!("{DEFAULT_PATH}:/opt/flue/bin").into())
        );
        assert_eq!(path_with(None, Path::new("/a:b")), None);
    }

    #[test]
    fn the_hook_learns_its_deployment_stack_and_socket() {
        let mut req = request(json!({"group": "script"}), json!({}));
        let env = HookEnv::for_request(&req, Path::new("/state/data.sock"));
        let get = |env: &HookEnv, name: &str| {
            env.vars()
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(get(&env, SOCKET_ENV).as_deref(), Some("/state/data.sock"));
        assert_eq!(get(&env, STACK_ENV).as_deref(), Some(""));
        assert_eq!(get(&env, SERVER_ENV).as_deref(), Some("web1"));
        assert_eq!(get(&env, DEPLOYMENT_ENV).as_deref(), Some("d1"));
        let exe = std::env::current_exe().expect("exe");
        assert_eq!(get(&env, AGENT_ENV), Some(exe.display().to_string()));
        let dir = exe.parent().expect("dir").display().to_string();
        let path = get(&env, "PATH").expect("PATH");
        assert!(path.split(':').any(|d| d == dir), "{path}");

        req.stack_id = Some("st1".parse().expect("id"));
        let env = HookEnv::for_request(&req, Path::new("/s"));
        assert_eq!(get(&env, STACK_ENV).as_deref(), Some("st1"));
    }

    #[test]
    fn the_agent_broker_url_is_not_handed_to_hooks() {
        let req = request(json!({"group": "script"}), json!({}));
        let env = HookEnv::for_request(&req, Path::new("/s"));
        let mut cmd = Command::new("true");
        cmd.env(NATS_URL_ENV, "nats://agent:secret@h:1");
        env.apply(&mut cmd);
        let removed = cmd
            .as_std()
            .get_envs()
            .find(|(name, _)| *name == NATS_URL_ENV)
            .map(|(_, value)| value);
        assert_eq!(removed, Some(None), "FLUE_NATS_URL is removed");
    }
}
