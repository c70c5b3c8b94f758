//! Stacks driven by the `flue` CLI against a real broker, gateway and agents: the
//! examples, ordering, updates, lifecycle, groups, failures, interruption and bad
//! templates.

mod examples;
mod failure;
mod lifecycle;
mod templates;
mod update;

use std::path::Path;

use flue_proto::{Deployment, ServerId, Stack, StackId};
use flue_tests::{Agent, Flue, WAIT, repo_root};

/// What one `flue` run printed and how it exited.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `flue --gateway GW ARGS…` to its end.
pub async fn flue(flue: &Flue, args: &[&str]) -> Run {
    let out = tokio::process::Command::new(flue_tests::bin("flue"))
        .arg("--gateway")
        .arg(flue.gateway.url())
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(WAIT * 3, out)
        .await
        .expect("flue finishes")
        .expect("run flue");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Path of an example template.
pub fn example(name: &str) -> String {
    repo_root()
        .join("examples")
        .join(name)
        .join("stack.yaml")
        .display()
        .to_string()
}

/// A broker, a gateway, and a registered server with a running agent for each name.
pub async fn cluster(servers: &[&str]) -> (Flue, Vec<Agent>) {
    let env = Flue::start().await;
    let mut agents = Vec::new();
    for s in servers {
        env.register(s).await;
        agents.push(env.agent(s, &[]).await);
    }
    (env, agents)
}

/// The stored stack.
pub async fn stack(env: &Flue, id: &str) -> Stack {
    env.client()
        .get_stack(&StackId::new(id).expect("id"))
        .await
        .expect("stack")
}

/// Every deployment the gateway holds for `server`, oldest first.
pub async fn deployments(env: &Flue, server: &str) -> Vec<Deployment> {
    env.client()
        .list_server_deployments(&ServerId::new(server).expect("id"))
        .await
        .expect("deployments")
}

/// `(resource_name, action)` of each deployment of `server` that an agent ran, oldest first.
pub async fn ran(env: &Flue, server: &str) -> Vec<(String, String)> {
    deployments(env, server)
        .await
        .into_iter()
        .filter(|d| d.deploy_status_code.is_some())
        .map(|d| (d.resource_name.unwrap_or_default(), d.action.to_string()))
        .collect()
}

/// Lines of a file, empty when it does not exist.
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|t| t.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}
